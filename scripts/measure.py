"""Measure a training script from outside: steady-state steps/s, startup (compile and capture) and the floor.

    python scripts/measure.py td3 --out td3.json -- --env-id HalfCheetah-v5 --compile --cudagraphs

Runs the script's own `main` with the flags after `--`, unchanged, with two hooks:
- every function the script hands to `ExecutionPath.capture` (what its loop calls) is watched: its first calls
  (compile, warmup, capture) are synchronized and timed as startup, and once each of them is past those, the
  steady state begins at the next progress report;
- `RunLogger.progress` records the step and time of each loop iteration: steady-state steps/s is the median of
  windows of the run's window length after that point (and the whole steady span, for reference).
With CUDA graphs, the watched calls of the steady span are then replayed back to back, synchronized once at the
end: the floor, the GPU time of the same work with no simulator and no host work in between.
A run of `--num-seeds N` is measured as the work it does: `steady_sps` counts every seed's env steps (N times one
seed's, also kept as `steady_sps_per_seed`) and the floor is per env step of one seed of the N.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass

import torch
import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # algos/ of this checkout, as the scripts see it
from scripts.registry import ALGORITHMS  # noqa: E402
from turborl.cli import UserError, parse  # noqa: E402
from turborl.errors import run_tool  # noqa: E402
from turborl.logger import RunLogger  # noqa: E402
from turborl.paths import ExecutionPath  # noqa: E402


@dataclass
class Args:
    script: tyro.conf.Positional[str]
    """the script to measure (a name in scripts/registry.py)"""
    out: str = "measure.json"
    """where the measurements go (JSON)"""


class Watch:
    """The measurements of one run; installs the hooks while it is active."""

    def __init__(self):
        self.startup_seconds, self.watched, self.calls = 0.0, [], []
        self.marks: list[tuple[int, float]] = []  # (step, time) of each progress after the steady state began
        self.path, self.window_steps = None, None

    def capture(self, path: ExecutionPath, fn):
        captured, counted = Watch.original_capture(path, fn), [0]
        self.path = path
        sync = torch.cuda.synchronize if path.device.type == "cuda" else (lambda: None)
        startup_calls = path.warmup + 1  # the warmup calls and the capture

        def run(*args):
            if counted[0] >= startup_calls:
                if self.marks:
                    self.calls.append((captured, args))
                return captured(*args)
            counted[0] += 1
            start = time.perf_counter()
            out = captured(*args)
            sync()
            self.startup_seconds += time.perf_counter() - start
            return out

        self.watched.append(counted)
        return run

    def progress(self, logger: RunLogger, step: int) -> None:
        Watch.original_progress(logger, step)
        if logger.quiet:  # the other seeds of --num-seeds: their step is the first seed's
            return
        self.window_steps = logger.window_steps  # the run's own windows
        if self.marks or all(counted[0] > self.path.warmup for counted in self.watched):
            self.marks.append((step, time.perf_counter()))

    def floor_us(self) -> float | None:
        """Microseconds per env step of the steady span's calls replayed back to back (captured paths only)."""
        if not (self.path and self.path.capturing and len(self.marks) > 1 and self.calls):
            return None
        torch.cuda.synchronize()
        start = time.perf_counter()
        for fn, args in self.calls:
            fn(*args)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / (self.marks[-1][0] - self.marks[0][0]) * 1e6

    def result(self, window_steps: int) -> dict:
        if len(self.marks) < 2:
            return {"steady_sps": None, "steady_sps_whole": None, "startup_seconds": self.startup_seconds}
        (first_step, first_time), (last_step, last_time) = self.marks[0], self.marks[-1]
        windows, start = [], self.marks[0]
        for step, now in self.marks[1:]:
            if step - start[0] >= window_steps:
                windows.append((step - start[0]) / (now - start[1]))
                start = (step, now)
        whole = (last_step - first_step) / (last_time - first_time)
        return {"steady_sps": statistics.median(windows) if windows else whole, "steady_sps_whole": whole,
                "steady_windows": len(windows), "steady_from_step": first_step,
                "startup_seconds": self.startup_seconds}


Watch.original_capture, Watch.original_progress = ExecutionPath.capture, RunLogger.progress


def measure(args: Args, script_argv: list[str]) -> dict:
    if args.script not in ALGORITHMS:
        raise UserError(f"no script {args.script!r}; pick one of {', '.join(ALGORITHMS)}")
    script = importlib.import_module(f"algos.{args.script}")
    watch = Watch()
    ExecutionPath.capture = lambda path, fn: watch.capture(path, fn)
    RunLogger.progress = lambda logger, step: watch.progress(logger, step)
    try:
        script_args = parse(script.Args, script_argv)
        torch.set_num_threads(script_args.threads)  # as common/cli.py's entry point does
        summary = script.main(script_args)
    finally:
        ExecutionPath.capture, RunLogger.progress = Watch.original_capture, Watch.original_progress
    record = {**watch.result(watch.window_steps), "floor_us": watch.floor_us(), "summary": summary}
    seeds = getattr(script_args, "num_seeds", 1)
    if seeds > 1:
        record.update(num_seeds=seeds, steady_sps_per_seed=record["steady_sps"])
        for key in ("steady_sps", "steady_sps_whole"):
            record[key] = record[key] and record[key] * seeds
        record["floor_us"] = record["floor_us"] and record["floor_us"] / seeds
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    return record


if __name__ == "__main__":
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    run_tool(measure, parse(Args, argv[:split], description=__doc__.strip()), argv[split + 1:])
