"""Recurrent PPO on gymnasium envs, in four execution paths. The act step is captured as in algos/ppo.py (the
envs' answer in, the next action out) and the learning phase (GAE, every epoch of sequence minibatches) is one
captured function. On the torch classic-control envs, algos/ppo_lstm_device_envs.py makes the whole iteration,
physics included, one graph.

The algorithm is CleanRL's ppo_atari_lstm.py for vector observations: the LSTM state is carried through the
rollout and zeroed where an episode starts; a minibatch is a set of whole env sequences, and the update re-runs
the LSTM over each of them from the state stored at the rollout's start (backpropagation through the whole
rollout).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import gymnasium as gym
import torch
from torch import nn

from turborl.checkpoints import Checkpoints, export_policy
from turborl.cli import RunArgs, check, check_ppo_args, check_run_args, cli, pick_device, seed_everything
from turborl.envs import action_space, final_observations, make_env, track_episodes
from turborl.link import EnvLink, EnvStep
from turborl.logger import RunLogger
from turborl.numerics import Normalization, draw_noise_, put, reverse_scan
from turborl.paths import ExecutionPath


@dataclass
class Args(RunArgs):
    env_id: str = "CartPole-v1"
    """gymnasium id (Discrete or Box actions, flat Box observations)"""
    seed: int = 1
    """seed of the run (torch, env)"""
    total_timesteps: int | None = None
    """environment steps of the whole run (none: 500k discrete, 1M continuous)"""
    learning_rate: float | None = None
    """Adam learning rate (none: 2.5e-4 discrete, 3e-4 continuous)"""
    num_envs: int | None = None
    """parallel environments (none: 8 discrete, 16 continuous)"""
    num_steps: int = 128
    """steps per env per rollout: the length of the sequences the update backpropagates through"""
    lstm_size: int = 128
    """units of each LSTM (the actor's and the critic's)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    num_minibatches: int = 4
    """minibatches per epoch, each num-envs / num-minibatches whole env sequences"""
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
    normalize: bool = True
    """normalize observations and rewards with running statistics"""
    async_envs: bool = False
    """step envs in subprocesses (for simulators slower than a subprocess round trip)"""


# CleanRL's ppo.py / ppo_continuous_action.py choices, except: the env counts (a minibatch here is whole env
# sequences, so there must be at least one env per minibatch); for discrete actions a learning rate of 1e-3 and
# normalization on (algos/ppo_lstm_device_envs.py's, chosen on CartPole without velocities).
DISCRETE_DEFAULTS = dict(total_timesteps=500_000, learning_rate=1e-3, num_envs=8, update_epochs=4,
                         ent_coef=0.01)
CONTINUOUS_DEFAULTS = dict(total_timesteps=1_000_000, learning_rate=3e-4, num_envs=16, update_epochs=10,
                           ent_coef=0.0)


def layer(n_in: int, n_out: int, std: float = math.sqrt(2), bias: bool = True) -> nn.Linear:
    linear = nn.Linear(n_in, n_out, bias=bias)
    nn.init.orthogonal_(linear.weight, std)
    if bias:
        nn.init.zeros_(linear.bias)
    return linear


