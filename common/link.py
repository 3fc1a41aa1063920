"""The link between the envs and the device: each step's answer carried to the device by name, in one copy, and
the action carried back, waiting on one event."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


class EnvStep(NamedTuple):
    """What the envs answered to one action, per env."""

    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor
    """the observation the step reached (where an episode just ended, its last one)"""
    next_obs: torch.Tensor
    """the observation to act on next (where an episode just ended, the next episode's first)"""


class EnvLink:
    """Carries each env step between the simulator and the device without stalling the GPU.

    The host writes the envs' answer with `send(EnvStep(...))` into named views of one buffer. Inside a hot
    function, `receive()` returns it as an EnvStep of device tensors and `send_action(action)` starts the action's
    way back. After that call, `action_queued()` marks the action sent and `action()` returns it in the form the
    envs take. `answered`: whether the staged step answers an action (False after `reset`: the first observation
    alone, nothing to store).

    Three cases:
    - host envs (gymnasium), CUDA device: the answer is staged in pinned host memory and `receive()` copies it to
      the device in one copy; the action comes back into pinned memory and `action()` waits on one event (never a
      full synchronize), so GPU work launched in between (an update) keeps running while the CPU steps the envs.
      Captured, both copies are part of the step's graph.
    - host envs, CPU device: one buffer, nothing to copy.
    - device envs (torch, MuJoCo Warp): the answers are device tensors already; nothing crosses to the host.
    """

    def __init__(self, n_envs: int, obs_dim: int, action_shape: tuple, action_dtype: torch.dtype,
                 device: torch.device, envs_on_device: bool):
        widths = {"reward": 1, "terminated": 1, "truncated": 1, "final_obs": obs_dim, "next_obs": obs_dim}
        shape, action_size = (n_envs, sum(widths.values())), (n_envs, *action_shape)
        self.event = None
        if envs_on_device:
            self.staged = self.on_device = torch.zeros(shape, device=device)
            self.action_out = torch.zeros(action_size, dtype=action_dtype, device=device)
            self.sent = EnvStep(*self._fields(self.staged, widths))
            self.for_envs = self.action_out
        elif device.type == "cuda":
            self.staged, self.on_device = torch.zeros(shape, pin_memory=True), torch.zeros(shape, device=device)
            self.action_out = torch.zeros(action_size, dtype=action_dtype, pin_memory=True)
            self.sent = EnvStep(*self._fields(self.staged.numpy(), widths))
            self.for_envs = self.action_out.numpy()
            self.event = torch.cuda.Event()
        else:
            self.staged = self.on_device = torch.zeros(shape)
            self.action_out = torch.zeros(action_size, dtype=action_dtype)
            self.sent = EnvStep(*self._fields(self.staged.numpy(), widths))
            self.for_envs = self.action_out.numpy()
        self.received = EnvStep(*self._fields(self.on_device, widths))
        self.answered = False

    @staticmethod
    def _fields(buffer, widths: dict) -> list:
        """Named column views of `buffer` (the single-column fields as vectors)."""
        fields, start = [], 0
        for width in widths.values():
            view = buffer[:, start : start + width]
            fields.append(view[:, 0] if width == 1 else view)
            start += width
        return fields

    def reset(self, obs) -> None:
        """The first observation: no answer to an action yet."""
        self.staged.zero_()
        self.sent.next_obs[:] = obs
        self.answered = False

    def send(self, step: EnvStep) -> None:
        for field, value in zip(self.sent, step, strict=True):
            field[:] = value
        self.answered = True

    def receive(self) -> EnvStep:
        """The envs' last answer on the device (call inside the hot function)."""
        if self.on_device is not self.staged:
            self.on_device.copy_(self.staged, non_blocking=True)
        return self.received

    def send_action(self, action: torch.Tensor) -> None:
        """Start the action's copy to the host (call inside the hot function)."""
        self.action_out.copy_(action, non_blocking=True)

    def action_queued(self) -> None:
        """Mark the action sent by the call just made: `action()` returns once it has arrived."""
        if self.event is not None:
            self.event.record()

    def action(self) -> np.ndarray | torch.Tensor:
        """The action for the envs: a numpy view of the host buffer, or the device tensor for device envs."""
        if self.event is not None:
            self.event.synchronize()
        return self.for_envs

    def state_dict(self) -> dict:
        """The envs' last answer, not yet stored (for checkpoints; they are saved after an env step)."""
        return {"staged": self.staged.cpu().clone()}

    def load_state_dict(self, state: dict) -> None:
        self.staged.copy_(state["staged"])
        self.answered = True
