"""td3 HalfCheetah-v4's failing row: does our td3.py compute CleanRL's, given the same data and draws?

Runs our algos/td3.py eager on the CPU (HalfCheetah-v4, --learning-starts L, then K updates, one logged per update),
recording its random draws (each update's uniform draws, from which it makes the batch's indices, and its
target-smoothing noise; each step's exploration noise) and the networks' initial weights. Then it replays those K
updates with CleanRL's own networks and update code (copied from its td3_continuous_action.py below; replaced: the
noise draw by ours, the batch by the indices ours made, the target action's clamp by HalfCheetah's bounds, +-1),
from the same weights, on the replay memory our run saved, three times: in float32, in float32 with the actor's
initial weights scaled by 1 + 1e-7, and in float64. Printed: how far our logged losses are from each replica's,
against how far the replicas are from each other (float rounding and a 1e-7 nudge alone). Two checks of the data:
every stored transition replayed through gymnasium's own env under its stored action (what is stored is what the env
did), and each stored action of the first 100 policy steps against CleanRL's choice, `actor(obs) + noise` clipped,
with the float32 replica's actor of that step and our noise (the action was chosen on the stored obs, by the actor
of its step). Not checked: that the indices are drawn as CleanRL's are (ours: uniform over the transitions stored
before the update's step; CleanRL's: np.random.randint over those stored up to it, one more).

    python results/parity/cleanrl-own/td3_same_batches.py CLEANRL/cleanrl/td3_continuous_action.py 1000 5000 3
"""

import copy
import glob
import importlib.util
import statistics
import sys
import tempfile
import types

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

