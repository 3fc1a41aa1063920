"""TD3 and SAC on CPU: episode boundaries, user errors (learning: tests/test_seeds.py)."""

import importlib
import importlib.util

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.helpers import assert_user_error, run_script

# TD3's and SAC's learning tests are tests/test_seeds.py's: both seeds of a --num-seeds 2 run learn Pendulum (a
# single-seed run is the same code with a seeds axis of 1).


class BoundaryEnv(gym.Env):
    """Observation [episode, t]. Even episodes terminate at t=5; odd ones are truncated by the time limit (7)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode, self.t = getattr(self, "episode", -1) + 1, 0
        return np.array([self.episode, 0], np.float32), {}

    def step(self, action):
        self.t += 1
        terminated = self.episode % 2 == 0 and self.t == 5
        return np.array([self.episode, self.t], np.float32), 1.0, terminated, False, {}


gym.register("turborl-test/Boundaries-v0", entry_point=BoundaryEnv, max_episode_steps=7)


def saved_replay(tmp_path, algo: str, **args) -> dict:
    """The replay memory a short run of the script saves with its final checkpoint: seed 0's ring of each field."""
    module = importlib.import_module(f"algos.{algo}")
    run = module.main(module.Args(**args, cuda=False, save_model=True, runs_dir=str(tmp_path)))
    replay = torch.load(f"{run['run_dir']}/{algo}.pt", weights_only=False)["replay"]
    return {name: ring[:, 0] for name, ring in replay.items()}


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_replay_never_crosses_episode_boundaries(tmp_path, algo):
    replay = saved_replay(tmp_path, algo, env_id="turborl-test/Boundaries-v0", total_timesteps=40, learning_starts=38,
                          buffer_size=100, batch_size=8)
    obs, next_obs, dones = (replay[name] for name in ("rb_obs", "rb_next_obs", "rb_dones"))
    assert len(obs) == 39  # every step but the last, whose transition the next call would store
    # Every stored transition stays inside one episode and advances time by one step.
    torch.testing.assert_close(next_obs, obs + torch.tensor([0.0, 1.0]))
    terminal = (next_obs[:, 0] % 2 == 0) & (next_obs[:, 1] == 5)
    truncated = next_obs[:, 1] == 7
    assert terminal.any() and truncated.any()
    assert torch.equal(dones.bool(), terminal)  # truncation is not termination: those bootstrap


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_replay_holds_what_gymnasiums_env_does_under_the_stored_actions(tmp_path, algo):
    # Random actions, then the policy's (from step 300), across two time limits: replayed through gymnasium's
    # own env, each stored action must lead from the stored obs to the stored reward and next obs. (Pendulum never
    # terminates: test_replay_never_crosses_episode_boundaries covers the done flag at a termination.)
    replay = saved_replay(tmp_path, algo, env_id="Pendulum-v1", seed=5, total_timesteps=450, learning_starts=300)
    obs, actions, rewards, next_obs, dones = (replay[name].double().numpy() for name in (
        "rb_obs", "rb_actions", "rb_rewards", "rb_next_obs", "rb_dones"))
    env = gym.make("Pendulum-v1")
    expected_obs, _ = env.reset(seed=5)
    for t in range(len(actions)):
        np.testing.assert_allclose(obs[t], expected_obs, atol=1e-5)
        expected_next, expected_reward, terminated, truncated, _ = env.step(actions[t])
        np.testing.assert_allclose([*next_obs[t], rewards[t]], [*expected_next, expected_reward], atol=1e-5)
        assert dones[t] == terminated
        expected_obs = env.reset()[0] if terminated or truncated else expected_next
    assert len(actions) == 449  # every step but the last, across both time limits (steps 200 and 400)


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_default_mujoco_task_without_the_extra_is_a_user_error(tmp_path, algo):
    hidden = tmp_path / "without_mujoco" / "mujoco"  # first on the path: `import mujoco` fails as if not installed
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'mujoco'\")\n")
    result = run_script(algo, "--runs-dir", str(tmp_path), env={"PYTHONPATH": str(hidden.parent)})
    assert_user_error(result, "HalfCheetah-v5", "pip install -e '.[mujoco]'")


def test_a_compiled_run_does_not_print_torchs_profiler_notice(tmp_path):
    """torch.optim's profiler marker makes compiled code warn on every run; turborl.paths filters that one line."""
    result = run_script("td3", "--env-id", "Pendulum-v1", "--total-timesteps", "300", "--learning-starts", "100",
                        "--compile", "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Profiler record function" not in result.stdout + result.stderr


def test_td3s_actor_loss_reads_each_seeds_first_critic_and_steps_no_critic():
    """TwinQNetwork with first_only (the actor's loss) picks seed i's first critic out of the stacked weights: its
    values and the gradients it sends to the actions are the full network's first critic's, and no critic weight
    gets one."""
    from algos.td3 import TwinQNetwork
    from turborl.seeds import seeded

    qf = seeded(1, 3, lambda: (TwinQNetwork(5, 2, hidden=16),))[0]
    obs, actions = torch.randn(3, 32, 5), torch.randn(3, 32, 2, requires_grad=True)
    both = qf(obs, actions)  # [seeds, 2, batch]
    assert not torch.equal(both[:, 0], both[:, 1]) and not torch.equal(both[0], both[1])  # a wrong pick would show
    first = qf(obs, actions, first_only=True)[:, 0]
    torch.testing.assert_close(first, both[:, 0], rtol=0, atol=0)
    [expected] = torch.autograd.grad(both[:, 0].sum(), actions)
    qf.zero_grad(set_to_none=True)
    first.sum().backward()
    torch.testing.assert_close(actions.grad, expected, rtol=0, atol=0)
    assert all(param.grad is None for param in qf.parameters())
