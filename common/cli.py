"""Run setup: the flags every script shares, their checks, user errors, the entry point, device and seeding."""

from __future__ import annotations

import inspect
import random
import re
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, TypeVar

import numpy as np
import torch
import tyro

from .checkpoints import load_checkpoint
from .envs import subprocesses_pay
from .errors import UserError, check
from .paths import inductor_options

T = TypeVar("T")


def _flag_value(words: list[str]) -> bool:
    if len(words) > 1 or words and words[0] not in ("True", "False"):
        raise ValueError("expected True or False, or nothing (True)")
    return not words or words[0] == "True"


# A flag that the script decides when it is left out (None): given bare it is True, as a plain flag is
# (`--async-envs`), and `--async-envs False` turns it off.
OptionalFlag = Annotated[bool | None, tyro.constructors.PrimitiveConstructorSpec(
    nargs="*", metavar="[True|False]", instance_from_str=_flag_value,
    is_instance=lambda x: x is None or isinstance(x, bool), str_from_instance=lambda x: [str(x)])]


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
    """with --compile: time candidate kernels while compiling and keep the fastest (inductor's max-autotune and
    coordinate-descent tuning of every kernel's launch parameters); the first compile takes minutes, later runs
    hit the cache"""
    inductor: list[str] = field(default_factory=list)
    """with --compile: inductor options as NAME=VALUE, e.g. `--inductor triton.enable_pdl=True
    combo_kernels=True` (each kernel of a graph launches while the one before it finishes, on Hopper GPUs and
    later; independent small kernels share one launch)"""
    fused_optimizer: bool = False
    """Adam's (and AdamW's) step in one fused kernel per optimizer (torch's fused=True) instead of a few
    multi-tensor kernels: fewer launches per update; pick it by measuring (scripts/benchmark.py)"""
    tf32: bool = False
    """TensorFloat-32 matmuls on CUDA (JAX's default on recent GPUs): inputs rounded to a 10-bit mantissa, sums in
    float32; left out, CleanRL's float32 arithmetic"""
    log_every: int = 100
    """updates between two loss records in the metrics CSV (each record reads the device once)"""
    save_model: bool = False
    """save a checkpoint (networks, optimizers, counters, replay memory, normalization statistics: all a resume
    needs) and the exported policy to the run folder at the end"""
    track: bool = False
    """log to wandb too: offline into the run folder unless an account is configured (wandb login) or
    WANDB_MODE says otherwise; no network needed"""
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
    """continue the run saved in this checkpoint (written with --save-model), same flags; a run folder means its
    last checkpoint"""
    env_backend: str = "gymnasium"
    """gymnasium (CPU simulators), torch (classic control on the device: common/torch_envs.py) or mjwarp (MuJoCo
    Warp's locomotion tasks on the device: common/mjwarp_envs.py)"""
    threads: int = 1
    """CPU threads of torch's kernels: networks this small gain little from more, and a run whose threads share
    cores with another process slows tenfold; raise it for big batches on an otherwise idle CPU"""


