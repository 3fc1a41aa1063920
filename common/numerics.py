"""Device-side numerics the scripts share: running statistics for normalization (PPO, TD3 and SAC on device envs),
a parallel reverse scan for GAE, and the projection of a distributional critic's target. All plain tensor ops
(the statistics updated in place), so they compile and capture."""

from __future__ import annotations

import torch


class RunningMeanStd:
    """Running mean and variance on device, updated in place (gymnasium's RunningMeanStd)."""

    def __init__(self, shape: tuple, device: torch.device):
        self.mean = torch.zeros(shape, device=device)
        self.var = torch.ones(shape, device=device)
        self.count = torch.full((), 1e-4, device=device)

    def update(self, x: torch.Tensor) -> None:
        batch_mean, batch_var, n = x.mean(0), x.var(0, unbiased=False), x.shape[0]
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
