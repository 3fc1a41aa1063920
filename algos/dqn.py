"""DQN (CleanRL's dqn.py, same defaults) in four execution paths: eager, --compile, --cudagraphs, both.

Per env step the device runs `store_and_act` (store the transition the envs just finished in a replay ring on
the device, then pick the next epsilon-greedy action) and, every `train_frequency` steps, `update` (sample a batch
on the device, one Adam step). The update is launched before the CPU steps the envs, so the two overlap; the loop
waits for nothing but the action's copy to the host.

The flag `--num-seeds N` trains N independent runs (seeds --seed ... --seed+N-1) with the kernels of one: every tensor
has a leading seeds axis (`[seeds, batch, obs]`), each layer is one batched matmul over the seeds' weights, and the
loss is the sum of the seeds' losses, so each seed's gradient and Adam step are its own (common/seeds.py). Seed
i has its own envs (the i-th block of the vector env), Q-network drawn from its own seed, replay memory and run
folder; epsilon's schedule is the same for all. With N = 1 the run draws the random numbers of a run without the
axis, in the same order, and its losses agree with that run's to float rounding.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass

import torch
import torch.nn as nn

from turborl.checkpoints import Checkpoints, export_policy
from turborl.cli import RunArgs, check, check_fits, check_run_args, cli, pick_device, seed_everything
from turborl.envs import final_observations, make_env, track_episodes
from turborl.link import EnvLink, EnvStep
from turborl.paths import ExecutionPath
from turborl.seeds import SeedLinear, SeedLoggers, check_num_seeds, one_seed, seeded


@dataclass
class Args(RunArgs):
    env_id: str = "CartPole-v1"
    """gymnasium id of a discrete-action environment"""
    seed: int = 1
    """seed of the run (torch, numpy, env)"""
    total_timesteps: int = 500_000
    """environment steps of the whole run"""
    learning_rate: float = 2.5e-4
    """Adam learning rate"""
    num_envs: int = 1
    """parallel environments"""
    buffer_size: int = 10_000
    """replay memory size (transitions)"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 1.0
    """target network update rate (1.0: hard copy)"""
    target_network_frequency: int = 500
    """env steps between target network updates"""
    batch_size: int = 128
    """batch size sampled from the replay memory"""
    start_e: float = 1.0
    """starting epsilon for exploration"""
    end_e: float = 0.05
    """final epsilon"""
    exploration_fraction: float = 0.5
    """fraction of total-timesteps over which epsilon decays from start-e to end-e"""
    learning_starts: int = 10_000
    """env steps before learning starts"""
    train_frequency: int = 10
    """env steps between updates"""
    num_seeds: int = 1
    """independent runs trained together, seeds --seed to --seed + N - 1: each has its own envs (--num-envs),
    Q-network, replay memory and run folder; one batched kernel serves all N"""


class QNetwork(nn.Module):
    """`[seeds, batch, obs]` -> `[seeds, batch, actions]`; SeedLinear is nn.Linear with the seeds axis."""

    def __init__(self, obs_dim: int, n_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            SeedLinear(obs_dim, 120), nn.ReLU(), SeedLinear(120, 84), nn.ReLU(), SeedLinear(84, n_actions)
        )

    def forward(self, x):
        return self.network(x)


class GreedyPolicy(nn.Module):
    """The exported policy: observation batch in, greedy action batch out."""

    def __init__(self, q_network: QNetwork):
        super().__init__()
        self.q_network = q_network

    def forward(self, obs):
        return self.q_network(obs).argmax(dim=-1)


def check_args(args: Args) -> None:
    check(args.buffer_size >= 1, f"--buffer-size must be >= 1 (got {args.buffer_size})")
    check(0 < args.batch_size <= args.buffer_size,
          f"--batch-size {args.batch_size} must be between 1 and --buffer-size {args.buffer_size}; "
          "lower it or raise --buffer-size")
    check(args.train_frequency >= 1, f"--train-frequency must be >= 1 (got {args.train_frequency})")
    check(args.target_network_frequency >= 1, "--target-network-frequency must be >= 1")
    check(args.learning_starts >= 1, f"--learning-starts must be >= 1 (got {args.learning_starts})")
    check(0 < args.exploration_fraction <= 1, "--exploration-fraction must be in (0, 1]")
    check(0 <= args.end_e <= args.start_e <= 1, f"need 0 <= --end-e <= --start-e <= 1 (got {args.end_e}, "
                                                f"{args.start_e})")
    check(0 < args.tau <= 1, f"--tau must be in (0, 1] (got {args.tau})")
    check(args.learning_rate > 0, f"--learning-rate must be positive (got {args.learning_rate})")
    check_num_seeds(args)


