"""Where the host's time goes in one step of an off-policy loop on a gymnasium env (algos/dqn.py, td3.py, sac.py),
with the device's work left out: microseconds per env step of each layer, measured alone, one after another.

    python scripts/host_step_speed.py --env-id CartPole-v1 --out results/experiments/host-step/cpu.json

Layers: the env as gym.make builds it (TimeLimit, OrderEnforcing, the checker), with resets by hand; gymnasium's
SyncVectorEnv around one of them (same-step autoreset), alone and wrapped in its RecordEpisodeStatistics; the
vector env the scripts use (common/envs.py's make_env: EpisodeStatsSyncVectorEnv, the same answers); and the
whole host side of a step of the loop (make_env's env, the final observations, EnvLink.send, the episodes
logged, the progress line).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from algos.dqn import Args as DQNArgs  # noqa: E402
from scripts.benchmark import save_record  # noqa: E402
from turborl.cli import parse  # noqa: E402
from turborl.envs import final_observations, make_env, track_episodes  # noqa: E402
from turborl.link import EnvLink, EnvStep  # noqa: E402
from turborl.logger import RunLogger  # noqa: E402


@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """gymnasium id (one env, as algos/dqn.py's default)"""
    steps: int = 100_000
    """timed steps per layer (after 1,000 untimed)"""
    repeats: int = 3
    """times each layer is timed; the fastest counts (the others met other load on the machine)"""
    out: str | None = None
    """JSON output"""


def timed(step, actions: np.ndarray, steps: int, repeats: int) -> float:
    """Microseconds per call of `step(action)`, the fastest of `repeats` runs."""
    for action in actions[:1000]:
        step(action)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(steps):
            step(actions[i % len(actions)])
        best = min(best, (time.perf_counter() - start) / steps * 1e6)
    return best


def main(args: Args) -> dict:
    rng = np.random.default_rng(0)
    n_actions = int(gym.make(args.env_id).action_space.n)
    actions = rng.integers(0, n_actions, (4096, 1))
    rows = {}

    env = gym.make(args.env_id)
    env.reset(seed=1)

    def env_step(action):
        _, _, terminated, truncated, _ = env.step(int(action[0]))
        if terminated or truncated:
            env.reset()

    rows["gym.make env, resets by hand"] = timed(env_step, actions, args.steps, args.repeats)
    def gymnasium_vector():
        return gym.vector.SyncVectorEnv([lambda: gym.make(args.env_id)], copy=False,
                                        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)

    vector = gymnasium_vector()
    vector.reset(seed=1)
    rows["gymnasium SyncVectorEnv (1 env)"] = timed(vector.step, actions, args.steps, args.repeats)
    vector = gym.wrappers.vector.RecordEpisodeStatistics(gymnasium_vector())
    vector.reset(seed=1)
    rows["gymnasium SyncVectorEnv + RecordEpisodeStatistics"] = timed(vector.step, actions, args.steps, args.repeats)
    envs = make_env(args.env_id, 1, seed=1)
    envs.reset(seed=1)
    rows["make_env's EpisodeStatsSyncVectorEnv"] = timed(envs.step, actions, args.steps, args.repeats)

    obs_dim = envs.single_observation_space.shape[0]
    link = EnvLink(1, obs_dim, (), torch.long, torch.device("cpu"), envs_on_device=False)
    link.reset(envs.reset(seed=1)[0])
    episodes = track_episodes("gymnasium", 1, torch.device("cpu"))
    with tempfile.TemporaryDirectory() as runs:
        logger = RunLogger(DQNArgs(env_id=args.env_id, runs_dir=runs), "host_step_speed", 10**12,
                           torch.device("cpu"), run_root=runs)
        global_step = 0

        def loop_step(action):
            nonlocal global_step
            next_obs, reward, terminated, truncated, infos = envs.step(action)
            global_step += 1
            link.send(EnvStep(reward, terminated, truncated, final_observations(next_obs, infos), next_obs))
            logger.log_episodes(global_step, episodes.after_step(infos))
            logger.progress(global_step)

        rows["the loop's host side (make_env's env, link, episodes, progress)"] = timed(
            loop_step, actions, args.steps, args.repeats)
        logger.close()
    for name, us in rows.items():
        print(f"{us:8.2f} us  {name}")
    save_record(args.out, {"env_id": args.env_id, "us_per_step": rows, "torch_threads": torch.get_num_threads()})
    return rows


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(parse(Args, description=__doc__.split("\n\n")[0]))
