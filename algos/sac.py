"""SAC (CleanRL's sac_continuous_action.py, same defaults) with four paths: eager, --compile, --cudagraphs, both.

Per env step the loop launches two hot functions and steps the CPU env while the GPU works:
`act_and_store` writes the last transition into the device replay ring and samples the next action from
the policy, whose copy to the host is the only thing the CPU waits for; then `update` samples a batch on
device, updates the twin critics (one batched network) and their targets and, every `policy_frequency` steps,
`policy_frequency` actor and entropy-temperature (alpha) steps. Alpha and the target entropy are device
tensors. The delayed actor update is a second captured variant of `update` chosen by the host step count,
so no graph branches on a tensor.
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from common import (
    Checkpoints,
    DeviceLink,
    HostLink,
    RunArgs,
    RunLogger,
    accelerate,
    check,
    check_run_args,
    cli,
    compiled,
    export_policy,
    final_observations,
    floor_us,
    make_env,
    pick_device,
    resolve_cudagraphs,
    seed_everything,
    soft_update,
    track_episodes,
)


@dataclass
class Args(RunArgs):
    env_id: str = "HalfCheetah-v5"
    """gymnasium id of a continuous-action environment (MuJoCo tasks need the mujoco extra)"""
    seed: int = 1
    """seed of the run (torch, numpy, env)"""
    total_timesteps: int = 1_000_000
    """environment steps of the whole run"""
    num_envs: int = 1
    """parallel environments"""
    buffer_size: int = 1_000_000
    """replay memory size (transitions)"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """target smoothing coefficient"""
    batch_size: int = 256
    """batch size sampled from the replay memory"""
    learning_starts: int = 5_000
    """env steps of uniform random actions before learning starts"""
    policy_lr: float = 3e-4
    """Adam learning rate of the policy"""
    q_lr: float = 1e-3
    """Adam learning rate of the critics and of alpha"""
    policy_frequency: int = 2
    """env steps between policy updates (each time, policy-frequency policy steps: delayed, not fewer)"""
    alpha: float = 0.2
    """entropy temperature (its start value when autotuned)"""
    autotune: bool = True
    """tune alpha towards the target entropy -action_dim"""


LOG_STD_MAX, LOG_STD_MIN = 2.0, -5.0


class TwinSoftQNetwork(nn.Module):
    """CleanRL's two soft Q-networks as one: each layer's weights are stacked on a leading axis of size 2, so
    a layer of both critics is one batched matmul (half the kernels, and SAC's step is GPU-bound). Each critic
    is initialized as nn.Linear layers would be: uniform in +-1/sqrt(fan_in)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256, members: int = 2):
        super().__init__()
        sizes = [obs_dim + action_dim, hidden, hidden, 1]
        bounds = [n_in ** -0.5 for n_in in sizes[:-1]]
        self.weights = nn.ParameterList(nn.Parameter(torch.empty(members, n_in, n_out).uniform_(-b, b))
                                        for n_in, n_out, b in zip(sizes[:-1], sizes[1:], bounds, strict=True))
        self.biases = nn.ParameterList(nn.Parameter(torch.empty(members, 1, n_out).uniform_(-b, b))
                                       for n_out, b in zip(sizes[1:], bounds, strict=True))

    def forward(self, x, a, detach_params: bool = False):
        """Q-values, shape (2, batch). `detach_params`: gradients reach the inputs only (the actor's loss)."""
        x = torch.cat([x, a], 1).expand(len(self.weights[0]), -1, -1)
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            if detach_params:
                weight, bias = weight.detach(), bias.detach()
            x = torch.baddbmm(bias, x, weight)
            if i < len(self.weights) - 1:
                x = F.relu(x)
        return x.squeeze(2)


class Actor(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, low: np.ndarray, high: np.ndarray):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mean = nn.Linear(256, action_dim)
        self.fc_logstd = nn.Linear(256, action_dim)
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        log_std = torch.tanh(self.fc_logstd(x))
        return self.fc_mean(x), LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)

    def get_action(self, x):
        """(sampled action, its log-probability, deterministic action) of a tanh-squashed Gaussian.

        The Gaussian log-density is written out (no torch.distributions): no argument checks, no host syncs.
        """
        mean, log_std = self(x)
        eps = torch.randn_like(mean)
        y = torch.tanh(mean + log_std.exp() * eps)
        log_prob = -0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)
        log_prob = log_prob - torch.log(self.action_scale * (1 - y.pow(2)) + 1e-6)
        return (y * self.action_scale + self.action_bias, log_prob.sum(1),
                torch.tanh(mean) * self.action_scale + self.action_bias)


