"""The algorithms turborl ships, in one table: what the benchmark runs, the returns CleanRL publishes, and the
short runs the tests use. scripts/benchmark.py, scripts/report.py, scripts/profile_run.py and tests/ read it;
adding a script to algos/ means adding its row here (README: "Adding an algorithm").
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Task:
    """One benchmark setup of a script."""

    script: str
    env_id: str
    steps: int
    """env steps of a run in the captured paths"""
    eager_steps: int
    """env steps of a run in eager and compile-only (slow: a shorter run still gives many steady windows)"""
    learning_starts: int | None = None
    """override of the script's --learning-starts (scaled with the steps)"""
    variant: str = ""
    """a name for a non-default setup (part of the JSON file name and the table's algo column)"""
    flags: tuple[str, ...] = ()
    """extra flags of that setup"""
    cuda_only: bool = False
    """skipped without CUDA (too big for a CPU run)"""
    compile_only: bool = False
    """its flags tune what --compile builds (--max-autotune): run in the compiled paths only"""
    min_steps: int = 1000
    """fewest env steps of a run at any --scale (PPO: 8 rollouts, so steady-state windows follow its startup)"""

    @property
    def label(self) -> str:
        name = self.script.removesuffix("_device_envs").replace("_", "-")  # ppo_device_envs' tasks are ppo-...
        return f"{name}-{self.variant}" if self.variant else name


@dataclass(frozen=True)
class TestRun:
    """A short CPU run of a script: it logs `loss` after its first updates and crosses `checkpoint_every` once."""

    script: str
    flags: tuple[str, ...]
    loss: str
    checkpoint_every: int
    bf16: bool = False
    """runs layers in bfloat16: compiled code may round at other points than eager (a wider tolerance)"""
    exact_resume: bool = True
    """a resumed run logs exactly what the uninterrupted run logs (not Atari: its C++ games cannot be saved)"""
    gpu_only: bool = False
    """only tests/test_gpu.py runs it (its CPU twin is another test run: CI's time goes elsewhere)"""


@dataclass(frozen=True)
class Algorithm:
    script: str
    """algos/<script>.py"""
    cleanrl_returns: dict[str, float] = field(default_factory=dict)
    """CleanRL's published return at the default budget, per env id (its benchmark docs)"""
    speed: tuple[Task, ...] = ()
    learning: tuple[Task, ...] = ()
    long: tuple[Task, ...] = ()
    """learning runs longer than one device call (scripts/long_runs.py resumes them call after call)"""
    tests: dict[str, TestRun] = field(default_factory=dict)


# TF32 matmuls: the JAX PPO this task is compared with multiplies float32 matrices in TF32 by default on GPUs.
TORCH_ENVS_4096 = ("--num-envs", "4096", "--num-steps", "128", "--tf32")
PENDULUM_OFF_POLICY = ("--env-id", "Pendulum-v1", "--total-timesteps", "450", "--learning-starts", "300",
                       "--log-every", "5")
# FastTD3's recipe (TD3 and SAC on device envs) at a test's size: 8 envs, small networks and batches (bf16: on CUDA
# their updates run in bfloat16 autocast, which compiled code may round differently).
DEVICE_OFF_POLICY_SMALL = ("--num-envs", "8", "--total-timesteps", "480", "--learning-starts", "160",
                           "--buffer-size", "1000", "--batch-size", "64", "--critic-hidden-dim", "32",
                           "--actor-hidden-dim", "16", "--log-every", "2")
DEVICE_OFF_POLICY_PENDULUM = ("--env-backend", "torch", "--env-id", "Pendulum-v1", *DEVICE_OFF_POLICY_SMALL,
                              "--v-min", "-1000", "--v-max", "0")

