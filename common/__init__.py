"""turborl's shared plumbing: envs, the path switch, logging. Algorithms live in algos/, one file each."""

from common.envs import action_space, final_observations, finished_episodes, is_cheap, make_env
from common.logger import RunLogger, SilentLogger
from common.run import (
    DeviceLink,
    HostLink,
    RunArgs,
    StartupClock,
    UserError,
    accelerate,
    check,
    cli,
    compiled,
    floor_us,
    init_distributed,
    pick_device,
    resolve_cudagraphs,
    save_checkpoint,
    seed_everything,
)

__all__ = [
    "DeviceLink",
    "HostLink",
    "RunArgs",
    "RunLogger",
    "SilentLogger",
    "StartupClock",
    "UserError",
    "accelerate",
    "action_space",
    "compiled",
    "check",
    "cli",
    "final_observations",
    "finished_episodes",
    "floor_us",
    "init_distributed",
    "is_cheap",
    "make_env",
    "pick_device",
    "resolve_cudagraphs",
    "save_checkpoint",
    "seed_everything",
]
