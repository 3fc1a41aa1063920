"""Turn benchmark results (one JSON per run, from scripts/benchmark.py) into tables and plots.

    python scripts/report.py                       # results/*/ -> results/README.md + PNGs, README speed table
    python scripts/report.py --results results-x   # another folder: README.md left alone
    python scripts/report.py --check               # exit 1 if a generated table differs from the committed one

For every suite folder under `--results` it writes a section of `<results>/README.md`: steps/s per path and
the speed-up over eager (speed suite), return at budget against CleanRL's published returns (learning
suite), the failed runs with their errors, and where and with what the numbers were measured. Plots:
`<suite>-steps-per-second.png` (steps/s per path) and `<suite>-returns.png` (return vs steps and vs wall time).
The Markdown depends on the JSON records alone, so any clone regenerates the committed tables byte for byte
(`--check`, which CI runs); the PNGs may differ in bytes across matplotlib versions and are not checked.
"""

from __future__ import annotations

import datetime
import glob
import importlib
import json
import os
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from scripts.registry import ALGORITHMS, MUJOCO_V4, Reference, Task  # noqa: E402
from turborl.errors import UserError, run_tool  # noqa: E402

PATHS = ["eager", "compile", "cudagraphs", "compile+cudagraphs", "reduce-overhead"]
# CleanRL's published returns, by the table's algo column and env.
CLEANRL = {(Task(name, env_id, 0, 0).label, env_id): reference for name, algorithm in ALGORITHMS.items()
           for env_id, reference in algorithm.cleanrl.items()}
# Runs stopped and resumed on one machine leave a gap of their stop and restart between segments: one stretch.
RESUME_GAP = 300
PARITY_TASKS = {(task.env_id, task.label): task for algorithm in ALGORITHMS.values() for task in algorithm.parity}


def cleanrl_reference(algo: str, env_id: str) -> tuple[Reference | None, str]:
    """CleanRL's figure for this env, or for another version of it (then a note naming the version it is of)."""
    if (algo, env_id) in CLEANRL:
        return CLEANRL[(algo, env_id)], ""
    name = env_id.rsplit("-v", 1)[0]
    for (label, other), reference in CLEANRL.items():
        if label == algo and other.rsplit("-v", 1)[0] == name:
            return reference, f" ({other.rsplit('-', 1)[1]})"
    return None, ""
README_START, README_END = "<!-- speed-table:start -->", "<!-- speed-table:end -->"
PARITY_START, PARITY_END = "<!-- parity-table:start -->", "<!-- parity-table:end -->"


@dataclass
class Args:
    results: str | None = None
    """folder whose subfolders (one per suite) hold the JSON of each run (none: this repository's results/)"""
    readme: str | None = None
    """README whose speed-table block gets the first speed suite's table ("" to leave it alone; none: this
    repository's README.md when --results is this repository's results/, else none)"""
    plots: bool = True
    """draw the PNG plots (needs matplotlib); the tables link them either way"""
    check: bool = False
    """write nothing: regenerate every table in memory and exit 1, naming each file, if any differs from the one
    on disk (the records and the tables built from them must be committed together)"""


def steady_rates(runs: list[dict]) -> list[float]:
    """The steady-state steps/s of the runs that have one (a run too short for a steady window has none)."""
    return [r["steady_sps"] for r in runs if r["status"] == "ok" and r["steady_sps"] is not None]


def load(folder: str) -> list[dict]:
    runs = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            run = json.load(f)
        if isinstance(run, dict):  # a record (other JSON: refused by the caller)
            run["file"] = os.path.basename(path)
        runs.append(run)
    return runs


def fmt(value, spec: str = ",.0f") -> str:
    return "–" if value is None or value != value else format(value, spec)


def speed_table(runs: list[dict]) -> list[str]:
    """Steps/s per task and path (median over seeds), the speed-up of the fastest path over eager, and its
    time per step next to the floor (its hot functions replayed alone), startup and peak GPU memory."""
    cells = defaultdict(list)
    for run in runs:
        cells[(run["algo"], run["env_id"], run["path"])].append(run)
    tasks = sorted({(run["algo"], run["env_id"]) for run in runs})
    lines = ["| algo | env | " + " | ".join(PATHS) + " | fastest / eager | compile+cudagraphs / reduce-overhead "
             "| us/step (floor) | startup s | peak GPU MiB |",
             "|---|---|" + "---:|" * (len(PATHS) + 5)]
    for algo, env_id in tasks:
        sps, row = {}, []
        for path in PATHS:
            group = cells.get((algo, env_id, path), [])
            ok = steady_rates(group)
            if ok:
                sps[path] = statistics.median(ok)
                row.append(fmt(sps[path]))
            else:
                failed = any(r["status"] != "ok" for r in group)
                row.append("failed" if failed else "no steady window" if group else "–")
        best = max(sps, key=sps.get) if sps else None
        speedup = f"{sps[best] / sps['eager']:.1f}x ({best})" if best and "eager" in sps else "–"
        ours, peer = sps.get("compile+cudagraphs"), sps.get("reduce-overhead")  # torch's own CUDA graphs
        over_peer = f"{ours / peer:.2f}x" if ours and peer else "–"
        best_runs = [r for r in cells.get((algo, env_id, best), []) if r["status"] == "ok"]
        floor = statistics.median([r["floor_us_per_step"] for r in best_runs if r.get("floor_us_per_step")] or [None]) \
            if best_runs else None
        spec = ".0f" if best and 1e6 / sps[best] >= 10 else ".3f"  # thousands of envs: under 1 us per env step
        per_step = f"{fmt(1e6 / sps[best], spec)} ({fmt(floor, spec)})" if best else "–"
        startup = fmt(statistics.median([r["startup_seconds"] for r in best_runs]), ".1f") if best_runs else "–"
        memory = [r["peak_gpu_memory_mb"] for r in best_runs if r.get("peak_gpu_memory_mb") is not None]
        peak = fmt(statistics.median(memory), ",.0f") if memory else "–"  # recorded since runs report it
        lines.append(f"| {algo} | {env_id} | " + " | ".join(row)
                     + f" | {speedup} | {over_peer} | {per_step} | {startup} | {peak} |")
    return lines


