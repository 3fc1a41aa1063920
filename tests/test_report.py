"""Benchmark records (ok and failed) and the report built from them."""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import pytest

from scripts import benchmark, report
from tests.helpers import ROOT
from turborl.errors import UserError


def test_a_speed_record_says_whether_the_envs_stepped_in_subprocesses(tmp_path):
    """--async-envs left out depends on the machine's cores, so the record keeps what the run resolved."""
    benchmark.main(benchmark.Args(labels=["ppo"], envs=["CartPole-v1"], paths=["eager"], scale=0.02, variant="async",
                                  extra_flags="--async-envs", out=str(tmp_path)))
    with open(tmp_path / "ppo-async__CartPole-v1__eager__s1.json") as f:
        record = json.load(f)
    assert record["status"] == "ok" and record["async_envs"] is True
    assert "--async-envs" in record["command"]


def test_benchmark_records_a_real_run_and_a_failed_one(tmp_path):
    benchmark.main(benchmark.Args(algos=["dqn"], paths=["eager"], scale=0.02, out=str(tmp_path)))
    with open(tmp_path / "dqn__CartPole-v1__eager__s1.json") as f:
        ok = json.load(f)
    assert ok["status"] == "ok" and ok["steady_sps"] > 0 and ok["steps"] == 1000
    assert "async_envs" not in ok  # dqn has no such flag
    assert ok["command"].startswith("python algos/dqn.py --env-id CartPole-v1")
    assert ok["startup_seconds"] >= 0 and ok["steady_sps_whole"] > 0
    assert ok["machine"]["torch"] and ok["machine"]["device"] == ("cuda" if ok["machine"]["gpu"] else "cpu")
    assert len(ok["curve"]["returns"]) == ok["episodes"] > 0

    failed = benchmark.run_one(benchmark.Task("dqn", "NoSuchEnv-v0", 1000, 1000, 100), "eager", 1, 1.0, 60)
    assert failed["status"] == "failed" and "unknown env id" in failed["error"]


def test_the_peer_of_a_seeds_task_runs_one_seed_per_process_at_once(tmp_path, monkeypatch):
    task = benchmark.Task("dqn", "CartPole-v1", 20_000, 20_000, 500, variant="seeds3", flags=("--num-seeds", "3"))
    monkeypatch.setattr(benchmark, "ALGORITHMS", {"dqn": benchmark.ALGORITHMS["dqn"].__class__("dqn", speed=(task,))})
    benchmark.main(benchmark.Args(labels=["dqn-seeds3"], paths=["eager"], processes=2, scale=0.05, out=str(tmp_path)))
    [name] = os.listdir(tmp_path)
    record = json.load(open(tmp_path / name))
    assert name == "dqn-procs2__CartPole-v1__eager__s1.json" and record["status"] == "ok", record.get("error")
    assert record["processes"] == 2 and record["seeds"] == [1, 2] and "--num-seeds" not in record["command"]
    assert record["steady_sps"] == sum(record["steady_sps_per_process"]) and min(record["steady_sps_per_process"]) > 0
    assert record["floor_us_per_step"] is None  # one process's replay alone is no floor for processes that share
    with pytest.raises(UserError, match="--processes"):
        benchmark.main(benchmark.Args(suite="learning", processes=2, out=str(tmp_path)))


