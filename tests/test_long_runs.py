"""scripts/long_runs.py: runs wait for a free place, each gets its JSON (CleanRL's last-100 return, the final
policy's evaluation), finished runs are not run again, a run whose checkpoint is gone starts over, and with
--num-seeds one process trains consecutive seeds that are recorded as runs of their own."""

import csv
import glob
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from scripts import long_runs
from scripts.registry import Algorithm, Task

TASK = Task("dqn", "CartPole-v1", steps=3000, eager_steps=3000,
            flags=("--learning-starts", "500", "--train-frequency", "2", "--log-every", "5"))


def test_a_suite_runs_two_seeds_in_one_place_and_records_each(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(long_runs, "ALGORITHMS", {"dqn": Algorithm("dqn", parity=(TASK,))})
    out, runs_dir = tmp_path / "out", tmp_path / "runs"
    gone = {"segments": [{"run_dir": "nowhere", "checkpoint": "nowhere/dqn.pt", "steps": 100, "wall_seconds": 1.0}],
            "status": "partial"}
    os.makedirs(out)
    (out / "dqn__CartPole-v1__eager__s2.json").write_text(json.dumps(gone))  # its machine went with it
    args = dict(seeds=[1, 2], jobs=1, path="eager", out=str(out), runs_dir=str(runs_dir))

    long_runs.main(long_runs.Args(**args))

    assert "s2.json: its checkpoint is not on this machine (" in capsys.readouterr().out
    for seed in (1, 2):
        record = json.load(open(out / f"dqn__CartPole-v1__eager__s{seed}.json"))
        assert record["status"] == "ok" and record["reached"] == 3000 and len(record["segments"]) == 1
        assert record["concurrent_runs"] == 1 and f"--seed {seed} " in record["command"]
        assert (record["gpu_sharing"] is None) == (record["machine"]["gpu"] is None)  # no GPU, nothing shared
        assert record["segments"][0]["run_dir"].startswith("<runs-dir>/")  # the runs lie outside the repository
        with open(long_runs.on_disk(record["segments"][0]["run_dir"], str(runs_dir)) + "/metrics.csv") as f:
            returns = [float(r["value"]) for r in csv.DictReader(f) if r["name"] == "episodic_return"]
        assert record["return_last100"] == sum(returns[-100:]) / len(returns[-100:])
        assert record["eval_return"] is not None and record["eval_return"] > 0

    long_runs.main(long_runs.Args(**args))  # both done: nothing to run
    assert "0 runs in 0 processes, 0 side by side (2 more selected are ok already" in capsys.readouterr().out
    long_runs.main(long_runs.Args(**{**args, "path": "compile"}))  # nor on another path: a row counts a seed once
    assert "0 runs in 0 processes, 0 side by side (2 more selected are ok already" in capsys.readouterr().out


def test_seeds_share_a_process_and_each_gets_its_own_record(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(long_runs, "ALGORITHMS", {"dqn": Algorithm("dqn", parity=(TASK,))})
    out = tmp_path / "out"
    args = long_runs.Args(seeds=[1, 2, 4], num_seeds=2, path="eager", out=str(out), runs_dir=str(tmp_path / "r"),
                          extra_flags="--buffer-size 2500")

    long_runs.main(args)

    assert "3 runs in 2 processes" in capsys.readouterr().out  # 1-2 and 4: a process's seeds are consecutive
    records = {seed: json.load(open(out / f"dqn__CartPole-v1__eager__s{seed}.json")) for seed in (1, 2, 4)}
    assert [records[seed]["num_seeds"] for seed in (1, 2, 4)] == [2, 2, 1]
    assert "--seed 1 --num-seeds 2 " in records[2]["command"] and "--num-seeds" not in records[4]["command"]
    for seed, record in records.items():
        assert record["status"] == "ok" and record["reached"] == 3000 and record["eval_return"] is not None
        run_dir = long_runs.on_disk(record["segments"][0]["run_dir"], args.runs_dir)
        assert json.load(open(os.path.join(run_dir, "args.json")))["seed"] == seed
        assert record["command"].endswith("--buffer-size 2500")  # and the run ran with it:
        assert json.load(open(os.path.join(run_dir, "args.json")))["buffer_size"] == 2500
        with open(os.path.join(run_dir, "metrics.csv")) as f:
            returns = [float(r["value"]) for r in csv.DictReader(f) if r["name"] == "episodic_return"]
        assert record["return_last100"] == sum(returns[-100:]) / len(returns[-100:])
    assert records[1]["segments"][0]["checkpoint"] == records[2]["segments"][0]["checkpoint"]
    assert records[1]["curve"] != records[2]["curve"]


def test_a_segment_whose_call_was_killed_is_found_and_resumed(tmp_path, monkeypatch, capsys):
    """A call killed while its runs stopped (the machine's time ran out) never wrote their JSONs: the next call
    finds the newest checkpoint in the run's folders and resumes from it, not from the last recorded one. Here two
    seeds share a process (--num-seeds 2): they resume together from the checkpoint in the first seed's folder (a
    run of one seed is the first seed's case), although the next call asks for seeds 1 and 3, three to a process:
    seed 2 comes with seed 1, and seed 3 starts in a process of its own."""
    num_seeds = 2
    task = Task("dqn", "CartPole-v1", steps=8_000, eager_steps=8_000, flags=TASK.flags)
    monkeypatch.setattr(long_runs, "ALGORITHMS", {"dqn": Algorithm("dqn", parity=(task,))})
    seeds = [1, 2]
    args = long_runs.Args(seeds=seeds, num_seeds=num_seeds, path="eager", out=str(tmp_path / "out"),
                          runs_dir=str(tmp_path / "runs"))
    runs_dir = pathlib.Path(long_runs.process_dir(args, task, seeds))
    command = [sys.executable, "algos/dqn.py", *long_runs.flags_of(args, task, 1, num_seeds), "--save-model",
               "--checkpoint-every", "1000", "--runs-dir", str(runs_dir)]

    def run_until_a_checkpoint(signal_number, *resume):
        before = set(glob.glob(str(runs_dir / "*")))
        process = subprocess.Popen([*command, *resume], cwd=long_runs.ROOT, stderr=subprocess.DEVNULL)
        while not [p for p in glob.glob(str(runs_dir / "*" / "dqn-step*.pt")) if os.path.dirname(p) not in before]:
            assert process.poll() is None, "the run ended before its first periodic checkpoint"
            time.sleep(0.05)
        process.send_signal(signal_number)
        process.wait()
        return sorted(set(glob.glob(str(runs_dir / "*"))) - before, key=lambda d: int(d.split("__")[2]))

    firsts = run_until_a_checkpoint(signal.SIGINT)  # a recorded segment: stopped, its summary names its checkpoint
    summaries = [json.load(open(os.path.join(first, "summary.json"))) for first in firsts]
    os.makedirs(tmp_path / "out")
    for seed, first, summary in zip(seeds, firsts, summaries, strict=True):
        record = {"segments": [long_runs.segment(first, summary, 1)], "status": "partial"}
        record = long_runs.with_paths(record, long_runs.as_recorded, args.runs_dir)  # as long_runs writes it
        assert record["segments"][0]["checkpoint"].startswith("<runs-dir>/")
        (tmp_path / "out" / f"dqn__CartPole-v1__eager__s{seed}.json").write_text(json.dumps(record))
    killed = run_until_a_checkpoint(signal.SIGKILL, "--resume", summaries[0]["checkpoint"])  # no summary, no JSON

    long_runs.main(long_runs.Args(**{**vars(args), "seeds": [1, 3], "num_seeds": 3}))

    assert "3 runs in 2 processes" in capsys.readouterr().out
    third = json.load(open(tmp_path / "out" / "dqn__CartPole-v1__eager__s3.json"))
    assert third["status"] == "ok" and len(third["segments"]) == 1 and "--num-seeds" not in third["command"]

    for seed, dead, summary in zip(seeds, killed, summaries, strict=True):
        record = json.load(open(tmp_path / "out" / f"dqn__CartPole-v1__eager__s{seed}.json"))
        assert record["status"] == "ok" and record["reached"] == 8_000 and len(record["segments"]) == 3
        assert record["segments"][1]["run_dir"] == os.path.join("<runs-dir>", os.path.relpath(dead, tmp_path / "runs"))
        assert record["segments"][1]["steps"] > summary["steps"]


def test_a_segments_episodes_past_its_checkpoint_are_left_out_of_its_curve(tmp_path):
    """A killed run resumes from its newest periodic checkpoint, older than its last logged episodes: the next
    segment plays those steps again, so the stitched curve takes each segment's episodes up to its checkpoint, and
    the next segment's seconds follow all of the first's."""
    episodes = {"first": [(100, 1.0, 1.0), (200, 2.0, 2.0), (300, 3.0, 3.0)],  # (step, seconds, return)
                "second": [(300, 1.0, 10.0), (400, 2.0, 20.0)]}
    for name, rows in episodes.items():
        os.makedirs(tmp_path / name)
        with open(tmp_path / name / "metrics.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["step", "seconds", "name", "value"])
            for step, seconds, value in rows:
                writer.writerows([[step, seconds, "episodic_return", value], [step, seconds, "episodic_length", 9]])
    segments = [{"run_dir": str(tmp_path / "first"), "steps": 200, "wall_seconds": 3.5},
                {"run_dir": str(tmp_path / "second"), "steps": 400, "wall_seconds": 2.5}]

    curve, solved, last100 = long_runs.stitched_curve(segments)

    assert curve == {"steps": [100, 200, 300, 400], "seconds": [1.0, 2.0, 4.5, 5.5], "returns": [1.0, 2.0, 10.0, 20.0]}
    assert solved is None and last100 == 33.0 / 4


def test_a_segment_whose_checkpoint_is_gone_resumes_from_the_periodic_one_beside_it(tmp_path):
    """A stop checkpoint lost with its machine, its folder copied off before the stop: the run resumes from the
    newest periodic checkpoint in that folder, and its segment ends there; with none left, it has no resume point."""
    folder = tmp_path / "run"
    os.makedirs(folder)
    for step in (1000, 2000):
        (folder / f"dqn-step{step}.pt").write_bytes(b"")
    recorded = {"run_dir": str(folder), "checkpoint": str(folder / "dqn.pt"), "steps": 2500, "wall_seconds": 9.0}
    record = tmp_path / "record.json"  # as a call with --runs-dir tmp_path wrote it: no path of its machine
    record.write_text(json.dumps({"segments": [{**recorded, "run_dir": "<runs-dir>/run",
                                                "checkpoint": "<runs-dir>/run/dqn.pt"}], "status": "partial"}))

    assert os.path.samefile(long_runs.resume_point(str(record), str(tmp_path)), folder / "dqn-step2000.pt")
    older = long_runs.resumable(recorded)
    assert older["steps"] == 2000 and older["wall_seconds"] == 9.0 and older["run_dir"] == str(folder)
    for step in (1000, 2000):
        os.remove(folder / f"dqn-step{step}.pt")
    assert long_runs.resume_point(str(record), str(tmp_path)) is None and long_runs.resumable(recorded) == recorded


def test_a_segment_recorded_after_its_call_ends_the_one_before_where_it_resumed(tmp_path):
    """A run resumed from an older, periodic checkpoint on another machine, and recorded by a later call (here
    without any of the earlier folder's checkpoints left): the earlier segment ends at the step its successor
    resumed from, as its args.json says, so that the curve does not count those steps twice; each segment keeps
    the machine it ran on."""
    args = long_runs.Args(seeds=[1], path="eager", out=str(tmp_path / "out"), runs_dir=str(tmp_path / "runs"))
    runs_dir = pathlib.Path(long_runs.process_dir(args, TASK, [1]))
    first, second = runs_dir / "CartPole-v1__dqn__1__100", runs_dir / "CartPole-v1__dqn__1__200"
    os.makedirs(first)
    os.makedirs(second)
    recorded = {"run_dir": str(first), "checkpoint": str(first / "dqn.pt"), "steps": 2500, "wall_seconds": 9.0}
    os.makedirs(args.out)
    path = long_runs.target(args, TASK, 1)
    with open(path, "w") as f:
        json.dump({"segments": [recorded], "status": "partial", "machine": {"gpu": "first GPU"}}, f)
    (second / "args.json").write_text(json.dumps({"resume": str(first / "dqn-step2000.pt")}))
    (second / "summary.json").write_text(json.dumps({"status": "done", "steps": 3000, "wall_seconds": 4.0,
                                                     "checkpoint": str(second / "dqn.pt"), "episodes": 2,
                                                     "mean_return_last20": 15.0}))
    for folder, step in ((first, 2500), (second, 3000)):  # one episode each side of the resume point
        (folder / "metrics.csv").write_text(f"step,seconds,name,value\n1500,1.0,episodic_return,10\n"
                                            f"{step},2.0,episodic_return,20\n")
    os.utime(first, (1, 1))  # the older folder

    run = long_runs.launch(args, TASK, [1], [path], concurrent_runs=1, info={"gpu": "second GPU"})

    assert run.process is None
    earlier, later = run.records[0]["segments"]
    assert earlier["steps"] == 2000 and earlier["wall_seconds"] == 9.0
    assert os.path.basename(earlier["checkpoint"]) == "dqn-step2000.pt"
    assert (later["steps"], later["run_dir"]) == (3000, str(second))

    [record] = long_runs.finish(args, run, {"gpu": "second GPU"})
    assert [s["machine"]["gpu"] for s in record["segments"]] == ["first GPU", "second GPU"]
    assert record["machine"]["gpu"] == "second GPU" and record["status"] == "ok"
    assert record["curve"]["steps"] == [1500, 1500, 3000]  # the first folder's 2,500th step is played again
    written = json.load(open(path))["segments"]  # each path from --runs-dir, which lies outside the repository
    assert [s["run_dir"] for s in written] == [os.path.join("<runs-dir>", os.path.relpath(d, args.runs_dir))
                                               for d in (first, second)]

    # Resumed from the segment's own checkpoint, or from another folder's: the segment stays as recorded.
    for resume in (first / "dqn.pt", runs_dir / "CartPole-v1__dqn__1__150" / "dqn-step2000.pt"):
        (second / "args.json").write_text(json.dumps({"resume": str(resume)}))
        assert long_runs.until_resumed(recorded, str(second)) == recorded


def test_seeds_share_a_process_only_in_scripts_that_have_num_seeds(tmp_path, monkeypatch, capsys):
    task = Task("pqn", "CartPole-v1", steps=1536, eager_steps=1536, flags=("--num-steps", "64", "--log-every", "1"))
    monkeypatch.setattr(long_runs, "ALGORITHMS", {"pqn": Algorithm("pqn", parity=(task,))})
    assert [long_runs.takes_num_seeds(script) for script in ("td3", "sac", "dqn", "ppo", "pqn")] == [True] * 4 + [False]

    long_runs.main(long_runs.Args(seeds=[1, 2], num_seeds=2, path="eager", out=str(tmp_path / "out"),
                                  runs_dir=str(tmp_path / "runs")))

    assert "2 runs in 2 processes" in capsys.readouterr().out
    for seed in (1, 2):
        record = json.load(open(tmp_path / "out" / f"pqn__CartPole-v1__eager__s{seed}.json"))
        assert record["status"] == "ok" and "--num-seeds" not in record["command"]


def test_a_first_segment_whose_call_was_stopped_is_resumed_not_started_over(tmp_path, monkeypatch, capsys):
    """Ctrl-C stops long_runs and its runs at once: the runs save their checkpoints, long_runs writes no JSON. The
    next call resumes from those checkpoints (it started over when the run had no recorded segment yet)."""
    task = Task("dqn", "CartPole-v1", steps=8_000, eager_steps=8_000, flags=TASK.flags)
    monkeypatch.setattr(long_runs, "ALGORITHMS", {"dqn": Algorithm("dqn", parity=(task,))})
    args = long_runs.Args(seeds=[1], path="eager", out=str(tmp_path / "out"), runs_dir=str(tmp_path / "runs"))
    runs_dir = pathlib.Path(long_runs.process_dir(args, task, [1]))
    process = subprocess.Popen([sys.executable, "algos/dqn.py", *long_runs.flags_of(args, task, 1), "--save-model",
                                "--checkpoint-every", "1000", "--runs-dir", str(runs_dir)],
                               cwd=long_runs.ROOT, stderr=subprocess.DEVNULL)
    while not glob.glob(str(runs_dir / "*" / "dqn-step*.pt")):
        assert process.poll() is None, "the run ended before its first periodic checkpoint"
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    process.wait()
    [stopped] = glob.glob(str(runs_dir / "*"))

    long_runs.main(args)

    assert "starting over" not in capsys.readouterr().out
    record = json.load(open(tmp_path / "out" / "dqn__CartPole-v1__eager__s1.json"))
    assert record["status"] == "ok" and record["reached"] == 8_000 and len(record["segments"]) == 2
    assert record["segments"][0]["run_dir"] == os.path.join("<runs-dir>", os.path.relpath(stopped, tmp_path / "runs"))


def test_a_run_that_ended_after_its_call_is_recorded_not_run_again(tmp_path, monkeypatch, capsys):
    """A run's process goes on when its long_runs is stopped (here: a process that long_runs did not start), and ends
    on its own: the next call records each of its seeds from their folders, with the evaluation, and runs nothing."""
    monkeypatch.setattr(long_runs, "ALGORITHMS", {"dqn": Algorithm("dqn", parity=(TASK,))})
    args = long_runs.Args(seeds=[1, 2], num_seeds=2, path="eager", out=str(tmp_path / "out"),
                          runs_dir=str(tmp_path / "runs"))
    runs_dir = pathlib.Path(long_runs.process_dir(args, TASK, [1, 2]))
    subprocess.run([sys.executable, "algos/dqn.py", *long_runs.flags_of(args, TASK, 1, 2), "--save-model",
                    "--runs-dir", str(runs_dir)], cwd=long_runs.ROOT, check=True, capture_output=True)
    folders = sorted(glob.glob(str(runs_dir / "*")))
    by_seed = {int(os.path.basename(folder).split("__")[2]): folder for folder in folders}

    long_runs.main(args)

    assert "finished after its call; recorded" in capsys.readouterr().out
    assert sorted(glob.glob(str(runs_dir / "*"))) == folders  # no new run: its process did not start
    for seed in (1, 2):
        record = json.load(open(tmp_path / "out" / f"dqn__CartPole-v1__eager__s{seed}.json"))
        assert record["status"] == "ok" and record["reached"] == 3000 and len(record["segments"]) == 1
        assert record["segments"][0]["run_dir"] == os.path.join("<runs-dir>",
                                                                os.path.relpath(by_seed[seed], tmp_path / "runs"))
        assert record["eval_return"] is not None and record["num_seeds"] == 2 and "later call" in record["note"]

    # A call on another path looks for its runs elsewhere: it never files these under its own path.
    assert long_runs.process_dir(long_runs.Args(**{**vars(args), "path": "compile"}), TASK, [1, 2]) != str(runs_dir)


def test_bad_flags_of_long_runs_are_one_line(monkeypatch):
    import pytest
    import torch

    from turborl.errors import UserError

    for flags, message in ((dict(path="eager", extra_flags="--total-timesteps 20000 --async-envs"),
                            "--extra-flags --total-timesteps"),  # a shorter run filed as one at the full budget
                           (dict(path="eager", extra_flags="--seed=3"), "--extra-flags --seed: long_runs sets it"),
                           (dict(path="graphs"), "--path graphs: choose from eager, compile"),
                           (dict(path="compile+cudagraphs"), "this machine has no CUDA: pass --path eager"),
                           (dict(path="eager", jobs=0), "--jobs and --checkpoint-every must be >= 1"),  # else it hung
                           (dict(path="eager", deadline=-5), "--deadline -5 leaves no time to run"),
                           (dict(path="eager", labels=["nope"]), "--labels nope: no parity task has it"),  # else
                           (dict(path="eager", envs=["Nope-v0"]), "--envs Nope-v0: no parity task has it"),  # empty
                           (dict(path="eager", runs=["sac/Ant-v4"]), "--runs sac/Ant-v4: a run is label/env-id/seed")):
        if "cudagraphs" in flags.get("path", "") and torch.cuda.is_available():
            continue
        with pytest.raises(UserError, match=message):
            long_runs.main(long_runs.Args(**flags))
