"""DQN (CleanRL's dqn.py, same defaults) with four execution paths: eager, --compile, --cudagraphs, both.

Two hot functions run per step: `act_and_store` writes the last transition into the device replay ring and
picks the next epsilon-greedy action (epsilon computed on device from a device step counter), and `update`
samples a batch on device and takes one Adam step. Nothing in the loop syncs with the GPU except waiting
for the action the CPU env needs.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass

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
    env_id: str = "CartPole-v1"
    """gymnasium id of a discrete-action environment"""
    seed: int = 1
    """seed of the run (torch, numpy, env)"""
    total_timesteps: int = 500_000
    """environment steps of the whole run"""
    learning_rate: float = 2.5e-4
    """Adam learning rate"""
    num_envs: int = 1
    """parallel environments"""
    buffer_size: int = 10_000
    """replay memory size (transitions)"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 1.0
    """target network update rate (1.0: hard copy)"""
    target_network_frequency: int = 500
    """env steps between target network updates"""
    batch_size: int = 128
    """batch size sampled from the replay memory"""
    start_e: float = 1.0
    """starting epsilon for exploration"""
    end_e: float = 0.05
    """final epsilon"""
    exploration_fraction: float = 0.5
    """fraction of total-timesteps over which epsilon decays from start-e to end-e"""
    learning_starts: int = 10_000
    """env steps before learning starts"""
    train_frequency: int = 10
    """env steps between updates"""


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            nn.Linear(obs_dim, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, n_actions)
        )

    def forward(self, x):
        return self.network(x)


class GreedyPolicy(nn.Module):
    """The exported policy: observation batch in, greedy action batch out."""

    def __init__(self, q_network: QNetwork):
        super().__init__()
        self.q_network = q_network

    def forward(self, obs):
        return self.q_network(obs).argmax(dim=-1)


def validate(args: Args) -> None:
    check(args.total_timesteps > 0, f"--total-timesteps must be positive (got {args.total_timesteps})")
    check(args.buffer_size > 0, f"--buffer-size must be positive (got {args.buffer_size})")
    check(
        0 < args.batch_size <= args.buffer_size,
        f"--batch-size {args.batch_size} must be between 1 and --buffer-size {args.buffer_size}; "
        "lower it or raise --buffer-size",
    )
    check(args.train_frequency >= 1, f"--train-frequency must be >= 1 (got {args.train_frequency})")
    check(args.target_network_frequency >= 1, "--target-network-frequency must be >= 1")
    check(args.learning_starts >= 1, f"--learning-starts must be >= 1 (got {args.learning_starts})")
    check(0 < args.exploration_fraction <= 1, "--exploration-fraction must be in (0, 1]")
    check(0 < args.tau <= 1, f"--tau must be in (0, 1] (got {args.tau})")
    check(args.learning_rate > 0, f"--learning-rate must be positive (got {args.learning_rate})")
    check(args.log_every >= 1, f"--log-every must be >= 1 (got {args.log_every})")


