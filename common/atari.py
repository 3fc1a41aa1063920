"""Atari on ale-py's C++ vector env, shared by algos/ppo_atari.py and algos/pqn_atari.py: CleanRL's envpool setup
in two groups of games that take turns with the policy, the pinned link that carries each step's frames to the
device, and whole games (across lost lives) for the log."""

from __future__ import annotations

import re

import numpy as np
import torch

from .envs import env_threads
from .errors import UserError, check

FRAMES = (4, 84, 84)  # the stacked observation: 4 grayscale 84x84 frames


def check_atari_args(args) -> None:
    """The flags every Atari script shares: --num-envs (two groups), and what Atari cannot do."""
    check(args.env_backend == "gymnasium", "Atari runs on ale-py's C++ vector env (CPU); leave out --env-backend")
    check(not args.capture_video, "--capture-video is not supported for Atari here; evaluate with ale-py instead")
    check(args.num_envs > 0 and args.num_envs % 2 == 0,
          f"--num-envs must be even and positive: two groups of games take turns (got {args.num_envs})")


def ale_rom(env_id: str) -> str | None:
    """ale-py's ROM name for an envpool-style id (Breakout-v5 -> breakout, MsPacman-v5 -> ms_pacman); None for an
    id that names no ROM of ale-py."""
    try:
        from ale_py import roms
    except ImportError:
        raise UserError('Atari needs ale-py: pip install -e ".[atari]"') from None
    match = re.fullmatch(r"([A-Z][A-Za-z0-9]*)-v5", env_id)
    game = re.sub(r"(?<!^)(?=[A-Z])", "_", match.group(1)).lower() if match else None
    return game if game in roms.get_all_rom_ids() else None


def ale_game(env_id: str) -> str:
    """`ale_rom`, or a one-line error for an id that is not an Atari game."""
    game = ale_rom(env_id)
    check(game is not None, f"{env_id!r} is not an Atari game of ale-py: pass e.g. Breakout-v5, Pong-v5 or "
                            "MsPacman-v5 (algos/ppo.py and algos/pqn.py run gymnasium's other envs)")
    return game


def make_envs(env_id: str, num_envs: int, threads: int):
    """`num_envs` games of ale-py's C++ vector env, stepped by `threads` C++ threads: envpool's Atari defaults
    as CleanRL uses them."""
    game = ale_game(env_id)
    from ale_py.vector_env import AtariVectorEnv

    # life_loss_info: an episode ends at a lost life and the game goes on (envpool's episodic_life; ale-py's
    # episodic_life would restart the game). Unclipped rewards: the score is logged, the sign is learned.
    return AtariVectorEnv(game, num_envs, num_threads=threads, frameskip=4, stack_num=4,
                          img_height=84, img_width=84, grayscale=True, maxpool=True, noop_max=30,
                          repeat_action_probability=0.0, max_num_frames_per_episode=108_000,
                          life_loss_info=True, reward_clipping=False, use_fire_reset=True, autoreset_mode="SameStep")


def make_groups(env_id: str, num_envs: int, requested: int) -> list:
    """Two groups of num_envs / 2 games: while one group's games step in C++ threads, the policy acts on the
    device for the other. Each group gets half of the `requested` threads (0: one per game, at most one per CPU
    core)."""
    threads = max(1, env_threads(requested, num_envs) // 2)
    return [make_envs(env_id, num_envs // 2, threads) for _ in range(2)]


class FrameLink:
    """Each env step between the C++ envs and the device: the host writes the answer (stacked frames, reward,
    episode end) into pinned buffers, a hot function copies them to the device (`receive`) and starts the
    action's copy back (`send_action`); `action()` waits for that copy alone, never for the whole GPU."""

    def __init__(self, n_envs: int, device: torch.device):
        copying = device.type == "cuda"
        self.staged = {"frames": torch.zeros(n_envs, *FRAMES, dtype=torch.uint8, pin_memory=copying),
                       "reward": torch.zeros(n_envs, pin_memory=copying),
                       "ended": torch.zeros(n_envs, pin_memory=copying)}
        self.on_device = {k: v.to(device) for k, v in self.staged.items()} if copying else self.staged
        self.host = {k: v.numpy() for k, v in self.staged.items()}
        self.action_out = torch.zeros(n_envs, dtype=torch.long, pin_memory=copying)
        self.event = torch.cuda.Event() if copying else None

    def reset(self, frames: np.ndarray) -> None:
        self.send(frames, 0.0, 0.0)

    def send(self, frames: np.ndarray, reward, ended) -> None:
        self.host["frames"][:], self.host["reward"][:], self.host["ended"][:] = frames, reward, ended

    def receive(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.on_device is not self.staged:
            for name, tensor in self.on_device.items():
                tensor.copy_(self.staged[name], non_blocking=True)
        return self.on_device["frames"], self.on_device["reward"], self.on_device["ended"]

    def send_action(self, action: torch.Tensor) -> None:
        self.action_out.copy_(action, non_blocking=True)

    def action_queued(self) -> None:
        if self.event is not None:
            self.event.record()

    def action(self) -> np.ndarray:
        if self.event is not None:
            self.event.synchronize()
        return self.action_out.numpy()


class Games:
    """Whole games, for the log: an episode ends at every lost life, a game when the env restarts it (its lives
    go back up; games without lives end at every episode end)."""

    def __init__(self, n_envs: int, lives: np.ndarray):
        self.score, self.length = np.zeros(n_envs), np.zeros(n_envs, dtype=np.int64)
        self.lives = lives.astype(np.int64)

    def after_step(self, reward: np.ndarray, ended: np.ndarray, lives: np.ndarray) -> list[tuple[float, int]]:
        self.score += reward
        self.length += 1
        over = ended & (lives >= self.lives)
        finished = [(float(self.score[i]), int(self.length[i])) for i in np.flatnonzero(over)]
        self.score[over], self.length[over], self.lives[:] = 0.0, 0, lives
        return finished


def start_games(groups: list, links: list[FrameLink], seed: int) -> list[Games]:
    """Reset every game (one seed each, counted from `seed`), stage each group's first frames; each group's log
    of whole games."""
    games = []
    for group, (envs, link) in enumerate(zip(groups, links, strict=True)):
        frames, info = envs.reset(seed=seed + group * envs.num_envs)
        link.reset(frames)
        games.append(Games(envs.num_envs, info["lives"]))
    return games


def receive(envs, link: FrameLink, games: Games) -> list[tuple[float, int]]:
    """A group's answer to its last action, staged in its link for the device; the whole games it ended."""
    frames, reward, terminated, truncated, info = envs.recv()
    episode_ended = terminated | truncated  # a time limit ends an episode as a loss of life does
    link.send(frames, reward, episode_ended)
    return games.after_step(reward, episode_ended, info["lives"])
