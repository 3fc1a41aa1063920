"""The algorithms turborl ships, in one table: what the benchmark runs, the parity suite against CleanRL (its
setups and the returns it publishes), and the short runs the tests use. scripts/benchmark.py, scripts/long_runs.py,
scripts/report.py, scripts/profile_run.py and tests/ read it; adding a script to algos/ means adding its row here
(README: "Adding an algorithm").
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
    seeds: int = 3
    """a parity task's seeds, 1 to this (MuJoCo v4: 5; Atari, 10M steps a seed: 1)"""

    @property
    def label(self) -> str:
        name = self.script.removesuffix("_device_envs").replace("_", "-")  # ppo_device_envs' tasks are ppo-...
        return f"{name}-{self.variant}" if self.variant else name


@dataclass(frozen=True)
class Reference:
    """A return CleanRL publishes for one of its scripts: the mean ± std over its seeds at its budget."""

    mean: float
    std: float
    """over seeds (population std, as openrlbenchmark prints it); for a model card, over its evaluation episodes"""
    seeds: int | None
    """None: the page does not say"""
    steps: int
    source: str
    """where it is printed: CleanRL's docs page and the script its table is of, or a model card"""
    metric: str = "last100"
    """`last100`: each seed's mean training return over its last 100 episodes (CleanRL's benchmark tables);
    `eval`: one seed's final policy over 10 evaluation episodes (a model card)"""


@dataclass(frozen=True)
class TestRun:
    """A short CPU run of a script: it logs `loss` after its first updates and crosses `checkpoint_every` once."""

    script: str
    flags: tuple[str, ...]
    loss: str
    checkpoint_every: int
    loose: bool = False
    """compiled code rounds at other points than eager and the gap grows over the first updates (layers in
    bfloat16; float32 physics and greedy actions inside the compiled env step): the paths are compared loosely"""
    exact_resume: bool = True
    """a resumed run logs exactly what the uninterrupted run logs (not Atari: its C++ games cannot be saved)"""
    gpu_only: bool = False
    """only tests/test_gpu.py runs it (its CPU twin is another test run: CI's time goes elsewhere)"""


@dataclass(frozen=True)
class Algorithm:
    script: str
    """algos/<script>.py"""
    cleanrl: dict[str, Reference] = field(default_factory=dict)
    """CleanRL's published returns of the script this one reproduces, per env id (its benchmark docs)"""
    speed: tuple[Task, ...] = ()
    learning: tuple[Task, ...] = ()
    long: tuple[Task, ...] = ()
    """learning runs longer than one device call (scripts/long_runs.py resumes them call after call)"""
    parity: tuple[Task, ...] = ()
    """CleanRL's benchmark setups (env version, budget, default flags, seeds), run by scripts/long_runs.py --suite
    parity and compared with `cleanrl` in results/parity/"""
    tests: dict[str, TestRun] = field(default_factory=dict)


# TF32 matmuls: the JAX PPO this task is compared with multiplies float32 matrices in TF32 by default on GPUs.
TORCH_ENVS_4096 = ("--num-envs", "4096", "--num-steps", "128", "--tf32")
DQN_SHORT = ("--total-timesteps", "1500", "--learning-starts", "500", "--train-frequency", "2", "--log-every", "5")
PENDULUM_OFF_POLICY = ("--env-id", "Pendulum-v1", "--total-timesteps", "450", "--learning-starts", "300",
                       "--log-every", "5")
# FastTD3's recipe (TD3 and SAC on device envs) at a test's size: 8 envs, small networks and batches (loose: on CUDA
# their updates run in bfloat16 autocast, which compiled code may round differently).
DEVICE_OFF_POLICY_SMALL = ("--num-envs", "8", "--total-timesteps", "480", "--learning-starts", "160",
                           "--buffer-size", "1000", "--batch-size", "64", "--critic-hidden-dim", "32",
                           "--actor-hidden-dim", "16", "--log-every", "2")
