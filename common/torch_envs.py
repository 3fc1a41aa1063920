"""Classic-control environments in torch, vectorized over `num_envs` on any device.

Dynamics, rewards, termination, time limits, spaces and reset distributions are gymnasium's (the formulas and
constants of gymnasium/envs/classic_control, checked step for step against it by tests/test_torch_envs.py).
Everything stays on the device: actions in, observations/rewards/flags out as tensors, and episodes that end
are reset on the device in the same step (gymnasium's SAME_STEP autoreset: `infos["final_obs"]` holds the
observation an ended episode reached). No step reads a value back to the host, so a whole rollout can be
captured in one CUDA graph.
"""

from __future__ import annotations

import math

import gymnasium as gym
import torch


class TorchVectorEnv(gym.vector.VectorEnv):
    """Base: subclasses define `state_dim`, `initial_state(n)`, `observe(state)` and `dynamics(state, action)`.

    `state` (num_envs x state_dim) is the raw physical state in gymnasium's `unwrapped.state` layout, and
    `elapsed` (num_envs) the steps of the current episodes; both can be read and written from outside.
    `mask_velocity=True` leaves the observation's `velocities` entries out (a partially observed task: a policy
    must infer them from past observations); the dynamics are unchanged.
    `infos` holds `final_obs`/`_final_obs` and, for ended episodes, `episode` {"r", "l"} / `_episode`
    (RecordEpisodeStatistics' layout), all device tensors.
    """

    state_dim: int
    velocities: tuple[int, ...]
    """entries of the observation that are velocities"""

    def __init__(self, env_id: str, num_envs: int, device: torch.device | str = "cpu", seed: int | None = None,
                 dtype: torch.dtype = torch.float32, mask_velocity: bool = False):
        probe = gym.make(env_id)
        self.single_observation_space, self.single_action_space = probe.observation_space, probe.action_space
        self.observed = None  # every entry
        if mask_velocity:
            space = probe.observation_space
            keep = [i for i in range(space.shape[0]) if i not in self.velocities]
            self.single_observation_space = gym.spaces.Box(space.low[keep], space.high[keep], dtype=space.dtype)
            # A device tensor: indexing with a list would copy it to the device on every step (and in a capture).
            self.observed = torch.tensor(keep, device=device)
        self.max_episode_steps = probe.spec.max_episode_steps
        probe.close()
        self.num_envs, self.device, self.dtype = num_envs, torch.device(device), dtype
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        # Counter-based random numbers: no generator state, so a captured graph draws new numbers on every replay
        # (a torch.Generator would have to be registered with the graph) and a seed gives the same on any device.
        self.seed_key = torch.tensor(_signed(seed if seed is not None else torch.seed()), device=self.device)
        self.draws = torch.zeros((), dtype=torch.long, device=self.device)
        # A tensor, not a Python int: torch.compile would fold arange(n) * int into an index expression that
        # overflows int64.
        self.position_key = torch.tensor(_signed(0xBF58476D1CE4E5B9), device=self.device)
        self.state = self.initial_state(num_envs)
        self.elapsed = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.episode_return = torch.zeros(num_envs, dtype=dtype, device=self.device)

    def uniform(self, low, high, shape) -> torch.Tensor:
        """Uniform in [low, high): splitmix64 of (seed, draw number, position), 24 bits per number."""
        n = math.prod(shape)
        z = self.seed_key * _signed(0xD1B54A32D192ED03) + self.draws * _signed(0x9E3779B97F4A7C15)
        z = z + torch.arange(n, device=self.device) * self.position_key
        z = (z ^ _shift_right(z, 30)) * _signed(0xBF58476D1CE4E5B9)
        z = (z ^ _shift_right(z, 27)) * _signed(0x94D049BB133111EB)
        z = z ^ _shift_right(z, 31)
        self.draws.add_(1)
        u = (_shift_right(z, 40).to(self.dtype) * 2.0**-24).view(shape)
        return low + (high - low) * u

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.seed_key.fill_(_signed(seed))
            self.draws.zero_()
        self.state.copy_(self.initial_state(self.num_envs))
        self.elapsed.zero_()
        self.episode_return.zero_()
        return self.observation(self.state), {}

    def step(self, actions):
        actions = torch.as_tensor(actions, device=self.device)
        next_state, reward, terminated = self.dynamics(self.state, actions)
        reward = reward.to(self.dtype)
        self.elapsed.add_(1)
        truncated = self.elapsed >= self.max_episode_steps  # gymnasium's TimeLimit: even when also terminated
        done = terminated | truncated
        final_obs = self.observation(next_state)
        self.episode_return.add_(reward)
        infos = {"final_obs": final_obs, "_final_obs": done, "_episode": done,
                 "episode": {"r": self.episode_return.clone(), "l": self.elapsed.clone()}}
        # Same-step autoreset on the device: fresh states are drawn for every env, kept where an episode ended.
        self.state.copy_(torch.where(done.unsqueeze(1), self.initial_state(self.num_envs), next_state))
        self.elapsed.masked_fill_(done, 0)
        self.episode_return.masked_fill_(done, 0)
        return self.observation(self.state), reward, terminated, truncated, infos

    def observation(self, state: torch.Tensor) -> torch.Tensor:
        obs = self.observe(state)
        return obs if self.observed is None else obs.index_select(1, self.observed)

    def initial_state(self, n: int) -> torch.Tensor:
        raise NotImplementedError

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def dynamics(self, state: torch.Tensor, action: torch.Tensor):
        raise NotImplementedError


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 that holds it."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical (unsigned) right shift of int64 (torch's >> is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