def test_a_seeds_record_reads_its_first_seed_and_leaves_no_run_folder(tmp_path, monkeypatch):
    """Ten seeds in one process: the return, the episodes and the curve all come from the first seed's folder (the
    tenth's sorts first by name), and the temporary run folders are gone once the record is written."""
    task = benchmark.Task("dqn", "CartPole-v1", 20_000, 20_000, 500, variant="seeds10", flags=("--num-seeds", "10"))
    plain = benchmark.Task("dqn", "CartPole-v1", 20_000, 20_000, 500)
    monkeypatch.setattr(benchmark, "ALGORITHMS", {"dqn": benchmark.ALGORITHMS["dqn"].__class__("dqn",
                                                                                              speed=(task, plain))})
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp")
    benchmark.main(benchmark.Args(labels=["dqn-seeds10"], paths=["eager"], scale=0.05, out=str(tmp_path / "out")))
    record = json.load(open(tmp_path / "out" / "dqn-seeds10__CartPole-v1__eager__s1.json"))
    assert record["status"] == "ok", record.get("error")
    assert len(record["curve"]["returns"]) == record["episodes"] > 0
    assert record["final_return"] == pytest.approx(statistics.mean(record["curve"]["returns"][-20:]))
    assert os.listdir(tmp_path / "tmp") == []
    with pytest.raises(UserError, match="no task of the speed suite matches the selection .the seeds tasks, "):
        benchmark.main(benchmark.Args(labels=["dqn"], num_seeds=3, out=str(tmp_path / "out")))
    with pytest.raises(UserError, match="--labels dqn-seeds3: no speed task has it; choose from dqn, dqn-seeds10$"):
        benchmark.main(benchmark.Args(labels=["dqn-seeds3"], out=str(tmp_path / "out")))  # not an empty selection


def test_learning_suite_runs_jobs_side_by_side_and_records_it(tmp_path):
    benchmark.main(benchmark.Args(suite="learning", algos=["dqn", "ppo"], envs=["CartPole-v1"], paths=["eager"],
                                  labels=["dqn", "ppo"], jobs=2, scale=0.02, out=str(tmp_path)))
    records = [json.load(open(tmp_path / f"{algo}__CartPole-v1__eager__s1.json")) for algo in ("dqn", "ppo")]
    assert [r["status"] for r in records] == ["ok", "ok"] and all(r["concurrent_runs"] == 2 for r in records)
    assert sorted(os.listdir(tmp_path)) == ["dqn__CartPole-v1__eager__s1.json", "ppo__CartPole-v1__eager__s1.json"]
    with pytest.raises(UserError, match="1 for the speed suite"):
        benchmark.main(benchmark.Args(suite="speed", jobs=2, out=str(tmp_path)))
    with pytest.raises(UserError, match="--scale must be > 0"):  # else a run of no steps, recorded as ok
        benchmark.main(benchmark.Args(suite="learning", algos=["dqn"], paths=["eager"], scale=-1, out=str(tmp_path)))


def sample_run(algo, env_id, path, sps, status="ok", suite="speed", seed=1, final_return=100.0):
    run = {"algo": algo, "env_id": env_id, "path": path, "seed": seed, "steps": 1000, "status": status,
           "suite": suite, "command": f"python algos/{algo}.py", "date": "2026-01-01T00:00:00+00:00",
           "machine": {"gpu": "Test GPU", "cpu": "Test CPU", "torch": "2.x", "tensordict": "0.15",
                       "gymnasium": "1.x", "mujoco": None, "git_commit": "abcdef0123", "git_dirty": False}}
    if status == "ok":
        run.update(steady_sps=sps, floor_us_per_step=50.0, startup_seconds=2.0, final_return=final_return,
                   run_wall_seconds=10.0, curve={"steps": [500, 1000], "seconds": [5, 10], "returns": [10.0, 20.0]})
    else:
        run["error"] = "exit 1: boom"
    return run


