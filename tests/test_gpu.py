"""GPU checks (skipped without CUDA): capture works, the four paths compute the same thing, RNG advances."""

import glob
import importlib

import pytest
import torch

from common import accelerate
from tests.helpers import metric, run_script
from tests.test_resume import metrics_after

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PATHS = {"compile": (True, False), "cudagraphs": (False, True), "compile+cudagraphs": (True, True)}

# Per case: the script, a short run that reaches a few updates, and the loss it logs after each.
SHORT_RUNS = {
    "dqn": ("dqn", {"total_timesteps": 400, "learning_starts": 200, "train_frequency": 1}, "td_loss"),
    "td3": ("td3", {"env_id": "Pendulum-v1", "total_timesteps": 140, "learning_starts": 100}, "qf_loss"),
    "sac": ("sac", {"env_id": "Pendulum-v1", "total_timesteps": 140, "learning_starts": 100}, "qf_loss"),
    "ppo": ("ppo", {"num_steps": 16, "total_timesteps": 4 * 16 * 12}, "policy_loss"),
    "ppo-torch-envs": ("ppo", {"env_backend": "torch", "num_steps": 16, "total_timesteps": 4 * 16 * 12},
                       "policy_loss"),
    "ppo-torch-envs-bf16": ("ppo", {"env_backend": "torch", "num_steps": 16, "total_timesteps": 4 * 16 * 12,
                                    "bf16": True}, "policy_loss"),
    "ppo-continuous": ("ppo", {"env_id": "Pendulum-v1", "num_envs": 2, "num_steps": 32, "num_minibatches": 4,
                               "update_epochs": 2, "total_timesteps": 2 * 32 * 12}, "value_loss"),
}

# The benchmark's tuned task's launch options, on a short run of the same script (they change how kernels launch
# and group, never what they compute). Flags of the compiled paths only: --inductor needs --compile.
SHORT_RUNS["ppo-torch-envs-bf16-launch"] = SHORT_RUNS["ppo-torch-envs-bf16"]
COMPILED_FLAGS = {"ppo-torch-envs-bf16-launch": {"inductor": ["triton.enable_pdl=True", "combo_kernels=True"]}}

# bfloat16: compiled code may round intermediate results at other points than eager.
TOLERANCES = {case: {"rtol": 2e-2, "atol": 1e-3} for case in ("ppo-torch-envs-bf16", "ppo-torch-envs-bf16-launch")}


def first_losses(tmp_path, case: str, compile: bool, cudagraphs: bool, n: int = 10) -> list[float]:
    script, overrides, loss_name = SHORT_RUNS[case]
    module = importlib.import_module(f"algos.{script}")
    torch._dynamo.reset()  # a fresh compile per run: dynamo's recompile limit is per code object
    args = module.Args(**overrides, **(COMPILED_FLAGS.get(case, {}) if compile else {}), log_every=1,
                       compile=compile, cudagraphs=cudagraphs,
                       runs_dir=str(tmp_path / f"{case}-{compile}-{cudagraphs}"))
    losses = metric(module.main(args)["run_dir"], loss_name)
    assert len(losses) >= n
    return losses[:n]


@pytest.mark.parametrize("case", list(SHORT_RUNS))
def test_four_paths_same_first_losses(tmp_path, case):
    eager = first_losses(tmp_path, case, False, False)
    for name, (compile, cudagraphs) in PATHS.items():
        torch.testing.assert_close(first_losses(tmp_path, case, compile, cudagraphs), eager,
                                   **TOLERANCES.get(case, {"rtol": 1e-3, "atol": 1e-5}),
                                   msg=lambda m, name=name: f"{case} {name}: {m}")


def test_torch_env_episodes_logged_alike_in_every_path(tmp_path):
    """The episodes that end in torch envs, gathered on the device and read from pinned copies an iteration
    late, are logged as eager logs them: same returns, same steps (CartPole's returns are integers: exact)."""
    from algos import ppo

    logged = {}
    for name, (compile, cudagraphs) in {"eager": (False, False), **PATHS}.items():
        torch._dynamo.reset()
        args = ppo.Args(env_backend="torch", num_envs=16, num_steps=32, total_timesteps=16 * 32 * 3,
                        compile=compile, cudagraphs=cudagraphs, runs_dir=str(tmp_path / name))
        ppo.main(args)
        logged[name] = [(s, float(v)) for s, metric_name, v in metrics_after(str(tmp_path / name), -1)
                        if metric_name == "episodic_return"]
    assert len(logged["eager"]) > 30
    for name in PATHS:
        assert logged[name] == logged["eager"], name


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


@pytest.mark.parametrize("compile", [False, True])
def test_captured_sac_policy_has_eager_action_spread(compile):
    from algos.sac import Actor

    torch._dynamo.reset()
    device = torch.device("cuda")
    torch.manual_seed(0)
    actor = Actor(3, 2, -2 * torch.ones(2).numpy(), 2 * torch.ones(2).numpy()).to(device)
    obs = torch.randn(1, 3, device=device).expand(4096, 3).contiguous()  # one state, many samples

    def sample():
        with torch.no_grad():
            return actor.get_action(obs)[0]

    captured = accelerate(sample, compile=compile, cudagraphs=True, device=device)
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

    def losses(run_dir):
        return [(int(s), float(v)) for s, name, v in metrics_after(run_dir, step) if name == "td_loss"]

    expected, got = losses(str(tmp_path / "a")), losses(str(tmp_path / "b"))
    assert len(expected) > 20 and [s for s, _ in got] == [s for s, _ in expected]
    torch.testing.assert_close([v for _, v in got], [v for _, v in expected], rtol=1e-3, atol=1e-5)
