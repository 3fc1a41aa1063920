"""PPO on gymnasium envs (CleanRL's ppo.py and ppo_continuous_action.py in one file, same defaults) in four
execution paths: eager, --compile, --cudagraphs, both. PPO on envs that run on the device, where a whole
iteration is one graph, is algos/ppo_device_envs.py.

A Discrete action space gets a categorical policy and ppo.py's defaults (CartPole-v1); a Box action space a
Gaussian policy with a state-independent log-std and ppo_continuous_action.py's defaults, including observation
and reward normalization, done here on the device. Per env step `act` stores the envs' answer to the previous
action in the rollout storage on the device and samples the next action; the loop waits for nothing but the
action's copy to the host. Per rollout `finish_rollout` computes the values, GAE (a parallel reverse scan) and
every epoch's minibatch order on the device, and `update` takes one clipped-PPO Adam step per minibatch, with the
learning rate annealed through a device tensor.

The flag `--num-seeds N` trains N independent runs (seeds --seed ... --seed+N-1) with the kernels of one: every tensor
has a seeds axis (the rollout `[steps, seeds, envs, ...]`, a minibatch `[seeds, minibatch, ...]`), each layer is
one batched matmul over the seeds' weights, and the loss is the sum of the seeds' losses, so each seed's gradient
and Adam step are its own; gradients are clipped per seed (common/seeds.py). Seed i has its own envs (the i-th
block of the vector env), agent drawn from its own seed, normalization statistics, minibatch order and run folder.
With N = 1 the run draws the random numbers of a run without the axis, in the same order, and its losses agree
with that run's to float rounding (batched matmuls where it had plain ones).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import gymnasium as gym
import torch
from torch import nn

from turborl.checkpoints import Checkpoints, export_policy
from turborl.cli import OptionalFlag, RunArgs, check, check_ppo_args, check_run_args, cli, pick_device, seed_everything
from turborl.envs import action_space, final_observations, make_env, track_episodes
from turborl.link import EnvLink, EnvStep
from turborl.numerics import Normalization, draw_noise_, put, reverse_scan
from turborl.paths import ExecutionPath
from turborl.seeds import SeedLinear, SeedLoggers, check_num_seeds, seed_slice, seeded


@dataclass
class Args(RunArgs):
    env_id: str = "CartPole-v1"
    """gymnasium id (Discrete or Box actions, flat Box observations)"""
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
    normalize: bool | None = None
    """normalize observations and rewards with running statistics (none: off discrete, on continuous)"""
    async_envs: OptionalFlag = None
    """step the envs (every seed's) in subprocesses, one each, while the rollout waits (left out: where that was
    measured to pay, 5 envs or more of a costly simulator such as MuJoCo on 8 CPU cores or more; `False`: never)"""
    env_threads: int = 1
    """threads that step the envs (every seed's), each its share of them, while the rollout waits: MuJoCo lets go of
    Python's lock while it simulates, so a costly simulator's envs step side by side (0: one per env, at most one
    per CPU core; 1: in the loop's thread)"""
    num_seeds: int = 1
    """independent runs trained together, seeds --seed to --seed + N - 1: each has its own envs (--num-envs),
    agent, normalization statistics and run folder; one batched kernel serves all N"""


DISCRETE_DEFAULTS = dict(total_timesteps=500_000, learning_rate=2.5e-4, num_envs=4, num_steps=128,
                         num_minibatches=4, update_epochs=4, ent_coef=0.01, normalize=False)
CONTINUOUS_DEFAULTS = dict(total_timesteps=1_000_000, learning_rate=3e-4, num_envs=1, num_steps=2048,
                           num_minibatches=32, update_epochs=10, ent_coef=0.0, normalize=True)


def layer(n_in: int, n_out: int, std: float = math.sqrt(2)) -> SeedLinear:
    return SeedLinear(n_in, n_out, init=lambda linear: (nn.init.orthogonal_(linear.weight, std),
                                                         nn.init.zeros_(linear.bias)))


class Agent(nn.Module):
    """CleanRL's agent: separate 64-64 tanh actor and critic, on `[seeds, batch, obs]`. Distributions are written
    out (no torch.distributions): no argument checks, no host syncs, one random draw per action."""

    def __init__(self, obs_dim: int, n_out: int, discrete: bool):
        super().__init__()
        self.discrete = discrete
        self.critic = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0))
        self.actor = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, n_out, 0.01))
        if not discrete:
            self.actor_logstd = nn.Parameter(torch.zeros(1, 1, n_out))  # [seeds, 1, out]

    def value(self, obs):
        return self.critic(obs).squeeze(-1)

    def sample(self, obs, noise):
        """(action, its log-probability) from noise drawn beforehand: Gumbel noise for categorical (Gumbel-max),
        standard normal for the reparameterized Gaussian."""
        out = self.actor(obs)
        if self.discrete:
            logp = out.log_softmax(-1)
            action = (logp + noise).argmax(-1)
            return action, logp.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        action = out + self.actor_logstd.exp() * noise
        return action, self.gaussian_logp(out, action)

    def evaluate(self, obs, action):
        """(log-probability of action, entropy, value) under the current parameters."""
        out = self.actor(obs)
        if self.discrete:
            logp = out.log_softmax(-1)
            entropy = -(logp.exp() * logp).sum(-1)
            return logp.gather(-1, action.unsqueeze(-1)).squeeze(-1), entropy, self.value(obs)
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + self.actor_logstd).sum(-1).expand(obs.shape[:-1])
        return self.gaussian_logp(out, action), entropy, self.value(obs)

    def deterministic(self, obs):
        out = self.actor(obs)
        return out.argmax(-1) if self.discrete else out

    def gaussian_logp(self, mean, action):
        log_std = self.actor_logstd
        return (-0.5 * ((action - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


class DeterministicPolicy(nn.Module):
    """The exported policy of one seed: raw observation batch in (normalized with the run's final statistics), the
    most likely action out (argmax, or the Gaussian mean clipped to the action bounds)."""

    def __init__(self, agent: Agent, normalize_obs: nn.Module, space: gym.Space):
        super().__init__()
        self.agent, self.normalize_obs = agent, normalize_obs
        if not agent.discrete:
            self.register_buffer("low", torch.as_tensor(space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(space.high, dtype=torch.float32))

    def forward(self, obs):
        action = self.agent.deterministic(self.normalize_obs(obs).unsqueeze(0)).squeeze(0)  # a seeds axis of 1
        return action if self.agent.discrete else torch.max(torch.min(action, self.high), self.low)


def resolve_defaults(args: Args) -> bool:
    """Fill the defaults chosen by the action space, check every value; returns whether actions are discrete."""
    check(args.env_backend == "gymnasium", f"--env-backend {args.env_backend!r}: this PPO steps gymnasium envs; on "
          "device envs (--env-backend torch or mjwarp) PPO is algos/ppo_device_envs.py")
    space = action_space(args.env_id)
    check(isinstance(space, (gym.spaces.Discrete, gym.spaces.Box)),
          f"PPO needs Discrete or Box actions but {args.env_id} has {space}; pick e.g. CartPole-v1 or Pendulum-v1")
    discrete = isinstance(space, gym.spaces.Discrete)
    for name, value in (DISCRETE_DEFAULTS if discrete else CONTINUOUS_DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    check_ppo_args(args)
    check_num_seeds(args)
    return discrete


def clip_grad_norm_per_seed_(params: list[torch.Tensor], max_norm: float, n_seeds: int) -> None:
    """nn.utils.clip_grad_norm_ for each seed: the norm of a seed's gradients, over its blocks of every parameter."""
    grads = [param.grad for param in params]
    norms = torch.stack([grad.reshape(n_seeds, -1).norm(dim=1) for grad in grads]).norm(dim=0)  # [seeds]
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for grad in grads:
        grad.mul_(coef.view(-1, *[1] * (grad.dim() - 1)))


def main(args: Args) -> dict:
    discrete = resolve_defaults(args)
    check_run_args(args)
    device = pick_device(args.cuda)
    path = ExecutionPath(args, device)
    seed_everything(args.seed)
    n_seeds, n_envs, num_steps = args.num_seeds, args.num_envs, args.num_steps
    envs = make_env(args.env_id, n_seeds * n_envs, args.seed, algo="PPO", capture_video=args.capture_video,
                    asynchronous=args.async_envs, threads=args.env_threads)
    obs_space, space = envs.single_observation_space, envs.single_action_space
    obs_dim = obs_space.shape[0]
    batch_size, minibatch_size = n_envs * num_steps, n_envs * num_steps // args.num_minibatches  # per seed
    num_iterations = args.total_timesteps // batch_size  # whole rollouts (CleanRL's rounding)
    logger = SeedLoggers(args, "ppo", num_iterations * batch_size, device,
                         run_root=args.runs_dir, envs=envs)
    action_shape, n_out = ((), int(space.n)) if discrete else (space.shape, space.shape[0])  # n_out: policy outputs

    # ALGO LOGIC: the agent, its optimizer, the rollout storage and normalization statistics, on the device
    agent = seeded(args.seed, n_seeds, lambda: (Agent(obs_dim, n_out, discrete),))[0].to(device)
    lr = torch.tensor(args.learning_rate, device=device)  # annealed in place: the graphs read it
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5,
                                 capturable=path.capturable_with_lr_tensor, fused=path.fused)
    rollout = (num_steps, n_seeds, n_envs)  # the rollout's storage: [steps, seeds, envs, ...]
    obs_buf = torch.zeros(*rollout, obs_dim, device=device)
    actions = torch.zeros(*rollout, *action_shape, dtype=torch.long if discrete else torch.float32, device=device)
    logprobs = torch.zeros(rollout, device=device)
    values = torch.zeros(rollout, device=device)
    rewards = torch.zeros(rollout, device=device)
    ended = torch.zeros(rollout, device=device)  # the episode ended after this step
    truncated_at = torch.zeros(rollout, device=device)  # ... at a time limit
    final_obs_buf = torch.zeros(*rollout, obs_dim, device=device)  # normalized, for the bootstrap
    # The rollout's sampling noise, drawn in one go before it: the per-step `act` has no random op of its own.
    noise = torch.zeros(*rollout, n_out, device=device)
    advantages = torch.zeros(rollout, device=device)
    returns = torch.zeros(rollout, device=device)
    permutations = torch.zeros(args.update_epochs, n_seeds, batch_size, dtype=torch.long, device=device)
    # every epoch's minibatches, in order: [epochs, minibatches, seeds, minibatch], indices into a seed's rollout
    minibatches = permutations.unflatten(2, (args.num_minibatches, minibatch_size)).transpose(1, 2)
    seed_index = torch.arange(n_seeds, device=device).unsqueeze(1)
    step_index = torch.zeros((), dtype=torch.long, device=device)
    last_slot = torch.tensor(num_steps - 1, device=device)
    normalization = Normalization(args.normalize, (obs_dim,), n_envs, args.gamma, device, n_seeds=n_seeds)
    action_low = torch.as_tensor(space.low if not discrete else 0, dtype=torch.float32, device=device)
    action_high = torch.as_tensor(space.high if not discrete else 0, dtype=torch.float32, device=device)
    metric_names = ["policy_loss", "value_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac"]
    metrics = torch.zeros(len(metric_names), n_seeds, device=device)  # the last minibatch's, read when logging

    def record(slot, step: EnvStep):
        """Store the envs' answer (reward, episode end, state reached) to the action taken at `slot`."""
        put(rewards, slot, normalization.reward(step.reward, step.terminated))  # gymnasium's NormalizeReward, if on
        put(ended, slot, torch.maximum(step.terminated, step.truncated))
        put(truncated_at, slot, step.truncated)
        put(final_obs_buf, slot, normalization.obs(step.final_obs, update=False))

    def store_and_act(step: EnvStep, first_of_rollout: bool) -> torch.Tensor:
        """Store the answer to the previous action (the rollout's last is stored by `finish_rollout`), then sample
        the action for the next obs and store the obs, action and log-probability at the step's slot."""
        step = EnvStep(*(field.unflatten(0, (n_seeds, n_envs)) for field in step))  # [seeds, envs, ...]
        if not first_of_rollout:
            record(step_index - 1, step)
        obs = normalization.obs(step.next_obs, update=True)
        with torch.no_grad():
            action, logprob = agent.sample(obs, noise.index_select(0, step_index.view(1)).squeeze(0))
        put(obs_buf, step_index, obs)
        put(actions, step_index, action)
        put(logprobs, step_index, logprob)
        step_index.add_(1)
        action = action if discrete else action.clamp(action_low, action_high)  # the env gets a valid action
        return action.flatten(0, 1)  # [seeds x envs, ...], as the envs take it

    def finish_rollout(step: EnvStep) -> None:
        """The rollout's last answer, its values, GAE and every epoch's minibatch order."""
        step = EnvStep(*(field.unflatten(0, (n_seeds, n_envs)) for field in step))
        record(last_slot, step)
        step_index.zero_()
        with torch.no_grad():  # the parameters did not change during the rollout: one batched pass
            values.copy_(agent.value(obs_buf.transpose(0, 1)).transpose(0, 1))  # the agent takes seeds first
            next_value = agent.value(normalization.obs(step.next_obs, update=False))
            # Truncation is not termination: bootstrap through a time limit with the value of the state reached.
            bootstrap = args.gamma * agent.value(final_obs_buf.transpose(0, 1)).transpose(0, 1) * truncated_at
        next_values = torch.cat([values[1:], next_value.unsqueeze(0)])
        not_ended = 1 - ended
        deltas = rewards + bootstrap + args.gamma * next_values * not_ended - values
        gae = reverse_scan(deltas, args.gamma * args.gae_lambda * not_ended)
        advantages.copy_(gae)
        returns.copy_(gae + values)
        permutations.copy_(torch.rand(args.update_epochs, n_seeds, batch_size, device=device).argsort(dim=2))

    params = list(agent.parameters())

    def update(mb: torch.Tensor) -> None:
        at = (mb // n_envs, seed_index, mb % n_envs)  # mb: [seeds, minibatch] samples b of a seed's steps x envs
        newlogprob, entropy, newvalue = agent.evaluate(obs_buf[at], actions[at])  # [seeds, minibatch, ...]
        logratio = newlogprob - logprobs[at]
        ratio = logratio.exp()
        mb_advantages = advantages[at]  # [seeds, minibatch]; every mean below is over a seed's minibatch
        if args.norm_adv:
            mb_advantages = (mb_advantages - mb_advantages.mean(1, keepdim=True)) / (
                mb_advantages.std(1, keepdim=True) + 1e-8)
        pg_loss = torch.max(-mb_advantages * ratio,
                            -mb_advantages * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean(1)
        mb_returns, mb_values = returns[at], values[at]
        if args.clip_vloss:
            v_clipped = mb_values + (newvalue - mb_values).clamp(-args.clip_coef, args.clip_coef)
            v_loss = 0.5 * torch.max((newvalue - mb_returns).pow(2), (v_clipped - mb_returns).pow(2)).mean(1)
        else:
            v_loss = 0.5 * (newvalue - mb_returns).pow(2).mean(1)
        entropy_loss = entropy.mean(1)
        loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef  # [seeds]
        optimizer.zero_grad()
        loss.sum().backward()  # the seeds' losses summed: each seed's gradient comes from its own loss alone
        clip_grad_norm_per_seed_(params, args.max_grad_norm, n_seeds)
        optimizer.step()
        with torch.no_grad():
            metrics.copy_(torch.stack([pg_loss, v_loss, entropy_loss, (-logratio).mean(1),
                                       ((ratio - 1) - logratio).mean(1),
                                       ((ratio - 1).abs() > args.clip_coef).float().mean(1)]))

    # TRY NOT TO MODIFY: the execution path (common/paths.py): compile the math, capture what the loop calls
    link = EnvLink(n_seeds * n_envs, obs_dim, action_shape, actions.dtype, device, envs_on_device=False)
    store_and_act, finish_rollout = path.compile(store_and_act), path.compile(finish_rollout)
    update = path.compile(update)
    act_first = path.capture(lambda: link.send_action(store_and_act(link.receive(), first_of_rollout=True)))
    store_and_act_step = path.capture(lambda: link.send_action(store_and_act(link.receive(), first_of_rollout=False)))
    finish = path.capture(lambda: finish_rollout(link.receive()))
    update = path.capture(update)

    # TRY NOT TO MODIFY: episodes, checkpoints and resume
    episodes = track_episodes("gymnasium", n_seeds * n_envs, device, envs_per_seed=n_envs)
    checkpoints = Checkpoints(
        args, logger, "ppo",
        modules={"agent": agent, "optimizer": optimizer, "normalization": normalization},
        tensors={"step_index": step_index, "noise": noise})
    start_iteration, global_step = 0, 0
    if args.resume:
        envs, saved = checkpoints.resume(envs, link)
        start_iteration, global_step = saved["iteration"], saved["global_step"]
    else:
        link.reset(envs.reset(seed=args.seed)[0])
        draw_noise_(noise, discrete)  # the first rollout's

    def counters() -> dict:
        return {"iteration": next_iteration, "global_step": global_step}

    log_interval = max(1, args.log_every // (args.update_epochs * args.num_minibatches))  # in iterations
    next_iteration = start_iteration
    try:
        for iteration in range(start_iteration, num_iterations):
            if args.anneal_lr:
                lr.fill_(args.learning_rate * (1 - iteration / num_iterations))
            for step in range(num_steps):
                (store_and_act_step if step else act_first)()  # on the device: store the last answer, act
                link.action_queued()
                next_obs, reward, terminated, truncated, infos = envs.step(link.action())
                global_step += n_envs
                link.send(EnvStep(reward, terminated, truncated, final_observations(next_obs, infos), next_obs))
                logger.log_episodes(global_step, episodes.after_step(infos))
                logger.progress(global_step)
            finish()  # the last answer, values, GAE and the minibatch order, on the device
            draw_noise_(noise, discrete)  # the next rollout's
            for epoch in minibatches:
                for minibatch in epoch:
                    update(minibatch)
            if iteration % log_interval == 0:
                logger.log(global_step, learning_rate=[lr.item()] * n_seeds,
                           **dict(zip(metric_names, metrics.tolist(), strict=True)))
            next_iteration = iteration + 1
            if checkpoints.due(global_step, batch_size):
                checkpoints.save_periodic(envs, link, counters())
            if logger.stop.requested:  # Ctrl-C or a non-finite loss: stop where an iteration ends, not mid-rollout
                break
        if args.save_model:
            checkpoints.save("ppo.pt", envs, link, counters())  # all seeds, in seed 0's folder
            for i, seed_logger in enumerate(logger.loggers):
                policy = DeterministicPolicy(seed_slice(agent, i, n_seeds), normalization.frozen_obs(i), space)
                export_policy(policy, obs_dim, os.path.join(seed_logger.dir, "ppo.pt2"))
    finally:
        envs.close()
        summary = logger.close(checkpoint=checkpoints.last)
    return summary


if __name__ == "__main__":
    cli(main, Args)
