"""Run plumbing: the CLI entry point, user errors, device and seeding, and the path switch."""

from __future__ import annotations

import functools
import random
import sys
import time
import warnings
from typing import Callable, TypeVar

import numpy as np
import torch

T = TypeVar("T")


class UserError(Exception):
    """A mistake in the user's input: reported as one line, exit code 2, no traceback."""


def check(condition: bool, message: str) -> None:
    """Raise a UserError with `message` (which names the bad value and the fix) unless `condition`."""
    if not condition:
        raise UserError(message)


def cli(main: Callable[[T], object], args_type: type[T], argv: list[str] | None = None) -> None:
    """Parse `args_type` with tyro and run `main`; user errors print one line and exit 2."""
    import tyro

    args = tyro.cli(args_type, args=argv, description=(sys.modules[main.__module__].__doc__ or "").strip())
    try:
        main(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def pick_device(cuda: bool) -> torch.device:
    """CUDA when asked for and present, else CPU (a run asked for CUDA without it says so once)."""
    if cuda and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def seed_everything(seed: int, deterministic: bool = True) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = deterministic


def resolve_cudagraphs(cudagraphs: bool, device: torch.device) -> bool:
    """CUDA graphs need a CUDA device: without one, warn once and run without graphs."""
    if cudagraphs and device.type != "cuda":
        print("warning: --cudagraphs needs a CUDA device; running without CUDA graphs", file=sys.stderr)
        return False
    return cudagraphs


class StartupClock:
    """Wall time spent in the calls that compile or capture (reported apart from steady-state speed)."""

    seconds = 0.0


def accelerate(
    fn: Callable, *, compile: bool, cudagraphs: bool, device: torch.device, warmup: int | None = None
) -> Callable:
    """Apply the chosen path to a hot function: eager, torch.compile, CUDA graph, or compile then graph.

    The first calls of a compiled or captured function compile / record it; their wall time (synchronized)
    is added to `StartupClock.seconds` so speed can be measured on steady state alone. `cudagraphs` must
    already be resolved against the device (see `resolve_cudagraphs`).
    """
    if not (compile or cudagraphs):
        return fn
    if compile:
        # Random ops keep eager's kernels so every path draws the same numbers from the same seed.
        torch._inductor.config.fallback_random = True
        fn = torch.compile(fn)
    slow_calls = 1
    if cudagraphs:
        from tensordict.nn import CudaGraphModule

        # After torch.compile the first calls still compile (and may recompile once): capture later.
        warmup = warmup or (3 if compile else 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn = CudaGraphModule(fn, warmup=warmup, device=device)
        slow_calls = warmup
    calls = 0
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    @functools.wraps(getattr(fn, "module", fn))
    def run(*args, **kwargs):
        nonlocal calls
        if calls >= slow_calls:
            return fn(*args, **kwargs)
        calls += 1
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        sync()
        StartupClock.seconds += time.perf_counter() - start
        return out

    return run



class HostLink:
    """The per-step exchange between a CPU environment and the device, without stalling the GPU.

    The env writes its results into `np_in` (a pinned host buffer); `send()` starts an asynchronous copy to
    the device and returns the device tensor. `fetch(t)` starts copying a device result (the action) into
    pinned memory and records an event; `wait()` blocks on that event only (never a full synchronize), so
    work launched after `fetch` (an update) keeps running on the GPU while the CPU steps the env.
    """

    def __init__(self, in_shape, out_shape, out_dtype: torch.dtype, device: torch.device):
        pinned = device.type == "cuda"
        self.host_in = torch.zeros(in_shape, pin_memory=pinned)
        self.np_in = self.host_in.numpy()
        self.dev_in = torch.zeros(in_shape, device=device) if pinned else self.host_in
        self.host_out = torch.zeros(out_shape, dtype=out_dtype, pin_memory=pinned)
        self.np_out = self.host_out.numpy()
        self.event = torch.cuda.Event() if pinned else None

    def send(self) -> torch.Tensor:
        if self.event is not None:
            self.dev_in.copy_(self.host_in, non_blocking=True)
        return self.dev_in

    def fetch(self, result: torch.Tensor) -> None:
        self.host_out.copy_(result, non_blocking=True)
        if self.event is not None:
            self.event.record()

    def wait(self):
        if self.event is not None:
            self.event.synchronize()
        return self.np_out
