"""PQN (CleanRL's pqn.py, same defaults; Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning") on
gymnasium vector envs, in four execution paths: eager, --compile, --cudagraphs, both.

Q-learning without a replay memory or a target network: a rollout of epsilon-greedy steps from parallel envs, its
Q(lambda) returns, then epochs of minibatch updates of a LayerNorm Q-network, as PPO updates its policy. Per env
step `store_and_act` stores the envs' answer to the previous action in the rollout storage on the device and
picks the next action; the loop waits for nothing but the action's copy to the host. Per rollout
`finish_rollout` computes the Q(lambda) returns (a parallel reverse scan) and every epoch's minibatch order, and
`update` takes one RAdam step per minibatch, with the learning rate annealed through a device tensor.

Where CleanRL's pqn.py treats a time limit as the episode's end, this one bootstraps through it with the value
of the state reached (truncation is not termination), as the other scripts do.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from turborl.checkpoints import Checkpoints, export_policy
from turborl.cli import RunArgs, check, check_pqn_args, check_run_args, cli, pick_device, seed_everything
from turborl.envs import final_observations, make_env, track_episodes
from turborl.link import EnvLink, EnvStep
from turborl.logger import RunLogger
from turborl.numerics import put, reverse_scan
from turborl.paths import ExecutionPath


@dataclass
class Args(RunArgs):
    env_id: str = "CartPole-v1"
    """gymnasium id of an environment with Discrete actions and flat Box observations"""
    seed: int = 1
    """seed of the run (torch, numpy, env)"""
    total_timesteps: int = 500_000
    """environment steps of the whole run"""
    learning_rate: float = 2.5e-4
    """RAdam learning rate"""
    num_envs: int = 4
    """parallel environments"""
    num_steps: int = 128
    """steps per env per rollout"""
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
    end_e: float = 0.05
    """epsilon at the end of the schedule"""
    exploration_fraction: float = 0.5
    """fraction of the run over which epsilon falls from start-e to end-e"""
    max_grad_norm: float = 10.0
    """gradient clipping norm"""
    q_lambda: float = 0.65
    """lambda of the Q(lambda) returns"""


def layer(n_in: int, n_out: int, std: float = math.sqrt(2)) -> nn.Linear:
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.zeros_(linear.bias)
    return linear


class QNetwork(nn.Module):
    """CleanRL's PQN network: 120-84 ReLU units, each hidden layer normalized (LayerNorm), orthogonal init."""

    def __init__(self, obs_dim: int, n_actions: int):
        super().__init__()
        self.network = nn.Sequential(layer(obs_dim, 120), nn.LayerNorm(120), nn.ReLU(),
                                     layer(120, 84), nn.LayerNorm(84), nn.ReLU(), layer(84, n_actions))

    def forward(self, x):
        return self.network(x)


class GreedyPolicy(nn.Module):
    """The exported policy: observation batch in, the action of the highest Q-value out."""

    def __init__(self, q_network: QNetwork):
        super().__init__()
        self.q_network = q_network

    def forward(self, obs):
        return self.q_network(obs).argmax(-1)


def q_lambda_returns(rewards, ended, truncated, next_values, final_values, gamma: float, q_lambda: float):
    """Q(lambda) returns over a rollout (steps x envs): G_t = r_t + gamma * [(1 - ended_t) * ((1 - lambda) *
    max Q(s_t+1) + lambda * G_t+1) + truncated_t * max Q(final obs_t)], where `next_values[t]` is max Q(s_t+1)
    (the last one after the rollout) and the return past the rollout is its max Q. A truncated episode bootstraps
    with the value of the state its time limit cut, a terminated one with nothing. One parallel reverse scan."""
    not_ended = 1 - ended
    coef = gamma * q_lambda * not_ended  # G_t = x_t + coef_t * G_t+1
    x = rewards + gamma * not_ended * (1 - q_lambda) * next_values + gamma * truncated * final_values
    x = torch.cat([x[:-1], x[-1:] + coef[-1:] * next_values[-1:]])  # past the rollout: max Q of its last obs
    return reverse_scan(x, coef)


