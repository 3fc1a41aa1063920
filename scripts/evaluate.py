"""Evaluate a trained policy: N episodes with its deterministic actions, mean ± std return, a JSON file.

    python scripts/evaluate.py runs/CartPole-v1__ppo__1__1700000000/ppo.pt2 --episodes 10
    python scripts/evaluate.py runs/CartPole-v1__ppo__1__1700000000/ppo.pt --capture-video

A checkpoint (`.pt`) is evaluated through the policy that `--save-model` exported next to it (`.pt2`, a
torch.export program: observation batch in, action batch out), so any algorithm's run evaluates the same way.
A recurrent policy (algos/ppo_lstm.py, ppo_lstm_device_envs.py) also takes and returns its state, which is carried
through each episode from zeros; a run trained with --mask-velocity is evaluated on the same masked observations.
An Atari run (algos/ppo_atari.py, pqn_atari.py) plays whole games, across lost lives, on its training frames.
"""

from __future__ import annotations

import glob
import json
import os
import re
import zipfile
from dataclasses import dataclass
from typing import Annotated

import gymnasium as gym
import numpy as np
import torch
import tyro

from turborl.atari import ale_rom
from turborl.cli import UserError, check, cli
from turborl.envs import make_one, missing_extra


@dataclass
class Args:
    path: Annotated[tyro.conf.Positional[str], tyro.conf.arg(metavar="RUN")]
    """the exported policy (.pt2), the checkpoint (.pt) it was exported next to, or their run folder"""
    env_id: str | None = None
    """gymnasium id (none: the one in the run folder's args.json)"""
    episodes: int = 10
    """episodes to run"""
    seed: int = 10_000
    """seed of the first episode (episode i uses seed + i)"""
    capture_video: bool = False
    """record the episodes with gymnasium's RecordVideo into <run folder>/eval-videos"""
    out: str | None = None
    """JSON output (none: evaluation.json next to the policy; evaluation-<env-id>.json for an env other than
    the one it trained on)"""


def main(args: Args) -> dict:
    check(args.episodes >= 1, f"--episodes must be >= 1 (got {args.episodes})")
    path = policy_path(args.path)
    folder = os.path.dirname(os.path.abspath(path))
    config = os.path.join(folder, "args.json")
    trained_on, mask_velocity = None, False
    if os.path.exists(config):
        with open(config) as f:
            saved_args = json.load(f)
        trained_on, mask_velocity = saved_args.get("env_id"), saved_args.get("mask_velocity", False)
    env_id = args.env_id or trained_on
    check(env_id is not None, f"no args.json next to {path} to say its env: pass --env-id")
    corrupt = f"cannot load {path}: not an exported policy (truncated?); re-export it by training with --save-model"
    check(zipfile.is_zipfile(path), corrupt)
    try:
        policy = EpisodePolicy(torch.export.load(path))
    except Exception:  # a foreign or damaged archive
        raise UserError(corrupt) from None
    if env_id not in gym.registry and re.fullmatch(r"[A-Z][A-Za-z0-9]*-v5", env_id) and ale_rom(env_id):
        check(not args.capture_video, "--capture-video: Atari runs are evaluated without video here")
        return report(path, env_id, *run_games(policy, env_id, args, trained_on), args, trained_on)
    try:
        env = make_one(gym.spec(env_id), os.path.join(folder, "eval-videos") if args.capture_video else None,
                       episode_trigger=lambda _: True)  # as training makes its envs
    except gym.error.DependencyNotInstalled as err:
        raise missing_extra(env_id, err) from None
    except gym.error.Error as err:
        raise UserError(f"cannot make {env_id!r} ({err}); pass a registered --env-id") from None
    if mask_velocity:
        env = without_velocities(env, env_id)
    check_policy_fits(policy, env, path, env_id, trained_on)
    try:
        returns, lengths = run_episodes(policy, env, args)
    except gym.error.DependencyNotInstalled as err:  # rendering for --capture-video
        raise missing_extra(env_id, err) from None
    env.close()
    return report(path, env_id, returns, lengths, args, trained_on)


