"""Learning runs longer than one sitting: the parity suite against CleanRL (scripts/registry.py's `parity` tasks:
CleanRL's benchmark envs, versions, budgets, default flags and seeds) and the registry's other `long` tasks.

    nvidia-cuda-mps-control -d                # on one GPU: the runs' kernels share it at once instead of taking turns
    python scripts/long_runs.py               # the whole parity suite, 12 runs side by side, to the end
    python scripts/report.py                  # -> results/parity/README.md (table and plots)

Runs wait for a place (--jobs) and start as others end. With --deadline, the runs still going are stopped with
Ctrl-C (each checkpoints where an iteration ends) and the next call resumes them, so a suite longer than one
sitting runs call after call (e.g. `--labels td3 sac --envs Hopper-v4 --deadline 540`, again until all are ok).
A run whose process ended on its own after its call had stopped (killed, say, so that the run could pass its
deadline) is recorded by the next call from its folders, not run again: start that call once the process has
ended (one still running would be resumed beside itself from its last checkpoint).
The runs' folders stay under --runs-dir between calls. Each run gets one JSON in --out, in the learning suite's
format: `partial` with its segments until it is done, then `ok` with the return curve stitched over the segments
(wall seconds add up across them), the mean return of its last 20 training episodes, and the mean return of 10
deterministic episodes of its final policy (scripts/evaluate.py: what CleanRL's model cards report).

With --num-seeds N, one process trains N consecutive seeds of a task at once (the scripts' --num-seeds: seeds as
a batch axis), and each of its seeds still gets its own JSON, read from its own run folder.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import glob
import importlib
import json
import math
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from scripts.benchmark import PATH_FLAGS, captures_graphs, check_selection, gpu_sharing, machine  # noqa: E402
from scripts.registry import ALGORITHMS, Task  # noqa: E402
from turborl.errors import UserError, run_tool  # noqa: E402


@dataclass
class Args:
    suite: str = "parity"
    """`parity` (CleanRL's benchmark setups, scripts/registry.py's `parity` tasks) or `long` (its `long` tasks)"""
    labels: list[str] = field(default_factory=list)
    """only these tasks, by label (empty: every task of the suite)"""
    envs: list[str] = field(default_factory=list)
    """only these env ids (empty: every env of the suite)"""
    seeds: list[int] = field(default_factory=list)
    """seeds of each task (empty: each task's own, 1 to its `seeds`)"""
    runs: list[str] = field(default_factory=list)
    """only these runs, as label/env-id/seed (e.g. sac/Ant-v4/1); replaces --labels, --envs and --seeds"""
    path: str = "compile+cudagraphs"
    """the execution path of every run"""
    jobs: int = 12
    """runs side by side; the others wait for a free place (one GPU with CUDA MPS and 16 cores holds ~12)"""
    deadline: float | None = None
    """seconds by which this call ends: the runs still going are stopped (Ctrl-C) --stop-seconds before it, to be
    resumed by the next call, and waiting ones are left for it (none: run the whole selection to its end)"""
    stop_seconds: float = 120.0
    """what stopping takes: a dozen runs writing their checkpoints (replay memories of up to 1M transitions) and
    exporting their policies at once took ~70 s on a 16-core machine"""
    out: str | None = None
    """the JSON of each run (none: results/parity/runs, or results/learning for --suite long)"""
    runs_dir: str | None = None
    """the runs' folders (checkpoints, metrics), kept between calls (none: this repository's runs/long); a stopped
    run resumes under the --runs-dir it ran under"""
    checkpoint_every: int = 250_000
    """env steps between periodic checkpoints (the run resumes from the last one if a stop fails)"""
    num_seeds: int = 1
    """seeds per process: consecutive seeds of a task go together, up to this many, into one run of the script's
    --num-seeds (td3, sac, dqn and ppo have it; the others run a seed per process). The seeds of a stopped process
    resume together, as many as it had"""
    extra_flags: str = ""
    """flags added to every run, e.g. `--extra-flags=--async-envs` (the `=` keeps a single flag from reading as one of
    ours); each record's command has them. This launcher's own (--save-model, --checkpoint-every, --runs-dir,
    --resume) come after them and win. Resume a run with the flags it started with"""


def target(args: Args, task: Task, seed: int) -> str:
    return os.path.join(args.out, f"{task.label}__{task.env_id}__{args.path}__s{seed}.json")


# What every run's command gets from long_runs, not from --extra-flags.
OWN_FLAGS = ("--env-id", "--seed", "--num-seeds", "--total-timesteps", "--compile", "--no-compile", "--cudagraphs",
             "--no-cudagraphs", "--save-model", "--checkpoint-every", "--runs-dir", "--resume")


def flags_of(args: Args, task: Task, seed: int, num_seeds: int = 1) -> list[str]:
    return ["--env-id", task.env_id, "--seed", str(seed), *(["--num-seeds", str(num_seeds)] if num_seeds > 1 else []),
            "--total-timesteps", str(task.steps), *PATH_FLAGS[args.path], *task.flags, *shlex.split(args.extra_flags)]


def takes_num_seeds(script: str) -> bool:
    """Whether the script has --num-seeds (td3, sac, dqn, ppo); the others run one seed per process."""
    return "num_seeds" in {f.name for f in dataclasses.fields(importlib.import_module(f"algos.{script}").Args)}


def periodic_step(path: str) -> int | None:
    """The steps that a periodic checkpoint (`<algo>-step<N>.pt`) holds; None for any other file."""
    match = re.fullmatch(r".+-step(\d+)\.pt", os.path.basename(path))
    return int(match.group(1)) if match else None


def newest_periodic(folder: str) -> tuple[int, str] | None:
    """The steps and path of the newest periodic checkpoint in `folder`."""
    found = glob.glob(os.path.join(glob.escape(folder), "*-step*.pt"))
    return max(((step, p) for p in found if (step := periodic_step(p)) is not None), default=None)


RUNS_DIR = "<runs-dir>"  # how a record names --runs-dir where it lies outside the repository


def on_disk(name: str, runs_dir: str) -> str:
    """The path on this machine of a file or folder as a record names it: under this call's --runs-dir for a name
    that starts with `<runs-dir>/`, else in the repository (absolute paths, which tests write, stay); normalized, so
    that two names of one file compare equal."""
    head, _, rest = name.partition("/")
    return os.path.normpath(os.path.join(runs_dir, rest) if head == RUNS_DIR else os.path.join(ROOT, name))


def as_recorded(path: str, runs_dir: str) -> str:
    """How a record names a run's file or folder: from the repository's root, or from `<runs-dir>/` where --runs-dir
    lies outside it, so that no record names a path of the machine that made it. A folder outside both (a record
    made under another --runs-dir, resumed under this one) is named from `<runs-dir>/..`: it still resolves here,
    and the records test refuses it in results/."""
    inside = os.path.relpath(path, ROOT)
    outside = inside == os.pardir or inside.startswith(os.pardir + os.sep)
    return os.path.join(RUNS_DIR, os.path.relpath(path, runs_dir)) if outside else inside


def with_paths(record: dict, convert, runs_dir: str) -> dict:
    """The record with each segment's folder and checkpoint passed through `convert` (`on_disk`, `as_recorded`)."""
    return {**record, "segments": [{**segment, "run_dir": convert(segment["run_dir"], runs_dir),
                                    "checkpoint": convert(segment["checkpoint"], runs_dir)}
                                   for segment in record["segments"]]}


def resumable(segment: dict) -> dict:
    """A recorded segment whose checkpoint is gone (a stop checkpoint lost with its machine, the folder copied off
    before) ends at the newest periodic checkpoint left beside it: its episodes past that step leave the curve
    (`stitched_curve`), its seconds stay."""
    older = None if os.path.exists(segment["checkpoint"]) else newest_periodic(os.path.dirname(segment["checkpoint"]))
    return {**segment, "checkpoint": older[1], "steps": older[0]} if older else segment


def until_resumed(previous: dict, run_dir: str) -> dict:
    """The segment before `run_dir`'s, cut where that run resumed (its args.json's --resume): at an older, periodic
    checkpoint of the previous segment's folder when the call that started it found the newer one gone
    (`resumable`). A run that resumed from anything else leaves it as recorded."""
    config = os.path.join(run_dir, "args.json")
    resume = json.load(open(config)).get("resume") if os.path.exists(config) else None
    folder = os.path.dirname(previous["checkpoint"])
    step = periodic_step(resume) if resume else None
    elsewhere = resume and os.path.basename(os.path.dirname(resume)) != os.path.basename(folder)
    if step is None or step >= previous["steps"] or elsewhere:
        return previous
    return {**previous, "checkpoint": os.path.join(folder, os.path.basename(resume)), "steps": step}


def resume_point(path: str, runs_dir: str) -> str | None:
    """The checkpoint that a run's next segment resumes from (its record's last), if it is still on this machine;
    the seeds of one process share it."""
    segments = with_paths(json.load(open(path)), on_disk, runs_dir)["segments"] if os.path.exists(path) else []
    checkpoint = resumable(segments[-1])["checkpoint"] if segments else None
    return checkpoint if checkpoint and os.path.exists(checkpoint) else None


def newest_run(runs_dir: str, seed: int) -> str | None:
    """The newest run folder of `seed` (the scripts name them `{env}__{algo}__{seed}__{time}`)."""
    folders = [d for d in glob.glob(os.path.join(runs_dir, "*"))
               if os.path.isdir(d) and os.path.basename(d).split("__")[2:3] == [str(seed)]]
    return max(folders, key=os.path.getmtime) if folders else None


def read_summary(run_dir: str | None, checkpoint_dir: str | None = None) -> dict:
    """The run's summary.json; for a run killed before writing it, its newest periodic checkpoint (`<algo>-step<N>.pt`,
    in `checkpoint_dir`: the folder of its process's first seed) with the steps it holds and the last seconds its
    metrics logged."""
    path = os.path.join(run_dir or "", "summary.json")
    if os.path.exists(path):
        return json.load(open(path))
    periodic = newest_periodic(checkpoint_dir or run_dir or "")
    if not periodic:
        return {"status": "failed"}
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        seconds = max([float(row["seconds"]) for row in csv.DictReader(f)] or [0.0])
    return {"status": "killed", "checkpoint": periodic[1], "steps": periodic[0], "wall_seconds": seconds}


def segment(run_dir: str, summary: dict, concurrent_runs: int, info: dict | None = None) -> dict:
    """One call's part of a run: its folder, checkpoint, steps reached, wall seconds and machine."""
    return {"run_dir": run_dir, "checkpoint": summary["checkpoint"],
            "steps": summary["steps"], "wall_seconds": summary["wall_seconds"], "concurrent_runs": concurrent_runs,
            "machine": info}


def add_segment(record: dict, run_dir: str, summary: dict, concurrent_runs: int, info: dict) -> None:
    """A run folder's segment at the end of its record; the segment before it ends where this one resumed."""
    if record["segments"]:
        record["segments"][-1] = until_resumed(record["segments"][-1], run_dir)
    record["segments"].append(segment(run_dir, summary, concurrent_runs, info))


def stitched_curve(segments: list[dict]) -> tuple[dict, float | None, float | None]:
    """Episodic returns of every segment as (step, seconds, return), seconds continuing across segments; when a
    --stop-at-return run reached its return, the seconds until then; and the mean return of the last 100 training
    episodes (CleanRL's benchmark tables average each seed's last 100). A segment's episodes past its checkpoint
    (a killed run resumes from an older, periodic one) are left out: the next segment plays those steps again."""
    steps, seconds, returns, offset, solved = [], [], [], 0.0, None
    for segment in segments:
        with open(os.path.join(segment["run_dir"], "metrics.csv")) as f:
            for row in csv.DictReader(f):
                if int(row["step"]) > segment["steps"]:
                    continue
                if row["name"] == "episodic_return":
                    steps.append(int(row["step"]))
                    seconds.append(offset + float(row["seconds"]))
                    returns.append(float(row["value"]))
                elif row["name"] == "solved_seconds":
                    solved = offset + float(row["value"])
        offset += segment["wall_seconds"]
    stride = max(1, len(steps) // 200)
    last100 = sum(returns[-100:]) / len(returns[-100:]) if returns else None
    return {"steps": steps[::stride], "seconds": seconds[::stride], "returns": returns[::stride]}, solved, last100


def evaluate(run_dir: str) -> float | None:
    out = os.path.join(run_dir, "evaluation.json")
    proc = subprocess.run([sys.executable, "scripts/evaluate.py", run_dir, "--episodes", "10", "--out", out],
                          cwd=ROOT, capture_output=True, text=True)
    return json.load(open(out))["mean_return"] if proc.returncode == 0 else None


@dataclass
class Launched:
    task: Task
    seeds: list[int]  # consecutive: one process's --seed and --num-seeds
    records: list[dict]
    paths: list[str]
    runs_dir: str
    process: subprocess.Popen | None  # None: it ended without this call (`launch`)
    log: str
    concurrent_runs: int


def process_dir(args: Args, task: Task, seeds: list[int]) -> str:
    """The folder of one process's run folders (a seed's folder each), kept between calls: by task, path and seeds,
    so that a call on another path never takes these runs for its own."""
    return os.path.join(args.runs_dir, f"{task.label}-{task.env_id}-{args.path}-s{seeds[0]}"
                        + (f"-{seeds[-1]}" if len(seeds) > 1 else ""))


def launch(args: Args, task: Task, seeds: list[int], paths: list[str], concurrent_runs: int, info: dict) -> Launched:
    records = [with_paths(json.load(open(path)), on_disk, args.runs_dir) if os.path.exists(path) else {"segments": []}
               for path in paths]
    for record in records:  # segments recorded before they named their machine: the record's (its last call's)
        for earlier in record["segments"]:
            earlier["machine"] = earlier.get("machine") or record.get("machine")
    runs_dir = process_dir(args, task, seeds)
    first_dir = newest_run(runs_dir, seeds[0])
    ended = []  # per seed: whether the segment taken in below ran to the end
    for seed, record in zip(seeds, records, strict=True):
        # A segment whose call was killed (or stopped, so that the run could pass its --deadline) before it wrote
        # this JSON; a chain of such calls gives only its newest.
        unrecorded, done = newest_run(runs_dir, seed), False
        last = record["segments"][-1] if record["segments"] else {"run_dir": None, "steps": 0}
        if unrecorded and unrecorded != last["run_dir"]:
            summary = read_summary(unrecorded, first_dir)
            if summary.get("checkpoint") and summary["steps"] > last["steps"]:
                add_segment(record, unrecorded, summary, concurrent_runs, info)  # it may have run elsewhere
                done = summary["status"] == "done"
        ended.append(done)
    if all(ended):  # its process ran to the end on its own: `finish` records it, and nothing runs again
        print(f"{', '.join(os.path.basename(path) for path in paths)}: finished after its call; recorded")
        for record in records:
            record["note"] = ("recorded after its process ended by a later call, from its run folders: the date, "
                              "machine, gpu_sharing and concurrent_runs of its last segment are that call's")
        log = os.path.join(runs_dir, f"segment{len(records[0]['segments'])}.log")  # the ended process's own
        return Launched(task, seeds, records, paths, runs_dir, None, log, concurrent_runs)
    # The seeds of one process share its checkpoint: they resume together or start over together.
    checkpoints = {resumable(record["segments"][-1])["checkpoint"] if record["segments"] else None
                   for record in records}
    last = next(iter(checkpoints)) if len(checkpoints) == 1 else None
    if checkpoints != {None} and not (last and os.path.exists(last)):
        why = (f"its checkpoint is not on this machine ({last}; a run made under another --runs-dir resumes under "
               "that one)" if last else "its seeds have no checkpoint in common")
        print(f"{', '.join(os.path.basename(path) for path in paths)}: {why}; starting over")
        records, last = [{"segments": []} for _ in paths], None
    resume = ["--resume", last] if last else []
    command = [sys.executable, f"algos/{task.script}.py", *flags_of(args, task, seeds[0], len(seeds)), "--save-model",
               "--checkpoint-every", str(args.checkpoint_every), "--runs-dir", runs_dir, *resume]
    os.makedirs(runs_dir, exist_ok=True)
    log = os.path.join(runs_dir, f"segment{len(records[0]['segments']) + 1}.log")
    # One CPU thread each: a dozen runs share the cores, and their tiny networks gain nothing from more.
    env = {"OMP_NUM_THREADS": "1", **os.environ}
    process = subprocess.Popen(command, cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
    return Launched(task, seeds, records, paths, runs_dir, process, log, concurrent_runs)


def finish(args: Args, run: Launched, info: dict) -> list[dict]:
    """The JSON of each seed of the run after its process ended: a new segment, and `ok`, `partial` or `failed`."""
    task, first_dir = run.task, newest_run(run.runs_dir, run.seeds[0])
    sharing = gpu_sharing()  # CUDA MPS: the runs' kernels share the GPU at once
    for seed, record, path in zip(run.seeds, run.records, run.paths, strict=True):
        run_dir = newest_run(run.runs_dir, seed)
        summary = read_summary(run_dir, first_dir)
        if summary.get("checkpoint") and run.process is not None:  # else `launch` took its segment in
            add_segment(record, run_dir, summary, run.concurrent_runs, info)
        record.update({
            "algo": task.label, "env_id": task.env_id, "path": args.path, "seed": seed, "steps": task.steps,
            "num_seeds": len(run.seeds),
            "command": shlex.join(["python", f"algos/{task.script}.py",
                                   *flags_of(args, task, run.seeds[0], len(run.seeds))]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": info, "suite": "learning", "scale": 1.0,
            "gpu_sharing": sharing,
            "concurrent_runs": max([run.concurrent_runs] + [s.get("concurrent_runs", 1) for s in record["segments"]]),
            "reached": summary.get("steps", record.get("reached", 0)),
        })
        if summary["status"] == "done":
            segments = record["segments"]
            curve, solved_seconds, last100 = stitched_curve(segments)
            record.update(status="ok", final_return=summary["mean_return_last20"], return_last100=last100,
                          run_wall_seconds=sum(s["wall_seconds"] for s in segments), curve=curve,
                          solved_seconds=solved_seconds, episodes=summary["episodes"], eval_return=evaluate(run_dir))
        elif summary["status"] == "interrupted" and summary.get("checkpoint"):
            record.update(status="partial", return_at_stop=summary["mean_return_last20"])
        else:
            record.update(status="failed", error=open(run.log).read()[-1500:])
        with open(path + ".tmp", "w") as f:
            json.dump(with_paths(record, as_recorded, args.runs_dir), f, indent=1)
        os.replace(path + ".tmp", path)
    return run.records


def main(args: Args) -> None:
    if args.suite not in ("parity", "long"):
        raise UserError(f"--suite must be parity or long (got {args.suite})")
    if args.num_seeds < 1:
        raise UserError(f"--num-seeds must be >= 1 (got {args.num_seeds})")
    if args.path not in PATH_FLAGS:
        raise UserError(f"--path {args.path}: choose from {', '.join(PATH_FLAGS)}")
    import torch

    if captures_graphs(args.path) and not torch.cuda.is_available():  # the run would go on without graphs
        raise UserError(f"--path {args.path} captures CUDA graphs and this machine has no CUDA: pass --path eager "
                        "(as the parity rows run on CPUs) or --path compile")
    if args.jobs < 1 or args.checkpoint_every < 1 or args.stop_seconds < 0:
        raise UserError(f"--jobs and --checkpoint-every must be >= 1 and --stop-seconds >= 0 (got {args.jobs}, "
                        f"{args.checkpoint_every}, {args.stop_seconds})")
    if args.deadline is not None and args.deadline <= args.stop_seconds:
        raise UserError(f"--deadline {args.deadline:g} leaves no time to run: it must exceed --stop-seconds "
                        f"{args.stop_seconds:g} (or leave it out: no deadline)")
    ours = {flag.split("=")[0] for flag in shlex.split(args.extra_flags)} & set(OWN_FLAGS)
    if ours:  # a record's budget, seeds and path must be the ones it is filed under
        raise UserError(f"--extra-flags {' '.join(sorted(ours))}: long_runs sets it from the task and its own "
                        "flags (--labels, --envs, --seeds, --num-seeds, --path); a shorter run is a task of its own")
    args.out = args.out or os.path.join(ROOT, "results", *(("parity", "runs") if args.suite == "parity" else
                                                            ("learning",)))
    args.runs_dir = os.path.abspath(args.runs_dir or os.path.join(ROOT, "runs", "long"))  # the runs start in ROOT

    def wanted(task: Task, seed: int) -> bool:
        if args.runs:
            return f"{task.label}/{task.env_id}/{seed}" in args.runs
        return (not args.labels or task.label in args.labels) and (not args.envs or task.env_id in args.envs)

    tasks = [task for algorithm in ALGORITHMS.values() for task in getattr(algorithm, args.suite)]
    check_selection(args.suite, tasks, args.labels, args.envs)
    runs = {f"{task.label}/{task.env_id}" for task in tasks}
    for run in args.runs:
        label_env, _, seed = run.rpartition("/")
        if label_env not in runs or not seed.isdigit():
            raise UserError(f"--runs {run}: a run is label/env-id/seed of a {args.suite} task, e.g. sac/Ant-v4/1")
    named = {int(run.rsplit("/", 1)[1]) for run in args.runs}
    os.makedirs(args.out, exist_ok=True)
    info = machine()
    pending, finished = [], 0  # (task, seeds, paths): one process each; the selected runs that are ok already
    for task in tasks:
        per_process = args.num_seeds if takes_num_seeds(task.script) else 1
        # The seeds of a stopped process resume together from its checkpoint, whatever this call's --num-seeds.
        recorded = [int(path.rsplit("__s", 1)[1].removesuffix(".json")) for path in glob.glob(target(args, task, "*"))]
        resumes_from = {seed: resume_point(target(args, task, seed), args.runs_dir) for seed in recorded}
        resumed = set()
        for seed in sorted(set(args.seeds or range(1, task.seeds + 1)) | named):
            path = target(args, task, seed)
            if not wanted(task, seed):
                continue
            on_any_path = glob.glob(os.path.join(args.out, f"{task.label}__{task.env_id}__*__s{seed}.json"))
            if any(json.load(open(done)).get("status") == "ok" for done in on_any_path):  # a row counts a seed once
                finished += 1
                continue
            if task.cuda_only and not info.get("gpu"):
                print(f"{os.path.basename(path)}: needs CUDA; skipped")
                continue
            checkpoint = resumes_from.get(seed)
            if checkpoint:
                if checkpoint not in resumed:
                    resumed.add(checkpoint)
                    group = sorted(other for other, point in resumes_from.items() if point == checkpoint)
                    pending.append((task, group, [target(args, task, other) for other in group]))
                continue
            last = pending[-1] if pending else None
            if (last and last[0] is task and len(last[1]) < per_process and last[1][-1] == seed - 1
                    and not resumes_from.get(last[1][0])):
                last[1].append(seed)
                last[2].append(path)
            else:
                pending.append((task, [seed], [path]))
    concurrent = min(args.jobs, len(pending))
    print(f"{sum(len(p[1]) for p in pending)} runs in {len(pending)} processes, {concurrent} side by side"
          + (f", until {args.deadline:.0f} s" if args.deadline is not None else "")
          + (f" ({finished} more selected are ok already: their records are in {args.out})" if finished else ""),
          flush=True)
    start, running, records = time.time(), {}, {}
    stop_at = math.inf if args.deadline is None else args.deadline - args.stop_seconds
    while (pending or running) and time.time() - start < stop_at:
        while pending and len(running) < args.jobs:
            task, group, paths = pending.pop(0)
            run = launch(args, task, group, paths, concurrent, info)
            if run.process is None:
                records.update(zip(run.paths, finish(args, run, info), strict=True))
            else:
                running[paths[0]] = run
        time.sleep(5)
        for path in [path for path, run in running.items() if run.process.poll() is not None]:
            run = running.pop(path)
            records.update(zip(run.paths, finish(args, run, info), strict=True))
    for run in running.values():
        run.process.send_signal(signal.SIGINT)  # stops where the iteration ends, after its checkpoint
    for run in running.values():
        try:
            run.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            run.process.kill()
        records.update(zip(run.paths, finish(args, run, info), strict=True))
    if pending:
        print(f"{sum(len(p[1]) for p in pending)} runs not started before the deadline: the next call starts them")

    print(f"{'run':40} {'status':8} {'steps':>9} {'return':>8} {'eval':>8} segments")
    fmt = lambda v: f"{v:8.0f}" if isinstance(v, (int, float)) else f"{'-':>8}"  # noqa: E731
    for record in records.values():
        name = f"{record['algo']} {record['env_id']} s{record['seed']}"
        returned = record.get("final_return", record.get("return_at_stop"))
        print(f"{name:40} {record['status']:8} {record['reached']:>9} {fmt(returned)} "
              f"{fmt(record.get('eval_return'))} {len(record['segments'])}")
    finished = [record for record in records.values() if record["status"] == "ok"]
    for label, env_id in sorted({(r["algo"], r["env_id"]) for r in finished}):
        returns = [r["final_return"] for r in finished if (r["algo"], r["env_id"]) == (label, env_id)]
        spread = statistics.stdev(returns) if len(returns) > 1 else 0.0
        print(f"{label} {env_id}: {statistics.mean(returns):.0f} ± {spread:.0f} over {len(returns)} seeds")


if __name__ == "__main__":
    from turborl.cli import parse

    run_tool(main, parse(Args, description=__doc__.split("\n\n")[0]))
