"""Recurrent PPO on CPU (algos/ppo_lstm.py on gymnasium envs, algos/ppo_lstm_device_envs.py on device envs): the
LSTM, learning a task that needs memory, the exported recurrent policy, user errors. (Eager = compile, and exact
resumes, run for their registry test runs in tests/test_paths.py and test_resume.py.)"""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from algos import ppo_lstm, ppo_lstm_device_envs
from algos.ppo_lstm_device_envs import Agent
from tests.helpers import ROOT, metric, run_script


@pytest.mark.parametrize("script", [ppo_lstm, ppo_lstm_device_envs])
def test_each_lstm_is_torchs_lstm_cell(script):
    torch.manual_seed(0)
    agent = script.Agent(obs_dim=3, n_out=2, discrete=True, lstm_size=16)
    obs, h, c = torch.randn(5, 3), torch.randn(5, 32), torch.randn(5, 32)
    with torch.no_grad():
        next_h, next_c = agent.cell(agent.gate_inputs(obs), h, c)
    for half, encoder, recurrence in ((slice(0, 16), agent.actor_encoder, agent.recurrence[0]),
                                      (slice(16, 32), agent.critic_encoder, agent.recurrence[1])):
        reference = nn.LSTMCell(64, 16)  # torch orders the gates i, f, g, o too
        with torch.no_grad():
            reference.weight_ih.copy_(encoder[2].weight)
            reference.bias_ih.copy_(encoder[2].bias + 0.1)
            reference.bias_hh.fill_(-0.1)
            reference.weight_hh.copy_(recurrence.T)
            want_h, want_c = reference(encoder[:2](obs), (h[:, half], c[:, half]))
        torch.testing.assert_close(next_h[:, half], want_h)
        torch.testing.assert_close(next_c[:, half], want_c)


@pytest.mark.parametrize("compiled", [False, True])
def test_backward_through_time_by_hand_is_autograds(compiled):
    """scripts/lstm_cell_speed.py's candidate unroll (a hand-written backward, the recurrent weights' gradient in
    one matmul) against autograd through the scripts' unroll: the same hidden states and gradients of every
    parameter and of the initial state, with episode starts inside the sequences."""
    from scripts.lstm_cell_speed import HandWrittenBackward
    from turborl.cli import RunArgs
    from turborl.paths import ExecutionPath

    torch.manual_seed(0)
    dtype = torch.float32 if compiled else torch.float64  # float64: only the order of sums may differ
    agent = Agent(obs_dim=3, n_out=2, discrete=True, lstm_size=8).to(dtype)
    candidate = HandWrittenBackward(agent)
    candidate.compile_steps(ExecutionPath(RunArgs(compile=compiled), torch.device("cpu")))
    obs = torch.randn(12, 5, 3, dtype=dtype)
    first = (torch.rand(12, 5) < 0.2).to(dtype)
    h0 = torch.randn(5, 16, dtype=dtype, requires_grad=True)
    c0 = torch.randn(5, 16, dtype=dtype, requires_grad=True)
    weights = torch.randn(12, 5, 16, dtype=dtype)  # a loss that weighs every hidden unit of every step

    def gradients(unroll):
        agent.zero_grad()
        h0.grad = c0.grad = None
        hidden = unroll()
        (hidden * weights).sum().backward()
        return [hidden.detach(), h0.grad, c0.grad, *[p.grad.clone() for p in agent.parameters() if p.grad is not None]]

    want = gradients(lambda: agent.unroll(obs, first, h0, c0, agent.cell))
    got = gradients(lambda: candidate.unroll(agent.gate_inputs(obs), first, h0, c0))
    assert len(got) == len(want) == 3 + 8 + 1  # hidden, h0, c0; two encoders' weights and biases; the recurrence
    tolerance = {"rtol": 1e-4, "atol": 1e-5} if compiled else {"rtol": 1e-10, "atol": 1e-12}
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, **tolerance)
    assert first[1:].sum() > 5 and want[-1].abs().max() > 0  # resets inside; the recurrence's gradient is not 0


def test_learns_cartpole_without_velocities(tmp_path):
    # Budget measured on CPU (seed 1): the mean of the last 20 episodes reaches 478 in 60k steps; the memoryless
    # MLP PPO with the same settings stays at ~45 over 500k steps (results/experiments/memory).
    result = run_script("ppo_lstm_device_envs", "--mask-velocity", "--total-timesteps", "60000", "--runs-dir",
                        str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = glob.glob(str(tmp_path / "CartPole-v1__ppo_lstm_device_envs__1__*"))
    returns = metric(run_dir, "episodic_return")
    assert np.mean(returns[-20:]) >= 300, returns[-20:]  # measured: 478


def test_exported_policy_carries_the_lstm_state(tmp_path):
    result = run_script("ppo_lstm_device_envs", "--env-id", "Pendulum-v1", "--mask-velocity", "--num-envs", "4",
                        "--num-minibatches", "2", "--num-steps", "64", "--total-timesteps", "512", "--save-model",
                        "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    [run_dir] = glob.glob(str(tmp_path / "Pendulum-v1__ppo_lstm_device_envs__1__*"))
    checkpoint = torch.load(os.path.join(run_dir, "ppo_lstm_device_envs.pt"), weights_only=False)
    agent = Agent(obs_dim=2, n_out=1, discrete=False, lstm_size=128)  # masked Pendulum: cos and sin only
    agent.load_state_dict(checkpoint["agent"])
    stats = checkpoint["normalization"]["obs_rms"]
    exported = torch.export.load(os.path.join(run_dir, "ppo_lstm_device_envs.pt2")).module()

    torch.manual_seed(0)
    h = c = torch.zeros(7, 256)  # the actor's and the critic's LSTM states
    expected_h = expected_c = torch.zeros(7, 256)
    for _ in range(5):  # a sequence: the state returned goes back in
        obs = torch.randn(7, 2)
        action, h, c = exported(obs, h, c)
        with torch.no_grad():
            normalized = ((obs - stats["mean"]) / torch.sqrt(stats["var"] + 1e-8)).clamp(-10, 10)
            expected_h, expected_c = agent.cell(agent.gate_inputs(normalized), expected_h, expected_c)
            expected = agent.deterministic(expected_h).clamp(-2, 2)
        torch.testing.assert_close(action, expected)
        torch.testing.assert_close(h, expected_h)
        torch.testing.assert_close(c, expected_c)
    assert h.abs().sum() > 0

    # scripts/evaluate.py carries the state through each episode, on observations masked as in training.
    evaluation = subprocess.run([sys.executable, "scripts/evaluate.py", run_dir, "--episodes", "2"], cwd=ROOT,
                                capture_output=True, text=True, check=False)
    assert evaluation.returncode == 0, evaluation.stderr[-2000:]
    with open(os.path.join(run_dir, "evaluation.json")) as f:
        assert len(json.load(f)["returns"]) == 2
