"""Env-only throughput of ale-py's C++ Atari vector env, with the settings of algos/ppo_atari.py and
algos/pqn_atari.py (common/atari.py) and random actions: the ceiling of the training loop at each number of envs.
`--libraries ale-py envpool` measures envpool beside it, made as CleanRL's ppo_atari_envpool.py makes it (envpool
is not one of turborl's packages: `pip install envpool` for this comparison alone).

    python scripts/atari_env_speed.py --num-envs 8 16 32 64 128 --out results/experiments/atari-env/h200.json
    python scripts/atari_env_speed.py --libraries ale-py envpool --num-envs 8 64   # against CleanRL's env
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from scripts.benchmark import save_record  # noqa: E402
from turborl.atari import make_envs  # noqa: E402
from turborl.errors import UserError, run_tool  # noqa: E402


@dataclass
class Args:
    env_id: str = "Breakout-v5"
    """Atari game (envpool's naming)"""
    num_envs: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128])
    """vector sizes to measure"""
    libraries: list[str] = field(default_factory=lambda: ["ale-py"])
    """`ale-py` (the scripts' env), `envpool` (CleanRL's), or both, one after the other at each size"""
    seconds: float = 5.0
    """timed seconds per size (after 100 warm-up steps)"""
    out: str | None = None
    """JSON output"""


def make(library: str, env_id: str, num_envs: int, threads: int):
    if library == "ale-py":
        return make_envs(env_id, num_envs, threads)
    import envpool

    # CleanRL's ppo_atari_envpool.py: envpool's Atari defaults (the ones common/atari.py gives ale-py) with
    # episodic_life and reward_clip; one batch of all envs, stepped as ale-py's is.
    return envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, batch_size=num_envs, num_threads=threads,
                        episodic_life=True, reward_clip=True, seed=1)


def env_steps_per_second(library: str, env_id: str, num_envs: int, seconds: float) -> float:
    envs = make(library, env_id, num_envs, threads=min(num_envs, os.cpu_count() or 1))  # as the scripts thread them
    n_actions = int(envs.single_action_space.n)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, n_actions, (1024, num_envs))
    if library == "ale-py":
        envs.reset(seed=1)
    else:
        envs.reset()  # envpool's seed was given to make
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
    unknown = sorted(set(args.libraries) - {"ale-py", "envpool"})
    if unknown:
        raise UserError(f"--libraries {' '.join(unknown)}: choose ale-py, envpool or both")
    if "envpool" in args.libraries and importlib.util.find_spec("envpool") is None:
        raise UserError("envpool is not installed: pip install envpool (measured here only, not a turborl "
                         "package), or measure --libraries ale-py alone")
    rows = []
    for num_envs in args.num_envs:
        for library in args.libraries:
            rate = env_steps_per_second(library, args.env_id, num_envs, args.seconds)
            rows.append({"library": library, "version": importlib.metadata.version(library), "num_envs": num_envs,
                         "threads": min(num_envs, os.cpu_count() or 1), "env_steps_per_second": rate})
            print(f"{args.env_id} {library:8s} {num_envs:4d} envs: {rate:10,.0f} env steps/s", flush=True)
    save_record(args.out, {"env_id": args.env_id, "libraries": args.libraries, "rows": rows})


if __name__ == "__main__":
    from turborl.cli import parse

    run_tool(main, parse(Args, description=__doc__.split("\n\n")[0]))
