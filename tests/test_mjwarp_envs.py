"""The MuJoCo Warp envs (common/mjwarp_envs.py) against gymnasium's own v5 envs, on warp's CPU backend.

The comparisons put gymnasium's env at the warp env's state before every step (float32 values, exact in
float64), so each step is compared from the same state: float32 physics against MuJoCo C's float64 over one
step, not a trajectory's chaotic growth of their difference. Measured (300 steps, 2 worlds, random actions):
HalfCheetah-v5 observations within 1.1e-4 relative, Humanoid-v5 within 2.6e-4, rewards within 1.2e-5;
terminations identical.
"""

import sys

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco_warp")
import gymnasium as gym  # noqa: E402
import mujoco  # noqa: E402

from tests.helpers import assert_user_error, run_script  # noqa: E402
from turborl.cli import UserError  # noqa: E402
from turborl.mjwarp_envs import make_mjwarp_env  # noqa: E402


def relative(ours: torch.Tensor, theirs) -> float:
    theirs = np.asarray(theirs, dtype=np.float64)
    return float(np.max(np.abs(ours.double().numpy() - theirs) / (1 + np.abs(theirs))))


def gymnasium_at(env_id: str, solver: int, state: torch.Tensor, nq: int):
    """gymnasium's env (same solver) put at `state`, as the warp env's worlds are."""
    ref = gym.make(env_id).unwrapped
    ref.model.opt.solver = solver
    ref.reset(seed=0)
    values = state.double().numpy()
    ref.set_state(values[:nq], values[nq:])
    return ref


@pytest.mark.parametrize("env_id, steps, obs_tol", [("HalfCheetah-v5", 120, 1e-3), ("Humanoid-v5", 120, 2e-3)])
def test_each_step_agrees_with_gymnasium(env_id, steps, obs_tol):
    envs = make_mjwarp_env(env_id, 2, "cpu", seed=3)
    envs.reset(seed=3)
    ref = gymnasium_at(env_id, envs.gym_env.model.opt.solver, envs.state[0], envs.nq)
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(steps):
        state = envs.state[0].clone()
        envs.set_state(envs.state.clone())  # both envs at the same state, after a forward pass
        values = state.double().numpy()
        ref.set_state(values[:envs.nq], values[envs.nq:])
        action = (rng.uniform(-1, 1, (2, *ref.action_space.shape)) * ref.action_space.high).astype(np.float32)
        obs, reward, terminated, truncated, infos = envs.step(torch.from_numpy(action))
        ref_obs, ref_reward, ref_terminated, _, ref_info = ref.step(action[0].astype(np.float64))
        assert relative(infos["final_obs"][0], ref_obs) < obs_tol
        assert relative(reward[0], ref_reward) < 1e-4
        assert bool(terminated[0]) == ref_terminated and not truncated[0]
        for term in ("reward_forward", "reward_ctrl", "reward_contact", "reward_survive", "x_velocity"):
            if term in ref_info:
                assert relative(infos[term][0], ref_info[term]) < 1e-3, term
        if ref_terminated:  # autoreset: the next episode's first observation, as gymnasium's reset makes it
            ended += 1
            values = envs.state[0].double().numpy()
            ref.set_state(values[:envs.nq], values[envs.nq:])
            # Measured open difference: at a new episode's first forward pass MuJoCo Warp reports no force for a
            # contact between two of Humanoid's bodies that MuJoCo C reports (12 entries of cfrc_ext, equal and
            # opposite); the steps after agree. Everything before cfrc_ext in the observation is compared.
            forces = 78 if env_id == "Humanoid-v5" else 0
            assert relative(obs[0, :obs.shape[1] - forces], ref._get_obs()[:obs.shape[1] - forces]) < 1e-4
            assert infos["_final_obs"][0] and infos["episode"]["l"][0] > 0
    assert env_id == "HalfCheetah-v5" or ended > 0  # a random Humanoid falls within ~20 steps


def test_ant_agrees_with_gymnasium_until_its_legs_touch_the_floor():
    # Ant-v5 agrees before its first ground contact; from that contact on, MuJoCo Warp's and MuJoCo C's steps
    # differ by up to ~65% in the velocities (p90 16%), from its pyramidal friction cones (next test).
    envs = make_mjwarp_env("Ant-v5", 3, "cpu", seed=0)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    refs = [gymnasium_at("Ant-v5", envs.gym_env.model.opt.solver, envs.state[i], envs.nq) for i in range(3)]
    touched, compared = [False] * 3, 0
    for _ in range(3):  # it falls from its initial height onto its legs
        action = rng.uniform(-1, 1, (3, 8)).astype(np.float32)
        obs, reward, terminated, _, infos = envs.step(torch.from_numpy(action))
        for i, ref in enumerate(refs):
            ref_obs, ref_reward, ref_terminated, _, ref_info = ref.step(action[i].astype(np.float64))
            touched[i] = touched[i] or ref.data.ncon > 0
            if not touched[i]:
                compared += 1
                assert relative(obs[i], ref_obs) < 1e-4 and relative(reward[i], ref_reward) < 1e-5
                assert relative(infos["reward_ctrl"][i], ref_info["reward_ctrl"]) < 1e-6
                assert not terminated[i] and not ref_terminated
    assert compared >= 3
    assert obs.shape == (3, 105) and envs.single_observation_space.shape == (105,)


