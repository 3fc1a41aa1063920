"""Torch classic-control envs against gymnasium's own: step for step from identical states and actions."""

import glob

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.helpers import metric, run_script
from turborl.cli import UserError
from turborl.envs import make_env
from turborl.torch_envs import TORCH_ENVS

# States well beyond what resets produce, so that terminations, clipping and wrapping all happen.
WIDE_STATES = {
    "CartPole-v1": ([-2.5, -3, -0.22, -3.5], [2.5, 3, 0.22, 3.5]),
    "Pendulum-v1": ([-2 * np.pi, -8], [2 * np.pi, 8]),
    "Acrobot-v1": ([-np.pi, -np.pi, -4 * np.pi, -9 * np.pi], [np.pi, np.pi, 4 * np.pi, 9 * np.pi]),
    "MountainCar-v0": ([-1.2, -0.07], [0.6, 0.07]),
    "MountainCarContinuous-v0": ([-1.2, -0.07], [0.6, 0.07]),
}
# gymnasium's reset bounds of each state coordinate.
RESET_BOUNDS = {
    "CartPole-v1": ([-0.05] * 4, [0.05] * 4),
    "Pendulum-v1": ([-np.pi, -1], [np.pi, 1]),
    "Acrobot-v1": ([-0.1] * 4, [0.1] * 4),
    "MountainCar-v0": ([-0.6, 0], [-0.4, 0]),
    "MountainCarContinuous-v0": ([-0.6, 0], [-0.4, 0]),
}