def test_report_tables_speedups_failures_and_readme_block(tmp_path):
    runs = {"speed": [sample_run("td3", "HalfCheetah-v5", "eager", 100.0),
                      sample_run("td3", "HalfCheetah-v5", "compile+cudagraphs", 2500.0) | {"peak_gpu_memory_mb": 812.4},
                      sample_run("td3", "HalfCheetah-v5", "compile", None, status="failed"),
                      sample_run("td3", "HalfCheetah-v5", "cudagraphs", None),  # too short for a steady window
                      sample_run("td3", "HalfCheetah-v5", "reduce-overhead", 1000.0)],  # the peer baseline
            "learning": [sample_run("dqn", "CartPole-v1", "compile+cudagraphs", 9000.0, suite="learning", seed=s,
                                    final_return=r) for s, r in ((1, 480.0), (2, 500.0))]}
    runs["learning"][0].update(solved_seconds=7.0, concurrent_runs=3)
    runs["learning"][1].update(solved_seconds=9.0, concurrent_runs=3)
    results = tmp_path / "results"
    for suite, records in runs.items():
        os.makedirs(results / suite)
        for i, record in enumerate(records):
            with open(results / suite / f"{i}.json", "w") as f:
                json.dump(record, f)
    readme = tmp_path / "project" / "README.md"
    readme.parent.mkdir()
    readme.write_text(f"intro\n{report.README_START}\nold\n{report.README_END}\nrest\n")

    files = report.report(report.Args(results=str(results), readme=str(readme)))
    report.write(files)
    text = files[str(results / "README.md")]

    assert ("| td3 | HalfCheetah-v5 | 100 | failed | no steady window | 2,500 | 1,000 | 25.0x (compile+cudagraphs) "
            "| 2.50x | 400 (50) | 2.0 | 812 |" in text)
    assert "exit 1: boom" in text and "Test GPU" in text and "abcdef0" in text
    assert "| dqn | CartPole-v1 | compile+cudagraphs | 1,000 | 2 | 490.0 ± 10.0 | 488.7 | 10 | 8.0 |" in text
    assert "shared the machine (3 at a time" in text
    assert (results / "speed-steps-per-second.png").stat().st_size > 1000
    assert (results / "learning-returns.png").exists()
    new = readme.read_text()
    assert "old" not in new and "25.0x" in new and new.startswith("intro") and new.endswith("rest\n")
    assert "../results/speed-steps-per-second.png" in new


def test_the_seeds_experiment_gets_a_plot_per_sitting_with_two_seed_counts_or_more(tmp_path):
    results = tmp_path / "results"
    (results / "speed").mkdir(parents=True)
    with open(results / "speed" / "0.json", "w") as f:
        json.dump(sample_run("td3", "Hopper-v4", "eager", 100.0), f)
    seeds = results / "experiments" / "seeds"
    (seeds / "README.md").parent.mkdir(parents=True)
    (seeds / "README.md").write_text("# Seeds\n")
    sittings = {"two-counts": [("td3-seeds5-async", 4000.0), ("td3-seeds10", 8000.0), ("td3-procs10", 13000.0)],
                "one-count": [("td3-seeds10", 8000.0), ("sac-seeds10", 4000.0), ("td3-procs10", 13000.0)]}
    for sitting, records in sittings.items():
        (seeds / "speed" / sitting).mkdir(parents=True)
        for label, sps in records:
            with open(seeds / "speed" / sitting / f"{label}.json", "w") as f:
                json.dump(sample_run(label, "Hopper-v4", "compile+cudagraphs", sps), f)

    report.report(report.Args(results=str(results), readme=""))

    assert (seeds / "speed" / "two-counts.png").stat().st_size > 1000
    assert not (seeds / "speed" / "one-count.png").exists()  # one seed count: no line to draw


def test_a_variant_runs_its_tasks_with_the_extra_flags_under_its_own_label():
    args = benchmark.Args(labels=["ppo-torch4096"], paths=["compile+cudagraphs"], variant="autotune",
                          extra_flags="--max-autotune --log-every 7")
    [(task, path, seed)] = benchmark.plan(args, cuda=True)
    assert task.label == "ppo-torch4096-autotune" and (path, seed) == ("compile+cudagraphs", 1)
    assert task.flags[-3:] == ("--max-autotune", "--log-every", "7") and "--tf32" in task.flags
    with pytest.raises(UserError, match="go together"):
        benchmark.main(benchmark.Args(variant="autotune"))


