"""TD3 and SAC on device envs with FastTD3's recipe (algos/td3_device_envs.py, sac_device_envs.py), on CPU: learning,
the distributional critic's projection, the twin critics' batched layers, the replay at episode boundaries, the
SAC policy's log-probability, user errors."""

import glob

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from algos.sac_device_envs import Actor as SacActor
from algos.td3_device_envs import TwinQNetwork
from tests.helpers import assert_user_error, metric, run_main, run_script
from turborl.numerics import project

# The default support of Pendulum-v1's returns (SUPPORTS), as a user's run gets it.
SMALL = ["--env-backend", "torch", "--env-id", "Pendulum-v1", "--critic-hidden-dim", "256", "--actor-hidden-dim",
         "128", "--buffer-size", "100000"]


@pytest.mark.parametrize("script", ["td3_device_envs", "sac_device_envs"])
def test_learns_pendulum(tmp_path, script):
    """Measured on CPU (seed 1, 32k steps): the last 20 episodes average -178 (TD3) and -160 (SAC). A batch of 512
    learns as 1,024 did (-175, -165) in half the time of these CPU-bound updates."""
    result = run_script(script, *SMALL, "--num-envs", "32", "--batch-size", "512", "--learning-starts",
                        "640", "--total-timesteps", "32000", "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = glob.glob(str(tmp_path / f"Pendulum-v1__{script}__1__*"))
    returns = metric(run_dir, "episodic_return")
    assert len(returns) >= 32 * 5 and np.mean(returns[-20:]) >= -400, returns[-20:]
    assert np.mean(returns[:32]) < -900  # the first episodes (an untrained policy) are far below


def test_projection_keeps_the_mass_and_shifts_the_mean():
    support = torch.linspace(-10, 10, 21)
    probs = torch.softmax(torch.randn(64, 21), 1)
    reward, discount = torch.rand(64) * 2 - 1, torch.full((64,), 0.5)
    projected = project(probs, reward, discount, support)
    torch.testing.assert_close(projected.sum(1), torch.ones(64))
    # inside the support, splitting between neighbours keeps the mean: E[r + discount * Z]
    torch.testing.assert_close((projected * support).sum(1), reward + discount * (probs * support).sum(1))


def test_projection_of_point_masses():
    support = torch.linspace(0, 4, 5)
    at = torch.eye(5)[[1, 4, 0]]  # all mass at 1, at 4 (the top), at 0
    # 1 -> 0.5 + 1 = 1.5 (half on 1, half on 2); 4 -> 1 + 4 = 5, clamped to 4 (the top); 0 -> -3 + 0, clamped to 0
    projected = project(at, torch.tensor([0.5, 1.0, -3.0]), torch.ones(3), support)
    torch.testing.assert_close(projected, torch.tensor([[0, 0.5, 0.5, 0, 0], [0, 0, 0, 0, 1.0], [1.0, 0, 0, 0, 0]]))
    ended = project(at[:1], torch.tensor([3.0]), torch.zeros(1), support)  # a terminal step: the reward alone
    torch.testing.assert_close(ended, torch.tensor([[0, 0, 0, 1.0, 0]]))


def test_twin_critic_is_two_independent_mlps():
    torch.manual_seed(0)
    critic = TwinQNetwork(obs_dim=5, action_dim=2, hidden=16, num_atoms=7)
    obs, action = torch.randn(9, 5), torch.randn(9, 2)
    out = critic(obs, action)
    assert out.shape == (2, 9, 7)
    for k in range(2):
        x = torch.cat([obs, action], 1)
        for i, (weight, bias) in enumerate(zip(critic.weights, critic.biases, strict=True)):
            x = F.linear(x, weight[k].T, bias[k, 0])
            x = F.relu(x) if i < 3 else x
        torch.testing.assert_close(out[k], x)
    assert not torch.allclose(out[0], out[1])  # initialized apart
    assert [w.shape[1:] for w in critic.weights] == [(7, 16), (16, 8), (8, 4), (4, 7)]


@pytest.mark.parametrize("script", ["td3_device_envs", "sac_device_envs"])
def test_replay_holds_each_episodes_last_observation_at_time_limits(tmp_path, script):
    """Pendulum's episodes end at its 200-step limit: the transition that ends one stores the last observation of
    that episode (not the next one's first) and is not terminal (it bootstraps); all others chain up."""
    n_envs, steps = 4, 210
    run_dir = run_main(script, [*SMALL, "--num-envs", str(n_envs), "--total-timesteps",
                                           str(n_envs * steps), "--learning-starts", "200", "--batch-size", "32",
                                           "--critic-hidden-dim", "16", "--actor-hidden-dim", "8", "--save-model"],
                       str(tmp_path))
    replay = torch.load(f"{run_dir}/{script}.pt", weights_only=False)["replay"]
    obs = replay["rb_obs"].view(steps, n_envs, 3)
    next_obs = replay["rb_next_obs"].view(steps, n_envs, 3)
    assert not replay["rb_dones"].any()
    chained = (next_obs[:-1] == obs[1:]).all(2)  # step t's next observation is step t+1's observation
    assert chained[:199].all() and chained[200:].all()
    assert not chained[199].any()  # step 200 of every env ended its episode: a new one started from a reset
    # the stored final observation is where that episode's dynamics went: its angle follows from the one before
    theta = torch.atan2(next_obs[199, :, 1], next_obs[199, :, 0]) - torch.atan2(obs[199, :, 1], obs[199, :, 0])
    assert (torch.remainder(theta + torch.pi, 2 * torch.pi) - torch.pi).abs().max() < 0.5


def test_sac_log_probability_is_the_squashed_gaussians():
    """Actor.sample's log-probability against torch.distributions' tanh-transformed Normal, scaled to the bounds."""
    torch.manual_seed(0)
    low, high = np.array([-2.0, -0.5], np.float32), np.array([2.0, 0.5], np.float32)
    actor = SacActor(4, 2, 16, low, high)
    obs, eps = torch.randn(64, 4), torch.randn(64, 2)
    action, log_prob = actor.sample(obs, eps)
    mean, log_std = actor(obs)
    squashed = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()),
        [torch.distributions.TanhTransform(), torch.distributions.AffineTransform(0.0, torch.tensor(high))])
    torch.testing.assert_close(action, mean.add(log_std.exp() * eps).tanh() * torch.tensor(high))
    torch.testing.assert_close(log_prob, squashed.log_prob(action).sum(1), rtol=1e-4, atol=2e-3)


