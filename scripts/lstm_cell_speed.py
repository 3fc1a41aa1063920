"""algos/ppo_lstm_device_envs.py's hand-written LSTM (the actor's and the critic's recurrent weights stacked: one
batched matmul per step for both) against the same cell with one matmul per LSTM, and against two nn.LSTMCell, on
the work one recurrent PPO iteration does with the speed task's sizes: the rollout (128 steps of 4096 envs, no
gradient) and the training unroll of one minibatch (128 steps of 1024 envs, forward and backward), each as the
script runs it (a Python loop over one compiled step, the whole function captured), in eager and compile+cudagraphs.

    python scripts/lstm_cell_speed.py --out results/experiments/lstm-cell/h200.json

The hand-written cell takes the input's share of the gates from one matmul over the whole sequence; nn.LSTMCell
multiplies the input inside every step. The fourth candidate, `Unroll`, is the hand-written cell with its backward
through time written by hand: per step one recurrent matmul and one pointwise function each way, and the
recurrent weights' gradient as one matmul over the whole sequence (tests/test_ppo_lstm.py checks its gradients
against autograd's).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.autograd.function import once_differentiable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from algos.ppo_lstm_device_envs import Agent  # noqa: E402
from scripts.benchmark import save_record  # noqa: E402
from turborl.cli import RunArgs  # noqa: E402
from turborl.paths import ExecutionPath  # noqa: E402


@dataclass
class Args:
    num_envs: int = 4096
    """envs of the rollout (the training minibatch is a quarter of them, as with --num-minibatches 4)"""
    num_steps: int = 128
    """steps of a rollout, and of the unrolled sequences"""
    lstm_size: int = 128
    """units of each LSTM"""
    repeats: int = 20
    """timed calls of each function after its warmup"""
    out: str = ""
    """a JSON file for the results (none: print only)"""


class SeparateRecurrences(nn.Module):
    """The hand-written cell with one recurrent matmul per LSTM (before the weights were stacked)."""

    def __init__(self, agent: Agent, lstm_size: int):
        super().__init__()
        self.agent, self.lstm_size = agent, lstm_size
        self.actor_recurrence = nn.Linear(lstm_size, 4 * lstm_size, bias=False)
        self.critic_recurrence = nn.Linear(lstm_size, 4 * lstm_size, bias=False)
        with torch.no_grad():
            self.actor_recurrence.weight.copy_(agent.recurrence[0].T)
            self.critic_recurrence.weight.copy_(agent.recurrence[1].T)

    def gate_inputs(self, obs):
        return self.agent.gate_inputs(obs)

    def cell(self, gate_input, h, c):
        actor_h, critic_h = h.chunk(2, -1)
        gates = gate_input + torch.cat([self.actor_recurrence(actor_h), self.critic_recurrence(critic_h)], -1)
        i, f, g, o = gates.unflatten(-1, (2, 4, self.lstm_size)).unbind(-2)
        c = f.sigmoid() * c.unflatten(-1, (2, self.lstm_size)) + i.sigmoid() * g.tanh()
        return (o.sigmoid() * c.tanh()).flatten(-2), c.flatten(-2)


class TorchCells(nn.Module):
    """The same two LSTMs as nn.LSTMCell; the encoders give the cells' inputs, 64 features each."""

    def __init__(self, agent: Agent, lstm_size: int):
        super().__init__()
        self.actor_encoder, self.critic_encoder = agent.actor_encoder[:2], agent.critic_encoder[:2]
        self.actor_cell, self.critic_cell = nn.LSTMCell(64, lstm_size), nn.LSTMCell(64, lstm_size)

    def gate_inputs(self, obs):  # the cells' inputs: the input's gate share is computed inside each step
        return torch.cat([self.actor_encoder(obs), self.critic_encoder(obs)], -1)

    def cell(self, features, h, c):
        (actor_x, critic_x), (actor_h, critic_h), (actor_c, critic_c) = features.chunk(2, -1), h.chunk(2, -1), \
            c.chunk(2, -1)
        actor_h, actor_c = self.actor_cell(actor_x, (actor_h, actor_c))
        critic_h, critic_c = self.critic_cell(critic_x, (critic_h, critic_c))
        return torch.cat([actor_h, critic_h], -1), torch.cat([actor_c, critic_c], -1)