@pytest.mark.parametrize("env_id", list(TORCH_ENVS))
def test_steps_match_gymnasium(env_id):
    n, steps = 16, 300  # 4800 transitions per env id
    ours = make_env(env_id, n, seed=0, backend="torch")
    refs = [gym.make(env_id) for _ in range(n)]
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
    rng = np.random.default_rng(0)
    space, limit = refs[0].action_space, refs[0].spec.max_episode_steps
    counts = {"terminated": 0, "truncated": 0}
    for _ in range(steps):
        for ref in refs:
            if rng.random() < 0.2:
                ref.unwrapped.state = rng.uniform(*WIDE_STATES[env_id])
            if rng.random() < 0.05:
                ref.set_wrapper_attr("_elapsed_steps", limit - 1)
        ours.state.copy_(torch.as_tensor(np.stack([np.asarray(ref.unwrapped.state) for ref in refs])))
        ours.elapsed.copy_(torch.tensor([ref.get_wrapper_attr("_elapsed_steps") for ref in refs]))
        if isinstance(space, gym.spaces.Discrete):
            actions = rng.integers(space.n, size=n)
        else:  # beyond the bounds too: both must clip the same way
            actions = rng.uniform(1.5 * space.low, 1.5 * space.high, size=(n, *space.shape)).astype(np.float32)

        _, reward, terminated, truncated, infos = ours.step(torch.as_tensor(actions))
        expected = [ref.step(action) for ref, action in zip(refs, actions, strict=True)]
        for ref, (*_, ref_terminated, ref_truncated, _) in zip(refs, expected, strict=True):
            if ref_terminated or ref_truncated:
                ref.reset(seed=int(rng.integers(1 << 30)))

        torch.testing.assert_close(infos["final_obs"], torch.as_tensor(np.stack([e[0] for e in expected])),
                                   rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(reward, torch.tensor([float(e[1]) for e in expected]), rtol=1e-5, atol=1e-4)
        assert terminated.tolist() == [bool(e[2]) for e in expected]
        assert truncated.tolist() == [bool(e[3]) for e in expected]
        counts["terminated"] += int(terminated.sum())
        counts["truncated"] += int(truncated.sum())
    if env_id != "Pendulum-v1":  # Pendulum never terminates
        assert counts["terminated"] > 20, counts
    assert counts["truncated"] > 20, counts


@pytest.mark.parametrize("env_id", list(TORCH_ENVS))
def test_resets_within_gymnasium_bounds_and_seeded(env_id):
    ours = make_env(env_id, 4096, seed=0, backend="torch")
    low, high = (torch.tensor(b, dtype=torch.float32) for b in RESET_BOUNDS[env_id])
    obs, _ = ours.reset(seed=3)
    assert ((ours.state >= low) & (ours.state <= high)).all()
    assert (ours.state.std(0) > 0.2 * (high - low) / 12**0.5).sum() == (high > low).sum()  # spread, not a point
    assert obs.shape == (4096, *gym.make(env_id).observation_space.shape) and obs.dtype == torch.float32
    again, _ = make_env(env_id, 4096, seed=0, backend="torch").reset(seed=3)
    other, _ = ours.reset(seed=4)
    assert torch.equal(obs, again) and not torch.equal(obs, other)


def test_autoreset_happens_on_device_and_reports_the_final_observation():
    envs = make_env("CartPole-v1", 3, seed=0, backend="torch")
    envs.reset(seed=0)
    envs.state[1] = torch.tensor([2.39, 5.0, 0.0, 0.0])  # about to leave the track
    obs, _, terminated, _, infos = envs.step(torch.ones(3, dtype=torch.long))
    assert terminated.tolist() == [False, True, False]
    assert infos["final_obs"][1, 0] > 2.4 and obs[1].abs().max() <= 0.05  # reached, then reset
    assert infos["_episode"].tolist() == [False, True, False] and infos["episode"]["l"][1] == 1
    assert envs.elapsed.tolist() == [1, 0, 1]


# What gymnasium's docs name each observation entry; the velocities are the ones a masked env leaves out.
POSITIONS = {
    "CartPole-v1": ["cart position", "pole angle"],  # of cart position, cart velocity, pole angle, pole velocity
    "Pendulum-v1": ["cos theta", "sin theta"],  # of cos, sin, angular velocity
    "Acrobot-v1": ["cos t1", "sin t1", "cos t2", "sin t2"],  # of those and the two angular velocities
    "MountainCar-v0": ["position"],  # of position, velocity
    "MountainCarContinuous-v0": ["position"],
}


@pytest.mark.parametrize("env_id", list(TORCH_ENVS))
def test_mask_velocity_observes_the_full_envs_positions_and_nothing_else(env_id):
    full = make_env(env_id, 64, seed=3, backend="torch")
    masked = make_env(env_id, 64, seed=3, backend="torch", mask_velocity=True)
    low, high = full.single_observation_space.low, full.single_observation_space.high
    keep = [i for i in range(len(low)) if i not in full.velocities]
    assert masked.single_observation_space.shape == (len(POSITIONS[env_id]),)
    np.testing.assert_array_equal(masked.single_observation_space.low, low[keep])
    np.testing.assert_array_equal(masked.single_observation_space.high, high[keep])
    obs_full, obs_masked = full.reset(seed=3)[0], masked.reset(seed=3)[0]
    full.action_space.seed(0)
    ends = 0
    for _ in range(full.max_episode_steps + 1):  # through episode ends (at the latest the time limit) and resets
        action = torch.as_tensor(full.action_space.sample())
        torch.testing.assert_close(obs_masked, obs_full[:, keep], rtol=0, atol=0)
        obs_full, reward_full, term_full, trunc_full, info_full = full.step(action)
        obs_masked, reward_masked, term_masked, trunc_masked, info_masked = masked.step(action)
        torch.testing.assert_close(masked.state, full.state, rtol=0, atol=0)  # the dynamics are unchanged
        torch.testing.assert_close(info_masked["final_obs"], info_full["final_obs"][:, keep], rtol=0, atol=0)
        assert torch.equal(reward_masked, reward_full) and torch.equal(term_masked, term_full)
        assert torch.equal(trunc_masked, trunc_full)
        ends += int((term_full | trunc_full).sum())
    assert ends > 0


def test_mask_velocity_needs_the_device_envs():
    with pytest.raises(UserError, match="--env-backend torch"):
        make_env("CartPole-v1", 2, seed=0, mask_velocity=True)


def test_torch_backend_rejects_envs_it_does_not_have():
    with pytest.raises(UserError, match="HalfCheetah-v5.*CartPole-v1"):
        make_env("HalfCheetah-v5", 2, seed=0, backend="torch")


# --- the algorithms on torch envs -------------------------------------------------------------------------


# 80k steps: at 60k the bfloat16 run's last 20 episodes averaged 194.7 on one CPU and over 195 on another (the
# rounding of bfloat16 matmuls differs across CPUs); at 80k, 246 (bf16) and 243 (float32) on the first.
@pytest.mark.parametrize("flags", [[], ["--bf16"]])
def test_ppo_learns_cartpole_on_torch_envs_in_one_function_per_iteration(tmp_path, flags):
    result = run_script("ppo_device_envs", "--total-timesteps", "80000", *flags,
                        "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = glob.glob(str(tmp_path / "CartPole-v1__ppo_device_envs__1__*"))
    returns = metric(run_dir, "episodic_return")
    assert np.mean(returns[-20:]) >= 195, returns[-20:]


@pytest.mark.parametrize("script, flags", [
    ("dqn", ["--total-timesteps", "1500", "--learning-starts", "500", "--train-frequency", "1"]),
    ("td3", ["--env-id", "Pendulum-v1", "--total-timesteps", "450", "--learning-starts", "300"]),
    ("sac", ["--env-id", "Pendulum-v1", "--total-timesteps", "450", "--learning-starts", "300"]),
])
def test_off_policy_scripts_run_on_torch_envs(tmp_path, script, flags):
    result = run_script(script, "--env-backend", "torch", *flags, "--log-every", "10", "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = glob.glob(str(tmp_path / f"*__{script}__1__*"))
    returns = metric(run_dir, "episodic_return")
    assert len(returns) >= 2 and all(np.isfinite(returns))
    assert len(metric(run_dir, "td_loss" if script == "dqn" else "qf_loss")) >= 10
