"""Run folder, metrics CSV, progress bar and optional wandb."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import errno
import io
import json
import math
import os
import shlex
import shutil
import sys
import time
from collections import deque

import torch

from .cli import GracefulStop
from .envs import record_videos_in
from .errors import UserError


class SilentLogger:
    """What a torchrun rank other than 0 logs: nothing. RunLogger's calls; it still catches Ctrl-C (torchrun passes
    it to every rank), so each rank's loop stops where an iteration ends."""

    dir = None

    def __init__(self):
        self.stop = GracefulStop()
        self._start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def log(self, step: int, **metrics: float) -> None:
        pass

    def log_episodes(self, step: int, finished: list[tuple[float, int]]) -> None:
        pass

    def progress(self, step: int) -> None:
        pass

    def close(self, checkpoint: str | None = None, **extra) -> dict:
        self.stop.restore()
        return {"run_dir": None, **extra}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class RunLogger:
    """Everything a run reports goes through here.

    - `runs/{env}__{algo}__{seed}__{time}/`, created exclusively (`-2`, `-3`... when runs start in the same
      second): `args.json` (the flags and the device used), `metrics.csv` (long format: step, seconds, name,
      value; whole rows flushed as written, so a run that dies keeps its metrics), `summary.json` at the end
      (strict JSON: a value that does not exist, like the mean return of no episodes, is null).
    - `stop`: the loop's GracefulStop; a non-finite loss asks it to stop too.
    - A tqdm bar (plain lines every `print_every` seconds when stderr is not a terminal) with steps/s and the
      mean return of the last 20 episodes.
    - Steps/s of each window of `window_steps` steps, logged as `sps` (the first windows include compiling
      and capturing; scripts/measure.py measures steady-state speed from outside).
    - wandb only with `track=True`: offline into the run folder unless an account is configured.
    - `quiet`: files only, no bar and no lines (the seeds after the first of `--num-seeds`); `stop`: a
      GracefulStop to share (theirs is the first seed's).
    - `envs`: with --capture-video, their recordings go to the run folder's videos/ from now on.
    """

    def __init__(self, args, algo: str, total_steps: int, device, run_root: str = "runs",
                 print_every: float = 10.0, quiet: bool = False, stop: GracefulStop | None = None, envs=None):
        env_name = args.env_id.replace("/", "-")  # a namespaced id (ALE/Breakout-v5) names one folder, not two
        self.dir = make_run_dir(run_root, f"{env_name}__{algo}__{args.seed}__{int(time.time())}")
        self.run_name = os.path.basename(self.dir)
        self.device = torch.device(device)
        self.args = dataclasses.asdict(args)
        self._csv_path = os.path.join(self.dir, "metrics.csv")
        try:
            write_json(os.path.join(self.dir, "args.json"), {**self.args, "device": str(device)})
            self._csv_file = open(self._csv_path, "w", newline="")
        except OSError as err:
            with contextlib.suppress(OSError):  # what the folder may hold, by name: shutil.rmtree needs a free file
                for name in ("args.json", "metrics.csv"):  # descriptor, and EMFILE says there is none
                    if os.path.exists(os.path.join(self.dir, name)):
                        os.remove(os.path.join(self.dir, name))
                os.rmdir(self.dir)
            if err.errno == errno.EMFILE:  # --num-seeds: each seed's run keeps its metrics file open
                raise UserError(f"cannot open {self._csv_path}: too many open files; lower --num-seeds or raise "
                                "the limit (ulimit -n)") from None
            raise UserError(f"cannot write into {self.dir} ({err.strerror}); pass a writable --runs-dir") from None
        self._csv_size = 0  # bytes of whole rows written: a failed write is cut back to this
        self._write_rows([["step", "seconds", "name", "value"]])
        self.stop = stop or GracefulStop()
        self.quiet = quiet
        self.start = time.perf_counter()
        self.total_steps = total_steps  # what the loop runs: --total-timesteps rounded to whole iterations
        asked = getattr(args, "total_timesteps", total_steps)
        if total_steps < asked and not quiet:  # said once the checks have passed, not before an error
            print(f"note: --total-timesteps {asked} runs as {total_steps} steps, whole iterations of the loop "
                  "(CleanRL's rounding)", file=sys.stderr)
        self.returns: deque[float] = deque(maxlen=20)
        self.episodes = 0
        self.window_steps = max(total_steps // 50, 1000)
        self._window_start: tuple[int, float] | None = None  # (step, time) of the first `progress` on
        self._step = 0
        self._first_progress = (0, self.start)
        self._progress_time = self.start  # of the last `progress`
        self._tty = sys.stderr.isatty() and not quiet
        self._print_every = print_every
        self._last_print = self.start
        self._bar = None
        if self._tty:
            from tqdm import tqdm

            self._bar = tqdm(total=total_steps, unit="step", dynamic_ncols=True)
        self._wandb = None
        if getattr(args, "track", False):
            try:
                self._wandb = start_wandb(args, self.run_name, self.args, self.dir)
            except BaseException:
                if self._bar is not None:
                    self._bar.close()
                self._csv_file.close()
                self.stop.restore()
                shutil.rmtree(self.dir, ignore_errors=True)  # a run that never started leaves no folder
                raise
        if envs is not None:
            record_videos_in(envs, os.path.join(self.dir, "videos"))

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def log(self, step: int, **metrics: float) -> None:
        """Record metrics; a loss that is NaN or infinite asks the loop to stop (exit code 3)."""
        self._write(step, [metrics])
        for name, value in metrics.items():
            if name.endswith("loss") and not math.isfinite(value):
                seed = (f" in seed {self.args['seed']} (the seeds of a run stop together)"
                        if self.args.get("num_seeds", 1) > 1 else "")
                self.stop.request("stopped", f"{name} became {value} at step {step}{seed}; lower the learning rate or "
                                             f"check the rewards (metrics and, with --save-model, a checkpoint are "
                                             f"in {self.dir})")

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
        self._write_rows([step, seconds, name, float(value)] for metrics in records for name, value in metrics.items())
        if self._wandb is not None:
            for metrics in records:
                self._wandb.log(metrics, step=step)

    def _write_rows(self, rows) -> None:
        """Append whole CSV rows: on a failed write (disk full) the file is cut back to its last whole row."""
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)  # plain lines for awk and grep
        try:
            self._csv_file.write(text.getvalue())
            self._csv_file.flush()
            self._csv_size = self._csv_file.tell()
        except OSError as err:
            self._csv_file = _discard(self._csv_file, self._csv_path, self._csv_size)
            raise UserError(f"cannot write {self._csv_path} ({err.strerror}); free space or pick another "
                            "--runs-dir, then --resume from the run's last checkpoint") from None

    def state_dict(self) -> dict:
        """The episode counts a checkpoint carries, so a resumed run's summary counts the whole run."""
        return {"returns": list(self.returns), "episodes": self.episodes}

    def load_state_dict(self, state: dict) -> None:
        self.returns.extend(state["returns"])
        self.episodes = state["episodes"]

    def mean_return(self) -> float:
        return sum(self.returns) / len(self.returns) if self.returns else float("nan")

    def _returns_text(self) -> str:
        return f"return(last {len(self.returns)}) {self.mean_return():.1f}" if self.returns else "no episode ended"

    def progress(self, step: int) -> None:
        """Call once per loop iteration with the global step (cheap: host work only)."""
        advanced, self._step = step - self._step, step
        now = self._progress_time = time.perf_counter()
        if self._window_start is None:
            self._window_start = self._first_progress = self._shown = (step, now)
        if step - self._window_start[0] >= self.window_steps:
            self.log(step, sps=(step - self._window_start[0]) / (now - self._window_start[1]))
            self._window_start = (step, now)
        if self._bar is not None:
            self._bar.update(advanced)
            if now - self._last_print > 0.5:
                returns = {"ret": f"{self.mean_return():.1f}"} if self.returns else {}  # not `nan` before the first
                self._bar.set_postfix(sps=f"{self._recent_sps(step, now):.0f}", **returns)
                self._last_print = now
        elif now - self._last_print > self._print_every and not self.quiet:
            self._last_print = now
            print(f"step {step}/{self.total_steps}  sps {self._recent_sps(step, now):.0f}  {self._returns_text()}",
                  file=sys.stderr, flush=True)

    def _recent_sps(self, step: int, now: float) -> float:
        """Steps/s since the display last showed it: the rate now, not an average over a window that began
        before compiling or before learning started."""
        (shown_step, shown_time), self._shown = self._shown, (step, now)
        return (step - shown_step) / max(now - shown_time, 1e-9)

    def peak_gpu_memory_mb(self) -> float | None:
        """MiB the run held on its GPU at most: the caching allocator's reserve, captured graphs' memory pools
        included, the CUDA context (a few hundred MiB per process) not. None off CUDA."""
        if self.device.type != "cuda":
            return None
        return torch.cuda.max_memory_reserved(self.device) / 2**20

    def close(self, checkpoint: str | None = None, **extra) -> dict:
        """Write summary.json and close everything; returns the summary. Its `status`: done, interrupted
        (Ctrl-C before the last iteration), stopped (a non-finite loss) or failed (an exception is on its way out:
        the caller reports it)."""
        self.stop.restore()
        error = sys.exc_info()[0]
        failed = error is not None
        first_step, first_time = self._first_progress
        trained, seconds = self._step - first_step, self._progress_time - first_time
        reason = self.stop.reason
        if reason == "interrupted" and self._step >= self.total_steps:
            reason = None  # the signal came in the last iteration, which the loop finished: nothing is left to run
        summary = {
            "status": ("interrupted" if error is KeyboardInterrupt else "failed") if failed else reason or "done",
            "steps": self._step,
            "wall_seconds": self.elapsed(),
            "sps": trained / seconds if seconds > 0 else None,  # from the first iteration's end to the last's (none
            # in a run of one iteration)
            "episodes": self.episodes,
            "mean_return_last20": self.mean_return(),
            "checkpoint": checkpoint,
            "run_dir": self.dir,
            "peak_gpu_memory_mb": self.peak_gpu_memory_mb(),
            **extra,
        }
        if self._bar is not None:
            self._bar.close()
        self._csv_file.close()
        try:
            write_json(os.path.join(self.dir, "summary.json"), summary)
        except OSError as err:
            if not failed:  # else the error on its way out is the one to report
                raise UserError(f"cannot write {self.dir}/summary.json ({err.strerror}); free space") from None
        if self._wandb is not None:
            self._wandb.summary.update({k: v for k, v in summary.items() if isinstance(v, (int, float))})
            self._wandb.finish(exit_code=0 if summary["status"] == "done" else 1)
        if not failed and not self.quiet:
            sps = ("one iteration" if summary["sps"] is None
                   else f"{summary['sps']:.0f} steps/s after the first iteration")
            line = f"{self._step} steps in {summary['wall_seconds']:.1f}s ({sps}), {self._returns_text()}"
            resume = (f"; continue with: {resume_command(checkpoint)}" if checkpoint and summary["status"] != "done"
                      else "")
            print({"done": "done: ", "interrupted": "interrupted at ", "stopped": "stopped at "}[summary["status"]]
                  + f"{line}; run folder {self.dir}{resume}", file=sys.stderr)
            if summary["status"] == "stopped":
                print(f"error: {self.stop.message}", file=sys.stderr)
        return summary


