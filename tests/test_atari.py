"""PPO on Atari (CPU): the frames reach the policy as the env gives them, games are logged whole across lives,
bad input is one line, and a checkpoint resumes (with new games: the C++ games cannot be saved). The four
paths' first losses are compared by tests/test_paths.py and tests/test_gpu.py (registry test run ppo-atari)."""

import glob
import json
import os
import signal

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from algos import ppo_atari  # noqa: E402
from tests.helpers import assert_user_error, metrics_after, run_main, run_script  # noqa: E402
from turborl.logger import RunLogger  # noqa: E402


def test_frames_reach_the_policy_stacked_and_scaled_as_the_env_gives_them():
    envs = ppo_atari.make_envs(ppo_atari.Args(num_envs=2, env_threads=1), 2)
    link = ppo_atari.FrameLink(2, torch.device("cpu"))
    frames, info = envs.reset(seed=3)
    assert frames.shape == (2, *ppo_atari.FRAMES) and frames.dtype == np.uint8
    link.reset(frames)
    agent = ppo_atari.Agent(int(envs.single_action_space.n))
    shifts = 0
    for step in range(60):
        received, reward, ended = link.receive()
        assert torch.equal(received, torch.from_numpy(frames))  # the device sees the env's frames, bit for bit
        scaled = agent.network(torch.from_numpy(frames).float() / 255)
        torch.testing.assert_close(agent.hidden(received), scaled, rtol=0, atol=0)
        action = np.full(2, 1 if step % 10 == 0 else 3)  # FIRE now and then, else LEFT
        next_frames, reward, terminated, truncated, info = envs.step(action)
        for env in range(2):
            if not (terminated[env] or truncated[env]):  # a stack moves on by one frame per step
                assert np.array_equal(next_frames[env, :3], frames[env, 1:])
                shifts += not np.array_equal(next_frames[env, 3], frames[env, 3])
        frames = next_frames
        link.send(frames, reward, terminated | truncated)
    envs.close()
    assert shifts > 20  # the newest frame changed: the game moved


def test_games_are_logged_whole_across_lost_lives():
    games = ppo_atari.Games(2, np.array([5, 0]))  # Breakout-like (5 lives) and Pong-like (no lives)
    step = lambda reward, ended, lives: games.after_step(np.array(reward), np.array(ended), np.array(lives))  # noqa: E731
    assert step([4, 1], [False, False], [5, 0]) == []
    assert step([0, -1], [True, False], [4, 0]) == []  # a lost life ends an episode, not the game
    assert step([7, 0], [False, True], [4, 0]) == [(0.0, 3)]  # no lives: every episode end is a game's
    assert step([0, 0], [True, False], [5, 0]) == [(11.0, 4)]  # lives back up: the env restarted the game
    assert games.score.tolist() == [0.0, 0.0] and games.length.tolist() == [0, 1]


def test_missing_ale_py_says_what_to_install(tmp_path):
    stub = tmp_path / "stub" / "ale_py"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('ale_py hidden by the test')\n")
    env = {**os.environ, "PYTHONPATH": f"{stub.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    assert_user_error(run_script("ppo_atari", "--runs-dir", str(tmp_path / "runs"), env=env), '".[atari]"')


def test_ctrl_c_mid_rollout_leaves_a_checkpoint_that_resumes_to_the_budget(tmp_path, monkeypatch):
    flags = ["--num-envs", "4", "--num-steps", "32", "--total-timesteps", "640", "--log-every", "1"]
    progress = RunLogger.progress

    def progress_then_ctrl_c(logger, step):
        progress(logger, step)
        if step >= 200 and not logger.stop.requested:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(RunLogger, "progress", progress_then_ctrl_c)
    interrupted = run_main("ppo_atari", [*flags, "--save-model"], str(tmp_path / "interrupted"))
    monkeypatch.setattr(RunLogger, "progress", progress)
    with open(os.path.join(interrupted, "summary.json")) as f:
        summary = json.load(f)
    assert summary["status"] == "interrupted" and summary["steps"] == 256, summary  # where the iteration ended
    saved = torch.load(summary["checkpoint"], weights_only=False)["agent"]
    resumed = run_main("ppo_atari", [*flags, "--save-model", "--resume", summary["checkpoint"]],
                       str(tmp_path / "resumed"))
    with open(os.path.join(resumed, "summary.json")) as f:
        assert json.load(f)["steps"] == 640
    logged = metrics_after(str(tmp_path / "resumed"), -1)
    assert min(int(step) for step, _, _ in logged) > 256 and any(name == "policy_loss" for _, name, _ in logged)
    first_lr = next(float(value) for _, name, value in logged if name == "learning_rate")
    assert first_lr == pytest.approx(2.5e-4 * (1 - 2 / 5))  # the third of five iterations: the counters came back
    final = torch.load(glob.glob(os.path.join(resumed, "ppo_atari.pt"))[0], weights_only=False)["agent"]
    assert not torch.equal(final["actor.weight"], saved["actor.weight"])  # it trained on from the checkpoint
