"""--resume: a run continued from a checkpoint logs exactly what the uninterrupted run logs (CPU)."""

import glob

import pytest

from scripts.registry import TEST_RUNS
from tests.helpers import assert_user_error, metrics_after, run_script


@pytest.mark.parametrize("case", list(TEST_RUNS))
def test_resumed_run_logs_what_the_uninterrupted_run_logs(tmp_path, case):
    test_run = TEST_RUNS[case]
    script, flags = test_run.script, test_run.flags
    whole = run_script(script, *flags, "--save-model", "--checkpoint-every", str(test_run.checkpoint_every),
                       "--runs-dir", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr[-2000:]
    algo = "ppo" if script.startswith("ppo") else script
    [checkpoint] = glob.glob(str(tmp_path / "whole" / "*" / f"{algo}-step*.pt"))
    step = int(checkpoint.rsplit("step", 1)[1][:-3])
    resumed = run_script(script, *flags, "--resume", checkpoint, "--runs-dir", str(tmp_path / "resumed"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected = metrics_after(str(tmp_path / "whole"), step)
    assert len(expected) > 3 and any(name.endswith("loss") for _, name, _ in expected)
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