def report(path: str, env_id: str, returns: list[float], lengths: list[int], args: Args,
           trained_on: str | None) -> dict:
    result = {"policy": path, "env_id": env_id, "episodes": args.episodes, "mean_return": float(np.mean(returns)),
              "std_return": float(np.std(returns)), "returns": returns, "lengths": lengths}
    name = ("evaluation.json" if env_id == (trained_on or env_id)  # another env's keeps the run's own evaluation
            else f"evaluation-{env_id.replace('/', '-')}.json")
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(path)), name)
    try:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
    except OSError as err:
        raise UserError(f"cannot write {out} ({err.strerror}); pass a writable --out") from None
    print(f"{env_id}: return {result['mean_return']:.1f} ± {result['std_return']:.1f} over {args.episodes} "
          f"episodes ({out})")
    return result


def policy_path(path: str) -> str:
    """The exported policy that `path` names: itself, the `.pt2` beside a checkpoint, or the one in a folder."""
    if os.path.isdir(path):
        found = sorted(name for name in os.listdir(path) if name.endswith(".pt2"))
        if not found:
            runs = sorted(d for d in glob.glob(os.path.join(path, "*", "")) if glob.glob(os.path.join(d, "*.pt2")))
            check(not runs, f"{path} is a folder of runs: pass the folder of one saved run, e.g. "
                            f"{os.path.normpath(runs[0]) if runs else ''}")
            saved_args = os.path.join(path, "args.json")
            check(os.path.exists(saved_args), f"{path} holds no exported policy and is not a run folder: pass a run's "
                                              "folder, its .pt2 or its checkpoint")
            parts = os.path.basename(os.path.normpath(path)).split("__")  # {env}__{script}__{seed}__{time}
            one_seed = json.load(open(saved_args)).get("num_seeds", 1) == 1  # else --seed would start other seeds
            again = (f"python algos/{parts[1]}.py --env-id {parts[0]} --seed {parts[2]} --save-model (and the run's "
                     f"other flags, in its args.json)" if len(parts) == 4 and one_seed else
                     f"--save-model (and the run's flags, in {saved_args})")
            raise UserError(f"{path} holds 0 exported policies: the run was not saved; train it again with {again}")
        check(len(found) == 1, f"{path} holds {len(found)} exported policies ({', '.join(found)}): pass the .pt2 "
                               "to evaluate")
        return os.path.join(path, found[0])
    path = path[:-3] + ".pt2" if path.endswith(".pt") else path
    check(os.path.exists(path), f"no exported policy at {path}: train with --save-model, which writes it")
    return path


class EpisodePolicy:
    """An exported policy called one observation at a time. A recurrent one takes and returns its state after
    the observation and the action; that state is carried between calls and zeroed by `reset`."""

    def __init__(self, program):
        self.policy = program.module()
        placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
        inputs = [placeholders[name] for name in program.graph_signature.user_inputs]
        self.state_sizes = [int(node.meta["val"].shape[1]) for node in inputs[1:]]
        self.reset()

    def reset(self) -> None:
        self.state = [torch.zeros(1, size) for size in self.state_sizes]

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.state_sizes:
            return self.policy(obs)
        action, *self.state = self.policy(obs, *self.state)
        return action


def without_velocities(env: gym.Env, env_id: str) -> gym.Env:
    """The env's observations without their velocities, as the device envs' --mask-velocity gives them."""
    from turborl.torch_envs import TORCH_ENVS

    check(env_id in TORCH_ENVS, f"--mask-velocity is defined for {', '.join(TORCH_ENVS)}, not {env_id}")
    space = env.observation_space
    keep = [i for i in range(space.shape[0]) if i not in TORCH_ENVS[env_id].velocities]
    masked = gym.spaces.Box(space.low[keep], space.high[keep], dtype=space.dtype)
    return gym.wrappers.TransformObservation(env, lambda obs: obs[keep], masked)


