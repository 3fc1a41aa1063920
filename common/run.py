"""Run plumbing: the CLI entry point, user errors, device and seeding, and the path switch."""

from __future__ import annotations

import ast
import dataclasses
import functools
import gc
import logging
import os
import pickle
import random
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import torch

T = TypeVar("T")
F = TypeVar("F", bound=Callable)


@dataclass
class RunArgs:
    """Flags every script shares (plumbing); each script's `Args` adds its task and hyperparameters."""

    cuda: bool = True
    """use CUDA when available"""
    compile: bool = False
    """torch.compile the hot functions"""
    cudagraphs: bool = False
    """capture the hot functions in CUDA graphs (needs CUDA; warns and runs without otherwise)"""
    max_autotune: bool = False
    """with --compile: time candidate kernels while compiling and keep the fastest (inductor's max-autotune:
    Triton matmuls with bias and activation fused in; and coordinate-descent tuning of every generated kernel's
    launch parameters); the first compile takes minutes, later runs hit the cache"""
    inductor: list[str] = field(default_factory=list)
    """with --compile: inductor options as NAME=VALUE, e.g. `--inductor triton.enable_pdl=True
    combo_kernels=True` (each kernel of a graph launches while the one before it finishes, on Hopper GPUs and
    later; independent small kernels share one launch)"""
    log_every: int = 100
    """updates between two loss records in the metrics CSV (each record reads the device once)"""
    save_model: bool = False
    """save a checkpoint (networks, optimizers, counters) to the run folder at the end"""
    track: bool = False
    """log to wandb too (WANDB_MODE=offline works without network)"""
    wandb_project: str = "turborl"
    """wandb project"""
    wandb_entity: str | None = None
    """wandb entity (team or user)"""
    capture_video: bool = False
    """record videos of the first env into the run folder's videos/"""
    runs_dir: str = "runs"
    """where run folders are created"""
    checkpoint_every: int = 0
    """with --save-model, also checkpoint every this many env steps (0: only at the end); the last one is kept"""
    resume: str | None = None
    """continue the run saved in this checkpoint (written with --save-model), same flags"""
    env_backend: str = "gymnasium"
    """gymnasium (CPU simulators) or torch (classic control on the device: common/torch_envs.py)"""
    measure_floor: bool = False
    """after training, time the hot functions alone back to back (the GPU floor of a step; for benchmarks)"""


class UserError(Exception):
    """A mistake in the user's input: reported as one line, exit code 2, no traceback."""


class TrainingStopped(Exception):
    """The run stopped itself (a loss became NaN or infinite): metrics and checkpoint are kept; exit code 3."""


def check(condition: bool, message: str) -> None:
    """Raise a UserError with `message` (which names the bad value and the fix) unless `condition`."""
    if not condition:
        raise UserError(message)