def test_num_seeds_runs_the_seeds_tasks_alone_with_that_many_seeds_under_their_own_label():
    args = benchmark.Args(labels=["td3-seeds10", "td3"], paths=["compile+cudagraphs"], num_seeds=20)
    [(task, _, _)] = benchmark.plan(args, cuda=True)  # td3 (HalfCheetah-v5) has no seeds axis: not run
    assert task.label == "td3-seeds20" and task.flags[task.flags.index("--num-seeds"):][:2] == ("--num-seeds", "20")
    assert task.flags.count("--num-seeds") == 1
    args = benchmark.Args(labels=["td3-seeds10"], paths=["eager"], num_seeds=5, variant="async",
                          extra_flags="--async-envs")
    [(task, _, _)] = benchmark.plan(args, cuda=True)  # a variant keeps its name beside the seeds
    assert task.label == "td3-seeds5-async" and task.flags[-1] == "--async-envs"
    args = benchmark.Args(labels=["td3-seeds10", "td3", "td3-fused"], paths=["eager"], processes=10, variant="tf32",
                          extra_flags="--tf32")
    [(task, _, _)] = benchmark.plan(args, cuda=True)  # the peer too: its flags and their name, of seeds tasks only
    assert task.label == "td3-procs10-tf32" and task.flags[-1] == "--tf32" and "--num-seeds" not in task.flags
    with pytest.raises(UserError, match="--num-seeds must be >= 1, or 0"):
        benchmark.main(benchmark.Args(num_seeds=-1))
    for bad in (dict(num_seeds=5, processes=5), dict(num_seeds=5, suite="learning")):
        with pytest.raises(UserError, match="--num-seeds is for the speed suite, without --processes"):
            benchmark.main(benchmark.Args(**bad))


def test_benchmark_runs_a_compile_only_task_in_the_compiled_paths_only():
    runs = benchmark.plan(benchmark.Args(labels=["ppo-torch4096-tuned", "ppo-torch4096"]), cuda=True)
    paths = {label: [path for task, path, _ in runs if task.label == label]
             for label in ("ppo-torch4096-tuned", "ppo-torch4096")}
    assert paths == {"ppo-torch4096-tuned": ["compile", "compile+cudagraphs"],
                     "ppo-torch4096": list(benchmark.PATH_FLAGS)}
    assert not benchmark.plan(benchmark.Args(labels=["ppo-torch4096-tuned"]), cuda=False)  # CUDA only


def parity_run(algo, env_id, seed, last100, status="ok", **extra):
    run = sample_run(algo, env_id, "compile+cudagraphs", None, status=status, suite="learning", seed=seed)
    run.update(steps=1_000_000, concurrent_runs=12, reached=1_000_000, **extra)
    if status == "ok":
        run.update(return_last100=last100, final_return=last100 + 1, eval_return=last100 + 2, run_wall_seconds=900.0,
                   curve={"steps": [0, 500_000, 1_000_000], "seconds": [0, 450, 900],
                          "returns": [0.0, last100 / 2, last100]})
    return run


def test_a_run_resumed_on_another_machine_names_both(tmp_path):
    """A record whose segments ran on two machines (long_runs records each segment's): the row and the list of
    machines name both, with their commits; a record without them names its own machine."""
    run = parity_run("ppo-atari", "Breakout-v5", 1, 400.0) | {"concurrent_runs": 2}
    other = {**run["machine"], "gpu": "Other GPU", "git_commit": "1234567abc"}
    run["segments"] = [{"run_dir": "a", "steps": 6_000_000, "wall_seconds": 1.0, "concurrent_runs": 2,
                        "machine": other},
                       {"run_dir": "b", "steps": 10_000_000, "wall_seconds": 1.0, "concurrent_runs": 2,
                        "machine": run["machine"]}]
    alone = parity_run("pqn-atari", "Breakout-v5", 1, 390.0)
    os.makedirs(tmp_path / "runs")
    for name, record in (("ppo", run), ("pqn", alone)):
        (tmp_path / "runs" / f"{name}.json").write_text(json.dumps(record))

    text = report.parity_report(str(tmp_path), plots=False)

    assert next(line for line in text.splitlines() if line.startswith("| Breakout-v5 | ppo-atari |")).endswith(
        "| Other GPU, 2 side by side; Test GPU, 2 side by side |")
    assert next(line for line in text.splitlines() if line.startswith("| Breakout-v5 | pqn-atari |")).endswith(
        "| Test GPU, 12 side by side |")
    assert "- Other GPU (" in text and "commits 1234567" in text and "commits abcdef0" in text


