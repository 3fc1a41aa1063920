"""PPO and PQN on Atari (CPU): the frames reach the networks as the env gives them, games are logged whole across
lives, PQN's Q(lambda) returns against a plain loop, and a checkpoint resumes (with new games: the C++ games cannot
be saved). The four paths' first losses are compared by tests/test_paths.py and tests/test_gpu.py (registry test
runs ppo-atari, pqn-atari); bad input by tests/test_bad_input.py."""

import json
import os
import signal

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from algos import ppo_atari, pqn_atari  # noqa: E402
from tests.helpers import assert_user_error, metrics_after, run_main, run_script  # noqa: E402
from turborl import atari  # noqa: E402
from turborl.errors import UserError  # noqa: E402
from turborl.logger import RunLogger  # noqa: E402


def test_frames_reach_the_policy_stacked_and_scaled_as_the_env_gives_them():
    envs = atari.make_envs("Breakout-v5", 2, threads=1)
    link = atari.FrameLink(2, torch.device("cpu"))
    frames, info = envs.reset(seed=3)
    assert frames.shape == (2, *atari.FRAMES) and frames.dtype == np.uint8
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
    games = atari.Games(2, np.array([5, 0]))  # Breakout-like (5 lives) and Pong-like (no lives)
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


@pytest.mark.parametrize("script, loss, network, output_weight", [
    ("ppo_atari", "policy_loss", "agent", "actor.weight"), ("pqn_atari", "td_loss", "q_network", "network.13.weight")])
def test_ctrl_c_mid_rollout_leaves_a_checkpoint_that_resumes_to_the_budget(tmp_path, monkeypatch, script, loss,
                                                                           network, output_weight):
    flags = ["--num-envs", "4", "--num-steps", "32", "--total-timesteps", "640", "--log-every", "1"]
    progress = RunLogger.progress

    def progress_then_ctrl_c(logger, step):
        progress(logger, step)
        if step >= 200 and not logger.stop.requested:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(RunLogger, "progress", progress_then_ctrl_c)
    interrupted = run_main(script, [*flags, "--save-model"], str(tmp_path / "interrupted"))
    monkeypatch.setattr(RunLogger, "progress", progress)
    with open(os.path.join(interrupted, "summary.json")) as f:
        summary = json.load(f)
    assert summary["status"] == "interrupted" and summary["steps"] == 256, summary  # where the iteration ended
    saved = torch.load(summary["checkpoint"], weights_only=False)[network]
    resumed = run_main(script, [*flags, "--save-model", "--resume", summary["checkpoint"]], str(tmp_path / "resumed"))
    with open(os.path.join(resumed, "summary.json")) as f:
        assert json.load(f)["steps"] == 640
    logged = metrics_after(str(tmp_path / "resumed"), -1)
    assert min(int(step) for step, _, _ in logged) > 256 and any(name == loss for _, name, _ in logged)
    first_lr = next(float(value) for _, name, value in logged if name == "learning_rate")
    assert first_lr == pytest.approx(2.5e-4 * (1 - 2 / 5))  # the third of five iterations: the counters came back
    final = torch.load(os.path.join(resumed, f"{script}.pt"), weights_only=False)[network]
    assert not torch.equal(final[output_weight], saved[output_weight])  # it trained on from the checkpoint
    if script == "pqn_atari":  # the exported policy is the greedy one of the final network
        q_network = pqn_atari.QNetwork(4)  # Breakout's 4 actions
        q_network.load_state_dict(final)
        frames = torch.randint(0, 256, (5, *atari.FRAMES)).float()
        exported = torch.export.load(os.path.join(resumed, "pqn_atari.pt2")).module()
        assert torch.equal(exported(frames), q_network(frames).argmax(-1))


def test_pqn_q_lambda_returns_are_the_recursion_cut_at_every_episode_end():
    """Against the recursion written as a loop: G_t = r_t + gamma * (1 - ended_t) * (lambda * G_t+1 +
    (1 - lambda) * v_t+1), the return past the rollout its last max Q."""
    torch.manual_seed(0)
    steps, envs, gamma, q_lambda = 9, 3, 0.9, 0.65
    rewards, next_values = torch.randn(steps, envs), torch.randn(steps, envs)
    ended = torch.zeros(steps, envs)
    ended[2, 0] = ended[8, 1] = ended[4, 2] = 1  # one at the rollout's last step
    expected = torch.zeros(steps, envs)
    for t in reversed(range(steps)):
        ahead = next_values[t] if t == steps - 1 else q_lambda * expected[t + 1] + (1 - q_lambda) * next_values[t]
        expected[t] = rewards[t] + gamma * (1 - ended[t]) * ahead
    got = pqn_atari.q_lambda_returns(rewards, ended, next_values, gamma, q_lambda)
    torch.testing.assert_close(got, expected)
    assert torch.isclose(got[2, 0], rewards[2, 0]) and torch.isclose(got[8, 1], rewards[8, 1])  # nothing beyond


