"""scripts/profile_run.py and scripts/measure.py: a real script observed from outside."""

import json
import os

import pytest

from scripts import profile_run
from turborl.errors import UserError


def test_profiles_the_window_after_skip_and_stops_the_run(tmp_path):
    trace = tmp_path / "trace.json"
    args = profile_run.Args(algo="dqn", skip=600, active=20, trace=str(trace))
    report = profile_run.profile(args, ["--total-timesteps", "5000", "--learning-starts", "500",
                                        "--runs-dir", str(tmp_path / "runs")])
    # 20 env steps past learning_starts hold two updates (one every 10 steps): their matmuls are in the window.
    assert "aten::bmm" in report and "Optimizer.step#Adam.step" in report  # the Q-network's layers
    assert json.load(open(trace))["traceEvents"]
    [run_dir] = os.listdir(tmp_path / "runs")
    with open(tmp_path / "runs" / run_dir / "metrics.csv") as f:
        assert max(int(row.split(",")[0]) for row in list(f)[1:]) <= 620  # stopped after the window


def test_a_num_seeds_run_counts_each_iteration_once(tmp_path):
    """Every seed's logger reports each iteration; the window is in iterations all the same, so --skip past
    learning_starts profiles updates with 3 seeds as with one."""
    args = profile_run.Args(algo="dqn", skip=600, active=20, trace=str(tmp_path / "trace.json"))
    report = profile_run.profile(args, ["--total-timesteps", "5000", "--learning-starts", "500", "--num-seeds", "3",
                                        "--runs-dir", str(tmp_path / "runs")])
    assert "Optimizer.step#Adam.step" in report  # counted per seed, the window would end at iteration 207
    for run_dir in os.listdir(tmp_path / "runs"):
        with open(tmp_path / "runs" / run_dir / "metrics.csv") as f:
            assert max(int(row.split(",")[0]) for row in list(f)[1:]) <= 620  # stopped after the window


def test_a_run_shorter_than_the_window_says_so(tmp_path):
    args = profile_run.Args(algo="dqn", skip=600, active=20, trace=str(tmp_path / "trace.json"))
    with pytest.raises(UserError, match="before the recorded window"):
        profile_run.profile(args, ["--total-timesteps", "300", "--learning-starts", "100",
                                   "--runs-dir", str(tmp_path / "runs")])


def test_measure_finds_the_steady_state_from_outside(tmp_path):
    """scripts/measure.py times the captured functions' first calls as startup and measures speed after them."""
    from scripts import measure

    out = tmp_path / "measure.json"
    record = measure.measure(measure.Args(script="dqn", out=str(out)),
                             ["--total-timesteps", "4000", "--learning-starts", "500", "--compile",
                              "--runs-dir", str(tmp_path / "runs")])
    assert json.load(open(out)) == json.loads(json.dumps(record))
    # Steady once act (every step) and update (every 10th iteration past step 500) each ran 4 times: the 4th
    # update is at iteration 540, whose progress report is step 541.
    assert record["steady_from_step"] == 541 and record["steady_sps"] > 0 and record["steady_windows"] == 3
    assert 0 < record["startup_seconds"] < record["summary"]["wall_seconds"]  # compiling (or a cache hit)
    assert record["floor_us"] is None  # no graphs on a CPU
    assert record["summary"]["steps"] == 4000


def test_measure_counts_every_seed_of_a_num_seeds_run(tmp_path):
    """A --num-seeds run's speed is its work: every seed's env steps; the steady state starts where a lone seed's
    would (the other seeds' loggers report the same steps)."""
    from scripts import measure

    flags = ["--env-id", "Pendulum-v1", "--total-timesteps", "2000", "--learning-starts", "300", "--batch-size", "32",
             "--runs-dir"]  # small updates: this measures counting, not learning
    lone = measure.measure(measure.Args(script="td3", out=str(tmp_path / "1.json")), [*flags, str(tmp_path / "a")])
    three = measure.measure(measure.Args(script="td3", out=str(tmp_path / "3.json")),
                            [*flags, str(tmp_path / "b"), "--num-seeds", "3"])
    assert three["num_seeds"] == 3 and three["steady_sps"] == 3 * three["steady_sps_per_seed"]
    assert three["steady_from_step"] == lone["steady_from_step"] and three["steady_windows"] == lone["steady_windows"]
