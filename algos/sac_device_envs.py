"""SAC fed by thousands of envs on the device, with FastTD3's recipe (algos/td3_device_envs.py): many parallel envs
fill a large replay memory on the device; each vector step makes `--num-updates` updates on large batches; a
distributional critic (C51) with clipped double Q; wide networks; observations normalized with running statistics;
AdamW. SAC's own parts are CleanRL's: a tanh-squashed Gaussian policy that explores by sampling, the entropy bonus
in the critic's target and the actor's loss, and the temperature tuned towards an entropy of -action_dim, here
from a small start (0.001, not 0.2: the bonus is alpha times the log-density of up to 17 action dimensions,
which at 0.2 outweighs locomotion rewards of a few units per step). The whole iteration (act, physics,
autoreset, storage, every update) is one captured graph. SAC on one gymnasium env, CleanRL's way, is
algos/sac.py.
"""

from __future__ import annotations

import collections
import copy
import math
import os
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from turborl.checkpoints import Checkpoints, export_policy
from turborl.cli import RunArgs, check, check_fits, check_run_args, cli, pick_device, seed_everything
from turborl.envs import make_env, track_episodes
from turborl.logger import RunLogger
from turborl.numerics import RunningMeanStd, project
from turborl.paths import ExecutionPath


@dataclass
class Args(RunArgs):
    env_id: str = "Humanoid-v5"
    """id of a device env with continuous actions: HalfCheetah-v5, Ant-v5, Humanoid-v5 (mjwarp); Pendulum-v1,
    MountainCarContinuous-v0 (torch)"""
    env_backend: str = "mjwarp"
    """where the envs run, both on the device: mjwarp (MuJoCo Warp, common/mjwarp_envs.py) or torch (classic
    control, common/torch_envs.py)"""
    seed: int = 1
    """seed of the run (torch, envs)"""
    total_timesteps: int = 100_000_000
    """environment steps of the whole run (all envs together)"""
    num_envs: int = 1024
    """parallel environments"""
    learning_rate: float = 3e-4
    """AdamW learning rate of actor and critics, Adam learning rate of the temperature"""
    weight_decay: float = 0.1
    """AdamW weight decay of actor and critic"""
    buffer_size: int = 1024 * 10_240
    """replay memory size in transitions (FastTD3: 10,240 steps of each of 1,024 envs; a Humanoid-v5 transition
    takes ~2.8 kB)"""
    gamma: float = 0.97
    """discount factor"""
    tau: float = 0.1
    """target critic smoothing coefficient, per update"""
    batch_size: int = 32_768
    """transitions sampled from the replay memory per update"""
    num_updates: int = 2
    """critic updates per vector step (the actor's follow every `policy_frequency` of them)"""
    policy_frequency: int = 2
    """critic updates per actor (and temperature) update"""
    learning_starts: int = 10 * 1024
    """env steps (all envs together) before the updates start; the policy acts from the first step"""
    alpha: float = 0.001
    """entropy temperature (its start value when autotuned)"""
    autotune: bool = True
    """tune alpha towards the target entropy -action_dim"""
    num_atoms: int = 101
    """values in the critic's return distribution"""
    v_min: float | None = None
    """smallest value of the critic's return distribution (none: the env's in SUPPORTS); with --v-max it must
    bracket the task's discounted returns"""
    v_max: float | None = None
    """largest value of the critic's return distribution (none: the env's in SUPPORTS)"""
    critic_hidden_dim: int = 1024
    """units of each critic's first hidden layer (then half, then a quarter)"""
    actor_hidden_dim: int = 512
    """units of the actor's first hidden layer (then half, then a quarter)"""
    bf16: bool = True
    """on CUDA, the updates' network passes in bfloat16 autocast (as FastTD3); acting and Adam stay float32"""
    stop_at_return: float | None = None
    """stop once the mean return of the last 100 episodes reaches this (time-to-solve benchmarks)"""


