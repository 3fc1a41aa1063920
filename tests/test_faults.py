"""Faults and everyday use: NaN losses, Ctrl-C, exported policies, evaluation, tracking."""

import csv
import glob
import io
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from tests.helpers import ROOT, assert_user_error, metric, run_main, run_script


def run_dir_of(tmp_path, pattern="*"):
    [run_dir] = glob.glob(str(tmp_path / pattern))
    return run_dir


def test_nan_loss_stops_cleanly_and_keeps_metrics_and_a_checkpoint_that_resumes(tmp_path):
    result = run_script("dqn", "--learning-rate", "inf", "--total-timesteps", "3000", "--learning-starts", "500",
                        "--log-every", "1", "--save-model", "--runs-dir", str(tmp_path / "a"))
    assert result.returncode == 3, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "error: td_loss became nan" in result.stderr
    assert "done:" not in result.stderr
    run_dir = run_dir_of(tmp_path / "a")
    checkpoint = os.path.join(run_dir, "dqn.pt")
    assert read_json(os.path.join(run_dir, "summary.json"))["status"] == "stopped"
    assert len(metric(run_dir, "episodic_return")) > 5
    # It resumes (and stops again: the weights are NaN), with one line, not a traceback.
    result = run_script("dqn", "--learning-rate", "inf", "--total-timesteps", "3000", "--learning-starts", "500",
                        "--log-every", "1", "--resume", checkpoint, "--runs-dir", str(tmp_path / "b"))
    assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_mid_rollout_stops_at_the_iteration_end_with_a_checkpoint_that_resumes(tmp_path, stop):
    """PPO with long rollouts (2048 steps) and subprocess envs; Ctrl-C, or the SIGTERM of kill, timeout or a job
    scheduler, lands inside a rollout. It goes to the whole process group, as a terminal and a scheduler send it:
    the env subprocesses ignore it and step on until the run's last iteration ends."""
    flags = ["--env-id", "Acrobot-v1", "--num-envs", "2", "--async-envs", "True", "--num-steps", "2048",
             "--total-timesteps", str(10 * 2 * 2048)]
    process = subprocess.Popen([sys.executable, os.path.join(ROOT, "algos", "ppo.py"), *flags, "--save-model",
                                "--runs-dir", str(tmp_path / "a")],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    deadline = time.time() + 1200  # a guard only: the signal waits for the first metrics row
    while time.time() < deadline and process.poll() is None and not metric_rows(tmp_path / "a", "learning_rate"):
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(process.pid, stop)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and "interrupted at" in stderr and "done:" not in stderr
    assert ("Ctrl-C: stopping" if stop == signal.SIGINT else "SIGTERM: stopping") in stderr
    run_dir = run_dir_of(tmp_path / "a")
    checkpoint = os.path.join(run_dir, "ppo.pt")
    saved = torch.load(checkpoint, weights_only=False)
    # At an iteration's end, after the first (whose metrics row the signal waited for); how many more ran
    # before the signal landed depends on the machine's load.
    assert saved["global_step"] % (2 * 2048) == 0 and saved["global_step"] >= 2 * 2048
    summary = read_json(os.path.join(run_dir, "summary.json"))
    assert summary["status"] == "interrupted" and summary["checkpoint"] == checkpoint
    assert "continue with: " + shlex.join(["python", os.path.join(ROOT, "algos", "ppo.py"), *flags, "--save-model",
                                          "--runs-dir", str(tmp_path / "a"), "--resume", checkpoint]) in stderr
    before = open(checkpoint, "rb").read()
    assert saved["global_step"] < 10 * 2 * 2048
    result = run_script("ppo", *flags, "--resume", checkpoint, "--save-model", "--runs-dir", str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert open(checkpoint, "rb").read() == before  # a resumed run writes into its own folder
    resumed = read_json(os.path.join(run_dir_of(tmp_path / "b"), "summary.json"))
    assert resumed["status"] == "done" and resumed["steps"] == 10 * 2 * 2048


@pytest.mark.parametrize("script, flags", [
    ("ppo", ["--num-envs", "2", "--num-steps", "16"]),
    ("pqn", ["--num-envs", "2", "--num-steps", "16"]),
    ("ppo_lstm", ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2"]),
    ("ppo_lstm_device_envs", ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2"]),
])
def test_ctrl_c_in_the_last_iteration_leaves_a_finished_run(tmp_path, monkeypatch, script, flags):
    """A signal that lands while the last iteration runs stops nothing: the loop ends there anyway. The run is
    done (not interrupted, with a resume that would run nothing). --total-timesteps 100 runs as three whole
    rollouts of 32 steps, 96 steps: the last iteration starts after step 64."""
    from turborl.errors import UserError
    from turborl.logger import RunLogger

    progress = RunLogger.progress

    def signal_in_the_last_iteration(self, step):
        if step > 64:
            self.stop.request("interrupted", "interrupted")
        return progress(self, step)

    monkeypatch.setattr(RunLogger, "progress", signal_in_the_last_iteration)
    flags = ["--env-id", "CartPole-v1", "--total-timesteps", "100", *flags]
    run_dir = run_main(script, [*flags, "--save-model"], str(tmp_path / "a"))
    summary = read_json(os.path.join(run_dir, "summary.json"))
    assert summary["status"] == "done" and summary["steps"] == 96, summary
    with pytest.raises(UserError, match="that run finished .*: nothing to resume"):
        run_main(script, [*flags, "--resume", run_dir], str(tmp_path / "b"))


def metric_rows(runs_dir, name):
    found = glob.glob(str(runs_dir / "*" / "metrics.csv"))
    return found and metric(os.path.dirname(found[0]), name)


def read_json(path):
    """Strict JSON: NaN or Infinity in the file fail the test."""
    def refuse(constant):
        raise ValueError(f"{path} holds {constant}, which strict JSON parsers reject")
    with open(path) as f:
        return json.load(f, parse_constant=refuse)


def test_exported_policies_reproduce_the_scripts_deterministic_actions(tmp_path):
    from algos.dqn import QNetwork
    from algos.ppo import Agent

    obs = torch.randn(64, 3) * 3
    # PPO on a Box task: normalization statistics and action clipping are part of the exported policy.
    result = run_script("ppo", "--env-id", "Pendulum-v1", "--num-steps", "256", "--total-timesteps", "512",
                        "--save-model", "--runs-dir", str(tmp_path / "ppo"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Expect archive file" not in result.stderr  # torch.export warns when saving under another suffix
    run_dir = run_dir_of(tmp_path / "ppo")
    checkpoint = torch.load(os.path.join(run_dir, "ppo.pt"), weights_only=False)
    agent = Agent(3, 1, discrete=False)
    agent.load_state_dict(checkpoint["agent"])
    stats = {name: stat[0, 0] if stat.dim() else stat for name, stat in  # the one seed's statistics
             checkpoint["normalization"]["obs_rms"].items()}
    with torch.no_grad():
        normalized = ((obs - stats["mean"]) / torch.sqrt(stats["var"] + 1e-8)).clamp(-10, 10)
        expected = agent.deterministic(normalized.unsqueeze(0)).squeeze(0)  # the agent takes [seeds, batch, obs]
    exported = torch.export.load(os.path.join(run_dir, "ppo.pt2")).module()
    torch.testing.assert_close(exported(obs), expected.clamp(-2, 2))
    assert (expected.abs() > 0).all() and stats["count"] > 500  # statistics were really used

    result = run_script("dqn", "--total-timesteps", "1500", "--learning-starts", "500", "--save-model",
                        "--runs-dir", str(tmp_path / "dqn"))
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = run_dir_of(tmp_path / "dqn")
    q_network = QNetwork(4, 2)
    q_network.load_state_dict(torch.load(os.path.join(run_dir, "dqn.pt"), weights_only=False)["q_network"])
    obs = torch.randn(64, 4)
    exported = torch.export.load(os.path.join(run_dir, "dqn.pt2")).module()
    assert torch.equal(exported(obs), q_network(obs.unsqueeze(0))[0].argmax(-1))  # one seed: [seeds, batch, obs]

    # scripts/evaluate.py runs it (given the checkpoint, through the policy exported next to it).
    evaluation = subprocess.run([sys.executable, "scripts/evaluate.py", os.path.join(run_dir, "dqn.pt"),
                                 "--episodes", "3"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert evaluation.returncode == 0, evaluation.stderr[-2000:]
    with open(os.path.join(run_dir, "evaluation.json")) as f:
        report = json.load(f)
    assert report["env_id"] == "CartPole-v1" and len(report["returns"]) == 3
    assert report["mean_return"] == pytest.approx(np.mean(report["returns"])) and min(report["lengths"]) >= 8


@pytest.mark.parametrize("content, words", [(None, ["no exported policy"]), (b"garbage", ["not an exported policy"])])
def test_evaluate_missing_or_corrupt_policy_is_one_clear_line(tmp_path, content, words):
    path = tmp_path / "policy.pt2"
    if content is not None:
        path.write_bytes(content)
    result = subprocess.run([sys.executable, "scripts/evaluate.py", str(path), "--env-id", "CartPole-v1"],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    assert_user_error(result, *words)


def test_track_works_offline_with_no_account_and_a_failed_start_leaves_no_run_folder(tmp_path):
    """Two seeds (--num-seeds 2), each its own wandb run in its own run folder."""
    flags = ["--track", "--total-timesteps", "600", "--learning-starts", "300", "--num-seeds", "2", "--runs-dir",
             str(tmp_path / "a")]
    try:
        import wandb  # noqa: F401
    except ImportError:
        assert_user_error(run_script("dqn", *flags), "--track needs wandb", "pip install")
        return
    # No WANDB_MODE, no API key, no login: it logs offline into the run folder.
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_")}
    env["HOME"] = str(tmp_path)  # no ~/.netrc login
    result = subprocess.run([sys.executable, os.path.join(ROOT, "algos", "dqn.py"), *flags], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=1200, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    run_dirs = sorted(glob.glob(str(tmp_path / "a" / "CartPole-v1__dqn__*")))
    assert [os.path.basename(d).split("__")[2] for d in run_dirs] == ["1", "2"]
    for run_dir in run_dirs:
        (wandb_run,) = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*"))
        assert os.path.getsize(glob.glob(os.path.join(wandb_run, "*.wandb"))[0]) > 0
        assert metric(run_dir, "episodic_return")
    env["WANDB_MODE"] = "no-such-mode"
    flags[-1] = str(tmp_path / "b")
    result = subprocess.run([sys.executable, os.path.join(ROOT, "algos", "dqn.py"), *flags], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=1200, check=False)
    assert_user_error(result, "--track: wandb could not start", "WANDB_MODE")
    assert not os.listdir(tmp_path / "b")


def test_concurrent_runs_get_a_folder_each_with_whole_rows(tmp_path):
    processes = [subprocess.Popen([sys.executable, os.path.join(ROOT, "algos", "dqn.py"), "--total-timesteps", "3000",
                                   "--learning-starts", "500", "--learning-rate", lr, "--log-every", "1",
                                   "--runs-dir", str(tmp_path)], cwd=ROOT, stderr=subprocess.PIPE, text=True)
                 for lr in ("0.001", "0.0001")]
    for process in processes:
        _, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, stderr[-2000:]
    run_dirs = glob.glob(str(tmp_path / "*"))
    assert len(run_dirs) == 2
    assert {read_json(os.path.join(d, "args.json"))["learning_rate"] for d in run_dirs} == {0.001, 0.0001}
    for run_dir in run_dirs:
        assert read_json(os.path.join(run_dir, "summary.json"))["steps"] == 3000
        assert_whole_rows(os.path.join(run_dir, "metrics.csv"))


def assert_whole_rows(metrics_csv):
    with open(metrics_csv) as f:
        text = f.read()
    assert text.endswith("\n")
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["step", "seconds", "name", "value"]
    for row in rows[1:]:
        assert len(row) == 4 and int(row[0]) >= 0 and float(row[1]) >= 0, row
        float(row[3])  # a number (NaN included), not a fragment


def test_an_unwritable_runs_dir_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    for runs_dir, words in [(tmp_path / "file", ["cannot create a run folder", "writable"]),
                            (tmp_path / "file" / "below", ["cannot create a run folder"])]:
        assert_user_error(run_script("dqn", "--total-timesteps", "600", "--learning-starts", "300", "--runs-dir",
                                     str(runs_dir)), *words)
    read_only = "/sys/turborl-runs"  # sysfs: read-only even for root, where file modes do not stop a write
    if not os.path.exists(read_only) and not os.access("/sys", os.W_OK):
        assert_user_error(run_script("dqn", "--total-timesteps", "600", "--learning-starts", "300", "--runs-dir",
                                     read_only), "cannot create a run folder")


def limit_file_size(max_bytes):
    """A file-size limit for a child process: its writes past it fail (EFBIG) as on a full disk."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return limit


@pytest.mark.parametrize("max_bytes, what", [(100_000, "the checkpoint"), (20_000, "metrics.csv")])
def test_a_full_disk_is_one_line_with_no_partial_files(tmp_path, max_bytes, what):
    """The replay ring makes dqn.pt ~330 kB, past the first limit; with --log-every 1 the metrics pass the second."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, "algos", "dqn.py"), "--total-timesteps", "3000",
                             "--learning-starts", "500", "--log-every", "1", "--save-model",
                             "--runs-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=1200,
                            preexec_fn=limit_file_size(max_bytes))
    assert_user_error(result, "cannot write", what, "free space")
    run_dir = run_dir_of(tmp_path)
    names = os.listdir(run_dir)
    assert not [name for name in names if "tmp" in name or "partial" in name], names
    assert read_json(os.path.join(run_dir, "summary.json"))["status"] == "failed"
    assert_whole_rows(os.path.join(run_dir, "metrics.csv"))


@pytest.fixture
def small_filesystem(tmp_path):
    """A real 300 kB filesystem (tmpfs): a full disk as the kernel reports it, where a failed write's file holds
    its space until it is closed and removed. Needs the right to mount; skipped without it."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mount_point)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=False)


def test_a_really_full_disk_still_gets_a_whole_summary(small_filesystem):
    """dqn.pt (~330 kB with its replay ring) cannot fit: the one line, no partial file, and summary.json written
    into the space the failed checkpoint gave back."""
    result = run_script("dqn", "--total-timesteps", "3000", "--learning-starts", "500", "--log-every", "1",
                        "--save-model", "--runs-dir", str(small_filesystem))
    assert_user_error(result, "cannot write the checkpoint", "free space")
    run_dir = run_dir_of(small_filesystem)
    assert sorted(os.listdir(run_dir)) == ["args.json", "metrics.csv", "summary.json"]
    assert read_json(os.path.join(run_dir, "summary.json"))["status"] == "failed"
    assert_whole_rows(os.path.join(run_dir, "metrics.csv"))


def test_evaluate_takes_a_run_folder_and_refuses_an_env_the_policy_does_not_fit(tmp_path):
    result = run_script("dqn", "--total-timesteps", "600", "--learning-starts", "300", "--save-model",
                        "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = run_dir_of(tmp_path)

    def evaluate(*flags):
        return subprocess.run([sys.executable, "scripts/evaluate.py", *flags], cwd=ROOT, capture_output=True,
                              text=True, check=False)

    evaluation = evaluate(run_dir + os.sep, "--episodes", "2")
    assert evaluation.returncode == 0, evaluation.stderr[-2000:]
    assert read_json(os.path.join(run_dir, "evaluation.json"))["env_id"] == "CartPole-v1"
    older = evaluate(run_dir, "--env-id", "CartPole-v0", "--episodes", "1")  # an old version, as the -v4 MuJoCo rows
    assert older.returncode == 0 and "Warning" not in older.stderr, older.stderr  # as quiet as training: no warning
    assert read_json(os.path.join(run_dir, "evaluation-CartPole-v0.json"))["env_id"] == "CartPole-v0"
    assert read_json(os.path.join(run_dir, "evaluation.json"))["env_id"] == "CartPole-v1"  # the run's own stays
    assert_user_error(evaluate(run_dir, "--episodes", "1", "--out", str(tmp_path / "no" / "such" / "x.json")),
                      "cannot write", "pass a writable --out")
    assert_user_error(evaluate(os.path.join(run_dir, "dqn.pt"), "--env-id", "Pendulum-v1"),
                      "does not take Pendulum-v1's observations", "--env-id CartPole-v1")
    assert_user_error(evaluate(run_dir, "--env-id", "Breakout-v5"),  # an Atari game: evaluated on stacked frames
                      "does not take Atari's stacked frames", "--env-id CartPole-v1")
    assert_user_error(evaluate(run_dir, "--env-id", "Cartpole-v5"), "cannot make 'Cartpole-v5'")  # a typo
    assert_user_error(evaluate(str(tmp_path)), "is a folder of runs: pass the folder of one saved run", run_dir)
    unsaved = run_script("dqn", "--total-timesteps", "600", "--learning-starts", "300", "--seed", "3",
                         "--runs-dir", str(tmp_path / "unsaved"))  # the Quickstart's run: no --save-model
    assert unsaved.returncode == 0, unsaved.stderr[-2000:]
    assert_user_error(evaluate(run_dir_of(tmp_path / "unsaved")), "holds 0 exported policies",
                      "python algos/dqn.py --env-id CartPole-v1 --seed 3 --save-model")


def test_capture_video_without_moviepy_names_the_same_extra_in_training_and_evaluation(tmp_path):
    hidden = tmp_path / "without_moviepy" / "moviepy"  # first on the path: `import moviepy` fails as if missing
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'moviepy'\")\n")
    env = {"PYTHONPATH": str(hidden.parent)}
    flags = ["--total-timesteps", "600", "--learning-starts", "300"]
    assert_user_error(run_script("dqn", *flags, "--capture-video", "--runs-dir", str(tmp_path / "a"), env=env),
                      "--capture-video", "pip install -e '.[video]'")
    result = run_script("dqn", *flags, "--save-model", "--runs-dir", str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr[-2000:]
    evaluation = subprocess.run([sys.executable, "scripts/evaluate.py", run_dir_of(tmp_path / "b"), "--capture-video",
                                 "--episodes", "1"], cwd=ROOT, capture_output=True, text=True, check=False,
                                env={**os.environ, **env})
    assert_user_error(evaluation, "--capture-video", "pip install -e '.[video]'")


def test_capture_video_records_into_each_runs_own_folder(tmp_path):
    """Two runs in one --runs-dir, the second of two seeds: each run's videos are in its (first seed's) run folder,
    none in a folder the runs share, and the folder env 0 recorded into before the run folder existed is gone."""
    pytest.importorskip("moviepy")
    pytest.importorskip("pygame")  # CartPole's rgb_array rendering (gymnasium[classic-control])
    os.makedirs(tmp_path / "tmp")
    flags = ["--total-timesteps", "600", "--learning-starts", "300", "--capture-video", "--runs-dir",
             str(tmp_path / "runs")]
    for more in ([], ["--num-seeds", "2", "--seed", "5"]):
        result = run_script("dqn", *flags, *more, env={"TMPDIR": str(tmp_path / "tmp"), "XDG_RUNTIME_DIR": ""})
        assert result.returncode == 0, result.stderr[-2000:]
        assert "error" not in result.stderr, result.stderr  # SDL's, of a display that rgb_array frames do not need
    runs = sorted(os.listdir(tmp_path / "runs"), key=lambda name: int(name.split("__")[2]))
    assert [name.split("__")[2] for name in runs] == ["1", "5", "6"]
    videos = {name: glob.glob(str(tmp_path / "runs" / name / "videos" / "*.mp4")) for name in runs}
    assert videos[runs[0]] and videos[runs[1]] and not videos[runs[2]]  # env 0 records: the first seed's
    assert not glob.glob(str(tmp_path / "tmp" / "turborl-videos-*"))


def test_a_video_run_that_fails_before_its_run_folder_leaves_no_folder(tmp_path):
    pytest.importorskip("moviepy")
    pytest.importorskip("pygame")
    os.makedirs(tmp_path / "tmp")
    result = run_script("td3", "--env-id", "CartPole-v1", "--capture-video", "--runs-dir", str(tmp_path / "runs"),
                        env={"TMPDIR": str(tmp_path / "tmp"), "SDL_VIDEODRIVER": "dummy"})
    assert_user_error(result, "continuous")  # refused after the envs are made: a discrete action space
    assert not os.listdir(tmp_path / "tmp") and not os.path.exists(tmp_path / "runs")


def test_kill_9_while_a_checkpoint_is_written_leaves_the_previous_one_whole(tmp_path):
    """SIGKILL as soon as a checkpoint's temporary file appears (the write under way; if no poll catches one, at
    the first chance after): every checkpoint left loads, and the newest resumes the run to its budget."""
    flags = ["--total-timesteps", "30000", "--learning-starts", "500", "--buffer-size", "30000", "--save-model",
             "--checkpoint-every", "1000"]
    process = subprocess.Popen([sys.executable, os.path.join(ROOT, "algos", "dqn.py"), *flags,
                                "--runs-dir", str(tmp_path / "a")], cwd=ROOT, stderr=subprocess.DEVNULL)
    while process.poll() is None:
        writing = glob.glob(str(tmp_path / "a" / "*" / "*.tmp"))
        if writing and glob.glob(str(tmp_path / "a" / "*" / "dqn-step*.pt")):
            break
        time.sleep(0.001)
    process.kill()
    process.wait()
    run_dir = run_dir_of(tmp_path / "a")
    assert not os.path.exists(os.path.join(run_dir, "summary.json")) or process.returncode == 0
    kept = sorted(glob.glob(os.path.join(run_dir, "dqn-step*.pt")), key=os.path.getmtime)
    assert kept, os.listdir(run_dir)
    for path in kept:
        assert torch.load(path, weights_only=False)["global_step"] > 0  # whole: it loads
    result = run_script("dqn", *flags, "--resume", kept[-1], "--runs-dir", str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert read_json(os.path.join(run_dir_of(tmp_path / "b"), "summary.json"))["steps"] == 30000


def out_of_memory(wrapped: bool) -> Exception:
    """The allocator's error, or what torch.compile raises (`from None`) when the allocation fails as it compiles."""
    from torch._inductor.exc import InductorError

    error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return InductorError(error, None) if wrapped else error


@pytest.mark.parametrize("wrapped", [False, True])
def test_running_out_of_device_memory_mid_run_is_one_line_and_keeps_the_run(tmp_path, monkeypatch, capsys, wrapped):
    """An out-of-memory error where the loop runs (made here by the progress call at step 1,500, after the periodic
    checkpoint at 1,000), raised as is or from a compile error: one line naming the flags that size the run, exit 2,
    a whole summary, a checkpoint. Any other error keeps its traceback."""
    from algos import dqn
    from turborl.cli import cli
    from turborl.logger import RunLogger

    progress, error = RunLogger.progress, out_of_memory(wrapped)

    def run_out(logger, step):
        progress(logger, step)
        if step >= 1500:
            raise error

    monkeypatch.setattr(RunLogger, "progress", run_out)
    with pytest.raises(SystemExit) as exit_info:
        cli(dqn.main, dqn.Args, ["--total-timesteps", "3000", "--learning-starts", "500", "--save-model",
                                 "--checkpoint-every", "1000", "--runs-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert lines == ["error: the device ran out of memory; lower --num-envs or --buffer-size or --batch-size (the "
                     "run folder keeps the metrics and the last periodic checkpoint)"]
    run_dir = run_dir_of(tmp_path)
    assert read_json(os.path.join(run_dir, "summary.json"))["status"] == "failed"
    assert os.path.exists(os.path.join(run_dir, "dqn-step1000.pt")) and metric(run_dir, "episodic_return")

    # Not one: another error, and one raised in a `finally` while a memory error was on its way out.
    try:
        raise torch.OutOfMemoryError("CUDA out of memory")
    except torch.OutOfMemoryError:
        try:
            raise OSError("not a memory error: the disk is full")
        except OSError as err:
            error = err if wrapped else ValueError("not a memory error")
    with pytest.raises(type(error), match="not a memory error"):
        cli(dqn.main, dqn.Args, ["--total-timesteps", "2000", "--learning-starts", "500", "--runs-dir",
                                 str(tmp_path / "other")])
