"""Bad input, as a user types it, for every script: exit 2, one line that names the bad value and the fix, no
traceback, and no run folder left behind (the checks come before anything is built)."""

import pytest

from tests.helpers import assert_user_error, run_script

PENDULUM = ["--env-backend", "torch", "--env-id", "Pendulum-v1"]

CASES = [
    # (script, flags, words the line must hold)
    ("dqn", ["--env-id", "NoSuchEnv-v0"], ["unknown env id", "NoSuchEnv-v0"]),
    ("dqn", ["--env-id", "Pendulum-v1"], ["discrete action space", "CartPole-v1"]),
    ("dqn", ["--total-timesteps", "0"], ["--total-timesteps must be positive"]),
    ("dqn", ["--batch-size", "20000"], ["--batch-size 20000", "--buffer-size"]),
    ("dqn", ["--checkpoint-every", "100"], ["--checkpoint-every needs --save-model"]),
    ("dqn", ["--total-timesteps", "5000"], ["--learning-starts 10000", "train nothing"]),
    ("dqn", ["--gamma", "5"], ["--gamma must be in (0, 1]"]),
    ("dqn", ["--threads", "0"], ["--threads must be >= 1"]),
    ("dqn", ["--num-seeds", "-1"], ["--num-seeds must be >= 1"]),
    ("dqn", ["--buffer-size", "-1"], ["--buffer-size must be >= 1"]),
    ("dqn", ["--start-e", "2"], ["--end-e", "--start-e"]),
    ("dqn", ["--end-e", "-1"], ["--end-e", "--start-e"]),
    ("ppo", ["--env-backend", "foo"], ["--env-backend 'foo'", "algos/ppo_device_envs.py"]),
    ("ppo_lstm_device_envs", ["--env-backend", "foo"], ["--env-backend 'foo'", "here it is torch"]),
    ("dqn", ["--num-seeds", "2", "--seed", str(2**32 - 1)], ["ends at seed 4294967296", "lower --seed to 4294967294"]),
    ("dqn", ["--num-seeds", "4", "--buffer-size", str(10**11)], ["replay memory", "for each of 4 seeds", "GiB",
                                                                 "lower --buffer-size to", "or lower --num-seeds"]),
    ("td3", ["--env-id", "CartPole-v1"], ["continuous", "Pendulum-v1"]),
    ("td3", ["--env-id", "Pendulum-v1", "--total-timesteps", "5000"], ["--learning-starts 25000", "train nothing"]),
    ("td3", ["--env-id", "Pendulum-v1", "--exploration-noise", "-0.1"], ["--exploration-noise"]),
    ("td3", ["--env-id", "Pendulum-v1", "--num-seeds", "0"], ["--num-seeds must be >= 1"]),
    ("td3", ["--env-id", "Pendulum-v1", "--num-seeds", "-2"], ["--num-seeds must be >= 1"]),
    ("td3", ["--env-id", "Pendulum-v1", "--num-seeds", "2", "--buffer-size", str(10**11)],
     ["replay memory", "GiB", "lower --buffer-size to"]),
    ("td3", [*PENDULUM, "--num-seeds", "2"], ["--num-seeds 2", "--env-backend gymnasium"]),
    ("td3", [*PENDULUM, "--async-envs"], ["--async-envs", "leave it out"]),
    ("td3", [*PENDULUM, "--env-threads", "2"], ["--env-threads", "leave it out"]),
    ("td3", [*PENDULUM, "--capture-video"], ["--capture-video", "render nothing", "scripts/evaluate.py"]),
    ("ppo_device_envs", ["--capture-video"], ["--capture-video", "render nothing"]),
    ("td3", ["--env-id", "Pendulum-v1", "--env-threads", "-1"], ["--env-threads must be >= 0"]),
    ("sac", ["--env-id", "Pendulum-v1", "--env-threads", "2", "--async-envs"], ["--env-threads and --async-envs",
                                                                                "pick one"]),
    ("sac", ["--env-id", "CartPole-v1"], ["continuous", "Pendulum-v1"]),
    ("sac", ["--env-id", "Pendulum-v1", "--gamma", "0"], ["--gamma must be in (0, 1]"]),
    ("sac", ["--env-id", "Pendulum-v1", "--num-seeds", "0"], ["--num-seeds must be >= 1"]),
    ("sac", ["--env-id", "Pendulum-v1", "--num-seeds", "3", "--buffer-size", str(10**11)],
     ["replay memory", "GiB", "lower --buffer-size to"]),
    ("ppo", ["--num-seeds", "0"], ["--num-seeds must be >= 1"]),
    ("ppo", ["--env-id", "NoSuchEnv-v0"], ["unknown env id", "NoSuchEnv-v0"]),
    ("ppo", ["--env-id", "Blackjack-v1"], ["flat Box observations"]),
    ("ppo", ["--env-id", "Blackjack-v1", "--async-envs"], ["flat Box observations"]),
    ("dqn", ["--env-id", "Blackjack-v1"], ["DQN here takes flat Box observations"]),
    ("ppo", ["--num-minibatches", "3"], ["--num-minibatches 3", "512"]),
    ("ppo", ["--num-envs", "0"], ["--num-envs must be positive"]),
    ("ppo", ["--total-timesteps", "100"], ["less than one rollout"]),
    ("ppo", ["--env-backend", "torch"], ["algos/ppo_device_envs.py"]),
    ("ppo", ["--seed", "-1"], ["--seed must be in [0, 2**32)"]),
    ("ppo", ["--max-autotune"], ["--max-autotune", "add --compile"]),
    ("ppo", ["--inductor", "combo_kernels=True"], ["--inductor", "add --compile"]),
    ("ppo", ["--compile", "--inductor", "no_such_option=True"], ["no_such_option", "option of torch._inductor.config"]),
    ("ppo_device_envs", ["--env-id", "LunarLander-v3"], ["--env-backend torch has no LunarLander-v3"]),
    ("ppo_device_envs", ["--env-backend", "gymnasium"], ["algos/ppo.py"]),
    ("ppo_device_envs", ["--num-minibatches", "3"], ["--num-minibatches 3", "512"]),
    ("ppo_device_envs", ["--hidden-size", "0"], ["--hidden-size must be positive"]),
    ("ppo_device_envs", ["--num-envs", "1", "--num-steps", "4", "--num-minibatches", "4"],
     ["one sample per minibatch"]),
    ("ppo_device_envs", ["--seed", str(2**32)], ["--seed must be in [0, 2**32)"]),
    ("ppo_lstm", ["--num-minibatches", "3"], ["--num-minibatches 3", "--num-envs 8", "whole env sequences"]),
    ("ppo_lstm", ["--env-backend", "torch"], ["algos/ppo_lstm_device_envs.py"]),
    ("ppo_lstm", ["--env-id", "Blackjack-v1"], ["flat Box observations"]),
    ("ppo_lstm_device_envs", ["--num-minibatches", "3"], ["--num-minibatches 3", "--num-envs 8",
                                                          "whole env sequences"]),
    ("ppo_lstm_device_envs", ["--env-backend", "gymnasium"], ["algos/ppo_lstm.py"]),
    ("ppo_lstm_device_envs", ["--env-id", "LunarLander-v3"], ["--env-backend torch has no LunarLander-v3"]),
    ("ppo_lstm_device_envs", ["--lstm-size", "0"], ["--lstm-size must be positive"]),
    ("ppo_atari", ["--env-id", "CartPole-v1"], ["not an Atari game", "Breakout-v5"]),
    ("ppo_atari", ["--env-id", "NoSuchGame-v5"], ["not an Atari game"]),
    ("ppo_atari", ["--env-backend", "torch"], ["ale-py's C++ vector env"]),
    ("ppo_atari", ["--num-minibatches", "3"], ["--num-minibatches 3", "1024"]),
    ("ppo_atari", ["--env-threads", "-1"], ["--env-threads must be >= 0"]),
    ("ppo_atari", ["--num-envs", "3"], ["--num-envs must be even"]),
    ("pqn_atari", ["--env-id", "CartPole-v1"], ["not an Atari game", "algos/pqn.py"]),
    ("pqn_atari", ["--num-envs", "0"], ["--num-envs must be even and positive"]),
    ("pqn_atari", ["--num-minibatches", "3"], ["--num-minibatches 3", "1024"]),
    ("pqn_atari", ["--q-lambda", "-1"], ["--q-lambda must be in [0, 1]"]),
    ("pqn", ["--fused-optimizer"], ["--fused-optimizer", "RAdam"]),
    ("pqn", ["--env-id", "Pendulum-v1"], ["PQN needs a discrete action space", "CartPole-v1"]),
    ("pqn", ["--num-minibatches", "3"], ["--num-minibatches 3", "512"]),
    ("pqn", ["--q-lambda", "1.5"], ["--q-lambda must be in [0, 1]"]),
    ("pqn", ["--end-e", "0.5", "--start-e", "0.1"], ["--end-e", "--start-e"]),
    ("pqn", ["--env-backend", "torch"], ["algos/pqn_device_envs.py"]),
    ("pqn_device_envs", ["--env-backend", "gymnasium"], ["algos/pqn.py"]),
    ("pqn_device_envs", ["--env-id", "Pendulum-v1"], ["PQN needs a discrete action space"]),
    ("td3_device_envs", ["--env-backend", "gymnasium"], ["algos/td3.py"]),
    ("td3_device_envs", ["--env-backend", "torch", "--env-id", "CartPole-v1"], ["TD3", "continuous", "Pendulum-v1"]),
    ("td3_device_envs", [*PENDULUM, "--v-min", "5", "--v-max", "5"], ["--v-min"]),
    ("td3_device_envs", [*PENDULUM, "--std-min", "0.5", "--std-max", "0.1"], ["--std-min"]),
    ("td3_device_envs", [*PENDULUM, "--num-updates", "0"], ["--num-updates"]),
    ("td3_device_envs", [*PENDULUM, "--buffer-size", str(10**11)], ["replay memory", "GiB", "lower --buffer-size to"]),
    ("td3_device_envs", [*PENDULUM, "--gamma", "0.99"], ["no default support", "--v-min and --v-max"]),
    ("sac_device_envs", ["--env-backend", "gymnasium"], ["algos/sac.py"]),
    ("sac_device_envs", ["--env-backend", "torch", "--env-id", "CartPole-v1"], ["SAC", "continuous", "Pendulum-v1"]),
    ("sac_device_envs", [*PENDULUM, "--num-envs", "64", "--buffer-size", "32"], ["--buffer-size 32"]),
    ("sac_device_envs", [*PENDULUM, "--alpha", "0"], ["--alpha"]),
]


@pytest.mark.parametrize("script, flags, words", CASES, ids=[f"{s}:{' '.join(f)}"[:60] for s, f, _ in CASES])
def test_bad_input_is_one_clear_line_and_no_run_folder(tmp_path, script, flags, words):
    assert_user_error(run_script(script, *flags, "--runs-dir", str(tmp_path)), *words)
    assert not list(tmp_path.iterdir())  # a run that never started leaves no folder


def test_a_budget_below_one_rollout_of_every_rank_is_one_clear_line(tmp_path):
    """Under torchrun (WORLD_SIZE), --total-timesteps counts the steps of all ranks: 2 ranks of 8 envs x 16 steps
    make a rollout of 256. The check comes before the ranks join their process group."""
    result = run_script("ppo_device_envs", "--num-envs", "8", "--num-steps", "16", "--total-timesteps", "200",
                        "--runs-dir", str(tmp_path), env={"WORLD_SIZE": "2"})
    assert_user_error(result, "less than one rollout (num-envs x num-steps x 2 ranks = 256)", "raise it to 256")
    assert not list(tmp_path.iterdir())
