"""PPO on CPU (gymnasium envs and device envs): learning, GAE, bfloat16, user errors."""

import glob
import json
import os

import numpy as np
import torch

from algos import ppo_device_envs
from tests.helpers import metric, run_main, run_script
from turborl.numerics import reverse_scan

# Budgets measured on CPU (seed 1): on Pendulum-v1 the mean of 10 episodes goes from about -1200 (first) to about
# -750 (last) in 100k. CartPole-v1 (~340 over the last 20 episodes by 80k steps; seed 2: ~210) is tests/test_seeds.py's:
# both seeds of a --num-seeds 2 run over 195.


def test_improves_on_pendulum(tmp_path):
    # 8 envs x 256 steps: CleanRL's batch of 2,048 steps and its updates, in an eighth of the policy's forward passes
    # (on 2 cores 57 s against 130 s with 1 env x 2,048; seeds 1-3 at -836 / -815 / -649 over their last 10 episodes)
    result = run_script("ppo", "--env-id", "Pendulum-v1", "--num-envs", "8", "--num-steps", "256", "--total-timesteps",
                        "100000", "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = glob.glob(str(tmp_path / "Pendulum-v1__ppo__1__*"))
    returns = metric(run_dir, "episodic_return")
    assert np.mean(returns[:10]) < -1000 and np.mean(returns[-10:]) >= -900, (returns[:10], returns[-10:])


def test_reverse_scan_is_gae_recursion():
    torch.manual_seed(0)
    deltas = torch.randn(100, 5)
    coef = 0.99 * 0.95 * (torch.rand(100, 5) > 0.1)  # zero where an episode ended
    expected, running = torch.zeros_like(deltas), torch.zeros(5)
    for t in reversed(range(100)):  # CleanRL's loop
        running = deltas[t] + coef[t] * running
        expected[t] = running
    torch.testing.assert_close(reverse_scan(deltas, coef), expected, rtol=1e-5, atol=1e-5)


def test_bf16_keeps_hidden_activations_in_bfloat16_acts_in_float32_and_stays_close():
    torch.manual_seed(0)
    agent, obs = ppo_device_envs.Agent(4, 2, discrete=True), torch.randn(256, 4)
    action = torch.randint(0, 2, (256,))
    reference, noise = agent.evaluate(obs, action), torch.rand(256, 2)
    acted = agent.sample(obs, noise)
    agent.bf16 = True
    assert all(torch.equal(a, b) for a, b in zip(agent.sample(obs, noise), acted, strict=True))  # acting: float32
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        logp, entropy, value = agent.evaluate(obs, action)
    hidden = [t for t in saved if type(t.grad_fn).__name__ == "TanhBackward0"]  # kept for the backward pass
    assert len({t.data_ptr() for t in hidden}) == 4, [(t.shape, t.dtype) for t in saved]
    assert all(t.dtype == torch.bfloat16 for t in hidden)
    assert logp.dtype == value.dtype == torch.float32  # the output layers run in float32
    for got, want in zip((logp, entropy, value), reference, strict=True):
        torch.testing.assert_close(got, want, rtol=0.02, atol=0.02)
        assert not torch.equal(got, want)  # bfloat16 did take part


def test_hidden_size_sets_the_width_of_actor_and_critic(tmp_path):
    run_dir = run_main("ppo_device_envs", ["--env-id", "Pendulum-v1", "--num-envs", "2", "--num-steps", "32",
                                           "--total-timesteps", "64", "--hidden-size", "24", "--save-model"],
                       str(tmp_path))
    agent = torch.load(os.path.join(run_dir, "ppo_device_envs.pt"), weights_only=False)["agent"]
    widths = {name: tuple(tensor.shape) for name, tensor in agent.items() if name.endswith("weight")}
    assert widths == {"critic.0.weight": (24, 3), "critic.2.weight": (24, 24), "critic.4.weight": (1, 24),
                      "actor.0.weight": (24, 3), "actor.2.weight": (24, 24), "actor.4.weight": (1, 24)}


def test_a_budget_that_is_not_whole_rollouts_is_said_once(tmp_path):
    result = run_script("ppo", "--total-timesteps", "1000", "--num-steps", "128", "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert notes == ["note: --total-timesteps 1000 runs as 512 steps, whole iterations of the loop (CleanRL's "
                     "rounding)"]


def test_a_run_of_one_iteration_has_no_steps_per_second_to_report(tmp_path):
    """Steps/s count from the first iteration's end: a run of one iteration has none, which is not 0 steps/s."""
    result = run_script("ppo_device_envs", "--env-id", "CartPole-v1", "--num-envs", "4", "--num-steps", "16",
                        "--total-timesteps", "64", "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    [summary_path] = glob.glob(str(tmp_path / "*" / "summary.json"))
    with open(summary_path) as f:
        summary = json.load(f)
    assert summary["steps"] == 64 and summary["sps"] is None
    assert "64 steps in" in result.stderr and "(one iteration)" in result.stderr
