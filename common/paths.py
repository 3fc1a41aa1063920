"""The execution path (eager, --compile, --cudagraphs or both), applied the same way in every script.

Each script has one path block:

    path = ExecutionPath(args, device)
    update = path.compile(update)     # the functions that do the math: torch.compile with --compile
    update = path.capture(update)     # the functions the loop calls: a CUDA graph with --cudagraphs

Each is the identity when its flag is off, so the four paths run the same code. Compile first, then capture:
a captured function may call compiled ones, and the graph records whatever kernels they launch.

One constraint of torch.compile shapes the scripts: a compiled function calls backward() once at most (torch
2.11 fails on a compiled function with two backward passes). An update with two losses (critic and actor) is
two hot functions, each compiled and captured on its own.
"""

from __future__ import annotations

import ast
import functools
import gc
import logging
import sys
import warnings
from collections.abc import Callable
from typing import TypeVar

import torch

from .errors import check

F = TypeVar("F", bound=Callable)

# torch.optim wraps each step in a profiler marker, which compiled code drops with a warning on every compiled
# run; it says nothing about the run, so it is not printed.
logging.getLogger("torch._dynamo.variables.ctx_manager").addFilter(
    lambda record: not record.getMessage().startswith("Profiler record function"))


class ExecutionPath:
    """`--compile` and `--cudagraphs` for one run. `capturable`: what the optimizers need (`capturable=True`
    keeps Adam's step count on the device, as a graph captured without compile needs); `fused`: Adam's step as
    one fused kernel (`--fused-optimizer`)."""

    def __init__(self, args, device: torch.device):
        if args.cudagraphs and device.type != "cuda":
            print("warning: --cudagraphs needs a CUDA device; running without CUDA graphs", file=sys.stderr)
        self.device = device
        self.compiling = args.compile
        self.capturing = args.cudagraphs and device.type == "cuda"
        self.capturable = self.capturing and not self.compiling
        # Calls before the capture run the function as is; after torch.compile those still compile (and may
        # recompile once), so capture later. The capture is the call after these.
        self.warmup = 3 if self.compiling else 2
        # Adam given its learning rate as a device tensor (annealed in place: PPO) needs capturable=True on CUDA in
        # the paths that do not compile (compiled, the compiled step reads the tensor).
        self.capturable_with_lr_tensor = device.type == "cuda" and not self.compiling
        self.fused = args.fused_optimizer  # Adam's fused=True: one kernel per optimizer step
        torch.set_float32_matmul_precision("high" if args.tf32 else "highest")  # --tf32, in every path alike
        # Every path draws the same numbers from the same seed: eager's random kernels (fallback_random), called in
        # eager's order. Inductor's reorder_for_locality moves each op of a graph without gradients (an act step)
        # next to its first use; up to torch 2.12 it moves random ops too, so a compiled act step drew its uniform
        # random actions before its Gaussian noise (torch 2.13's pass leaves random ops in place).
        self.compile_options = {"fallback_random": True, "reorder_for_locality": False, **inductor_options(args)}

    def compile(self, fn: F) -> F:
        if not self.compiling:
            return fn
        compiled = torch.compile(fn, options=self.compile_options)
        calls = 0

        @functools.wraps(fn)
        def run(*args, **kwargs):
            nonlocal calls
            out = compiled(*args, **kwargs)
            if calls < 2:
                calls += 1
                if calls == 2:
                    # Compiling (and a possible recompile on the second call) leaves many long-lived objects:
                    # freezing them keeps the garbage collector from rescanning them all during the loop.
                    gc.collect()
                    gc.freeze()
            return out

        return run

    def capture(self, fn: F) -> F:
        if not self.capturing:
            return fn
        from tensordict.nn import CudaGraphModule

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return CudaGraphModule(fn, warmup=self.warmup, device=self.device)


def inductor_options(args) -> dict[str, object]:
    """The run's inductor options (--max-autotune, --inductor NAME=VALUE), checked. They go to each
    torch.compile of the run, never into torch._inductor.config, so a later run in the same process (a test, a
    notebook) compiles with its own flags only."""
    for flag, used in (("--max-autotune", args.max_autotune), ("--inductor", args.inductor)):
        check(args.compile or not used, f"{flag} sets options of what --compile builds; add --compile")
    tuning = ["max_autotune=True", "coordinate_descent_tuning=True"] if args.max_autotune else []
    return dict(inductor_option(option) for option in tuning + list(args.inductor))


def inductor_option(option: str) -> tuple[str, object]:
    """`NAME=VALUE`, NAME an option of torch._inductor.config and VALUE a Python literal of its type, as a pair."""
    name, _, text = option.partition("=")
    owner, *path = [torch._inductor.config, *name.split(".")]
    for part in path[:-1]:
        owner = getattr(owner, part, None)
    missing = object()
    current = getattr(owner, path[-1], missing) if "=" in option and path[-1] else missing
    check(current is not missing and not isinstance(current, type(torch._inductor.config.triton)),
          f"--inductor {option!r}: expected NAME=VALUE with NAME an option of torch._inductor.config "
          "(e.g. triton.enable_pdl=True)")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = missing
    fits = current is None or type(value) is type(current) or (type(current) is float and type(value) is int)
    check(value is not missing and fits,
          f"--inductor {option!r}: VALUE must be a Python literal of the option's type "
          f"({type(current).__name__}, now {current!r})")
    return name, float(value) if type(current) is float else value  # torch.compile checks the type