def cli(main: Callable[[T], object], args_type: type[T], argv: list[str] | None = None) -> None:
    """Parse `args_type` with tyro and run `main`. One line and an exit code instead of a traceback for user
    errors (2), a run that stopped itself on a non-finite loss (3) and Ctrl-C (130)."""
    import tyro

    args = tyro.cli(args_type, args=argv, description=(sys.modules[main.__module__].__doc__ or "").strip())
    try:
        main(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except TrainingStopped as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(3) from None
    except KeyboardInterrupt:
        print("interrupted: the run folder keeps the metrics (and, with --save-model, the checkpoint)",
              file=sys.stderr)
        raise SystemExit(130) from None


# This run's inductor options (--max-autotune, --inductor): check_run_args sets them and `compiled` hands them to
# each torch.compile of the run. Never set in torch._inductor.config, so a later run in the same process (a
# test, a notebook) compiles with its own flags only.
INDUCTOR_OPTIONS: dict[str, object] = {}


def check_run_args(args: RunArgs) -> None:
    """The shared flags' own checks (each script checks its hyperparameters)."""
    check(args.checkpoint_every >= 0, f"--checkpoint-every must be >= 0 (got {args.checkpoint_every})")
    check(args.checkpoint_every == 0 or args.save_model, "--checkpoint-every needs --save-model")
    check(args.env_backend in ("gymnasium", "torch"),
          f"--env-backend must be gymnasium or torch (got {args.env_backend!r})")
    for flag, used in (("--max-autotune", args.max_autotune), ("--inductor", args.inductor)):
        check(args.compile or not used, f"{flag} sets options of what --compile builds; add --compile")
    tuning = ["max_autotune=True", "coordinate_descent_tuning=True"] if args.max_autotune else []
    options = dict(inductor_option(option) for option in tuning + args.inductor)
    INDUCTOR_OPTIONS.clear()
    INDUCTOR_OPTIONS.update(options)


def inductor_option(option: str) -> tuple[str, object]:
    """`NAME=VALUE`, NAME an option of torch._inductor.config and VALUE a Python literal of its type, as a pair."""
    name, _, text = option.partition("=")
    owner, *path = [torch._inductor.config, *name.split(".")]
    for part in path[:-1]:
        owner = getattr(owner, part, None)
    missing = object()
    current = getattr(owner, path[-1], missing) if "=" in option and path[-1] else missing
    check(current is not missing and not isinstance(current, type(torch._inductor.config.triton)),
          f"--inductor {option!r}: expected NAME=VALUE with NAME an option of torch._inductor.config "
          "(e.g. triton.enable_pdl=True)")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = missing
    fits = current is None or type(value) is type(current) or (type(current) is float and type(value) is int)
    check(value is not missing and fits,
          f"--inductor {option!r}: VALUE must be a Python literal of the option's type "
          f"({type(current).__name__}, now {current!r})")
    return name, float(value) if type(current) is float else value  # torch.compile checks the type


def pick_device(cuda: bool) -> torch.device:
    """CUDA when asked for and present, else CPU (a run asked for CUDA without it says so once)."""
    if cuda and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def init_distributed(cuda: bool) -> tuple[int, int, torch.device | None]:
    """(rank, world size, this rank's device) when launched by torchrun (WORLD_SIZE > 1): joins the process
    group, NCCL on GPUs (one per rank, by LOCAL_RANK) and gloo on CPU. (0, 1, None) otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, None
    import torch.distributed as dist

    use_cuda = cuda and torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    return dist.get_rank(), world, device


def leave_distributed() -> None:
    """Leave the process group at the end of a run that completed on every rank (after its last collective)."""
    torch.distributed.destroy_process_group()
    # gloo's worker threads drop their last collective's tensors just after it returns, and dropping a tensor
    # takes the GIL: if the interpreter is already exiting, the process aborts ("terminate called without an
    # active exception", about one torchrun CPU run in eight). A short sleep lets them finish first.
    time.sleep(0.1)


def seed_everything(seed: int, deterministic: bool = True) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = deterministic


def resolve_cudagraphs(cudagraphs: bool, device: torch.device) -> bool:
    """CUDA graphs need a CUDA device: without one, warn once and run without graphs."""
    if cudagraphs and device.type != "cuda":
        print("warning: --cudagraphs needs a CUDA device; running without CUDA graphs", file=sys.stderr)
        return False
    return cudagraphs


class StartupClock:
    """Wall time spent in the calls that compile or capture (reported apart from steady-state speed)."""

    seconds = 0.0


# torch.optim wraps each step in a profiler marker, which compiled code drops with a warning on every compiled
# run; it says nothing about the run, so it is not printed.
logging.getLogger("torch._dynamo.variables.ctx_manager").addFilter(
    lambda record: not record.getMessage().startswith("Profiler record function"))


def compiled(fn: F, enabled: bool = True) -> F:
    """`torch.compile(fn)` (or fn itself when not enabled), keeping eager's random kernels so that every path
    draws the same numbers from the same seed. Use it directly for the parts of a function captured as a whole
    (`accelerate(..., compile=False, cudagraphs=...)`), e.g. one compiled function per backward pass."""
    if not enabled:
        return fn
    return torch.compile(fn, options={"fallback_random": True, **INDUCTOR_OPTIONS})


def accelerate(
    fn: Callable, *, compile: bool, cudagraphs: bool, device: torch.device, warmup: int | None = None,
    compiled_inside: bool = False,
) -> Callable:
    """Apply the chosen path to a hot function: eager, torch.compile, CUDA graph, or compile then graph.

    The first calls of a compiled or captured function compile / record it; their wall time (synchronized)
    is added to `StartupClock.seconds` so speed can be measured on steady state alone. `cudagraphs` must
    already be resolved against the device (see `resolve_cudagraphs`). `compiled_inside`: fn calls functions
    already wrapped with `compiled` (not compiled again, but timed and captured as a compiled function).
    """
    if not (compile or cudagraphs or compiled_inside):
        return fn
    fn = compiled(fn, compile)
    compile = compile or compiled_inside  # its first calls compile: time them, capture after them
    slow_calls = 1
    if cudagraphs:
        from tensordict.nn import CudaGraphModule

        # After torch.compile the first calls still compile (and may recompile once): capture later.
        warmup = warmup or (3 if compile else 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn = CudaGraphModule(fn, warmup=warmup, device=device)
        slow_calls = warmup
    calls = 0
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    @functools.wraps(getattr(fn, "module", fn))
    def run(*args, **kwargs):
        nonlocal calls
        if calls >= slow_calls:
            return fn(*args, **kwargs)
        calls += 1
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        sync()
        if calls == slow_calls and compile:
            # Compiling leaves many long-lived objects (graphs, guards, symbolic shapes); the garbage collector
            # would rescan them all on every full collection, in the middle of the training loop (on the H200,
            # SAC's loop after a cold compile ran a fifth slower than after a cached one).
            gc.collect()
            gc.freeze()
        StartupClock.seconds += time.perf_counter() - start
        return out

    return run


def soft_update(target_params: list[torch.Tensor], online_params: list[torch.Tensor], tau: float) -> None:
    """target <- target + tau * (online - target), in place and outside autograd: an in-place lerp that
    autograd recorded would chain every update into the targets' history (growing memory, and a backward
    that walks it all under torch.compile)."""
    with torch.no_grad():
        torch._foreach_lerp_(target_params, online_params, tau)


def floor_us(step: Callable[[int], object], device: torch.device, calls: int = 200) -> float:
    """Microseconds per call of `step(i)` run back to back, synchronized once at the end.

    With captured functions the CPU only enqueues replays, so this is the GPU time of one step alone: the
    floor that a loop which also steps a simulator can approach. Used after training (it trains on).
    """
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for i in range(10):
        step(i)
    sync()
    start = time.perf_counter()
    for i in range(calls):
        step(i)
    sync()
    return (time.perf_counter() - start) / calls * 1e6


class HostLink:
    """The per-step exchange between a CPU environment and the device, without stalling the GPU.

    The env's results go into a pinned host buffer with one row per env, laid out as
    `[valid, reward, terminated, truncated, reached obs, next obs]` (`reached` is the observation the step
    actually reached, `next` the one to act on, which differs only where an episode just ended). Inside the
    hot function, `pull()` copies that buffer to the device and `push(action)` copies the action into pinned
    memory: captured, both copies are part of the step's graph, so a step is one launch with no inputs to
    stage and no outputs to clone. After the call, `ready()` records an event and `wait()` blocks on it only
    (never a full synchronize), so GPU work launched after `ready()` (an update) keeps running while the CPU
    steps the env. `unpack` splits the device tensor inside a hot function.
    """

    def __init__(self, n_envs: int, obs_dim: int, action_shape: tuple, action_dtype: torch.dtype,
                 device: torch.device):
        pinned = device.type == "cuda"
        self.obs_dim = obs_dim
        self.host_in = torch.zeros((n_envs, 4 + 2 * obs_dim), pin_memory=pinned)
        self.np_in = self.host_in.numpy()
        self.dev_in = torch.zeros_like(self.host_in, device=device) if pinned else self.host_in
        self.host_out = torch.zeros((n_envs, *action_shape), dtype=action_dtype, pin_memory=pinned)
        self.np_out = self.host_out.numpy()
        self.event = torch.cuda.Event() if pinned else None

    def first(self, obs) -> None:
        """The reset observation: nothing to store yet (valid = 0)."""
        self.np_in[:] = 0.0
        self.np_in[:, 4 + self.obs_dim :] = obs

    def put(self, rewards, terminations, truncations, reached_obs, next_obs) -> None:
        self.np_in[:, 0] = 1.0
        self.np_in[:, 1] = rewards
        self.np_in[:, 2] = terminations
        self.np_in[:, 3] = truncations
        self.np_in[:, 4 : 4 + self.obs_dim] = reached_obs
        self.np_in[:, 4 + self.obs_dim :] = next_obs

    @staticmethod
    def unpack(step_in: torch.Tensor, obs_dim: int):
        """(valid scalar, reward, terminated, truncated, reached obs, next obs) from a sent tensor."""
        return (step_in[0, 0], step_in[:, 1], step_in[:, 2], step_in[:, 3], step_in[:, 4 : 4 + obs_dim],
                step_in[:, 4 + obs_dim :])

    def pull(self) -> torch.Tensor:
        """The env's last answer on the device (call inside the hot function)."""
        if self.event is not None:
            self.dev_in.copy_(self.host_in, non_blocking=True)
        return self.dev_in

    def push(self, action: torch.Tensor) -> None:
        """Start the action's copy to the host (call inside the hot function)."""
        self.host_out.copy_(action, non_blocking=True)

    def ready(self) -> None:
        """Mark the action pushed by the call just made: `wait()` returns once it has arrived."""
        if self.event is not None:
            self.event.record()

    def wait(self):
        if self.event is not None:
            self.event.synchronize()
        return self.np_out

    def state(self) -> torch.Tensor:
        """The env's last answer, not yet sent (for checkpoints)."""
        return self.host_in.clone()

    def load(self, state: torch.Tensor) -> None:
        self.host_in.copy_(state)


