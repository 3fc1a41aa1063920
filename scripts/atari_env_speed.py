"""Env-only throughput of ale-py's C++ Atari vector env, with the settings of algos/ppo_atari.py and
algos/pqn_atari.py (common/atari.py) and random actions: the ceiling of the training loop at each number of envs.

    python scripts/atari_env_speed.py --num-envs 8 16 32 64 128 --out results/experiments/atari-env/h200.json
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from scripts.benchmark import save_record  # noqa: E402
from turborl.atari import make_envs  # noqa: E402


@dataclass
class Args:
    env_id: str = "Breakout-v5"
    """Atari game (envpool's naming)"""
    num_envs: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128])
    """vector sizes to measure"""
    seconds: float = 5.0
    """timed seconds per size (after 100 warm-up steps)"""
    out: str | None = None
    """JSON output"""


def env_steps_per_second(env_id: str, num_envs: int, seconds: float) -> float:
    envs = make_envs(env_id, num_envs, threads=min(num_envs, os.cpu_count() or 1))  # as the scripts thread them
    n_actions = int(envs.single_action_space.n)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, n_actions, (1024, num_envs))
    envs.reset(seed=1)
    for step in range(100):
        envs.step(actions[step % 1024])
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.send(actions[steps % 1024])
        envs.recv()
        steps += 1
    rate = steps * num_envs / (time.perf_counter() - start)
    envs.close()
    return rate


def main(args: Args) -> None:
    rows = []
    for num_envs in args.num_envs:
        rate = env_steps_per_second(args.env_id, num_envs, args.seconds)
        rows.append({"num_envs": num_envs, "threads": min(num_envs, os.cpu_count() or 1), "env_steps_per_second": rate})
        print(f"{args.env_id} {num_envs:4d} envs: {rate:10,.0f} env steps/s", flush=True)
    save_record(args.out, {"env_id": args.env_id, "library": "ale-py AtariVectorEnv", "rows": rows})


if __name__ == "__main__":
    import tyro

    main(tyro.cli(Args, description=__doc__.split("\n\n")[0]))
