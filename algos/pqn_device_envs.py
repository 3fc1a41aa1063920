"""PQN (CleanRL's pqn.py; Gallici et al. 2024) on envs that run on the device (the torch classic-control envs), in
four execution paths. The whole iteration is one graph, as in algos/ppo_device_envs.py: the epsilon-greedy
rollout (Q-network, physics, autoreset, storage), the Q(lambda) returns and every epoch of minibatch updates are
one captured function, replayed once per iteration. On gymnasium's envs the same algorithm is algos/pqn.py,
whose docstring says what PQN is.

Like algos/pqn.py (and unlike CleanRL's, which ends the episode there), a time limit bootstraps with the value of
the state it cut.
"""

from __future__ import annotations

import collections
import math
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from turborl.checkpoints import Checkpoints, export_policy
from turborl.cli import RunArgs, check, check_pqn_args, check_run_args, cli, pick_device, seed_everything
from turborl.envs import make_env, track_episodes
from turborl.logger import RunLogger
from turborl.numerics import put, reverse_scan
from turborl.paths import ExecutionPath


@dataclass
class Args(RunArgs):
    env_id: str = "CartPole-v1"
    """env id of a torch classic-control env with Discrete actions (common/torch_envs.py): CartPole-v1, ..."""
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
    env_backend: str = "torch"
    """where the envs run: torch (classic control on the device, common/torch_envs.py)"""
    stop_at_return: float | None = None
    """stop once the mean return of the last 100 episodes reaches this (time-to-solve benchmarks)"""


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
    check(args.env_backend == "torch", "PQN on gymnasium envs is algos/pqn.py; here --env-backend is torch")
    device = pick_device(args.cuda)
    path = ExecutionPath(args, device)
    seed_everything(args.seed)
    envs = make_env(args.env_id, args.num_envs, args.seed, action="discrete", algo="PQN", backend="torch",
                    device=str(device))
    obs_shape = envs.single_observation_space.shape
    n_envs, num_steps, obs_dim = args.num_envs, args.num_steps, obs_shape[0]
    n_actions = int(envs.single_action_space.n)
    batch_size, minibatch_size = n_envs * num_steps, n_envs * num_steps // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size  # whole rollouts (CleanRL's rounding)
    logger = RunLogger(args, "pqn_device_envs", num_iterations * batch_size, device, run_root=args.runs_dir)

    # ALGO LOGIC: the Q-network, its optimizer, the envs' current obs and the rollout storage, on the device
    q_network = QNetwork(obs_dim, n_actions).to(device)
    lr = torch.tensor(args.learning_rate, device=device)  # annealed in place: the graphs read it
    optimizer = torch.optim.RAdam(q_network.parameters(), lr=lr, capturable=path.capturable_with_lr_tensor)
    obs = torch.zeros(n_envs, obs_dim, device=device)  # what the next action is chosen on
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
    env_steps = torch.zeros((), device=device)  # steps acted on, for the epsilon schedule
    epsilon = torch.ones((), device=device)
    metrics = torch.zeros(2, device=device)  # td_loss, q_values of the last minibatch, read when logging
    episodes = track_episodes("torch", n_envs, device, steps_per_read=num_steps)

    def env_step() -> None:
        """Pick the epsilon-greedy action on `obs`, step the envs, store the whole transition at the step's slot."""
        env_steps.add_(n_envs)
        decay_steps = args.exploration_fraction * args.total_timesteps
        epsilon.copy_(torch.clamp(args.start_e + (args.end_e - args.start_e) * env_steps / decay_steps, min=args.end_e))
        explore_coin, action_coin = coins.index_select(0, step_index.view(1)).squeeze(0)
        with torch.no_grad():
            greedy = q_network(obs).argmax(-1)
        random_action = (action_coin * n_actions).long().clamp(max=n_actions - 1)
        action = torch.where(explore_coin < epsilon, random_action, greedy)
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        terminated, truncated = terminated.float(), truncated.float()
        for storage, value in ((obs_buf, obs), (actions, action), (rewards, reward),
                               (ended, torch.maximum(terminated, truncated)), (truncated_at, truncated),
                               (final_obs_buf, infos["final_obs"])):
            put(storage, step_index, value)
        obs.copy_(next_obs)
        episodes.record(infos)
        step_index.add_(1)

    def finish_rollout() -> None:
        """The rollout's Q(lambda) returns and every epoch's minibatch order."""
        step_index.zero_()
        with torch.no_grad():  # the network did not change during the rollout: one batched pass
            values = q_network(obs_buf).max(-1).values
            last_value = q_network(obs).max(-1).values
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

    def iteration_on_device() -> None:
        """The whole iteration: the rollout, the Q(lambda) returns, every epoch of minibatch updates."""
        for _ in range(num_steps):
            env_step()
        finish_rollout()
        draw_coins()
        for minibatch in minibatches:
            update(minibatch)

    # TRY NOT TO MODIFY: the execution path (common/paths.py): compile the math, capture the whole iteration
    env_step, finish_rollout, update = path.compile(env_step), path.compile(finish_rollout), path.compile(update)
    iteration_on_device = path.capture(iteration_on_device)

    # TRY NOT TO MODIFY: checkpoints and resume
    checkpoints = Checkpoints(
        args, logger, "pqn_device_envs",
        modules={"q_network": q_network, "optimizer": optimizer, "episodes": episodes},
        tensors={"obs": obs, "coins": coins, "env_steps": env_steps, "epsilon": epsilon})
    recent_returns: collections.deque = collections.deque(maxlen=100)
    start_iteration, global_step = 0, 0
    if args.resume:
        envs, saved = checkpoints.resume(envs, None)
        recent_returns.extend(saved["recent_returns"])
        start_iteration, global_step = saved["iteration"], saved["global_step"]
    else:
        obs.copy_(envs.reset(seed=args.seed)[0])
        draw_coins()  # the first rollout's

    def counters() -> dict:
        return {"iteration": next_iteration, "global_step": global_step, "recent_returns": list(recent_returns)}

    log_interval = max(1, args.log_every // (args.update_epochs * args.num_minibatches))  # in iterations
    next_iteration = start_iteration
    try:
        for iteration in range(start_iteration, num_iterations):
            if args.anneal_lr:
                lr.fill_(args.learning_rate * (1 - iteration / num_iterations))
            iteration_on_device()  # rollout, Q(lambda) returns, every epoch of updates
            finished = episodes.read()  # those that ended in the previous iteration, read while this one runs
            episodes.copy()
            global_step += batch_size
            logger.log_episodes(global_step, finished)
            logger.progress(global_step)
            recent_returns.extend(episodic_return for episodic_return, _ in finished)
            next_iteration = iteration + 1
            if iteration % log_interval == 0:
                td_loss, q_values = metrics.tolist()
                logger.log(global_step, td_loss=td_loss, q_values=q_values, epsilon=epsilon.item(),
                           learning_rate=lr.item())
            if (args.stop_at_return is not None and len(recent_returns) == recent_returns.maxlen
                    and sum(recent_returns) / len(recent_returns) >= args.stop_at_return):
                logger.log(global_step, solved_seconds=logger.elapsed())
                break
            if checkpoints.due(global_step, batch_size):
                checkpoints.save_periodic(envs, None, counters())
            if logger.stop.requested:  # Ctrl-C or a non-finite loss: stop where an iteration ends
                break
        if not logger.stop.requested:  # a stopped run's stay in its checkpoint, for the resumed run to log
            logger.log_episodes(global_step, episodes.read())  # the last iteration's
        if args.save_model:
            checkpoints.save("pqn_device_envs.pt", envs, None, counters())
            export_policy(GreedyPolicy(q_network), obs_dim, os.path.join(logger.dir, "pqn_device_envs.pt2"))
    finally:
        envs.close()
        summary = logger.close(checkpoint=checkpoints.last)
    return summary

if __name__ == "__main__":
    cli(main, Args)
