"""SAC (CleanRL's sac_continuous_action.py, same defaults) in four execution paths: eager, --compile,
--cudagraphs, both.

Per env step the device runs `store_and_act` (store the transition the envs just finished in a replay ring on the
device, then sample the next action from the policy) and `update_critics` (sample a batch on the device, one step of the
twin critics, then the targets); every `policy_frequency` steps follow `policy_frequency` pairs of `update_actor`
and `update_alpha` (the entropy temperature, a device tensor) on the same batch. The updates are launched before
the CPU steps the envs, so the two overlap; the loop waits for nothing but the action's copy to the host.

The flag `--num-seeds N` trains N independent runs (seeds --seed ... --seed+N-1) with the kernels of one: every tensor
has a leading seeds axis (`[seeds, batch, obs]`), each layer is one batched matmul over the seeds' weights, each
seed has its own temperature, and the losses are summed over the seeds, so each seed's gradients and Adam steps are
its own (common/seeds.py). Seed i has its own envs (the i-th block of the vector env), networks drawn from its own
seed, replay memory and run folder. With N = 1 the run draws the random numbers of a run without the axis, in the
same order, and its losses agree with that run's to float rounding (batched matmuls where it had plain ones).
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

from turborl.checkpoints import Checkpoints, export_policy
from turborl.cli import OptionalFlag, RunArgs, check, check_fits, check_run_args, cli, pick_device, seed_everything
from turborl.envs import final_observations, make_env, track_episodes
from turborl.link import EnvLink, EnvStep
from turborl.paths import ExecutionPath
from turborl.seeds import SeedLinear, SeedLoggers, check_num_seeds, one_seed, seeded


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
    num_seeds: int = 1
    """independent runs trained together, seeds --seed to --seed + N - 1: each has its own envs (--num-envs),
    networks, temperature, replay memory and run folder; one batched kernel serves all N"""
    async_envs: OptionalFlag = None
    """step the envs (every seed's) in subprocesses, one each, while the main process waits (left out: where that
    was measured to pay, 5 envs or more of a costly simulator such as MuJoCo on 8 CPU cores or more; `False`: never)"""
    env_threads: int = 1
    """threads that step the envs (every seed's), each its share of them, while the loop waits: MuJoCo lets go of
    Python's lock while it simulates, so a costly simulator's envs step side by side (0: one per env, at most one
    per CPU core; 1: in the loop's thread)"""


LOG_STD_MAX, LOG_STD_MIN = 2.0, -5.0


class TwinSoftQNetwork(nn.Module):
    """CleanRL's two soft Q-networks as one: each layer's weights are stacked on a leading axis of size 2 (2 x seeds
    once `seeded` stacks the seeds), so a layer of both critics of every seed is one batched matmul (half the
    kernels, and SAC's step is GPU-bound). Each critic is initialized as nn.Linear layers would be: uniform in
    +-1/sqrt(fan_in)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256):
        super().__init__()
        sizes = [obs_dim + action_dim, hidden, hidden, 1]
        bounds = [n_in ** -0.5 for n_in in sizes[:-1]]
        self.weights = nn.ParameterList(nn.Parameter(torch.empty(2, n_in, n_out).uniform_(-b, b))
                                        for n_in, n_out, b in zip(sizes[:-1], sizes[1:], bounds, strict=True))
        self.biases = nn.ParameterList(nn.Parameter(torch.empty(2, 1, n_out).uniform_(-b, b))
                                       for n_out, b in zip(sizes[1:], bounds, strict=True))

    def forward(self, x, a, detach_params: bool = False):
        """Q-values `[seeds, 2, batch]` of `[seeds, batch, ...]` inputs. `detach_params`: gradients reach the inputs
        only (the actor's loss)."""
        seeds, batch = x.shape[:2]
        x = torch.cat([x, a], 2).unsqueeze(1).expand(-1, 2, -1, -1).reshape(seeds * 2, batch, -1)
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            if detach_params:
                weight, bias = weight.detach(), bias.detach()
            x = torch.bmm(x, weight) + bias  # not baddbmm: it copies the broadcast bias first, a kernel of its own
            if i < len(self.weights) - 1:
                x = F.relu(x)
        return x.view(seeds, 2, batch)


class Actor(nn.Module):
    """`[seeds, batch, obs]` in; SeedLinear is nn.Linear with the seeds axis."""

    def __init__(self, obs_dim: int, action_dim: int, low: np.ndarray, high: np.ndarray):
        super().__init__()
        self.fc1 = SeedLinear(obs_dim, 256)
        self.fc2 = SeedLinear(256, 256)
        self.fc_mean = SeedLinear(256, action_dim)
        self.fc_logstd = SeedLinear(256, action_dim)
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
        return (y * self.action_scale + self.action_bias, log_prob.sum(-1),
                torch.tanh(mean) * self.action_scale + self.action_bias)


class MeanPolicy(nn.Module):
    """The exported policy: observation batch in, the squashed mean action out (no sampling)."""

    def __init__(self, actor: Actor):
        super().__init__()
        self.actor = actor

    def forward(self, obs):
        mean, _ = self.actor(obs)
        return torch.tanh(mean) * self.actor.action_scale + self.actor.action_bias


def check_args(args: Args) -> None:
    check(args.buffer_size >= 1, f"--buffer-size must be >= 1 (got {args.buffer_size})")
    check(0 < args.batch_size <= args.buffer_size,
          f"--batch-size {args.batch_size} must be between 1 and --buffer-size {args.buffer_size}; "
          "lower it or raise --buffer-size")
    check(args.learning_starts >= 1, f"--learning-starts must be >= 1 (got {args.learning_starts})")
    check(args.policy_frequency >= 1, f"--policy-frequency must be >= 1 (got {args.policy_frequency})")
    check(0 < args.tau <= 1, f"--tau must be in (0, 1] (got {args.tau})")
    check(args.policy_lr > 0 and args.q_lr > 0, "--policy-lr and --q-lr must be positive")
    check(args.alpha > 0, f"--alpha must be positive (got {args.alpha})")
    check_num_seeds(args)


def main(args: Args) -> dict:
    check_run_args(args)
    check_args(args)
    device = pick_device(args.cuda)
    path = ExecutionPath(args, device)
    seed_everything(args.seed)
    n_seeds, n_envs = args.num_seeds, args.num_envs
    envs = make_env(args.env_id, n_seeds * n_envs, args.seed, action="continuous", algo="SAC",
                    capture_video=args.capture_video,
                    asynchronous=args.async_envs, threads=args.env_threads, backend=args.env_backend,
                    device=str(device))
    obs_dim, action_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    low, high = envs.single_action_space.low, envs.single_action_space.high
    capacity = args.buffer_size
    check_fits(capacity, 4 * (2 * obs_dim + action_dim + 2), device, "the replay memory", "--buffer-size", n_seeds)
    logger = SeedLoggers(args, "sac", args.total_timesteps, device, run_root=args.runs_dir, envs=envs)

    # ALGO LOGIC: networks, optimizers, the temperature and the replay memory, on the device, updated in place
    actor, qf = (m.to(device) for m in seeded(args.seed, n_seeds, lambda: (
        Actor(obs_dim, action_dim, low, high), TwinSoftQNetwork(obs_dim, action_dim))))
    qf_target = copy.deepcopy(qf).requires_grad_(False)
    q_optimizer = torch.optim.Adam(qf.parameters(), lr=args.q_lr, capturable=path.capturable, fused=path.fused)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.policy_lr,
                                       capturable=path.capturable, fused=path.fused)
    target_entropy = torch.tensor(-float(action_dim), device=device)
    log_alpha = torch.full((n_seeds, 1), math.log(args.alpha), device=device, requires_grad=args.autotune)
    alpha = log_alpha.detach().exp()
    a_optimizer = torch.optim.Adam([log_alpha], lr=args.q_lr, capturable=path.capturable, fused=path.fused)
    online_params, target_params = list(qf.parameters()), list(qf_target.parameters())
    action_low = torch.as_tensor(low, dtype=torch.float32, device=device)
    action_high = torch.as_tensor(high, dtype=torch.float32, device=device)
    rb_obs = torch.zeros(n_seeds, capacity, obs_dim, device=device)  # a ring per seed: [seeds, capacity, obs]
    rb_next_obs = torch.zeros(n_seeds, capacity, obs_dim, device=device)
    rb_actions = torch.zeros(n_seeds, capacity, action_dim, device=device)
    rb_rewards = torch.zeros(n_seeds, capacity, device=device)
    rb_dones = torch.zeros(n_seeds, capacity, device=device)
    rb_ptr = torch.zeros((), dtype=torch.long, device=device)
    rb_size = torch.zeros((), dtype=torch.long, device=device)
    env_steps = torch.zeros((), dtype=torch.long, device=device)  # transitions stored (the host's global_step
    # at the top of each iteration: the step in flight is stored by the next iteration's store_and_act)
    obs = torch.zeros(n_seeds, n_envs, obs_dim, device=device)  # what the last action was chosen on
    action = torch.zeros(n_seeds, n_envs, action_dim, device=device)
    env_index = torch.arange(n_envs, device=device)
    seed_index = torch.arange(n_seeds, device=device).unsqueeze(1)  # rb_x[seed_index, idx]: each seed's own ring
    batch_obs = torch.zeros(n_seeds, args.batch_size, obs_dim, device=device)  # the critics' batch, for the actor
    metric_names = ["qf_loss", "qf1_values", "actor_loss", *(["alpha_loss"] if args.autotune else []), "alpha"]
    metrics = torch.zeros(len(metric_names), n_seeds, device=device)  # written by the updates, read when logging
    metrics[-1] = alpha.squeeze(1)

    def store_and_act(step: EnvStep, after_reset: bool) -> torch.Tensor:
        """Write the transition the envs just finished into the replay ring (obs, the action taken on it, reward,
        terminated, the obs reached), then choose the action on the next obs. `after_reset`: the envs' first
        observation, no transition yet."""
        step = EnvStep(*(field.unflatten(0, (n_seeds, n_envs)) for field in step))  # [seeds, envs, ...]
        if not after_reset:
            slots = (rb_ptr + env_index) % capacity
            rb_obs[:, slots] = obs
            rb_actions[:, slots] = action
            rb_rewards[:, slots] = step.reward
            rb_dones[:, slots] = step.terminated  # truncation is not termination: bootstrap through time limits
            rb_next_obs[:, slots] = step.final_obs  # the obs reached, before autoreset (CleanRL's real_next_obs)
            rb_ptr.copy_((rb_ptr + n_envs) % capacity)
            rb_size.copy_(torch.clamp(rb_size + n_envs, max=capacity))
            env_steps.add_(n_envs)

        with torch.no_grad():
            policy_action = actor.get_action(step.next_obs)[0]
        random_action = action_low + (action_high - action_low) * torch.rand(n_seeds, n_envs, action_dim,
                                                                             device=device)
        explore = env_steps < args.learning_starts  # uniform random actions before learning starts
        obs.copy_(step.next_obs)
        action.copy_(torch.where(explore, random_action, policy_action))
        return action.flatten(0, 1)  # [seeds x envs, action], as the envs take it

    def update_critics() -> None:
        idx = (torch.rand(n_seeds, args.batch_size, device=device) * rb_size).long()  # [seeds, batch]
        observations, actions = rb_obs[seed_index, idx], rb_actions[seed_index, idx]  # [seeds, batch, ...]
        next_observations = rb_next_obs[seed_index, idx]
        with torch.no_grad():
            next_state_actions, next_state_log_pi, _ = actor.get_action(next_observations)
            min_qf_next_target = qf_target(next_observations, next_state_actions).min(1).values
            min_qf_next_target = min_qf_next_target - alpha * next_state_log_pi
            next_q_value = (rb_rewards[seed_index, idx] + (1 - rb_dones[seed_index, idx]) * args.gamma
                            * min_qf_next_target)
        qf_a_values = qf(observations, actions)  # [seeds, 2, batch]
        qf_loss = (qf_a_values - next_q_value.unsqueeze(1)).pow(2).mean(2).sum(1)  # each critic's MSE, summed
        q_optimizer.zero_grad()
        qf_loss.sum().backward()  # the seeds' losses summed: each seed's gradient comes from its own loss alone
        q_optimizer.step()
        with torch.no_grad():  # target <- target + tau * (online - target), outside autograd
            torch._foreach_lerp_(target_params, online_params, args.tau)
        batch_obs.copy_(observations)
        metrics[:2].copy_(torch.stack([qf_loss, qf_a_values[:, 0].mean(1)]).detach())

    def update_actor() -> None:
        pi, log_pi, _ = actor.get_action(batch_obs)
        # The critics' parameters get no gradient from the actor's loss (they are not stepped with it).
        min_qf_pi = qf(batch_obs, pi, detach_params=True).min(1).values
        actor_loss = (alpha * log_pi - min_qf_pi).mean(1)  # [seeds]
        actor_optimizer.zero_grad()
        actor_loss.sum().backward()
        actor_optimizer.step()
        metrics[2].copy_(actor_loss.detach())

    def update_alpha() -> None:
        with torch.no_grad():
            _, log_pi, _ = actor.get_action(batch_obs)
        alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean(1)  # [seeds]: each seed's temperature
        a_optimizer.zero_grad()
        alpha_loss.sum().backward()
        a_optimizer.step()
        alpha.copy_(log_alpha.detach().exp())
        metrics[3:].copy_(torch.stack([alpha_loss.detach(), alpha.squeeze(1)]))

    # TRY NOT TO MODIFY: the execution path (common/paths.py): compile the math, capture what the loop calls
    link = EnvLink(n_seeds * n_envs, obs_dim, (action_dim,), torch.float32, device,
                   envs_on_device=args.env_backend != "gymnasium")
    store_and_act, update_critics = path.compile(store_and_act), path.compile(update_critics)
    update_actor, update_alpha = path.compile(update_actor), path.compile(update_alpha)
    act_after_reset = lambda: link.send_action(store_and_act(link.receive(), after_reset=True))  # rare: not captured
    store_and_act_step = path.capture(lambda: link.send_action(store_and_act(link.receive(), after_reset=False)))
    update_critics, update_actor, update_alpha = map(path.capture, (update_critics, update_actor, update_alpha))

    # TRY NOT TO MODIFY: episodes, checkpoints and resume
    episodes = track_episodes(args.env_backend, n_seeds * n_envs, device, envs_per_seed=n_envs)
    checkpoints = Checkpoints(
        args, logger, "sac",
        modules={"actor": actor, "qf": qf, "qf_target": qf_target, "q_optimizer": q_optimizer,
                 "actor_optimizer": actor_optimizer, "a_optimizer": a_optimizer, "episodes": episodes},
        tensors={"rb_ptr": rb_ptr, "rb_size": rb_size, "env_steps": env_steps, "obs": obs, "action": action,
                 "log_alpha": log_alpha, "alpha": alpha, "metrics": metrics},
        replay={name: ring.transpose(0, 1) for name, ring in (  # ring axis first: saved up to rb_size
            ("rb_obs", rb_obs), ("rb_next_obs", rb_next_obs), ("rb_actions", rb_actions), ("rb_rewards", rb_rewards),
            ("rb_dones", rb_dones))}, replay_size=rb_size)
    start_iteration, global_step, updates = 0, 0, 0
    if args.resume:
        envs, saved = checkpoints.resume(envs, link)
        start_iteration, global_step, updates = saved["iteration"], saved["global_step"], saved["updates"]
    else:
        link.reset(envs.reset(seed=args.seed)[0])

    def counters() -> dict:
        return {"iteration": next_iteration, "global_step": global_step, "updates": updates}

    # One iteration: the device stores the transition the envs finished and chooses the next action
    # (store_and_act), then trains (update_critics, update_actor, update_alpha) while the host steps the envs
    # with that action and stages their answer (link.send) for the next iteration's store_and_act.
    num_iterations = -(-args.total_timesteps // n_envs)
    next_iteration, actor_updated = start_iteration, updates >= args.policy_frequency
    try:
        for iteration in range(start_iteration, num_iterations):
            (store_and_act_step if link.answered else act_after_reset)()  # on the device
            link.action_queued()
            if global_step > args.learning_starts:  # launched before the envs step: the GPU trains meanwhile
                update_critics()
                if iteration % args.policy_frequency == 0:
                    for _ in range(args.policy_frequency):  # delayed, not fewer: as many actor steps as env steps
                        update_actor()
                        if args.autotune:
                            update_alpha()
                    actor_updated = True
                updates += 1
                if updates % args.log_every == 0:
                    names = metric_names if actor_updated else metric_names[:2]
                    logger.log(global_step, **dict(zip(names, metrics.tolist(), strict=False)))

            next_obs, reward, terminated, truncated, infos = envs.step(link.action())
            global_step += n_envs
            # gymnasium's same-step autoreset: where an episode ended, next_obs starts the next one and
            # final_observations holds the last obs of the one that ended
            link.send(EnvStep(reward, terminated, truncated, final_observations(next_obs, infos), next_obs))
            logger.log_episodes(global_step, episodes.after_step(infos))
            logger.progress(global_step)
            next_iteration = iteration + 1
            if checkpoints.due(global_step, n_envs):
                checkpoints.save_periodic(envs, link, counters())
            if logger.stop.requested:  # Ctrl-C or a non-finite loss: stop where an iteration ends
                break
        if not logger.stop.requested:  # a stopped run's stay in its checkpoint, for the resumed run to log
            logger.log_episodes(global_step, episodes.read())  # any held back
        if args.save_model:
            checkpoints.save("sac.pt", envs, link, counters())  # all seeds, in seed 0's folder
            for i, seed_logger in enumerate(logger.loggers):
                export_policy(one_seed(MeanPolicy(actor), i, n_seeds), obs_dim,
                              os.path.join(seed_logger.dir, "sac.pt2"))
    finally:
        envs.close()
        summary = logger.close(checkpoint=checkpoints.last, updates=updates)
    return summary


if __name__ == "__main__":
    cli(main, Args)