def main(args: Args) -> dict:
    check_run_args(args)
    check_args(args)
    device = pick_device(args.cuda)
    path = ExecutionPath(args, device)
    seed_everything(args.seed)
    n_seeds, n_envs = args.num_seeds, args.num_envs
    envs = make_env(args.env_id, n_seeds * n_envs, args.seed, action="discrete", algo="DQN",
                    capture_video=args.capture_video,
                    backend=args.env_backend, device=str(device))
    obs_dim, n_actions = envs.single_observation_space.shape[0], int(envs.single_action_space.n)
    capacity = args.buffer_size
    check_fits(capacity, 4 * (2 * obs_dim + 4), device, "the replay memory", "--buffer-size", n_seeds)
    logger = SeedLoggers(args, "dqn", args.total_timesteps, device, run_root=args.runs_dir, envs=envs)

    # ALGO LOGIC: networks, replay memory and schedule, all on the device and updated in place
    q_network = seeded(args.seed, n_seeds, lambda: (QNetwork(obs_dim, n_actions),))[0].to(device)
    target_network = copy.deepcopy(q_network).requires_grad_(False)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate,
                                 capturable=path.capturable, fused=path.fused)
    rb_obs = torch.zeros(n_seeds, capacity, obs_dim, device=device)  # a ring per seed: [seeds, capacity, obs]
    rb_next_obs = torch.zeros(n_seeds, capacity, obs_dim, device=device)
    rb_actions = torch.zeros(n_seeds, capacity, dtype=torch.long, device=device)
    rb_rewards = torch.zeros(n_seeds, capacity, device=device)
    rb_dones = torch.zeros(n_seeds, capacity, device=device)
    rb_ptr = torch.zeros((), dtype=torch.long, device=device)
    rb_size = torch.zeros((), dtype=torch.long, device=device)
    env_steps = torch.zeros((), device=device)  # transitions stored: the host's global_step, one step behind
    epsilon = torch.ones((), device=device)
    obs = torch.zeros(n_seeds, n_envs, obs_dim, device=device)  # what the last action was chosen on
    action = torch.zeros(n_seeds, n_envs, dtype=torch.long, device=device)
    env_index = torch.arange(n_envs, device=device)
    seed_index = torch.arange(n_seeds, device=device).unsqueeze(1)  # rb_x[seed_index, idx]: each seed's own ring
    metrics = torch.zeros(2, n_seeds, device=device)  # td_loss, q_values per seed: written by `update`

    def store_and_act(step: EnvStep, after_reset: bool) -> torch.Tensor:
        """Write the transition the envs just finished into the replay ring (obs, the action taken on it, reward,
        terminated, the obs reached), then choose the action on the next obs. `after_reset`: the envs' first
        observation, no transition yet."""
        step = EnvStep(*(field.unflatten(0, (n_seeds, n_envs)) for field in step))  # [seeds, envs, ...]
        if not after_reset:
            slots = (rb_ptr + env_index) % capacity
            rb_obs[:, slots] = obs
            rb_actions[:, slots] = action
            rb_rewards[:, slots] = step.reward
            rb_dones[:, slots] = step.terminated  # truncation is not termination: bootstrap through time limits
            rb_next_obs[:, slots] = step.final_obs  # the obs reached, before autoreset (CleanRL's real_next_obs)
            rb_ptr.copy_((rb_ptr + n_envs) % capacity)
            rb_size.copy_(torch.clamp(rb_size + n_envs, max=capacity))
            env_steps.add_(n_envs)

        decay_steps = args.exploration_fraction * args.total_timesteps
        epsilon.copy_(torch.clamp(args.start_e + (args.end_e - args.start_e) * env_steps / decay_steps, min=args.end_e))
        greedy = q_network(step.next_obs).argmax(dim=2)
        # One draw for both coins: compiled code may reorder independent random ops, and the paths would disagree.
        explore_coin, action_coin = torch.rand(2, n_seeds, n_envs, device=device)
        random_action = (action_coin * n_actions).long().clamp(max=n_actions - 1)
        obs.copy_(step.next_obs)
        action.copy_(torch.where(explore_coin < epsilon, random_action, greedy))
        return action.flatten()  # [seeds x envs], as the envs take it

    def update() -> None:
        idx = (torch.rand(n_seeds, args.batch_size, device=device) * rb_size).long()  # [seeds, batch]
        with torch.no_grad():
            target_max = target_network(rb_next_obs[seed_index, idx]).max(dim=2).values
            td_target = rb_rewards[seed_index, idx] + args.gamma * target_max * (1 - rb_dones[seed_index, idx])
        old_val = q_network(rb_obs[seed_index, idx]).gather(2, rb_actions[seed_index, idx].unsqueeze(2)).squeeze(2)
        loss = (td_target - old_val).pow(2).mean(1)  # each seed's MSE
        optimizer.zero_grad()
        loss.sum().backward()  # the seeds' losses summed: each seed's gradient comes from its own loss alone
        optimizer.step()
        metrics.copy_(torch.stack([loss, old_val.mean(1)]).detach())

    # TRY NOT TO MODIFY: the execution path (common/paths.py): compile the math, capture what the loop calls
    link = EnvLink(n_seeds * n_envs, obs_dim, (), torch.long, device,
                   envs_on_device=args.env_backend != "gymnasium")
    store_and_act, update = path.compile(store_and_act), path.compile(update)
    act_after_reset = lambda: link.send_action(store_and_act(link.receive(), after_reset=True))  # rare: not captured
    store_and_act_step = path.capture(lambda: link.send_action(store_and_act(link.receive(), after_reset=False)))
    update = path.capture(update)

    # TRY NOT TO MODIFY: episodes, checkpoints and resume
    episodes = track_episodes(args.env_backend, n_seeds * n_envs, device, envs_per_seed=n_envs)
    checkpoints = Checkpoints(
        args, logger, "dqn",
        modules={"q_network": q_network, "target_network": target_network, "optimizer": optimizer,
                 "episodes": episodes},
        tensors={"rb_obs": rb_obs, "rb_next_obs": rb_next_obs, "rb_actions": rb_actions, "rb_rewards": rb_rewards,
                 "rb_dones": rb_dones, "rb_ptr": rb_ptr, "rb_size": rb_size, "env_steps": env_steps,
                 "epsilon": epsilon, "obs": obs, "action": action})
    start_iteration, global_step, updates = 0, 0, 0
    if args.resume:
        envs, saved = checkpoints.resume(envs, link)
        start_iteration, global_step, updates = saved["iteration"], saved["global_step"], saved["updates"]
    else:
        link.reset(envs.reset(seed=args.seed)[0])

    def counters() -> dict:
        return {"iteration": next_iteration, "global_step": global_step, "updates": updates}

    # One iteration: the device stores the transition the envs finished and chooses the next action
    # (store_and_act), then trains (update, every --train-frequency steps) while the host steps the envs with
    # that action and stages their answer (link.send) for the next iteration's store_and_act.
    num_iterations = -(-args.total_timesteps // n_envs)
    next_iteration = start_iteration
    try:
        for iteration in range(start_iteration, num_iterations):
            (store_and_act_step if link.answered else act_after_reset)()  # on the device
            link.action_queued()
            if global_step > args.learning_starts and iteration % args.train_frequency == 0:
                update()  # launched before the envs step: the GPU trains while the CPU simulates
                updates += 1
                if updates % args.log_every == 0:
                    td_loss, q_values = metrics.tolist()  # one value per seed
                    logger.log(global_step, td_loss=td_loss, q_values=q_values, epsilon=[epsilon.item()] * n_seeds)
            if iteration % (args.target_network_frequency // n_envs or 1) == 0:
                with torch.no_grad():
                    for target_param, q_param in zip(target_network.parameters(), q_network.parameters(),
                                                     strict=True):
                        target_param.lerp_(q_param, args.tau)

            next_obs, reward, terminated, truncated, infos = envs.step(link.action())
            global_step += n_envs
            # gymnasium's same-step autoreset: where an episode ended, next_obs starts the next one and
            # final_observations holds the last obs of the one that ended
            link.send(EnvStep(reward, terminated, truncated, final_observations(next_obs, infos), next_obs))
            logger.log_episodes(global_step, episodes.after_step(infos))
            logger.progress(global_step)
            next_iteration = iteration + 1
            if checkpoints.due(global_step, n_envs):
                checkpoints.save_periodic(envs, link, counters())
            if logger.stop.requested:  # Ctrl-C or a non-finite loss: stop where an iteration ends
                break
        if not logger.stop.requested:  # a stopped run's stay in its checkpoint, for the resumed run to log
            logger.log_episodes(global_step, episodes.read())  # any held back
        if args.save_model:
            checkpoints.save("dqn.pt", envs, link, counters())  # all seeds, in seed 0's folder
            for i, seed_logger in enumerate(logger.loggers):
                export_policy(one_seed(GreedyPolicy(q_network), i, n_seeds), obs_dim,
                              os.path.join(seed_logger.dir, "dqn.pt2"))
    finally:
        envs.close()
        summary = logger.close(checkpoint=checkpoints.last, updates=updates)
    return summary


if __name__ == "__main__":
    cli(main, Args)
