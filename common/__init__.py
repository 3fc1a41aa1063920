"""turborl's shared plumbing: envs, the path switch, logging. Algorithms live in algos/, one file each."""

from common.envs import final_observations, finished_episodes, make_env
from common.logger import RunLogger
from common.run import (
    HostLink,
    StartupClock,
    UserError,
    accelerate,
    check,
    cli,
    pick_device,
    resolve_cudagraphs,
    seed_everything,
)

__all__ = [
    "HostLink",
    "RunLogger",
    "StartupClock",
    "UserError",
    "accelerate",
    "check",
    "cli",
    "final_observations",
    "finished_episodes",
    "make_env",
    "pick_device",
    "resolve_cudagraphs",
    "seed_everything",
]
