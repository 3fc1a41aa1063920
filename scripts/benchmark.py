"""Benchmark turborl: run the real scripts (algos x paths x envs x seeds) and write one JSON per run.

    python scripts/benchmark.py --suite speed                 # every algo x every path, short steady-state runs
    python scripts/benchmark.py --suite learning --seeds 1 2    # default tasks to a budget: fastest path + eager
    python scripts/report.py                                  # results/ -> results/README.md + plots
    python scripts/benchmark.py --labels ppo-torch4096 --paths compile+cudagraphs --variant autotune \
        --extra-flags=--max-autotune --out results/experiments/NAME   # an A/B of a flag (this one needs --compile)
    python scripts/benchmark.py --labels td3-seeds10 --paths compile+cudagraphs --processes 10  # its peer: td3-procs10
    python scripts/benchmark.py --labels td3-seeds10 --paths compile+cudagraphs --num-seeds 20  # td3-seeds20

The tasks are scripts/registry.py's. Each run is a subprocess that runs a script with the flags a user would type
(the JSON's `command`) under scripts/measure.py, and its JSON holds the steady-state steps/s (median of the
windows after compile and capture), the startup (compile + capture) seconds, the loop's time per step next to
the floor (the same captured calls replayed back to back with no simulator), the return curve, and the machine
and versions. A failed run is written with its error, never dropped. Runs whose JSON already says "ok" at the
same --scale are skipped (resumable).
"""

from __future__ import annotations

import concurrent.futures
import csv
import datetime
import glob
import importlib
import importlib.metadata
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from scripts.registry import ALGORITHMS, Task  # noqa: E402
from turborl.errors import UserError, run_tool  # noqa: E402

PATH_FLAGS = {"eager": [], "compile": ["--compile"], "cudagraphs": ["--cudagraphs"],
              "compile+cudagraphs": ["--compile", "--cudagraphs"],
              # The peer baseline: torch.compile(mode="reduce-overhead"), torch's own CUDA graphs (cudagraph trees),
              # the route PyTorch's docs recommend first. That mode is exactly this inductor option.
              "reduce-overhead": ["--compile", "--inductor", "triton.cudagraphs=True"]}


@dataclass
class Args:
    suite: str = "speed"
    """`speed` (every algo x path, short) or `learning` (default tasks to their budget)"""
    algos: list[str] = field(default_factory=lambda: list(ALGORITHMS))
    """scripts to run (names in scripts/registry.py)"""
    paths: list[str] | None = None
    """paths to run (none: the four paths and the reduce-overhead peer for speed; compile+cudagraphs and eager
    for learning)"""
    envs: list[str] = field(default_factory=list)
    """only these env ids (empty: each task's default)"""
    labels: list[str] = field(default_factory=list)
    """only these tasks, by the table's algo column (e.g. ppo-torch-solve; empty: all of the algos')"""
    jobs: int = 1
    """learning suite: runs at a time (they share the machine, so their wall times are slower than alone;
    each JSON records it). The speed suite always runs one at a time."""
    seeds: list[int] = field(default_factory=lambda: [1])
    """seeds (learning suite: eager runs the first only; on its short budget it is the wall-time reference for
    the return-vs-time plot, not a return at budget)"""
    scale: float | None = None
    """multiply every run's steps (default 1 with CUDA, 0.05 on a CPU-only machine)"""
    out: str | None = None
    """output folder (default results/<suite>; without CUDA, runs/benchmark/<suite>: a CPU's scaled-down runs are
    scratch, not results)"""
    timeout: float = 600.0
    """seconds before a run is stopped and recorded as failed"""
    force: bool = False
    """rerun runs whose JSON already says ok"""
    variant: str = ""
    """a name for --extra-flags, appended to every task's label (its runs get JSON files of their own)"""
    extra_flags: str = ""
    """flags added to every run, e.g. `--variant autotune --extra-flags=--max-autotune` (the `=` keeps a single flag
    from being read as the benchmark's own)"""
    processes: int = 1
    """speed suite: run each seeds task (those with --num-seeds) as this many processes at once, one seed each
    (--seed, --seed + 1, ...), without its --num-seeds, and no other task: the peer of seeds as a batch axis
    (`td3-seeds10` becomes `td3-procs10`; on one GPU, start CUDA MPS first). The record's steps/s is the processes'
    sum, each one's kept beside it."""
    num_seeds: int = 0
    """speed suite: run the seeds tasks (those with --num-seeds) with this many seeds instead, each labeled for it
    (`td3-seeds10` becomes `td3-seeds20`), and no other task; 0: as the registry has them"""


