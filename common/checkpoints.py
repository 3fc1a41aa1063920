"""Checkpoints (`--save-model`, `--checkpoint-every`, `--resume`) and the exported policy."""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import random

import numpy as np
import torch

from .cli import UserError, check


class Checkpoints:
    """Everything a run needs to continue.

    `modules`: objects with state_dict (networks, optimizers, episode trackers); `tensors`: the device state that
    captured functions update in place, loaded back by copy so the graphs stay valid; `replay`: buffers saved up
    to `replay_size` rows. The envs are pickled whole where they can be, with the RNG states and the envs' last
    answer (`link`, an EnvLink; None where the script keeps that in `tensors`), so on CPU a resumed run logs
    exactly what the uninterrupted run logs. `counters` (the
    loop's host-side numbers, with at least `global_step`) go in on save and come back from `resume`. `same`:
    the flags a resumed run must share with the saved one.
    """

    def __init__(self, args, run_dir: str, algo: str, modules: dict, tensors: dict, same: tuple[str, ...],
                 replay: dict | None = None, replay_size: torch.Tensor | None = None):
        self.args, self.run_dir, self.algo, self.same = args, run_dir, algo, same
        self.modules, self.tensors, self.replay, self.replay_size = modules, tensors, replay or {}, replay_size
        self.periodic = None

    def resume(self, envs, link) -> tuple[object, dict]:
        """Load `--resume` into this run; returns the envs to use (restored ones when saved) and the counters."""
        saved = load_checkpoint(self.args.resume, self.args, self.same)
        for name, module in self.modules.items():
            module.load_state_dict(saved[name])
        state = saved["resume"]
        with torch.no_grad():
            for name, tensor in self.replay.items():
                tensor[: len(saved["replay"][name])].copy_(saved["replay"][name])
            for name, tensor in self.tensors.items():
                tensor.copy_(state["tensors"][name])
        if state["envs"] is not None:
            envs.close()
            envs = pickle.loads(state["envs"])
            if link is not None:
                link.load_state_dict(state["link"])
        else:  # envs that cannot be saved (subprocesses, MuJoCo) restart with fresh episodes
            link.reset(envs.reset(seed=self.args.seed + state["counters"]["global_step"])[0])
        set_rng_state(state["rng"])
        return envs, state["counters"]

    def save(self, name: str, envs, link, counters: dict) -> str:
        size = int(self.replay_size) if self.replay else 0
        path = os.path.join(self.run_dir, name)
        state = {
            **{key: module.state_dict() for key, module in self.modules.items()},
            "args": dataclasses.asdict(self.args), "global_step": counters["global_step"],
            "replay": {key: tensor[:size].cpu() for key, tensor in self.replay.items()},
            "resume": {"counters": counters, "link": link.state_dict() if link else None, "rng": rng_state(),
                       "envs": env_state(envs),
                       "tensors": {key: tensor.detach().cpu() for key, tensor in self.tensors.items()}}}
        torch.save(state, path + ".tmp")  # then rename: a crash mid-write never leaves a truncated checkpoint
        os.replace(path + ".tmp", path)
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


def load_checkpoint(path: str, args, same: tuple[str, ...]) -> dict:
    """A checkpoint to resume from, checked against this run's flags `same` (one-line errors, exit 2)."""
    check(os.path.exists(path), f"--resume {path}: no such file; pass a checkpoint written with --save-model")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False)
    except Exception:
        raise UserError(f"--resume {path}: not a readable checkpoint (truncated or not from --save-model)") from None
    check(isinstance(saved, dict) and "resume" in saved, f"--resume {path}: this checkpoint has no resume state")
    for name in same:
        check(saved["args"][name] == getattr(args, name),
              f"--resume {path}: it was saved with --{name.replace('_', '-')} {saved['args'][name]}, "
              f"not {getattr(args, name)}; pass the same flags")
    return saved


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


def export_policy(policy: torch.nn.Module, obs_dim: int, path: str) -> str:
    """Save a deterministic policy (observation batch in, action batch out) as a torch.export `.pt2`, on CPU;
    `torch.export.load(path).module()` runs it without this project."""
    module = copy.deepcopy(policy).cpu().eval()
    batch = torch.export.Dim("batch", min=1)
    with torch.no_grad():
        program = torch.export.export(module, (torch.zeros(2, obs_dim),), dynamic_shapes=({0: batch},))
    partial = os.path.splitext(path)[0] + ".partial.pt2"  # torch.export warns on a name not ending in .pt2
    torch.export.save(program, partial)
    os.replace(partial, path)
    return path
