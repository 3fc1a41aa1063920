"""PPO on envs that run on the device (torch classic control, `--env-backend torch`), the whole iteration one
graph: the rollout (policy, physics, autoreset, storage), GAE and every epoch of minibatch updates are one
captured function, replayed once per iteration, so observations never leave the GPU. CleanRL's ppo.py and
ppo_continuous_action.py defaults; the algorithm is algos/ppo.py's. Runs data-parallel under torchrun: each rank
steps its own envs (seed + rank) and gradients are averaged with one all-reduce before each Adam step (NCCL on
GPUs, inside the captured update; gloo on CPU). Only rank 0 logs and saves.
"""

from __future__ import annotations

import collections
import math
import os
import time
from dataclasses import dataclass

import gymnasium as gym
import torch
import torch.distributed as dist
from torch import nn

from turborl.checkpoints import Checkpoints, export_policy
from turborl.cli import RunArgs, check, check_ppo_args, check_run_args, cli, pick_device, seed_everything
from turborl.envs import action_space, make_env, track_episodes
from turborl.link import EnvStep
from turborl.logger import RunLogger, SilentLogger
from turborl.numerics import Normalization, draw_noise_, put, reverse_scan
from turborl.paths import ExecutionPath


@dataclass
class Args(RunArgs):
    env_id: str = "CartPole-v1"
    """id of a device env (Discrete or Box actions): CartPole-v1, Pendulum-v1, Acrobot-v1, MountainCar-v0, ..."""
    mask_velocity: bool = False
    """leave the velocities out of the observation (a partially observed task; algos/ppo_lstm_device_envs.py has
    memory)"""
    seed: int = 1
    """seed of the run (torch, numpy, env)"""
    total_timesteps: int | None = None
    """environment steps of the whole run (none: 500k discrete, 1M continuous)"""
    learning_rate: float | None = None
    """Adam learning rate (none: 2.5e-4 discrete, 3e-4 continuous)"""
    num_envs: int | None = None
    """parallel environments (none: 4 discrete, 1 continuous)"""
    num_steps: int | None = None
    """steps per env per rollout (none: 128 discrete, 2048 continuous)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    num_minibatches: int | None = None
    """minibatches per epoch (none: 4 discrete, 32 continuous)"""
    update_epochs: int | None = None
    """epochs over each rollout (none: 4 discrete, 10 continuous)"""
    norm_adv: bool = True
    """normalize advantages per minibatch"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient"""
    clip_vloss: bool = True
    """clip the value loss too"""
    ent_coef: float | None = None
    """entropy bonus coefficient (none: 0.01 discrete, 0.0 continuous)"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """gradient clipping norm"""
    hidden_size: int = 64
    """units in each of the two tanh hidden layers of the actor and of the critic (CleanRL's 64; a humanoid's
    348-number observation learns faster with 256)"""
    normalize: bool | None = None
    """normalize observations and rewards with running statistics (none: off discrete, on continuous)"""
    env_backend: str = "torch"
    """where the envs run, both on the device: torch (classic control, common/torch_envs.py) or mjwarp
    (HalfCheetah-v5, Ant-v5, Humanoid-v5 on MuJoCo Warp, common/mjwarp_envs.py)"""
    stop_at_return: float | None = None
    """stop once the mean return of the last 100 episodes reaches this (time-to-solve benchmarks)"""
    bf16: bool = False
    """hidden layers of the learning's big-batch passes in bfloat16, which halves the bytes those memory-bound
    passes move (acting, output layers, losses and Adam stay float32)"""


DISCRETE_DEFAULTS = dict(total_timesteps=500_000, learning_rate=2.5e-4, num_envs=4, num_steps=128,
                         num_minibatches=4, update_epochs=4, ent_coef=0.01, normalize=False)
CONTINUOUS_DEFAULTS = dict(total_timesteps=1_000_000, learning_rate=3e-4, num_envs=1, num_steps=2048,
                           num_minibatches=32, update_epochs=10, ent_coef=0.0, normalize=True)


def layer(n_in: int, n_out: int, std: float = math.sqrt(2)) -> nn.Linear:
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.zeros_(linear.bias)
    return linear


class Agent(nn.Module):
    """CleanRL's agent: separate two-layer tanh actor and critic (64 units by default). Distributions are written
    out (no torch.distributions): no argument checks, no host syncs, one random draw per action."""

    def __init__(self, obs_dim: int, n_out: int, discrete: bool, hidden: int = 64, bf16: bool = False):
        super().__init__()
        self.discrete, self.bf16 = discrete, bf16
        self.critic = nn.Sequential(layer(obs_dim, hidden), nn.Tanh(), layer(hidden, hidden), nn.Tanh(),
                                    layer(hidden, 1, 1.0))
        self.actor = nn.Sequential(layer(obs_dim, hidden), nn.Tanh(), layer(hidden, hidden), nn.Tanh(),
                                   layer(hidden, n_out, 0.01))
        if not discrete:
            self.actor_logstd = nn.Parameter(torch.zeros(n_out))

    def run(self, net: nn.Sequential, obs):
        """`net` on a big batch, with --bf16 its hidden layers in bfloat16 (the output layer stays float32)."""
        if not self.bf16:
            return net(obs)
        with torch.autocast(obs.device.type, torch.bfloat16):
            hidden = net[:-1](obs)
        return net[-1](hidden.float())

    def value(self, obs):
        return self.run(self.critic, obs).squeeze(-1)

    def sample(self, obs, noise):
        """(action, its log-probability) from noise drawn beforehand: Gumbel noise for categorical (Gumbel-max),
        standard normal for the reparameterized Gaussian. Always float32: small batches, where casts only cost."""
        out = self.actor(obs)
        if self.discrete:
            logp = out.log_softmax(-1)
            action = (logp + noise).argmax(-1)
            return action, logp.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        action = out + self.actor_logstd.exp() * noise
        return action, self.gaussian_logp(out, action)

    def evaluate(self, obs, action):
        """(log-probability of action, entropy, value) under the current parameters."""
        out = self.run(self.actor, obs)
        if self.discrete:
            logp = out.log_softmax(-1)
            entropy = -(logp.exp() * logp).sum(-1)
            return logp.gather(-1, action.unsqueeze(-1)).squeeze(-1), entropy, self.value(obs)
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + self.actor_logstd).sum().expand(obs.shape[0])
        return self.gaussian_logp(out, action), entropy, self.value(obs)

    def deterministic(self, obs):
        out = self.actor(obs)
        return out.argmax(-1) if self.discrete else out

    def gaussian_logp(self, mean, action):
        log_std = self.actor_logstd
        return (-0.5 * ((action - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


class DeterministicPolicy(nn.Module):
    """The exported policy: raw observation batch in (normalized with the run's final statistics), the most
    likely action out (argmax, or the Gaussian mean clipped to the action bounds)."""

    def __init__(self, agent: Agent, normalize_obs: nn.Module, space: gym.Space):
        super().__init__()
        self.agent, self.normalize_obs = agent, normalize_obs
        if not agent.discrete:
            self.register_buffer("low", torch.as_tensor(space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(space.high, dtype=torch.float32))

    def forward(self, obs):
        action = self.agent.deterministic(self.normalize_obs(obs))
        return action if self.agent.discrete else torch.max(torch.min(action, self.high), self.low)


# TRY NOT TO MODIFY: torchrun (data parallel over ranks: each rank its own envs, gradients averaged)
def init_distributed(cuda: bool) -> tuple[int, int, torch.device | None]:
    """(rank, world size, this rank's device) under torchrun, after joining the process group; else (0, 1, None)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, None
    use_cuda = cuda and torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    return dist.get_rank(), world, device


def sum_over_ranks(values: list[float], world: int, device: torch.device) -> list[float]:
    """Each value summed over every rank: under torchrun a collective (every rank calls it at the same point)."""
    totals = torch.tensor(values, dtype=torch.float64)
    if world > 1:
        totals = totals.to(device)
        dist.all_reduce(totals)
    return totals.tolist()


def average_gradients(params: list[torch.Tensor], world: int) -> None:
    """Every gradient averaged over the ranks, in one all-reduce of them all (inside the captured update)."""
    flat = torch.cat([p.grad.flatten() for p in params])
    dist.all_reduce(flat)
    averaged = flat.div_(world).split([p.numel() for p in params])
    torch._foreach_copy_([p.grad for p in params], [g.view_as(p) for g, p in zip(averaged, params, strict=True)])


def leave_distributed(params: list[torch.Tensor]) -> float:
    """Leave the process group after a run that completed on every rank; returns the largest difference between
    a rank's parameters and rank 0's (0: the ranks ended identical)."""
    flat = torch.cat([p.detach().flatten() for p in params])
    reference = flat.clone()
    dist.broadcast(reference, 0)
    diff = (flat - reference).abs().max()
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    dist.destroy_process_group()
    # gloo's threads free their last collective's tensors after it returns (under the GIL): exiting now would abort.
    time.sleep(0.1)
    return diff.item()


def resolve_defaults(args: Args) -> bool:
    """Fill the defaults chosen by the action space, check every value; returns whether actions are discrete."""
    check(args.env_backend in ("torch", "mjwarp"), f"--env-backend {args.env_backend!r}: here it is torch or mjwarp; "
          "PPO on gymnasium envs is algos/ppo.py")
    space = action_space(args.env_id, args.env_backend)
    discrete = isinstance(space, gym.spaces.Discrete)
    for name, value in (DISCRETE_DEFAULTS if discrete else CONTINUOUS_DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    check_ppo_args(args, ranks=int(os.environ.get("WORLD_SIZE", "1")))
    check(args.hidden_size > 0, f"--hidden-size must be positive (got {args.hidden_size})")
    return discrete


def main(args: Args) -> dict:
    discrete = resolve_defaults(args)
    check_run_args(args)
    rank, world, rank_device = init_distributed(args.cuda)
    device = rank_device or pick_device(args.cuda)
    path = ExecutionPath(args, device)
    seed_everything(args.seed + rank)
    envs = make_env(args.env_id, args.num_envs, args.seed + rank, algo="PPO", backend=args.env_backend,
                    device=str(device), mask_velocity=args.mask_velocity)
    n_envs, num_steps, obs_dim = args.num_envs, args.num_steps, envs.single_observation_space.shape[0]
    space = envs.single_action_space
    batch_size, minibatch_size = n_envs * num_steps, n_envs * num_steps // args.num_minibatches
    rollout = batch_size * world  # the budget counts every rank's steps, in whole rollouts
    num_iterations = args.total_timesteps // rollout
    logger = RunLogger(args, "ppo_device_envs", num_iterations * rollout, device,
                       run_root=args.runs_dir) if rank == 0 else SilentLogger()  # torchrun: rank 0 logs for all
    action_shape, n_out = ((), int(space.n)) if discrete else (space.shape, space.shape[0])  # n_out: policy outputs

    # ALGO LOGIC: the agent, its optimizer, the rollout storage and normalization statistics, on the device
    agent = Agent(obs_dim, n_out, discrete, args.hidden_size, args.bf16).to(device)
    for param in agent.parameters() if world > 1 else []:  # every rank starts from rank 0's parameters
        dist.broadcast(param.data, 0)
    lr = torch.tensor(args.learning_rate, device=device)  # annealed in place: the graphs read it
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5,
                                 capturable=path.capturable_with_lr_tensor, fused=path.fused)
    obs = torch.zeros(n_envs, obs_dim, device=device)  # what the next action is chosen on
    obs_buf = torch.zeros(num_steps, n_envs, obs_dim, device=device)
    actions = torch.zeros(num_steps, n_envs, *action_shape, dtype=torch.long if discrete else torch.float32,
                          device=device)
    logprobs, values, rewards = (torch.zeros(num_steps, n_envs, device=device) for _ in range(3))
    ended = torch.zeros(num_steps, n_envs, device=device)  # the episode ended after this step
    truncated_at = torch.zeros(num_steps, n_envs, device=device)  # ... at a time limit
    final_obs_buf = torch.zeros(num_steps, n_envs, obs_dim, device=device)  # normalized, for the bootstrap
    noise = torch.zeros(num_steps, n_envs, n_out, device=device)  # the rollout's sampling noise, drawn before it
    advantages, returns = torch.zeros(batch_size, device=device), torch.zeros(batch_size, device=device)
    permutations = torch.zeros(args.update_epochs, batch_size, dtype=torch.long, device=device)
    minibatches = permutations.view(-1, minibatch_size)  # every epoch's minibatches, in order
    step_index = torch.zeros((), dtype=torch.long, device=device)
    normalization = Normalization(args.normalize, (obs_dim,), n_envs, args.gamma, device)
    action_low = torch.as_tensor(space.low if not discrete else 0, dtype=torch.float32, device=device)
    action_high = torch.as_tensor(space.high if not discrete else 0, dtype=torch.float32, device=device)
    metric_names = ["policy_loss", "value_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac"]
    metrics = torch.zeros(len(metric_names), device=device)  # the last minibatch's, read when logging
    episodes = track_episodes("torch", n_envs, device, steps_per_read=num_steps)

    def env_step() -> None:
        """Act on `obs`, step the envs, store the whole transition at the step's slot."""
        normalized_obs = normalization.obs(obs, update=True)
        with torch.no_grad():
            action, logprob = agent.sample(normalized_obs, noise.index_select(0, step_index.view(1)).squeeze(0))
        env_action = action if discrete else action.clamp(action_low, action_high)  # the env gets a valid action
        next_obs, reward, terminated, truncated, infos = envs.step(env_action)
        step = EnvStep(reward, terminated.float(), truncated.float(), infos["final_obs"], next_obs)
        reward = normalization.reward(reward, step.terminated)  # gymnasium's NormalizeReward, when on
        for storage, value in ((obs_buf, normalized_obs), (actions, action), (logprobs, logprob), (rewards, reward),
                               (ended, torch.maximum(step.terminated, step.truncated)), (truncated_at, step.truncated),
                               (final_obs_buf, normalization.obs(step.final_obs, update=False))):
            put(storage, step_index, value)
        obs.copy_(step.next_obs)
        episodes.record(infos)
        step_index.add_(1)

    def finish_rollout() -> None:
        """The rollout's values, GAE and every epoch's minibatch order."""
        step_index.zero_()
        with torch.no_grad():  # the parameters did not change during the rollout: one batched pass
            values.copy_(agent.value(obs_buf))
            next_value = agent.value(normalization.obs(obs, update=False))
            # Truncation is not termination: bootstrap through a time limit with the value of the state reached.
            bootstrap = args.gamma * agent.value(final_obs_buf) * truncated_at
        next_values = torch.cat([values[1:], next_value.unsqueeze(0)])
        not_ended = 1 - ended
        deltas = rewards + bootstrap + args.gamma * next_values * not_ended - values
        gae = reverse_scan(deltas, args.gamma * args.gae_lambda * not_ended)
        advantages.copy_(gae.flatten())
        returns.copy_((gae + values).flatten())
        permutations.copy_(torch.rand(args.update_epochs, batch_size, device=device).argsort(dim=1))

    b_obs, b_actions = obs_buf.view(batch_size, obs_dim), actions.view(batch_size, *action_shape)
    b_logprobs, b_values = logprobs.view(batch_size), values.view(batch_size)
    params = list(agent.parameters())

    def update(mb: torch.Tensor) -> None:
        newlogprob, entropy, newvalue = agent.evaluate(b_obs[mb], b_actions[mb])
        logratio = newlogprob - b_logprobs[mb]
        ratio = logratio.exp()
        mb_advantages = advantages[mb]
        if args.norm_adv:
            mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
        pg_loss = torch.max(-mb_advantages * ratio,
                            -mb_advantages * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
        mb_returns, mb_values = returns[mb], b_values[mb]
        if args.clip_vloss:
            v_clipped = mb_values + (newvalue - mb_values).clamp(-args.clip_coef, args.clip_coef)
            v_loss = 0.5 * torch.max((newvalue - mb_returns).pow(2), (v_clipped - mb_returns).pow(2)).mean()
        else:
            v_loss = 0.5 * (newvalue - mb_returns).pow(2).mean()
        entropy_loss = entropy.mean()
        loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
        optimizer.zero_grad()
        loss.backward()
        if world > 1:
            average_gradients(params, world)
        nn.utils.clip_grad_norm_(params, args.max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            metrics.copy_(torch.stack([pg_loss, v_loss, entropy_loss, (-logratio).mean(),
                                       ((ratio - 1) - logratio).mean(),
                                       ((ratio - 1).abs() > args.clip_coef).float().mean()]))

    def iteration_on_device() -> None:
        for _ in range(num_steps):
            env_step()
        finish_rollout()
        draw_noise_(noise, discrete)
        for minibatch in minibatches:
            update(minibatch)

    # TRY NOT TO MODIFY: the execution path (common/paths.py): compile the math, capture what the loop calls.
    # Compiled as one function, an env step's policy, dynamics, autoreset and storage writes fuse into a few kernels.
    env_step, finish_rollout, update = path.compile(env_step), path.compile(finish_rollout), path.compile(update)
    iteration_on_device = path.capture(iteration_on_device)

    # TRY NOT TO MODIFY: checkpoints and resume
    checkpoints = Checkpoints(
        args, logger, "ppo_device_envs",
        modules={"agent": agent, "optimizer": optimizer, "normalization": normalization, "episodes": episodes},
        tensors={"obs": obs, "noise": noise})
    recent_returns: collections.deque = collections.deque(maxlen=100)
    start_iteration, global_step = 0, 0
    if args.resume:
        check(world == 1, "--resume continues single-process runs; launch it without torchrun")
        envs, saved = checkpoints.resume(envs, link=None)
        recent_returns.extend(saved["recent_returns"])
        start_iteration, global_step = saved["iteration"], saved["global_step"]
    else:
        obs.copy_(envs.reset(seed=args.seed + rank)[0])
        draw_noise_(noise, discrete)  # the first rollout's

    def counters() -> dict:
        return {"iteration": next_iteration, "global_step": global_step, "recent_returns": list(recent_returns)}

    log_interval = max(1, args.log_every // (args.update_epochs * args.num_minibatches))  # in iterations
    next_iteration, completed, stopping = start_iteration, False, False
    try:
        for iteration in range(start_iteration, num_iterations):
            if args.anneal_lr:
                lr.fill_(args.learning_rate * (1 - iteration / num_iterations))
            iteration_on_device()  # rollout, GAE, every epoch of updates
            finished = episodes.read()  # those that ended in the previous iteration, read while this one runs
            episodes.copy()
            recent_returns.extend(episodic_return for episodic_return, _ in finished)
            global_step += rollout
            next_iteration = iteration + 1
            logger.log_episodes(global_step, finished)
            logger.progress(global_step)
            if iteration % log_interval == 0:
                logger.log(global_step, learning_rate=lr.item(), **dict(zip(metric_names, metrics.tolist(),
                                                                            strict=True)))
            # Every rank's newest episodes, and whether any rank stops (Ctrl-C, a non-finite loss): the same
            # answers on every rank, so all of them stop at the same iteration.
            returns_sum, returns_count, stopping = sum_over_ranks(
                [sum(recent_returns), len(recent_returns), logger.stop.requested], world, device)
            mean_return = returns_sum / returns_count if returns_count else float("nan")
            if world > 1 and iteration % log_interval == 0:
                logger.log(global_step, mean_return_all_ranks=mean_return)
            if (args.stop_at_return is not None and len(recent_returns) == recent_returns.maxlen
                    and mean_return >= args.stop_at_return):
                logger.log(global_step, solved_seconds=logger.elapsed())
                break
            if rank == 0 and checkpoints.due(global_step, rollout):
                checkpoints.save_periodic(envs, None, counters())
            if stopping:  # Ctrl-C or a non-finite loss on any rank: every rank stops here
                break
        if not stopping:  # a stopped run's stay in its checkpoint, for the resumed run to log
            logger.log_episodes(global_step, episodes.read())  # the last iteration's
        if args.save_model and rank == 0:
            checkpoints.save("ppo_device_envs.pt", envs, None, counters())
            policy = DeterministicPolicy(agent, normalization.frozen_obs(), space)
            export_policy(policy, obs_dim, os.path.join(logger.dir, "ppo_device_envs.pt2"))
        completed = True
    finally:
        envs.close()
        extra = {"rank_param_max_diff": leave_distributed(params)} if completed and world > 1 else {}
        summary = logger.close(checkpoint=checkpoints.last, **extra)
    return summary


if __name__ == "__main__":
    cli(main, Args)