class DeviceLink:
    """HostLink's interface for envs that live on the device (`--env-backend torch`): the env's answer is
    written into the same `[valid, reward, terminated, truncated, reached obs, next obs]` layout on the device
    and the action stays there; nothing crosses to the host."""

    def __init__(self, n_envs: int, obs_dim: int, device: torch.device):
        self.obs_dim = obs_dim
        self.dev_in = torch.zeros((n_envs, 4 + 2 * obs_dim), device=device)
        self.action = None

    def first(self, obs: torch.Tensor) -> None:
        self.dev_in.zero_()
        self.dev_in[:, 4 + self.obs_dim :] = obs

    def put(self, rewards, terminations, truncations, reached_obs, next_obs) -> None:
        columns = [torch.ones_like(rewards), rewards, terminations, truncations]
        self.dev_in.copy_(torch.cat([torch.stack(columns, 1).to(self.dev_in.dtype), reached_obs, next_obs], 1))

    def put_next_obs(self, next_obs) -> None:
        """Only the observation to act on, for loops that store the rest of the answer themselves."""
        self.dev_in[:, 4 + self.obs_dim :] = next_obs

    def pull(self) -> torch.Tensor:
        return self.dev_in

    def push(self, action: torch.Tensor) -> None:
        self.action = action

    def ready(self) -> None:
        pass

    def wait(self) -> torch.Tensor:
        return self.action

    def state(self) -> torch.Tensor:
        return self.dev_in.cpu()

    def load(self, state: torch.Tensor) -> None:
        self.dev_in.copy_(state)


