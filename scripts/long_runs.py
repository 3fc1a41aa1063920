"""Learning runs longer than one sitting: run them side by side until a deadline, stop each with Ctrl-C (it
checkpoints where an iteration ends), and resume them all on the next call, until each reaches its budget.

    nvidia-cuda-mps-control -d   # on one GPU: the runs' kernels share it at once instead of taking turns
    python scripts/long_runs.py --labels td3 sac ppo --seeds 1 2 3 --deadline 520   # again until all are ok
    python scripts/report.py

The tasks are scripts/registry.py's `long` ones (e.g. Ant-v5 at CleanRL's 1M-step budget). A run's folders stay
under --runs-dir between calls. Each run gets one JSON in --out, in the learning suite's format: `partial` with
its segments until it is done, then `ok` with the return curve stitched over the segments (wall seconds add up
across them), the mean return of its last 20 training episodes, and the mean return of 10 deterministic
episodes of its final policy (scripts/evaluate.py: what CleanRL's model cards report).
"""

from __future__ import annotations

import csv
import datetime
import glob
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from scripts.benchmark import PATH_FLAGS, machine  # noqa: E402
from scripts.registry import ALGORITHMS, Task  # noqa: E402


@dataclass
class Args:
    labels: list[str] = field(default_factory=list)
    """only these tasks, by label (empty: every long task)"""
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    """seeds of each task"""
    runs: list[str] = field(default_factory=list)
    """only these runs, as label/env-id/seed (e.g. sac/Ant-v4/1); replaces --labels and --seeds"""
    path: str = "compile+cudagraphs"
    """the execution path of every run"""
    deadline: float = 520.0
    """seconds after which unfinished runs are stopped (Ctrl-C) to be resumed by the next call"""
    out: str = os.path.join(ROOT, "results", "learning")
    """the JSON of each run"""
    runs_dir: str = os.path.join(ROOT, "runs", "long")
    """the runs' folders (checkpoints, metrics), kept between calls"""
    checkpoint_every: int = 250_000
    """env steps between periodic checkpoints (the run resumes from the last one if a stop fails)"""


def target(args: Args, task: Task, seed: int) -> str:
    return os.path.join(args.out, f"{task.label}__{task.env_id}__{args.path}__s{seed}.json")


def flags_of(args: Args, task: Task, seed: int) -> list[str]:
    return ["--env-id", task.env_id, "--seed", str(seed), "--total-timesteps", str(task.steps),
            *PATH_FLAGS[args.path], *task.flags]


def newest_run(runs_dir: str) -> str | None:
    folders = [d for d in glob.glob(os.path.join(runs_dir, "*")) if os.path.isdir(d)]
    return max(folders, key=os.path.getmtime) if folders else None


def mps_daemon_running() -> bool:
    """Whether a CUDA MPS control daemon runs on this machine: without one, CUDA quietly time-slices, whatever
    CUDA_MPS_PIPE_DIRECTORY says."""
    for comm in glob.glob("/proc/[0-9]*/comm"):
        try:
            if open(comm).read().startswith("nvidia-cuda-mps"):
                return True
        except OSError:  # the process ended while we looked
            pass
    return False