class Agent(nn.Module):
    """An actor and a critic, each an encoder (64 tanh units) and an LSTM, CleanRL's initialization. Separate, as
    the MLP PPO's are: sharing one LSTM, the value loss (returns in the hundreds, without reward normalization)
    swamps the policy's gradient under the shared gradient-norm clip, and CartPole without velocities did not
    learn in 115k steps. Both LSTMs step as one: their states are the two halves of `h` and `c`.

    The LSTMs are written out rather than nn.LSTMCell: the input's share of the gates is one batched matmul over
    a whole sequence, and the two LSTMs' recurrent weights are stacked (2 x hidden x 4 hidden), so a step of the
    recurrence is one batched matmul for both and the gates' pointwise math, which torch.compile fuses; its
    backward, one batched matmul for the state's gradient and one for the weights'. The steps are sequential and
    their kernels small: the number of kernels per step sets the unroll's time on a GPU. Distributions are
    written out as in the other PPO scripts (no argument checks, no host syncs, one random draw per action)."""

    def __init__(self, obs_dim: int, n_out: int, discrete: bool, lstm_size: int):
        super().__init__()
        self.discrete, self.lstm_size = discrete, lstm_size
        self.actor_encoder = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 4 * lstm_size, 1.0))
        self.critic_encoder = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 4 * lstm_size, 1.0))
        # h_k @ recurrence[k]: layer k's weight, transposed (CleanRL's orthogonal initialization of each LSTM)
        self.recurrence = nn.Parameter(torch.stack([layer(lstm_size, 4 * lstm_size, 1.0, bias=False).weight.T
                                                    for _ in ("actor", "critic")]).detach().contiguous())
        self.actor = layer(lstm_size, n_out, 0.01)
        self.critic = layer(lstm_size, 1, 1.0)
        if not discrete:
            self.actor_logstd = nn.Parameter(torch.zeros(n_out))

    def gate_inputs(self, obs):
        """The input's share of both LSTMs' gates, for any leading dimensions (one step, or a whole sequence)."""
        return torch.cat([self.actor_encoder(obs), self.critic_encoder(obs)], -1)

    def cell(self, gate_input, h, c, first=None):
        """One step of both LSTMs: (h, c) after an input whose `gate_inputs` are given, from (h, c) zeroed where
        `first` is 1 (the input starts an episode); the actor's state is the first half of h and c, the critic's
        the second."""
        if first is not None:
            keep = (1 - first).unsqueeze(-1)
            h, c = h * keep, c * keep
        size = self.lstm_size
        recurrent = torch.bmm(h.unflatten(-1, (2, size)).transpose(0, 1), self.recurrence)  # 2 x batch x 4 size
        gates = gate_input.unflatten(-1, (2, 4 * size)) + recurrent.transpose(0, 1)  # batch x LSTM x gates
        i, f, g, o = gates.unflatten(-1, (4, size)).unbind(-2)  # per LSTM, gates i, f, g, o
        c = f.sigmoid() * c.unflatten(-1, (2, size)) + i.sigmoid() * g.tanh()
        return (o.sigmoid() * c.tanh()).flatten(-2), c.flatten(-2)

    def unroll(self, obs, first, h, c, cell):
        """Hidden states (steps x envs x 2 lstm size) over whole sequences of observations (steps x envs x obs),
        from the state (h, c), zeroed where `first` (steps x envs) marks an episode's start; `cell` runs one step
        (this module's, compiled). A Python loop over that one compiled step: compiled whole, the loop would unroll
        into a graph that takes minutes to compile. The sequence is unbound into steps rather than indexed step by
        step: the backward of each index writes a zero tensor the size of the whole sequence, T^2 memory traffic
        that made the update several times slower on the GPU."""
        hidden = []
        for gate_input, first_step in zip(self.gate_inputs(obs).unbind(0), first.unbind(0), strict=True):
            h, c = cell(gate_input, h, c, first_step)
            hidden.append(h)
        return torch.stack(hidden)

    def value(self, hidden):
        return self.critic(hidden[..., self.lstm_size:]).squeeze(-1)

    def sample(self, hidden, noise):
        """(action, its log-probability) from noise drawn beforehand: Gumbel noise for categorical (Gumbel-max),
        standard normal for the reparameterized Gaussian."""
        out = self.actor(hidden[..., :self.lstm_size])
        if self.discrete:
            logp = out.log_softmax(-1)
            action = (logp + noise).argmax(-1)
            return action, logp.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        action = out + self.actor_logstd.exp() * noise
        return action, self.gaussian_logp(out, action)

    def evaluate(self, hidden, action):
        """(log-probability of action, entropy, value) under the current parameters."""
        out = self.actor(hidden[..., :self.lstm_size])
        if self.discrete:
            logp = out.log_softmax(-1)
            entropy = -(logp.exp() * logp).sum(-1)
            return logp.gather(-1, action.unsqueeze(-1)).squeeze(-1), entropy, self.value(hidden)
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + self.actor_logstd).sum().expand(hidden.shape[0])
        return self.gaussian_logp(out, action), entropy, self.value(hidden)

    def deterministic(self, hidden):
        out = self.actor(hidden[..., :self.lstm_size])
        return out.argmax(-1) if self.discrete else out

    def gaussian_logp(self, mean, action):
        log_std = self.actor_logstd
        return (-0.5 * ((action - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


class DeterministicPolicy(nn.Module):
    """The exported policy: (raw observation batch, LSTM state h, c) in, (most likely action, next h, next c)
    out; h and c hold both LSTMs' states (2 x lstm size), the critic's half unused by the action. Start each
    episode from zeros for h and c; observations are normalized with the run's final statistics and Gaussian
    means clipped to the action bounds."""

    def __init__(self, agent: Agent, normalize_obs: nn.Module, space: gym.Space):
        super().__init__()
        self.agent, self.normalize_obs = agent, normalize_obs
        if not agent.discrete:
            self.register_buffer("low", torch.as_tensor(space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(space.high, dtype=torch.float32))

    def forward(self, obs, h, c):
        h, c = self.agent.cell(self.agent.gate_inputs(self.normalize_obs(obs)), h, c)
        action = self.agent.deterministic(h)
        return (action if self.agent.discrete else torch.max(torch.min(action, self.high), self.low)), h, c


def resolve_defaults(args: Args) -> bool:
    """Fill the defaults chosen by the action space, check every value; returns whether actions are discrete."""
    check(args.env_backend == "gymnasium", f"--env-backend {args.env_backend!r}: this recurrent PPO steps gymnasium "
          "envs; on device envs (--env-backend torch) it is algos/ppo_lstm_device_envs.py")
    space = action_space(args.env_id, args.env_backend)
    check(isinstance(space, (gym.spaces.Discrete, gym.spaces.Box)),
          f"PPO needs Discrete or Box actions but {args.env_id} has {space}; pick e.g. CartPole-v1 or Pendulum-v1")
    discrete = isinstance(space, gym.spaces.Discrete)
    for name, value in (DISCRETE_DEFAULTS if discrete else CONTINUOUS_DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    check_ppo_args(args, whole_sequences=True)
    check(args.lstm_size > 0, f"--lstm-size must be positive (got {args.lstm_size})")
    return discrete


def main(args: Args) -> dict:
    discrete = resolve_defaults(args)
    check_run_args(args)
    device = pick_device(args.cuda)
    path = ExecutionPath(args, device)
    seed_everything(args.seed)
    envs = make_env(args.env_id, args.num_envs, args.seed, algo="PPO", capture_video=args.capture_video,
                    asynchronous=args.async_envs)
    obs_space, space = envs.single_observation_space, envs.single_action_space
    n_envs, num_steps, obs_dim = args.num_envs, args.num_steps, obs_space.shape[0]
    batch_size, envs_per_minibatch = n_envs * num_steps, n_envs // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size  # whole rollouts (CleanRL's rounding)
    logger = RunLogger(args, "ppo_lstm", num_iterations * batch_size, device, run_root=args.runs_dir, envs=envs)
    action_shape, n_out = ((), int(space.n)) if discrete else (space.shape, space.shape[0])  # n_out: policy outputs

    # ALGO LOGIC: the agent, its optimizer, the recurrent state, the rollout storage and normalization statistics
    agent = Agent(obs_dim, n_out, discrete, args.lstm_size).to(device)
    lr = torch.tensor(args.learning_rate, device=device)  # annealed in place: the graphs read it
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5,
                                 capturable=path.capturable_with_lr_tensor, fused=path.fused)
    obs = torch.zeros(n_envs, obs_dim, device=device)  # what the next action is chosen on
    first = torch.ones(n_envs, device=device)  # obs is the first of its episode: the LSTM starts from zeros
    # Both LSTMs' states (the actor's, the critic's) before acting on obs
    lstm_h, lstm_c = (torch.zeros(n_envs, 2 * args.lstm_size, device=device) for _ in range(2))
    initial_h, initial_c = torch.zeros_like(lstm_h), torch.zeros_like(lstm_c)  # at the rollout's start
    obs_buf = torch.zeros(num_steps, n_envs, obs_dim, device=device)
    first_buf = torch.zeros(num_steps, n_envs, device=device)
    actions = torch.zeros(num_steps, n_envs, *action_shape, dtype=torch.long if discrete else torch.float32,
                          device=device)
    logprobs, values, rewards = (torch.zeros(num_steps, n_envs, device=device) for _ in range(3))
    ended = torch.zeros(num_steps, n_envs, device=device)  # the episode ended after this step
    bootstrap = torch.zeros(num_steps, n_envs, device=device)  # discounted value of a state cut by a time limit
    noise = torch.zeros(num_steps, n_envs, n_out, device=device)  # the rollout's sampling noise, drawn before it
    advantages, returns = torch.zeros(num_steps, n_envs, device=device), torch.zeros(num_steps, n_envs, device=device)
    env_orders = torch.zeros(args.update_epochs, n_envs, dtype=torch.long, device=device)
    minibatches = env_orders.view(-1, envs_per_minibatch)  # every epoch's minibatches of envs, in order
    step_index = torch.zeros((), dtype=torch.long, device=device)
    normalization = Normalization(args.normalize, (obs_dim,), n_envs, args.gamma, device)
    action_low = torch.as_tensor(space.low if not discrete else 0, dtype=torch.float32, device=device)
    action_high = torch.as_tensor(space.high if not discrete else 0, dtype=torch.float32, device=device)
    metric_names = ["policy_loss", "value_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac"]
    metrics = torch.zeros(len(metric_names), device=device)  # the last minibatch's, read when logging
    episodes = track_episodes("gymnasium", n_envs, device)

    def record(step: EnvStep) -> None:
        """Store the envs' answer to the last action at its slot; take the next obs and whether it starts an episode."""
        slot = step_index - 1
        terminated, truncated = step.terminated.float(), step.truncated.float()
        with torch.no_grad():  # a time limit is not a termination: bootstrap with the value of the state reached
            final_h, _ = agent.cell(agent.gate_inputs(normalization.obs(step.final_obs, update=False)), lstm_h, lstm_c)
            put(bootstrap, slot, args.gamma * agent.value(final_h) * truncated)
        episode_ended = torch.maximum(terminated, truncated)
        put(rewards, slot, normalization.reward(step.reward, terminated))  # gymnasium's NormalizeReward, if on
        put(ended, slot, episode_ended)
        obs.copy_(step.next_obs)
        first.copy_(episode_ended)

    def store_and_act(step: EnvStep, first_of_rollout: bool) -> torch.Tensor:
        """On the device: store the envs' answer to the last action (the rollout's last is stored by
        `finish_rollout`); act on the next obs with the carried LSTM states, and store the obs, whether it starts
        an episode, the action, its log-probability and value at the step's slot."""
        if first_of_rollout:
            obs.copy_(step.next_obs)
        else:
            record(step)
        normalized_obs = normalization.obs(obs, update=True)
        with torch.no_grad():
            h, c = agent.cell(agent.gate_inputs(normalized_obs), lstm_h, lstm_c, first)
            action, logprob = agent.sample(h, noise.index_select(0, step_index.view(1)).squeeze(0))
            value = agent.value(h)
        for storage, stored in ((obs_buf, normalized_obs), (first_buf, first), (actions, action),
                                (logprobs, logprob), (values, value)):
            put(storage, step_index, stored)
        lstm_h.copy_(h)
        lstm_c.copy_(c)
        step_index.add_(1)
        return action if discrete else action.clamp(action_low, action_high)  # the env gets a valid action

    def finish_rollout(last: EnvStep) -> None:
        """The answer to the rollout's last action, GAE over the rollout and every epoch's order of envs."""
        record(last)
        step_index.zero_()
        with torch.no_grad():
            h, _ = agent.cell(agent.gate_inputs(normalization.obs(obs, update=False)), lstm_h, lstm_c, first)
            next_value = agent.value(h)
        next_values = torch.cat([values[1:], next_value.unsqueeze(0)])
        not_ended = 1 - ended
        deltas = rewards + bootstrap + args.gamma * next_values * not_ended - values
        gae = reverse_scan(deltas, args.gamma * args.gae_lambda * not_ended)
        advantages.copy_(gae)
        returns.copy_(gae + values)
        env_orders.copy_(torch.rand(args.update_epochs, n_envs, device=device).argsort(dim=1))

    def start_rollout() -> None:
        """Keep the LSTM state the rollout starts from (the updates re-run each sequence from it); draw the
        rollout's noise (outside compiled code, see draw_noise_)."""
        initial_h.copy_(lstm_h)
        initial_c.copy_(lstm_c)
        draw_noise_(noise, discrete)

    def update(envs_of_minibatch: torch.Tensor, hidden: torch.Tensor) -> None:
        """One clipped-PPO Adam step on whole env sequences, given the LSTM's hidden states over them."""
        def of_minibatch(storage):  # (steps x minibatch envs x ...) flattened to one batch
            return storage.index_select(1, envs_of_minibatch).flatten(0, 1)

        newlogprob, entropy, newvalue = agent.evaluate(hidden.flatten(0, 1), of_minibatch(actions))
        logratio = newlogprob - of_minibatch(logprobs)
        ratio = logratio.exp()
        mb_advantages = of_minibatch(advantages)
        if args.norm_adv:
            mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
        pg_loss = torch.max(-mb_advantages * ratio,
                            -mb_advantages * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
        mb_returns, mb_values = of_minibatch(returns), of_minibatch(values)
        if args.clip_vloss:
            v_clipped = mb_values + (newvalue - mb_values).clamp(-args.clip_coef, args.clip_coef)
            v_loss = 0.5 * torch.max((newvalue - mb_returns).pow(2), (v_clipped - mb_returns).pow(2)).mean()
        else:
            v_loss = 0.5 * (newvalue - mb_returns).pow(2).mean()
        entropy_loss = entropy.mean()
        loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            metrics.copy_(torch.stack([pg_loss, v_loss, entropy_loss, (-logratio).mean(),
                                       ((ratio - 1) - logratio).mean(),
                                       ((ratio - 1).abs() > args.clip_coef).float().mean()]))

    def learn(last: EnvStep) -> None:
        """The rollout's last answer, GAE, every epoch of sequence minibatches."""
        finish_rollout(last)
        for minibatch in minibatches:
            update(minibatch, agent.unroll(obs_buf.index_select(1, minibatch), first_buf.index_select(1, minibatch),
                                           initial_h.index_select(0, minibatch), initial_c.index_select(0, minibatch),
                                           lstm_cell))

    # TRY NOT TO MODIFY: the execution path (common/paths.py): compile the math, capture what the loop calls
    link = EnvLink(n_envs, obs_dim, action_shape, actions.dtype, device, envs_on_device=False)
    store_and_act, finish_rollout = path.compile(store_and_act), path.compile(finish_rollout)
    update, lstm_cell = path.compile(update), path.compile(agent.cell)  # the cell of each unroll
    act_first = path.capture(lambda: link.send_action(store_and_act(link.receive(), first_of_rollout=True)))
    store_and_act_step = path.capture(lambda: link.send_action(store_and_act(link.receive(), first_of_rollout=False)))
    learn_from_rollout = path.capture(lambda: learn(link.receive()))

    # TRY NOT TO MODIFY: checkpoints and resume
    checkpoints = Checkpoints(
        args, logger, "ppo_lstm",
        modules={"agent": agent, "optimizer": optimizer, "normalization": normalization, "episodes": episodes},
        tensors={"obs": obs, "first": first, "lstm_h": lstm_h, "lstm_c": lstm_c})
    start_iteration, global_step = 0, 0
    if args.resume:
        restored, saved = checkpoints.resume(envs, link)
        if restored is envs:  # envs that cannot be saved restart with fresh episodes: fresh LSTM states too
            first.fill_(1.0)
        envs = restored
        start_iteration, global_step = saved["iteration"], saved["global_step"]
    else:
        link.reset(envs.reset(seed=args.seed)[0])

    def counters() -> dict:
        return {"iteration": next_iteration, "global_step": global_step}

    log_interval = max(1, args.log_every // (args.update_epochs * args.num_minibatches))  # in iterations
    next_iteration = start_iteration
    try:
        for iteration in range(start_iteration, num_iterations):
            if args.anneal_lr:
                lr.fill_(args.learning_rate * (1 - iteration / num_iterations))
            start_rollout()
            for step in range(num_steps):
                (store_and_act_step if step else act_first)()  # on the device: store the last answer, act
                link.action_queued()
                next_obs, reward, terminated, truncated, infos = envs.step(link.action())
                global_step += n_envs
                link.send(EnvStep(reward, terminated, truncated, final_observations(next_obs, infos), next_obs))
                logger.log_episodes(global_step, episodes.after_step(infos))
                logger.progress(global_step)
            learn_from_rollout()  # the last answer, GAE, every epoch of sequence updates
            next_iteration = iteration + 1
            if iteration % log_interval == 0:
                logger.log(global_step, learning_rate=lr.item(), **dict(zip(metric_names, metrics.tolist(),
                                                                            strict=True)))
            if checkpoints.due(global_step, batch_size):
                checkpoints.save_periodic(envs, link, counters())
            if logger.stop.requested:  # Ctrl-C or a non-finite loss: stop where an iteration ends
                break
        if args.save_model:
            checkpoints.save("ppo_lstm.pt", envs, link, counters())
            policy = DeterministicPolicy(agent, normalization.frozen_obs(), space)
            export_policy(policy, obs_dim, os.path.join(logger.dir, "ppo_lstm.pt2"),
                          state_sizes=(2 * args.lstm_size,) * 2)
    finally:
        envs.close()
        summary = logger.close(checkpoint=checkpoints.last)
    return summary


if __name__ == "__main__":
    cli(main, Args)
