"""Data-parallel PPO on device envs under torchrun (gloo on CPU): ranks stay in sync and it still learns."""

import glob
import json
import os
import subprocess
import sys

from tests.helpers import ROOT


def test_two_ranks_keep_identical_parameters_and_learn(tmp_path):
    # 120k steps over both ranks: ~270 mean return on CPU (rank 0, last 20 episodes).
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         os.path.join(ROOT, "algos", "ppo_device_envs.py"), "--total-timesteps", "120000", "--runs-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=1200, env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = glob.glob(str(tmp_path / "CartPole-v1__ppo_device_envs__1__*"))  # only rank 0 writes a run folder
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["rank_param_max_diff"] == 0.0
    assert summary["steps"] == 119808 and summary["mean_return_last20"] >= 195, summary