cleanrl_script, learning_starts, updates, seed = sys.argv[1], *map(int, sys.argv[2:5])
torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("td3", "algos/td3.py")
td3 = sys.modules["td3"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(td3)

initial = []  # the actor's and the critics' weights, as td3.py copies them into its targets


def deepcopy(module):
    initial.append({k: v.detach().clone() for k, v in module.state_dict().items()})
    return copy.deepcopy(module)


td3.copy = types.SimpleNamespace(deepcopy=deepcopy)
drawn = {"rand": [], "randn_like": [], "randn": []}  # per update: uniform draws, smoothing noise; per step: exploration
torch_rand, torch_randn_like, torch_randn = torch.rand, torch.randn_like, torch.randn


def rand(*shape, **kwargs):
    out = torch_rand(*shape, **kwargs)
    if shape == (1, 256):  # update_critics' batch draw (store_and_act draws [1, 1, 6])
        drawn["rand"].append(out.clone())
    return out


def randn(*shape, **kwargs):
    out = torch_randn(*shape, **kwargs)
    if shape == (1, 1, 6):  # store_and_act's exploration noise, one draw per step
        drawn["randn"].append(out.clone())
    return out


def randn_like(x, **kwargs):
    out = torch_randn_like(x, **kwargs)
    drawn["randn_like"].append(out.clone())
    return out


torch.rand, torch.randn_like, torch.randn = rand, randn_like, randn
runs_dir = tempfile.mkdtemp()
td3.main(td3.Args(env_id="HalfCheetah-v4", seed=seed, total_timesteps=learning_starts + updates + 1,
                  learning_starts=learning_starts, log_every=1, runs_dir=runs_dir, save_model=True, cuda=False))
torch.rand, torch.randn_like, torch.randn = torch_rand, torch_randn_like, torch_randn
run_dir = glob.glob(f"{runs_dir}/*/")[0]
saved = torch.load(run_dir + "td3.pt", weights_only=False)
replay = {name: ring[:, 0] for name, ring in saved["replay"].items()}  # seed 0's ring: [steps, ...]
ours = {"qf_loss": {}, "actor_loss": {}}  # per update, as logged
for line in open(run_dir + "metrics.csv").readlines()[1:]:
    step, _, name, value = line.strip().split(",")
    if name in ours and (name == "qf_loss" or int(step) % 2 == 0):  # actor_loss: the steps that update the actor
        ours[name][int(step)] = float(value)
assert len(drawn["rand"]) == len(drawn["randn_like"]) == updates == len(ours["qf_loss"])
assert len(drawn["randn"]) == learning_starts + updates + 1  # one per step (the reset's included)
assert len(replay["rb_actions"]) < td3.Args.buffer_size  # the ring never wrapped: index t is step t's transition

# The data path: each stored transition is what gymnasium's env does under the stored action.
env = gym.make("HalfCheetah-v4")
obs, _ = env.reset(seed=seed)
data_gap = 0.0
for t in range(len(replay["rb_actions"])):
    next_obs, reward, terminated, truncated, _ = env.step(replay["rb_actions"][t].double().numpy())
    data_gap = max(data_gap, np.abs(obs - replay["rb_obs"][t].numpy()).max(),
                   abs(reward - replay["rb_rewards"][t].item()),
                   np.abs(next_obs - replay["rb_next_obs"][t].numpy()).max())
    assert terminated == bool(replay["rb_dones"][t])
    obs = env.reset()[0] if terminated or truncated else next_obs
print(f"data path: {len(replay['rb_actions'])} stored transitions, largest difference from gymnasium's env "
      f"{data_gap:.1e}")

source = open(cleanrl_script).read()
cleanrl = {"nn": nn, "F": F, "torch": torch, "np": np}
exec(source[source.index("class QNetwork"):source.index('if __name__ == "__main__"')], cleanrl)  # its two classes
spaces = types.SimpleNamespace(single_observation_space=gym.spaces.Box(-np.inf, np.inf, (17,)),
                               single_action_space=gym.spaces.Box(-1, 1, (6,), dtype=np.float32))


def cleanrl_updates(dtype, nudge):
    """CleanRL's K updates from our initial weights, batches and noise; its losses per update."""
    torch.set_default_dtype(dtype)
    actor, qf1, qf2 = cleanrl["Actor"](spaces), cleanrl["QNetwork"](spaces), cleanrl["QNetwork"](spaces)
    actor0, qf0 = initial
    with torch.no_grad():  # ours: weights [seeds, in, out]; the critics stacked [2, in, out]
        for name in ("fc1", "fc2", "fc_mu"):
            getattr(actor, name).weight.copy_(actor0[f"{name}.weight"][0].T * (1 + nudge))
            getattr(actor, name).bias.copy_(actor0[f"{name}.bias"][0, 0])
        for c, qf in enumerate((qf1, qf2)):
            for i, layer in enumerate((qf.fc1, qf.fc2, qf.fc3)):
                layer.weight.copy_(qf0[f"weights.{i}"][c].T)
                layer.bias.copy_(qf0[f"biases.{i}"][c, 0])
    target_actor, qf1_target, qf2_target = (copy.deepcopy(m) for m in (actor, qf1, qf2))
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=3e-4)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=3e-4)
    rb = {name: ring.to(dtype) for name, ring in replay.items()}
    policy_noise, noise_clip, gamma, tau, policy_frequency = 0.2, 0.5, 0.99, 0.005, 2
    losses = {"qf_loss": {}, "actor_loss": {}, "acting": []}

    def acting_gap(t):
        """How far step t's stored action is from CleanRL's choice on step t's obs (its acting lines, our noise)."""
        with torch.no_grad():
            action = actor(rb["rb_obs"][t:t + 1]) + drawn["randn"][t][0].to(dtype) * actor.action_scale * 0.1
        return float((action.clamp(-1.0, 1.0) - rb["rb_actions"][t]).abs().max())

    losses["acting"] += [acting_gap(learning_starts), acting_gap(learning_starts + 1)]  # before the first update
    for k in range(updates):
        global_step = learning_starts + 1 + k  # ours samples the transitions stored before this step
        idx = (drawn["rand"][k][0] * global_step).long()
        data = types.SimpleNamespace(observations=rb["rb_obs"][idx], actions=rb["rb_actions"][idx],
                                     next_observations=rb["rb_next_obs"][idx], rewards=rb["rb_rewards"][idx, None],
                                     dones=rb["rb_dones"][idx, None])
        # CleanRL's update, as its script writes it
        with torch.no_grad():
            clipped_noise = (drawn["randn_like"][k][0].to(dtype) * policy_noise).clamp(
                -noise_clip, noise_clip) * target_actor.action_scale
            next_state_actions = (target_actor(data.next_observations) + clipped_noise).clamp(-1.0, 1.0)
            qf1_next_target = qf1_target(data.next_observations, next_state_actions)
            qf2_next_target = qf2_target(data.next_observations, next_state_actions)
            min_qf_next_target = torch.min(qf1_next_target, qf2_next_target)
            next_q_value = data.rewards.flatten() + (1 - data.dones.flatten()) * gamma * (min_qf_next_target).view(-1)
        qf1_a_values = qf1(data.observations, data.actions).view(-1)
        qf2_a_values = qf2(data.observations, data.actions).view(-1)
        qf_loss = F.mse_loss(qf1_a_values, next_q_value) + F.mse_loss(qf2_a_values, next_q_value)
        q_optimizer.zero_grad()
        qf_loss.backward()
        q_optimizer.step()
        if global_step % policy_frequency == 0:
            actor_loss = -qf1(data.observations, actor(data.observations)).mean()
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()
            for online, target in ((actor, target_actor), (qf1, qf1_target), (qf2, qf2_target)):
                for param, target_param in zip(online.parameters(), target.parameters(), strict=True):
                    target_param.data.copy_(tau * param.data + (1 - tau) * target_param.data)
            losses["actor_loss"][global_step] = actor_loss.item()
        losses["qf_loss"][global_step] = qf_loss.item()
        if len(losses["acting"]) < 100:  # step global_step + 1 acts with the actor of k + 1 updates
            losses["acting"].append(acting_gap(global_step + 1))
    torch.set_default_dtype(torch.float32)
    return losses