class GracefulStop:
    """Ctrl-C, SIGTERM (kill, timeout, a job scheduler's stop) and a non-finite loss end the training loop at the
    end of an iteration, where the run's state is whole: its checkpoint resumes like any other. A second signal
    quits at once, without a final checkpoint (the last periodic one stays). `reason`: None while the run goes on,
    else what the loop stops for."""

    EXIT_CODES = {"interrupted": 130, "stopped": 3}
    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.reason: str | None = None
        self.message = ""
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._on_signal) for signum in self.SIGNALS}

    @property
    def requested(self) -> bool:
        return self.reason is not None

    def request(self, reason: str, message: str) -> None:
        if self.reason is None:
            self.reason, self.message = reason, message

    def _on_signal(self, signum, frame) -> None:
        if self.reason == "interrupted":
            raise KeyboardInterrupt
        self.request("interrupted", "interrupted")
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        print(f"\n{name}: stopping at the end of this iteration (again: quit now, without a final checkpoint)",
              file=sys.stderr, flush=True)

    def restore(self) -> None:
        """Give the signals back to Python (after the loop)."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}


# The flags that size what a run holds on its device, named when it runs out of memory.
MEMORY_FLAGS = ("num_envs", "buffer_size", "batch_size", "num_steps")


def ran_out_of_memory(err: BaseException | None) -> bool:
    """A torch.OutOfMemoryError, or an error raised from one: torch.compile raises an allocation that failed while
    it compiled (dynamo's BackendCompilerFailed, inductor's InductorError) as their `inner_exception`, `from None`;
    `raise ... from` names its cause. An error raised while an out-of-memory one was on its way out (its context,
    in a `finally`: a full disk as the summary is written) is not one."""
    for _ in range(32):  # a chain, never a cycle in practice; bounded all the same
        if err is None or isinstance(err, torch.OutOfMemoryError):
            return err is not None
        err = getattr(err, "inner_exception", None) or err.__cause__  # not __context__: see above
    return False


def parse(args_type: type[T], argv: list[str] | None = None, description: str = "") -> T:
    """tyro.cli, with each flag's help one paragraph. tyro (1.0) keeps every line break of a field docstring whose
    lines are indented, as PEP 257 writes them, so a help text broke mid-sentence: it reads them dedented and joined
    here (a blank line still starts a paragraph), and so is the description's text."""
    import tyro
    from tyro import _docstrings

    read = getattr(_docstrings, "parse_docstring_from_object", None)
    if read is not None and not hasattr(read, "joined"):  # a tyro without it: its own help, unchanged
        def joined(obj) -> dict[str, str]:
            return {name: re.sub(r"(?<!\n)\n(?!\n)", " ", inspect.cleandoc(text)) for name, text in read(obj).items()}

        joined.joined = True
        _docstrings.parse_docstring_from_object = joined
    paragraphs = [part if part.startswith(" ") else part.replace("\n", " ") for part in description.split("\n\n")]
    return tyro.cli(args_type, args=argv, description="\n\n".join(paragraphs))  # indented: examples, kept


