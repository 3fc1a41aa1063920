"""Where a run's time goes: the kernels (CUDA) or ops (CPU) of a few steady loop iterations of a real script.

    python scripts/profile_run.py ppo_device_envs --skip 5 --active 3 -- --num-envs 4096 --compile --cudagraphs
    python scripts/profile_run.py td3 --skip 3000 --active 50 -- --compile --cudagraphs --learning-starts 1000

Runs the script's own `main` with the flags after `--` under torch.profiler. A loop iteration is one call of
the run's progress report: an env step, or a whole iteration where the script runs one as a single call
(PPO on device envs); in a `--num-seeds` run, one step of every seed (counted once, not once per seed). The
first `--skip` iterations pass unprofiled (compile and capture happen there), the next `--active` are recorded,
then the run stops. Prints the most expensive kernels (CUDA) or ops (CPU), the GPU time and kernel count per
iteration, and writes a Chrome trace (open it in Perfetto).
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

import torch
import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # algos/ of this checkout, as the scripts see them
from scripts.registry import ALGORITHMS  # noqa: E402
from turborl.cli import UserError, parse  # noqa: E402
from turborl.errors import run_tool  # noqa: E402
from turborl.logger import RunLogger  # noqa: E402


@dataclass
class Args:
    algo: tyro.conf.Positional[str]
    """the script to profile (a name in scripts/registry.py)"""
    skip: int = 10
    """loop iterations before the recorded ones (past compile and capture: see the script's startup time)"""
    active: int = 5
    """loop iterations recorded"""
    rows: int = 25
    """rows of the table"""
    trace: str = "runs/profile_trace.json"
    """where the Chrome trace goes (runs/, like the run folders, is not tracked by git)"""


class WindowDone(Exception):
    """Raised from the progress report once the recorded iterations are over: the run has nothing more to say."""


def profile(args: Args, script_argv: list[str]) -> str:
    """Profile the run; returns the printed report."""
    if args.skip < 1 or args.active < 1:
        raise UserError(f"--skip must be >= 1 and --active >= 1 (got {args.skip}, {args.active})")
    if args.algo not in ALGORITHMS:
        raise UserError(f"no script {args.algo!r}; pick one of {', '.join(ALGORITHMS)}")
    script = importlib.import_module(f"algos.{args.algo}")
    script_args = parse(script.Args, script_argv)
    on_gpu = torch.cuda.is_available() and script_args.cuda
    activities = [torch.profiler.ProfilerActivity.CPU, *([torch.profiler.ProfilerActivity.CUDA] if on_gpu else [])]
    calls = 0
    report_progress = RunLogger.progress

    def progress(logger, step: int) -> None:
        nonlocal calls
        report_progress(logger, step)
        if logger.quiet:  # the other seeds of --num-seeds report the first seed's step: the same iteration
            return
        calls += 1
        if calls == args.skip:
            if on_gpu:
                torch.cuda.synchronize()  # the skipped iterations' kernels stay out of the window
            profiler.start()
        elif calls == args.skip + args.active:
            if on_gpu:
                torch.cuda.synchronize()
            profiler.stop()
            raise WindowDone

    profiler = torch.profiler.profile(activities=activities)
    RunLogger.progress = progress
    try:
        script.main(script_args)
    except WindowDone:
        pass
    finally:
        RunLogger.progress = report_progress
    if calls < args.skip + args.active:
        raise UserError(f"the run ended after {calls} loop iterations, before the recorded window "
                         f"({args.skip} + {args.active}); give it more --total-timesteps or a smaller --skip")
    os.makedirs(os.path.dirname(os.path.abspath(args.trace)), exist_ok=True)
    profiler.export_chrome_trace(args.trace)
    averages = profiler.key_averages()
    lines = [averages.table(sort_by="self_device_time_total" if on_gpu else "self_cpu_time_total",
                            row_limit=args.rows)]
    if on_gpu:
        kernels = [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        busy_us = sum(e.device_time for e in kernels)
        lines.append(f"per loop iteration: {busy_us / args.active:.1f} us of GPU kernels, "
                     f"{len(kernels) / args.active:.1f} kernels")
    lines.append(f"trace: {args.trace}")
    report = "\n".join(lines)
    print(report)
    return report


if __name__ == "__main__":
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    run_tool(profile, parse(Args, argv[:split], description=__doc__.strip()), argv[split + 1:])