def main(args: Args) -> dict:
    check_run_args(args)
    validate(args)
    device = pick_device(args.cuda)
    cudagraphs = resolve_cudagraphs(args.cudagraphs, device)
    seed_everything(args.seed)
    envs = make_env(args.env_id, args.num_envs, args.seed, action="discrete", algo="DQN",
                    capture_video=args.capture_video, video_dir=os.path.join(args.runs_dir, "videos"),
                    backend=args.env_backend, device=str(device))
    logger = RunLogger(args, "dqn", args.total_timesteps, run_root=args.runs_dir)
    n_envs, obs_dim = args.num_envs, envs.single_observation_space.shape[0]
    n_actions = int(envs.single_action_space.n)

    q_network = QNetwork(obs_dim, n_actions).to(device)
    target_network = copy.deepcopy(q_network).requires_grad_(False)
    # capturable: Adam keeps its step count on the device, as a CUDA graph without compile needs.
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate,
                                 capturable=cudagraphs and not args.compile)

    # Replay ring buffer and schedule state: preallocated device tensors, updated in place by the graphs.
    capacity = args.buffer_size
    rb_obs = torch.zeros(capacity, obs_dim, device=device)
    rb_next_obs = torch.zeros(capacity, obs_dim, device=device)
    rb_actions = torch.zeros(capacity, dtype=torch.long, device=device)
    rb_rewards = torch.zeros(capacity, device=device)
    rb_dones = torch.zeros(capacity, device=device)
    rb_ptr = torch.zeros((), dtype=torch.long, device=device)
    rb_size = torch.zeros((), dtype=torch.long, device=device)
    env_steps = torch.zeros((), device=device)
    epsilon = torch.ones((), device=device)
    last_obs = torch.zeros(n_envs, obs_dim, device=device)
    last_action = torch.zeros(n_envs, dtype=torch.long, device=device)
    env_index = torch.arange(n_envs, device=device)
    decay_steps = args.exploration_fraction * args.total_timesteps

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

        epsilon.copy_(torch.clamp(args.start_e + (args.end_e - args.start_e) * env_steps / decay_steps,
                                  min=args.end_e))
        greedy = q_network(obs).argmax(dim=1)
        # One draw for both coins: compiled code may reorder independent random ops (torch 2.11 does), which
        # would make the paths disagree.
        explore_coin, action_coin = torch.rand(2, n_envs, device=device)
        random_action = (action_coin * n_actions).long().clamp(max=n_actions - 1)
        action = torch.where(explore_coin < epsilon, random_action, greedy)
        last_obs.copy_(obs)
        last_action.copy_(action)
        return action

    # The latest loss and mean Q, written in place by the update (a replay then clones no outputs); the host
    # reads them only when it logs.
    metrics = torch.zeros(2, device=device)

    def update() -> None:
        idx = (torch.rand(args.batch_size, device=device) * rb_size).long()
        with torch.no_grad():
            target_max = target_network(rb_next_obs[idx]).max(dim=1).values
            td_target = rb_rewards[idx] + args.gamma * target_max * (1 - rb_dones[idx])
        old_val = q_network(rb_obs[idx]).gather(1, rb_actions[idx].unsqueeze(1)).squeeze(1)
        loss = F.mse_loss(td_target, old_val)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        metrics.copy_(torch.stack([loss, old_val.mean()]).detach())

    link = (DeviceLink(n_envs, obs_dim, device) if args.env_backend == "torch"
            else HostLink(n_envs, obs_dim, (), torch.long, device))
    # Torch envs report episode endings on the device: gathered there, read by the host a step later.
    episodes = track_episodes(args.env_backend, n_envs, device)
    # One env step's device work is one call: the env's answer in, store and act, the action out.
    act_and_store = compiled(act_and_store, args.compile)
    act_step = accelerate(lambda: link.push(act_and_store(link.pull())), compile=False, cudagraphs=cudagraphs,
                          device=device, compiled_inside=args.compile)
    update = accelerate(update, compile=args.compile, cudagraphs=cudagraphs, device=device)
    online_params, target_params = list(q_network.parameters()), list(target_network.parameters())

    checkpoints = Checkpoints(
        args, logger.dir, "dqn", same=("env_id", "num_envs", "buffer_size", "total_timesteps"),
        modules={"q_network": q_network, "target_network": target_network, "optimizer": optimizer,
                 "episodes": episodes},
        tensors={"rb_obs": rb_obs, "rb_next_obs": rb_next_obs, "rb_actions": rb_actions, "rb_rewards": rb_rewards,
                 "rb_dones": rb_dones, "rb_ptr": rb_ptr, "rb_size": rb_size, "env_steps": env_steps,
                 "epsilon": epsilon, "last_obs": last_obs, "last_action": last_action})
    start_iteration, global_step, updates = 0, 0, 0
    if args.resume:
        envs, saved = checkpoints.resume(envs, link)
        start_iteration, global_step, updates = saved["iteration"], saved["global_step"], saved["updates"]
    else:
        link.first(envs.reset(seed=args.seed)[0])

    def counters() -> dict:
        return {"iteration": next_iteration, "global_step": global_step, "updates": updates}

    steady_after = updates + 4  # compile and capture are behind us after 4 updates

    num_iterations = -(-args.total_timesteps // n_envs)
    next_iteration, completed = start_iteration, False
    try:
        for iteration in range(start_iteration, num_iterations):
            act_step()
            link.ready()
            if global_step > args.learning_starts and iteration % args.train_frequency == 0:
                # Launched before the env steps: the update runs on the GPU while the CPU simulates.
                update()
                updates += 1
                if updates == steady_after:
                    logger.mark_steady(global_step)
                if updates % args.log_every == 0:
                    td_loss, q_values = metrics.tolist()
                    logger.log(global_step, td_loss=td_loss, q_values=q_values, epsilon=epsilon.item())
            if iteration % (args.target_network_frequency // n_envs or 1) == 0:
                soft_update(target_params, online_params, args.tau)

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
            checkpoints.save("dqn.pt", envs, link, counters())
            export_policy(GreedyPolicy(q_network), obs_dim, os.path.join(logger.dir, "dqn.pt2"))
        envs.close()
        extra = {}
        if completed and args.measure_floor and logger.steady_step is not None:
            extra["floor_us"] = floor_us(  # one env step: an act, and an update every train-frequency steps
                lambda i: (act_step(), i % args.train_frequency == 0 and update()), device)
        summary = logger.close(run_dir=logger.dir, updates=updates, **extra)
    return summary


if __name__ == "__main__":
    cli(main, Args)