replicas = {"CleanRL fp32": cleanrl_updates(torch.float32, 0.0),
            "CleanRL fp32 nudged": cleanrl_updates(torch.float32, 1e-7),
            "CleanRL fp64": cleanrl_updates(torch.float64, 0.0)}


def gap(a, b, steps):
    """Mean relative difference of two runs' losses over these updates (the actor's: those that update it)."""
    return statistics.mean(abs(a[t] - b[t]) / abs(b[t]) for t in steps if t in b)


pairs = {"ours / fp32": (ours, replicas["CleanRL fp32"]), "ours / fp64": (ours, replicas["CleanRL fp64"]),
         "fp32 / fp64": (replicas["CleanRL fp32"], replicas["CleanRL fp64"]),
         "fp32 nudged / fp32": (replicas["CleanRL fp32 nudged"], replicas["CleanRL fp32"])}
first = learning_starts + 1
acting = replicas["CleanRL fp32"]["acting"]
print(f"acting: the first {len(acting)} policy actions, largest difference from CleanRL's choice {max(acting):.1e}")
for loss in ("qf_loss", "actor_loss"):
    print(f"\nmean relative difference of {loss} (seed {seed}, {updates} updates after {learning_starts} steps)")
    print("| updates | " + " | ".join(pairs) + " |\n|---|" + "---:|" * len(pairs))
    for lo, hi in ((0, 100), (100, 1000), (1000, updates // 2), (updates // 2, updates)):
        steps = range(first + lo, first + hi)
        gaps = (f"{gap(a[loss], b[loss], steps):.1e}" for a, b in pairs.values())
        print(f"| {lo + 1}-{hi} | " + " | ".join(gaps) + " |")