def test_default_run_without_mujoco_warp_is_a_user_error(tmp_path):
    hidden = tmp_path / "without_warp" / "mujoco_warp"  # first on the path: `import mujoco_warp` fails
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'mujoco_warp'\")\n")
    result = run_script("td3_device_envs", "--runs-dir", str(tmp_path), env={"PYTHONPATH": str(hidden.parent)})
    assert_user_error(result, 'pip install -e ".[mjwarp]"')


@pytest.mark.parametrize("script", ["td3_device_envs", "sac_device_envs"])
def test_trains_on_mujoco_warp(tmp_path, script):
    """On warp's CPU backend: Humanoid-v5's random episodes end within a few dozen steps, so a short run both
    trains and logs episodes (on the GPU, tests/test_gpu.py compares the four paths on these envs)."""
    pytest.importorskip("mujoco_warp")
    result = run_script(script, "--env-backend", "mjwarp", "--env-id", "Humanoid-v5", "--num-envs", "4",
                        "--total-timesteps", "200", "--learning-starts", "80", "--batch-size", "32",
                        "--buffer-size", "1000", "--critic-hidden-dim", "16", "--actor-hidden-dim", "8",
                        "--log-every", "1", "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    [run_dir] = tmp_path.iterdir()
    assert metric(str(run_dir), "qf_loss") and metric(str(run_dir), "episodic_return")