ALGORITHMS = {
    "dqn": Algorithm(
        "dqn", {"CartPole-v1": 488.7},
        speed=(Task("dqn", "CartPole-v1", 60_000, 30_000, 5_000),),
        learning=(Task("dqn", "CartPole-v1", 500_000, 50_000),),
        tests={"dqn": TestRun("dqn", ("--total-timesteps", "1500", "--learning-starts", "500", "--train-frequency",
                                      "2", "--log-every", "5"), "td_loss", 1000)}),
    "td3": Algorithm(
        "td3", {"HalfCheetah-v5": 9583.0},
        speed=(Task("td3", "HalfCheetah-v5", 25_000, 5_000, 2_000),),
        # Eager TD3/SAC are slow: short eager budgets, the wall-time reference of the return curves.
        learning=(Task("td3", "HalfCheetah-v5", 1_000_000, 50_000),),
        # Ant ends unhealthy episodes: terminal handling under test, at CleanRL's budget; Ant-v4 is the version
        # CleanRL's published returns used (v5 adds contact forces to the observation and a contact cost).
        long=(Task("td3", "Ant-v5", 1_000_000, 1_000_000), Task("td3", "Ant-v4", 1_000_000, 1_000_000)),
        tests={"td3": TestRun("td3", PENDULUM_OFF_POLICY, "qf_loss", 400)}),
    "sac": Algorithm(
        "sac", {"HalfCheetah-v5": 9635.0},
        speed=(Task("sac", "HalfCheetah-v5", 25_000, 4_000, 2_000),),
        learning=(Task("sac", "HalfCheetah-v5", 1_000_000, 30_000),),
        long=(Task("sac", "Ant-v5", 1_000_000, 1_000_000), Task("sac", "Ant-v4", 1_000_000, 1_000_000)),
        tests={"sac": TestRun("sac", PENDULUM_OFF_POLICY, "qf_loss", 400)}),
    "td3_device_envs": Algorithm(
        "td3_device_envs", {},
        # FastTD3's recipe at its defaults: 1,024 MuJoCo Warp worlds, 2 updates of 32,768 samples per vector step.
        # (learning starts are not scaled down with the steps: the loop's first 10 iterations only collect, and
        # scripts/measure.py needs the capture of that collecting function too)
        speed=(Task("td3_device_envs", "Humanoid-v5", 1024 * 400, 1024 * 60, 10 * 1024, variant="mjwarp-humanoid",
                    cuda_only=True),),
        # Ant-v5 ends unhealthy episodes: the return against wall time, 3 seeds (issue: Ant-v5 curves).
        learning=(Task("td3_device_envs", "Ant-v5", 30_000_000, 30_000_000, 10 * 1024, variant="mjwarp-ant",
                       cuda_only=True),),
        # Humanoid-v5 until the mean return of the last 100 episodes reaches 5,000 (the target: within 15 minutes
        # of wall time, compile and capture included).
        long=(Task("td3_device_envs", "Humanoid-v5", 100_000_000, 100_000_000, variant="mjwarp-humanoid",
                   flags=("--stop-at-return", "5000"), cuda_only=True),),
        tests={"td3-device-envs": TestRun("td3_device_envs", DEVICE_OFF_POLICY_PENDULUM, "qf_loss", 320, bf16=True),
               # MuJoCo Warp's physics inside the captured iteration: on the GPU only (on CPU the torch-env run above
               # covers the script, tests/test_offpolicy_device_envs.py runs it once on warp's CPU backend).
               "td3-device-envs-mjwarp": TestRun("td3_device_envs", ("--env-backend", "mjwarp", "--env-id",
                                                                     "HalfCheetah-v5", *DEVICE_OFF_POLICY_SMALL),
                                                 "qf_loss", 320, bf16=True, gpu_only=True)}),
    "sac_device_envs": Algorithm(
        "sac_device_envs", {},
        speed=(Task("sac_device_envs", "Humanoid-v5", 1024 * 400, 1024 * 60, 10 * 1024, variant="mjwarp-humanoid",
                    cuda_only=True),),
        learning=(Task("sac_device_envs", "Ant-v5", 30_000_000, 30_000_000, 10 * 1024, variant="mjwarp-ant",
                       cuda_only=True),),
        long=(Task("sac_device_envs", "Humanoid-v5", 100_000_000, 100_000_000, variant="mjwarp-humanoid",
                   flags=("--stop-at-return", "5000"), cuda_only=True),),
        tests={"sac-device-envs": TestRun("sac_device_envs", DEVICE_OFF_POLICY_PENDULUM, "qf_loss", 320, bf16=True)}),
    "ppo": Algorithm(
        "ppo", {"CartPole-v1": 490.0, "HalfCheetah-v5": 1443.0},
        speed=(Task("ppo", "CartPole-v1", 200_000, 50_000, min_steps=8 * 512),
               Task("ppo", "HalfCheetah-v5", 61_440, 20_480, min_steps=8 * 2048)),
        learning=(Task("ppo", "CartPole-v1", 500_000, 50_000, min_steps=8 * 512),
                  Task("ppo", "HalfCheetah-v5", 1_000_000, 100_000, min_steps=8 * 2048)),
        long=(Task("ppo", "Ant-v5", 1_000_000, 1_000_000),),
        tests={"ppo": TestRun("ppo", ("--total-timesteps", "1536", "--num-steps", "64", "--log-every", "1"),
                              "policy_loss", 1000),
               "ppo-continuous": TestRun("ppo", ("--env-id", "Pendulum-v1", "--num-envs", "2", "--num-steps", "64",
                                                 "--num-minibatches", "4", "--update-epochs", "2",
                                                 "--total-timesteps", "768", "--log-every", "1"),
                                         "value_loss", 500)}),
    "ppo_device_envs": Algorithm(
        "ppo_device_envs", {"CartPole-v1": 490.0},
        speed=(
            # The whole PPO iteration as one graph on torch CartPole: 4096 envs x 128 steps per iteration.
            Task("ppo_device_envs", "CartPole-v1", 4096 * 128 * 100, 4096 * 128 * 6, variant="torch4096",
                 flags=TORCH_ENVS_4096, cuda_only=True),
            # Tuned for throughput (results/experiments/torch4096-ab): bfloat16 hidden layers in the learning
            # passes, autotuned kernels, and launch options for the ~3,000 small kernels of an iteration.
            Task("ppo_device_envs", "CartPole-v1", 4096 * 128 * 300, 4096 * 128 * 6, variant="torch4096-tuned",
                 flags=(*TORCH_ENVS_4096, "--bf16", "--max-autotune", "--inductor", "triton.enable_pdl=True",
                        "combo_kernels=True"), cuda_only=True, compile_only=True),
            # The whole iteration as one graph with MuJoCo Warp's physics inside: 4096 HalfCheetah worlds x 32 steps.
            Task("ppo_device_envs", "HalfCheetah-v5", 4096 * 32 * 40, 4096 * 32 * 4, variant="mjwarp4096",
                 flags=("--env-backend", "mjwarp", "--num-envs", "4096", "--num-steps", "32"), cuda_only=True),
            # ... at 16,384 worlds, where the physics alone steps ~2.3x faster than at 4,096.
            Task("ppo_device_envs", "HalfCheetah-v5", 16384 * 32 * 16, 16384 * 32 * 2, variant="mjwarp16384",
                 flags=("--env-backend", "mjwarp", "--num-envs", "16384", "--num-steps", "32"), cuda_only=True)),
        learning=(
            # Time to solve (mean of the last 100 episodes >= 475), compile and capture included.
            Task("ppo_device_envs", "CartPole-v1", 500_000, 500_000, variant="torch-solve",
                 flags=("--stop-at-return", "475")),
            Task("ppo_device_envs", "CartPole-v1", 2_000_000, 2_000_000, variant="torch-solve128",
                 flags=("--num-envs", "128", "--num-steps", "16", "--stop-at-return", "475")),
            # The memoryless policy on the velocity-masked task, with ppo_lstm's settings there and its budget.
            Task("ppo_device_envs", "CartPole-v1", 500_000, 500_000, variant="torch-masked",
                 flags=("--mask-velocity", "--num-envs", "8", "--learning-rate", "1e-3", "--normalize", "True"))),
        # Humanoid-v5 on MuJoCo Warp until the mean return of the last 100 episodes reaches 5,000 (the target is
        # within 15 minutes of wall time): 8,192 worlds x 16 steps, Brax's humanoid discount (0.97), a 256-unit
        # actor and critic for the 348-number observation, CleanRL's 10 epochs x 32 minibatches.
        long=(Task("ppo_device_envs", "Humanoid-v5", 300_000_000, 300_000_000, variant="mjwarp-humanoid",
                   flags=("--env-backend", "mjwarp", "--num-envs", "8192", "--num-steps", "16", "--gamma", "0.97",
                          "--hidden-size", "256", "--stop-at-return", "5000"), cuda_only=True),),
        tests={"ppo-device-envs": TestRun("ppo_device_envs", ("--total-timesteps", "1536", "--num-steps", "64",
                                                              "--log-every", "1"), "policy_loss", 1000),
               # MuJoCo Warp on warp's CPU backend: Humanoid's random episodes end within ~20 steps. Few steps:
               # warp's CPU kernels take ~40 ms per step of 4 worlds.
               "ppo-device-envs-mjwarp": TestRun("ppo_device_envs", ("--env-backend", "mjwarp", "--env-id",
                                                                     "Humanoid-v5", "--num-envs", "4", "--num-steps",
                                                                     "8", "--num-minibatches", "4", "--total-timesteps",
                                                                     "256", "--log-every", "1"), "policy_loss", 150),
               "ppo-device-envs-bf16": TestRun("ppo_device_envs", ("--num-envs", "8", "--num-steps", "16", "--bf16",
                                                                   "--total-timesteps", "768", "--log-every", "1"),
                                               "policy_loss", 500, bf16=True)}),
    "ppo_atari": Algorithm(
        "ppo_atari", {},
        # CleanRL's 8 envs, and 64 (the ratio to env-only throughput is scripts/atari_env_speed.py's).
        speed=(Task("ppo_atari", "Breakout-v5", 8 * 128 * 24, 8 * 128 * 8, min_steps=8 * 128 * 4),
               Task("ppo_atari", "Breakout-v5", 64 * 128 * 6, 64 * 128 * 3, variant="envs64",
                    flags=("--num-envs", "64"), cuda_only=True)),
        # 2 epochs x 2 minibatches: after 16 Adam steps per log, the CNN's rounding (eager vs compiled convolutions)
        # has grown to ~1e-3 of the loss; after 4 it stays at ~1e-5.
        tests={"ppo-atari": TestRun("ppo_atari", ("--num-envs", "4", "--num-steps", "16", "--total-timesteps", "512",
                                                  "--update-epochs", "2", "--num-minibatches", "2", "--log-every", "1"),
                                    "policy_loss", 300, exact_resume=False)}),
    "ppo_lstm": Algorithm(
        "ppo_lstm", {},
        speed=(
            # The whole recurrent iteration as one graph: velocity-masked CartPole, 4096 envs x 128 steps.
            Task("ppo_lstm", "CartPole-v1", 4096 * 128 * 40, 4096 * 128 * 8, variant="masked4096",
                 flags=("--mask-velocity", "--num-envs", "4096"), cuda_only=True),),
        learning=(
            Task("ppo_lstm", "CartPole-v1", 500_000, 500_000, variant="masked", flags=("--mask-velocity",)),),
        tests={"ppo-lstm": TestRun("ppo_lstm", ("--mask-velocity", "--total-timesteps", "1024", "--num-steps",
                                                "16", "--log-every", "1"), "policy_loss", 600),
               "ppo-lstm-gymnasium": TestRun("ppo_lstm", ("--env-backend", "gymnasium", "--total-timesteps", "1024",
                                                          "--num-steps", "16", "--log-every", "1"), "policy_loss", 600),
               "ppo-lstm-continuous": TestRun("ppo_lstm", ("--env-id", "Pendulum-v1", "--num-envs", "4",
                                                           "--num-minibatches", "2", "--num-steps", "16",
                                                           "--update-epochs", "2", "--total-timesteps", "512",
                                                           "--log-every", "1"), "value_loss", 300)}),
}

TEST_RUNS = {name: run for algorithm in ALGORITHMS.values() for name, run in algorithm.tests.items()}
CPU_TEST_RUNS = {name: run for name, run in TEST_RUNS.items() if not run.gpu_only}
