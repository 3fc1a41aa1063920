"""GPU checks (skipped without CUDA): capture works, the four paths compute the same thing, RNG advances."""

import glob
import json

import pytest
import torch

from scripts.registry import TEST_RUNS
from tests.helpers import first_losses, metrics_after, run_script
from turborl.cli import RunArgs
from turborl.paths import ExecutionPath

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PATHS = {"compile": ["--compile"], "cudagraphs": ["--cudagraphs"], "compile+cudagraphs": ["--compile", "--cudagraphs"]}
# The benchmark's peer baseline, torch.compile(mode="reduce-overhead"): it must compute what the others compute.
REDUCE_OVERHEAD = ["--compile", "--inductor", "triton.cudagraphs=True"]

# Every CPU test run, and the device PPO with the benchmark's tuned flags (bfloat16 hidden layers; launch options
# that change how kernels launch and group, never what they compute: flags of the compiled paths only).
COMPILED_FLAGS = {case: () for case in TEST_RUNS}
COMPILED_FLAGS["ppo-device-envs-bf16-launch"] = ("--inductor", "triton.enable_pdl=True", "combo_kernels=True")


@pytest.mark.parametrize("case", list(COMPILED_FLAGS))
def test_four_paths_same_first_losses(tmp_path, case):
    test_run = case if case in TEST_RUNS else "ppo-device-envs-bf16"
    eager = first_losses(test_run, str(tmp_path / "eager"))
    tolerance = {"rtol": 2e-2, "atol": 1e-3} if TEST_RUNS[test_run].loose else {"rtol": 1e-3, "atol": 1e-5}
    peer = {} if COMPILED_FLAGS[case] else {"reduce-overhead": REDUCE_OVERHEAD}  # one --inductor flag per run
    for name, path_flags in {**PATHS, **peer}.items():
        extra = COMPILED_FLAGS[case] if "--compile" in path_flags else ()
        torch.testing.assert_close(first_losses(test_run, str(tmp_path / name), *path_flags, *extra), eager,
                                   **tolerance, msg=lambda m, name=name: f"{case} {name}: {m}")


def test_torch_env_episodes_logged_alike_in_every_path(tmp_path):
    """The episodes that end in torch envs, gathered on the device and read from pinned copies an iteration
    late, are logged as eager logs them: same returns, same steps (CartPole's returns are integers: exact)."""
    from tests.helpers import run_main

    logged = {}
    for name, path_flags in {"eager": [], **PATHS}.items():
        run_main("ppo_device_envs", ["--num-envs", "16", "--num-steps", "32", "--total-timesteps", str(16 * 32 * 3),
                                     *path_flags], str(tmp_path / name))
        logged[name] = [(s, float(v)) for s, metric_name, v in metrics_after(str(tmp_path / name), -1)
                        if metric_name == "episodic_return"]
    assert len(logged["eager"]) > 30
    for name in PATHS:
        assert logged[name] == logged["eager"], name


def test_envs_in_subprocesses_log_on_the_captured_path_what_envs_stepped_here_log(tmp_path):
    """--async-envs (common/subprocess_envs.py: answers in shared memory) under the headline path, 3 seeds in one
    run: every seed logs what it logs with its envs stepped in the loop's thread."""
    from tests.helpers import run_main

    test_run, logged = TEST_RUNS["td3-seeds3"], {}
    for name, flags in {"here": ["--async-envs", "False"], "subprocesses": ["--async-envs"]}.items():
        run_main(test_run.script, [*test_run.flags, "--compile", "--cudagraphs", *flags], str(tmp_path / name))
        logged[name] = metrics_after(str(tmp_path / name), -1)
    assert {"qf_loss", "episodic_return"} <= {name for _, name, _ in logged["here"]}
    assert logged["subprocesses"] == logged["here"]


@pytest.mark.parametrize("compile", [False, True])
def test_captured_replays_advance_the_rng(compile):
    torch._dynamo.reset()
    device = torch.device("cuda")

    def draw():
        return torch.rand(4096, device=device)

    path = ExecutionPath(RunArgs(compile=compile, cudagraphs=True), device)
    captured = path.capture(path.compile(draw))
    draws = torch.stack([captured() for _ in range(8)])  # warmup, capture, then replays
    assert all(not torch.equal(draws[i], draws[i + 1]) for i in range(7))
    replayed = draws[4:]
    assert abs(replayed.mean().item() - 0.5) < 0.01 and abs(replayed.std().item() - 12 ** -0.5) < 0.01


@pytest.mark.parametrize("compile", [False, True])
def test_captured_sac_policy_has_eager_action_spread(compile):
    from algos.sac import Actor

    torch._dynamo.reset()
    device = torch.device("cuda")
    torch.manual_seed(0)
    actor = Actor(3, 2, -2 * torch.ones(2).numpy(), 2 * torch.ones(2).numpy()).to(device)
    obs = torch.randn(1, 1, 3, device=device).expand(1, 4096, 3).contiguous()  # one state, many samples; one seed

    def sample():
        with torch.no_grad():
            return actor.get_action(obs)[0][0]

    path = ExecutionPath(RunArgs(compile=compile, cudagraphs=True), device)
    captured = path.capture(path.compile(sample))
    replays = torch.cat([captured() for _ in range(10)][4:])  # past warmup and capture
    eager = torch.cat([sample() for _ in range(6)])
    torch.testing.assert_close(replays.mean(0), eager.mean(0), atol=0.03, rtol=0)
    torch.testing.assert_close(replays.std(0), eager.std(0), atol=0.03, rtol=0)
    assert (eager.std(0) > 0.05).all()  # the policy is stochastic, so the comparison means something


