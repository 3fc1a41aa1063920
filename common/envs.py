"""Environments: building them, the observation each step reached, and the episodes that end. (Carrying a step
to the device and the action back: common/link.py.)"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import re
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Literal

import gymnasium as gym
import numpy as np
import torch

from .errors import UserError
from .subprocess_envs import SubprocessVectorEnv, UnsharedSpace, count_episodes

ActionKind = Literal["discrete", "continuous", "any"]


def make_env(
    env_id: str,
    num_envs: int,
    seed: int,
    *,
    action: ActionKind = "any",
    algo: str = "this algorithm",
    capture_video: bool = False,
    asynchronous: bool = False,
    threads: int = 1,
    backend: str = "gymnasium",
    device: str | None = None,
    mask_velocity: bool = False,
) -> gym.vector.VectorEnv:
    """A seeded gymnasium vector env that records episode returns.

    Autoreset is SAME_STEP: a step that ends an episode returns the first observation of the next one and
    puts the last observation of the finished one in `info["final_obs"]` (see `final_observations`), so no
    stored transition ever crosses an episode boundary. `backend="torch"`: the torch implementation of a
    classic-control env (common/torch_envs.py) on `device`, taking and returning tensors there;
    `mask_velocity` leaves the velocities out of its observations. `asynchronous`: each env steps in a subprocess
    of its own (common/subprocess_envs.py); `threads` > 1: that many threads step the envs in the run's process,
    each its own share of them (0: one per env, at most one per CPU core).
    """
    if num_envs < 1:
        raise UserError(f"--num-envs must be >= 1 (got {num_envs})")
    if backend == "torch":  # the flag's values are checked with the other shared flags (check_run_args)
        return _torch_env(env_id, num_envs, seed, action, algo, device, mask_velocity)
    if mask_velocity:
        raise UserError("--mask-velocity masks the classic-control device envs: add --env-backend torch")
    if backend == "mjwarp":
        quiet_model_deprecations(None)
        envs = _mjwarp_module().make_mjwarp_env(env_id, num_envs, device or "cpu", seed)
        _check_action_space(envs, env_id, action, algo)
        return envs
    mode = gym.vector.AutoresetMode.SAME_STEP
    spec = _spec(env_id)
    # Env 0 records (--capture-video) into a folder of its own until the run folder exists (record_videos_in).
    staging = (os.path.join(tempfile.gettempdir(), f"turborl-videos-{os.getpid()}-{time.time_ns()}")
               if capture_video else None)
    if staging:  # a run that fails before its run folder exists leaves no empty folder behind
        atexit.register(_remove_if_empty, staging)

    def thunk(index: int):
        def make():
            return make_one(spec, staging if index == 0 else None)  # here: in each subprocess of --async-envs too

        return make

    threads = env_threads(threads, num_envs)
    vector_cls = SubprocessVectorEnv if asynchronous else partial(EpisodeStatsSyncVectorEnv, threads=threads)
    # Env subprocesses ignore Ctrl-C and SIGTERM (inherited at start): a terminal or a job scheduler sends them to
    # all of them, and the run's own process must stop where an iteration ends, with its envs still alive.
    in_main_thread = threading.current_thread() is threading.main_thread()
    stops = (signal.SIGINT, signal.SIGTERM) if asynchronous and in_main_thread else ()
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in stops}
    try:
        # copy=False: the observations a step returns are the env's own buffer, valid until the next step;
        # every script copies them out at once (EnvLink.send), so a defensive copy per step buys nothing.
        envs = vector_cls([thunk(i) for i in range(num_envs)], autoreset_mode=mode, copy=False)
    except UnsharedSpace as err:  # Dict or Tuple observations, found before any subprocess started
        raise UserError(_flat_observations_only(algo, env_id, err.args[0])) from None
    except gym.error.DependencyNotInstalled as err:
        raise missing_extra(env_id, err) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    obs_space = envs.single_observation_space
    if not (isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1):  # every script's networks
        envs.close()
        raise UserError(_flat_observations_only(algo, env_id, obs_space))
    _check_action_space(envs, env_id, action, algo)
    envs.action_space.seed(seed)
    envs.observation_space.seed(seed)
    envs.video_staging = staging
    return envs


def usable_cores() -> int:
    """The CPU cores this process may run on (a container's or taskset's share), not the host's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def env_threads(requested: int, num_envs: int) -> int:
    """The threads that step `num_envs` envs: `requested`, or for 0 one per env, at most one per usable core."""
    return requested or min(num_envs, usable_cores())