def save_record(path: str | None, record: dict) -> None:
    """A one-off measurement's JSON (`--out` of the measuring scripts), with the command that made it and the
    machine; nothing without a path."""
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    command = " ".join(["python", os.path.relpath(os.path.abspath(sys.argv[0]), ROOT), *sys.argv[1:]])
    with open(path, "w") as f:
        json.dump({**record, "command": command, "machine": machine()}, f, indent=1)


def machine() -> dict:
    """Where and with what the numbers were measured."""
    import torch

    def version(pkg):
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return None

    def run(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    cpu = platform.processor()
    if os.path.exists("/proc/cpuinfo"):
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                   cpu)
    cuda = torch.cuda.is_available()
    return {
        "device": "cuda" if cuda else "cpu",
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "driver": run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).split("\n")[0] or None,
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        **{pkg: version(pkg) for pkg in ("tensordict", "gymnasium", "mujoco", "numpy", "mujoco-warp", "warp-lang",
                                         "ale-py")},
        "git_commit": run(["git", "rev-parse", "HEAD"]) or None,
        "git_dirty": bool(run(["git", "status", "--porcelain", "--untracked-files=no"])),
    }


def metric_values(metrics_csv: str, name: str) -> list[float]:
    with open(metrics_csv) as f:
        return [float(row["value"]) for row in csv.DictReader(f) if row["name"] == name]


def return_curve(metrics_csv: str, max_points: int = 200) -> dict:
    """Episodic returns as (step, seconds, return), thinned to at most max_points, and the last 20 mean."""
    rows = []
    with open(metrics_csv) as f:
        for row in csv.DictReader(f):
            if row["name"] == "episodic_return":
                rows.append((int(row["step"]), float(row["seconds"]), float(row["value"])))
    stride = max(1, math.ceil(len(rows) / max_points))
    kept = rows[::stride] + ([rows[-1]] if rows and (len(rows) - 1) % stride else [])
    return {"steps": [r[0] for r in kept], "seconds": [r[1] for r in kept], "returns": [r[2] for r in kept]}


def captures_graphs(path: str) -> bool:
    """Whether `path` captures CUDA graphs (ours or torch's): without CUDA it would run as eager or compile."""
    return any(flag in ("--cudagraphs", "triton.cudagraphs=True") for flag in PATH_FLAGS[path])