def learning_table(runs: list[dict]) -> list[str]:
    groups = defaultdict(list)
    for run in runs:
        groups[(run["algo"], run["env_id"], run["path"])].append(run)
    lines = ["| algo | env | path | steps | seeds | return at budget (mean ± std) | CleanRL | wall s (mean) "
             "| solved s |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for (algo, env_id, path), group in sorted(groups.items()):
        ok = [r for r in group if r["status"] == "ok"]
        partial = [r for r in group if r["status"] == "partial"]
        returns = [r["final_return"] for r in ok if r.get("final_return") is not None]
        spread = f"{statistics.mean(returns):,.1f} ± {statistics.pstdev(returns):,.1f}" if returns else "–"
        wall = fmt(statistics.mean([r["run_wall_seconds"] for r in ok]), ".0f") if ok else "–"
        solved = [r["solved_seconds"] for r in ok if r.get("solved_seconds") is not None]
        failed = len(group) - len(ok) - len(partial)
        seeds = f"{len(ok)}" + (f" (+{failed} failed)" if failed else "")
        if partial:
            reached = sorted(r["reached"] for r in partial)
            at_stop = [r["return_at_stop"] for r in partial if r.get("return_at_stop") is not None]
            span = f"{reached[0]:,}" + (f"-{reached[-1]:,}" if len(reached) > 1 else "")
            there = f": {statistics.mean(at_stop):,.1f} ± {statistics.pstdev(at_stop):,.1f} there" if at_stop else ""
            seeds += f" (+{len(partial)} unfinished at {span} steps{there})"
        reference, version = cleanrl_reference(algo, env_id)
        lines.append(f"| {algo} | {env_id} | {path} | {fmt(group[0]['steps'])} | {seeds} | {spread} | "
                     f"{fmt(reference.mean if reference else None, ',.1f')}{version} | {wall} | "
                     f"{fmt(statistics.mean(solved), '.1f') if solved else '–'} |")
    lines += ["", "`return at budget`: each seed's mean return over its last 20 training episodes, then the mean ± std "
              "over seeds (the parity tables average CleanRL's last 100).",
              "", "`solved s`: seconds from the run's start (compile and capture included) until the mean return "
              "of the last 100 episodes reached `--stop-at-return`. Eager runs one seed on a shorter budget: it is "
              "the wall-time reference of the return-vs-time plot, not a return at the default budget."]
    shared = sorted({r.get("concurrent_runs", 1) for r in runs} - {1})
    if shared:
        lines += ["", f"Some runs shared the machine ({', '.join(map(str, shared))} at a time, see each JSON's "
                  "`concurrent_runs`, and `gpu_sharing`: `mps` when CUDA MPS ran their kernels at once): their wall "
                  "seconds and return-vs-time curves are slower than a run alone; speed is measured alone, in the "
                  "speed suite."]
    return lines


def failures(runs: list[dict]) -> list[str]:
    failed = [r for r in runs if r["status"] not in ("ok", "partial")]  # partial: scripts/long_runs.py resumes it
    if not failed:
        return []
    lines = ["", "Failed runs (kept, never dropped):", ""]
    for r in failed:
        error = " ".join(r.get("error", "").split())[-300:]
        lines.append(f"- `{r['file']}`: `{r['command']}`: {error}")
    return lines


def ran_on(r: dict) -> list[tuple[dict, int]]:
    """The machines that a record's run ran on, each with how many runs shared it: its segments' own where
    long_runs recorded them (a run resumed on another machine), else the record's."""
    if not any(s.get("machine") for s in r.get("segments", [])):
        return [(r.get("machine", {}), r.get("concurrent_runs", 1))]
    return [(s.get("machine") or r["machine"], s.get("concurrent_runs", 1)) for s in r["segments"]]


def machines(runs: list[dict]) -> list[str]:
    seen, first_of_device = {}, {}
    for m in (m for r in runs for m, _ in ran_on(r)):
        first_of_device.setdefault(m.get("gpu") or m.get("cpu"), m)
        key = (m.get("gpu") or m.get("cpu"), m.get("torch"), m.get("tensordict"), m.get("gymnasium"), m.get("mujoco"))
        seen.setdefault(key, set()).add((m.get("git_commit") or "?")[:7] + ("+dirty" if m.get("git_dirty") else ""))
    lines = ["", "Measured on:"]
    for (device, torch_v, td, gym_v, mj), commits in seen.items():
        m = first_of_device[device]
        lines.append(f"- {device} (driver {m.get('driver') or '–'}; CPU {m.get('cpu')}), Python {m.get('python')}, "
                     f"torch {torch_v}, tensordict {td}, gymnasium {gym_v}, mujoco {mj or '–'}; "
                     f"commits {', '.join(sorted(commits))}")
    dates = sorted(r["date"] for r in runs if r.get("date"))
    if dates:
        lines.append(f"- dates {dates[0][:10]} to {dates[-1][:10]}; each JSON holds its exact command")
    return lines


def plot_speed(runs: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({(r["algo"], r["env_id"]) for r in runs})
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(tasks)), 4))
    width = 0.8 / len(PATHS)
    for i, p in enumerate(PATHS):
        heights = []
        for task in tasks:
            ok = steady_rates([r for r in runs if (r["algo"], r["env_id"]) == task and r["path"] == p])
            heights.append(statistics.median(ok) if ok else 0)
        ax.bar([t + (i - 1.5) * width for t in range(len(tasks))], heights, width, label=p)
    ax.set_xticks(range(len(tasks)), [f"{a}\n{e}" for a, e in tasks])
    ax.set_yscale("log")
    ax.set_ylabel("env steps/s (steady state)")
    ax.legend(fontsize=8)
    device = runs[0].get("machine", {}).get("gpu") or runs[0].get("machine", {}).get("cpu")
    ax.set_title(f"turborl steps/s per path ({device})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_returns(runs: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({(r["algo"], r["env_id"]) for r in runs if r["status"] == "ok"})
    fig, axes = plt.subplots(len(tasks), 2, figsize=(10, 2.6 * len(tasks)), squeeze=False)
    for row, task in zip(axes, tasks, strict=True):
        for r in runs:
            if (r["algo"], r["env_id"]) != task or r["status"] != "ok" or not r["curve"]["steps"]:
                continue
            label = f"{r['path']} s{r['seed']}"
            row[0].plot(r["curve"]["steps"], r["curve"]["returns"], label=label, lw=1)
            row[1].plot(r["curve"]["seconds"], r["curve"]["returns"], label=label, lw=1)
        for ax, xlabel in zip(row, ("env steps", "wall seconds"), strict=True):
            ax.set_title(f"{task[0]} {task[1]}", fontsize=9)
            ax.set_xlabel(xlabel, fontsize=8)
            ax.set_ylabel("episodic return", fontsize=8)
        if row[1].lines:  # a task whose runs logged no episode has no curve to name
            row[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


PARITY_COMMAND = """# MuJoCo v4, td3 and sac: a task's 5 seeds in one process, each seed's env stepping in a subprocess
python scripts/long_runs.py --labels td3 sac --num-seeds 5 --extra-flags=--async-envs
# MuJoCo v4, ppo: eager on the CPU's cores (CUDA hidden), 10 side by side
CUDA_VISIBLE_DEVICES= python scripts/long_runs.py --labels ppo --envs HalfCheetah-v4 Walker2d-v4 Hopper-v4 Ant-v4 \\
    --path eager --jobs 10
nvidia-cuda-mps-control -d      # one GPU: the runs' kernels share it at once, not taking turns
python scripts/long_runs.py     # the rest (a seed ok on any path is done), 12 side by side, to the end (resumable)
python scripts/report.py        # -> results/parity/README.md and its plots"""


def seed_return(run: dict, reference: Reference | None) -> float | None:
    """A finished run's return in the reference's terms: its final policy's evaluation for a model card, else the
    mean of its last 100 training episodes (the last 20 for runs recorded before the last 100 were kept)."""
    if reference is not None and reference.metric == "eval":
        return run.get("eval_return")
    return run.get("return_last100", run.get("final_return"))


def iqm_interval(scores) -> tuple[float, float, float]:
    """The interquartile mean of `scores` (`[runs, tasks]`) and its 95% stratified-bootstrap interval (rliable:
    runs resampled within each task), from a fixed random state: every machine prints the same table."""
    import warnings

    import numpy as np
    from rliable import library, metrics

    # rliable resamples the runs with numpy's global RNG (its `random_state` reaches only arch): seed it, then give
    # the caller's state back.
    state = np.random.get_state()
    np.random.seed(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # arch prefers a Generator to rliable's RandomState
            point, interval = library.get_interval_estimates(
                {"run": np.asarray(scores, dtype=float)}, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=2000,
                random_state=np.random.RandomState(0))
    finally:
        np.random.set_state(state)
    return float(point["run"][0]), float(interval["run"][0, 0]), float(interval["run"][1, 0])


def parity_rows(runs: list[dict], short: bool = False) -> list[str]:
    """One row per script x env: our mean ± std over finished seeds against CleanRL's, pass or fail, wall time.
    `short`: the rows with finished seeds, without the wall time and machine (the README's table)."""
    groups = {key: [] for key in PARITY_TASKS}
    for run in runs:
        groups.setdefault((run["env_id"], run["algo"]), []).append(run)
    lines = ["| env | script | seeds | turborl (mean ± std) | turborl IQM [95% CI] | CleanRL (mean ± std, seeds, "
             "steps) | pass | wall s per run | machine |", "|---|---|---:|---:|---:|---:|:---:|---:|---|"]
    for (env_id, algo), group in sorted(groups.items()):
        reference, task = CLEANRL.get((algo, env_id)), PARITY_TASKS.get((env_id, algo))
        ok = [r for r in group if r["status"] == "ok"]
        values = [v for v in (seed_return(r, reference) for r in ok) if v is not None]
        ours = f"{statistics.mean(values):,.1f} ± {statistics.pstdev(values):,.1f}" if values else "–"
        if any("return_last100" not in r for r in ok) and (reference is None or reference.metric != "eval"):
            ours += " †"
        seeds = str(len(ok))
        unfinished = [r for r in group if r["status"] == "partial"]
        if unfinished:
            seeds += f" (+{len(unfinished)} at {min(r['reached'] for r in unfinished):,}+ steps)"
        if reference is not None:
            theirs = (f"{reference.mean:,.1f} ± {reference.std:,.1f} ({reference.seeds or '?'}, "
                      f"{reference.steps / 1e6:g}M{', eval' if reference.metric == 'eval' else ''})")
            verdict = ("pass" if statistics.mean(values) >= reference.mean - reference.std else "**fail**") \
                if values else "not run" if not group else "–"
        else:  # GPU physics, no CleanRL script: a run with --stop-at-return passes by reaching it; a curve has no rule
            solved = [r["solved_seconds"] for r in ok if r.get("solved_seconds") is not None]
            evals = [r["eval_return"] for r in ok if r.get("eval_return") is not None]
            parts = [f"to 5,000 in {statistics.mean(solved):.0f} ± {statistics.pstdev(solved):.0f} s"] if solved else []
            theirs = "; ".join(parts + ([f"C engine {statistics.mean(evals):,.0f}"] if evals else [])) or "–"
            stops = task is not None and "--stop-at-return" in task.flags
            verdict = "not run" if not ok else ("pass" if len(solved) == len(ok) else "**fail**") if stops else "–"
        wanted = task.seeds if task is not None else 3
        if ok and len(ok) < wanted:
            verdict += f" ({len(ok)} of {wanted} seeds)"
        wall = fmt(statistics.mean([r["run_wall_seconds"] for r in ok]), ",.0f") if ok else "–"
        machine = sorted({(m.get("gpu") or "CPU " + str(m.get("cpu"))) + (f", {n} side by side" if n > 1 else "")
                          for r in ok for m, n in ran_on(r)})
        if short:
            lines += [f"| {env_id} | {algo} | {seeds} | {ours} | {theirs} | {verdict} |"] if ok else []
        else:
            iqm = "{:,.1f} [{:,.1f}, {:,.1f}]".format(*iqm_interval([[v] for v in values])) if len(values) > 2 else "–"
            lines.append(f"| {env_id} | {algo} | {seeds} | {ours} | {iqm} | {theirs} | {verdict} | {wall} | "
                         f"{'; '.join(machine) or '–'} |")
    if short:
        lines[:2] = ["| env | script | seeds | turborl (mean ± std) | CleanRL (mean ± std, seeds, steps) | pass |",
                     "|---|---|---:|---:|---:|:---:|"]
    if any("†" in line for line in lines):
        lines += ["", "†: some seeds' return is their last 20 episodes (recorded before the last 100 were kept)."]
    return lines


def aggregate_rows(runs: list[dict]) -> list[tuple[str, list[str], int, tuple[float, float, float], dict]]:
    """Per script: the MuJoCo v4 tasks whose row has all its seeds, the seeds used per task, the IQM with its
    interval of the CleanRL-normalized scores (a seed's return / CleanRL's mean on that task), `[seeds, tasks]`, and
    the tasks that enter with other seeds than 1 to n (task: which, of how many). Every task enters with the same
    number of seeds, its lowest-numbered (the suite's own): rliable's tasks weigh alike."""
    rows = []
    for algo in sorted({label for env_id, label in PARITY_TASKS if env_id in MUJOCO_V4}):
        columns = {}
        for env_id in MUJOCO_V4:
            reference = CLEANRL.get((algo, env_id))
            if reference is None:
                continue
            ok = sorted((r for r in runs if (r["env_id"], r["algo"], r["status"]) == (env_id, algo, "ok")),
                        key=lambda r: r["seed"])
            scored = [(r["seed"], v / reference.mean) for r, v in ((r, seed_return(r, reference)) for r in ok)
                      if v is not None]  # (seed, score), by seed
            if len(scored) >= PARITY_TASKS[(env_id, algo)].seeds:
                columns[env_id] = scored
        if columns:
            n = min(len(scored) for scored in columns.values())
            more = {}  # the tasks that enter with other seeds than 1 to n: which
            for env_id, scored in columns.items():
                used = [seed for seed, _ in scored[:n]]
                if len(scored) > n or used != list(range(1, n + 1)):
                    more[env_id] = ("seeds " + (f"{used[0]}-{used[-1]}" if used == list(range(used[0], used[-1] + 1))
                                                else ", ".join(map(str, used)))
                                    + (f" of its {len(scored)}" if len(scored) > n else ""))
            rows.append((algo, list(columns), n,
                         iqm_interval([[c[i][1] for c in columns.values()] for i in range(n)]), more))
    return rows


def gpu_time(runs: list[dict]) -> list[str]:
    """The GPU time of the MuJoCo v4 rows: each stretch of a GPU's wall time in which at least one of their runs was
    on it, with the seeds whose last segment it holds. A segment starts at its run folder's time stamp (the scripts
    name it `{env}__{algo}__{seed}__{unix time}`) and lasts its recorded seconds."""
    segments = defaultdict(list)  # gpu -> [(start, end, run or None)]: the run where this is its last segment
    for run in runs:
        if run["env_id"] in MUJOCO_V4:
            for i, seg in enumerate(run.get("segments", [])):
                stamp = re.search(r"__(\d+)(?:-\d+)?$", seg["run_dir"])  # `-2`: a second run in the same second
                gpu = (seg.get("machine") or run["machine"]).get("gpu")
                if stamp is None or not gpu:
                    continue
                start = int(stamp.group(1))
                segments[gpu].append(
                    (start, start + seg["wall_seconds"], run if i == len(run["segments"]) - 1 else None))
    stretches = []
    for gpu, spans in segments.items():
        mine = []
        for start, end, run in sorted(spans, key=lambda span: span[:2]):
            if not mine or start > mine[-1]["end"] + RESUME_GAP:  # the records name a GPU's model, not its machine
                mine.append({"gpu": gpu, "start": start, "end": end, "runs": []})
            mine[-1]["end"] = max(mine[-1]["end"], end)
            mine[-1]["runs"] += [run] if run else []
        stretches += mine
    if not stretches:
        return []
    lines = ["## GPU time of the MuJoCo v4 rows", "",
             "Each line is a stretch of wall time with at least one MuJoCo v4 run of the records above on a GPU of "
             "that model: the union of the runs' segments (each from its run folder's time stamp for its recorded "
             f"seconds), a gap of up to {RESUME_GAP // 60} minutes (a stop and its resume) counted in. Not in it: "
             "the machine's start, each process's own start before its run folder exists, tests run beside, runs "
             "that left no record. A seed counts in the stretch of its last segment.", "",
             "| start (UTC) | GPU | minutes | seeds finished | seeds stopped | runs |", "|---|---|---:|---:|---:|---|"]
    for stretch in sorted(stretches, key=lambda s: s["start"]):
        start = datetime.datetime.fromtimestamp(stretch["start"], datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
        tasks = sorted({f"{r['algo']} {r['env_id']}" for r in stretch["runs"]})
        lines.append(f"| {start} | {stretch['gpu']} | {(stretch['end'] - stretch['start']) / 60:.1f} | "
                     f"{sum(r['status'] == 'ok' for r in stretch['runs'])} | "
                     f"{sum(r['status'] == 'partial' for r in stretch['runs'])} | {', '.join(tasks)} |")
    total = sum(s["end"] - s["start"] for s in stretches) / 60
    statuses = [r["status"] for s in stretches for r in s["runs"]]
    lines += [f"| total | | {total:.1f} | {statuses.count('ok')} | {statuses.count('partial')} | |", ""]
    return lines


def plot_aggregate(rows: list[tuple], path: str) -> None:
    """Each script's IQM of the CleanRL-normalized score with its 95% interval; 1 is CleanRL's mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 0.6 + 0.5 * len(rows)))
    for i, (_, _, _, (iqm, low, high), _) in enumerate(rows):
        ax.errorbar([iqm], [i], xerr=[[iqm - low], [high - iqm]], fmt="o", capsize=4, color=f"C{i}")
    ax.set_yticks(range(len(rows)), [f"{algo} ({len(tasks)} tasks x {n} seeds)" for algo, tasks, n, *_ in rows],
                  fontsize=8)
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.set_xlabel("IQM of return / CleanRL's mean, 95% stratified-bootstrap interval", fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_seed_scaling(folder: str) -> None:
    """results/experiments/seeds: env steps/s against --num-seeds, all seeds together and per seed, for each script
    with two seed counts or more in one sitting (a folder of records under speed/, measured back to back), and its
    peer of single-seed processes (`-procsN`) at N; one PNG per sitting, beside its folder. An `-async` variant
    (`--async-envs` given, not left to the script) is the same series: the record's `async_envs` says where the envs
    stepped either way."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for sitting in sorted(glob.glob(os.path.join(folder, "speed", "*", ""))):
        rates = defaultdict(dict)  # (script, "seeds" | "procs") -> {N: steps/s}
        for run in load(sitting):
            label = re.fullmatch(r"(.+)-(seeds|procs)(\d+)(?:-async)?", run["algo"])
            if label and steady_rates([run]):
                rates[label[1], label[2]][int(label[3])] = run["steady_sps"]
        scripts = sorted(script for script, kind in rates if kind == "seeds" and len(rates[script, kind]) > 1)
        if not scripts:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        for color, script in enumerate(scripts):
            ns = sorted(rates[script, "seeds"])
            for ax, per_seed in zip(axes, (False, True), strict=True):
                ax.plot(ns, [rates[script, "seeds"][n] / (n if per_seed else 1) for n in ns], "o-", color=f"C{color}",
                        label=f"{script} --num-seeds N")
                for n, sps in rates[script, "procs"].items():
                    ax.plot([n], [sps / (n if per_seed else 1)], "*", markersize=11, color=f"C{color}",
                            label=f"{script}: {n} single-seed processes (MPS)")
        counts = sorted({n for key in rates for n in rates[key]})
        for ax, title in zip(axes, ("all seeds", "per seed"), strict=True):
            ax.set_xscale("log", base=2)
            ax.set_xticks(counts, [str(n) for n in counts])
            ax.minorticks_off()
            ax.set_xlabel("seeds (N)", fontsize=8)
            ax.set_ylabel(f"env steps/s, {title}", fontsize=8)
            ax.set_ylim(bottom=0)
        axes[0].legend(fontsize=7)
        fig.suptitle(f"seeds as a batch axis, sitting {os.path.basename(os.path.normpath(sitting))}", fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.normpath(sitting) + ".png", dpi=100)
        plt.close(fig)


def plot_parity(runs: list[dict], env_id: str, path: str) -> None:
    """The seeds' mean return and their range against env steps, per script, with CleanRL's final mean ± std."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for color, algo in enumerate(sorted({r["algo"] for r in runs if r["env_id"] == env_id})):
        seeds = [r for r in runs if (r["env_id"], r["algo"]) == (env_id, algo) and r["status"] == "ok"
                 and len(r["curve"]["steps"]) > 1]
        if not seeds:
            continue
        budget = max(r["steps"] for r in runs if (r["env_id"], r["algo"]) == (env_id, algo))
        grid = np.linspace(0, max(r["reached"] for r in seeds), 101)  # to where the longest run ended

        def on_grid(run: dict) -> np.ndarray:
            """A run's curve (single episodes, ~200 spread over it) as a moving mean over 11 of them (the ends
            padded with their own values), on the grid; NaN past the steps the run reached, so that a seed that
            stopped early (`--stop-at-return`) is not drawn on at its last value."""
            steps, returns = run["curve"]["steps"], run["curve"]["returns"]
            smooth = np.convolve(np.pad(returns, 5, mode="edge"), np.ones(11) / 11, mode="valid")
            return np.where(grid <= run["reached"], np.interp(grid, steps, smooth), np.nan)

        ys = np.array([on_grid(r) for r in seeds])  # every grid point has the longest run's value
        ax.plot(grid, np.nanmean(ys, 0), color=f"C{color}", label=f"{algo} ({len(seeds)} seeds)")
        ax.fill_between(grid, np.nanmin(ys, 0), np.nanmax(ys, 0), color=f"C{color}", alpha=0.2)
        reference = CLEANRL.get((algo, env_id))
        if reference is not None:
            ax.errorbar([min(reference.steps, budget)], [reference.mean], yerr=[reference.std], fmt="o", capsize=4,
                        color=f"C{color}", label=f"CleanRL {algo}" + (" at 8M" if reference.steps > budget else ""))
    ax.set_title(f"{env_id}: turborl (mean, band: min-max over seeds) vs CleanRL's final", fontsize=9)
    ax.set_xlabel("env steps", fontsize=8)
    ax.set_ylabel("episodic return", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parity_report(folder: str, plots: bool = True) -> str:
    """results/parity/README.md: the parity table, one plot per env, the command; from folder/runs/*.json."""
    runs = load(os.path.join(folder, "runs"))
    files = defaultdict(list)
    for run in runs:
        files[run["algo"], run["env_id"], run["seed"]].append(run["file"])
    twice = next((names for names in files.values() if len(names) > 1), None)
    if twice:  # the paths compute one algorithm: a seed run on two would count twice in its row
        raise UserError(f"{os.path.join(folder, 'runs')}: {' and '.join(twice)} are one seed of one row; keep one")
    out = ["# Learning parity with CleanRL", "",
           "Each script against the CleanRL script it reproduces, on CleanRL's benchmark: its env versions, budgets",
           "and default hyperparameters (`scripts/registry.py`, `parity` tasks); seeds: 5 on MuJoCo v4, 3 on classic",
           "control and GPU physics, 1 on Atari. turborl's return per seed is the mean of its last 100 training",
           "episodes, as CleanRL's tables (openrlbenchmark) compute theirs; the mean ± std is over seeds (population",
           "std). Pass: turborl's mean ≥ CleanRL's mean − CleanRL's std.",
           "CleanRL publishes no Ant-v4 table at 1M steps: those rows compare our final policies' 10 deterministic",
           "episodes with a model card of one seed (`eval`), and PPO's with its 8M-step figure. The GPU physics rows",
           "have no CleanRL script: they pass when every seed's mean return over its last 100 episodes reaches 5,000,",
           "where the run stops (`--stop-at-return`; the episodes that end in the iteration of the stop are logged",
           "too, so the last 100 logged can average a little under 5,000); their CleanRL column holds, instead, our",
           "seconds to 5,000 and the final policies' return on gymnasium's C engine. The Ant-v5 rows are curves",
           "(the return against wall time over 30M steps) with no pass rule; their column holds the C engine's",
           "return alone.", "",
           *parity_rows(runs), "",
           "Sources: " + "; ".join(sorted({f"{r.source}" for r in {CLEANRL[k] for k in CLEANRL}})) + ".", "",
           "Reproduce the whole suite (on one GPU; the classic-control rows may run on a CPU with `--path eager`):", "",
           "```bash", PARITY_COMMAND, "```", "",
           "Where the runs ran, the failing rows' investigation and what is left: [NOTES.md](NOTES.md). "
           "Runs longer than one machine's sitting are stopped and resumed: `python scripts/long_runs.py "
           "--deadline 540` stops the runs still going in time to end by 540 s (each checkpoints) and the next call "
           "resumes them. "
           "Each run's JSON in `runs/` holds its exact command, segments, machine and versions.", ""]
    rows = aggregate_rows(runs)
    if rows:
        out += ["## Aggregate over MuJoCo v4", "",
                "Per script, the interquartile mean (IQM) of the CleanRL-normalized score (each seed's return over "
                "CleanRL's mean on that task, as the rows above compare them) across the MuJoCo v4 tasks whose rows "
                "have all their seeds, with its 95% stratified-bootstrap interval (`rliable`, 2,000 resamples of the "
                "seeds within each task). 1.0 is CleanRL's mean. Every task enters with as many seeds as the fewest "
                "has, its lowest-numbered (the suite's own), so that the tasks weigh alike.", "",
                "| script | tasks | seeds per task | IQM [95% CI] |", "|---|---|---:|---:|"]
        out += [f"| {algo} | {', '.join(tasks)} | {n}"
                + "".join(f" ({env_id}: {used})" for env_id, used in more.items())
                + f" | {iqm:.3f} [{low:.3f}, {high:.3f}] |" for algo, tasks, n, (iqm, low, high), more in rows]
        out += ["", "![aggregate](aggregate.png)", ""]
        if plots:
            plot_aggregate(rows, os.path.join(folder, "aggregate.png"))
    out += gpu_time(runs)
    out += machines(runs) + [""]
    for env_id in sorted({r["env_id"] for r in runs if r["status"] == "ok"}):
        if plots:
            plot_parity(runs, env_id, os.path.join(folder, f"{env_id}.png"))
        out += [f"![{env_id}]({env_id}.png)"]
    return "\n".join(out) + "\n"


def report(args: Args) -> dict[str, str]:
    """Every generated Markdown file, path -> text: `<results>/README.md`, `<results>/parity/README.md` and the
    README's table blocks. The plots are written here (unless --no-plots); the texts by the caller (`write`)."""
    own = args.results is None  # another folder's tables do not belong in this repository's README
    args = replace(args, results=args.results or os.path.join(ROOT, "results"),
                   readme=(os.path.join(ROOT, "README.md") if own else "") if args.readme is None else args.readme)
    if not os.path.isdir(args.results):
        raise UserError(f"--results {args.results} is not a folder; pass the folder of the suites' records")
    suites = sorted(d for d in os.listdir(args.results) if glob.glob(os.path.join(args.results, d, "*.json")))
    for suite in suites:  # a run folder's args.json and summary.json are no benchmark records
        if not all(isinstance(run, dict) and "suite" in run for run in load(os.path.join(args.results, suite))):
            raise UserError(f"{os.path.join(args.results, suite)} holds JSON files that are not benchmark "
                             "records; pass --results the folder whose subfolders are suites of records (results/)")
    if not suites and not glob.glob(os.path.join(args.results, "parity", "runs", "*.json")):
        one_suite = any(isinstance(run, dict) and "suite" in run for run in load(args.results))
        raise UserError(f"no suites of records under {args.results}" + (
            " (it holds one suite's records: pass the folder above it)" if one_suite
            else "; run python scripts/benchmark.py first"))
    out = ["# turborl benchmark results", "",
           "Generated by `python scripts/report.py` from the JSON files in each folder below (one per run, written by",
           "`python scripts/benchmark.py`). Steps/s is the median of the steady-state windows (after compile and",
           "capture); `floor` is the time of the fastest path's hot functions replayed alone, without a simulator.",
           "`reduce-overhead` is the peer baseline, `torch.compile(mode=\"reduce-overhead\")` (torch's own CUDA",
           "graphs), and `compile+cudagraphs / reduce-overhead` the speed-up of turborl's path over it.", ""]
    speed_block = None
    files = {}
    for suite in suites:
        runs = load(os.path.join(args.results, suite))
        out += [f"## {suite}", ""]
        if any(r["suite"] == "learning" for r in runs):
            out += learning_table(runs)
        else:
            table = speed_table(runs)
            out += table
            speed_block = speed_block or (suite, table)
        out += failures(runs) + machines(runs)
        # The text links the plots whether or not this call draws them: it depends on the records alone.
        if not any(r["suite"] == "learning" for r in runs):
            if args.plots:
                plot_speed(runs, os.path.join(args.results, f"{suite}-steps-per-second.png"))  # measured alone
            out += ["", f"![steps/s per path]({suite}-steps-per-second.png)"]
        if args.plots:
            plot_returns(runs, os.path.join(args.results, f"{suite}-returns.png"))
        out += ["", f"![returns]({suite}-returns.png)"]
        out.append("")
    if glob.glob(os.path.join(args.results, "parity", "runs", "*.json")):
        files[os.path.join(args.results, "parity", "README.md")] = parity_report(os.path.join(args.results, "parity"),
                                                                                 args.plots)
        out += ["## parity", "", "Learning parity with CleanRL, over seeds: [parity/README.md](parity/README.md).", ""]
    experiments = sorted(glob.glob(os.path.join(args.results, "experiments", "*", "README.md")))
    if experiments:
        out += ["## experiments", "", "One-off A/B studies, each with its question, command and answer:", ""]
        out += [f"- [{os.path.basename(os.path.dirname(path))}]({os.path.relpath(path, args.results)}): "
                f"{open(path).readline().lstrip('# ').strip()}" for path in experiments]
        if args.plots and os.path.isdir(os.path.join(args.results, "experiments", "seeds", "speed")):
            plot_seed_scaling(os.path.join(args.results, "experiments", "seeds"))
    files[os.path.join(args.results, "README.md")] = "\n".join(out)
    if args.readme and os.path.exists(args.readme):
        with open(args.readme) as f:
            readme = f.read()
        if speed_block:
            rel = os.path.relpath(os.path.join(args.results, f"{speed_block[0]}-steps-per-second.png"),
                                  os.path.dirname(os.path.abspath(args.readme)))
            readme = with_block(readme, README_START, README_END, [*speed_block[1], "", f"![steps/s per path]({rel})"])
        if glob.glob(os.path.join(args.results, "parity", "runs", "*.json")):
            readme = with_block(readme, PARITY_START, PARITY_END,
                                parity_rows(load(os.path.join(args.results, "parity", "runs")), short=True))
        files[args.readme] = readme
    return files


def with_block(text: str, start_marker: str, end_marker: str, lines: list[str]) -> str:
    """`text` with the block between the markers replaced by these lines (unchanged without the markers)."""
    if start_marker not in text or end_marker not in text:
        return text
    start, end = text.index(start_marker), text.index(end_marker) + len(end_marker)
    return text[:start] + "\n".join([start_marker, *lines, end_marker]) + text[end:]


def stale(files: dict[str, str]) -> list[str]:
    """The files whose text on disk differs from the generated one (or that are missing)."""
    def on_disk(path):
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return f.read()

    return [path for path, text in files.items() if on_disk(path) != text]


def write(files: dict[str, str]) -> None:
    for path, text in files.items():
        with open(path, "w") as f:
            f.write(text)


def main(cli_args: Args) -> None:
    cli_args.plots = cli_args.plots and not cli_args.check
    missing = []
    for name in ("rliable", "matplotlib")[:1 + cli_args.plots]:  # the [report] extra
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise UserError(f"the report needs {' and '.join(missing)}: pip install -e '.[report]'")
    if cli_args.check:
        differing = stale(report(cli_args))
        for path in differing:
            print(f"error: {os.path.relpath(path)} is not what python scripts/report.py generates from the records "
                  "under results/: run it and commit the result with the records", file=sys.stderr)
        print(f"report --check: {len(differing)} file(s) differ" if differing else "report --check: up to date")
        sys.exit(1 if differing else 0)
    generated = report(cli_args)
    write(generated)
    print(f"wrote {', '.join(os.path.relpath(path) for path in generated)}" + (" and the plots" if cli_args.plots
                                                                               else ""))


if __name__ == "__main__":
    from turborl.cli import parse

    run_tool(main, parse(Args, description=__doc__.split("\n\n")[0]))
