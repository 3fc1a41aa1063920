"""PQN on Atari (CleanRL's pqn_atari_envpool.py: same network and defaults; Gallici et al. 2024) in four
execution paths: eager, --compile, --cudagraphs, both.

The envs and the frame pipeline are algos/ppo_atari.py's (common/atari.py): ale-py's C++ vector env with envpool's
Atari setup, an episode ended at every lost life, rewards clipped to their sign for learning (the game's own score
is what gets logged), uint8 frames to the device in one copy from pinned memory. The games are two groups that
take turns: while one group's games step in C++ threads, the Q-network picks the other group's epsilon-greedy
actions on the GPU. Per group step `store_and_act` (store the answer to its last action, act) is one captured
call; per rollout `finish_rollout` computes the Q(lambda) returns and every epoch's minibatch order, and `update`
takes one RAdam step per minibatch, with the learning rate annealed through a device tensor.

Where CleanRL's pqn_atari_envpool.py cuts only the bootstrap term at an episode's end (its lambda-return runs on
into the next life), this one cuts the whole return there, as purejaxql and algos/pqn.py do.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from turborl.atari import FRAMES, FrameLink, check_atari_args, make_groups, receive, start_games
from turborl.checkpoints import Checkpoints, export_policy
from turborl.cli import RunArgs, check_pqn_args, check_run_args, cli, pick_device, seed_everything
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
    """RAdam learning rate"""
    num_envs: int = 8
    """parallel games (even: two groups of them take turns)"""
    num_steps: int = 128
    """steps per env per rollout"""
    env_threads: int = 0
    """C++ threads that step the games, shared by the two groups (0: one per game, at most one per CPU core)"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    update_epochs: int = 4
    """epochs over each rollout"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0"""
    gamma: float = 0.99
    """discount factor"""
    start_e: float = 1.0
    """epsilon at the start"""
    end_e: float = 0.01
    """epsilon at the end of the schedule"""
    exploration_fraction: float = 0.1
    """fraction of the run over which epsilon falls from start-e to end-e"""
    max_grad_norm: float = 10.0
    """gradient clipping norm"""
    q_lambda: float = 0.65
    """lambda of the Q(lambda) returns"""


def layer(module: nn.Module, std: float = math.sqrt(2)) -> nn.Module:
    nn.init.orthogonal_(module.weight, std)
    nn.init.zeros_(module.bias)
    return module


class QNetwork(nn.Module):
    """CleanRL's PQN Atari network: the Nature CNN with each hidden layer normalized (LayerNorm over a conv's whole
    output), orthogonal init. Frames come in as uint8 (0-255) and are scaled here, on the device."""

    def __init__(self, n_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            layer(nn.Conv2d(4, 32, 8, stride=4)), nn.LayerNorm([32, 20, 20]), nn.ReLU(),
            layer(nn.Conv2d(32, 64, 4, stride=2)), nn.LayerNorm([64, 9, 9]), nn.ReLU(),
            layer(nn.Conv2d(64, 64, 3, stride=1)), nn.LayerNorm([64, 7, 7]), nn.ReLU(), nn.Flatten(),
            layer(nn.Linear(64 * 7 * 7, 512)), nn.LayerNorm(512), nn.ReLU(), layer(nn.Linear(512, n_actions)))

    def forward(self, frames):
        return self.network(frames.float() / 255.0)


class GreedyPolicy(nn.Module):
    """The exported policy: stacked frames (float, 0-255) in, the action of the highest Q-value out."""

    def __init__(self, q_network: QNetwork):
        super().__init__()
        self.q_network = q_network

    def forward(self, frames):
        return self.q_network(frames).argmax(-1)


def q_lambda_returns(rewards, ended, next_values, gamma: float, q_lambda: float):
    """Q(lambda) returns over a rollout (steps x envs): G_t = r_t + gamma * (1 - ended_t) * ((1 - lambda) *
    max Q(s_t+1) + lambda * G_t+1), where `next_values[t]` is max Q(s_t+1) (the last one after the rollout) and
    the return past the rollout is its max Q. An episode's end (a lost life, a game over, the time limit) cuts
    the return. One parallel reverse scan."""
    not_ended = 1 - ended
    coef = gamma * q_lambda * not_ended  # G_t = x_t + coef_t * G_t+1
    x = rewards + gamma * not_ended * (1 - q_lambda) * next_values
    x = torch.cat([x[:-1], x[-1:] + coef[-1:] * next_values[-1:]])  # past the rollout: max Q of its last obs
    return reverse_scan(x, coef)


