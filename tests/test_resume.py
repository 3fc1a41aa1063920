"""--resume: a run continued from a checkpoint logs exactly what the uninterrupted run logs (CPU), whatever wrote
the checkpoint; a checkpoint resumes only in the script and with the flags that wrote it."""

import copy
import glob
import json
import os
import signal

import pytest
import torch

from algos import dqn
from scripts.registry import CPU_TEST_RUNS, TEST_RUNS
from tests.helpers import assert_user_error, metrics_after, run_main, run_script
from turborl.checkpoints import load_checkpoint, load_optimizer
from turborl.errors import UserError
from turborl.logger import RunLogger

EXACT = [case for case, test_run in CPU_TEST_RUNS.items() if test_run.exact_resume]


@pytest.mark.parametrize("case", EXACT)
def test_resumed_run_logs_what_the_uninterrupted_run_logs(tmp_path, case):
    test_run = TEST_RUNS[case]
    script, flags = test_run.script, test_run.flags
    whole = run_script(script, *flags, "--save-model", "--checkpoint-every", str(test_run.checkpoint_every),
                       "--runs-dir", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr[-2000:]
    [checkpoint] = glob.glob(str(tmp_path / "whole" / "*" / "*-step*.pt"))  # the periodic one
    step = int(checkpoint.rsplit("step", 1)[1][:-3])
    resumed = run_script(script, *flags, "--resume", checkpoint, "--runs-dir", str(tmp_path / "resumed"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected = metrics_after(str(tmp_path / "whole"), step)
    assert len(expected) > 3 and any(name.endswith("loss") for _, name, _ in expected)
    assert metrics_after(str(tmp_path / "resumed"), step) == expected
    assert episode_counts(tmp_path / "resumed") == episode_counts(tmp_path / "whole")
    for rows in torch.load(checkpoint, weights_only=False)["replay"].values():  # the rows written, not the whole
        assert 0 < len(rows) <= step and rows.untyped_storage().nbytes() == rows.numel() * rows.element_size()


@pytest.mark.parametrize("case", EXACT)
@pytest.mark.parametrize("fraction", [0.45, 0.7])
def test_ctrl_c_anywhere_leaves_a_checkpoint_that_resumes_exactly(tmp_path, monkeypatch, case, fraction):
    """Ctrl-C at a step inside an iteration (inside a PPO rollout): the run stops where that iteration ends, and
    its checkpoint, resumed, logs what the uninterrupted run logs from there on."""
    test_run = TEST_RUNS[case]
    run_main(test_run.script, test_run.flags, str(tmp_path / "whole"))
    total = int(test_run.flags[test_run.flags.index("--total-timesteps") + 1])
    progress = RunLogger.progress

    def progress_then_ctrl_c(logger, step):
        progress(logger, step)
        if step >= fraction * total and not logger.stop.requested:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(RunLogger, "progress", progress_then_ctrl_c)
    interrupted = run_main(test_run.script, [*test_run.flags, "--save-model"], str(tmp_path / "interrupted"))
    monkeypatch.setattr(RunLogger, "progress", progress)
    with open(os.path.join(interrupted, "summary.json")) as f:
        summary = json.load(f)
    assert summary["status"] == "interrupted" and fraction * total <= summary["steps"] < total, summary
    assert summary["checkpoint"] == os.path.join(interrupted, f"{test_run.script}.pt")
    run_main(test_run.script, [*test_run.flags, "--resume", interrupted], str(tmp_path / "resumed"))  # its folder
    expected = metrics_after(str(tmp_path / "whole"), summary["steps"])
    assert expected and metrics_after(str(tmp_path / "resumed"), summary["steps"]) == expected
    assert episode_counts(tmp_path / "resumed") == episode_counts(tmp_path / "whole")


def episode_counts(runs_dir) -> dict:
    """Per seed, the summary's episodes and last-20 return (None where none ended), which count the whole run: a
    resumed run's as the uninterrupted run's (on the old code, a resumed td3 run counted only its own)."""
    counts = {}
    for path in glob.glob(str(runs_dir / "*" / "summary.json")):
        with open(path) as f:
            summary = json.load(f)
        counts[os.path.basename(os.path.dirname(path)).split("__")[2]] = (
            summary["episodes"], summary["mean_return_last20"])
    assert counts, runs_dir
    return counts


def saved_checkpoint(script: str, runs_dir, *flags: str) -> str:
    """The checkpoint of a finished `--save-model` run of `script` with `flags`."""
    result = run_script(script, *flags, "--save-model", "--runs-dir", str(runs_dir))
    assert result.returncode == 0, result.stderr[-2000:]
    [checkpoint] = glob.glob(str(runs_dir / "*" / f"{script}.pt"))
    return checkpoint


def test_a_resumed_optimizer_steps_as_this_runs_path_says():
    """--compile, --cudagraphs and --fused-optimizer may change on resume: the loaded optimizer keeps this run's
    capturable, fused and learning-rate tensor (load_state_dict alone would take the saved run's)."""
    params = [torch.nn.Parameter(torch.randn(3))]
    saved_run = torch.optim.Adam(params, lr=1e-3)
    params[0].grad = torch.ones(3)
    saved_run.step()
    state = copy.deepcopy(saved_run.state_dict())
    lr = torch.tensor(1e-3)  # annealed in place by the loop
    plain = torch.optim.Adam(params, lr=lr, fused=True)
    plain.load_state_dict(copy.deepcopy(state))
    assert not plain.param_groups[0]["fused"] and plain.param_groups[0]["lr"] is not lr  # what this guards against
    resumed = torch.optim.Adam(params, lr=lr, fused=True)
    load_optimizer(resumed, copy.deepcopy(state))
    assert resumed.param_groups[0]["fused"] and resumed.param_groups[0]["lr"] is lr
    assert resumed.state[params[0]]["step"].item() == 1 and resumed.state[params[0]]["step"].dtype == torch.float32
    resumed.step()  # the fused step runs on the loaded state
    assert resumed.state[params[0]]["step"].item() == 2


def test_resume_errors_are_one_clear_line(tmp_path):
    assert_user_error(run_script("dqn", "--resume", str(tmp_path / "none.pt"), "--runs-dir", str(tmp_path)),
                      "no such file")
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    assert_user_error(run_script("dqn", "--resume", str(tmp_path / "bad.pt"), "--runs-dir", str(tmp_path)),
                      "not a readable checkpoint")
    checkpoint = saved_checkpoint("dqn", tmp_path / "a", "--total-timesteps", "600", "--learning-starts", "300",
                                  "--checkpoint-every", "400")
    assert_user_error(run_script("dqn", "--total-timesteps", "900", "--learning-starts", "300", "--resume", checkpoint,
                                 "--runs-dir", str(tmp_path / "b")), "--total-timesteps 600", "saved flags")
    # Every flag that changes what the run computes is compared, all differences named in one line.
    assert_user_error(run_script("dqn", "--total-timesteps", "600", "--learning-starts", "300", "--resume", checkpoint,
                                 "--learning-rate", "0.5", "--gamma", "0.5", "--batch-size", "4", "--capture-video",
                                 "--runs-dir", str(tmp_path / "b")),
                      "--learning-rate 0.00025 (not 0.5)", "--gamma 0.99 (not 0.5)", "--batch-size 128 (not 4)",
                      "--capture-video False (not True)")  # the saved envs have no recorder: no video, no word
    assert_user_error(run_script("ppo", "--resume", checkpoint, "--runs-dir", str(tmp_path / "b")),
                      "saved by algos/dqn.py", "python algos/dqn.py --resume")
    assert not os.path.exists(tmp_path / "b")  # a resume that fails leaves no run folder
    # A finished run's own last checkpoint has nothing left to run.
    for path in (checkpoint, os.path.dirname(checkpoint)):  # the run folder means its checkpoint at the end
        assert_user_error(run_script("dqn", "--total-timesteps", "600", "--learning-starts", "300", "--resume", path,
                                     "--runs-dir", str(tmp_path / "b")), "that run finished", "scripts/evaluate.py")
    assert not os.path.exists(tmp_path / "b")  # a resume that fails leaves no run folder
    assert_user_error(run_script("dqn", "--resume", str(tmp_path), "--runs-dir", str(tmp_path / "b")),
                      "no checkpoint of dqn.py in this folder", "first seed's folder")
    # Flags of how it runs (not what it computes) may differ. A killed run's folder: its newest periodic checkpoint.
    [periodic] = glob.glob(str(tmp_path / "a" / "*" / "dqn-step400.pt"))
    os.makedirs(tmp_path / "killed")
    os.link(periodic, tmp_path / "killed" / "dqn-step400.pt")
    torch.save({}, tmp_path / "killed" / "dqn-step9.pt")  # older (though later as text): not the one resumed
    result = run_script("dqn", "--total-timesteps", "600", "--learning-starts", "300", "--resume",
                        str(tmp_path / "killed"), "--log-every", "7", "--no-cuda", "--fused-optimizer",
                        "--runs-dir", str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr[-2000:]
    # A checkpoint without a part the script saves (another version wrote it) is named, not a traceback.
    partial = torch.load(periodic, weights_only=False)
    del partial["optimizer"]
    torch.save(partial, tmp_path / "partial.pt")
    assert_user_error(run_script("dqn", "--total-timesteps", "600", "--learning-starts", "300", "--resume",
                                 str(tmp_path / "partial.pt"), "--runs-dir", str(tmp_path / "d")),
                      "holds no 'optimizer'", "start a new run")
    # A checkpoint saved before a flag existed ran as that flag's default: it resumes so, and only so.
    older = torch.load(periodic, weights_only=False)
    del older["args"]["tf32"]
    torch.save(older, tmp_path / "older.pt")
    assert load_checkpoint(str(tmp_path / "older.pt"), dqn.Args(total_timesteps=600, learning_starts=300))["args"] \
        == older["args"]
    with pytest.raises(UserError, match=r"--tf32 False \(not True\)"):
        load_checkpoint(str(tmp_path / "older.pt"), dqn.Args(total_timesteps=600, learning_starts=300, tf32=True))

    torch_checkpoint = saved_checkpoint("dqn", tmp_path / "torch", "--env-backend", "torch", "--total-timesteps",
                                        "600", "--learning-starts", "300")
    assert_user_error(run_script("dqn", "--total-timesteps", "600", "--learning-starts", "300", "--resume",
                                 torch_checkpoint, "--runs-dir", str(tmp_path / "b")),
                      "--env-backend torch (not gymnasium)")
    ppo_checkpoint = saved_checkpoint("ppo", tmp_path / "ppo", "--total-timesteps", "512", "--num-steps", "128")
    assert_user_error(run_script("ppo", "--total-timesteps", "512", "--num-steps", "128", "--resume", ppo_checkpoint,
                                 "--learning-rate", "0.9", "--num-minibatches", "2", "--runs-dir", str(tmp_path / "b")),
                      "--learning-rate 0.00025 (not 0.9)", "--num-minibatches 4 (not 2)")
    torch.save({"q_network": {}}, tmp_path / "weights.pt")
    assert_user_error(run_script("dqn", "--resume", str(tmp_path / "weights.pt"), "--runs-dir", str(tmp_path / "b")),
                      "not a checkpoint of --save-model")
