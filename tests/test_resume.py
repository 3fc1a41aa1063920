"""--resume: a run continued from a checkpoint logs exactly what the uninterrupted run logs (CPU)."""

import csv
import glob

import pytest

from tests.helpers import assert_user_error, run_script

# Per case: the script, its flags, and a --checkpoint-every that the run crosses exactly once before its end.
CASES = {
    "dqn": ("dqn", ["--total-timesteps", "1500", "--learning-starts", "500", "--train-frequency", "2",
                    "--log-every", "5"], 1000),
    "ppo": ("ppo", ["--total-timesteps", "1536", "--num-steps", "64", "--log-every", "1"], 1000),
    "ppo-torch-envs": ("ppo", ["--env-backend", "torch", "--total-timesteps", "1536", "--num-steps", "64",
                               "--log-every", "1"], 1000),
    "td3": ("td3", ["--env-id", "Pendulum-v1", "--total-timesteps", "450", "--learning-starts", "300",
                    "--log-every", "5"], 400),
    "sac": ("sac", ["--env-id", "Pendulum-v1", "--total-timesteps", "450", "--learning-starts", "300",
                    "--log-every", "5"], 400),
}


def metrics_after(run_dir: str, step: int) -> list[tuple]:
    with open(glob.glob(run_dir + "/*/metrics.csv")[0]) as f:
        return [(r["step"], r["name"], r["value"]) for r in csv.DictReader(f) if r["name"] != "sps"
                and int(r["step"]) > step]


@pytest.mark.parametrize("case", list(CASES))
def test_resumed_run_logs_what_the_uninterrupted_run_logs(tmp_path, case):
    script, flags, every = CASES[case]
    whole = run_script(script, *flags, "--save-model", "--checkpoint-every", str(every),
                       "--runs-dir", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr[-2000:]
    [checkpoint] = glob.glob(str(tmp_path / "whole" / "*" / f"{script}-step*.pt"))
    step = int(checkpoint.rsplit("step", 1)[1][:-3])
    resumed = run_script(script, *flags, "--resume", checkpoint, "--runs-dir", str(tmp_path / "resumed"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected = metrics_after(str(tmp_path / "whole"), step)
    assert len(expected) > 5 and any(name.endswith("loss") for _, name, _ in expected)
    assert metrics_after(str(tmp_path / "resumed"), step) == expected


def test_resume_errors_are_one_clear_line(tmp_path):
    assert_user_error(run_script("dqn", "--resume", str(tmp_path / "none.pt"), "--runs-dir", str(tmp_path)),
                      "no such file")
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    assert_user_error(run_script("dqn", "--resume", str(tmp_path / "bad.pt"), "--runs-dir", str(tmp_path)),
                      "not a readable checkpoint")
    result = run_script("dqn", "--total-timesteps", "600", "--learning-starts", "300", "--save-model",
                        "--runs-dir", str(tmp_path / "a"))
    assert result.returncode == 0, result.stderr[-2000:]
    [checkpoint] = glob.glob(str(tmp_path / "a" / "*" / "dqn.pt"))
    assert_user_error(run_script("dqn", "--total-timesteps", "900", "--resume", checkpoint,
                                 "--runs-dir", str(tmp_path)), "--total-timesteps 600", "same flags")