def test_the_aggregate_weighs_tasks_alike_and_names_the_seeds_it_leaves_out(tmp_path):
    """A row with more seeds than the others (td3 HalfCheetah-v4 has 10) enters the aggregate with as many as the
    fewest, its lowest-numbered, and the table says which."""
    hopper, walker = report.CLEANRL[("td3", "Hopper-v4")], report.CLEANRL[("td3", "Walker2d-v4")]
    spread = (-100, -50, 0, 50, 100)
    runs = [parity_run("td3", "Hopper-v4", s, hopper.mean + d) for s, d in enumerate(spread, 1)]
    runs += [parity_run("td3", "Walker2d-v4", s, walker.mean + d) for s, d in enumerate(spread, 1)]
    runs += [parity_run("td3", "Walker2d-v4", s, 10 * walker.mean) for s in (6, 7)]  # would move the IQM if counted
    runs[0]["seed"] = 9  # Hopper-v4's seeds 2-5 and 9
    os.makedirs(tmp_path / "runs")
    for i, run in enumerate(runs):
        (tmp_path / "runs" / f"{i}.json").write_text(json.dumps(run))

    text = report.parity_report(str(tmp_path), plots=False)

    assert ("| td3 | Walker2d-v4, Hopper-v4 | 5 (Walker2d-v4: seeds 1-5 of its 7) (Hopper-v4: seeds 2, 3, 4, 5, 9) | "
            "1.000 [") in text
    assert "| Walker2d-v4 | td3 | 7 |" in text  # the row itself reports every seed


def test_parity_report_passes_fails_and_lists_what_is_not_run(tmp_path):
    hopper, sac_hopper = report.CLEANRL[("td3", "Hopper-v4")], report.CLEANRL[("sac", "Hopper-v4")]
    below = sac_hopper.mean - sac_hopper.std - 100  # fails by 100
    spread = (-100, -50, 0, 50, 100)  # MuJoCo rows want 5 seeds
    runs = [parity_run("td3", "Hopper-v4", s, hopper.mean + d) for s, d in enumerate(spread, 1)]
    runs += [parity_run("sac", "Hopper-v4", 1, below), parity_run("sac", "Hopper-v4", 2, below),
             parity_run("sac", "Hopper-v4", 3, None, status="partial", return_at_stop=10.0) | {"reached": 600_000}]
    runs += [parity_run("td3", "Ant-v4", 1, 10.0)]  # a model card: compared on the final policy's evaluation (12.0)
    # Their segments on the GPU: td3's 5 seeds in one process from t = 1,000,000 s for 900 s; sac's from 600 s later,
    # stopped at 900 s and resumed 100 s later (one stretch, 1,600 s); td3 Ant 301 s after that (a stretch of its own).
    def segment(run, start, seconds):  # seed 5 started in the same second as another run: its folder is `...-2`
        name = f"{run['env_id']}__{run['algo']}__{run['seed']}__{start}" + ("-2" if run["seed"] == 5 else "")
        return {"run_dir": f"runs/long/x/{name}", "wall_seconds": seconds}

    for run in runs[:5]:
        run["segments"] = [segment(run, 1_000_000, 900.0)]
    for run in runs[5:8]:
        resumed = [segment(run, 1_001_000, 600.0)] if run["seed"] < 3 else []
        run["segments"] = [segment(run, 1_000_600, 300.0)] + resumed
    runs[8]["segments"] = [segment(runs[8], 1_001_901, 600.0)]
    folder = tmp_path / "parity"
    os.makedirs(folder / "runs")
    for i, run in enumerate(runs):
        with open(folder / "runs" / f"{i}.json", "w") as f:
            json.dump(run, f)

    text = report.parity_report(str(folder))
    (folder / "README.md").write_text(text)

    # The interquartile mean of 5 seeds is the mean of the middle 3: here CleanRL's mean; its interval spans it.
    row = next(line for line in text.splitlines() if line.startswith("| Hopper-v4 | td3 |"))
    assert row.startswith(f"| Hopper-v4 | td3 | 5 | {hopper.mean:,.1f} ± {statistics.pstdev(spread):,.1f} | "
                          f"{hopper.mean:,.1f} [")
    low, high = (float(v.replace(",", "")) for v in row.split(" [")[1].split("]")[0].split(", "))
    assert hopper.mean - 100 <= low < hopper.mean < high <= hopper.mean + 100
    assert row.endswith(f"| {hopper.mean:,.1f} ± {hopper.std:,.1f} (3, 1M) | pass | 900 | Test GPU, 12 side by side |")
    # The aggregate: td3's one complete MuJoCo row (Hopper-v4, 5 seeds), its IQM over CleanRL's mean is 1; sac's
    # Hopper row lacks seeds and Ant-v4 has 1 of 5: neither enters it.
    aggregate = text.split("## Aggregate over MuJoCo v4")[1].split("Measured on")[0]
    assert "| td3 | Hopper-v4 | 5 | 1.000 [" in aggregate and "| sac |" not in aggregate and "![aggregate]" in aggregate
    assert (folder / "aggregate.png").stat().st_size > 1000
    assert f"| Hopper-v4 | sac | 2 (+1 at 600,000+ steps) | {below:,.1f} ± 0.0 |" in text and "**fail** (2 of 5" in text
    assert "| Ant-v4 | td3 | 1 | 12.0 ± 0.0 |" in text  # the evaluation, not the training return
    assert "| Walker2d-v4 | td3 | 0 | – |" in text and "not run" in text  # every parity task has its row
    assert "| 1970-01-12 13:46 | Test GPU | 26.7 | 7 | 1 | sac Hopper-v4, td3 Hopper-v4 |" in text
    assert "| 1970-01-12 14:18 | Test GPU | 10.0 | 1 | 0 | td3 Ant-v4 |" in text
    assert "| total | | 36.7 | 8 | 1 | |" in text
    assert "python scripts/long_runs.py" in text and "docs.cleanrl.dev/rl-algorithms/td3/" in text
    assert (folder / "Hopper-v4.png").stat().st_size > 1000 and (folder / "README.md").read_text() == text

    readme = tmp_path / "project-README.md"  # the README's short table: the rows with finished seeds
    readme.write_text(f"intro\n{report.PARITY_START}\nold\n{report.PARITY_END}\nrest\n")
    report.write(report.report(report.Args(results=str(tmp_path), readme=str(readme), plots=False)))
    block = readme.read_text().split(report.PARITY_START)[1].split(report.PARITY_END)[0]
    assert "| Hopper-v4 | td3 | 5 |" in block and "| Hopper-v4 | sac | 2" in block and "Walker2d" not in block
    assert "old" not in block and readme.read_text().endswith("rest\n")