def forward_step(gate_input, keep, h, c, recurrence):
    """One step of the two stacked LSTMs (algos/ppo_lstm_device_envs.py's Agent.cell, the state zeroed where
    `keep` is 0): the next h and c, and the gates' activations the backward needs."""
    size = recurrence.shape[1]
    h, c = h * keep, c * keep
    recurrent = torch.bmm(h.unflatten(-1, (2, size)).transpose(0, 1), recurrence).transpose(0, 1)
    i, f, g, o = (gate_input.unflatten(-1, (2, 4 * size)) + recurrent).unflatten(-1, (4, size)).unbind(-2)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    c_new = f * c.unflatten(-1, (2, size)) + i * g
    return (o * c_new.tanh()).flatten(-2), c_new.flatten(-2), torch.stack([i, f, g, o], -2)


def backward_step(dh, dc, activations, c_prev, c_new, keep, recurrence):
    """The gradients through one step: of its gates (batch x 2 LSTMs x 4 gates x size, flattened) and of the state
    it started from (zero where the state was reset)."""
    size = recurrence.shape[1]
    i, f, g, o = activations.unbind(-2)
    dh, dc = dh.unflatten(-1, (2, size)), dc.unflatten(-1, (2, size))
    tanh_c = c_new.unflatten(-1, (2, size)).tanh()
    dc = dc + dh * o * (1 - tanh_c * tanh_c)
    dgates = torch.stack([dc * g * i * (1 - i), dc * c_prev.unflatten(-1, (2, size)) * f * (1 - f),
                          dc * i * (1 - g * g), dh * tanh_c * o * (1 - o)], -2).flatten(-2)  # batch x 2 x 4 size
    dh_prev = torch.bmm(dgates.transpose(0, 1), recurrence.transpose(1, 2)).transpose(0, 1).flatten(-2)
    return dgates.flatten(-2), dh_prev * keep, (dc * f).flatten(-2) * keep


class Unroll(torch.autograd.Function):
    """The LSTMs over whole sequences (the scripts' Agent.unroll: gate inputs, episode starts `first`, initial h
    and c) with a hand-written backward through time: each step one (hidden x 4 hidden) matmul and one pointwise
    function each way, and the recurrent weights' gradient as one batched matmul over every step at the end
    (autograd takes one per step and adds them up one by one). `steps`: the forward and backward step functions
    (compiled or not)."""

    @staticmethod
    def forward(ctx, gate_inputs, first, h0, c0, recurrence, steps):
        forward_fn, _ = steps
        keep = (1 - first).unsqueeze(-1)
        h, c, hidden, cells, activations = h0, c0, [], [], []
        for gate_input, keep_step in zip(gate_inputs.unbind(0), keep.unbind(0), strict=True):
            h, c, step_activations = forward_fn(gate_input, keep_step, h, c, recurrence)
            hidden.append(h)
            cells.append(c)
            activations.append(step_activations)
        hidden = torch.stack(hidden)
        ctx.steps = steps
        ctx.save_for_backward(keep, h0, c0, recurrence, hidden, torch.stack(cells), torch.stack(activations))
        return hidden

    @staticmethod
    @once_differentiable
    def backward(ctx, dhidden):
        keep, h0, c0, recurrence, hidden, cells, activations = ctx.saved_tensors
        _, backward_fn = ctx.steps
        h_prev = torch.cat([h0.unsqueeze(0), hidden[:-1]]) * keep  # the state each step started from
        c_prev = torch.cat([c0.unsqueeze(0), cells[:-1]]) * keep
        dh, dc, dgates = torch.zeros_like(h0), torch.zeros_like(c0), []
        for t in reversed(range(len(hidden))):
            dgate, dh, dc = backward_fn(dhidden[t] + dh, dc, activations[t], c_prev[t], cells[t], keep[t], recurrence)
            dgates.append(dgate)
        dgates = torch.stack(dgates[::-1])  # steps x batch x 8 size: also the gradient of the gate inputs
        size = recurrence.shape[1]
        drecurrence = torch.bmm(h_prev.flatten(0, 1).unflatten(-1, (2, size)).permute(1, 2, 0),
                                dgates.flatten(0, 1).unflatten(-1, (2, 4 * size)).transpose(0, 1))
        return dgates, None, dh, dc, drecurrence, None


