"""turborl's shared plumbing: envs, the path switch, logging. Algorithms live in algos/, one file each."""

from common.envs import final_observations, finished_episodes, make_env
from common.logger import RunLogger
from common.run import (
    HostLink,
    RunArgs,
    StartupClock,
    UserError,
    accelerate,
    check,
    cli,
    floor_us,
    pick_device,
    resolve_cudagraphs,
    save_checkpoint,
    seed_everything,
)

__all__ = [
    "HostLink",
    "RunArgs",
    "RunLogger",
    "StartupClock",
    "UserError",
    "accelerate",
    "check",
    "cli",
    "final_observations",
    "finished_episodes",
    "floor_us",
    "make_env",
    "pick_device",
    "resolve_cudagraphs",
    "save_checkpoint",
    "seed_everything",
]