class CartPole(TorchVectorEnv):
    state_dim, velocities = 4, (1, 3)
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass, polemass_length = masspole + masscart, masspole * length
    theta_threshold, x_threshold = 12 * 2 * math.pi / 360, 2.4

    def initial_state(self, n):
        return self.uniform(-0.05, 0.05, (n, 4))

    def observe(self, state):
        return state.to(torch.float32, copy=True)  # never a view of the state, which steps in place

    def dynamics(self, state, action):
        x, x_dot, theta, theta_dot = state.unbind(1)
        force = torch.where(action == 1, self.force_mag, -self.force_mag).to(state.dtype)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + self.polemass_length * theta_dot.square() * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta.square() / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * xacc  # euler, as gymnasium's default
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold)
        return torch.stack([x, x_dot, theta, theta_dot], 1), torch.ones_like(x), terminated


class Pendulum(TorchVectorEnv):
    state_dim, velocities = 2, (2,)
    max_speed, max_torque, dt, g, m, l = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0  # noqa: E741

    def initial_state(self, n):
        # Made on the device from scalar kernel arguments: a tensor built from Python numbers (or one element set
        # to a number) is a host copy, which a CUDA graph capture refuses; this runs in the captured step.
        high = torch.where(torch.arange(2, device=self.device) == 0, math.pi, 1.0).to(self.dtype)
        return self.uniform(-high, high, (n, 2))

    def observe(self, state):
        th, thdot = state.unbind(1)
        return torch.stack([torch.cos(th), torch.sin(th), thdot], 1).float()

    def dynamics(self, state, action):
        th, thdot = state.unbind(1)
        u = action[:, 0].to(state.dtype).clamp(-self.max_torque, self.max_torque)
        angle = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
        costs = angle.square() + 0.1 * thdot.square() + 0.001 * u.square()
        newthdot = thdot + (3 * self.g / (2 * self.l) * torch.sin(th) + 3.0 / (self.m * self.l**2) * u) * self.dt
        newthdot = newthdot.clamp(-self.max_speed, self.max_speed)
        return torch.stack([th + newthdot * self.dt, newthdot], 1), -costs, torch.zeros_like(th, dtype=torch.bool)


