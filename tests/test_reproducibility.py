"""Same seed, same path, CPU: identical metrics, for every algorithm."""

import csv

import pytest

from tests.helpers import run_script

SHORT = {
    "dqn": ["--total-timesteps", "1500", "--learning-starts", "500", "--train-frequency", "1", "--log-every", "10"],
    "ppo": ["--total-timesteps", "1024", "--num-steps", "64", "--log-every", "1"],
    "ppo-continuous": ["--env-id", "Pendulum-v1", "--total-timesteps", "512", "--num-steps", "128",
                       "--num-minibatches", "4", "--update-epochs", "2", "--log-every", "1"],
    "td3": ["--env-id", "Pendulum-v1", "--total-timesteps", "500", "--learning-starts", "300", "--log-every", "10"],
    "sac": ["--env-id", "Pendulum-v1", "--total-timesteps", "500", "--learning-starts", "300", "--log-every", "10"],
}


def metrics(run_dir) -> list[tuple]:
    """Every logged value except the clock-dependent ones."""
    with open(run_dir / "metrics.csv") as f:
        return [(row["step"], row["name"], row["value"]) for row in csv.DictReader(f) if row["name"] != "sps"]


@pytest.mark.parametrize("case", list(SHORT))
def test_same_seed_same_metrics(tmp_path, case):
    script = case.split("-")[0]
    runs = []
    for attempt in ("a", "b"):
        result = run_script(script, *SHORT[case], "--no-cuda", "--runs-dir", str(tmp_path / attempt))
        assert result.returncode == 0, result.stderr[-2000:]
        [run_dir] = (tmp_path / attempt).iterdir()
        runs.append(metrics(run_dir))
    assert len(runs[0]) > 5 and any(name.endswith("loss") for _, name, _ in runs[0])
    assert runs[0] == runs[1]
