"""scripts/long_runs.py: runs wait for a free place, each gets its JSON (CleanRL's last-100 return, the final
policy's evaluation), finished runs are not run again, and a run whose checkpoint is gone starts over."""

import csv
import json
import os

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

    assert "s2.json: its checkpoint went with an earlier machine; starting over" in capsys.readouterr().out
    for seed in (1, 2):
        record = json.load(open(out / f"dqn__CartPole-v1__eager__s{seed}.json"))
        assert record["status"] == "ok" and record["reached"] == 3000 and len(record["segments"]) == 1
        assert record["concurrent_runs"] == 1 and f"--seed {seed} " in record["command"]
        with open(os.path.join(long_runs.ROOT, record["segments"][0]["run_dir"], "metrics.csv")) as f:
            returns = [float(r["value"]) for r in csv.DictReader(f) if r["name"] == "episodic_return"]
        assert record["return_last100"] == sum(returns[-100:]) / len(returns[-100:])
        assert record["eval_return"] is not None and record["eval_return"] > 0

    long_runs.main(long_runs.Args(**args))  # both done: nothing to run
    assert "0 runs" in capsys.readouterr().out