def test_ant_agrees_with_gymnasium_on_elliptic_friction_cones(monkeypatch):
    # Locates Ant's difference: its XML's pyramidal friction cones. MuJoCo Warp gives some leg-floor contacts
    # another tangent frame than MuJoCo C (same normal; e.g. tangent (0, 1, 0) where C takes (-0.05, 1.0, 0)),
    # and a pyramid's edges turn with the frame while an elliptic cone is the same in any. With elliptic cones
    # in both engines (or frictionless contacts) every step agrees (150 steps: 1.6e-5 relative at most).
    make = gym.make

    def make_elliptic(env_id, **kwargs):
        env = make(env_id, **kwargs)
        env.unwrapped.model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
        return env

    monkeypatch.setattr(gym, "make", make_elliptic)
    envs = make_mjwarp_env("Ant-v5", 1, "cpu", seed=0)
    envs.reset(seed=0)
    ref = gymnasium_at("Ant-v5", envs.gym_env.model.opt.solver, envs.state[0], envs.nq)
    rng = np.random.default_rng(1)
    touched = 0
    for _ in range(60):
        envs.set_state(envs.state.clone())
        values = envs.state[0].double().numpy()
        ref.set_state(values[:envs.nq], values[envs.nq:])
        action = rng.uniform(-1, 1, (1, 8)).astype(np.float32)
        _, reward, terminated, _, infos = envs.step(torch.from_numpy(action))
        ref_obs, ref_reward, ref_terminated, _, _ = ref.step(action[0].astype(np.float64))
        touched += ref.data.ncon > 0
        assert relative(infos["final_obs"][0, :27], ref_obs[:27]) < 1e-3  # qpos and qvel
        assert relative(reward[0], ref_reward) < 1e-3 and bool(terminated[0]) == ref_terminated
    assert touched >= 5  # steps that end in contact (measured: 10)


def test_reset_noise_and_time_limit():
    envs = make_mjwarp_env("HalfCheetah-v5", 512, "cpu", seed=1)
    obs, _ = envs.reset(seed=1)
    init_qpos = torch.tensor(envs.gym_env.init_qpos, dtype=torch.float32)
    qpos_noise, qvel_noise = envs.state[:, :envs.nq] - init_qpos, envs.state[:, envs.nq:]
    assert qpos_noise.abs().max() <= 0.1 and qpos_noise.abs().max() > 0.09  # uniform(-0.1, 0.1)
    assert abs(qvel_noise.std().item() - 0.1) < 0.005 and abs(qvel_noise.mean().item()) < 0.005  # 0.1 x normal
    torch.testing.assert_close(obs, envs.state[:, 1:])
    envs.elapsed.fill_(999)  # state-style access: the next step is the 1000th
    _, _, terminated, truncated, infos = envs.step(torch.zeros(512, 6))
    assert truncated.all() and not terminated.any() and (infos["episode"]["l"] == 1000).all()
    assert (envs.elapsed == 0).all()

    humanoid = make_mjwarp_env("Humanoid-v5", 256, "cpu", seed=1)
    humanoid.reset(seed=1)
    qvel = humanoid.state[:, humanoid.nq:]
    assert qvel.abs().max() <= 0.01 and qvel.abs().max() > 0.0099  # uniform(-0.01, 0.01)


def test_bad_env_id_and_missing_extra(monkeypatch):
    with pytest.raises(UserError, match="has HalfCheetah-v5, Ant-v5, Humanoid-v5, not Hopper-v5"):
        make_mjwarp_env("Hopper-v5", 2, "cpu", seed=0)
    monkeypatch.setitem(sys.modules, "mujoco_warp", None)  # what an install without the extra sees
    with pytest.raises(UserError, match=r'pip install -e "\.\[mjwarp\]"'):
        make_mjwarp_env("Ant-v5", 2, "cpu", seed=0)


@pytest.mark.parametrize("script, flags, words", [
    ("ppo_device_envs", ("--env-id", "Hopper-v5"), ("mjwarp has HalfCheetah-v5, Ant-v5, Humanoid-v5",)),
    ("ppo_device_envs", ("--env-id", "Ant-v5", "--mask-velocity"), ("--env-backend torch",)),
    ("ppo", ("--env-id", "Ant-v5"), ("algos/ppo_device_envs.py",)),
    ("ppo_lstm_device_envs", ("--env-id", "Ant-v5"), ("MuJoCo Warp: not yet",)),
    ("ppo_lstm", ("--env-id", "Ant-v5"), ("algos/ppo_lstm_device_envs.py",)),
    ("td3_device_envs", ("--env-id", "Hopper-v5"), ("mjwarp has HalfCheetah-v5, Ant-v5, Humanoid-v5",)),
])
def test_scripts_name_what_the_mjwarp_backend_has(tmp_path, script, flags, words):
    result = run_script(script, "--env-backend", "mjwarp", *flags, "--runs-dir", str(tmp_path))
    assert_user_error(result, *words)
    assert not list(tmp_path.iterdir())  # no run folder for a run that never started


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_off_policy_scripts_train_on_mjwarp_envs(tmp_path, algo):
    result = run_script(algo, "--env-backend", "mjwarp", "--env-id", "Humanoid-v5", "--num-envs", "4",
                        "--total-timesteps", "400", "--learning-starts", "200", "--log-every", "1",
                        "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    [run_dir] = tmp_path.iterdir()
    names = {row.split(",")[2] for row in (run_dir / "metrics.csv").read_text().splitlines()[1:]}
    assert "episodic_return" in names and any(name.endswith("loss") for name in names), names
