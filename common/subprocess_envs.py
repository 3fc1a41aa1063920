"""Gymnasium envs stepped each in a subprocess of its own (--async-envs), their answers in shared memory.

gymnasium's AsyncVectorEnv sends every step's action and answer through a pipe per env as pickles, and merges each
env's info dict in the run's process: tens of microseconds of the run's own time per env and step, paid one env
after another, while the simulation itself runs side by side (on a 16-core host, 10 Hopper envs took 580-720 us a
step where one steps in ~110-120 us: results/experiments/seeds). Here actions, observations, rewards, episode ends
and final observations sit in arrays that the run and its subprocesses share, and a step costs the run one byte
written to each env's pipe and one read back (results/experiments/vector-envs: 4-5x less of the run's time).

The answers are EpisodeStatsSyncVectorEnv's (common/envs.py), step for step (tests/test_common.py): same-step
autoreset, the final observation of an episode that ended in `info["final_obs"]` (mask `_final_obs`), and
RecordEpisodeStatistics' `episode` record. The envs' own info keys are not carried: no script reads them. The
arrays returned are valid until the next step, as with `copy=False`.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import traceback
import weakref
from multiprocessing.reduction import ForkingPickler

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import CloudpickleWrapper, batch_space

SHARED_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
STEP, COMMAND, DONE, FAILED = b"s", b"c", b"d", b"e"  # one byte each way per step; COMMAND: a pickle follows


class UnsharedSpace(Exception):
    """Observations of a space that no fixed-shape shared array holds (Dict, Tuple); its argument is the space."""


class SubprocessVectorEnv(gym.vector.VectorEnv):
    """Each env in a subprocess, talking through shared arrays (module docstring). Build it from env factories, as
    gymnasium's vector envs; it takes observation spaces of SHARED_SPACES, else raises UnsharedSpace."""

    def __init__(self, env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, copy: bool = False):
        assert autoreset_mode == gym.vector.AutoresetMode.SAME_STEP and not copy, "what step() implements"
        dummy = env_fns[0]()  # the spaces, as gymnasium's AsyncVectorEnv takes them
        self.single_observation_space, self.single_action_space = dummy.observation_space, dummy.action_space
        self.metadata, self.render_mode = {**dummy.metadata, "autoreset_mode": autoreset_mode}, dummy.render_mode
        dummy.close()
        if not isinstance(self.single_observation_space, SHARED_SPACES):
            raise UnsharedSpace(self.single_observation_space)
        self.num_envs = n = len(env_fns)
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        obs, act = self.single_observation_space, self.single_action_space
        self._layout = {"actions": ((n, *act.shape), act.dtype), "observations": ((n, *obs.shape), obs.dtype),
                        "final_obs": ((n, *obs.shape), obs.dtype), "rewards": ((n,), np.float64),
                        "terminations": ((n,), np.bool_), "truncations": ((n,), np.bool_)}
        ctx = mp.get_context()
        self._buffers = {name: ctx.RawArray("b", max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize))
                         for name, (shape, dtype) in self._layout.items()}
        self._arrays = views(self._buffers, self._layout)
        self._conns, self._processes, self._pending = [], [], True
        # A run that exits without close() closes its ends first: the subprocesses read the end of file and exit,
        # where multiprocessing's own exit would wait for them forever (they ignore SIGTERM).
        weakref.finalize(self, _close_all, self._conns)
        # PR_SET_PDEATHSIG follows the thread that starts a subprocess: set only where that thread is the run's own.
        die_with_run = threading.current_thread() is threading.main_thread()
        for index, env_fn in enumerate(env_fns):
            parent, child = ctx.Pipe()
            process = ctx.Process(target=_work, name=f"env-{index}", daemon=True,
                                  args=(index, CloudpickleWrapper(env_fn), child, parent, self._buffers, self._layout,
                                        die_with_run))
            process.start()
            child.close()
            self._conns.append(parent)
            self._processes.append(process)
        self._wait()  # every env made (or the first error raised)
        self.episode_returns = np.zeros(n)
        self.episode_lengths = np.zeros(n, dtype=np.int64)

    def reset(self, *, seed=None, options=None):
        seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else seed or [None] * self.num_envs
        self._commands([("reset", env_seed, options) for env_seed in self._each(seeds)])
        self._wait()
        self.episode_returns[:], self.episode_lengths[:] = 0.0, 0
        return self._arrays["observations"], {}

    def step(self, actions):
        a = self._arrays
        self._start()
        a["actions"][...] = np.asarray(actions).reshape(a["actions"].shape)
        for conn in self._conns:
            _send(conn, STEP)
        self._wait()
        ended = a["terminations"] | a["truncations"]
        infos = {"final_obs": a["final_obs"].copy(), "_final_obs": ended} if ended.any() else {}
        count_episodes(self.episode_returns, self.episode_lengths, a["rewards"], ended if infos else None, infos)
        return a["observations"], a["rewards"], a["terminations"], a["truncations"], infos

    def call(self, name: str, *args, **kwargs) -> tuple:
        self._commands([("call", name, args, kwargs)] * self.num_envs)
        return tuple(self._wait(results=True))

    def get_attr(self, name: str) -> tuple:
        return self.call(name)

    def set_attr(self, name: str, values) -> None:
        values = values if isinstance(values, (list, tuple)) else [values] * self.num_envs
        self._commands([("set_attr", name, value) for value in self._each(values)])
        self._wait()

    def close_extras(self, **kwargs):
        if not self._pending:  # else a subprocess may still answer what it was sent: the end of file stops it
            for conn, process in zip(self._conns, self._processes, strict=True):
                if process.is_alive() and _send(conn, COMMAND):
                    with contextlib.suppress(OSError):
                        conn.send(("close",))
        _close_all(self._conns)
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()  # it ignores SIGTERM
        self._conns.clear()
        self._processes = []

    def __getstate__(self):
        raise TypeError("envs in subprocesses cannot be saved; a resume restarts them")  # checkpoints: env_state

    def _each(self, values) -> list:
        """A value per env, checked before anything is sent."""
        if len(values) != self.num_envs:
            raise ValueError(f"{len(values)} values for {self.num_envs} envs")
        return list(values)

    def _start(self) -> None:
        """Before a request: a run interrupted while it waited for an answer (Ctrl-C caught around a step) left
        answers unread, which would answer the next request; such envs are closed instead."""
        if self._pending:
            self.close()
            raise RuntimeError("the envs were interrupted while they stepped (--async-envs); make them again")
        self._pending = True

    def _commands(self, messages: list[tuple]) -> None:
        """A command per env: each pickled before its byte goes out, so a message that cannot be sent sends nothing."""
        payloads = [ForkingPickler.dumps(message) for message in messages]
        self._start()
        for conn, payload in zip(self._conns, payloads, strict=True):
            if _send(conn, COMMAND):
                with contextlib.suppress(OSError):  # gone: the answer it owes says so
                    conn.send_bytes(payload)

    def _wait(self, results: bool = False) -> list:
        """Every env's answer to what it was just sent; the first env that failed raises, the others are closed."""
        answers, failed = [], None
        for index, conn in enumerate(self._conns):
            try:
                answer = os.read(conn.fileno(), 1)
            except OSError:  # reset by a subprocess that died before reading what was sent
                answer = b""
            if answer == DONE:
                answers.append(conn.recv() if results else None)
            elif failed is None:
                if answer != FAILED:
                    self._processes[index].join(timeout=5)
                failed = (index, conn.recv() if answer == FAILED else
                          f"its subprocess exited (code {self._processes[index].exitcode})")
        self._pending = False
        if failed is not None:
            self.close()
            raise RuntimeError(f"env {failed[0]} (in a subprocess of --async-envs) failed: {failed[1]}")
        return answers