def test_gpu_physics_rows_give_seconds_to_5000_and_the_c_engines_return(tmp_path):
    """Humanoid-v5 stops at 5,000 (pass: every seed solved); Ant-v5 is a curve: its row has no pass rule, and its
    CleanRL column holds what the row has, the final policies' return on gymnasium's C engine."""
    runs = [parity_run("ppo-mjwarp-humanoid", "Humanoid-v5", s, 5000.0 + s, solved_seconds=100.0 + 10 * s)
            for s in (1, 2, 3)]
    runs += [parity_run("ppo-mjwarp-ant", "Ant-v5", s, 3000.0 + s) for s in (1, 2)]
    runs += [parity_run("td3-mjwarp-humanoid", "Humanoid-v5", s, 900.0) for s in (1, 2, 3)]  # ended short of 5,000
    os.makedirs(tmp_path / "runs")
    for i, run in enumerate(runs):
        (tmp_path / "runs" / f"{i}.json").write_text(json.dumps(run))
    rows = {tuple(line.split(" | ")[:2]): line for line in report.parity_report(str(tmp_path), plots=False).splitlines()
            if line.startswith("| Humanoid-v5 |") or line.startswith("| Ant-v5 |")}
    assert "| to 5,000 in 120 ± 8 s; C engine 5,004 | pass |" in rows["| Humanoid-v5", "ppo-mjwarp-humanoid"]
    assert "| C engine 3,004 | – (2 of 3 seeds) |" in rows["| Ant-v5", "ppo-mjwarp-ant"]
    assert "| C engine 902 | **fail** |" in rows["| Humanoid-v5", "td3-mjwarp-humanoid"]
    assert "| – | – | not run |" in rows["| Ant-v5", "td3-mjwarp-ant"]


