"""PQN on CPU (algos/pqn.py on gymnasium envs, algos/pqn_device_envs.py on torch envs): learning CartPole, the
Q(lambda) returns against a plain loop, the exported greedy policy. (Eager = compile, exact resume and
reproducibility run for their registry test runs in test_paths.py, test_resume.py and test_reproducibility.py;
bad input in test_bad_input.py.)"""

import glob
import os

import numpy as np
import pytest
import torch

from algos import pqn, pqn_device_envs
from algos.pqn import QNetwork
from tests.helpers import metric, run_script


@pytest.mark.parametrize("script", ["pqn", "pqn_device_envs"])
def test_learns_cartpole(tmp_path, script):
    # Measured on CPU (seed 1): the mean of the last 20 episodes is 162 (pqn) and 105 (on the torch envs) after 60k
    # steps with these flags; random actions get ~22 (CleanRL's defaults reach 500 at their 500k).
    result = run_script(script, "--total-timesteps", "60000", "--num-envs", "16", "--num-steps", "32",
                        "--learning-rate", "1e-3", "--exploration-fraction", "0.2", "--save-model",
                        "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = glob.glob(str(tmp_path / f"CartPole-v1__{script}__1__*"))
    returns = metric(run_dir, "episodic_return")
    assert np.mean(returns[-20:]) >= 90 and np.mean(returns[:20]) < 40, (returns[:20], returns[-20:])
    q_network = QNetwork(4, 2)
    q_network.load_state_dict(torch.load(os.path.join(run_dir, f"{script}.pt"), weights_only=False)["q_network"])
    exported = torch.export.load(os.path.join(run_dir, f"{script}.pt2")).module()
    obs = torch.randn(64, 4)
    assert torch.equal(exported(obs), q_network(obs).argmax(-1))


@pytest.mark.parametrize("script", [pqn, pqn_device_envs])
def test_q_lambda_returns_are_the_recursion_with_time_limits_bootstrapped(script):
    """Against the recursion written as a loop (CleanRL's, plus the bootstrap where a time limit cut an episode):
    G_t = r_t + gamma * [(1 - ended_t) * (lambda * G_t+1 + (1 - lambda) * v_t+1) + truncated_t * v_final_t]."""
    torch.manual_seed(0)
    steps, envs, gamma, q_lambda = 9, 3, 0.9, 0.65
    rewards, next_values, final_values = torch.randn(steps, envs), torch.randn(steps, envs), torch.randn(steps, envs)
    terminated = torch.zeros(steps, envs)
    truncated = torch.zeros(steps, envs)
    terminated[2, 0] = terminated[8, 1] = 1  # one at the rollout's last step
    truncated[5, 0] = truncated[4, 2] = 1
    ended = torch.maximum(terminated, truncated)

    expected = torch.zeros(steps, envs)
    for t in reversed(range(steps)):
        ahead = next_values[t] if t == steps - 1 else q_lambda * expected[t + 1] + (1 - q_lambda) * next_values[t]
        expected[t] = rewards[t] + gamma * ((1 - ended[t]) * ahead + truncated[t] * final_values[t])

    got = script.q_lambda_returns(rewards, ended, truncated, next_values, final_values, gamma, q_lambda)
    torch.testing.assert_close(got, expected)
    # a termination takes nothing from beyond it; a truncation only its own final state's value
    assert torch.isclose(got[2, 0], rewards[2, 0])
    assert torch.isclose(got[5, 0], rewards[5, 0] + gamma * final_values[5, 0])
