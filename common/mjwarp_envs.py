"""Gymnasium's v5 locomotion tasks on MuJoCo Warp, vectorized over `num_envs` worlds on the training device.

HalfCheetah-v5, Ant-v5 and Humanoid-v5 as gymnasium defines them: its XML assets, frame skip, reset noise,
observations, rewards (the reward terms in `infos`), terminations and time limits, the constants read from
gymnasium's own env. The physics is MuJoCo Warp's (float32); the rest is torch on the same device, so
observations never leave it. The interface is the device envs' (common/torch_envs.py): `state` (num_envs x
(nq + nv): qpos then qvel) can be read and written, SAME_STEP autoreset on the device, `infos` in the same
layout, counter-based reset noise, no value read back to the host: a whole rollout can be captured in one CUDA
graph, physics included (warp launches its kernels on torch's stream, inside torch's capture).

Where it differs from gymnasium's env (tests/test_mjwarp_envs.py measures it):
- float32 physics (MuJoCo's C engine computes in float64);
- Humanoid-v5's XML asks for the PGS solver, which MuJoCo Warp lacks: it runs the Newton solver;
- Ant-v5's contacts: MuJoCo Warp can give a leg's contact with the floor another tangent frame than MuJoCo C
  (same normal, tangents rotated about it), and Ant's pyramidal friction cones depend on that frame, so its
  steps differ from MuJoCo C's once a leg touches the floor (with elliptic cones, which do not, they agree);
- an episode's first observation comes from a forward pass of every world (worlds that did not reset keep the
  step's observation and dynamics: the next step recomputes what a forward pass does).
"""

from __future__ import annotations

import contextlib
import math

import gymnasium as gym
import mujoco
import torch

from .errors import UserError
from .torch_envs import TorchVectorEnv


def _import_warp():
    try:
        import mujoco_warp
        import warp
    except ImportError:
        raise UserError('--env-backend mjwarp needs MuJoCo Warp: pip install -e ".[mjwarp]"') from None
    warp.config.log_level = warp.LOG_WARNING  # no banner, no line per loaded kernel module
    warp.init()
    return warp, mujoco_warp