def gpu_sharing() -> str | None:
    """How processes share this machine's GPU: "mps" (a CUDA MPS daemon runs), "time-sliced", or None (no GPU)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return "mps" if mps_daemon_running() else "time-sliced"


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


def run_one(task: Task, path: str, seed: int, scale: float, timeout: float, processes: int = 1) -> dict:
    """Run one script under scripts/measure.py (`processes` of it at once, seeds seed, seed + 1, ...); the record
    says ok or failed (with the error), never nothing."""
    steps = max(task.min_steps, int((task.steps if "cudagraphs" in path else task.eager_steps) * scale))
    flags = ["--env-id", task.env_id, "--seed", str(seed), "--total-timesteps", str(steps), *PATH_FLAGS[path],
             *task.flags]
    # Learning starts scale with the budget: a shortened run still trains (the scripts refuse one that would not).
    starts = task.learning_starts
    if starts is None and scale != 1:
        starts = getattr(importlib.import_module(f"algos.{task.script}").Args, "learning_starts", None)
    if starts is not None:
        flags += ["--learning-starts", str(max(100, int(starts * scale)))]
    record = {"algo": task.label, "env_id": task.env_id, "path": path, "seed": seed, "steps": steps,
              "command": shlex.join(["python", f"algos/{task.script}.py", *flags]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    runs = []  # (runs folder, process, stderr file) of each process
    for i in range(processes):
        runs_dir = tempfile.mkdtemp(prefix="turborl-bench-")
        own = [str(seed + i) if j and flags[j - 1] == "--seed" else flag for j, flag in enumerate(flags)]
        command = [sys.executable, "scripts/measure.py", task.script, "--out", os.path.join(runs_dir, "measure.json"),
                   "--", *own, "--runs-dir", runs_dir]
        stderr = open(os.path.join(runs_dir, "stderr.log"), "w+")
        runs.append((runs_dir, subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr), stderr))
    try:
        return measure_runs(record, runs, timeout, processes)
    finally:  # the run folders are read into the record: none is left behind, whatever happened
        for runs_dir, proc, stderr in runs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            stderr.close()
            shutil.rmtree(runs_dir, ignore_errors=True)


def measure_runs(record: dict, runs: list, timeout: float, processes: int) -> dict:
    """`record` completed from the processes of `runs` (runs folder, process, stderr file) once they end."""
    seed = record["seed"]
    start, errors = time.perf_counter(), []
    for runs_dir, proc, stderr in runs:
        try:
            proc.wait(timeout=max(1.0, timeout - (time.perf_counter() - start)))
            if proc.returncode:
                stderr.seek(0)
                errors.append(f"exit {proc.returncode}: {stderr.read().strip()[-1500:]}")
            elif not os.path.exists(os.path.join(runs_dir, "measure.json")):
                errors.append("the run wrote no measurements")
        except subprocess.TimeoutExpired:
            proc.kill()
            errors.append(f"timeout after {timeout:.0f}s")
    record["wall_seconds"] = time.perf_counter() - start
    if errors:
        return {**record, "status": "failed", "error": errors[0]}
    results = [json.load(open(os.path.join(runs_dir, "measure.json"))) for runs_dir, _, _ in runs]
    ended = [r["summary"].get("status") for r in results if r["summary"].get("status") != "done"]
    if ended:  # Ctrl-C or a non-finite loss: the run ended early, and its numbers are no measurement
        return {**record, "status": "failed", "error": f"the run ended {ended[0]}, before its budget"}
    result = results[0]
    sps = sum(r["steady_sps"] for r in results) if all(r["steady_sps"] for r in results) else None
    metrics_csv = os.path.join(result["summary"]["run_dir"], "metrics.csv")  # the first process's first seed
    with open(os.path.join(result["summary"]["run_dir"], "args.json")) as f:
        run_args = json.load(f)
    if processes > 1:
        record.update(processes=processes, seeds=[seed + i for i in range(processes)],
                      steady_sps_per_process=[r["steady_sps"] for r in results],
                      gpu_sharing=gpu_sharing())
    return {
        **record, "status": "ok",
        "steady_sps": sps,
        "steady_sps_whole": sum(r["steady_sps_whole"] or 0 for r in results) or None,
        "startup_seconds": max(r["startup_seconds"] or 0 for r in results) or None,
        "run_wall_seconds": max(r["summary"]["wall_seconds"] for r in results),
        "us_per_step": 1e6 / sps if sps else None,
        # A process's replay alone says nothing of processes that share the GPU: no floor for them.
        "floor_us_per_step": result["floor_us"] if processes == 1 else None,
        "floor_method": "the steady span's captured calls replayed back to back after training, one synchronize "
                        "at the end (GPU replay time alone)",
        "final_return": result["summary"]["mean_return_last20"] if result["summary"]["episodes"] else None,
        "solved_seconds": (metric_values(metrics_csv, "solved_seconds") or [None])[-1],
        "episodes": result["summary"]["episodes"],
        "peak_gpu_memory_mb": result["summary"].get("peak_gpu_memory_mb"),
        # whether the envs stepped in subprocesses: left out, --async-envs depends on the machine's cores
        **({"async_envs": run_args["async_envs"]} if "async_envs" in run_args else {}),
        "curve": return_curve(metrics_csv),
    }


def with_num_seeds(task: Task, num_seeds: int, variant: str) -> Task:
    """The task under `variant` with `num_seeds` seeds in its process: its --num-seeds set, or for one seed gone (the
    script's default, the command a single run has)."""
    flags = list(task.flags)
    if "--num-seeds" in flags:
        at = flags.index("--num-seeds")
        flags[at:at + 2] = ["--num-seeds", str(num_seeds)] if num_seeds > 1 else []
    return replace(task, variant=variant, flags=tuple(flags))


def check_selection(suite: str, tasks: list[Task], labels: list[str], envs: list[str]) -> None:
    """A --labels or --envs value that none of the suite's `tasks` has is a one-line error (a selection would quietly
    be empty without it); benchmark.py and long_runs.py select alike."""
    for flag, given, known in (("--labels", labels, {task.label for task in tasks}),
                               ("--envs", envs, {task.env_id for task in tasks})):
        if set(given) - known:
            raise UserError(f"{flag} {' '.join(sorted(set(given) - known))}: no {suite} task has it; choose from "
                            f"{', '.join(sorted(known))}")


def plan(args: Args, cuda: bool) -> list[tuple[Task, str, int]]:
    unknown = sorted(set(args.algos) - set(ALGORITHMS))
    if unknown:
        raise UserError(f"unknown script(s) {unknown}; choose from {list(ALGORITHMS)}")
    check_selection(args.suite, [task for algorithm in ALGORITHMS.values() for task in getattr(algorithm, args.suite)],
                    args.labels, args.envs)
    tasks = [task for name in args.algos for task in getattr(ALGORITHMS[name], args.suite)]
    paths = args.paths or (list(PATH_FLAGS) if args.suite == "speed" else ["compile+cudagraphs", "eager"])
    runs = []
    for task in tasks:
        if ((args.envs and task.env_id not in args.envs) or (args.labels and task.label not in args.labels)
                or (task.cuda_only and not cuda)):
            continue
        if args.variant:
            task = replace(task, variant="-".join(filter(None, (task.variant, args.variant))),
                           flags=(*task.flags, *shlex.split(args.extra_flags)))
        if args.num_seeds or args.processes > 1:  # the seeds tasks alone; a variant keeps its name beside the new one
            if "--num-seeds" not in task.flags:
                continue
            n, name = (args.num_seeds, f"seeds{args.num_seeds}") if args.num_seeds else (1, f"procs{args.processes}")
            task = with_num_seeds(task, n, "-".join(filter(None, (name, args.variant))))
        for path in paths:
            if task.compile_only and "--compile" not in PATH_FLAGS[path]:
                continue
            if path == "reduce-overhead" and "--inductor" in task.flags:  # a second --inductor would replace it
                continue
            if not cuda and captures_graphs(path):  # the run would be eager's or compile's, filed under this path
                continue
            for seed in args.seeds if (args.suite == "speed" or path != "eager") else args.seeds[:1]:
                runs.append((task, path, seed))
    return runs


def main(args: Args) -> None:
    import torch
    from tqdm import tqdm

    if args.suite not in ("speed", "learning"):
        raise UserError(f"--suite must be speed or learning (got {args.suite!r})")
    unknown = [p for p in args.paths or [] if p not in PATH_FLAGS]
    if unknown:
        raise UserError(f"unknown path(s) {unknown}; choose from {list(PATH_FLAGS)}")
    if bool(args.variant) != bool(args.extra_flags):
        raise UserError("--variant and --extra-flags go together (a name for the flags, and the flags)")
    if args.scale is not None and args.scale <= 0:
        raise UserError(f"--scale must be > 0 (got {args.scale:g}): the fraction of each task's budget to run")
    if args.jobs < 1 or (args.jobs > 1 and args.suite == "speed"):
        raise UserError("--jobs must be >= 1, and 1 for the speed suite (speed is measured alone)")
    if args.processes < 1 or (args.processes > 1 and args.suite != "speed"):
        raise UserError("--processes must be >= 1, and 1 for the learning suite (a peer is a speed run)")
    if args.num_seeds < 0:
        raise UserError(f"--num-seeds must be >= 1, or 0 for the registry's (got {args.num_seeds})")
    if args.num_seeds and (args.processes > 1 or args.suite != "speed"):
        raise UserError("--num-seeds is for the speed suite, without --processes (seeds in one process or "
                         "one seed per process: run the two one after the other)")
    cuda = torch.cuda.is_available()
    args.scale = args.scale if args.scale is not None else (1.0 if cuda else 0.05)
    out = args.out or (os.path.join(ROOT, "results", args.suite) if cuda else
                       os.path.join(ROOT, "runs", "benchmark", args.suite))
    os.makedirs(out, exist_ok=True)
    info = machine()
    runs = plan(args, cuda)
    if not runs:
        seeds_tasks = sorted({task.label for algorithm in ALGORITHMS.values() for task in algorithm.speed
                              if "--num-seeds" in task.flags})
        why = (" (the seeds tasks, " + ", ".join(seeds_tasks) + ")" if args.num_seeds else "") + (
            "; the ones that match need CUDA" if not cuda and plan(args, True) else "")
        raise UserError(f"no task of the {args.suite} suite matches the selection{why}: see "
                         "scripts/registry.py for the tasks and their labels")
    jobs = min(args.jobs, max(1, len(runs)))

    def measured(run: tuple[Task, str, int]) -> dict:
        task, path, seed = run
        target = os.path.join(out, f"{task.label}__{task.env_id}__{path}__s{seed}.json")
        kept = json.load(open(target)) if not args.force and os.path.exists(target) else {}
        if kept.get("status") == "ok" and kept.get("scale") == args.scale:  # another --scale is another run
            return kept
        record = run_one(task, path, seed, args.scale, args.timeout, args.processes)
        record["machine"], record["suite"], record["scale"] = info, args.suite, args.scale
        record["concurrent_runs"] = jobs
        with open(target + ".tmp", "w") as f:
            json.dump(record, f, indent=1)
        os.replace(target + ".tmp", target)
        return record

    # Threads only wait on subprocesses; results keep the plan's order.
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        table = list(tqdm(pool.map(measured, runs), total=len(runs), desc=f"{args.suite} suite", unit="run"))
    print(f"\n{args.suite} suite on {info['gpu'] or info['cpu']} (torch {info['torch']}), JSON in {out}")
    print(f"{'algo':5} {'env':16} {'path':19} {'seed':>4} {'steps/s':>9} {'us/step':>8} {'floor us':>8} "
          f"{'startup s':>9} {'return':>8}  status")
    for r in table:
        def fmt(key, spec):
            value = r.get(key)
            return format(value, spec) if isinstance(value, (int, float)) and value == value else "-"
        print(f"{r['algo']:5} {r['env_id']:16} {r['path']:19} {r['seed']:>4} {fmt('steady_sps', '9.0f')} "
              f"{fmt('us_per_step', '8.0f')} {fmt('floor_us_per_step', '8.0f')} {fmt('startup_seconds', '9.1f')} "
              f"{fmt('final_return', '8.1f')}  {r['status']}{'' if r['status'] == 'ok' else ': ' + r['error'][-200:]}")


if __name__ == "__main__":
    from turborl.cli import parse

    run_tool(main, parse(Args, description=__doc__.split("\n\n")[0]))