def test_report_check_finds_a_table_that_its_records_no_longer_give(tmp_path):
    folder = tmp_path / "results" / "parity"
    os.makedirs(folder / "runs")
    for seed in (1, 2, 3):
        with open(folder / "runs" / f"{seed}.json", "w") as f:
            json.dump(parity_run("td3", "Hopper-v4", seed, 3000.0 + seed), f)
    command = [sys.executable, "scripts/report.py", "--results", str(tmp_path / "results"), "--readme", ""]
    written = subprocess.run([*command, "--no-plots"], cwd=ROOT, capture_output=True, text=True)
    assert written.returncode == 0, written.stderr
    before = (folder / "README.md").read_text()
    assert subprocess.run([*command, "--check"], cwd=ROOT, capture_output=True, text=True).returncode == 0

    with open(folder / "runs" / "4.json", "w") as f:  # a record added, the table not regenerated
        json.dump(parity_run("td3", "Hopper-v4", 4, 1000.0), f)
    checked = subprocess.run([*command, "--check"], cwd=ROOT, capture_output=True, text=True)
    assert checked.returncode == 1 and "parity/README.md" in checked.stderr, checked.stderr
    assert (folder / "README.md").read_text() == before  # --check writes nothing


def test_committed_tables_are_what_the_committed_records_give():
    """The repository's own results: every generated table regenerates from the records beside it."""
    checked = subprocess.run([sys.executable, "scripts/report.py", "--check"], cwd=ROOT, capture_output=True,
                             text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.skipif(not os.path.isdir(os.path.join(ROOT, ".git")), reason="needs the git checkout")
def test_nothing_under_results_is_git_ignored():
    """A record that git ignores is never committed, and the table built from it cannot be rebuilt by a clone."""
    on_disk = [os.path.relpath(os.path.join(d, f), ROOT) for d, _, files in os.walk(os.path.join(ROOT, "results"))
               for f in files]
    # new records where the scripts write them, so a pattern that would catch the next one fails too
    future = ["results/parity/runs/td3__Hopper-v4__compile+cudagraphs__s9.json", "results/speed/x.json",
              "results/learning/x.json", "results/experiments/x/runs/x.json", "results/README.md",
              "results/speed-cpu/x.json", "results/x.png"]
    checked = subprocess.run(["git", "check-ignore", "--no-index", "--verbose", "--stdin"], cwd=ROOT, text=True,
                             input="\n".join(on_disk + future), capture_output=True)
    assert checked.returncode == 1 and not checked.stdout, f"git ignores under results/:\n{checked.stdout}"


def test_no_record_under_results_names_a_path_of_the_machine_that_made_it():
    """A record is read on other machines: its run folders are named inside the repository (runs/...), or by
    <runs-dir>/ where they lay outside it, never by an absolute path or one that climbs out of the tree."""
    found = []
    for folder, _, files in os.walk(os.path.join(ROOT, "results")):
        for name in files:
            if name.endswith(".json"):
                with open(os.path.join(folder, name)) as f:
                    text = f.read()
                machine_paths = re.findall(r'"(?:/(?:tmp|root|home|work)/|(?:[^"]*/)?\.\./)[^"]{0,60}', text)
                found += [f"{name}: {hit}" for hit in machine_paths]
    assert not found, "\n".join(found[:10])


def test_the_report_without_its_extra_says_what_to_install(tmp_path):
    hidden = tmp_path / "rliable"  # first on the path: `import rliable` fails as if it were not installed
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'rliable'\")\n")
    result = subprocess.run([sys.executable, "scripts/report.py", "--check"], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)}, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == "error: the report needs rliable: pip install -e '.[report]'"