class MjWarpVectorEnv(TorchVectorEnv):
    """Base of the three tasks. Subclasses say what the observation holds (`observe`), which position the forward
    reward differentiates (`tracked_position`), and their reward and termination (`reward_terms`)."""

    def __init__(self, env_id: str, num_envs: int, device: torch.device | str = "cpu", seed: int | None = None):
        warp, self.mjw = _import_warp()
        self.spec_id = env_id
        self.warp = warp
        self.gym_env = gym.make(env_id).unwrapped  # the model, its constants and the reset state, as gymnasium's
        mj_model = self.gym_env.model
        if mj_model.opt.solver == mujoco.mjtSolver.mjSOL_PGS:  # Humanoid-v5; MuJoCo Warp has CG and Newton
            mj_model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
        self.nq, self.nv, self.frame_skip, self.dt = mj_model.nq, mj_model.nv, self.gym_env.frame_skip, self.gym_env.dt
        torch_device = torch.device(device)
        if torch_device.type == "cuda" and torch_device.index is None:  # warp needs the index
            torch_device = torch.device("cuda", torch.cuda.current_device())
        self.warp_device = warp.device_from_torch(torch_device)
        with warp.ScopedDevice(self.warp_device):
            self.model = self.mjw.put_model(mj_model)
            self.model.opt.run_rne_postconstraint = True  # cfrc_ext, as MuJoCo's C forward pass computes it
            self.data = self.mjw.make_data(mj_model, nworld=num_envs)
        # Torch views of the worlds' arrays, made once: reading or writing them is reading or writing the simulation.
        self.views = {name: warp.to_torch(getattr(self.data, name)) for name in (
            "qpos", "qvel", "ctrl", "qacc_warmstart", "xpos", "xipos", "cinert", "cvel", "cfrc_ext", "qfrc_actuator")}
        self.qpos, self.qvel, self.ctrl = self.views["qpos"], self.views["qvel"], self.views["ctrl"]
        self.body_mass = torch.tensor(mj_model.body_mass, dtype=torch.float32, device=torch_device)
        self.init_qpos = torch.tensor(self.gym_env.init_qpos, dtype=torch.float32, device=torch_device)
        self.init_qvel = torch.tensor(self.gym_env.init_qvel, dtype=torch.float32, device=torch_device)
        self.noise = self.gym_env._reset_noise_scale
        super().__init__(env_id, num_envs, device, seed)
        self.position = torch.zeros(num_envs, 2, device=torch_device)  # of `tracked_position`, before the step
        self.set_state(self.state)

    observes_derived = True
    """whether the observation or the tracked position reads quantities a forward pass derives (bodies' positions,
    forces): then a new episode's first observation needs one"""

    # Checkpoints pickle the envs: what the next steps depend on, without warp's objects (rebuilt on load).
    CARRIED = ("state", "elapsed", "episode_return", "seed_key", "draws", "position")

    def __getstate__(self) -> dict:
        carried = {name: getattr(self, name).cpu() for name in self.CARRIED}
        warmstart = self.views["qacc_warmstart"].cpu()  # the constraint solver's start: results depend on it
        return {"env_id": self.spec_id, "num_envs": self.num_envs, "device": str(self.device), **carried,
                "qacc_warmstart": warmstart}

    def __setstate__(self, saved: dict) -> None:
        type(self).__init__(self, saved["env_id"], saved["num_envs"], saved["device"])
        for name in self.CARRIED:
            getattr(self, name).copy_(saved[name])
        self.load(self.state)
        self.views["qacc_warmstart"].copy_(saved["qacc_warmstart"])

    def initial_state(self, n):
        qpos = self.init_qpos + self.uniform(-self.noise, self.noise, (n, self.nq))
        return torch.cat([qpos, self.init_qvel + self.noise * self.qvel_noise(n)], 1)

    def qvel_noise(self, n: int) -> torch.Tensor:
        """HalfCheetah and Ant: standard normal (Box-Muller on two uniform draws); Humanoid overrides it."""
        u1, u2 = self.uniform(0.0, 1.0, (n, self.nv)), self.uniform(0.0, 1.0, (n, self.nv))
        return torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2 * math.pi * u2)

    @contextlib.contextmanager
    def on_torch_stream(self):
        """Warp launches on torch's current stream; while torch captures a CUDA graph, warp is told so (external
        capture: it must not allocate or synchronize) and its kernels join the graph."""
        if self.warp_device.is_cpu:
            with self.warp.ScopedDevice(self.warp_device):
                yield
            return
        stream = self.warp.stream_from_torch(torch.cuda.current_stream(self.device))
        with self.warp.ScopedDevice(self.warp_device), self.warp.ScopedStream(stream, sync_enter=False):
            if torch.cuda.is_current_stream_capturing():
                with self.warp.ScopedCapture(stream=stream, external=True):
                    yield
            else:
                yield

    # Warp's launches are not torch ops: compiled code calls these two as they are.
    @torch.compiler.disable
    def simulate(self) -> None:
        """One env step of every world: `frame_skip` physics steps."""
        with self.on_torch_stream():
            for _ in range(self.frame_skip):
                self.mjw.step(self.model, self.data)

    @torch.compiler.disable
    def forward(self) -> None:
        """The quantities derived from every world's qpos and qvel (positions of bodies, forces), no step."""
        with self.on_torch_stream():
            self.mjw.forward(self.model, self.data)

    def load(self, state: torch.Tensor) -> None:
        self.qpos.copy_(state[:, :self.nq])
        self.qvel.copy_(state[:, self.nq:])

    def settle(self) -> torch.Tensor:
        """The worlds at `state` after a forward pass (what gymnasium's reset does): their observation, and the
        tracked position of those that start an episode."""
        self.load(self.state)
        self.forward()
        return self.observe(self.state)

    def dynamics(self, state, action):
        self.load(state)
        self.ctrl.copy_(action)
        self.simulate()
        next_state = torch.cat([self.qpos, self.qvel], 1)
        after = self.tracked_position(next_state)
        velocity = (after - self.position) / self.dt
        self.position.copy_(after)
        self.terms = self.reward_terms(next_state, action.to(torch.float32), velocity)
        self.x_velocity = velocity[:, 0]
        return next_state, sum(self.terms.values()), self.unhealthy(next_state)

    def set_state(self, state: torch.Tensor) -> torch.Tensor:
        """Put every world at `state` (qpos then qvel) as gymnasium's `set_state` does (a forward pass follows):
        the observations there. The episodes go on (their step counts and returns are kept)."""
        self.state.copy_(state)
        obs = self.settle()
        self.position.copy_(self.tracked_position(self.state))
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return self.set_state(self.state), {}

    def step(self, actions):
        next_obs, reward, terminated, truncated, infos = super().step(actions)
        # super() observed the new episodes' states before their forward pass: observe them after it, and start
        # their forward reward from where they now are.
        if not self.observes_derived:  # HalfCheetah: observation and position are the state's, no pass needed
            return next_obs, reward, terminated, truncated, {**infos, **self.terms, "x_velocity": self.x_velocity}
        done = (terminated | truncated).unsqueeze(1)
        next_obs = torch.where(done, self.settle(), next_obs)
        self.position.copy_(torch.where(done, self.tracked_position(self.state), self.position))
        infos.update(self.terms, x_velocity=self.x_velocity)
        return next_obs, reward, terminated, truncated, infos

    def tracked_position(self, state: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reward_terms(self, state, action, velocity) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def unhealthy(self, state: torch.Tensor) -> torch.Tensor:
        return torch.zeros(state.shape[0], dtype=torch.bool, device=state.device)


class HalfCheetah(MjWarpVectorEnv):
    observes_derived = False

    def observe(self, state):
        return state[:, 1:].clone()  # qpos without x, then qvel

    def tracked_position(self, state):
        return state[:, :2]  # x (and z, unused): gymnasium differentiates qpos[0]

    def reward_terms(self, state, action, velocity):
        env = self.gym_env
        return {"reward_forward": env._forward_reward_weight * velocity[:, 0],
                "reward_ctrl": -env._ctrl_cost_weight * action.square().sum(1)}


class Ant(MjWarpVectorEnv):
    def contact_forces(self) -> torch.Tensor:
        return self.views["cfrc_ext"].clamp(*self.gym_env._contact_force_range)

    def observe(self, state):
        return torch.cat([state[:, 2:], self.contact_forces()[:, 1:].flatten(1)], 1)

    def tracked_position(self, state):
        return self.views["xpos"][:, 1, :2]  # the torso's body position, as gymnasium's main_body

    def reward_terms(self, state, action, velocity):
        env = self.gym_env
        return {"reward_forward": env._forward_reward_weight * velocity[:, 0],
                "reward_ctrl": -env._ctrl_cost_weight * action.square().sum(1),
                "reward_contact": -env._contact_cost_weight * self.contact_forces().square().sum((1, 2)),
                "reward_survive": env._healthy_reward * (~self.unhealthy(state)).float()}

    def unhealthy(self, state):
        low, high = self.gym_env._healthy_z_range
        return ~(state.isfinite().all(1) & (state[:, 2] >= low) & (state[:, 2] <= high))


class Humanoid(MjWarpVectorEnv):
    def qvel_noise(self, n):
        return self.uniform(-1.0, 1.0, (n, self.nv))  # Humanoid's velocity noise is uniform

    def observe(self, state):
        derived = [self.views[name][:, 1:].flatten(1) for name in ("cinert", "cvel")]
        return torch.cat([state[:, 2:], *derived, self.views["qfrc_actuator"][:, 6:],
                          self.views["cfrc_ext"][:, 1:].flatten(1)], 1)

    def tracked_position(self, state):
        """The center of mass in x and y (gymnasium's mass_center)."""
        return (self.body_mass[:, None] * self.views["xipos"]).sum(1)[:, :2] / self.body_mass.sum()

    def reward_terms(self, state, action, velocity):
        env = self.gym_env
        contact = env._contact_cost_weight * self.views["cfrc_ext"].square().sum((1, 2))
        return {"reward_survive": env._healthy_reward * (~self.unhealthy(state)).float(),
                "reward_forward": env._forward_reward_weight * velocity[:, 0],
                "reward_ctrl": -env._ctrl_cost_weight * action.square().sum(1),
                "reward_contact": -contact.clamp(*env._contact_cost_range)}

    def unhealthy(self, state):
        low, high = self.gym_env._healthy_z_range
        return ~((state[:, 2] > low) & (state[:, 2] < high))


MJWARP_ENVS = {"HalfCheetah-v5": HalfCheetah, "Ant-v5": Ant, "Humanoid-v5": Humanoid}


def check_env_id(env_id: str) -> None:
    if env_id not in MJWARP_ENVS:
        raise UserError(f"--env-backend mjwarp has {', '.join(MJWARP_ENVS)}, not {env_id}")


def make_mjwarp_env(env_id: str, num_envs: int, device: str, seed: int) -> MjWarpVectorEnv:
    check_env_id(env_id)
    return MJWARP_ENVS[env_id](env_id, num_envs, device, seed)