def test_resumed_compiled_captured_run_continues_the_run(tmp_path):
    """--resume of a --compile --cudagraphs run: weights, replay, RNG and counters load into the tensors the
    graphs are then captured on, so the resumed run logs the uninterrupted run's losses."""
    flags = ["--total-timesteps", "1500", "--learning-starts", "500", "--train-frequency", "2", "--log-every", "5",
             "--compile", "--cudagraphs"]
    whole = run_script("dqn", *flags, "--save-model", "--checkpoint-every", "1000", "--runs-dir", str(tmp_path / "a"))
    assert whole.returncode == 0, whole.stderr[-2000:]
    [checkpoint] = glob.glob(str(tmp_path / "a" / "*" / "dqn-step*.pt"))
    step = int(checkpoint.rsplit("step", 1)[1][:-3])
    resumed = run_script("dqn", *flags, "--resume", checkpoint, "--runs-dir", str(tmp_path / "b"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    def losses(runs_dir):
        return [(int(s), float(v)) for s, name, v in metrics_after(runs_dir, step) if name == "td_loss"]

    expected, got = losses(str(tmp_path / "a")), losses(str(tmp_path / "b"))
    assert len(expected) > 20 and [s for s, _ in got] == [s for s, _ in expected]
    torch.testing.assert_close([v for _, v in got], [v for _, v in expected], rtol=1e-3, atol=1e-5)


def test_summary_records_the_runs_peak_gpu_memory(tmp_path):
    result = run_script("dqn", "--total-timesteps", "1500", "--learning-starts", "500", "--cudagraphs",
                        "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    [summary] = glob.glob(str(tmp_path / "*" / "summary.json"))
    with open(summary) as f:
        peak = json.load(f)["peak_gpu_memory_mb"]
    assert 1 < peak < 10_000  # the replay buffer of 10k CartPole transitions and the networks: tens of MiB


@pytest.mark.parametrize("path", ["eager", "compile+cudagraphs"])
def test_a_device_that_fills_up_mid_run_ends_it_in_one_line_and_keeps_it(tmp_path, monkeypatch, capsys, path):
    """A real out-of-memory error from the allocator, mid-run: at step 1,500 (after the periodic checkpoint at
    1,000) the run may hold no more than it holds, down to its last small block, as when a second run beside it has
    taken the rest of the GPU (the limit is this process's, set_per_process_memory_fraction: taking the GPU itself
    would starve the GPU tests running beside this one). The run's next allocation fails: eager's in the next
    step's action, the compiled path's in its first update at 2,000 (its captured action allocates nothing). One
    line naming the flags that size the run, exit 2, a summary, the checkpoint."""
    import gc

    from algos import td3
    from turborl.cli import cli
    from turborl.logger import RunLogger

    progress, taken, filled = RunLogger.progress, [], []

    def fill_the_device(logger, step):
        progress(logger, step)
        if step >= 1500 and not filled:
            filled.append(step)
            gc.collect()  # nothing freed later may give the run room again
            torch.cuda.empty_cache()
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, (torch.cuda.memory_reserved() + 2**20) / total))
            size = 2**20
            while size >= 512:
                try:
                    taken.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
                except torch.OutOfMemoryError:
                    size //= 2

    monkeypatch.setattr(RunLogger, "progress", fill_the_device)
    torch._dynamo.reset()  # a fresh compile: dynamo's recompile limit is per code object (tests.helpers.run_main)
    try:
        with pytest.raises(SystemExit) as exit_info:
            cli(td3.main, td3.Args, ["--env-id", "Pendulum-v1", "--total-timesteps", "3000", "--learning-starts",
                                     "2000", "--save-model", "--checkpoint-every", "1000", "--runs-dir", str(tmp_path),
                                     *PATHS.get(path, [])])
    finally:
        taken.clear()
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert filled == [1500] and exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert lines == ["error: the device ran out of memory; lower --num-envs or --buffer-size or --batch-size (the "
                     "run folder keeps the metrics and the last periodic checkpoint)"]
    [run_dir] = glob.glob(str(tmp_path / "*"))
    with open(f"{run_dir}/summary.json") as f:
        summary = json.load(f)
    # The last periodic checkpoint before the failure: eager fails at once (step 1,500, after step 1,000's), the
    # captured path at its first allocation outside the graphs' pool (on an H100: step 2,001, after step 2,000's).
    assert summary["status"] == "failed" and summary["checkpoint"] == max(
        glob.glob(f"{run_dir}/td3-step*.pt"), key=lambda p: int(p.rsplit("step", 1)[1][:-3]))
    assert 1000 <= int(summary["checkpoint"].rsplit("step", 1)[1][:-3]) <= summary["steps"]
