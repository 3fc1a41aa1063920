"""PPO on Atari (CleanRL's ppo_atari_envpool.py: same setup and defaults) in four execution paths: eager,
--compile, --cudagraphs, both.

The envs are ale-py's C++ vector env: 84x84 grayscale frames, 4 stacked, 4 frames per action (max-pooled over
the last two), up to 30 no-op starts, FIRE on reset, an episode ended on every lost life (episodic life) while
the game goes on, rewards clipped to their sign for learning (the game's own score is what gets logged), no
sticky actions, games cut at 108,000 frames. Each step the stacked uint8 frames go to the device from pinned
memory and are scaled there; `store_and_act` (store the envs' answer, run the Nature CNN policy, send the action back)
is one captured call, as are `finish_rollout` (values, GAE, the epochs' minibatch order) and each minibatch
`update`. The games are two groups that take turns: while one group's games step in C++ threads, the policy
acts on the GPU for the other, so the policy's time hides behind the games' during a rollout.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
from torch import nn

from turborl.atari import FRAMES, FrameLink, check_atari_args, make_groups, receive, start_games
from turborl.checkpoints import Checkpoints, export_policy
from turborl.cli import RunArgs, check_ppo_args, check_run_args, cli, pick_device, seed_everything
from turborl.logger import RunLogger
from turborl.numerics import put, reverse_scan
from turborl.paths import ExecutionPath


@dataclass
class Args(RunArgs):
    env_id: str = "Breakout-v5"
    """Atari game in envpool's naming (Breakout-v5, Pong-v5, MsPacman-v5, ...), any ROM ale-py ships"""
    seed: int = 1
    """seed of the run (torch, numpy, env)"""
    total_timesteps: int = 10_000_000
    """environment steps of the whole run (an env step is 4 frames)"""
    learning_rate: float = 2.5e-4
    """Adam learning rate"""
    num_envs: int = 8
    """parallel games (even: two groups of them take turns)"""
    num_steps: int = 128
    """steps per env per rollout"""
    env_threads: int = 0
    """C++ threads that step the games, shared by the two groups (0: one per game, at most one per CPU core)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalize advantages per minibatch"""
    clip_coef: float = 0.1
    """surrogate clipping coefficient"""
    clip_vloss: bool = True
    """clip the value loss too"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """gradient clipping norm"""


def layer(module: nn.Module, std: float = math.sqrt(2)) -> nn.Module:
    nn.init.orthogonal_(module.weight, std)
    nn.init.zeros_(module.bias)
    return module


class Agent(nn.Module):
    """CleanRL's Atari agent: the Nature CNN shared by a categorical actor and a critic. Frames come in as uint8
    (0-255) and are scaled here, on the device."""

    def __init__(self, n_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            layer(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(), layer(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten(), layer(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU())
        self.actor = layer(nn.Linear(512, n_actions), 0.01)
        self.critic = layer(nn.Linear(512, 1), 1.0)

    def hidden(self, frames):
        return self.network(frames.float() / 255.0)

    def value(self, frames):
        return self.critic(self.hidden(frames)).squeeze(-1)

    def sample(self, frames, gumbel):
        """(action, its log-probability) by Gumbel-max with noise drawn beforehand."""
        logp = self.actor(self.hidden(frames)).log_softmax(-1)
        action = (logp + gumbel).argmax(-1)
        return action, logp.gather(-1, action.unsqueeze(-1)).squeeze(-1)

    def evaluate(self, frames, action):
        """(log-probability of action, entropy, value) under the current parameters."""
        hidden = self.hidden(frames)
        logp = self.actor(hidden).log_softmax(-1)
        entropy = -(logp.exp() * logp).sum(-1)
        return logp.gather(-1, action.unsqueeze(-1)).squeeze(-1), entropy, self.critic(hidden).squeeze(-1)


class GreedyPolicy(nn.Module):
    """The exported policy: stacked frames (float, 0-255) in, the most likely action out."""

    def __init__(self, agent: Agent):
        super().__init__()
        self.agent = agent

    def forward(self, frames):
        return self.agent.actor(self.agent.hidden(frames)).argmax(-1)


def check_args(args: Args) -> None:
    check_atari_args(args)
    check_ppo_args(args)


def main(args: Args) -> dict:
    check_args(args)
    check_run_args(args)
    n_envs, num_steps, group_size = args.num_envs, args.num_steps, args.num_envs // 2
    groups = make_groups(args.env_id, n_envs, args.env_threads)  # checks the game id first: no run folder if bad
    device = pick_device(args.cuda)
    path = ExecutionPath(args, device)
    seed_everything(args.seed)
    n_actions = int(groups[0].single_action_space.n)
    batch_size, minibatch_size = n_envs * num_steps, n_envs * num_steps // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size  # whole rollouts (CleanRL's rounding)
    logger = RunLogger(args, "ppo_atari", num_iterations * batch_size, device,
                       run_root=args.runs_dir)

    # ALGO LOGIC: the agent, its optimizer and the rollout storage (frames as uint8), on the device
    agent = Agent(n_actions).to(device)
    lr = torch.tensor(args.learning_rate, device=device)  # annealed in place: the graphs read it
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5,
                                 capturable=path.capturable_with_lr_tensor, fused=path.fused)
    obs_buf = torch.zeros(num_steps, n_envs, *FRAMES, dtype=torch.uint8, device=device)
    actions = torch.zeros(num_steps, n_envs, dtype=torch.long, device=device)
    logprobs, values, rewards = (torch.zeros(num_steps, n_envs, device=device) for _ in range(3))
    ended = torch.zeros(num_steps, n_envs, device=device)  # the episode ended after this step
    gumbel = torch.zeros(num_steps, n_envs, n_actions, device=device)  # the rollout's noise, drawn before it
    advantages, returns = torch.zeros(batch_size, device=device), torch.zeros(batch_size, device=device)
    permutations = torch.zeros(args.update_epochs, batch_size, dtype=torch.long, device=device)
    minibatches = permutations.view(-1, minibatch_size)  # every epoch's minibatches, in order
    step_index = torch.zeros(2, dtype=torch.long, device=device)  # each group's slot in the rollout
    last_slot = torch.tensor(num_steps - 1, device=device)
    metric_names = ["policy_loss", "value_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac"]
    metrics = torch.zeros(len(metric_names), device=device)  # the last minibatch's, read when logging
    links = [FrameLink(group_size, device) for _ in groups]

    def record(slot, group: int, reward, episode_ended):
        """Store a group's answer to the action taken at `slot`; the reward's sign is what is learned."""
        columns = slice(group * group_size, (group + 1) * group_size)
        put(rewards[:, columns], slot, reward.sign())
        put(ended[:, columns], slot, episode_ended)

    def store_and_act(frames, reward, episode_ended, group: int, first_of_rollout: bool) -> torch.Tensor:
        """Store the group's answer to its previous action (the rollout's last is stored by `finish_rollout`),
        then choose the action for `frames` and store the frames, action and log-probability at its slot."""
        slot, columns = step_index[group], slice(group * group_size, (group + 1) * group_size)
        if not first_of_rollout:
            record(slot - 1, group, reward, episode_ended)
        with torch.no_grad():
            action, logprob = agent.sample(frames, gumbel[:, columns].index_select(0, slot.view(1)).squeeze(0))
        put(obs_buf[:, columns], slot, frames)
        put(actions[:, columns], slot, action)
        put(logprobs[:, columns], slot, logprob)
        step_index[group] += 1
        return action

    def finish_rollout(answers) -> None:
        """The rollout's last answers (one per group), its values, GAE and every epoch's minibatch order."""
        for group, (_, reward, episode_ended) in enumerate(answers):
            record(last_slot, group, reward, episode_ended)
        step_index.zero_()
        with torch.no_grad():  # the parameters did not change during the rollout: one batched pass
            values.copy_(agent.value(obs_buf.flatten(0, 1)).view(num_steps, n_envs))
            next_value = agent.value(torch.cat([frames for frames, _, _ in answers]))
        next_values = torch.cat([values[1:], next_value.unsqueeze(0)])
        not_ended = 1 - ended
        deltas = rewards + args.gamma * next_values * not_ended - values
        gae = reverse_scan(deltas, args.gamma * args.gae_lambda * not_ended)
        advantages.copy_(gae.flatten())
        returns.copy_((gae + values).flatten())
        permutations.copy_(torch.rand(args.update_epochs, batch_size, device=device).argsort(dim=1))

    def draw_noise():
        """The next rollout's Gumbel noise, drawn outside compiled code (compiled code may reorder random ops)."""
        gumbel.copy_(-torch.log(-torch.log(torch.rand_like(gumbel))))

    b_obs, b_actions = obs_buf.view(batch_size, *FRAMES), actions.view(batch_size)
    b_logprobs, b_values = logprobs.view(batch_size), values.view(batch_size)

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
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            metrics.copy_(torch.stack([pg_loss, v_loss, entropy_loss, (-logratio).mean(),
                                       ((ratio - 1) - logratio).mean(),
                                       ((ratio - 1).abs() > args.clip_coef).float().mean()]))

    # TRY NOT TO MODIFY: the execution path (common/paths.py): compile the math, capture what the loop calls. The
    # copies between host and device stay outside the compiled functions, inside the captured ones: compiled,
    # a copy from pinned memory would go through an unpinned buffer, which a CUDA graph cannot capture.
    store_and_act, finish_rollout = path.compile(store_and_act), path.compile(finish_rollout)
    update = path.compile(update)
    store_and_act_steps = [[path.capture(lambda g=group, first=first: links[g].send_action(
        store_and_act(*links[g].receive(), g, first))) for first in (True, False)]
        for group in (0, 1)]  # [group][first step of the rollout or not]
    finish = path.capture(lambda: finish_rollout([link.receive() for link in links]))
    update = path.capture(update)

    # TRY NOT TO MODIFY: checkpoints and resume. The C++ games cannot be saved: a resumed run starts new games
    # (seeded by its step count); the networks, optimizer, noise and counters continue.
    checkpoints = Checkpoints(args, logger, "ppo_atari", modules={"agent": agent, "optimizer": optimizer},
                              tensors={"step_index": step_index, "gumbel": gumbel})
    start_iteration, global_step = 0, 0
    if args.resume:
        _, saved = checkpoints.resume(None, link=None)
        start_iteration, global_step = saved["iteration"], saved["global_step"]
    else:
        draw_noise()  # the first rollout's
    games = start_games(groups, links, seed=args.seed + global_step)  # one seed per game

    def counters() -> dict:
        return {"iteration": next_iteration, "global_step": global_step}

    log_interval = max(1, args.log_every // (args.update_epochs * args.num_minibatches))  # in iterations
    next_iteration = start_iteration
    try:
        for iteration in range(start_iteration, num_iterations):
            if args.anneal_lr:
                lr.fill_(args.learning_rate * (1 - iteration / num_iterations))
            for step in range(num_steps):
                for group in (0, 1):  # the policy acts for one group while the other group's games step
                    store_and_act_steps[group][step > 0]()  # on the device: store the last answer, act
                    links[group].action_queued()
                    groups[group].send(links[group].action())  # its games step in C++ threads, from now
                    if step or group:  # the other group's games have stepped meanwhile
                        global_step += group_size
                        other = 1 - group
                        logger.log_episodes(global_step, receive(groups[other], links[other], games[other]))
                logger.progress(global_step)
            global_step += group_size
            logger.log_episodes(global_step, receive(groups[1], links[1], games[1]))  # the rollout's last step
            logger.progress(global_step)
            finish()  # the last answer, values, GAE and the minibatch order, on the device
            draw_noise()  # the next rollout's
            for minibatch in minibatches:
                update(minibatch)
            if iteration % log_interval == 0:
                logger.log(global_step, learning_rate=lr.item(), **dict(zip(metric_names, metrics.tolist(),
                                                                            strict=True)))
            next_iteration = iteration + 1
            if checkpoints.due(global_step, batch_size):
                checkpoints.save_periodic(groups, None, counters())
            if logger.stop.requested:  # Ctrl-C or a non-finite loss: stop where an iteration ends, not mid-rollout
                break
        if args.save_model:
            checkpoints.save("ppo_atari.pt", groups, None, counters())
            export_policy(GreedyPolicy(agent), FRAMES, os.path.join(logger.dir, "ppo_atari.pt2"))
    finally:
        for envs in groups:
            envs.close()
        summary = logger.close(checkpoint=checkpoints.last)
    return summary


if __name__ == "__main__":
    cli(main, Args)
