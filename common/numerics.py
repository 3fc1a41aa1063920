"""Device-side numerics the scripts share: writes at a device index, the rollout's sampling noise, running
statistics (TD3 and SAC on device envs) and PPO's observation and reward normalization built on them, a parallel
reverse scan for GAE, and the projection of a distributional critic's target. All plain tensor ops (state updated
in place), so they compile and capture."""

from __future__ import annotations

import torch
from torch import nn


def put(storage: torch.Tensor, index: torch.Tensor, value: torch.Tensor) -> None:
    """storage[index] = value for a 0-dim device index: plain indexing would read the index on the host."""
    storage.index_copy_(0, index.view(1), value.unsqueeze(0))


def draw_noise_(noise: torch.Tensor, discrete: bool) -> None:
    """A rollout's sampling noise, drawn before it: Gumbel for categorical actions (Gumbel-max), standard normal
    for Gaussian ones. Call it outside compiled code: compiled code may reorder independent random ops, and the
    paths would then draw different actions from the same seed."""
    if discrete:
        noise.copy_(-torch.log(-torch.log(torch.rand_like(noise))))
    else:
        noise.normal_()


class RunningMeanStd:
    """Running mean and variance on device, updated in place (gymnasium's RunningMeanStd)."""

    def __init__(self, shape: tuple, device: torch.device):
        self.mean = torch.zeros(shape, device=device)
        self.var = torch.ones(shape, device=device)
        self.count = torch.full((), 1e-4, device=device)

    def update(self, x: torch.Tensor, dim: int = 0) -> None:
        """Fold in the batch x along `dim`; the axes before it (seeds) keep statistics of their own."""
        keep = dim > 0
        batch_mean, batch_var, n = x.mean(dim, keep), x.var(dim, unbiased=False, keepdim=keep), x.shape[dim]
        delta, total = batch_mean - self.mean, self.count + n
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.add_(n)

    def state_dict(self) -> dict:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        for name, tensor in self.state_dict().items():
            tensor.copy_(state[name])


class Normalization:
    """gymnasium's NormalizeObservation and NormalizeReward on the device, in place: observations by their running
    mean and variance, rewards by the running std of a discounted return; both clipped to [-10, 10]. With
    `enabled` False both pass values through unchanged (and the statistics never move). With `n_seeds`, values
    carry a leading seeds axis (`[seeds, envs, ...]`) and each seed keeps statistics of its own."""

    def __init__(self, enabled: bool, obs_shape: tuple, n_envs: int, gamma: float, device: torch.device,
                 n_seeds: int | None = None):
        self.enabled, self.gamma = enabled, gamma
        seeds, self.dim = ((n_seeds, 1), 1) if n_seeds else ((), 0)  # statistics' leading shape, the batch axis
        self.obs_rms, self.return_rms = RunningMeanStd((*seeds, *obs_shape), device), RunningMeanStd(seeds, device)
        self.discounted_return = torch.zeros(*seeds[:1], n_envs, device=device)

    def obs(self, x: torch.Tensor, update: bool) -> torch.Tensor:
        """x normalized; `update`: fold x into the statistics first (observations the agent acts on)."""
        if not self.enabled:
            return x
        if update:
            self.obs_rms.update(x, self.dim)
        return ((x - self.obs_rms.mean) / torch.sqrt(self.obs_rms.var + 1e-8)).clamp(-10, 10)

    def reward(self, reward: torch.Tensor, terminated: torch.Tensor) -> torch.Tensor:
        """The reward scaled by the std of each env's discounted return, which restarts after a termination."""
        if not self.enabled:
            return reward
        self.discounted_return.copy_(self.discounted_return * self.gamma * (1 - terminated) + reward)
        self.return_rms.update(self.discounted_return, self.dim)
        return (reward / torch.sqrt(self.return_rms.var + 1e-8)).clamp(-10, 10)

    def frozen_obs(self, seed: int = 0) -> nn.Module:
        """The observation normalization with today's statistics (with a seeds axis, seed `seed`'s), as a module
        for an exported policy."""
        if not self.enabled:
            return FrozenObsNormalization()
        mean, var = self.obs_rms.mean, self.obs_rms.var
        return FrozenObsNormalization(*((mean[seed, 0], var[seed, 0]) if self.dim else (mean, var)))

    def state_dict(self) -> dict:
        return {"obs_rms": self.obs_rms.state_dict(), "return_rms": self.return_rms.state_dict(),
                "discounted_return": self.discounted_return}

    def load_state_dict(self, state: dict) -> None:
        self.obs_rms.load_state_dict(state["obs_rms"])
        self.return_rms.load_state_dict(state["return_rms"])
        self.discounted_return.copy_(state["discounted_return"])


class FrozenObsNormalization(nn.Module):
    """Observations normalized with fixed statistics and clipped to [-10, 10]; the identity without statistics."""

    def __init__(self, mean: torch.Tensor | None = None, var: torch.Tensor | None = None):
        super().__init__()
        self.enabled = mean is not None
        if mean is not None:
            self.register_buffer("mean", mean.clone())
            self.register_buffer("var", var.clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return ((obs - self.mean) / torch.sqrt(self.var + 1e-8)).clamp(-10, 10) if self.enabled else obs


def reverse_scan(x: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
    """y[t] = x[t] + coef[t] * y[t+1] (y past the end = 0) along dim 0, in log2(T) vectorized doubling steps
    (Hillis-Steele): each step folds in the segment `shift` further on, so no Python loop over time."""
    y, c = x, coef
    shift = 1
    while shift < x.shape[0]:
        y = torch.cat([y[:-shift] + c[:-shift] * y[shift:], y[-shift:]])
        c = torch.cat([c[:-shift] * c[shift:], c[-shift:]])
        shift *= 2
    return y


def project(probs: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """C51's projection: the distribution of reward + discount * Z (Z ~ probs, one row per sample, on `support`)
    put back on `support`, each shifted value's probability split between its two neighbours there."""
    v_min, v_max, num_atoms = support[0], support[-1], support.shape[0]
    shifted = (reward.unsqueeze(1) + discount.unsqueeze(1) * support).clamp(v_min, v_max)
    position = ((shifted - v_min) / (support[1] - support[0])).clamp(0, num_atoms - 1)  # rounding stays inside
    below = position.floor().clamp(max=num_atoms - 2)
    upper_share = position - below  # in [0, 1]: the top value puts all of its mass on the last atom
    projected = torch.zeros_like(probs)
    projected.scatter_add_(1, below.long(), probs * (1 - upper_share))
    projected.scatter_add_(1, below.long() + 1, probs * upper_share)
    return projected
