"""PPO (CleanRL's ppo.py and ppo_continuous_action.py in one file, same defaults) with four paths.

A Discrete action space gets a categorical policy and ppo.py's defaults (CartPole-v1); a Box action space gets
a Gaussian policy with a state-independent log-std and ppo_continuous_action.py's defaults, including
observation and reward normalization, done here on device. Per env step one hot function stores the previous
step's reward into the preallocated rollout storage and samples the next action (`act`); the action's copy to
the host is the only thing the CPU waits for. With torch envs (`--env-backend torch`) the env step joins that
function and the whole iteration is captured as one graph. Per iteration `finish` computes GAE as a parallel
reverse scan, the values it needs (batched over the rollout: no critic on the per-step path) and the minibatch
permutations, all on device, and the next rollout's sampling noise is drawn; then `update` takes one
clipped-PPO Adam step per minibatch, with the learning rate annealed through a device tensor. Captured, an env
step is one graph launch and all of the learning from a rollout is another.
"""

from __future__ import annotations

import collections
import math
import os
from dataclasses import dataclass

import gymnasium as gym
import torch
from torch import nn

from common import (
    Checkpoints,
    DeviceLink,
    HostLink,
    RunArgs,
    RunLogger,
    SilentLogger,
    accelerate,
    action_space,
    check,
    check_run_args,
    cli,
    compiled,
    export_policy,
    final_observations,
    floor_us,
    init_distributed,
    is_cheap,
    leave_distributed,
    make_env,
    pick_device,
    resolve_cudagraphs,
    seed_everything,
    track_episodes,
)