DEVICE_OFF_POLICY_PENDULUM = ("--env-backend", "torch", "--env-id", "Pendulum-v1", *DEVICE_OFF_POLICY_SMALL,
                              "--v-min", "-1000", "--v-max", "0")

# CleanRL's benchmark (its docs' tables): MuJoCo v4 at 1M steps, classic control at 500k, Atari at 10M with 8 envs.
MUJOCO_V4 = ("HalfCheetah-v4", "Walker2d-v4", "Hopper-v4", "Ant-v4")
CLASSIC_CONTROL = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")
ATARI = ("Breakout-v5", "Pong-v5", "BeamRider-v5")
# purejaxql's PQN on Atari: 128 games x 32 steps, 2 epochs of 32 minibatches, epsilon to 0.001, a constant rate.
PQN_ATARI_128 = ("--num-envs", "128", "--num-steps", "32", "--num-minibatches", "32", "--update-epochs", "2",
                 "--end-e", "0.001", "--no-anneal-lr")
MJWARP_PPO = ("--env-backend", "mjwarp", "--num-envs", "8192", "--num-steps", "16", "--gamma", "0.97",
              "--hidden-size", "256")


DOCS = "https://docs.cleanrl.dev/rl-algorithms/"
CARDS = "https://huggingface.co/sdpkjc/"  # CleanRL's scripts at their defaults, one seed each (Ant-v4 has no table)
CLEANRL = {
    "dqn": {"CartPole-v1": Reference(488.69, 16.11, 3, 500_000, DOCS + "dqn/ (dqn.py)"),
            "Acrobot-v1": Reference(-91.54, 7.20, 3, 500_000, DOCS + "dqn/ (dqn.py)"),
            "MountainCar-v0": Reference(-194.95, 8.48, 3, 500_000, DOCS + "dqn/ (dqn.py)")},
    "td3": {"HalfCheetah-v4": Reference(9583.22, 126.09, 3, 1_000_000, DOCS + "td3/ (td3_continuous_action.py)"),
            "Walker2d-v4": Reference(4057.59, 658.78, 3, 1_000_000, DOCS + "td3/ (td3_continuous_action.py)"),
            "Hopper-v4": Reference(3134.61, 360.18, 3, 1_000_000, DOCS + "td3/ (td3_continuous_action.py)"),
            "Ant-v4": Reference(5089.24, 105.84, 1, 1_000_000, CARDS + "Ant-v4-td3_continuous_action-seed3",
                                metric="eval")},
    # The page's table names these rows -v2; its data (docs/benchmark/sac.md, benchmark/sac.sh) are v4 runs.
    "sac": {"HalfCheetah-v4": Reference(9634.89, 1423.73, 3, 1_000_000, DOCS + "sac/ (sac_continuous_action.py)"),
            "Walker2d-v4": Reference(3591.45, 911.33, 3, 1_000_000, DOCS + "sac/ (sac_continuous_action.py)"),
            "Hopper-v4": Reference(2310.46, 342.82, 3, 1_000_000, DOCS + "sac/ (sac_continuous_action.py)"),
            "Ant-v4": Reference(6007.20, 151.81, 1, 1_000_000, CARDS + "Ant-v4-sac_continuous_action-seed3",
                                metric="eval")},
    "ppo": {"CartPole-v1": Reference(490.04, 6.12, 3, 500_000, DOCS + "ppo/ (ppo.py)"),
            "Acrobot-v1": Reference(-86.36, 1.32, 3, 500_000, DOCS + "ppo/ (ppo.py)"),
            "MountainCar-v0": Reference(-200.0, 0.0, 3, 500_000, DOCS + "ppo/ (ppo.py)"),
            "HalfCheetah-v4": Reference(1442.64, 46.03, 3, 1_000_000, DOCS + "ppo/ (ppo_continuous_action.py)"),
            "Walker2d-v4": Reference(2287.95, 571.78, 3, 1_000_000, DOCS + "ppo/ (ppo_continuous_action.py)"),
            "Hopper-v4": Reference(2382.86, 271.74, 3, 1_000_000, DOCS + "ppo/ (ppo_continuous_action.py)"),
            # Only at 8M steps, on the RPO page (ppo_continuous_action_8M).
            "Ant-v4": Reference(1824.17, 905.78, None, 8_000_000, DOCS + "rpo/ (ppo_continuous_action.py, 8M)")},
    "pqn": {"CartPole-v1": Reference(495.13, 6.89, 3, 500_000, DOCS + "pqn/ (pqn.py)"),
            "Acrobot-v1": Reference(-95.63, 5.73, 3, 500_000, DOCS + "pqn/ (pqn.py)"),
            "MountainCar-v0": Reference(-200.0, 0.0, 3, 500_000, DOCS + "pqn/ (pqn.py)")},
    "ppo_atari": {"Breakout-v5": Reference(211.24, 151.84, 3, 10_000_000, DOCS + "ppo/ (ppo_atari_envpool.py)"),
                  "Pong-v5": Reference(20.45, 0.09, 3, 10_000_000, DOCS + "ppo/ (ppo_atari_envpool.py)"),
                  "BeamRider-v5": Reference(2501.85, 210.52, 3, 10_000_000, DOCS + "ppo/ (ppo_atari_envpool.py)")},
    "pqn_atari": {"Breakout-v5": Reference(384.85, 12.39, 3, 10_000_000, DOCS + "pqn/ (pqn_atari_envpool.py)"),
                  "Pong-v5": Reference(20.49, 0.11, 3, 10_000_000, DOCS + "pqn/ (pqn_atari_envpool.py)"),
                  "BeamRider-v5": Reference(5753.03, 2394.70, 3, 10_000_000, DOCS + "pqn/ (pqn_atari_envpool.py)")},
}