def main(args: Args) -> dict:
    check_atari_args(args)
    check_pqn_args(args)
    check_run_args(args)
    n_envs, num_steps, group_size = args.num_envs, args.num_steps, args.num_envs // 2
    groups = make_groups(args.env_id, n_envs, args.env_threads)  # checks the game id first: no run folder if bad
    device = pick_device(args.cuda)
    path = ExecutionPath(args, device)
    seed_everything(args.seed)
    n_actions = int(groups[0].single_action_space.n)
    batch_size, minibatch_size = n_envs * num_steps, n_envs * num_steps // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size  # whole rollouts (CleanRL's rounding)
    logger = RunLogger(args, "pqn_atari", num_iterations * batch_size, device,
                       run_root=args.runs_dir)

    # ALGO LOGIC: the Q-network, its optimizer and the rollout storage (frames as uint8), on the device
    q_network = QNetwork(n_actions).to(device)
    lr = torch.tensor(args.learning_rate, device=device)  # annealed in place: the graphs read it
    optimizer = torch.optim.RAdam(q_network.parameters(), lr=lr, capturable=path.capturable_with_lr_tensor)
    obs_buf = torch.zeros(num_steps, n_envs, *FRAMES, dtype=torch.uint8, device=device)
    actions = torch.zeros(num_steps, n_envs, dtype=torch.long, device=device)
    rewards = torch.zeros(num_steps, n_envs, device=device)
    ended = torch.zeros(num_steps, n_envs, device=device)  # the episode ended after this step
    coins = torch.zeros(num_steps, 2, n_envs, device=device)  # the rollout's exploration draws, made before it
    returns = torch.zeros(batch_size, device=device)
    permutations = torch.zeros(args.update_epochs, batch_size, dtype=torch.long, device=device)
    minibatches = permutations.view(-1, minibatch_size)  # every epoch's minibatches, in order
    step_index = torch.zeros(2, dtype=torch.long, device=device)  # each group's slot in the rollout
    last_slot = torch.tensor(num_steps - 1, device=device)
    env_steps = torch.zeros((), device=device)  # steps acted on, for the epsilon schedule
    epsilon = torch.ones((), device=device)
    metrics = torch.zeros(2, device=device)  # td_loss, q_values of the last minibatch, read when logging
    links = [FrameLink(group_size, device) for _ in groups]

    def record(slot, group: int, reward, episode_ended):
        """Store a group's answer to the action taken at `slot`; the reward's sign is what is learned."""
        columns = slice(group * group_size, (group + 1) * group_size)
        put(rewards[:, columns], slot, reward.sign())
        put(ended[:, columns], slot, episode_ended)

    def store_and_act(frames, reward, episode_ended, group: int, first_of_rollout: bool) -> torch.Tensor:
        """Store the group's answer to its previous action (the rollout's last is stored by `finish_rollout`),
        then pick the epsilon-greedy action for `frames` and store the frames and action at its slot."""
        slot, columns = step_index[group], slice(group * group_size, (group + 1) * group_size)
        if not first_of_rollout:
            record(slot - 1, group, reward, episode_ended)
        env_steps.add_(group_size)
        decay_steps = args.exploration_fraction * args.total_timesteps
        epsilon.copy_(torch.clamp(args.start_e + (args.end_e - args.start_e) * env_steps / decay_steps, min=args.end_e))
        explore_coin, action_coin = coins[:, :, columns].index_select(0, slot.view(1)).squeeze(0)
        with torch.no_grad():
            greedy = q_network(frames).argmax(-1)
        random_action = (action_coin * n_actions).long().clamp(max=n_actions - 1)
        action = torch.where(explore_coin < epsilon, random_action, greedy)
        put(obs_buf[:, columns], slot, frames)
        put(actions[:, columns], slot, action)
        step_index[group] += 1
        return action

    def finish_rollout(answers) -> None:
        """The rollout's last answers (one per group), its Q(lambda) returns and every epoch's minibatch order."""
        for group, (_, reward, episode_ended) in enumerate(answers):
            record(last_slot, group, reward, episode_ended)
        step_index.zero_()
        with torch.no_grad():  # the network did not change during the rollout: one batched pass
            values = q_network(obs_buf.flatten(0, 1)).max(-1).values.view(num_steps, n_envs)
            last_value = q_network(torch.cat([frames for frames, _, _ in answers])).max(-1).values
        next_values = torch.cat([values[1:], last_value.unsqueeze(0)])
        returns.copy_(q_lambda_returns(rewards, ended, next_values, args.gamma, args.q_lambda).flatten())
        permutations.copy_(torch.rand(args.update_epochs, batch_size, device=device).argsort(dim=1))

    def draw_coins():
        """The next rollout's exploration draws: outside compiled code, which may reorder independent random ops
        (the paths would disagree)."""
        coins.uniform_()

    b_obs, b_actions = obs_buf.view(batch_size, *FRAMES), actions.view(batch_size)

    def update(mb: torch.Tensor) -> None:
        q_values = q_network(b_obs[mb]).gather(1, b_actions[mb].unsqueeze(1)).squeeze(1)
        loss = F.mse_loss(returns[mb], q_values)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
        optimizer.step()
        metrics.copy_(torch.stack([loss, q_values.mean()]).detach())

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
    # (seeded by its step count); the network, optimizer, exploration draws and counters continue.
    checkpoints = Checkpoints(
        args, logger, "pqn_atari", modules={"q_network": q_network, "optimizer": optimizer},
        tensors={"step_index": step_index, "coins": coins, "env_steps": env_steps, "epsilon": epsilon})
    start_iteration, global_step = 0, 0
    if args.resume:
        _, saved = checkpoints.resume(None, link=None)
        start_iteration, global_step = saved["iteration"], saved["global_step"]
    else:
        draw_coins()  # the first rollout's
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
                for group in (0, 1):  # the Q-network acts for one group while the other group's games step
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
            finish()  # the last answers, the Q(lambda) returns and the minibatch order, on the device
            draw_coins()  # the next rollout's
            for minibatch in minibatches:
                update(minibatch)
            if iteration % log_interval == 0:
                td_loss, q_values = metrics.tolist()
                logger.log(global_step, td_loss=td_loss, q_values=q_values, epsilon=epsilon.item(),
                           learning_rate=lr.item())
            next_iteration = iteration + 1
            if checkpoints.due(global_step, batch_size):
                checkpoints.save_periodic(groups, None, counters())
            if logger.stop.requested:  # Ctrl-C or a non-finite loss: stop where an iteration ends, not mid-rollout
                break
        if args.save_model:
            checkpoints.save("pqn_atari.pt", groups, None, counters())
            export_policy(GreedyPolicy(q_network), FRAMES, os.path.join(logger.dir, "pqn_atari.pt2"))
    finally:
        for envs in groups:
            envs.close()
        summary = logger.close(checkpoint=checkpoints.last)
    return summary


if __name__ == "__main__":
    cli(main, Args)