def export_policy(policy: torch.nn.Module, obs_dim: int, path: str) -> str:
    """Save a deterministic policy (observation batch in, action batch out) as a torch.export `.pt2`, on CPU;
    `torch.export.load(path).module()` runs it without this project."""
    import copy

    module = copy.deepcopy(policy).cpu().eval()
    batch = torch.export.Dim("batch", min=1)
    with torch.no_grad():
        program = torch.export.export(module, (torch.zeros(2, obs_dim),), dynamic_shapes=({0: batch},))
    partial = os.path.splitext(path)[0] + ".partial.pt2"  # torch.export warns on a name not ending in .pt2
    torch.export.save(program, partial)
    os.replace(partial, path)
    return path


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def env_state(envs) -> bytes | None:
    """The envs pickled, whole (simulator state, RNG, time limits, episode statistics); None where they cannot
    be (subprocesses, MuJoCo): a resume then restarts them with fresh episodes."""
    import cloudpickle  # a gymnasium dependency; plain pickle cannot hold the env factories

    try:
        return cloudpickle.dumps(envs)
    except Exception:
        return None


def load_checkpoint(path: str, args, same: tuple[str, ...]) -> dict:
    """A checkpoint to resume from, checked against this run's flags `same` (one-line errors, exit 2)."""
    check(os.path.exists(path), f"--resume {path}: no such file; pass a checkpoint written with --save-model")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False)
    except Exception:
        raise UserError(f"--resume {path}: not a readable checkpoint (truncated or not from --save-model)") from None
    check(isinstance(saved, dict) and "resume" in saved, f"--resume {path}: this checkpoint has no resume state")
    for name in same:
        check(saved["args"][name] == getattr(args, name),
              f"--resume {path}: it was saved with --{name.replace('_', '-')} {saved['args'][name]}, "
              f"not {getattr(args, name)}; pass the same flags")
    return saved