def parity(script: str, env_ids: tuple[str, ...], steps: int, **task) -> tuple[Task, ...]:
    """CleanRL's setup of `script` on each env: its budget and the script's defaults (which are CleanRL's)."""
    return tuple(Task(script, env_id, steps=steps, eager_steps=steps, **task) for env_id in env_ids)


ALGORITHMS = {
    "dqn": Algorithm(
        "dqn", cleanrl=CLEANRL["dqn"],
        speed=(Task("dqn", "CartPole-v1", steps=60_000, eager_steps=30_000, learning_starts=5_000),
               Task("dqn", "CartPole-v1", steps=60_000, eager_steps=30_000, learning_starts=5_000, variant="fused",
                    flags=("--fused-optimizer",), cuda_only=True)),
        learning=(Task("dqn", "CartPole-v1", steps=500_000, eager_steps=50_000),),
        parity=parity("dqn", CLASSIC_CONTROL, 500_000),
        tests={"dqn": TestRun("dqn", DQN_SHORT, loss="td_loss", checkpoint_every=1000),
               "dqn-fused": TestRun("dqn", (*DQN_SHORT, "--fused-optimizer"), loss="td_loss", checkpoint_every=1000),
               "dqn-seeds3": TestRun("dqn", (*DQN_SHORT, "--num-seeds", "3"), loss="td_loss", checkpoint_every=1000)}),
    "td3": Algorithm(
        "td3", cleanrl=CLEANRL["td3"],
        speed=(Task("td3", "HalfCheetah-v5", steps=25_000, eager_steps=5_000, learning_starts=2_000),
               Task("td3", "HalfCheetah-v5", steps=25_000, eager_steps=5_000, learning_starts=2_000, variant="fused",
                    flags=("--fused-optimizer",), cuda_only=True),
               # 10 seeds in one process (--num-seeds): steps/s counts every seed's steps
               Task("td3", "Hopper-v4", steps=25_000, eager_steps=2_000, learning_starts=2_000, variant="seeds10",
                    flags=("--num-seeds", "10"), cuda_only=True)),
        # Eager TD3/SAC are slow: short eager budgets, the wall-time reference of the return curves.
        learning=(Task("td3", "HalfCheetah-v5", steps=1_000_000, eager_steps=50_000),),
        # Ant ends unhealthy episodes: terminal handling under test, at CleanRL's budget; Ant-v4 is the version
        # CleanRL's published returns used (v5 adds contact forces to the observation and a contact cost).
        long=(Task("td3", "Ant-v5", steps=1_000_000, eager_steps=1_000_000),),
        parity=parity("td3", MUJOCO_V4, 1_000_000, seeds=5),
        tests={"td3": TestRun("td3", PENDULUM_OFF_POLICY, loss="qf_loss", checkpoint_every=400),
               "td3-fused": TestRun("td3", (*PENDULUM_OFF_POLICY, "--fused-optimizer"), loss="qf_loss",
                                    checkpoint_every=400, gpu_only=True),
               # --num-seeds: paths, reproducibility and resume of 3 seeds in one run (every seed's records)
               "td3-seeds3": TestRun("td3", (*PENDULUM_OFF_POLICY, "--num-seeds", "3"), loss="qf_loss",
                                     checkpoint_every=400)}),
    "sac": Algorithm(
        "sac", cleanrl=CLEANRL["sac"],
        speed=(Task("sac", "HalfCheetah-v5", steps=25_000, eager_steps=4_000, learning_starts=2_000),
               Task("sac", "HalfCheetah-v5", steps=25_000, eager_steps=4_000, learning_starts=2_000, variant="fused",
                    flags=("--fused-optimizer",), cuda_only=True),
               Task("sac", "Hopper-v4", steps=25_000, eager_steps=2_000, learning_starts=2_000, variant="seeds10",
                    flags=("--num-seeds", "10"), cuda_only=True)),
        learning=(Task("sac", "HalfCheetah-v5", steps=1_000_000, eager_steps=30_000),),
        long=(Task("sac", "Ant-v5", steps=1_000_000, eager_steps=1_000_000),),
        parity=parity("sac", MUJOCO_V4, 1_000_000, seeds=5),
        tests={"sac": TestRun("sac", PENDULUM_OFF_POLICY, loss="qf_loss", checkpoint_every=400),
               "sac-seeds3": TestRun("sac", (*PENDULUM_OFF_POLICY, "--num-seeds", "3"), loss="qf_loss",
                                     checkpoint_every=400)}),
    "td3_device_envs": Algorithm(
        "td3_device_envs",
        # FastTD3's recipe at its defaults: 1,024 MuJoCo Warp worlds, 2 updates of 32,768 samples per vector step.
        # (learning starts are not scaled down with the steps: the loop's first 10 iterations only collect, and
        # scripts/measure.py needs the capture of that collecting function too)
        speed=(Task("td3_device_envs", "Humanoid-v5", steps=1024 * 400, eager_steps=1024 * 60,
                    learning_starts=10 * 1024, variant="mjwarp-humanoid", cuda_only=True),),
        # Humanoid-v5 until the mean return of the last 100 episodes reaches 5,000 (the seconds to it, compile and
        # capture included, and the final policy on gymnasium's C engine); Ant-v5 ends unhealthy episodes: the
        # return against wall time over 30M steps.
        parity=(Task("td3_device_envs", "Humanoid-v5", steps=100_000_000, eager_steps=100_000_000,
                     variant="mjwarp-humanoid", flags=("--stop-at-return", "5000"), cuda_only=True),
                Task("td3_device_envs", "Ant-v5", steps=30_000_000, eager_steps=30_000_000, variant="mjwarp-ant",
                     cuda_only=True)),
        tests={"td3-device-envs": TestRun("td3_device_envs", DEVICE_OFF_POLICY_PENDULUM, loss="qf_loss",
                                          checkpoint_every=320, loose=True),
               # MuJoCo Warp's physics inside the captured iteration: on the GPU only (on CPU the torch-env run above
               # covers the script, tests/test_offpolicy_device_envs.py runs it once on warp's CPU backend).
               "td3-device-envs-mjwarp": TestRun("td3_device_envs", ("--env-backend", "mjwarp", "--env-id",
                                                                     "HalfCheetah-v5", *DEVICE_OFF_POLICY_SMALL),
                                                 loss="qf_loss", checkpoint_every=320, loose=True, gpu_only=True)}),
    "sac_device_envs": Algorithm(
        "sac_device_envs",
        speed=(Task("sac_device_envs", "Humanoid-v5", steps=1024 * 400, eager_steps=1024 * 60,
                    learning_starts=10 * 1024, variant="mjwarp-humanoid", cuda_only=True),),
        parity=(Task("sac_device_envs", "Humanoid-v5", steps=100_000_000, eager_steps=100_000_000,
                     variant="mjwarp-humanoid", flags=("--stop-at-return", "5000"), cuda_only=True),
                Task("sac_device_envs", "Ant-v5", steps=30_000_000, eager_steps=30_000_000, variant="mjwarp-ant",
                     cuda_only=True)),
        tests={"sac-device-envs": TestRun("sac_device_envs", DEVICE_OFF_POLICY_PENDULUM, loss="qf_loss",
                                          checkpoint_every=320, loose=True)}),
    "ppo": Algorithm(
        "ppo", cleanrl=CLEANRL["ppo"],
        speed=(Task("ppo", "CartPole-v1", steps=200_000, eager_steps=50_000, min_steps=8 * 512),
               Task("ppo", "HalfCheetah-v5", steps=61_440, eager_steps=20_480, min_steps=8 * 2048),
               Task("ppo", "Hopper-v4", steps=16 * 2048, eager_steps=8 * 2048, variant="seeds10",
                    flags=("--num-seeds", "10"), cuda_only=True, min_steps=8 * 2048)),
        learning=(Task("ppo", "CartPole-v1", steps=500_000, eager_steps=50_000, min_steps=8 * 512),
                  Task("ppo", "HalfCheetah-v5", steps=1_000_000, eager_steps=100_000, min_steps=8 * 2048)),
        long=(Task("ppo", "Ant-v5", steps=1_000_000, eager_steps=1_000_000),),
        # ppo.py reproduces CleanRL's ppo.py (discrete actions) and ppo_continuous_action.py (Box actions).
        parity=(*parity("ppo", CLASSIC_CONTROL, 500_000), *parity("ppo", MUJOCO_V4, 1_000_000, seeds=5)),
        tests={"ppo": TestRun("ppo", ("--total-timesteps", "1536", "--num-steps", "64", "--log-every", "1"),
                              loss="policy_loss", checkpoint_every=1000),
               "ppo-continuous": TestRun("ppo", ("--env-id", "Pendulum-v1", "--num-envs", "2", "--num-steps", "64",
                                                 "--num-minibatches", "4", "--update-epochs", "2",
                                                 "--total-timesteps", "768", "--log-every", "1"),
                                         loss="value_loss", checkpoint_every=500),
               # --num-seeds: both action kinds, 3 seeds in one run (per-seed normalization and gradient clipping)
               "ppo-continuous-seeds3": TestRun("ppo", ("--env-id", "Pendulum-v1", "--num-envs", "2", "--num-steps",
                                                        "64", "--num-minibatches", "4", "--update-epochs", "2",
                                                        "--total-timesteps", "768", "--log-every", "1",
                                                        "--num-seeds", "3"), loss="value_loss", checkpoint_every=500),
               "ppo-seeds3": TestRun("ppo", ("--total-timesteps", "1536", "--num-steps", "64", "--log-every", "1",
                                             "--num-seeds", "3"), loss="policy_loss", checkpoint_every=1000,
                                     gpu_only=True)}),
    "ppo_device_envs": Algorithm(
        "ppo_device_envs",
        speed=(
            # The whole PPO iteration as one graph on torch CartPole: 4096 envs x 128 steps per iteration.
            Task("ppo_device_envs", "CartPole-v1", steps=4096 * 128 * 100, eager_steps=4096 * 128 * 6,
                 variant="torch4096", flags=TORCH_ENVS_4096, cuda_only=True),
            # Tuned for throughput (results/experiments/torch4096-ab): bfloat16 hidden layers in the learning
            # passes, autotuned kernels, and launch options for the ~3,000 small kernels of an iteration.
            Task("ppo_device_envs", "CartPole-v1", steps=4096 * 128 * 300, eager_steps=4096 * 128 * 6,
                 variant="torch4096-tuned",
                 flags=(*TORCH_ENVS_4096, "--bf16", "--max-autotune", "--inductor", "triton.enable_pdl=True",
                        "combo_kernels=True"), cuda_only=True, compile_only=True),
            # The whole iteration as one graph with MuJoCo Warp's physics inside: 4096 HalfCheetah worlds x 32 steps.
            Task("ppo_device_envs", "HalfCheetah-v5", steps=4096 * 32 * 40, eager_steps=4096 * 32 * 4,
                 variant="mjwarp4096", flags=("--env-backend", "mjwarp", "--num-envs", "4096", "--num-steps", "32"),
                 cuda_only=True),
            # ... at 16,384 worlds, where the physics alone steps ~2.3x faster than at 4,096.
            Task("ppo_device_envs", "HalfCheetah-v5", steps=16384 * 32 * 16, eager_steps=16384 * 32 * 2,
                 variant="mjwarp16384", flags=("--env-backend", "mjwarp", "--num-envs", "16384", "--num-steps", "32"),
                 cuda_only=True)),
        learning=(
            # Time to solve (mean of the last 100 episodes >= 475), compile and capture included.
            Task("ppo_device_envs", "CartPole-v1", steps=500_000, eager_steps=500_000, variant="torch-solve",
                 flags=("--stop-at-return", "475")),
            Task("ppo_device_envs", "CartPole-v1", steps=2_000_000, eager_steps=2_000_000, variant="torch-solve128",
                 flags=("--num-envs", "128", "--num-steps", "16", "--stop-at-return", "475")),
            # The memoryless policy on the velocity-masked task, with ppo_lstm_device_envs' settings and budget.
            Task("ppo_device_envs", "CartPole-v1", steps=500_000, eager_steps=500_000, variant="torch-masked",
                 flags=("--mask-velocity", "--num-envs", "8", "--learning-rate", "1e-3", "--normalize", "True"))),
        # Humanoid-v5 on MuJoCo Warp until the mean return of the last 100 episodes reaches 5,000: 8,192 worlds x
        # 16 steps, Brax's humanoid discount (0.97), a 256-unit actor and critic for the 348-number observation,
        # CleanRL's 10 epochs x 32 minibatches (MJWARP_PPO). Ant-v5 over 30M steps with the same settings.
        parity=(Task("ppo_device_envs", "Humanoid-v5", steps=300_000_000, eager_steps=300_000_000,
                     variant="mjwarp-humanoid", flags=(*MJWARP_PPO, "--stop-at-return", "5000"), cuda_only=True),
                Task("ppo_device_envs", "Ant-v5", steps=30_000_000, eager_steps=30_000_000, variant="mjwarp-ant",
                     flags=MJWARP_PPO, cuda_only=True)),
        tests={"ppo-device-envs": TestRun("ppo_device_envs", ("--total-timesteps", "1536", "--num-steps", "64",
                                                              "--log-every", "1"), loss="policy_loss",
                                          checkpoint_every=1000),
               # MuJoCo Warp on warp's CPU backend: Humanoid's random episodes end within ~20 steps. Few steps:
               # warp's CPU kernels take ~40 ms per step of 4 worlds; 6 iterations log the 6 losses the paths test
               # compares (with 8, its five tests took ~1.5x as long).
               "ppo-device-envs-mjwarp": TestRun("ppo_device_envs", ("--env-backend", "mjwarp", "--env-id",
                                                                     "Humanoid-v5", "--num-envs", "4", "--num-steps",
                                                                     "8", "--num-minibatches", "4", "--total-timesteps",
                                                                     "192", "--log-every", "1"),
                                                    loss="policy_loss", checkpoint_every=100),
               "ppo-device-envs-bf16": TestRun("ppo_device_envs", ("--num-envs", "8", "--num-steps", "16", "--bf16",
                                                                   "--total-timesteps", "768", "--log-every", "1"),
                                               loss="policy_loss", checkpoint_every=500, loose=True)}),
    "ppo_atari": Algorithm(
        "ppo_atari", cleanrl=CLEANRL["ppo_atari"],
        # CleanRL's 8 envs, and 64 (the ratio to env-only throughput is scripts/atari_env_speed.py's).
        speed=(Task("ppo_atari", "Breakout-v5", steps=8 * 128 * 24, eager_steps=8 * 128 * 8, min_steps=8 * 128 * 4),
               Task("ppo_atari", "Breakout-v5", steps=64 * 128 * 6, eager_steps=64 * 128 * 3, variant="envs64",
                    flags=("--num-envs", "64"), cuda_only=True)),
        parity=parity("ppo_atari", ATARI, 10_000_000, cuda_only=True, seeds=1),
        # 2 epochs x 2 minibatches: after 16 Adam steps per log, the CNN's rounding (eager vs compiled convolutions)
        # has grown to ~1e-3 of the loss; after 4 it stays at ~1e-5.
        # Loose, on the value loss: compiled, the Nature CNN's convolutions round apart from eager's cuDNN ones (on
        # an H100, after the first update 7,682 of the first layer's 8,192 weights differed, by 1.7e-6 at most, with
        # every action and random draw the same); the fourth minibatch's policy loss, ~5e-4, then moved by 4.5%,
        # its value loss by 0.3%.
        tests={"ppo-atari": TestRun("ppo_atari", ("--num-envs", "4", "--num-steps", "16", "--total-timesteps", "512",
                                                  "--update-epochs", "2", "--num-minibatches", "2", "--log-every", "1"),
                                    loss="value_loss", checkpoint_every=300, exact_resume=False, loose=True)}),
    "pqn_atari": Algorithm(
        "pqn_atari", cleanrl=CLEANRL["pqn_atari"],
        speed=(Task("pqn_atari", "Breakout-v5", steps=8 * 128 * 24, eager_steps=8 * 128 * 8, min_steps=8 * 128 * 4),
               Task("pqn_atari", "Breakout-v5", steps=128 * 32 * 24, eager_steps=128 * 32 * 8, variant="envs128",
                    flags=PQN_ATARI_128, cuda_only=True)),
        # CleanRL's 8 games step too slowly for the 20-minute target (results/experiments/atari-env: their
        # env-only rate); purejaxql's recipe runs 128 games with CleanRL's ratio of updates to env steps.
        long=(Task("pqn_atari", "Breakout-v5", steps=10_000_000, eager_steps=10_000_000, variant="envs128",
                   flags=PQN_ATARI_128, cuda_only=True),),
        parity=parity("pqn_atari", ATARI, 10_000_000, cuda_only=True, seeds=1),
        # Loose: the first losses agree exactly, later ones drift apart even with identical actions (all random:
        # --end-e 1): the compiled LayerNorm CNN rounds otherwise and the RAdam steps carry it.
        tests={"pqn-atari": TestRun("pqn_atari", ("--num-envs", "4", "--num-steps", "16", "--total-timesteps", "512",
                                                  "--update-epochs", "2", "--num-minibatches", "2", "--log-every", "1"),
                                    loss="td_loss", checkpoint_every=300, exact_resume=False, loose=True)}),
    "pqn": Algorithm(
        "pqn", cleanrl=CLEANRL["pqn"],
        speed=(Task("pqn", "CartPole-v1", steps=200_000, eager_steps=50_000, min_steps=8 * 512),),
        learning=(Task("pqn", "CartPole-v1", steps=500_000, eager_steps=50_000, min_steps=8 * 512),),
        parity=parity("pqn", CLASSIC_CONTROL, 500_000),
        tests={"pqn": TestRun("pqn", ("--total-timesteps", "1536", "--num-steps", "64", "--log-every", "1"),
                              loss="td_loss", checkpoint_every=1000)}),
    "pqn_device_envs": Algorithm(
        "pqn_device_envs", cleanrl=CLEANRL["pqn"],
        # The whole PQN iteration as one graph on torch CartPole: 4096 envs x 128 steps per iteration.
        speed=(Task("pqn_device_envs", "CartPole-v1", steps=4096 * 128 * 100, eager_steps=4096 * 128 * 6,
                    variant="torch4096", flags=("--num-envs", "4096", "--num-steps", "128"), cuda_only=True),),
        # Time to solve with 4096 envs (mean of the last 100 episodes >= 475), compile and capture included.
        learning=(Task("pqn_device_envs", "CartPole-v1", steps=4096 * 32 * 200, eager_steps=4096 * 32 * 200,
                       variant="torch-solve4096", flags=("--num-envs", "4096", "--num-steps", "32",
                                                         "--stop-at-return", "475"), cuda_only=True),),
        # Loose: the compiled env step (float32 physics, the greedy action's Q-values) rounds otherwise than eager;
        # the losses agree to 1e-4 while only the updates are compiled, to ~1e-3 four iterations in with it too.
        tests={"pqn-device-envs": TestRun("pqn_device_envs", ("--total-timesteps", "1536", "--num-steps", "64",
                                                              "--log-every", "1"), loss="td_loss",
                                          checkpoint_every=1000, loose=True)}),
    "ppo_lstm": Algorithm(
        "ppo_lstm",
        tests={"ppo-lstm": TestRun("ppo_lstm", ("--total-timesteps", "1024", "--num-steps", "16", "--log-every", "1"),
                                   loss="policy_loss", checkpoint_every=600)}),
    "ppo_lstm_device_envs": Algorithm(
        "ppo_lstm_device_envs",
        speed=(
            # The whole recurrent iteration as one graph: velocity-masked CartPole, 4096 envs x 128 steps.
            Task("ppo_lstm_device_envs", "CartPole-v1", steps=4096 * 128 * 40, eager_steps=4096 * 128 * 8,
                 variant="masked4096",
                 flags=("--mask-velocity", "--num-envs", "4096"), cuda_only=True),),
        learning=(
            Task("ppo_lstm_device_envs", "CartPole-v1", steps=500_000, eager_steps=500_000, variant="masked",
                 flags=("--mask-velocity",)),),
        tests={"ppo-lstm-device-envs": TestRun("ppo_lstm_device_envs", ("--mask-velocity", "--total-timesteps",
                                                                        "1024", "--num-steps", "16", "--log-every",
                                                                        "1"), loss="policy_loss", checkpoint_every=600),
               "ppo-lstm-device-envs-continuous": TestRun(
                   "ppo_lstm_device_envs", ("--env-id", "Pendulum-v1", "--num-envs", "4", "--num-minibatches", "2",
                                            "--num-steps", "16", "--update-epochs", "2", "--total-timesteps", "512",
                                            "--log-every", "1"), loss="value_loss", checkpoint_every=300)}),
}

TEST_RUNS = {name: run for algorithm in ALGORITHMS.values() for name, run in algorithm.tests.items()}
CPU_TEST_RUNS = {name: run for name, run in TEST_RUNS.items() if not run.gpu_only}
