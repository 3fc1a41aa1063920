"""TD3 fed by thousands of envs on the device, FastTD3's recipe (Seo et al. 2025, github.com/younggyoseo/FastTD3):
many parallel envs fill a large replay memory on the device; each vector step makes `--num-updates` updates on
large batches; a distributional critic (C51: the return as a distribution over `--num-atoms` fixed values) with
clipped double Q; wide networks; each env explores with its own noise scale; observations normalized with running
statistics; AdamW. The whole iteration (act, physics, autoreset, storage, every update) is one captured graph.
Envs: the MuJoCo Warp locomotion tasks (`--env-backend mjwarp`) or classic control (`--env-backend torch`).
TD3 on one gymnasium env, CleanRL's way, is algos/td3.py.
"""

from __future__ import annotations

import collections
import copy
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
    """AdamW learning rate of actor and critic"""
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
    """critic updates per actor update"""
    learning_starts: int = 10 * 1024
    """env steps (all envs together) before the updates start; exploration uses the policy from the first step"""
    std_min: float = 0.001
    """smallest exploration noise scale (each env draws its own in [std_min, std_max] at each episode start)"""
    std_max: float = 0.4
    """largest exploration noise scale (as a fraction of the action range's half-width)"""
    policy_noise: float = 0.001
    """scale of the target policy smoothing noise"""
    noise_clip: float = 0.5
    """clip of the target policy smoothing noise"""
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


class TwinQNetwork(nn.Module):
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


class Actor(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden: int, low, high):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden // 2), nn.ReLU(),
                                 nn.Linear(hidden // 2, hidden // 4), nn.ReLU(), nn.Linear(hidden // 4, action_dim))
        nn.init.normal_(self.net[-1].weight, 0.0, 0.01)  # FastTD3: actions start near the middle of their range
        nn.init.zeros_(self.net[-1].bias)
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, obs):
        return torch.tanh(self.net(obs)) * self.action_scale + self.action_bias


class DeterministicPolicy(nn.Module):
    """The exported policy: raw observations in (normalized with the run's final statistics), actions out."""

    def __init__(self, actor: Actor, obs_rms: RunningMeanStd):
        super().__init__()
        self.actor = actor
        self.register_buffer("obs_mean", obs_rms.mean.clone())
        self.register_buffer("obs_var", obs_rms.var.clone())

    def forward(self, obs):
        return self.actor((obs - self.obs_mean) / torch.sqrt(self.obs_var + 1e-8))


# The critic's support per env at --gamma 0.97: a return outside it is clipped to its edge, and the critic learns
# nothing about it (Pendulum's rewards lie in [-16.3, 0], so its returns in [-543, 0]; MountainCarContinuous pays
# at most -0.1 per step and 100 at the goal; the MuJoCo tasks' returns stay inside FastTD3's [-100, 500]).
SUPPORTS = {"HalfCheetah-v5": (-100.0, 500.0), "Ant-v5": (-100.0, 500.0), "Humanoid-v5": (-100.0, 500.0),
            "Pendulum-v1": (-600.0, 0.0), "MountainCarContinuous-v0": (-10.0, 110.0)}