class TwinSoftQNetwork(nn.Module):
    """The two critics of clipped double Q as one network: each layer holds both critics' weights stacked, and
    one batched matmul computes both. Output: 2 x batch x num_atoms logits of the return distribution."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int, num_atoms: int):
        super().__init__()
        sizes = [obs_dim + action_dim, hidden, hidden // 2, hidden // 4, num_atoms]
        self.weights = nn.ParameterList(nn.Parameter(torch.empty(2, n_in, n_out))
                                        for n_in, n_out in zip(sizes, sizes[1:], strict=False))
        self.biases = nn.ParameterList(nn.Parameter(torch.empty(2, 1, n_out)) for n_out in sizes[1:])
        for weight, bias in zip(self.weights, self.biases, strict=True):  # nn.Linear's initialization, per critic
            bound = weight.shape[1] ** -0.5
            nn.init.uniform_(weight, -bound, bound)
            nn.init.uniform_(bias, -bound, bound)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """`detach_params`: gradients reach the inputs only (the actor's loss: the critics are not stepped with it,
        and their weights' gradients would cost as much as the rest of the backward pass)."""
        x = torch.cat([obs, action], 1).expand(2, -1, -1)
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            if detach_params:
                weight, bias = weight.detach(), bias.detach()
            x = torch.baddbmm(bias, x, weight)
            if i < len(self.weights) - 1:
                x = F.relu(x)
        return x


LOG_STD_MAX, LOG_STD_MIN = 2.0, -5.0


class Actor(nn.Module):
    """A tanh-squashed Gaussian policy; the last layer gives the mean and the log std of each action dimension."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int, low, high):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden // 2), nn.ReLU(),
                                 nn.Linear(hidden // 2, hidden // 4), nn.ReLU(), nn.Linear(hidden // 4, 2 * action_dim))
        nn.init.normal_(self.net[-1].weight, 0.0, 0.01)  # FastTD3: actions start near the middle of their range
        nn.init.zeros_(self.net[-1].bias)
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, obs):
        """(mean, log std) before the squashing; the log std bounded as CleanRL's."""
        mean, log_std = self.net(obs).float().chunk(2, dim=-1)
        return mean, LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)

    def sample(self, obs, eps):
        """(action, its log-probability) from standard normal noise `eps` drawn beforehand (reparameterized).
        The Gaussian log-density is written out (no torch.distributions): no argument checks, no host syncs."""
        mean, log_std = self(obs)
        y = torch.tanh(mean + log_std.exp() * eps)
        log_prob = -0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)
        log_prob = log_prob - torch.log(self.action_scale * (1 - y.pow(2)) + 1e-6)
        return y * self.action_scale + self.action_bias, log_prob.sum(-1)


class MeanPolicy(nn.Module):
    """The exported policy: raw observations in (normalized with the run's final statistics), the squashed mean
    action out (no sampling)."""

    def __init__(self, actor: Actor, obs_rms: RunningMeanStd):
        super().__init__()
        self.actor = actor
        self.register_buffer("obs_mean", obs_rms.mean.clone())
        self.register_buffer("obs_var", obs_rms.var.clone())

    def forward(self, obs):
        mean, _ = self.actor((obs - self.obs_mean) / torch.sqrt(self.obs_var + 1e-8))
        return torch.tanh(mean) * self.actor.action_scale + self.actor.action_bias


# The critic's support per env at --gamma 0.97: a return outside it is clipped to its edge, and the critic learns
# nothing about it (Pendulum's rewards lie in [-16.3, 0], so its returns in [-543, 0]; MountainCarContinuous pays
# at most -0.1 per step and 100 at the goal; the MuJoCo tasks' returns stay inside FastTD3's [-100, 500]).
SUPPORTS = {"HalfCheetah-v5": (-100.0, 500.0), "Ant-v5": (-100.0, 500.0), "Humanoid-v5": (-100.0, 500.0),
            "Pendulum-v1": (-600.0, 0.0), "MountainCarContinuous-v0": (-10.0, 110.0)}