def test_evaluate_scores_whole_games_across_lost_lives():
    """scripts/evaluate.py on an Atari run plays whole games: a policy that presses FIRE loses Breakout's five
    lives in one game, and the game's score is every reward of it. The games play side by side, and game i is the
    first game of seed + i, as one game at a time would play it, even where another game is still going on."""
    from scripts import evaluate

    wait = 1_500  # game 1 waits this many steps before its first FIRE; games 0 and 2 end two games meanwhile

    def action(game: int, step: int) -> int:
        return 1 if game != 1 or step >= wait else 0  # FIRE, else NOOP

    steps = [0]  # the steps of the three games (run_games first tries the policy on one blank frame)

    def policy(frames):
        if frames.shape[0] == 3:
            steps[0] += 1
        return torch.tensor([action(game, steps[0] - 1) for game in range(frames.shape[0])])

    scores, lengths = evaluate.run_games(policy, "Breakout-v5", evaluate.Args(path="", episodes=3, seed=3))
    for game, (score, length) in enumerate(zip(scores, lengths, strict=True)):
        envs = atari.make_envs("Breakout-v5", 1, threads=1)  # the same game again, alone, counted by hand
        envs.reset(seed=3 + game)
        total, lives_lost, step = 0.0, 0, 0
        while lives_lost < 5:
            _, reward, terminated, truncated, _ = envs.step(np.array([action(game, step)]))
            total, step, lives_lost = total + reward[0], step + 1, lives_lost + int(terminated[0] or truncated[0])
        envs.close()
        assert (total, step) == (score, length) and length > 5 * 20
    assert 2 * max(lengths[0], lengths[2]) < wait < lengths[1] and lengths[0] != lengths[2]  # two seeds, two games


def test_a_game_given_to_a_gymnasium_script_names_the_atari_scripts(tmp_path):
    result = run_script("dqn", "--env-id", "ALE/Breakout-v5", "--runs-dir", str(tmp_path))
    assert_user_error(result, "unknown env id 'ALE/Breakout-v5'", "algos/ppo_atari.py", "--env-id Breakout-v5")


def test_evaluate_refuses_a_game_with_another_action_set_than_the_policy_trained_on():
    """Breakout's policy picks one of 4 actions, which Pong's 6 would take without complaint: the game it trained
    on says what its actions mean."""
    from scripts import evaluate

    policy = lambda frames: torch.zeros(frames.shape[0], dtype=torch.long)  # NOOP, an action of every game
    with pytest.raises(UserError, match="chooses among Breakout-v5's 4 actions, not Pong-v5's 6.*--env-id Breakout"):
        evaluate.run_games(policy, "Pong-v5", evaluate.Args(path="", episodes=1), trained_on="Breakout-v5")


def test_env_speed_measures_each_library_and_says_what_a_missing_one_needs(tmp_path, monkeypatch):
    from scripts import atari_env_speed

    out = tmp_path / "speed.json"
    atari_env_speed.main(atari_env_speed.Args(num_envs=[2], seconds=0.2, out=str(out)))
    (row,) = json.load(open(out))["rows"]
    assert row["library"] == "ale-py" and row["num_envs"] == 2 and row["env_steps_per_second"] > 0

    with pytest.raises(UserError, match="--libraries gym: choose ale-py, envpool or both"):
        atari_env_speed.main(atari_env_speed.Args(libraries=["gym"]))
    find_spec = atari_env_speed.importlib.util.find_spec
    monkeypatch.setattr(atari_env_speed.importlib.util, "find_spec",
                        lambda name: None if name == "envpool" else find_spec(name))
    with pytest.raises(UserError, match="envpool is not installed: pip install envpool"):
        atari_env_speed.main(atari_env_speed.Args(libraries=["ale-py", "envpool"]))