class MeanPolicy(nn.Module):
    """The exported policy: observation batch in, the squashed mean action out (no sampling)."""

    def __init__(self, actor: Actor):
        super().__init__()
        self.actor = actor

    def forward(self, obs):
        mean, _ = self.actor(obs)
        return torch.tanh(mean) * self.actor.action_scale + self.actor.action_bias


def validate(args: Args) -> None:
    check(args.total_timesteps > 0, f"--total-timesteps must be positive (got {args.total_timesteps})")
    check(args.buffer_size > 0, f"--buffer-size must be positive (got {args.buffer_size})")
    check(
        0 < args.batch_size <= args.buffer_size,
        f"--batch-size {args.batch_size} must be between 1 and --buffer-size {args.buffer_size}; "
        "lower it or raise --buffer-size",
    )
    check(args.learning_starts >= 1, f"--learning-starts must be >= 1 (got {args.learning_starts})")
    check(args.policy_frequency >= 1, f"--policy-frequency must be >= 1 (got {args.policy_frequency})")
    check(0 < args.tau <= 1, f"--tau must be in (0, 1] (got {args.tau})")
    check(args.policy_lr > 0 and args.q_lr > 0, "--policy-lr and --q-lr must be positive")
    check(args.alpha > 0, f"--alpha must be positive (got {args.alpha})")
    check(args.log_every >= 1, f"--log-every must be >= 1 (got {args.log_every})")