def test_the_report_of_a_folder_that_is_not_a_results_folder_is_one_line(tmp_path):
    (tmp_path / "runs" / "CartPole-v1__dqn__1__1").mkdir(parents=True)  # a runs folder: args.json, summary.json
    (tmp_path / "runs" / "CartPole-v1__dqn__1__1" / "summary.json").write_text('{"status": "done"}')
    (tmp_path / "speed").mkdir()  # one suite's folder, not the folder of the suites
    (tmp_path / "speed" / "td3.json").write_text('{"suite": "speed", "label": "td3"}')
    for folder, expected in (("runs", "runs/CartPole-v1__dqn__1__1 holds JSON files that are not benchmark records"),
                             ("speed", "speed (it holds one suite's records: pass the folder above it)"),
                             ("none", "--results none is not a folder")):
        result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts/report.py"), "--check", "--results",
                                 folder], cwd=tmp_path, capture_output=True, text=True, check=False)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and expected in result.stderr, result.stderr


def test_a_benchmark_run_that_ended_early_is_recorded_as_failed(tmp_path):
    # Ctrl-C reaches the benchmark's runs too: a run that stopped there exits 0 with its summary "interrupted"; it
    # was recorded "ok" (no episodes, a NaN return), and later calls skipped it
    measured = {"steady_sps": None, "steady_sps_whole": None, "startup_seconds": None, "floor_us": None,
                "summary": {"status": "interrupted", "steps": 120, "wall_seconds": 1.0, "episodes": 0,
                            "mean_return_last20": float("nan"), "run_dir": str(tmp_path)}}
    (tmp_path / "measure.json").write_text(json.dumps(measured))
    with open(tmp_path / "stderr.log", "w+") as stderr:
        process = subprocess.Popen([sys.executable, "-c", "pass"])
        record = benchmark.measure_runs({"seed": 1}, [(str(tmp_path), process, stderr)], timeout=60, processes=1)
    assert record["status"] == "failed" and record["error"] == "the run ended interrupted, before its budget"


def test_the_report_of_another_results_folder_leaves_this_repositorys_readme_alone(tmp_path):
    import shutil

    shutil.copytree(os.path.join(ROOT, "results", "speed"), tmp_path / "results" / "speed")  # a speed suite
    readme = os.path.join(ROOT, "README.md")
    files = report.report(report.Args(results=str(tmp_path / "results"), plots=False))
    assert str(tmp_path / "results" / "README.md") in files and readme not in files  # it got this README's table
    assert readme in report.report(report.Args(plots=False))  # the repository's own results: its README too


def test_a_parity_seed_on_record_twice_is_refused_not_counted_twice(tmp_path):
    os.makedirs(tmp_path / "runs")
    for path in ("eager", "compile+cudagraphs"):  # e.g. long_runs' default path beside the rows run eager on CPUs
        with open(tmp_path / "runs" / f"pqn__CartPole-v1__{path}__s1.json", "w") as f:
            json.dump({**parity_run("pqn", "CartPole-v1", 1, 480.0), "path": path}, f)
    with pytest.raises(UserError, match="pqn__CartPole-v1__compile.cudagraphs__s1.json and pqn__CartPole-v1__eager__s1"
                                        ".json are one seed of one row; keep one"):
        report.parity_report(str(tmp_path), plots=False)


def test_a_benchmark_call_at_another_scale_runs_again(tmp_path, monkeypatch):
    recorded = json.load(open(os.path.join(ROOT, "results", "speed", "dqn__CartPole-v1__compile+cudagraphs__s1.json")))
    calls = []
    monkeypatch.setattr(benchmark, "run_one", lambda task, path, seed, scale, *rest: calls.append(scale) or {
        k: v for k, v in recorded.items() if k not in ("machine", "suite", "scale", "concurrent_runs")})
    for scale in (0.05, 0.05, 0.1):  # the second call keeps the first's record; the third is another run
        benchmark.main(benchmark.Args(labels=["dqn"], paths=["eager"], scale=scale, out=str(tmp_path)))
    assert calls == [0.05, 0.1]


def test_a_benchmark_without_cuda_runs_no_graph_path():
    # without CUDA a graph path runs as eager or compile: its record would name a path the run did not take
    args = benchmark.Args(labels=["dqn"])
    assert sorted({path for _, path, _ in benchmark.plan(args, cuda=False)}) == ["compile", "eager"]
    assert len({path for _, path, _ in benchmark.plan(args, cuda=True)}) == 5
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="the ones that match need CUDA"):
            benchmark.main(benchmark.Args(labels=["dqn"], paths=["cudagraphs"]))
