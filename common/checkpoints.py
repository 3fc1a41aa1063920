"""Checkpoints (`--save-model`, `--checkpoint-every`, `--resume`) and the exported policy."""

from __future__ import annotations

import copy
import dataclasses
import glob
import json
import os
import pickle
import random
import sys

import numpy as np
import torch

from .errors import UserError, check


class Checkpoints:
    """Everything a run needs to continue.

    `modules`: objects with state_dict (networks, optimizers, episode trackers); `tensors`: the device state that
    captured functions update in place, loaded back by copy so the graphs stay valid; `replay`: buffers saved up
    to `replay_size` rows. The envs are pickled whole where they can be, with the RNG states and the envs' last
    answer (`link`, an EnvLink; None where the script keeps that in `tensors`), so on CPU a resumed run logs
    exactly what the uninterrupted run logs. `counters` (the
    loop's host-side numbers, with at least `global_step`) go in on save and come back from `resume`, and so do
    the `logger`'s episode counts (its run folder holds the checkpoints), so that a resumed run's summary and
    last-20 return are the uninterrupted run's. The scripts save only where an iteration ends, so every checkpoint
    resumes. `last`: the newest one written.
    """

    def __init__(self, args, logger, algo: str, modules: dict, tensors: dict,
                 replay: dict | None = None, replay_size: torch.Tensor | None = None):
        self.args, self.logger, self.run_dir, self.algo = args, logger, logger.dir or "", algo
        self.modules, self.tensors, self.replay, self.replay_size = modules, tensors, replay or {}, replay_size
        self.periodic: str | None = None
        self.last: str | None = None

    def resume(self, envs, link) -> tuple[object, dict]:
        """Load `--resume` into this run; returns the envs to use (restored ones when saved) and the counters."""
        saved = load_checkpoint(self.args.resume, self.args)
        for name, module in self.modules.items():
            check(name in saved, f"--resume {self.args.resume}: the checkpoint holds no {name!r} (another version of "
                                 f"{script_of(self.args)} wrote it); start a new run")
            if isinstance(module, torch.optim.Optimizer):
                load_optimizer(module, saved[name])
            else:
                module.load_state_dict(saved[name])
        state = saved["resume"]
        with torch.no_grad():
            for name, tensor in self.replay.items():
                tensor[: len(saved["replay"][name])].copy_(saved["replay"][name])
            for name, tensor in self.tensors.items():
                tensor.copy_(state["tensors"][name])
        from .subprocess_envs import SubprocessVectorEnv

        added_async = isinstance(envs, SubprocessVectorEnv)  # --async-envs added on resume
        if state["envs"] is not None and not added_async:
            threads = getattr(envs, "threads", None)
            envs.close()
            envs = pickle.loads(state["envs"])
            if threads is not None and hasattr(envs, "share_among"):  # this run's --env-threads, not the saved one's
                envs.share_among(threads)
            if link is not None:
                link.load_state_dict(state["link"])
        elif link is not None:  # envs that cannot be saved (subprocesses, MuJoCo) restart with fresh episodes, and
            # so do envs saved in the run's process that this run steps in subprocesses
            link.reset(envs.reset(seed=self.args.seed + state["counters"]["global_step"])[0])
        # (without a link, the script restarts such envs itself)
        if "logger" in state:  # a checkpoint from before it was saved: the summary counts from the resume
            self.logger.load_state_dict(state["logger"])
        set_rng_state(state["rng"])
        return envs, state["counters"]

    def save(self, name: str, envs, link, counters: dict) -> str:
        size = int(self.replay_size) if self.replay else 0
        path = os.path.join(self.run_dir, name)
        state = {
            **{key: module.state_dict() for key, module in self.modules.items()},
            "script": script_of(self.args), "args": dataclasses.asdict(self.args),
            "global_step": counters["global_step"],
            # a copy of the rows written: a view (.cpu() of a CPU tensor is one) would save the whole memory
            "replay": {key: tensor[:size].to("cpu", copy=True) for key, tensor in self.replay.items()},
            "resume": {"counters": counters, "logger": self.logger.state_dict(),
                       "link": link.state_dict() if link else None, "rng": rng_state(),
                       "envs": env_state(envs),
                       "tensors": {key: tensor.detach().cpu() for key, tensor in self.tensors.items()}}}
        failure = None
        try:  # to a temporary name, then renamed: a checkpoint is whole or absent
            with open(path + ".tmp", "wb") as f:  # closed here even when the write fails
                torch.save(state, f)
            os.replace(path + ".tmp", path)
        except (OSError, RuntimeError) as err:  # torch's writer raises RuntimeError on a full disk
            failure = write_failure(err)
        if failure is not None:  # raised out here: the failed write's frames (which hold its file) are released,
            if os.path.exists(path + ".tmp"):  # so removing the partial file frees its space for summary.json
                os.remove(path + ".tmp")
            earlier = f"; the last whole one is {self.last}" if self.last else ""
            raise UserError(f"cannot write the checkpoint {path} ({failure}); free space or pick another "
                            f"--runs-dir{earlier}")
        self.last = path
        return path

    def due(self, step: int, advanced: int) -> bool:
        """Whether the last `advanced` steps up to `step` crossed a multiple of --checkpoint-every."""
        every = self.args.checkpoint_every
        return self.args.save_model and every > 0 and step // every != (step - advanced) // every

    def save_periodic(self, envs, link, counters: dict) -> None:
        """`<algo>-step<N>.pt`; only the latest is kept."""
        path = self.save(f"{self.algo}-step{counters['global_step']}.pt", envs, link, counters)
        if self.periodic:
            os.remove(self.periodic)
        self.periodic = path