class Checkpoints:
    """`--save-model`, `--checkpoint-every` and `--resume` for a script: everything a run needs to continue.

    `modules`: objects with state_dict (networks, optimizers); `tensors`: the device state that captured
    functions update in place, loaded back by copy so the graphs stay valid; `replay`: buffers saved up to
    `replay_size` rows; `extra`: more entries written as they are (for readers of the checkpoint). The envs are
    pickled whole where they can be, with the RNG states and the env's last answer in `link`, so on CPU a
    resumed run logs exactly what the uninterrupted run logs. `counters` (the loop's host-side numbers, with at
    least `global_step`) go in on save and come back from `resume`.
    """

    def __init__(self, args, run_dir: str | None, algo: str, modules: dict, tensors: dict, same: tuple[str, ...],
                 replay: dict | None = None, replay_size: torch.Tensor | None = None, extra: dict | None = None):
        self.args, self.run_dir, self.algo, self.same = args, run_dir, algo, same
        self.modules, self.tensors, self.replay, self.replay_size = modules, tensors, replay or {}, replay_size
        self.extra, self.periodic = extra or {}, None

    def resume(self, envs, link) -> tuple[object, dict]:
        """Load `--resume` into this run; returns the envs to use (restored ones when saved) and the counters."""
        saved = load_checkpoint(self.args.resume, self.args, self.same)
        for name, module in self.modules.items():
            module.load_state_dict(saved[name])
        state = saved["resume"]
        with torch.no_grad():
            for name, tensor in self.replay.items():
                tensor[: len(saved["replay"][name])].copy_(saved["replay"][name])
            for name, tensor in self.tensors.items():
                tensor.copy_(state["tensors"][name])
        if state["envs"] is not None:
            envs.close()
            envs = pickle.loads(state["envs"])
            link.load(state["link"])
        else:  # envs that cannot be saved (subprocesses, MuJoCo) restart with fresh episodes
            link.first(envs.reset(seed=self.args.seed + state["counters"]["global_step"])[0])
        set_rng_state(state["rng"])
        return envs, state["counters"]

    def save(self, name: str, envs, link, counters: dict) -> str:
        size = int(self.replay_size) if self.replay else 0
        return save_checkpoint(os.path.join(self.run_dir, name), {
            **{key: module.state_dict() for key, module in self.modules.items()}, **self.extra,
            "args": dataclasses.asdict(self.args), "global_step": counters["global_step"],
            "replay": {key: tensor[:size].cpu() for key, tensor in self.replay.items()},
            "resume": {"counters": counters, "link": link.state(), "rng": rng_state(), "envs": env_state(envs),
                       "tensors": {key: tensor.detach().cpu() for key, tensor in self.tensors.items()}}})

    def due(self, step: int, advanced: int) -> bool:
        """Whether the last `advanced` steps up to `step` crossed a multiple of --checkpoint-every."""
        every = self.args.checkpoint_every
        return self.args.save_model and every > 0 and step // every != (step - advanced) // every

    def save_periodic(self, envs, link, counters: dict) -> None:
        """`<algo>-step<N>.pt`; only the latest is kept."""
        path = self.save(f"{self.algo}-step{counters['global_step']}.pt", envs, link, counters)
        if self.periodic:
            os.remove(self.periodic)
        self.periodic = path


def save_checkpoint(path: str, state: dict) -> str:
    """torch.save to a temp file, then rename: a crash mid-write never leaves a truncated checkpoint."""
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path