def cli(main: Callable[[T], dict | None], args_type: type[T], argv: list[str] | None = None) -> None:
    """Parse `args_type` with tyro and run `main`. One line and an exit code instead of a traceback for user
    errors and a device out of memory (2), a run that stopped itself on a non-finite loss (3) and Ctrl-C (130);
    `main` returns the run's summary, whose `status` says how the loop ended."""
    args = parse(args_type, argv, (sys.modules[main.__module__].__doc__ or "").strip())
    try:
        threads = getattr(args, "threads", 1)  # scripts/evaluate.py's Args have no --threads
        check(threads >= 1, f"--threads must be >= 1 (got {threads})")
        torch.set_num_threads(threads)
        summary = main(args) or {}
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside the loop
        print("interrupted: the run folder keeps the metrics and the last periodic checkpoint", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as err:  # out of memory: the script's `finally` has written summary.json; checkpoints stay
        if not ran_out_of_memory(err):
            raise
        sizes = [f"--{name.replace('_', '-')}" for name in MEMORY_FLAGS if getattr(args, name, None) is not None]
        print(f"error: the device ran out of memory; lower {' or '.join(sizes) or 'the run size'} (the run folder "
              "keeps the metrics and the last periodic checkpoint)", file=sys.stderr)
        raise SystemExit(2) from None
    code = GracefulStop.EXIT_CODES.get(summary.get("status"))
    if code is not None:
        raise SystemExit(code)


def check_run_args(args: RunArgs) -> None:
    """The checks of every flag that more than one script has; each script checks its own hyperparameters.
    An --async-envs left out (td3, sac, ppo) becomes what was measured to pay for the run's envs on this machine."""
    for name in ("total_timesteps", "num_envs"):
        value = getattr(args, name, None)
        check(value is None or value > 0, f"--{name.replace('_', '-')} must be positive (got {value})")
    seed, gamma, starts = (getattr(args, name, None) for name in ("seed", "gamma", "learning_starts"))
    check(seed is None or 0 <= seed < 2**32, f"--seed must be in [0, 2**32) (got {seed})")
    check(gamma is None or 0 < gamma <= 1, f"--gamma must be in (0, 1] (got {gamma})")
    if starts is not None:  # updates begin once more than `starts` steps are done, before the last env step
        check(starts + getattr(args, "num_envs", 1) < args.total_timesteps,
              f"--total-timesteps {args.total_timesteps} ends before learning starts (--learning-starts {starts}): "
              "the run would train nothing; raise --total-timesteps or lower --learning-starts")
    check(args.log_every >= 1, f"--log-every must be >= 1 (got {args.log_every})")
    check(args.checkpoint_every >= 0, f"--checkpoint-every must be >= 0 (got {args.checkpoint_every})")
    check(args.checkpoint_every == 0 or args.save_model, "--checkpoint-every needs --save-model")
    check(args.env_backend in ("gymnasium", "torch", "mjwarp"),
          f"--env-backend must be gymnasium, torch or mjwarp (got {args.env_backend!r})")
    if getattr(args, "async_envs", False) is None:  # every seed's envs step together: one vector env of them all
        args.async_envs = (args.env_backend == "gymnasium" and getattr(args, "env_threads", 1) == 1
                           and subprocesses_pay(args.env_id, args.num_envs * getattr(args, "num_seeds", 1)))
    check(not getattr(args, "async_envs", False) or args.env_backend == "gymnasium",
          "--async-envs steps gymnasium envs in subprocesses; device envs (--env-backend torch or mjwarp) step on "
          "the device: leave it out")
    env_threads = getattr(args, "env_threads", 1)
    check(env_threads >= 0, f"--env-threads must be >= 0 (got {env_threads})")
    check(env_threads == 1 or args.env_backend == "gymnasium",
          "--env-threads steps gymnasium envs in threads; device envs (--env-backend torch or mjwarp) step on the "
          "device: leave it out")
    check(not args.capture_video or args.env_backend == "gymnasium",
          "--capture-video records a gymnasium env; device envs (--env-backend torch or mjwarp) render nothing: "
          "leave it out, or evaluate the saved policy with scripts/evaluate.py --capture-video")
    check(env_threads == 1 or not getattr(args, "async_envs", False),
          "--env-threads and --async-envs are two ways to step the envs side by side (threads of this process or "
          "subprocesses): pick one")
    inductor_options(args)  # --max-autotune / --inductor: checked here, before anything is built
    if args.resume:  # a checkpoint of another script or other flags fails here, before a run folder exists
        load_checkpoint(args.resume, args, mmap=True)


def check_ppo_args(args, whole_sequences: bool = False, ranks: int = 1) -> None:
    """The checks of the hyperparameters every PPO script has. Minibatches split the rollout's num-envs x
    num-steps samples, or with `whole_sequences` its envs (a recurrent policy trains on whole env sequences).
    `ranks`: torchrun's processes, each with its own envs; --total-timesteps counts the steps of all."""
    for name in ("num_envs", "num_steps", "num_minibatches", "update_epochs"):
        check(getattr(args, name) > 0, f"--{name.replace('_', '-')} must be positive (got {getattr(args, name)})")
    check(args.learning_rate > 0, f"--learning-rate must be positive (got {args.learning_rate})")
    batch, minibatches = args.num_envs * args.num_steps, args.num_minibatches
    if whole_sequences:
        check(args.num_envs % minibatches == 0, f"--num-minibatches {minibatches} must divide --num-envs "
                                                f"{args.num_envs} (a minibatch is whole env sequences)")
    else:
        check(batch % minibatches == 0, f"--num-minibatches {minibatches} must divide num-envs x num-steps = {batch}")
        check(batch // minibatches >= 2 or not args.norm_adv,
              f"--num-minibatches {minibatches} leaves one sample per minibatch, whose advantage cannot be "
              "normalized: use fewer minibatches or more envs or steps")
    check(0 <= args.gae_lambda <= 1, f"--gae-lambda must be in [0, 1] (got {args.gae_lambda})")
    check(args.clip_coef > 0 and args.max_grad_norm > 0, "--clip-coef and --max-grad-norm must be positive")
    check(args.ent_coef >= 0 and args.vf_coef >= 0, "--ent-coef and --vf-coef must be >= 0")
    rollout = batch * ranks
    shape = f"num-envs x num-steps{f' x {ranks} ranks' if ranks > 1 else ''} = {rollout}"
    check(args.total_timesteps >= rollout,
          f"--total-timesteps {args.total_timesteps} is less than one rollout ({shape}): raise it to {rollout} or more")


def check_pqn_args(args) -> None:
    """The checks of the hyperparameters every PQN script has."""
    for name in ("num_envs", "num_steps", "num_minibatches", "update_epochs"):
        check(getattr(args, name) > 0, f"--{name.replace('_', '-')} must be positive (got {getattr(args, name)})")
    batch = args.num_envs * args.num_steps
    check(batch % args.num_minibatches == 0,
          f"--num-minibatches {args.num_minibatches} must divide num-envs x num-steps = {batch}")
    check(args.total_timesteps >= batch,
          f"--total-timesteps {args.total_timesteps} is less than one rollout (num-envs x num-steps = {batch})")
    check(args.learning_rate > 0 and args.max_grad_norm > 0, "--learning-rate and --max-grad-norm must be positive")
    check(0 <= args.q_lambda <= 1, f"--q-lambda must be in [0, 1] (got {args.q_lambda})")
    check(not args.fused_optimizer, "--fused-optimizer fuses Adam's step; PQN's RAdam has none: leave it out")
    check(0 <= args.end_e <= args.start_e <= 1, f"need 0 <= --end-e <= --start-e <= 1 (got {args.end_e}, "
                                                f"{args.start_e})")
    check(0 < args.exploration_fraction <= 1,
          f"--exploration-fraction must be in (0, 1] (got {args.exploration_fraction})")


def check_fits(items: int, bytes_per_item: int, device: torch.device, what: str, flag: str,
               num_seeds: int = 1) -> None:
    """One line instead of an out-of-memory crash when `items` of `bytes_per_item` for each of `num_seeds` seeds,
    which a run allocates at its start (a replay memory), exceed the memory available on `device` now; it names a
    value of `flag` (the flag that sets `items`) that fits. On a CPU the allocation itself would succeed (pages are
    committed as they are first written) and the run would be killed hours later, as the buffer fills."""
    if device.type == "cuda":
        available = torch.cuda.mem_get_info(device)[0]
    else:
        try:
            with open("/proc/meminfo") as f:  # Linux; elsewhere the check is skipped
                available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError):
            return
    nbytes = items * bytes_per_item * num_seeds
    seeds = f" for each of {num_seeds} seeds" if num_seeds > 1 else ""
    check(nbytes <= available, f"{what} ({flag} {items}{seeds}) needs {nbytes / 2**30:.1f} GiB but the "
                               f"{device.type} device has {available / 2**30:.1f} GiB available; lower {flag} to "
                               f"{int(0.9 * available) // (bytes_per_item * num_seeds)} or less"
                               + (" or lower --num-seeds" if num_seeds > 1 else ""))


def pick_device(cuda: bool) -> torch.device:
    """CUDA when asked for and present, else CPU."""
    return torch.device("cuda") if cuda and torch.cuda.is_available() else torch.device("cpu")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = True