def main(args: Args) -> dict:
    check_run_args(args)
    check_pqn_args(args)
    check(args.env_backend == "gymnasium", "device envs (--env-backend torch): PQN on them is algos/pqn_device_envs.py")
    device = pick_device(args.cuda)
    path = ExecutionPath(args, device)
    seed_everything(args.seed)
    envs = make_env(args.env_id, args.num_envs, args.seed, action="discrete", algo="PQN",
                    capture_video=args.capture_video)
    obs_shape = envs.single_observation_space.shape
    n_envs, num_steps, obs_dim = args.num_envs, args.num_steps, obs_shape[0]
    n_actions = int(envs.single_action_space.n)
    batch_size, minibatch_size = n_envs * num_steps, n_envs * num_steps // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size  # whole rollouts (CleanRL's rounding)
    logger = RunLogger(args, "pqn", num_iterations * batch_size, device,
                       run_root=args.runs_dir, envs=envs)

    # ALGO LOGIC: the Q-network, its optimizer and the rollout storage, on the device
    q_network = QNetwork(obs_dim, n_actions).to(device)
    lr = torch.tensor(args.learning_rate, device=device)  # annealed in place: the graphs read it
    optimizer = torch.optim.RAdam(q_network.parameters(), lr=lr, capturable=path.capturable_with_lr_tensor)
    obs_buf = torch.zeros(num_steps, n_envs, obs_dim, device=device)
    actions = torch.zeros(num_steps, n_envs, dtype=torch.long, device=device)
    rewards = torch.zeros(num_steps, n_envs, device=device)
    ended = torch.zeros(num_steps, n_envs, device=device)  # the episode ended after this step
    truncated_at = torch.zeros(num_steps, n_envs, device=device)  # ... at a time limit
    final_obs_buf = torch.zeros(num_steps, n_envs, obs_dim, device=device)  # for the bootstrap at a time limit
    coins = torch.zeros(num_steps, 2, n_envs, device=device)  # the rollout's exploration draws, made before it
    returns = torch.zeros(batch_size, device=device)
    permutations = torch.zeros(args.update_epochs, batch_size, dtype=torch.long, device=device)
    minibatches = permutations.view(-1, minibatch_size)  # every epoch's minibatches, in order
    step_index = torch.zeros((), dtype=torch.long, device=device)
    last_slot = torch.tensor(num_steps - 1, device=device)
    env_steps = torch.zeros((), device=device)  # steps acted on, for the epsilon schedule
    epsilon = torch.ones((), device=device)
    metrics = torch.zeros(2, device=device)  # td_loss, q_values of the last minibatch, read when logging

    def record(slot, step: EnvStep):
        """Store the envs' answer (reward, episode end, state reached) to the action taken at `slot`."""
        put(rewards, slot, step.reward)
        put(ended, slot, torch.maximum(step.terminated, step.truncated))
        put(truncated_at, slot, step.truncated)
        put(final_obs_buf, slot, step.final_obs)

    def store_and_act(step: EnvStep, first_of_rollout: bool) -> torch.Tensor:
        """Store the answer to the previous action (the rollout's last is stored by `finish_rollout`), then pick the
        epsilon-greedy action for the next obs and store the obs and action at the step's slot."""
        if not first_of_rollout:
            record(step_index - 1, step)
        env_steps.add_(n_envs)
        decay_steps = args.exploration_fraction * args.total_timesteps
        epsilon.copy_(torch.clamp(args.start_e + (args.end_e - args.start_e) * env_steps / decay_steps, min=args.end_e))
        explore_coin, action_coin = coins.index_select(0, step_index.view(1)).squeeze(0)
        with torch.no_grad():
            greedy = q_network(step.next_obs).argmax(-1)
        random_action = (action_coin * n_actions).long().clamp(max=n_actions - 1)
        action = torch.where(explore_coin < epsilon, random_action, greedy)
        put(obs_buf, step_index, step.next_obs)
        put(actions, step_index, action)
        step_index.add_(1)
        return action

    def finish_rollout(step: EnvStep) -> None:
        """The rollout's last answer, its Q(lambda) returns and every epoch's minibatch order."""
        record(last_slot, step)
        step_index.zero_()
        with torch.no_grad():  # the network did not change during the rollout: one batched pass
            values = q_network(obs_buf).max(-1).values
            last_value = q_network(step.next_obs).max(-1).values
            final_values = q_network(final_obs_buf).max(-1).values
        next_values = torch.cat([values[1:], last_value.unsqueeze(0)])
        q_returns = q_lambda_returns(rewards, ended, truncated_at, next_values, final_values, args.gamma,
                                     args.q_lambda)
        returns.copy_(q_returns.flatten())
        permutations.copy_(torch.rand(args.update_epochs, batch_size, device=device).argsort(dim=1))

    def draw_coins():
        """The next rollout's exploration draws: outside compiled code, which may reorder independent random ops
        (the paths would disagree)."""
        coins.uniform_()

    b_obs, b_actions = obs_buf.view(batch_size, obs_dim), actions.view(batch_size)

    def update(mb: torch.Tensor) -> None:
        q_values = q_network(b_obs[mb]).gather(1, b_actions[mb].unsqueeze(1)).squeeze(1)
        loss = F.mse_loss(returns[mb], q_values)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
        optimizer.step()
        metrics.copy_(torch.stack([loss, q_values.mean()]).detach())

    # TRY NOT TO MODIFY: the execution path (common/paths.py): compile the math, capture what the loop calls
    link = EnvLink(n_envs, obs_dim, (), torch.long, device, envs_on_device=False)
    store_and_act, finish_rollout = path.compile(store_and_act), path.compile(finish_rollout)
    update = path.compile(update)
    act_first = path.capture(lambda: link.send_action(store_and_act(link.receive(), first_of_rollout=True)))
    store_and_act_step = path.capture(lambda: link.send_action(store_and_act(link.receive(), first_of_rollout=False)))
    finish = path.capture(lambda: finish_rollout(link.receive()))
    update = path.capture(update)

    # TRY NOT TO MODIFY: episodes, checkpoints and resume
    episodes = track_episodes("gymnasium", n_envs, device)
    checkpoints = Checkpoints(
        args, logger, "pqn", modules={"q_network": q_network, "optimizer": optimizer},
        tensors={"step_index": step_index, "coins": coins, "env_steps": env_steps, "epsilon": epsilon})
    start_iteration, global_step = 0, 0
    if args.resume:
        envs, saved = checkpoints.resume(envs, link)
        start_iteration, global_step = saved["iteration"], saved["global_step"]
    else:
        link.reset(envs.reset(seed=args.seed)[0])
        draw_coins()  # the first rollout's

    def counters() -> dict:
        return {"iteration": next_iteration, "global_step": global_step}

    # One iteration: a rollout (per step, the device stores the envs' answer and picks the next action while the
    # host waits only for that action), then on the device the Q(lambda) returns and every epoch of updates.
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
            finish()  # the last answer, the Q(lambda) returns and the minibatch order, on the device
            draw_coins()  # the next rollout's
            for minibatch in minibatches:
                update(minibatch)
            if iteration % log_interval == 0:
                td_loss, q_values = metrics.tolist()
                logger.log(global_step, td_loss=td_loss, q_values=q_values, epsilon=epsilon.item(),
                           learning_rate=lr.item())
            next_iteration = iteration + 1
            if checkpoints.due(global_step, batch_size):
                checkpoints.save_periodic(envs, link, counters())
            if logger.stop.requested:  # Ctrl-C or a non-finite loss: stop where an iteration ends, not mid-rollout
                break
        if args.save_model:
            checkpoints.save("pqn.pt", envs, link, counters())
            export_policy(GreedyPolicy(q_network), obs_dim, os.path.join(logger.dir, "pqn.pt2"))
    finally:
        envs.close()
        summary = logger.close(checkpoint=checkpoints.last)
    return summary


if __name__ == "__main__":
    cli(main, Args)