def main(args: Args) -> dict:
    check_run_args(args)
    validate(args)
    device = pick_device(args.cuda)
    cudagraphs = resolve_cudagraphs(args.cudagraphs, device)
    seed_everything(args.seed)
    envs = make_env(args.env_id, args.num_envs, args.seed, action="continuous", algo="SAC",
                    capture_video=args.capture_video, video_dir=os.path.join(args.runs_dir, "videos"),
                    backend=args.env_backend, device=str(device))
    logger = RunLogger(args, "sac", args.total_timesteps, run_root=args.runs_dir)
    n_envs = args.num_envs
    obs_dim, action_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    low, high = envs.single_action_space.low, envs.single_action_space.high

    actor = Actor(obs_dim, action_dim, low, high).to(device)
    qf = TwinSoftQNetwork(obs_dim, action_dim).to(device)
    qf_target = copy.deepcopy(qf).requires_grad_(False)
    capturable = cudagraphs and not args.compile
    q_optimizer = torch.optim.Adam(qf.parameters(), lr=args.q_lr, capturable=capturable)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.policy_lr, capturable=capturable)
    # Entropy temperature: a device tensor the graphs read; autotuned through log_alpha.
    target_entropy = torch.tensor(-float(action_dim), device=device)
    log_alpha = torch.tensor([math.log(args.alpha)], device=device,
                             requires_grad=args.autotune)
    alpha = log_alpha.detach().exp()
    a_optimizer = torch.optim.Adam([log_alpha], lr=args.q_lr, capturable=capturable) if args.autotune else None
    online_params, target_params = list(qf.parameters()), list(qf_target.parameters())
    action_low = torch.as_tensor(low, dtype=torch.float32, device=device)
    action_high = torch.as_tensor(high, dtype=torch.float32, device=device)

    # Replay ring buffer and counters: preallocated device tensors, updated in place by the graphs.
    capacity = args.buffer_size
    rb_obs = torch.zeros(capacity, obs_dim, device=device)
    rb_next_obs = torch.zeros(capacity, obs_dim, device=device)
    rb_actions = torch.zeros(capacity, action_dim, device=device)
    rb_rewards = torch.zeros(capacity, device=device)
    rb_dones = torch.zeros(capacity, device=device)
    rb_ptr = torch.zeros((), dtype=torch.long, device=device)
    rb_size = torch.zeros((), dtype=torch.long, device=device)
    env_steps = torch.zeros((), dtype=torch.long, device=device)
    last_obs = torch.zeros(n_envs, obs_dim, device=device)
    last_action = torch.zeros(n_envs, action_dim, device=device)
    env_index = torch.arange(n_envs, device=device)

    def act_and_store(step_in: torch.Tensor) -> torch.Tensor:
        valid, reward, terminated, _, reached_obs, obs = HostLink.unpack(step_in, obs_dim)
        valid = valid.long()  # 0 on the first call: nothing to store yet
        slots = (rb_ptr + env_index) % capacity
        rb_obs[slots] = last_obs
        rb_actions[slots] = last_action
        rb_rewards[slots] = reward
        rb_dones[slots] = terminated  # truncation is not termination: bootstrap through time limits
        rb_next_obs[slots] = reached_obs
        rb_ptr.copy_((rb_ptr + n_envs * valid) % capacity)
        rb_size.copy_(torch.clamp(rb_size + n_envs * valid, max=capacity))
        env_steps.add_(n_envs * valid)

        with torch.no_grad():
            policy_action = actor.get_action(obs)[0]
        random_action = action_low + (action_high - action_low) * torch.rand(n_envs, action_dim, device=device)
        explore = env_steps < args.learning_starts  # uniform random actions before learning starts
        action = torch.where(explore, random_action, policy_action)
        last_obs.copy_(obs)
        last_action.copy_(action)
        return action

    def critic_loss():
        idx = (torch.rand(args.batch_size, device=device) * rb_size).long()
        obs, actions, next_obs = rb_obs[idx], rb_actions[idx], rb_next_obs[idx]
        with torch.no_grad():
            next_actions, next_log_pi, _ = actor.get_action(next_obs)
            min_next_q = qf_target(next_obs, next_actions).min(0).values
            next_q = rb_rewards[idx] + (1 - rb_dones[idx]) * args.gamma * (min_next_q - alpha * next_log_pi)
        q_values = qf(obs, actions)
        qf_loss = (q_values - next_q).pow(2).mean(1).sum()  # each critic's MSE, summed (qf1_loss + qf2_loss)
        return qf_loss, obs, torch.stack([qf_loss, q_values[0].mean()]).detach()

    def actor_loss(obs):
        pi, log_pi, _ = actor.get_action(obs)
        # The critics' parameters get no gradient from the actor's loss (they are not stepped with it).
        return (alpha * log_pi - qf(obs, pi, detach_params=True).min(0).values).mean()

    def alpha_loss(obs):
        with torch.no_grad():
            log_pi = actor.get_action(obs)[1]
        return (-log_alpha.exp() * (log_pi + target_entropy)).mean()

    # Compiled: the losses (forward and backward) and the optimizer steps, each graph-break free; the
    # backward calls stay outside compiled code (torch 2.11 fails on a compiled function with two backward
    # passes). The update that calls them is captured whole: still one graph replay per env step.
    critic_loss, actor_loss, alpha_loss = (compiled(f, args.compile) for f in (critic_loss, actor_loss, alpha_loss))
    q_step, actor_step = compiled(q_optimizer.step, args.compile), compiled(actor_optimizer.step, args.compile)
    alpha_step = compiled(a_optimizer.step, args.compile) if args.autotune else None

    # The latest losses, written in place by the update: it returns nothing, so a replay clones no outputs,
    # and the host reads them only when it logs. The actor's entries are logged once it has been updated.
    metric_names = ["qf_loss", "qf1_values", "actor_loss", *(["alpha_loss"] if args.autotune else []), "alpha"]
    metrics = torch.zeros(len(metric_names), device=device)
    metrics[-1] = alpha.squeeze()

    def update(update_actor: bool) -> None:
        q_optimizer.zero_grad()
        qf_loss, obs, critic_metrics = critic_loss()
        qf_loss.backward()
        q_step()
        metrics[:2].copy_(critic_metrics)
        if update_actor:  # a Python branch outside the graphs: two captured variants, chosen per env step
            for _ in range(args.policy_frequency):  # delayed, not fewer: as many policy steps as env steps
                actor_optimizer.zero_grad()
                loss = actor_loss(obs)
                loss.backward()
                actor_step()
                metrics[2].copy_(loss.detach())
                if args.autotune:
                    a_optimizer.zero_grad()
                    loss = alpha_loss(obs)
                    loss.backward()
                    alpha_step()
                    alpha.copy_(log_alpha.detach().exp())
                    metrics[3].copy_(loss.detach())
                    metrics[-1].copy_(alpha.squeeze())
        soft_update(target_params, online_params, args.tau)

    def path(fn):
        return accelerate(fn, compile=False, cudagraphs=cudagraphs, device=device, compiled_inside=args.compile)

    link = (DeviceLink(n_envs, obs_dim, device) if args.env_backend == "torch"
            else HostLink(n_envs, obs_dim, (action_dim,), torch.float32, device))
    # Torch envs report episode endings on the device: gathered there, read by the host a step later.
    episodes = track_episodes(args.env_backend, n_envs, device)
    # One env step's device work is one call: the env's answer in, store and act, the action out.
    act_and_store = compiled(act_and_store, args.compile)
    act_step = path(lambda: link.push(act_and_store(link.pull())))
    update_critics = path(lambda: update(update_actor=False))
    update_all = path(lambda: update(update_actor=True))
    checkpoints = Checkpoints(
        args, logger.dir, "sac", same=("env_id", "num_envs", "buffer_size", "total_timesteps"),
        modules={"actor": actor, "qf": qf, "qf_target": qf_target,
                 "q_optimizer": q_optimizer, "actor_optimizer": actor_optimizer,
                 **({"a_optimizer": a_optimizer} if a_optimizer else {}), "episodes": episodes},
        tensors={"rb_ptr": rb_ptr, "rb_size": rb_size, "env_steps": env_steps, "last_obs": last_obs,
                 "last_action": last_action, "log_alpha": log_alpha, "alpha": alpha, "metrics": metrics},
        replay={"rb_obs": rb_obs, "rb_next_obs": rb_next_obs, "rb_actions": rb_actions, "rb_rewards": rb_rewards,
                "rb_dones": rb_dones}, replay_size=rb_size)
    start_iteration, global_step, updates = 0, 0, 0
    if args.resume:
        envs, saved = checkpoints.resume(envs, link)
        start_iteration, global_step, updates = saved["iteration"], saved["global_step"], saved["updates"]
    else:
        link.first(envs.reset(seed=args.seed)[0])

    def counters() -> dict:
        return {"iteration": next_iteration, "global_step": global_step, "updates": updates}

    actor_updated = updates >= args.policy_frequency  # one of any policy_frequency updates steps the actor
    steady_after = updates + 4 * args.policy_frequency  # both update variants compiled and captured

    num_iterations = -(-args.total_timesteps // n_envs)
    next_iteration, completed = start_iteration, False
    try:
        for iteration in range(start_iteration, num_iterations):
            act_step()
            link.ready()
            if global_step > args.learning_starts:
                # Launched before the env steps: the update runs on the GPU while the CPU simulates.
                actor_updated = actor_updated or iteration % args.policy_frequency == 0
                (update_all if iteration % args.policy_frequency == 0 else update_critics)()
                updates += 1
                if updates == steady_after:
                    logger.mark_steady(global_step)
                if updates % args.log_every == 0:
                    names = metric_names if actor_updated else metric_names[:2]  # the critics' until then
                    logger.log(global_step, **dict(zip(names, metrics.tolist()[: len(names)], strict=True)))

            next_obs, rewards, terminations, truncations, infos = envs.step(link.wait())
            global_step += n_envs
            link.put(rewards, terminations, truncations, final_observations(next_obs, infos), next_obs)
            logger.log_episodes(global_step, episodes.after_step(infos))
            logger.progress(global_step)
            next_iteration = iteration + 1
            if checkpoints.due(global_step, n_envs):
                checkpoints.save_periodic(envs, link, counters())
        logger.log_episodes(global_step, episodes.read())  # any held back
        completed = True
    finally:
        if args.save_model:
            checkpoints.save("sac.pt", envs, link, counters())
            export_policy(MeanPolicy(actor), obs_dim, os.path.join(logger.dir, "sac.pt2"))
        envs.close()
        extra = {}
        if completed and args.measure_floor and logger.steady_step is not None:
            updates_in_turn = [update_all] + [update_critics] * (args.policy_frequency - 1)
            extra["floor_us"] = floor_us(
                lambda i: (act_step(), updates_in_turn[i % args.policy_frequency]()), device)
        summary = logger.close(run_dir=logger.dir, updates=updates, **extra)
    return summary


if __name__ == "__main__":
    cli(main, Args)