class HandWrittenBackward(nn.Module):
    """The hand-written cell, its training unroll through `Unroll` (the rollout runs the agent's own cell)."""

    def __init__(self, agent: Agent):
        super().__init__()
        self.agent = agent
        self.steps = (forward_step, backward_step)

    def gate_inputs(self, obs):
        return self.agent.gate_inputs(obs)

    def cell(self, gate_input, h, c):
        return self.agent.cell(gate_input, h, c)

    def compile_steps(self, path: ExecutionPath) -> None:
        self.steps = (path.compile(forward_step), path.compile(backward_step))

    def unroll(self, gate_inputs, first, h, c):
        return Unroll.apply(gate_inputs, first, h, c, self.agent.recurrence, self.steps)


def synchronize():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, repeats: int) -> tuple[float, float]:
    """(seconds of the first calls: compile and capture, seconds per call after them)."""
    start = time.perf_counter()
    for _ in range(4):
        fn()
    synchronize()
    startup = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    synchronize()
    return startup, (time.perf_counter() - start) / repeats


def measure(lstm: nn.Module, path: ExecutionPath, args: Args) -> dict:
    device = path.device
    steps, envs, minibatch = args.num_steps, args.num_envs, args.num_envs // 4
    obs = torch.randn(steps, envs, 2, device=device)
    keep = (torch.rand(steps, envs, 1, device=device) > 0.01).float()  # an episode starts at ~1% of steps
    h0 = torch.zeros(envs, 2 * args.lstm_size, device=device)

    def lstm_step(gate_input, keep, h, c):
        return lstm.cell(gate_input, h * keep, c * keep)

    step = path.compile(lstm_step)

    def rollout():
        h, c = h0, h0
        with torch.no_grad():
            for t in range(steps):
                h, c = step(lstm.gate_inputs(obs[t]), keep[t], h, c)
        return h

    by_hand = isinstance(lstm, HandWrittenBackward)
    if by_hand:
        lstm.compile_steps(path)

    def train_unroll():
        gate_inputs = lstm.gate_inputs(obs[:, :minibatch])
        h, c, hidden = h0[:minibatch], h0[:minibatch], []
        if by_hand:  # the whole sequence in one autograd function
            hidden = lstm.unroll(gate_inputs, 1 - keep[:, :minibatch, 0], h, c)
        else:
            for gate_input, keep_step in zip(gate_inputs.unbind(0), keep[:, :minibatch].unbind(0), strict=True):
                h, c = step(gate_input, keep_step, h, c)
                hidden.append(h)
            hidden = torch.stack(hidden)
        hidden.square().mean().backward()

    rollout_startup, rollout_seconds = timed(path.capture(rollout), args.repeats)
    train_startup, train_seconds = timed(path.capture(train_unroll), args.repeats)
    return {"rollout_ms": 1e3 * rollout_seconds, "train_unroll_ms": 1e3 * train_seconds,
            "startup_seconds": rollout_startup + train_startup}


def main(args: Args) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # CPU: a check that it runs
    rows, size = [], args.lstm_size
    for path_name, on in (("eager", False), ("compile+cudagraphs", True)):
        for lstm_name, make in (("hand-written", lambda agent: agent),
                                ("hand-written, a matmul per LSTM", lambda agent: SeparateRecurrences(agent, size)),
                                ("nn.LSTMCell", lambda agent: TorchCells(agent, size)),
                                ("hand-written, backward through time by hand", HandWrittenBackward)):
            torch.manual_seed(0)
            lstm = make(Agent(obs_dim=2, n_out=2, discrete=True, lstm_size=size)).to(device)
            run_flags = RunArgs(compile=on, cudagraphs=on)
            rows.append({"lstm": lstm_name, "path": path_name,
                         **measure(lstm, ExecutionPath(run_flags, device), args)})
            print(rows[-1], flush=True)
    print(f"\n{'lstm':44} {'path':20} {'rollout ms':>11} {'train unroll ms':>16} {'startup s':>10}")
    for row in rows:
        print(f"{row['lstm']:44} {row['path']:20} {row['rollout_ms']:11.2f} {row['train_unroll_ms']:16.2f} "
              f"{row['startup_seconds']:10.1f}")
    save_record(args.out, {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    from turborl.cli import parse

    main(parse(Args, description=__doc__.split("\n\n")[0]))