def check_args(args: Args) -> None:
    check(args.env_backend in ("torch", "mjwarp"),
          "SAC on gymnasium envs is algos/sac.py; here --env-backend is mjwarp or torch")
    check(args.buffer_size >= args.num_envs, f"--buffer-size {args.buffer_size} must hold one step of every env "
                                             f"(--num-envs {args.num_envs})")
    check(args.batch_size >= 1, f"--batch-size must be positive (got {args.batch_size})")
    for name in ("num_updates", "policy_frequency", "learning_starts"):
        check(getattr(args, name) >= 1, f"--{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})")
    check(0 < args.tau <= 1, f"--tau must be in (0, 1] (got {args.tau})")
    check(args.learning_rate > 0 and args.weight_decay >= 0, "--learning-rate must be positive, --weight-decay >= 0")
    check(args.alpha > 0, f"--alpha must be positive (got {args.alpha})")
    default_min, default_max = SUPPORTS.get(args.env_id, (None, None)) if args.gamma == 0.97 else (None, None)
    args.v_min = default_min if args.v_min is None else args.v_min  # none: main refuses, once the env is checked
    args.v_max = default_max if args.v_max is None else args.v_max
    check(args.num_atoms >= 2 and (None in (args.v_min, args.v_max) or args.v_min < args.v_max),
          f"need --num-atoms >= 2 and --v-min < --v-max (got {args.num_atoms}, {args.v_min}, {args.v_max})")
    check(min(args.critic_hidden_dim, args.actor_hidden_dim) >= 4,
          "--critic-hidden-dim and --actor-hidden-dim must be >= 4 (the layers narrow to a quarter)")


