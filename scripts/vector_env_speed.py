"""Env-only throughput of the three ways algos/td3.py, sac.py and ppo.py can step their gymnasium envs, with random
actions: one after another in the loop's thread (the default), in subprocesses (--async-envs) and in threads of
the run's process (--env-threads 0: one per env, at most one per CPU core). Each is make_env's vector env, as the
scripts build it; the rate bounds the host side of a --num-seeds run at that number of envs. `gymnasium-async`
(not a default mode) is gymnasium's AsyncVectorEnv, which --async-envs used before common/subprocess_envs.py.
Beside each rate, the CPU time of the run's own process per vector step: the part it pays one env after another.

    python scripts/vector_env_speed.py --num-envs 1 5 10 20 --out results/experiments/vector-envs/h200.json
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from functools import partial

import gymnasium as gym
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from scripts.benchmark import save_record  # noqa: E402
from turborl.envs import make_env, make_one  # noqa: E402
from turborl.errors import UserError, run_tool  # noqa: E402

MODES = {"sync": {}, "async": {"asynchronous": True}, "threads": {"threads": 0}}  # make_env's arguments
BASELINE = "gymnasium-async"


@dataclass
class Args:
    env_ids: list[str] = field(default_factory=lambda: ["Hopper-v4", "HalfCheetah-v4", "Walker2d-v4", "Ant-v4"])
    """gymnasium ids (the parity suite's MuJoCo v4 tasks)"""
    num_envs: list[int] = field(default_factory=lambda: [1, 5, 10, 20])
    """vector sizes to measure (a --num-seeds N run with one env per seed steps N)"""
    modes: list[str] = field(default_factory=lambda: list(MODES))
    """`sync`, `async`, `threads` (or `gymnasium-async`): measured one after the other at each size"""
    seconds: float = 3.0
    """timed seconds per measurement (after 50 warm-up steps)"""
    out: str | None = None
    """JSON output"""


def build(env_id: str, num_envs: int, mode: str):
    if mode != BASELINE:
        return make_env(env_id, num_envs, seed=1, **MODES[mode])
    envs = gym.vector.AsyncVectorEnv([partial(make_one, gym.spec(env_id))] * num_envs,
                                     autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, copy=False)
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


def env_steps_per_second(env_id: str, num_envs: int, mode: str, seconds: float) -> tuple[float, float]:
    """All envs' steps per second, and the run's own CPU microseconds per vector step."""
    envs = build(env_id, num_envs, mode)
    actions = np.random.default_rng(0).uniform(envs.action_space.low, envs.action_space.high,
                                               (256, *envs.action_space.shape)).astype(envs.action_space.dtype)
    envs.reset(seed=1)
    for step in range(50):
        envs.step(actions[step % 256])
    steps, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        envs.step(actions[steps % 256])
        steps += 1
    rate, cpu_us = steps * num_envs / (time.perf_counter() - start), 1e6 * (time.process_time() - cpu) / steps
    envs.close()
    return rate, cpu_us


def main(args: Args) -> None:
    unknown = sorted(set(args.modes) - {*MODES, BASELINE})
    if unknown:
        raise UserError(f"--modes {' '.join(unknown)}: choose from {', '.join([*MODES, BASELINE])}")
    warnings.filterwarnings("ignore", message=".*is out of date.*")  # the v4 tasks are CleanRL's: measured as such
    rows = []
    for env_id in args.env_ids:
        for num_envs in args.num_envs:
            for mode in args.modes:
                rate, cpu_us = env_steps_per_second(env_id, num_envs, mode, args.seconds)
                rows.append({"env_id": env_id, "num_envs": num_envs, "mode": mode, "env_steps_per_second": rate,
                             "run_cpu_us_per_step": cpu_us})
                print(f"{env_id:15s} {num_envs:3d} envs {mode:15s} {rate:9,.0f} env steps/s, the run's CPU "
                      f"{cpu_us:,.0f} us a step", flush=True)
    print(f"\n| env | envs | {' | '.join(args.modes)} |\n|---|---:|{'---:|' * len(args.modes)}")
    for env_id in args.env_ids:
        for num_envs in args.num_envs:
            rates = {row["mode"]: row["env_steps_per_second"] for row in rows
                     if row["env_id"] == env_id and row["num_envs"] == num_envs}
            print(f"| {env_id} | {num_envs} | {' | '.join(f'{rates[mode]:,.0f}' for mode in args.modes)} |")
    save_record(args.out, {"seconds": args.seconds, "rows": rows})


if __name__ == "__main__":
    from turborl.cli import parse

    run_tool(main, parse(Args, description=__doc__.split("\n\n")[0]))