@dataclass
class Args(RunArgs):
    env_id: str = "CartPole-v1"
    """gymnasium id (Discrete or Box actions, flat Box observations)"""
    seed: int = 1
    """seed of the run (torch, numpy, env)"""
    total_timesteps: int | None = None
    """environment steps of the whole run (default: 500k discrete, 1M continuous)"""
    learning_rate: float | None = None
    """Adam learning rate (default: 2.5e-4 discrete, 3e-4 continuous)"""
    num_envs: int | None = None
    """parallel environments (default: 4 discrete, 1 continuous)"""
    num_steps: int | None = None
    """steps per env per rollout (default: 128 discrete, 2048 continuous)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    num_minibatches: int | None = None
    """minibatches per epoch (default: 4 discrete, 32 continuous)"""
    update_epochs: int | None = None
    """epochs over each rollout (default: 4 discrete, 10 continuous)"""
    norm_adv: bool = True
    """normalize advantages per minibatch"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient"""
    clip_vloss: bool = True
    """clip the value loss too"""
    ent_coef: float | None = None
    """entropy bonus coefficient (default: 0.01 discrete, 0.0 continuous)"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """gradient clipping norm"""
    normalize: bool | None = None
    """normalize observations and rewards with running statistics (default: off discrete, on continuous)"""
    async_envs: bool | None = None
    """step envs in subprocesses (default: on when there are several envs of a costly simulator)"""
    stop_at_return: float | None = None
    """stop once the mean return of the last 100 episodes reaches this (time-to-solve benchmarks)"""
    tf32: bool = False
    """TensorFloat-32 matmuls on CUDA (JAX's default on recent GPUs): big-batch updates run on tensor cores, with
    products rounded to a 10-bit mantissa"""
    bf16: bool = False
    """the learning's big-batch passes (values for GAE, minibatch updates) run their hidden layers in bfloat16
    (autocast; output layers, losses and Adam stay float32): those passes are bound by memory bandwidth, and
    this halves the bytes of their activations, at bfloat16's 8-bit mantissa. Acting stays float32."""


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
    """CleanRL's agent: separate 64-64 tanh actor and critic. Distributions are written out (no
    torch.distributions): no argument checks, no host syncs, one random draw per action."""

    def __init__(self, obs_dim: int, n_out: int, discrete: bool, bf16: bool = False):
        super().__init__()
        self.discrete, self.bf16 = discrete, bf16
        self.critic = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0))
        self.actor = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, n_out, 0.01))
        if not discrete:
            self.actor_logstd = nn.Parameter(torch.zeros(n_out))

    def run(self, net: nn.Sequential, obs):
        """`net` on a big batch; with bf16 its hidden layers compute and keep activations in bfloat16, and the
        output layer gets them back in float32 (a value's bfloat16 rounding would be 0.5 at returns of 100)."""
        if not self.bf16:
            return net(obs)
        with torch.autocast(obs.device.type, torch.bfloat16):
            hidden = net[:-1](obs)
        return net[-1](hidden.float())

    def value(self, obs):
        return self.run(self.critic, obs).squeeze(-1)

    def sample(self, obs, noise):
        """(action, its log-probability) from noise drawn beforehand: Gumbel noise for categorical (Gumbel-max),
        standard normal for the reparameterized Gaussian. Always float32: a rollout's small batches are bound by
        launch latency, where bfloat16 would only add casts (with --tf32 the rollout's and the update's
        matmuls round differently anyway; the ratio's clipping at 1 +- clip_coef dwarfs either)."""
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

    def __init__(self, agent: Agent, obs_rms: RunningMeanStd | None, low=None, high=None):
        super().__init__()
        self.agent, self.normalize = agent, obs_rms is not None
        if obs_rms is not None:
            self.register_buffer("obs_mean", obs_rms.mean.clone())
            self.register_buffer("obs_var", obs_rms.var.clone())
        if low is not None:
            self.register_buffer("low", torch.as_tensor(low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(high, dtype=torch.float32))

    def forward(self, obs):
        if self.normalize:
            obs = ((obs - self.obs_mean) / torch.sqrt(self.obs_var + 1e-8)).clamp(-10, 10)
        action = self.agent.deterministic(obs)
        return action if self.agent.discrete else torch.max(torch.min(action, self.high), self.low)


class RunningMeanStd:
    """Running mean and variance on device, updated in place (gymnasium's RunningMeanStd)."""

    def __init__(self, shape: tuple, device: torch.device):
        self.mean = torch.zeros(shape, device=device)
        self.var = torch.ones(shape, device=device)
        self.count = torch.full((), 1e-4, device=device)

    def update(self, x: torch.Tensor) -> None:
        batch_mean, batch_var, n = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta, total = batch_mean - self.mean, self.count + n
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.add_(n)

    def state_dict(self) -> dict:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        for name, tensor in self.state_dict().items():
            tensor.copy_(state[name])


def reverse_scan(x: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
    """y[t] = x[t] + coef[t] * y[t+1] (y past the end = 0) along dim 0, in log2(T) vectorized doubling steps
    (Hillis-Steele): each step folds in the segment `shift` further on, so no Python loop over time."""
    y, c = x, coef
    shift = 1
    while shift < x.shape[0]:
        y = torch.cat([y[:-shift] + c[:-shift] * y[shift:], y[-shift:]])
        c = torch.cat([c[:-shift] * c[shift:], c[-shift:]])
        shift *= 2
    return y


def mean_over_ranks(returns) -> float:
    """Mean of every rank's recent episode returns (a collective: every rank calls it at the same point)."""
    totals = torch.tensor([float(sum(returns)), float(len(returns))], dtype=torch.float64)
    if torch.distributed.get_backend() == "nccl":
        totals = totals.cuda()
    torch.distributed.all_reduce(totals)
    return (totals[0] / totals[1]).item() if totals[1] > 0 else float("nan")


def rank_param_max_diff(params) -> float:
    """Largest difference between this rank's parameters and rank 0's, over all ranks (0: in sync)."""
    flat = torch.cat([p.detach().flatten() for p in params])
    reference = flat.clone()
    torch.distributed.broadcast(reference, 0)
    diff = (flat - reference).abs().max()
    torch.distributed.all_reduce(diff, op=torch.distributed.ReduceOp.MAX)
    return diff.item()


def resolve_defaults(args: Args) -> bool:
    """Fill the defaults chosen by the action space, check every value; returns whether actions are discrete."""
    space = action_space(args.env_id, args.env_backend)
    check(isinstance(space, (gym.spaces.Discrete, gym.spaces.Box)),
          f"PPO needs Discrete or Box actions but {args.env_id} has {space}; pick e.g. CartPole-v1 or Pendulum-v1")
    discrete = isinstance(space, gym.spaces.Discrete)
    for name, value in (DISCRETE_DEFAULTS if discrete else CONTINUOUS_DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.async_envs is None:
        args.async_envs = args.num_envs > 1 and not is_cheap(args.env_id)
    for name in ("total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs"):
        check(getattr(args, name) > 0, f"--{name.replace('_', '-')} must be positive (got {getattr(args, name)})")
    check(args.learning_rate > 0, f"--learning-rate must be positive (got {args.learning_rate})")
    batch = args.num_envs * args.num_steps
    check(batch % args.num_minibatches == 0,
          f"--num-minibatches {args.num_minibatches} must divide num-envs x num-steps = {batch}")
    check(0 < args.gamma <= 1 and 0 <= args.gae_lambda <= 1, "--gamma must be in (0, 1], --gae-lambda in [0, 1]")
    check(args.clip_coef > 0 and args.max_grad_norm > 0, "--clip-coef and --max-grad-norm must be positive")
    check(args.total_timesteps >= batch,
          f"--total-timesteps {args.total_timesteps} is less than one rollout (num-envs x num-steps = {batch})")
    check(args.log_every >= 1, f"--log-every must be >= 1 (got {args.log_every})")
    return discrete


def main(args: Args) -> dict:
    check_run_args(args)
    discrete = resolve_defaults(args)
    # Under torchrun every rank runs its own envs and rollout; gradients are averaged before each step.
    rank, world, rank_device = init_distributed(args.cuda)
    device = rank_device or pick_device(args.cuda)
    cudagraphs = resolve_cudagraphs(args.cudagraphs, device)
    torch.set_float32_matmul_precision("high" if args.tf32 else "highest")
    seed_everything(args.seed + rank)
    envs = make_env(args.env_id, args.num_envs, args.seed + rank, algo="PPO", capture_video=args.capture_video,
                    video_dir=os.path.join(args.runs_dir, "videos"), asynchronous=args.async_envs,
                    backend=args.env_backend, device=str(device))
    obs_space = envs.single_observation_space
    check(isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1,
          f"PPO here takes flat Box observations but {args.env_id} has {obs_space}; pick e.g. CartPole-v1")
    logger = RunLogger(args, "ppo", args.total_timesteps, run_root=args.runs_dir) if rank == 0 else SilentLogger(args)
    n_envs, num_steps, obs_dim = args.num_envs, args.num_steps, obs_space.shape[0]
    batch_size = n_envs * num_steps
    minibatch_size = batch_size // args.num_minibatches
    space = envs.single_action_space
    action_shape = () if discrete else space.shape
    n_out = int(space.n) if discrete else space.shape[0]

    agent = Agent(obs_dim, n_out, discrete, args.bf16).to(device)
    if world > 1:  # every rank starts from rank 0's parameters
        for p in agent.parameters():
            torch.distributed.broadcast(p.data, 0)
    # The learning rate is a device tensor: annealing it in place is seen by captured graphs. Without compile,
    # capturable Adam (CUDA) reads it on device; with compile the compiled step does.
    lr = torch.tensor(args.learning_rate, device=device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5,
                                 capturable=device.type == "cuda" and not args.compile)

    # Rollout storage, normalization statistics and the step index: preallocated, updated in place.
    obs_buf = torch.zeros(num_steps, n_envs, obs_dim, device=device)
    actions = torch.zeros(num_steps, n_envs, *action_shape, dtype=torch.long if discrete else torch.float32,
                          device=device)
    logprobs = torch.zeros(num_steps, n_envs, device=device)
    values = torch.zeros(num_steps, n_envs, device=device)
    rewards = torch.zeros(num_steps, n_envs, device=device)
    ended = torch.zeros(num_steps, n_envs, device=device)  # the episode ended after this step
    truncated_at = torch.zeros(num_steps, n_envs, device=device)  # ... at a time limit
    reached_obs_buf = torch.zeros(num_steps, n_envs, obs_dim, device=device)  # normalized, for the bootstrap
    # The rollout's sampling noise, drawn in one go before it: the per-step act then has no random op, and its
    # graph replays without the RNG bookkeeping a random op adds (two more launches per step).
    noise = torch.zeros(num_steps, n_envs, n_out, device=device)
    advantages = torch.zeros(batch_size, device=device)
    returns = torch.zeros(batch_size, device=device)
    permutations = torch.zeros(args.update_epochs, batch_size, dtype=torch.long, device=device)
    step_index = torch.zeros((), dtype=torch.long, device=device)
    obs_rms, return_rms = RunningMeanStd((obs_dim,), device), RunningMeanStd((), device)
    discounted_return = torch.zeros(n_envs, device=device)
    if not discrete:
        action_low = torch.as_tensor(space.low, dtype=torch.float32, device=device)
        action_high = torch.as_tensor(space.high, dtype=torch.float32, device=device)

    last_slot = torch.tensor(num_steps - 1, device=device)

    def put(storage, index, value):
        """storage[index] = value for a 0-dim device index: plain indexing would read the index on the host."""
        storage.index_copy_(0, index.view(1), value.unsqueeze(0))

    def draw_noise():
        """The next rollout's noise. Called after `finish`, never inside it: compiled code may reorder two
        independent random ops (torch 2.11 does), and then the paths would draw different numbers."""
        if discrete:
            noise.copy_(-torch.log(-torch.log(torch.rand_like(noise))))
        else:
            noise.normal_()

    def normalize_obs(obs, update: bool):
        if not args.normalize:
            return obs
        if update:
            obs_rms.update(obs)
        return ((obs - obs_rms.mean) / torch.sqrt(obs_rms.var + 1e-8)).clamp(-10, 10)

    def record(slot, reward, terminated, truncated, reached_obs):
        """Store the env's answer (reward, episode end, state reached) to the action taken at `slot`."""
        if args.normalize:  # gymnasium's NormalizeReward: scale by the std of a discounted return, then clip
            discounted_return.copy_(discounted_return * args.gamma * (1 - terminated) + reward)
            return_rms.update(discounted_return)
            reward = (reward / torch.sqrt(return_rms.var + 1e-8)).clamp(-10, 10)
        put(rewards, slot, reward)
        put(ended, slot, torch.maximum(terminated, truncated))
        put(truncated_at, slot, truncated)
        put(reached_obs_buf, slot, normalize_obs(reached_obs, update=False))

    def act(obs: torch.Tensor) -> torch.Tensor:
        """Sample the action for `obs`; store the observation, action and log-probability at the step's slot."""
        obs = normalize_obs(obs, update=True)
        with torch.no_grad():
            action, logprob = agent.sample(obs, noise.index_select(0, step_index.view(1)).squeeze(0))
        put(obs_buf, step_index, obs)
        put(actions, step_index, action)
        put(logprobs, step_index, logprob)
        return action if discrete else action.clamp(action_low, action_high)  # the env gets a valid action

    on_device = args.env_backend == "torch"

    def finish(step_in: torch.Tensor) -> None:
        """The rollout's last reward (CPU envs), its values, GAE and every epoch's minibatch permutation."""
        if not on_device:  # the answer to the rollout's last action arrived after it
            record(last_slot, *HostLink.unpack(step_in, obs_dim)[1:5])
        step_index.zero_()
        with torch.no_grad():  # the parameters did not change during the rollout: one batched pass
            values.copy_(agent.value(obs_buf))
            next_value = agent.value(normalize_obs(HostLink.unpack(step_in, obs_dim)[-1], update=False))
            # Truncation is not termination: bootstrap through a time limit with the value of the state reached.
            bootstrap = args.gamma * agent.value(reached_obs_buf) * truncated_at
        next_values = torch.cat([values[1:], next_value.unsqueeze(0)])
        not_ended = 1 - ended
        deltas = rewards + bootstrap + args.gamma * next_values * not_ended - values
        gae = reverse_scan(deltas, args.gamma * args.gae_lambda * not_ended)
        advantages.copy_(gae.flatten())
        returns.copy_((gae + values).flatten())
        permutations.copy_(torch.rand(args.update_epochs, batch_size, device=device).argsort(dim=1))

    b_obs, b_actions = obs_buf.view(batch_size, obs_dim), actions.view(batch_size, *action_shape)
    b_logprobs, b_values = logprobs.view(batch_size), values.view(batch_size)

    def ppo_loss(mb: torch.Tensor):
        new_logprob, entropy, new_value = agent.evaluate(b_obs[mb], b_actions[mb])
        logratio = new_logprob - b_logprobs[mb]
        ratio = logratio.exp()
        mb_advantages = advantages[mb]
        if args.norm_adv:
            mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
        pg_loss = torch.max(-mb_advantages * ratio,
                            -mb_advantages * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
        mb_returns, mb_values = returns[mb], b_values[mb]
        if args.clip_vloss:
            clipped = mb_values + (new_value - mb_values).clamp(-args.clip_coef, args.clip_coef)
            v_loss = 0.5 * torch.max((new_value - mb_returns).pow(2), (clipped - mb_returns).pow(2)).mean()
        else:
            v_loss = 0.5 * (new_value - mb_returns).pow(2).mean()
        entropy_loss = entropy.mean()
        loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
        with torch.no_grad():
            stats = {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy_loss,
                     "old_approx_kl": (-logratio).mean(), "approx_kl": ((ratio - 1) - logratio).mean(),
                     "clipfrac": ((ratio - 1).abs() > args.clip_coef).float().mean()}
        return loss, {k: v.detach() for k, v in stats.items()}

    def clip_and_step():
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()

    # Compiled: the loss (forward and backward) and the clipped optimizer step; the backward call stays outside
    # compiled code (torch 2.11 fails on compiled functions that call backward). `update` is captured whole.
    ppo_loss, clip_and_step = compiled(ppo_loss, args.compile), compiled(clip_and_step, args.compile)

    params = list(agent.parameters())

    def average_gradients():
        """One all-reduce of every gradient (with NCCL it is captured in the update's graph)."""
        flat = torch.cat([p.grad.flatten() for p in params])
        torch.distributed.all_reduce(flat)
        averaged = flat.div_(world).split([p.numel() for p in params])
        torch._foreach_copy_([p.grad for p in params], [g.view_as(p) for g, p in zip(averaged, params, strict=True)])

    def update(mb: torch.Tensor) -> dict:
        optimizer.zero_grad()
        loss, stats = ppo_loss(mb)
        loss.backward()
        if world > 1:
            average_gradients()
        clip_and_step()
        return stats

    # The parts are compiled; the functions that call them are captured whole. With envs on the device
    # (--env-backend torch) a whole iteration (rollout, GAE, every epoch of updates) is one function, one replay
    # per iteration. With CPU envs an env step (answer in, act, action out) is one and the learning from the
    # rollout (finish and every epoch of updates) is another, and the loop steps the envs in between.
    finish = compiled(finish, args.compile)
    draw_noise()  # the first rollout's

    def train_on_rollout() -> dict:
        stats = {}
        for epoch in range(args.update_epochs):
            for start in range(0, batch_size, minibatch_size):
                stats = update(permutations[epoch, start : start + minibatch_size])
        return stats

    def learn_from_rollout() -> dict:
        finish(link.pull())
        draw_noise()
        return train_on_rollout()

    def path(fn):
        return accelerate(fn, compile=False, cudagraphs=cudagraphs, device=device, compiled_inside=args.compile)

    # Torch envs: the episodes that end are gathered on the device and the host reads a copy once per iteration.
    episodes = track_episodes(args.env_backend, n_envs, device, steps_per_read=num_steps)
    if on_device:
        link = DeviceLink(n_envs, obs_dim, device)

        def env_step() -> None:
            """Act, step the envs and store the whole transition at the step's slot; only the next observation
            goes through the link."""
            action = act(HostLink.unpack(link.pull(), obs_dim)[-1])
            next_obs, env_rewards, terminations, truncations, infos = envs.step(action)
            record(step_index, env_rewards, terminations.float(), truncations.float(), infos["final_obs"])
            link.put_next_obs(next_obs)
            episodes.record(infos)
            step_index.add_(1)

        # Compiled as one function: the policy, the dynamics, autoreset, the storage writes (all at one slot) and
        # episode bookkeeping fuse into a few kernels (captured uncompiled, each op is a kernel of its own).
        env_step = compiled(env_step, args.compile)

        def whole_iteration() -> dict:
            for _ in range(num_steps):
                env_step()
            return learn_from_rollout()

        whole_iteration = path(whole_iteration)
    else:
        link = HostLink(n_envs, obs_dim, action_shape, torch.long if discrete else torch.float32, device)

        def act_on_answer(step_in: torch.Tensor, record_previous: bool) -> torch.Tensor:
            """The env's answer in: store it for the previous action (the rollout's first has none: `finish`
            stored the last rollout's), then act on the observation it carries."""
            _, *answer, obs = HostLink.unpack(step_in, obs_dim)
            if record_previous:
                record(step_index - 1, *answer)
            action = act(obs)
            step_index.add_(1)
            return action

        act_first = compiled(lambda step_in: act_on_answer(step_in, record_previous=False), args.compile)
        act_next = compiled(lambda step_in: act_on_answer(step_in, record_previous=True), args.compile)
        step_first = path(lambda: link.push(act_first(link.pull())))
        step_next = path(lambda: link.push(act_next(link.pull())))
        learn = path(learn_from_rollout)

    recent_returns: collections.deque = collections.deque(maxlen=100)
    # State carried from one iteration to the next (the rollout storage is refilled): saved for --resume.
    checkpoints = Checkpoints(
        args, logger.dir, "ppo", same=("env_id", "num_envs", "num_steps", "total_timesteps", "env_backend"),
        modules={"agent": agent, "optimizer": optimizer, "obs_rms": obs_rms, "return_rms": return_rms,
                 "episodes": episodes},
        tensors={"discounted_return": discounted_return, "step_index": step_index, "noise": noise})
    start_iteration, global_step = 0, 0
    if args.resume:
        check(world == 1, "--resume continues single-process runs; launch it without torchrun")
        envs, saved = checkpoints.resume(envs, link)
        optimizer.param_groups[0]["lr"] = lr  # the device tensor that annealing writes, not the loaded copy
        recent_returns.extend(saved["recent_returns"])
        start_iteration, global_step = saved["iteration"], saved["global_step"]
    else:
        link.first(envs.reset(seed=args.seed)[0])

    def counters() -> dict:
        return {"iteration": next_iteration, "global_step": global_step, "recent_returns": list(recent_returns)}

    def log_episodes(finished: list) -> None:
        logger.log_episodes(global_step, finished)
        recent_returns.extend(episodic_return for episodic_return, _ in finished)

    num_iterations = args.total_timesteps // (batch_size * world)  # the budget counts every rank's steps
    log_interval = max(1, args.log_every // (args.update_epochs * args.num_minibatches))  # in iterations
    next_iteration, completed = start_iteration, False
    try:
        for iteration in range(start_iteration, num_iterations):
            if args.anneal_lr:
                lr.fill_(args.learning_rate * (1 - iteration / num_iterations))
            if on_device:
                stats = whole_iteration()
                log_episodes(episodes.read())  # those that ended before this iteration, read while it runs
                global_step += batch_size * world
                episodes.copy()
                logger.progress(global_step)
            else:
                for step in range(num_steps):
                    (step_next if step else step_first)()
                    link.ready()
                    next_obs, env_rewards, terminations, truncations, infos = envs.step(link.wait())
                    global_step += n_envs * world
                    link.put(env_rewards, terminations, truncations, final_observations(next_obs, infos), next_obs)
                    log_episodes(episodes.after_step(infos))
                    logger.progress(global_step)
                stats = learn()
            if iteration == start_iteration + 3:  # every hot function compiled and captured
                logger.mark_steady(global_step)
            mean_recent = mean_over_ranks(recent_returns) if world > 1 else (
                sum(recent_returns) / len(recent_returns) if recent_returns else float("nan"))
            if iteration % log_interval == 0:
                logger.log(global_step, learning_rate=lr.item(), **{k: v.item() for k, v in stats.items()},
                           **({"mean_return_all_ranks": mean_recent} if world > 1 else {}))
            if (args.stop_at_return is not None and len(recent_returns) == recent_returns.maxlen
                    and mean_recent >= args.stop_at_return):  # the same decision on every rank
                logger.log(global_step, solved_seconds=logger.elapsed())
                break
            next_iteration = iteration + 1
            if rank == 0 and checkpoints.due(global_step, batch_size * world):
                checkpoints.save_periodic(envs, link, counters())
        log_episodes(episodes.read())  # any held back (torch envs: the last iteration's)
        completed = True
    finally:
        if args.save_model and rank == 0:
            checkpoints.save("ppo.pt", envs, link, counters())
            policy = DeterministicPolicy(agent, obs_rms if args.normalize else None,
                                         *((None, None) if discrete else (space.low, space.high)))
            export_policy(policy, obs_dim, os.path.join(logger.dir, "ppo.pt2"))
        envs.close()
        extra = {}
        if completed and args.measure_floor and logger.steady_step is not None:
            def iteration_on_device(_):
                if on_device:  # the env steps are on the device too: the floor is the whole iteration's replay
                    whole_iteration()
                    return
                step_first()
                for _ in range(num_steps - 1):
                    step_next()
                learn()

            extra["floor_us"] = floor_us(iteration_on_device, device, calls=3) / batch_size
        if completed and world > 1:
            extra["rank_param_max_diff"] = rank_param_max_diff(params)
            leave_distributed()
        summary = logger.close(run_dir=logger.dir, **extra)
    return summary


if __name__ == "__main__":
    cli(main, Args)