def main(args: Args) -> dict:
    check_args(args)  # first: it fills the env's defaults, which a resumed run's flags are compared with
    check_run_args(args)
    device = pick_device(args.cuda)
    path = ExecutionPath(args, device)
    seed_everything(args.seed)
    envs = make_env(args.env_id, args.num_envs, args.seed, action="continuous", algo="SAC",
                    backend=args.env_backend, device=str(device))
    check(None not in (args.v_min, args.v_max), f"{args.env_id} at --gamma {args.gamma} has no default support of "
          "returns: pass --v-min and --v-max that bracket its discounted returns (reward bounds / (1 - gamma))")
    n_envs, batch_size, num_updates = args.num_envs, args.batch_size, args.num_updates
    obs_dim, action_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    capacity = args.buffer_size
    check_fits(capacity, (2 * obs_dim + action_dim + 2) * 4, device, "the replay memory", "--buffer-size")
    num_iterations = args.total_timesteps // args.num_envs  # whole steps of every env
    logger = RunLogger(args, "sac_device_envs", num_iterations * args.num_envs, device, run_root=args.runs_dir)
    low, high = envs.single_action_space.low, envs.single_action_space.high
    bf16 = args.bf16 and device.type == "cuda"

    # ALGO LOGIC: networks, optimizers, the temperature, normalization and the replay memory, all on the device
    actor = Actor(obs_dim, action_dim, args.actor_hidden_dim, low, high).to(device)
    qf = TwinSoftQNetwork(obs_dim, action_dim, args.critic_hidden_dim, args.num_atoms).to(device)
    qf_target = copy.deepcopy(qf).requires_grad_(False)
    q_optimizer = torch.optim.AdamW(qf.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay,
                                         capturable=path.capturable, fused=path.fused)
    actor_optimizer = torch.optim.AdamW(actor.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay,
                                        capturable=path.capturable, fused=path.fused)
    target_entropy = -float(action_dim)
    log_alpha = torch.tensor([math.log(args.alpha)], device=device, requires_grad=args.autotune)
    alpha = log_alpha.detach().exp()  # read by the updates; rewritten in place when autotuned
    a_optimizer = torch.optim.Adam([log_alpha], lr=args.learning_rate, capturable=path.capturable, fused=path.fused)
    qf_params, target_params = list(qf.parameters()), list(qf_target.parameters())
    support = torch.linspace(args.v_min, args.v_max, args.num_atoms, device=device)  # the returns' possible values
    obs_rms = RunningMeanStd((obs_dim,), device)
    rb_obs = torch.zeros(capacity, obs_dim, device=device)
    rb_next_obs = torch.zeros(capacity, obs_dim, device=device)
    rb_actions = torch.zeros(capacity, action_dim, device=device)
    rb_rewards = torch.zeros(capacity, device=device)
    rb_dones = torch.zeros(capacity, device=device)
    rb_ptr = torch.zeros((), dtype=torch.long, device=device)
    rb_size = torch.zeros((), dtype=torch.long, device=device)
    obs = torch.zeros(n_envs, obs_dim, device=device)  # what the next action is chosen on
    env_index = torch.arange(n_envs, device=device)
    # Every random number of an iteration, drawn before it (outside compiled code, which may reorder independent
    # random ops: the four paths then draw the same numbers).
    action_noise = torch.zeros(n_envs, action_dim, device=device)
    sample_u = torch.zeros(num_updates, batch_size, device=device)
    next_action_noise = torch.zeros(num_updates, batch_size, action_dim, device=device)
    actor_noise = torch.zeros(num_updates, batch_size, action_dim, device=device)
    batch_obs = torch.zeros(batch_size, obs_dim, device=device)  # the last critic batch's, for the actor
    metric_names = ["qf_loss", "qf_values", "actor_loss", "alpha_loss", "alpha"]
    metrics = torch.zeros(len(metric_names), device=device)  # written by the updates, read when logging
    metrics[-1] = alpha.squeeze()
    episodes = track_episodes("torch", n_envs, device)

    def normalize(x):
        return (x - obs_rms.mean) / torch.sqrt(obs_rms.var + 1e-8)

    def draw_noise() -> None:
        action_noise.normal_()
        sample_u.uniform_()
        next_action_noise.normal_()
        actor_noise.normal_()

    def env_step() -> None:
        """Sample actions on `obs`, step the envs, store the transition in the replay ring."""
        obs_rms.update(obs)
        with torch.no_grad():
            action = actor.sample(normalize(obs), action_noise)[0]
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        slots = (rb_ptr + env_index) % capacity
        rb_obs[slots] = obs
        rb_actions[slots] = action
        rb_rewards[slots] = reward
        rb_dones[slots] = terminated.float()  # truncation is not termination: bootstrap through time limits
        rb_next_obs[slots] = infos["final_obs"]
        rb_ptr.copy_((rb_ptr + n_envs) % capacity)
        rb_size.copy_(torch.clamp(rb_size + n_envs, max=capacity))
        obs.copy_(next_obs)
        episodes.record(infos)

    def update_critics(u: torch.Tensor, next_eps: torch.Tensor) -> None:
        idx = (u * rb_size).long()
        observations, next_observations = normalize(rb_obs[idx]), normalize(rb_next_obs[idx])
        actions = rb_actions[idx]
        with torch.no_grad(), torch.autocast(device.type, torch.bfloat16, enabled=bf16):
            next_actions, next_log_pi = actor.sample(next_observations, next_eps)
            next_probs = qf_target(next_observations, next_actions).float().softmax(-1)
            next_values = (next_probs * support).sum(-1)
            # clipped double Q: each sample's target follows the critic that values the next state lower
            next_probs = torch.where((next_values[0] <= next_values[1]).unsqueeze(1), next_probs[0], next_probs[1])
            # reward + discount * (Z' - alpha * log pi): the entropy bonus shifts the next return's distribution
            discount = args.gamma * (1 - rb_dones[idx])
            target = project(next_probs, rb_rewards[idx] - discount * alpha * next_log_pi.float(), discount, support)
        with torch.autocast(device.type, torch.bfloat16, enabled=bf16):
            logits = qf(observations, actions).float()
        qf_loss = -(target * logits.log_softmax(-1)).sum(-1).mean(-1).sum()  # both critics' cross-entropy
        q_optimizer.zero_grad()
        qf_loss.backward()
        q_optimizer.step()
        with torch.no_grad():  # target <- target + tau * (online - target), outside autograd
            torch._foreach_lerp_(target_params, qf_params, args.tau)
            batch_obs.copy_(observations)
            metrics[:2].copy_(torch.stack([qf_loss, (logits[0].softmax(-1) * support).sum(-1).mean()]))

    def update_actor(eps: torch.Tensor) -> None:
        """One step of the actor and, autotuned, of the temperature, on the last critic batch (one backward: the
        two losses share no parameter)."""
        with torch.autocast(device.type, torch.bfloat16, enabled=bf16):
            actions, log_pi = actor.sample(batch_obs, eps)
            logits = qf(batch_obs, actions, detach_params=True).float()
        values = (logits.softmax(-1) * support).sum(-1)
        actor_loss = (alpha * log_pi - values.min(0).values).mean()
        alpha_loss = (-log_alpha.exp() * (log_pi.detach() + target_entropy)).mean()
        actor_optimizer.zero_grad()
        a_optimizer.zero_grad()
        (actor_loss + alpha_loss if args.autotune else actor_loss).backward()
        actor_optimizer.step()
        if args.autotune:
            a_optimizer.step()
            alpha.copy_(log_alpha.detach().exp())
        metrics[2:].copy_(torch.stack([actor_loss.detach(), alpha_loss.detach(), alpha.squeeze()]))

    def collect() -> None:
        """One vector step of every env (before learning starts)."""
        draw_noise()
        env_step()

    def train_iteration() -> None:
        """One vector step of every env, then `num_updates` critic updates, the actor every `policy_frequency`."""
        draw_noise()
        env_step()
        for i in range(num_updates):
            update_critics(sample_u[i], next_action_noise[i])
            if i % args.policy_frequency == args.policy_frequency - 1:
                update_actor(actor_noise[i])

    # TRY NOT TO MODIFY: the execution path (common/paths.py): compile the math, capture what the loop calls
    env_step, update_critics, update_actor = path.compile(env_step), path.compile(update_critics), path.compile(
        update_actor)
    collect, train_iteration = path.capture(collect), path.capture(train_iteration)

    # TRY NOT TO MODIFY: checkpoints and resume
    checkpoints = Checkpoints(
        args, logger, "sac_device_envs",
        modules={"actor": actor, "qf": qf, "qf_target": qf_target,
                 "q_optimizer": q_optimizer, "actor_optimizer": actor_optimizer,
                 "a_optimizer": a_optimizer, "obs_rms": obs_rms, "episodes": episodes},
        tensors={"rb_ptr": rb_ptr, "rb_size": rb_size, "obs": obs, "log_alpha": log_alpha, "alpha": alpha},
        replay={"rb_obs": rb_obs, "rb_next_obs": rb_next_obs, "rb_actions": rb_actions, "rb_rewards": rb_rewards,
                "rb_dones": rb_dones}, replay_size=rb_size)
    recent_returns: collections.deque = collections.deque(maxlen=100)
    start_iteration, global_step, updates = 0, 0, 0
    if args.resume:
        envs, saved = checkpoints.resume(envs, link=None)
        recent_returns.extend(saved["recent_returns"])
        start_iteration, global_step, updates = saved["iteration"], saved["global_step"], saved["updates"]
    else:
        obs.copy_(envs.reset(seed=args.seed)[0])

    def counters() -> dict:
        return {"iteration": next_iteration, "global_step": global_step, "updates": updates,
                "recent_returns": list(recent_returns)}

    next_iteration = start_iteration
    try:
        for iteration in range(start_iteration, num_iterations):
            if global_step < args.learning_starts:
                collect()
            else:
                train_iteration()  # the envs' step, then the updates
                updates += num_updates
                if updates % args.log_every < num_updates:
                    logger.log(global_step, **dict(zip(metric_names, metrics.tolist(), strict=True)))
            finished = episodes.read()  # those that ended in the previous iteration, read while this one runs
            episodes.copy()
            recent_returns.extend(episodic_return for episodic_return, _ in finished)
            global_step += n_envs
            next_iteration = iteration + 1
            logger.log_episodes(global_step, finished)
            logger.progress(global_step)
            if (args.stop_at_return is not None and len(recent_returns) == recent_returns.maxlen
                    and sum(recent_returns) / len(recent_returns) >= args.stop_at_return):
                logger.log(global_step, solved_seconds=logger.elapsed())
                break
            if checkpoints.due(global_step, n_envs):
                checkpoints.save_periodic(envs, None, counters())
            if logger.stop.requested:  # Ctrl-C or a non-finite loss: stop where an iteration ends
                break
        if not logger.stop.requested:  # a stopped run's stay in its checkpoint, for the resumed run to log
            logger.log_episodes(global_step, episodes.read())  # the last iteration's
        if args.save_model:
            checkpoints.save("sac_device_envs.pt", envs, None, counters())
            export_policy(MeanPolicy(actor, obs_rms), obs_dim, os.path.join(logger.dir, "sac_device_envs.pt2"))
    finally:
        envs.close()
        summary = logger.close(checkpoint=checkpoints.last, updates=updates)
    return summary


if __name__ == "__main__":
    cli(main, Args)