def stitched_curve(segments: list[dict]) -> tuple[dict, float | None]:
    """Episodic returns of every segment as (step, seconds, return), seconds continuing across segments; and
    when a --stop-at-return run reached its return, the seconds until then."""
    steps, seconds, returns, offset, solved = [], [], [], 0.0, None
    for segment in segments:
        with open(os.path.join(ROOT, segment["run_dir"], "metrics.csv")) as f:
            for row in csv.DictReader(f):
                if row["name"] == "episodic_return":
                    steps.append(int(row["step"]))
                    seconds.append(offset + float(row["seconds"]))
                    returns.append(float(row["value"]))
                elif row["name"] == "solved_seconds":
                    solved = offset + float(row["value"])
        offset += segment["wall_seconds"]
    stride = max(1, len(steps) // 200)
    return {"steps": steps[::stride], "seconds": seconds[::stride], "returns": returns[::stride]}, solved


def evaluate(run_dir: str) -> float | None:
    out = os.path.join(run_dir, "evaluation.json")
    proc = subprocess.run([sys.executable, "scripts/evaluate.py", run_dir, "--episodes", "10", "--out", out],
                          cwd=ROOT, capture_output=True, text=True)
    return json.load(open(out))["mean_return"] if proc.returncode == 0 else None


def main(args: Args) -> None:
    def wanted(task: Task, seed: int) -> bool:
        if args.runs:
            return f"{task.label}/{task.env_id}/{seed}" in args.runs
        return (not args.labels or task.label in args.labels) and seed in args.seeds

    tasks = [task for algorithm in ALGORITHMS.values() for task in algorithm.long]
    seeds = sorted(set(args.seeds) | {int(run.rsplit("/", 1)[1]) for run in args.runs})
    os.makedirs(args.out, exist_ok=True)
    info = machine()
    started = {}
    for task in tasks:
        for seed in seeds:
            if not wanted(task, seed):
                continue
            path = target(args, task, seed)
            record = json.load(open(path)) if os.path.exists(path) else {"segments": []}
            if record.get("status") == "ok":
                continue
            flags = flags_of(args, task, seed)
            runs_dir = os.path.join(args.runs_dir, f"{task.label}-{task.env_id}-s{seed}")
            last = record["segments"][-1:]
            if last and not os.path.exists(os.path.join(ROOT, last[0]["checkpoint"])):
                print(f"{os.path.basename(path)}: its checkpoint went with an earlier machine; starting over")
                record, last = {"segments": []}, []
            resume = ["--resume", os.path.join(ROOT, last[0]["checkpoint"])] if last else []
            command = [sys.executable, f"algos/{task.script}.py", *flags, "--save-model", "--checkpoint-every",
                       str(args.checkpoint_every), "--runs-dir", runs_dir, *resume]
            os.makedirs(runs_dir, exist_ok=True)
            log = open(os.path.join(runs_dir, f"segment{len(record['segments']) + 1}.log"), "w")
            process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            started[path] = (task, seed, record, runs_dir, process, log.name)
    print(f"{len(started)} runs side by side until {args.deadline:.0f} s", flush=True)
    start = time.time()
    while any(p.poll() is None for *_, p, _ in started.values()) and time.time() - start < args.deadline:
        time.sleep(5)
    for *_, process, _ in started.values():
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # stops where the iteration ends, after its checkpoint
    for *_, process, _ in started.values():
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()

    records = {}
    for path, (task, seed, record, runs_dir, _, log_name) in started.items():
        run_dir = newest_run(runs_dir)
        summary_path = os.path.join(run_dir or "", "summary.json")
        summary = json.load(open(summary_path)) if os.path.exists(summary_path) else {"status": "failed"}
        if summary.get("checkpoint"):
            record["segments"].append({"run_dir": os.path.relpath(run_dir, ROOT),
                                       "checkpoint": os.path.relpath(summary["checkpoint"], ROOT),
                                       "steps": summary["steps"], "wall_seconds": summary["wall_seconds"],
                                       "concurrent_runs": len(started)})
        record.update({
            "algo": task.label, "env_id": task.env_id, "path": args.path, "seed": seed, "steps": task.steps,
            "command": shlex.join(["python", f"algos/{task.script}.py", *flags_of(args, task, seed)]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": info, "suite": "learning", "scale": 1.0,
            # CUDA MPS lets the runs' kernels share the GPU at once instead of taking turns.
            "gpu_sharing": "mps" if mps_daemon_running() else "time-sliced",
            "concurrent_runs": max([len(started)] + [s.get("concurrent_runs", 1) for s in record["segments"]]),
            "reached": summary.get("steps", record.get("reached", 0)),
        })
        if summary["status"] == "done":
            segments = record["segments"]
            curve, solved_seconds = stitched_curve(segments)
            record.update(status="ok", final_return=summary["mean_return_last20"],
                          run_wall_seconds=sum(s["wall_seconds"] for s in segments), curve=curve,
                          solved_seconds=solved_seconds, episodes=summary["episodes"], eval_return=evaluate(run_dir))
        elif summary["status"] == "interrupted" and summary.get("checkpoint"):
            record.update(status="partial", return_at_stop=summary["mean_return_last20"])
        else:
            record.update(status="failed", error=open(log_name).read()[-1500:])
        with open(path + ".tmp", "w") as f:
            json.dump(record, f, indent=1)
        os.replace(path + ".tmp", path)
        records[path] = record

    print(f"{'run':40} {'status':8} {'steps':>9} {'return':>8} {'eval':>8} segments")
    for path, (task, seed, *_rest) in started.items():
        record = records[path]
        fmt = lambda v: f"{v:8.0f}" if isinstance(v, (int, float)) else f"{'-':>8}"  # noqa: E731
        print(f"{task.label + ' ' + task.env_id + ' s' + str(seed):40} {record['status']:8} {record['reached']:>9} "
              f"{fmt(record.get('final_return'))} {fmt(record.get('eval_return'))} {len(record['segments'])}")
    finished = [record for record in records.values() if record["status"] == "ok"]
    for label, env_id in sorted({(r["algo"], r["env_id"]) for r in finished}):
        returns = [r["final_return"] for r in finished if (r["algo"], r["env_id"]) == (label, env_id)]
        spread = statistics.stdev(returns) if len(returns) > 1 else 0.0
        print(f"{label} {env_id}: {statistics.mean(returns):.0f} ± {spread:.0f} over {len(returns)} seeds")


if __name__ == "__main__":
    import tyro

    main(tyro.cli(Args, description=__doc__.split("\n\n")[0]))
