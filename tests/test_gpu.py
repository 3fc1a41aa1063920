"""GPU checks (skipped without CUDA): capture works, the four paths compute the same thing, RNG advances."""

import pytest
import torch

from common import accelerate
from tests.helpers import metric

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PATHS = {"eager": (False, False), "compile": (True, False), "cudagraphs": (False, True), "compile+cudagraphs": (True, True)}


def _dqn_losses(tmp_path, compile: bool, cudagraphs: bool, n: int = 10) -> list[float]:
    from algos.dqn import Args, main

    torch._dynamo.reset()  # a fresh compile per run: dynamo's recompile limit is per code object
    args = Args(total_timesteps=400, learning_starts=200, train_frequency=1, log_every=1, compile=compile,
                cudagraphs=cudagraphs, runs_dir=str(tmp_path / f"{compile}-{cudagraphs}"))
    summary = main(args)
    losses = metric(summary["run_dir"], "td_loss")
    assert len(losses) >= n
    return losses[:n]


def test_dqn_four_paths_same_first_losses(tmp_path):
    eager = _dqn_losses(tmp_path, False, False)
    for name, (compile, cudagraphs) in PATHS.items():
        if name != "eager":
            torch.testing.assert_close(_dqn_losses(tmp_path, compile, cudagraphs), eager, rtol=1e-3, atol=1e-5,
                                       msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("compile", [False, True])
def test_captured_replays_advance_the_rng(compile):
    torch._dynamo.reset()
    device = torch.device("cuda")

    def draw():
        return torch.rand(4096, device=device)

    captured = accelerate(draw, compile=compile, cudagraphs=True, device=device)
    draws = torch.stack([captured() for _ in range(8)])  # warmup, capture, then replays
    assert all(not torch.equal(draws[i], draws[i + 1]) for i in range(7))
    replayed = draws[4:]
    assert abs(replayed.mean().item() - 0.5) < 0.01 and abs(replayed.std().item() - 12 ** -0.5) < 0.01
