"""DQN on CPU: learning and user errors, run the way users run the script."""

import glob
import json
import os

from tests.helpers import metric, run_script

# A small-budget configuration that solves CartPole-v1 on CPU in ~25 s (seeds 1-4 reach 235-272).
FAST = ["--total-timesteps", "25000", "--learning-starts", "1000", "--train-frequency", "2",
        "--target-network-frequency", "250", "--exploration-fraction", "0.2", "--learning-rate", "5e-4"]


def test_dqn_learns_cartpole_every_seed_and_cudagraphs_without_cuda_falls_back(tmp_path):
    """Run two seeds (--num-seeds 2) with --cudagraphs on the CPU (--no-cuda: any machine): one warning, then a
    normal run in which each seed learns. DQN's learning test and its every-seed test (tests/test_seeds.py's for the
    others) in one run: two runs of the same budget cost the suite ~100 s more on 2 cores."""
    result = run_script("dqn", *FAST, "--cudagraphs", "--no-cuda", "--seed", "1", "--num-seeds", "2",
                        "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("--cudagraphs needs a CUDA device") == 1
    for seed in (1, 2):
        [run_dir] = glob.glob(str(tmp_path / f"CartPole-v1__dqn__{seed}__*"))
        returns = metric(run_dir, "episodic_return")
        assert sum(returns[-20:]) / 20 >= 195, (seed, returns[-20:])
        summary = json.load(open(os.path.join(run_dir, "summary.json")))
        assert summary["steps"] == 25000 and summary["sps"] > 0