def load_optimizer(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """A saved optimizer state into this run's optimizer, which keeps how it steps: its learning rate (under PPO
    and PQN the device tensor that annealing writes in place; load_state_dict would put in a copy), `capturable`
    and `fused` (set by the path: --compile, --cudagraphs and --fused-optimizer may change on resume, and
    load_state_dict would take the saved run's and place the step counts by them)."""
    mine = [{key: group[key] for key in ("lr", "capturable", "fused") if key in group}
            for group in optimizer.param_groups]
    optimizer.load_state_dict({**state, "param_groups": [{**saved, **kept} for saved, kept in zip(
        state["param_groups"], mine, strict=True)]})
    for group, kept in zip(optimizer.param_groups, mine, strict=True):
        group["lr"] = kept["lr"]


# Flags that change how a run executes or reports, not what it computes: free to differ on --resume.
FREE_ON_RESUME = {"cuda", "compile", "cudagraphs", "max_autotune", "inductor", "fused_optimizer", "log_every",
                  "save_model", "checkpoint_every", "resume", "runs_dir", "track", "wandb_project", "wandb_entity",
                  "async_envs", "env_threads", "threads"}


def script_of(args) -> str:
    """The script whose `Args` these are, e.g. `td3.py`."""
    return os.path.basename(sys.modules[type(args).__module__].__file__)


def load_checkpoint(path: str, args, mmap: bool = False) -> dict:
    """A checkpoint to resume from, checked against this run's script and flags (one-line errors, exit 2);
    `mmap`: tensors stay on disk until read (a cheap check of a checkpoint with a large replay buffer). `path`: the
    checkpoint, or a run folder: its checkpoint at the end (`<algo>.pt`) or else its newest periodic one."""
    if os.path.isdir(path):
        path = checkpoint_in(path, script_of(args))
    check(os.path.isfile(path), f"--resume {path}: no such file; pass a checkpoint written with --save-model")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    except Exception:
        raise UserError(f"--resume {path}: not a readable checkpoint (truncated or not from --save-model)") from None
    check(isinstance(saved, dict) and "resume" in saved and "script" in saved,
          f"--resume {path}: not a checkpoint of --save-model (no resume state)")
    script = script_of(args)
    check(saved["script"] == script, f"--resume {path}: saved by algos/{saved['script']}, not {script}; resume it "
                                     f"with python algos/{saved['script']} --resume {path}")
    now = dataclasses.asdict(args)
    # A flag added since the checkpoint was saved: the saved run had its default's behaviour.
    saved_args = {**{f.name: f.default for f in dataclasses.fields(args) if f.default is not dataclasses.MISSING},
                  **saved["args"]}
    changed = [name for name in sorted(set(now) | set(saved_args))
               if name not in FREE_ON_RESUME and saved_args.get(name) != now.get(name)]
    check(not changed, f"--resume {path}: saved with " + ", ".join(
        f"--{name.replace('_', '-')} {saved_args.get(name)} (not {now.get(name)})" for name in changed)
        + "; pass the saved flags (the run folder's args.json has them all)")
    summary_path = os.path.join(os.path.dirname(path), "summary.json")
    if os.path.exists(summary_path):  # the checkpoint a finished run saved at its end has nothing left to run
        with open(summary_path) as f:
            summary = json.load(f)
        check(summary.get("status") != "done" or summary.get("steps") != saved.get("global_step"),
              f"--resume {path}: that run finished ({summary.get('steps')} steps, status done): nothing to resume; "
              f"evaluate it with python scripts/evaluate.py {os.path.dirname(path)}")
    return saved


def checkpoint_in(run_dir: str, script: str) -> str:
    """The checkpoint `script` left in `run_dir` that a resume continues: the one written where the run ended, or
    else (a killed run) the newest periodic one."""
    algo = script.removesuffix(".py")
    periodic = sorted(glob.glob(os.path.join(glob.escape(run_dir), f"{algo}-step*.pt")),
                      key=lambda name: int(name.rsplit("-step", 1)[1][:-3]))
    found = [name for name in (os.path.join(run_dir, f"{algo}.pt"), *periodic[-1:]) if os.path.isfile(name)]
    check(found, f"--resume {run_dir}: no checkpoint of {script} in this folder; pass a run folder of a --save-model "
                 f"run of {script} (a --num-seeds run keeps its checkpoint in its first seed's folder)")
    return found[0]


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def env_state(envs) -> bytes | None:
    """The envs pickled, whole (simulator state, RNG, time limits, episode statistics); None where they cannot
    be (subprocesses, MuJoCo): a resume then restarts them with fresh episodes."""
    import cloudpickle  # a gymnasium dependency; plain pickle cannot hold the env factories

    try:
        return cloudpickle.dumps(envs)
    except Exception:
        return None


def export_policy(policy: torch.nn.Module, obs_shape: int | tuple[int, ...], path: str,
                  state_sizes: tuple[int, ...] = ()) -> str:
    """Save a deterministic policy (observation batch in, action batch out) as a torch.export `.pt2`, on CPU;
    `torch.export.load(path).module()` runs it without this project. `obs_shape`: one observation's size, or
    its shape (stacked frames). A recurrent policy also takes and returns its state, one (batch x size) tensor
    per entry of `state_sizes`."""
    module = copy.deepcopy(policy).cpu().eval()
    batch = torch.export.Dim("batch", min=1)
    obs = torch.zeros(2, *((obs_shape,) if isinstance(obs_shape, int) else obs_shape))
    inputs = (obs, *(torch.zeros(2, size) for size in state_sizes))
    with torch.no_grad():
        program = torch.export.export(module, inputs, dynamic_shapes=tuple({0: batch} for _ in inputs))
    partial = os.path.splitext(path)[0] + ".partial.pt2"  # torch.export warns on a name not ending in .pt2
    failure = None
    try:
        torch.export.save(program, partial)
        os.replace(partial, path)
    except (OSError, RuntimeError) as err:
        failure = write_failure(err)
    if failure is not None:  # out here, as in Checkpoints.save: the failed write's file is closed before removal
        if os.path.exists(partial):
            os.remove(partial)
        raise UserError(f"cannot write the policy {path} ({failure}); free space or pick another --runs-dir")
    return path


def write_failure(err: Exception) -> str:
    """Why a write failed, in words: torch's writer reports a full disk as a RuntimeError about positions."""
    return err.strerror if isinstance(err, OSError) and err.strerror else "the write failed: disk full?"