def check_args(args: Args) -> None:
    check(args.env_backend in ("torch", "mjwarp"),
          "TD3 on gymnasium envs is algos/td3.py; here --env-backend is mjwarp or torch")
    check(args.buffer_size >= args.num_envs, f"--buffer-size {args.buffer_size} must hold one step of every env "
                                             f"(--num-envs {args.num_envs})")
    check(args.batch_size >= 1, f"--batch-size must be positive (got {args.batch_size})")
    for name in ("num_updates", "policy_frequency", "learning_starts"):
        check(getattr(args, name) >= 1, f"--{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})")
    check(0 < args.tau <= 1, f"--tau must be in (0, 1] (got {args.tau})")
    check(args.learning_rate > 0 and args.weight_decay >= 0, "--learning-rate must be positive, --weight-decay >= 0")
    check(0 <= args.std_min <= args.std_max, f"need 0 <= --std-min <= --std-max (got {args.std_min}, {args.std_max})")
    check(min(args.policy_noise, args.noise_clip) >= 0, "--policy-noise and --noise-clip must be >= 0")
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
    envs = make_env(args.env_id, args.num_envs, args.seed, action="continuous", algo="TD3",
                    backend=args.env_backend, device=str(device))
    check(None not in (args.v_min, args.v_max), f"{args.env_id} at --gamma {args.gamma} has no default support of "
          "returns: pass --v-min and --v-max that bracket its discounted returns (reward bounds / (1 - gamma))")
    n_envs, batch_size, num_updates = args.num_envs, args.batch_size, args.num_updates
    obs_dim, action_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    capacity = args.buffer_size
    check_fits(capacity, (2 * obs_dim + action_dim + 2) * 4, device, "the replay memory", "--buffer-size")
    num_iterations = args.total_timesteps // args.num_envs  # whole steps of every env
    logger = RunLogger(args, "td3_device_envs", num_iterations * args.num_envs, device, run_root=args.runs_dir)
    low, high = envs.single_action_space.low, envs.single_action_space.high
    bf16 = args.bf16 and device.type == "cuda"

    # ALGO LOGIC: networks, optimizers, normalization and the replay memory, all on the device, updated in place
    actor = Actor(obs_dim, action_dim, args.actor_hidden_dim, low, high).to(device)
    qf = TwinQNetwork(obs_dim, action_dim, args.critic_hidden_dim, args.num_atoms).to(device)
    qf_target = copy.deepcopy(qf).requires_grad_(False)  # the actor acts for the targets: no target actor
    q_optimizer = torch.optim.AdamW(qf.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay,
                                         capturable=path.capturable, fused=path.fused)
    actor_optimizer = torch.optim.AdamW(actor.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay,
                                        capturable=path.capturable, fused=path.fused)
    qf_params, target_params = list(qf.parameters()), list(qf_target.parameters())
    support = torch.linspace(args.v_min, args.v_max, args.num_atoms, device=device)  # the returns' possible values
    obs_rms = RunningMeanStd((obs_dim,), device)
    action_low = torch.as_tensor(low, dtype=torch.float32, device=device)
    action_high = torch.as_tensor(high, dtype=torch.float32, device=device)
    rb_obs = torch.zeros(capacity, obs_dim, device=device)
    rb_next_obs = torch.zeros(capacity, obs_dim, device=device)
    rb_actions = torch.zeros(capacity, action_dim, device=device)
    rb_rewards = torch.zeros(capacity, device=device)
    rb_dones = torch.zeros(capacity, device=device)
    rb_ptr = torch.zeros((), dtype=torch.long, device=device)
    rb_size = torch.zeros((), dtype=torch.long, device=device)
    obs = torch.zeros(n_envs, obs_dim, device=device)  # what the next action is chosen on
    noise_scales = torch.zeros(n_envs, 1, device=device)  # each env's exploration noise, redrawn at episode starts
    env_index = torch.arange(n_envs, device=device)
    # Every random number of an iteration, drawn before it (outside compiled code, which may reorder independent
    # random ops: the four paths then draw the same numbers).
    action_noise = torch.zeros(n_envs, action_dim, device=device)
    new_noise_scales = torch.zeros(n_envs, 1, device=device)
    sample_u = torch.zeros(num_updates, batch_size, device=device)
    smoothing_noise = torch.zeros(num_updates, batch_size, action_dim, device=device)
    batch_obs = torch.zeros(batch_size, obs_dim, device=device)  # the last critic batch's, for the actor
    metric_names = ["qf_loss", "qf_values", "actor_loss"]
    metrics = torch.zeros(len(metric_names), device=device)  # written by the updates, read when logging
    episodes = track_episodes("torch", n_envs, device)

    def normalize(x):
        return (x - obs_rms.mean) / torch.sqrt(obs_rms.var + 1e-8)

    def draw_noise() -> None:
        action_noise.normal_()
        new_noise_scales.uniform_(args.std_min, args.std_max)
        sample_u.uniform_()
        smoothing_noise.normal_()

    def env_step() -> None:
        """Act on `obs` with each env's noise, step the envs, store the transition in the replay ring."""
        obs_rms.update(obs)
        with torch.no_grad():
            action = actor(normalize(obs)) + action_noise * noise_scales * actor.action_scale
        action = action.clamp(action_low, action_high)
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        slots = (rb_ptr + env_index) % capacity
        rb_obs[slots] = obs
        rb_actions[slots] = action
        rb_rewards[slots] = reward
        rb_dones[slots] = terminated.float()  # truncation is not termination: bootstrap through time limits
        rb_next_obs[slots] = infos["final_obs"]
        rb_ptr.copy_((rb_ptr + n_envs) % capacity)
        rb_size.copy_(torch.clamp(rb_size + n_envs, max=capacity))
        noise_scales.copy_(torch.where((terminated | truncated).unsqueeze(1), new_noise_scales, noise_scales))
        obs.copy_(next_obs)
        episodes.record(infos)

    def update_critics(u: torch.Tensor, noise: torch.Tensor) -> None:
        idx = (u * rb_size).long()
        observations, next_observations = normalize(rb_obs[idx]), normalize(rb_next_obs[idx])
        actions = rb_actions[idx]
        with torch.no_grad(), torch.autocast(device.type, torch.bfloat16, enabled=bf16):
            clipped_noise = (noise * args.policy_noise).clamp(-args.noise_clip, args.noise_clip)
            next_actions = (actor(next_observations) + clipped_noise * actor.action_scale).clamp(action_low,
                                                                                                   action_high)
            next_probs = qf_target(next_observations, next_actions).float().softmax(-1)
            next_values = (next_probs * support).sum(-1)
            # clipped double Q: each sample's target follows the critic that values the next state lower
            next_probs = torch.where((next_values[0] <= next_values[1]).unsqueeze(1), next_probs[0], next_probs[1])
            target = project(next_probs, rb_rewards[idx], args.gamma * (1 - rb_dones[idx]), support)
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

    def update_actor() -> None:
        with torch.autocast(device.type, torch.bfloat16, enabled=bf16):
            logits = qf(batch_obs, actor(batch_obs), detach_params=True).float()
        values = (logits.softmax(-1) * support).sum(-1)
        actor_loss = -values.min(0).values.mean()
        actor_optimizer.zero_grad()
        actor_loss.backward()
        actor_optimizer.step()
        metrics[2].copy_(actor_loss.detach())

    def collect() -> None:
        """One vector step of every env (before learning starts)."""
        draw_noise()
        env_step()

    def train_iteration() -> None:
        """One vector step of every env, then `num_updates` critic updates, the actor every `policy_frequency`."""
        draw_noise()
        env_step()
        for i in range(num_updates):
            update_critics(sample_u[i], smoothing_noise[i])
            if i % args.policy_frequency == args.policy_frequency - 1:
                update_actor()

    # TRY NOT TO MODIFY: the execution path (common/paths.py): compile the math, capture what the loop calls
    env_step, update_critics, update_actor = path.compile(env_step), path.compile(update_critics), path.compile(
        update_actor)
    collect, train_iteration = path.capture(collect), path.capture(train_iteration)

    # TRY NOT TO MODIFY: checkpoints and resume
    checkpoints = Checkpoints(
        args, logger, "td3_device_envs",
        modules={"actor": actor, "qf": qf, "qf_target": qf_target,
                 "q_optimizer": q_optimizer, "actor_optimizer": actor_optimizer, "obs_rms": obs_rms,
                 "episodes": episodes},
        tensors={"rb_ptr": rb_ptr, "rb_size": rb_size, "obs": obs, "noise_scales": noise_scales},
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
        noise_scales.uniform_(args.std_min, args.std_max)

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
            checkpoints.save("td3_device_envs.pt", envs, None, counters())
            export_policy(DeterministicPolicy(actor, obs_rms), obs_dim, os.path.join(logger.dir, "td3_device_envs.pt2"))
    finally:
        envs.close()
        summary = logger.close(checkpoint=checkpoints.last, updates=updates)
    return summary


if __name__ == "__main__":
    cli(main, Args)
