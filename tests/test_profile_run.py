"""scripts/profile_run.py: a real script's steady iterations under the profiler."""

import json
import os

import pytest

from scripts import profile_run


def test_profiles_the_window_after_skip_and_stops_the_run(tmp_path):
    trace = tmp_path / "trace.json"
    args = profile_run.Args(algo="dqn", skip=600, active=20, trace=str(trace))
    report = profile_run.profile(args, ["--total-timesteps", "5000", "--learning-starts", "500",
                                        "--runs-dir", str(tmp_path / "runs")])
    # 20 env steps past learning_starts hold two updates (one every 10 steps): their matmuls are in the window.
    assert "aten::addmm" in report and "Optimizer.step#Adam.step" in report
    assert json.load(open(trace))["traceEvents"]
    [run_dir] = os.listdir(tmp_path / "runs")
    with open(tmp_path / "runs" / run_dir / "metrics.csv") as f:
        assert max(int(row.split(",")[0]) for row in list(f)[1:]) <= 620  # stopped after the window


def test_a_run_shorter_than_the_window_says_so(tmp_path):
    args = profile_run.Args(algo="dqn", skip=600, active=20, trace=str(tmp_path / "trace.json"))
    with pytest.raises(SystemExit, match="before the recorded window"):
        profile_run.profile(args, ["--total-timesteps", "300", "--runs-dir", str(tmp_path / "runs")])