def count_episodes(returns: np.ndarray, lengths: np.ndarray, rewards: np.ndarray, ended: np.ndarray | None,
                   infos: dict) -> None:
    """RecordEpisodeStatistics' record, kept in place: every env's return and length grow by this step; those of the
    envs whose episode `ended` (a mask; None: none did) go into `infos["episode"]`, then start again."""
    returns += rewards
    lengths += 1
    if ended is not None:
        infos["episode"] = {"r": np.where(ended, returns, 0.0), "l": np.where(ended, lengths, 0)}
        infos["_episode"] = ended
        returns[ended], lengths[ended] = 0.0, 0


def _close_all(conns: list) -> None:
    for conn in conns:
        conn.close()


def _send(conn, request: bytes) -> bool:
    """One request byte to an env's subprocess; False where it is gone (the answer it owes says so)."""
    try:
        os.write(conn.fileno(), request)
        return True
    except OSError:
        return False


def views(buffers: dict, layout: dict) -> dict[str, np.ndarray]:
    return {name: np.frombuffer(buffers[name], dtype=dtype, count=int(np.prod(shape))).reshape(shape)
            for name, (shape, dtype) in layout.items()}


def _work(index: int, env_fn, conn, parent_conn, buffers: dict, layout: dict, die_with_run: bool) -> None:
    """One env's subprocess: make it, then answer each byte the run sends until told to close."""
    parent_conn.close()  # the run's end, inherited where the process was forked
    if die_with_run and sys.platform == "linux":  # killed with the run's process, which may die without closing
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # its ends (kill -9): PR_SET_PDEATHSIG
    for signum in (signal.SIGINT, signal.SIGTERM):  # the run's process decides when to stop (common/envs.py)
        signal.signal(signum, signal.SIG_IGN)
    fd, a = conn.fileno(), views(buffers, layout)
    try:
        env = env_fn.fn()
        os.write(fd, DONE)
        while True:
            request = os.read(fd, 1)
            if request == STEP:
                obs, reward, terminated, truncated, _ = env.step(a["actions"][index])
                a["rewards"][index], a["terminations"][index], a["truncations"][index] = reward, terminated, truncated
                if terminated or truncated:
                    a["final_obs"][index] = obs
                    obs, _ = env.reset()
                a["observations"][index] = obs
                os.write(fd, DONE)
                continue
            if request != COMMAND:  # end of file: the run's process is gone
                return
            name, *args = conn.recv()
            if name == "close":
                env.close()
                return
            result = None
            if name == "reset":
                a["observations"][index], _ = env.reset(seed=args[0], options=args[1])
            elif name == "call":  # as gymnasium's vector envs: through the wrappers
                result = env.get_wrapper_attr(args[0])
                result = ForkingPickler.dumps(result(*args[1], **args[2]) if callable(result) else result)
            elif name == "set_attr":
                env.set_wrapper_attr(args[0], args[1])
            os.write(fd, DONE)
            if name == "call":
                conn.send_bytes(result)
    except Exception as err:  # noqa: BLE001 - the run's process raises it, naming the env
        try:
            os.write(fd, FAILED)
            conn.send(f"{type(err).__name__}: {err} ({traceback.extract_tb(err.__traceback__)[-1].filename})")
        except OSError:
            pass