def check_policy_fits(policy, env, path: str, env_id: str, trained_on: str | None) -> None:
    """One action on a sampled observation: an env whose observations or actions the policy does not fit is
    an input error, not a failure halfway through an episode."""
    obs_space, action_space = env.observation_space, env.action_space
    hint = f"; it was trained on {trained_on}: pass --env-id {trained_on}" if trained_on else ""
    try:
        with torch.no_grad():
            action = policy(torch.as_tensor(obs_space.sample(), dtype=torch.float32).unsqueeze(0))[0]
        policy.reset()
    except Exception:  # torch.export's shape guards
        raise UserError(f"{path} does not take {env_id}'s observations (shape {obs_space.shape}){hint}") from None
    discrete = isinstance(action_space, gym.spaces.Discrete)
    fits = (action.dim() == 0 and not action.is_floating_point() if discrete
            else tuple(action.shape) == action_space.shape and action.is_floating_point())
    check(fits, f"{path} does not give {env_id}'s actions ({action_space}){hint}")


def run_episodes(policy, env, args: Args) -> tuple[list[float], list[int]]:
    discrete = isinstance(env.action_space, gym.spaces.Discrete)
    returns, lengths = [], []
    for episode in range(args.episodes):
        obs, _ = env.reset(seed=args.seed + episode)
        policy.reset()
        done, total, length = False, 0.0, 0
        while not done:
            with torch.no_grad():
                action = policy(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0))[0].numpy()
            obs, reward, terminated, truncated, _ = env.step(int(action) if discrete else action)
            total, length, done = total + float(reward), length + 1, terminated or truncated
        returns.append(total)
        lengths.append(length)
    return returns, lengths


def run_games(policy, env_id: str, args: Args, trained_on: str | None = None) -> tuple[list[float], list[int]]:
    """Whole Atari games (a game goes on across lost lives) on the frames the policy trained on (common/atari.py),
    with its greedy actions; each game's score and length in env steps. The games play side by side, game i in
    env i with seed + i (as one game at a time would seed it): a greedy policy that stops pressing FIRE plays on
    to the 108,000-frame limit (27,000 steps), and such games one after another take minutes each."""
    from turborl.atari import FRAMES, Games, make_envs

    envs = make_envs(env_id, args.episodes, threads=min(args.episodes, os.cpu_count() or 1))
    hint = f"; it was trained on {trained_on}: pass --env-id {trained_on}" if trained_on else ""
    try:  # one action on blank frames: a policy of another kind of env is an input error, not a crash mid-game
        with torch.no_grad():
            action = policy(torch.zeros(1, *FRAMES))
    except Exception:  # torch.export's shape guards
        envs.close()
        raise UserError(f"{args.path} does not take Atari's stacked frames {FRAMES}{hint}") from None
    n_actions = int(envs.single_action_space.n)
    if trained_on and trained_on != env_id and ale_rom(trained_on):  # one action cannot show another game's set
        trained = make_envs(trained_on, 1, threads=1)
        n_trained = int(trained.single_action_space.n)
        trained.close()
        if n_trained != n_actions:
            envs.close()
            raise UserError(f"{args.path} chooses among {trained_on}'s {n_trained} actions, not {env_id}'s "
                            f"{n_actions}{hint}")
    fits = action.dim() == 1 and not action.is_floating_point() and 0 <= int(action[0]) < n_actions
    check(fits, f"{args.path} does not give {env_id}'s actions ({n_actions}){hint}")
    frames, info = envs.reset(seed=args.seed)
    games, first_games = Games(args.episodes, info["lives"]), {}  # env -> (score, length) of its first game
    while len(first_games) < args.episodes:
        with torch.no_grad():
            actions = policy(torch.as_tensor(frames, dtype=torch.float32))
        frames, reward, terminated, truncated, info = envs.step(actions.numpy())
        finished = games.after_step(reward, terminated | truncated, info["lives"])
        for env, game in zip(np.flatnonzero(games.length == 0), finished, strict=True):  # a game just over: 0 steps
            first_games.setdefault(int(env), game)  # an env's later games would favour the short ones
    envs.close()
    returns, lengths = zip(*(first_games[env] for env in range(args.episodes)), strict=True)
    return list(returns), list(lengths)


if __name__ == "__main__":
    cli(main, Args)
