"""Run folder, metrics CSV, progress bar and optional wandb."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import sys
import time
from collections import deque

from .cli import TrainingStopped, UserError


class RunLogger:
    """Everything a run reports goes through here.

    - `runs/{env}__{algo}__{seed}__{time}/`: `args.json`, `metrics.csv` (long format: step, seconds, name,
      value; flushed as written so a run that dies keeps its metrics), `summary.json` at the end.
    - A tqdm bar (plain lines every `print_every` seconds when stderr is not a terminal) with steps/s and the
      mean return of the last 20 episodes.
    - Steps/s of each window of `window_steps` steps, logged as `sps` (the first windows include compiling
      and capturing; scripts/measure.py measures steady-state speed from outside).
    - wandb only with `track=True` (WANDB_MODE=offline works without network).
    """

    def __init__(self, args, algo: str, total_steps: int, run_root: str = "runs", print_every: float = 10.0):
        self.run_name = f"{args.env_id}__{algo}__{args.seed}__{int(time.time())}"
        self.dir = os.path.join(run_root, self.run_name)
        os.makedirs(self.dir, exist_ok=True)
        self.args = dataclasses.asdict(args)
        with open(os.path.join(self.dir, "args.json"), "w") as f:
            json.dump(self.args, f, indent=2, default=str)
        self._csv_file = open(os.path.join(self.dir, "metrics.csv"), "w", newline="")
        self._csv = csv.writer(self._csv_file)
        self._csv.writerow(["step", "seconds", "name", "value"])
        self.start = time.perf_counter()
        self.total_steps = total_steps
        self.returns: deque[float] = deque(maxlen=20)
        self.episodes = 0
        self.window_steps = max(total_steps // 50, 1000)
        self._window_start: tuple[int, float] | None = None  # (step, time) of the first `progress` on
        self._window_sps = float("nan")
        self._step = 0
        self._first_progress = (0, self.start)
        self._progress_time = self.start  # of the last `progress`
        self._tty = sys.stderr.isatty()
        self._print_every = print_every
        self._last_print = self.start
        self._bar = None
        if self._tty:
            from tqdm import tqdm

            self._bar = tqdm(total=total_steps, unit="step", dynamic_ncols=True)
        self._wandb = None
        if getattr(args, "track", False):
            try:
                import wandb
            except ImportError:
                raise UserError("--track needs wandb: pip install -e '.[track]' (or drop --track)") from None
            self._wandb = wandb.init(
                project=getattr(args, "wandb_project", "turborl"),
                entity=getattr(args, "wandb_entity", None),
                name=self.run_name,
                config=self.args,
                dir=self.dir,
            )

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def log(self, step: int, **metrics: float) -> None:
        self._write(step, [metrics])
        for name, value in metrics.items():
            if name.endswith("loss") and not math.isfinite(value):
                raise TrainingStopped(f"{name} became {value} at step {step}; lower the learning rate or check the "
                                      f"rewards (metrics and, with --save-model, a checkpoint are in {self.dir})")

    def log_episodes(self, step: int, finished: list[tuple[float, int]]) -> None:
        """The (return, length) of each episode that ended by `step`: one write and flush for all of them
        (thousands of envs end hundreds of episodes per iteration)."""
        if not finished:
            return
        self.returns.extend(episodic_return for episodic_return, _ in finished)
        self.episodes += len(finished)
        self._write(step, [{"episodic_return": r, "episodic_length": length} for r, length in finished])

    def _write(self, step: int, records: list[dict]) -> None:
        """Rows of the metrics CSV (and wandb records), flushed once."""
        seconds = round(self.elapsed(), 4)
        self._csv.writerows([step, seconds, name, float(value)]
                            for metrics in records for name, value in metrics.items())
        if self._wandb is not None:
            for metrics in records:
                self._wandb.log(metrics, step=step)
        self._csv_file.flush()

    def mean_return(self) -> float:
        return sum(self.returns) / len(self.returns) if self.returns else float("nan")

    def progress(self, step: int) -> None:
        """Call once per loop iteration with the global step (cheap: host work only)."""
        advanced, self._step = step - self._step, step
        now = self._progress_time = time.perf_counter()
        if self._window_start is None:
            self._window_start = self._first_progress = (step, now)
        if step - self._window_start[0] >= self.window_steps:
            self._window_sps = (step - self._window_start[0]) / (now - self._window_start[1])
            self.log(step, sps=self._window_sps)
            self._window_start = (step, now)
        if self._bar is not None:
            self._bar.update(advanced)
            if now - self._last_print > 0.5:
                self._bar.set_postfix(sps=f"{self._display_sps(now):.0f}", ret=f"{self.mean_return():.1f}")
                self._last_print = now
        elif now - self._last_print > self._print_every:
            self._last_print = now
            print(
                f"step {step}/{self.total_steps}  sps {self._display_sps(now):.0f}  "
                f"return(last {len(self.returns)}) {self.mean_return():.1f}",
                file=sys.stderr,
                flush=True,
            )

    def _display_sps(self, now: float) -> float:
        """The last window's speed, once there is one."""
        return self._window_sps if self._window_sps == self._window_sps else self._step / max(now - self.start, 1e-9)

    def close(self, **extra) -> dict:
        """Write summary.json (steps, time, returns) and close everything; returns the summary."""
        first_step, first_time = self._first_progress
        trained, seconds = self._step - first_step, self._progress_time - first_time
        summary = {
            "steps": self._step,
            "wall_seconds": self.elapsed(),
            "sps": trained / seconds if seconds > 0 else 0.0,  # from the first iteration's end to the last's
            "episodes": self.episodes,
            "mean_return_last20": self.mean_return(),
            **extra,
        }
        with open(os.path.join(self.dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        if self._bar is not None:
            self._bar.close()
        self._csv_file.close()
        if self._wandb is not None:
            self._wandb.summary.update({k: v for k, v in summary.items() if isinstance(v, (int, float))})
            self._wandb.finish()
        print(
            f"done: {self._step} steps in {summary['wall_seconds']:.1f}s ({summary['sps']:.0f} steps/s), "
            f"return(last 20) {summary['mean_return_last20']:.1f}"
            f"; run folder {self.dir}",
            file=sys.stderr,
        )
        return summary