def subprocesses_pay(env_id: str, num_envs: int) -> bool:
    """Whether `num_envs` gymnasium envs step faster each in a subprocess of its own (--async-envs) than one after
    another in the loop's thread, as measured in results/experiments/vector-envs: for a simulator that costs more
    than a subprocess round trip (not classic control or toy text), 5 envs or more (one Hopper env took 1.8x longer
    in a subprocess, five ran 1.7x faster, on 16 cores), on 8 CPU cores or more (on 2, subprocesses lost at every
    count)."""
    entry = str(_spec(env_id).entry_point)
    cheap = "classic_control" in entry or "toy_text" in entry
    return not cheap and num_envs >= 5 and usable_cores() >= 8


def record_videos_in(envs, folder: str) -> None:
    """--capture-video: env 0 records into `folder` (the run folder's videos/, made after the envs) from now on;
    the folder it was made with goes, empty."""
    if getattr(envs, "video_staging", None) is None:
        return
    os.makedirs(folder, exist_ok=True)
    envs.unwrapped.set_attr("video_folder", folder)  # env 0's RecordVideo; the others get an attribute never read
    _remove_if_empty(envs.video_staging)


def quiet_model_deprecations(spec) -> None:
    """MuJoCo 4 warns, for every env it builds, that gymnasium's model files use an attribute it deprecates
    (HalfCheetah's settotalmass): nothing a run can change, printed once per env and subprocess. Those warnings are
    dropped; MuJoCo's others are printed as MuJoCo prints them. `spec`: the env about to be made (None: a MuJoCo
    one); nothing to do for another, or without MuJoCo (gym.make names the missing extra)."""
    if spec is not None and "mujoco" not in str(spec.entry_point):
        return
    try:
        import mujoco
    except ImportError:
        return

    def warn(message: str) -> None:
        if "is deprecated" not in message:
            print(f"WARNING: {message}\n", file=sys.stderr, flush=True)

    mujoco.set_mju_user_warning(warn)


def make_one(spec, video_folder: str | None = None, **record_kwargs) -> gym.Env:
    """One gymnasium env, made from its spec (gym.make of an id warns that a -v4 one is old), without MuJoCo's
    deprecation warnings; with `video_folder`, RecordVideo writes its episodes there from rgb_array frames. Those
    need no display: SDL (pygame, which draws classic control) is told so, else a machine without one gets its
    'error: XDG_RUNTIME_DIR is invalid' line in a run that works."""
    quiet_model_deprecations(spec)
    if video_folder is None:
        return gym.make(spec)
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    return gym.wrappers.RecordVideo(gym.make(spec, render_mode="rgb_array"), video_folder, disable_logger=True,
                                    **record_kwargs)