def resume_command(checkpoint: str) -> str:
    """This process's command with `--resume checkpoint` in place of any --resume it had: the run's own flags,
    which a resume must repeat."""
    argv, kept = sys.argv[1:], []
    while argv:
        flag = argv.pop(0)
        if flag == "--resume" and argv:
            argv.pop(0)
        elif not flag.startswith("--resume="):
            kept.append(flag)
    return shlex.join(["python", sys.argv[0], *kept, "--resume", checkpoint])


def make_run_dir(root: str, name: str) -> str:
    """A new folder `root/name` (`name-2`, `name-3`... if taken: mkdir is atomic, so runs started in the same
    second never share one)."""
    try:
        os.makedirs(root, exist_ok=True)
        for attempt in range(1, 1000):
            path = os.path.join(root, name if attempt == 1 else f"{name}-{attempt}")
            try:
                os.mkdir(path)
                return path
            except FileExistsError:
                continue
    except OSError as err:
        raise UserError(f"--runs-dir {root}: cannot create a run folder there ({err.strerror}); "
                        "pass a writable directory") from None
    raise UserError(f"--runs-dir {root}: 999 runs named {name} already; pick another --runs-dir")


def write_json(path: str, data: dict) -> None:
    """Strict JSON (NaN and infinities become null), written whole or not at all."""
    def strict(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {key: strict(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [strict(item) for item in value]
        return value

    try:
        with open(path + ".tmp", "w") as f:
            json.dump(strict(data), f, indent=2, allow_nan=False, default=str)
        os.replace(path + ".tmp", path)
    except OSError:
        if os.path.exists(path + ".tmp"):
            os.remove(path + ".tmp")
        raise


def _discard(file, path: str, size: int):
    """Close `file` after a failed write, cut back to `size` bytes; returns a sink that drops later writes."""
    try:
        file.close()
    except OSError:
        pass  # the buffered tail that did not fit is dropped with it
    os.truncate(path, size)
    return open(os.devnull, "w")


def start_wandb(args, run_name: str, config: dict, run_dir: str):
    """wandb.init, offline unless an account is configured: `--track` needs no network and no account (the
    run is then synced later with `wandb sync`); WANDB_MODE, if set, decides."""
    try:
        import wandb
    except ImportError:
        raise UserError("--track needs wandb: pip install -e '.[track]' (or drop --track)") from None
    mode = os.environ.get("WANDB_MODE") or ("online" if wandb_account() else "offline")
    if mode == "offline" and "WANDB_MODE" not in os.environ:
        print(f"wandb: no account configured (wandb login): logging offline into {run_dir}/wandb; "
              "upload later with `wandb sync`", file=sys.stderr)
    try:
        # create_new: a --num-seeds run holds one wandb run per seed, each logged through its own object
        return wandb.init(project=args.wandb_project, entity=args.wandb_entity, name=run_name, config=config,
                          dir=run_dir, mode=mode, reinit="create_new")
    except Exception as err:
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"--track: wandb could not start ({first_line}); set WANDB_MODE=offline to log "
                        "without network") from None


def wandb_account() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        import netrc

        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False