class Acrobot(TorchVectorEnv):
    state_dim, velocities = 4, (4, 5)
    dt, l1, m1, m2, lc1, lc2, moi, g = 0.2, 1.0, 1.0, 1.0, 0.5, 0.5, 1.0, 9.8
    max_vel_1, max_vel_2 = 4 * math.pi, 9 * math.pi

    def initial_state(self, n):
        return self.uniform(-0.1, 0.1, (n, 4)).float().to(self.dtype)  # gymnasium draws float32 here

    def observe(self, state):
        t1, t2, dt1, dt2 = state.unbind(1)
        return torch.stack([torch.cos(t1), torch.sin(t1), torch.cos(t2), torch.sin(t2), dt1, dt2], 1).float()

    def derivatives(self, s, torque):
        """gymnasium's _dsdt ("book" dynamics)."""
        m1, m2, l1, lc1, lc2, i1, i2, g = self.m1, self.m2, self.l1, self.lc1, self.lc2, self.moi, self.moi, self.g
        theta1, theta2, dtheta1, dtheta2 = s.unbind(1)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta2)) + i1 + i2
        d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta2)) + i2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (-m2 * l1 * lc2 * dtheta2**2 * torch.sin(theta2)
                - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * torch.sin(theta2)
                + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2) + phi2)
        ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * torch.sin(theta2) - phi2) / (
            m2 * lc2**2 + i2 - d2**2 / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack([dtheta1, dtheta2, ddtheta1, ddtheta2], 1)

    def dynamics(self, state, action):
        torque = (action.to(state.dtype) - 1.0)  # AVAIL_TORQUE = [-1, 0, 1]
        dt = self.dt  # one RK4 step over [0, dt], as gymnasium's rk4
        k1 = self.derivatives(state, torque)
        k2 = self.derivatives(state + dt / 2 * k1, torque)
        k3 = self.derivatives(state + dt / 2 * k2, torque)
        k4 = self.derivatives(state + dt * k3, torque)
        ns = state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        t1, t2 = wrap(ns[:, 0]), wrap(ns[:, 1])
        dt1, dt2 = ns[:, 2].clamp(-self.max_vel_1, self.max_vel_1), ns[:, 3].clamp(-self.max_vel_2, self.max_vel_2)
        terminated = -torch.cos(t1) - torch.cos(t2 + t1) > 1.0
        return torch.stack([t1, t2, dt1, dt2], 1), torch.where(terminated, 0.0, -1.0), terminated


def wrap(x: torch.Tensor) -> torch.Tensor:
    """gymnasium's wrap(x, -pi, pi); one RK4 step moves an angle by less than 2 pi, so two folds suffice."""
    for _ in range(2):
        x = torch.where(x > math.pi, x - 2 * math.pi, torch.where(x < -math.pi, x + 2 * math.pi, x))
    return x


class MountainCar(TorchVectorEnv):
    state_dim, velocities = 2, (1,)
    min_position, max_position, max_speed, goal_position, force, gravity = -1.2, 0.6, 0.07, 0.5, 0.001, 0.0025

    def initial_state(self, n):
        return torch.stack([self.uniform(-0.6, -0.4, (n,)), torch.zeros(n, device=self.device, dtype=self.dtype)], 1)

    def observe(self, state):
        return state.to(torch.float32, copy=True)  # never a view of the state, which steps in place

    def accelerate(self, position, velocity, action):
        return velocity + (action.to(velocity.dtype) - 1) * self.force + torch.cos(3 * position) * (-self.gravity)

    def dynamics(self, state, action):
        position, velocity = state.unbind(1)
        velocity = self.accelerate(position, velocity, action).clamp(-self.max_speed, self.max_speed)
        position = (position + velocity).clamp(self.min_position, self.max_position)
        velocity = torch.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.goal_position) & (velocity >= 0)
        return torch.stack([position, velocity], 1), self.reward(action, terminated), terminated

    def reward(self, action, terminated):
        return torch.full(terminated.shape, -1.0, device=self.device)


class MountainCarContinuous(MountainCar):
    goal_position, power = 0.45, 0.0015

    def accelerate(self, position, velocity, action):
        force = action[:, 0].to(velocity.dtype).clamp(-1.0, 1.0)
        return velocity + force * self.power - 0.0025 * torch.cos(3 * position)

    def dynamics(self, state, action):
        next_state, reward, terminated = super().dynamics(state, action)
        return next_state.float().to(self.dtype), reward, terminated  # gymnasium keeps this state in float32

    def reward(self, action, terminated):
        return torch.where(terminated, 100.0, 0.0) - action[:, 0].to(self.dtype).square() * 0.1


TORCH_ENVS = {"CartPole-v1": CartPole, "Pendulum-v1": Pendulum, "Acrobot-v1": Acrobot,
              "MountainCar-v0": MountainCar, "MountainCarContinuous-v0": MountainCarContinuous}