def _remove_if_empty(folder: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(folder)


class EpisodeStatsSyncVectorEnv(gym.vector.SyncVectorEnv):
    """gymnasium's SyncVectorEnv in same-step autoreset without copies, and with RecordEpisodeStatistics' `episode`
    info ("r", "l" and the mask "_episode") kept in the same loop: the same answers step for step
    (tests/test_common.py), with one wrapper layer less and no per-step dispatch on the spaces. On a one-env
    CartPole loop those two layers were most of the host's time per step (scripts/host_step_speed.py). The three
    arrays of rewards and episode ends it returns, like the observations, are valid until the next step.
    `threads` > 1 steps the envs in that many threads: MuJoCo lets go of Python's lock (the GIL) while it
    simulates, so the envs of a costly simulator step side by side, with the same answers."""

    def __init__(self, env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, copy: bool = False,
                 threads: int = 1):
        assert autoreset_mode == gym.vector.AutoresetMode.SAME_STEP and not copy, "what step() implements"
        super().__init__(env_fns, copy=False, autoreset_mode=autoreset_mode)
        self.share_among(threads)
        self.episode_returns = np.zeros(self.num_envs)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int64)
        self._stack = isinstance(self.single_observation_space, gym.spaces.Box)  # else gymnasium's concatenate

    @property
    def threads(self) -> int:
        return len(self._shares)

    def share_among(self, threads: int) -> None:
        """One share of the envs per thread. The caller's thread steps the first share itself: env 0, the one that
        records videos, renders in the thread that made it (a GL context belongs to one thread); a pool thread
        steps each other share."""
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown()
        self._shares = np.array_split(np.arange(self.num_envs), min(threads, self.num_envs))
        self._pool = ThreadPoolExecutor(len(self._shares) - 1) if len(self._shares) > 1 else None

    def __getstate__(self):  # a checkpoint pickles the envs; threads do not pickle and are made again on loading
        return {key: value for key, value in self.__dict__.items() if key != "_pool"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.share_among(len(state.get("_shares", [()])))  # saved before --env-threads: one share

    def reset(self, *, seed=None, options=None):
        self.episode_returns[:], self.episode_lengths[:] = 0.0, 0
        return super().reset(seed=seed, options=options)

    def step(self, actions):
        if self._pool is None:
            stepped = self._step_envs(range(self.num_envs), actions)
        else:
            pending = [self._pool.submit(self._step_envs, envs, actions) for envs in self._shares[1:]]
            stepped = self._step_envs(self._shares[0], actions)
            for share in pending:
                stepped += share.result()
        infos, ended = {}, []
        for i, (final, info) in enumerate(stepped):
            if final is not None:
                infos = self._add_info(infos, final, i)
                ended.append(i)
            if info:
                infos = self._add_info(infos, info, i)
        if self._stack:
            np.stack(self._env_obs, out=self._observations)
        else:
            self._observations = gym.vector.utils.concatenate(self.single_observation_space, self._env_obs,
                                                             self._observations)
        done = None
        if ended:
            done = np.zeros(self.num_envs, dtype=bool)
            done[ended] = True
        count_episodes(self.episode_returns, self.episode_lengths, self._rewards, done, infos)
        return self._observations, self._rewards, self._terminations, self._truncations, infos

    def _step_envs(self, indices, actions) -> list[tuple[dict | None, dict]]:
        """Step the envs at `indices`, writing their answers in place; per env, the step that ended an episode
        ({"final_obs", "final_info"}, else None) and the info of the observation it leaves."""
        stepped = []
        for i in indices:
            obs, reward, terminated, truncated, info = self.envs[i].step(actions[i])
            self._rewards[i], self._terminations[i], self._truncations[i] = reward, terminated, truncated
            final = None
            if terminated or truncated:
                final = {"final_obs": obs, "final_info": info}
                obs, info = self.envs[i].reset()
            self._env_obs[i] = obs
            stepped.append((final, info))
        return stepped

    def close_extras(self, **kwargs):
        if self._pool is not None:
            self._pool.shutdown()
        super().close_extras(**kwargs)


def _torch_env_class(env_id: str):
    from .torch_envs import TORCH_ENVS

    if env_id not in TORCH_ENVS:
        raise UserError(f"--env-backend torch has no {env_id}; it has {', '.join(TORCH_ENVS)}")
    return TORCH_ENVS[env_id]


def _mjwarp_module():
    try:
        from . import mjwarp_envs
    except ImportError:
        raise UserError('--env-backend mjwarp needs MuJoCo Warp: pip install -e ".[mjwarp]"') from None
    return mjwarp_envs


def _torch_env(env_id, num_envs, seed, action, algo, device, mask_velocity):
    envs = _torch_env_class(env_id)(env_id, num_envs, device or "cpu", seed, mask_velocity=mask_velocity)
    _check_action_space(envs, env_id, action, algo)
    return envs


def _flat_observations_only(algo: str, env_id: str, space: gym.Space) -> str:
    return f"{algo} here takes flat Box observations but {env_id} has {space}; pick e.g. CartPole-v1"


def _check_action_space(envs, env_id: str, action: ActionKind, algo: str) -> None:
    space = envs.single_action_space
    if action == "discrete" and not isinstance(space, gym.spaces.Discrete):
        envs.close()
        raise UserError(f"{algo} needs a discrete action space but {env_id} has {space}; pick e.g. CartPole-v1")
    if action == "continuous" and not isinstance(space, gym.spaces.Box):
        envs.close()
        raise UserError(
            f"{algo} needs a continuous (Box) action space but {env_id} has {space}; pick e.g. Pendulum-v1"
        )


def action_space(env_id: str, backend: str = "gymnasium") -> gym.Space:
    """The action space of `env_id` (to pick an algorithm's defaults before the envs are built)."""
    if backend == "torch":
        _torch_env_class(env_id)
    if backend == "mjwarp":
        _mjwarp_module().check_env_id(env_id)
    try:
        env = gym.make(_spec(env_id))
    except gym.error.DependencyNotInstalled as err:
        raise missing_extra(env_id, err) from None
    space = env.action_space
    env.close()
    return space


def _spec(env_id: str):
    try:
        return gym.spec(env_id)
    except gym.error.Error:
        from .atari import ale_rom  # only here: ale-py is an extra

        game = re.fullmatch(r"(?:ALE/)?([A-Z][A-Za-z0-9]*-v5)", env_id)
        atari = (f"; Atari games run in algos/ppo_atari.py and algos/pqn_atari.py (--env-id {game.group(1)})"
                 if game and importlib.util.find_spec("ale_py") and ale_rom(game.group(1)) else "")
        raise UserError(
            f"unknown env id {env_id!r}: use a registered gymnasium id such as CartPole-v1 or HalfCheetah-v5{atari}"
        ) from None


def missing_extra(env_id: str, err: Exception) -> UserError:
    """The one line for a package gymnasium found missing: the project's extra that brings it."""
    if "moviepy" in str(err).lower() or "pygame" in str(err).lower():
        return UserError("--capture-video needs moviepy and a renderer: pip install -e '.[video]' (or drop "
                         "--capture-video)")
    if "mujoco" in str(err).lower():
        return UserError(f"{env_id} needs an extra package ({err}); install it: pip install -e '.[mujoco]'")
    return UserError(f"{env_id} needs an extra package: {err}")


def final_observations(next_obs: np.ndarray, infos: dict) -> np.ndarray:
    """The observation each env actually reached this step: `next_obs`, except the final observation of
    an episode that just ended (same-step autoreset already replaced it with the next episode's first)."""
    if "_final_obs" not in infos:
        return next_obs
    if not isinstance(next_obs, np.ndarray):  # torch envs: final_obs already holds what every env reached
        return infos["final_obs"]
    real = next_obs.copy()
    for i in np.flatnonzero(infos["_final_obs"]):
        real[i] = infos["final_obs"][i]
    return real


def finished_episodes(infos: dict, envs_per_seed: int | None = None) -> list[tuple]:
    """(return, length) of each episode that ended this step (gymnasium envs; torch envs use EpisodeRing).
    `envs_per_seed` (--num-seeds: seed i's envs are the i-th block of that many): (return, length, seed)."""
    if "_episode" not in infos:
        return []
    ep = infos["episode"]
    return [(float(ep["r"][i]), int(ep["l"][i])) + ((int(i) // envs_per_seed,) if envs_per_seed else ())
            for i in np.flatnonzero(infos["_episode"])]


def track_episodes(backend: str, n_envs: int, device: torch.device, steps_per_read: int = 1,
                   envs_per_seed: int | None = None) -> EpisodeRing | HostEpisodes:
    """Where a script gets the episodes that ended: `after_step(infos)` after each env step, `read()` once the
    loop is over for any still held back, and `state_dict()` for checkpoints. `steps_per_read`: env steps
    between two reads of the device envs' ring (PPO reads once per rollout); `envs_per_seed`: see
    finished_episodes (gymnasium envs)."""
    return EpisodeRing(n_envs, device, steps_per_read) if backend != "gymnasium" else HostEpisodes(envs_per_seed)


class HostEpisodes:
    """Gymnasium envs report each episode's end on the host, at the step it ends: nothing is held back."""

    def __init__(self, envs_per_seed: int | None = None):
        self.envs_per_seed = envs_per_seed

    def after_step(self, infos: dict) -> list[tuple]:
        return finished_episodes(infos, self.envs_per_seed)

    def read(self) -> list[tuple[float, int]]:
        return []

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class EpisodeRing:
    """The episodes that end in torch envs, gathered on the device and read by the host from a copy, so the host
    never waits for the GPU. `record(infos)` after each env step (device ops only: it compiles and captures),
    `copy()` queues a copy into pinned memory, `read()` returns the episodes of the last copy not read before:
    those of the newest `steps` recorded steps, at most the newest `keep` = 100 of them (the host logs each one;
    the mean of the newest 100 is what runs report and stop on). Thousands of envs end thousands of episodes
    per PPO iteration, and logging them all took the host longer than the GPU takes for the iteration.

    Each step writes one row, every env's (return, length) with length 0 where no episode ended: an elementwise
    write. A compact list of the ended episodes would need a prefix sum over the envs, a scan that compiles
    into one single-block kernel per step together with whatever inductor fuses into it."""

    keep = 100

    def __init__(self, n_envs: int, device: torch.device, steps: int):
        self.steps = steps
        self.table = torch.zeros(steps, 2, n_envs, device=device)
        self.count = torch.zeros((), dtype=torch.long, device=device)  # steps recorded
        pinned = device.type == "cuda"
        self._host = torch.zeros(steps, 2, n_envs, pin_memory=pinned)
        self._host_count = torch.zeros((), dtype=torch.long, pin_memory=pinned)
        # numpy views of the copies: reading them costs microseconds, torch ops on the host ten times more.
        self._host_np, self._host_count_np = self._host.numpy(), self._host_count.numpy()
        self._copied = torch.cuda.Event() if pinned else None
        self.seen = 0
        self.copy()

    def record(self, infos: dict) -> None:
        ended = infos["_episode"]
        row = torch.stack([infos["episode"]["r"].float(), infos["episode"]["l"].float()]) * ended
        self.table.index_copy_(0, (self.count % self.steps).view(1), row.unsqueeze(0))
        self.count.add_(1)

    def copy(self) -> None:
        self._host.copy_(self.table, non_blocking=True)
        self._host_count.copy_(self.count, non_blocking=True)
        if self._copied is not None:
            self._copied.record()

    def read(self) -> list[tuple[float, int]]:
        if self._copied is not None:
            self._copied.synchronize()
        total = int(self._host_count_np)
        rows = np.arange(max(self.seen, total - self.steps), total) % self.steps
        self.seen = total
        lengths = self._host_np[rows, 1]
        # Search only the newest steps that hold `keep` endings: nonzero over the whole table costs milliseconds.
        ended_since = np.cumsum(np.count_nonzero(lengths, axis=1)[::-1])  # endings in the newest 1, 2, ... steps
        first = max(0, len(rows) - 1 - int(np.searchsorted(ended_since, self.keep)))
        step, env = lengths[first:].nonzero()  # the episodes that ended, in step order, then env order
        step, env = rows[first:][step[-self.keep:]], env[-self.keep:]
        return list(zip(self._host_np[step, 0, env].tolist(), self._host_np[step, 1, env].astype(int).tolist(),
                        strict=True))

    def after_step(self, infos: dict) -> list[tuple[float, int]]:
        """For loops that step the envs from the host: records this step's endings and returns the previous
        step's, whose copy the GPU made back then (this step's would wait for the update queued before it)."""
        ready = self.read()
        self.record(infos)
        self.copy()
        return ready

    def state_dict(self) -> dict:
        return {"table": self.table.cpu(), "count": self.count.cpu(), "seen": self.seen}

    def load_state_dict(self, state: dict) -> None:
        self.table.copy_(state["table"])
        self.count.copy_(state["count"])
        self.seen = state["seen"]
        self.copy()
