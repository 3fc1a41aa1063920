"""TD3 (CleanRL's td3_continuous_action.py, same defaults) with four paths: eager, --compile, --cudagraphs, both.

Per env step the loop launches two hot functions and steps the CPU env while the GPU works:
`act_and_store` writes the last transition into the device replay ring and computes the next (noisy)
action, whose copy to the host is the only thing the CPU waits for; then `update` samples a batch on
device, updates the twin critics and, every `policy_frequency` steps, the actor and the target networks.
The delayed actor update is a second captured variant of `update` chosen by the host step count, so no
graph branches on a tensor.
"""

from __future__ import annotations

import copy
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
    learning_rate: float = 3e-4
    """Adam learning rate of actor and critics"""
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
    policy_noise: float = 0.2
    """scale of the target policy smoothing noise"""
    exploration_noise: float = 0.1
    """scale of the exploration noise"""
    learning_starts: int = 25_000
    """env steps of uniform random actions before learning starts"""
    policy_frequency: int = 2
    """env steps between actor (and target) updates"""
    noise_clip: float = 0.5
    """clip of the target policy smoothing noise"""


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim + action_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 1)

    def forward(self, x, a):
        x = F.relu(self.fc1(torch.cat([x, a], 1)))
        x = F.relu(self.fc2(x))
        return self.fc3(x).squeeze(1)


class Actor(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, low: np.ndarray, high: np.ndarray):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mu = nn.Linear(256, action_dim)
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return torch.tanh(self.fc_mu(x)) * self.action_scale + self.action_bias


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
    check(args.learning_rate > 0, f"--learning-rate must be positive (got {args.learning_rate})")
    check(args.log_every >= 1, f"--log-every must be >= 1 (got {args.log_every})")


def main(args: Args) -> dict:
    check_run_args(args)
    validate(args)
    device = pick_device(args.cuda)
    cudagraphs = resolve_cudagraphs(args.cudagraphs, device)
    seed_everything(args.seed)
    envs = make_env(args.env_id, args.num_envs, args.seed, action="continuous", algo="TD3",
                    capture_video=args.capture_video, video_dir=os.path.join(args.runs_dir, "videos"),
                    backend=args.env_backend, device=str(device))
    logger = RunLogger(args, "td3", args.total_timesteps, run_root=args.runs_dir)
    n_envs = args.num_envs
    obs_dim, action_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    low, high = envs.single_action_space.low, envs.single_action_space.high

    actor = Actor(obs_dim, action_dim, low, high).to(device)
    qf1, qf2 = QNetwork(obs_dim, action_dim).to(device), QNetwork(obs_dim, action_dim).to(device)
    target_actor, qf1_target, qf2_target = (copy.deepcopy(m).requires_grad_(False) for m in (actor, qf1, qf2))
    capturable = cudagraphs and not args.compile
    q_optimizer = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.learning_rate,
                                   capturable=capturable)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.learning_rate, capturable=capturable)
    online_params = [*actor.parameters(), *qf1.parameters(), *qf2.parameters()]
    target_params = [*target_actor.parameters(), *qf1_target.parameters(), *qf2_target.parameters()]
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

        noise = torch.randn(n_envs, action_dim, device=device) * actor.action_scale * args.exploration_noise
        with torch.no_grad():
            policy_action = actor(obs) + noise
        random_action = action_low + (action_high - action_low) * torch.rand(n_envs, action_dim, device=device)
        explore = env_steps < args.learning_starts  # uniform random actions before learning starts
        action = torch.where(explore, random_action, policy_action).clamp(action_low, action_high)
        last_obs.copy_(obs)
        last_action.copy_(action)
        return action

    def critic_loss():
        idx = (torch.rand(args.batch_size, device=device) * rb_size).long()
        obs, actions, next_obs = rb_obs[idx], rb_actions[idx], rb_next_obs[idx]
        with torch.no_grad():
            clipped_noise = (torch.randn_like(actions) * args.policy_noise).clamp(-args.noise_clip, args.noise_clip)
            next_actions = (target_actor(next_obs) + clipped_noise * target_actor.action_scale).clamp(
                action_low, action_high)
            min_next_q = torch.min(qf1_target(next_obs, next_actions), qf2_target(next_obs, next_actions))
            next_q = rb_rewards[idx] + (1 - rb_dones[idx]) * args.gamma * min_next_q
        qf1_values, qf2_values = qf1(obs, actions), qf2(obs, actions)
        qf_loss = F.mse_loss(qf1_values, next_q) + F.mse_loss(qf2_values, next_q)
        return qf_loss, obs, torch.stack([qf_loss, qf1_values.mean()]).detach()

    def actor_loss(obs):
        return -qf1(obs, actor(obs)).mean()

    # Compiled: the losses (forward and backward) and the optimizer steps, each graph-break free; the
    # backward calls stay outside compiled code (torch 2.11 fails on a compiled function with two backward
    # passes). The update that calls them is captured whole: still one graph replay per env step.
    critic_loss, actor_loss = compiled(critic_loss, args.compile), compiled(actor_loss, args.compile)
    q_step, actor_step = compiled(q_optimizer.step, args.compile), compiled(actor_optimizer.step, args.compile)

    # The latest losses, written in place by the update: it returns nothing, so a replay clones no outputs,
    # and the host reads them only when it logs. The actor's loss is logged once the actor has been updated.
    metric_names = ["qf_loss", "qf1_values", "actor_loss"]
    metrics = torch.zeros(len(metric_names), device=device)

    def update(update_actor: bool) -> None:
        q_optimizer.zero_grad()
        qf_loss, obs, critic_metrics = critic_loss()
        qf_loss.backward()
        q_step()
        metrics[:2].copy_(critic_metrics)
        if update_actor:  # a Python branch outside the graphs: two captured variants, chosen per env step
            actor_optimizer.zero_grad()
            loss = actor_loss(obs)
            loss.backward()
            actor_step()
            soft_update(target_params, online_params, args.tau)
            metrics[2].copy_(loss.detach())

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
        args, logger.dir, "td3", same=("env_id", "num_envs", "buffer_size", "total_timesteps"),
        modules={"actor": actor, "qf1": qf1, "qf2": qf2, "target_actor": target_actor, "qf1_target": qf1_target,
                 "qf2_target": qf2_target, "q_optimizer": q_optimizer, "actor_optimizer": actor_optimizer,
                 "episodes": episodes},
        tensors={"rb_ptr": rb_ptr, "rb_size": rb_size, "env_steps": env_steps, "last_obs": last_obs,
                 "last_action": last_action},
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
            checkpoints.save("td3.pt", envs, link, counters())
            export_policy(actor, obs_dim, os.path.join(logger.dir, "td3.pt2"))  # deterministic: no noise
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
