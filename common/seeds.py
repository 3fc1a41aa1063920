"""`--num-seeds N`: N independent runs of one script in one process, the seed a batch axis of every tensor.

Seed i of a run is `--seed + i`. Its networks are drawn from its own seed (`seeded`), as a run of that seed alone
draws them; its envs are its own block of the vector env; every layer of the N networks is one batched matmul
(`SeedLinear`: weights `[seeds, in, out]`), so a step launches the kernels of one run for all N. The losses are
summed over the seeds: the gradient of a sum reaches each seed's weights from its own loss alone, and Adam is
elementwise, so each seed's update is exactly its own. Each seed is a run of its own downstream too: its own run
folder (`SeedLoggers`) with metrics, summary and exported policy (`one_seed`).
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
import sys
from collections.abc import Callable

import torch
import torch.nn as nn

from .errors import check
from .logger import RunLogger


class SeedLinear(nn.Module):
    """nn.Linear for each seed, stacked: weight `[seeds, in, out]`, bias `[seeds, 1, out]`, input
    `[seeds, batch, in]` (or more batch axes). Built for one seed with nn.Linear's own initialization (the same
    draws), then `init` (e.g. an orthogonal one) if given; `seeded` joins the seeds' layers."""

    def __init__(self, n_in: int, n_out: int, init: Callable[[nn.Linear], object] | None = None):
        super().__init__()
        linear = nn.Linear(n_in, n_out)
        if init is not None:
            init(linear)
        self.weight = nn.Parameter(linear.weight.detach().T.unsqueeze(0).contiguous())
        self.bias = nn.Parameter(linear.bias.detach().view(1, 1, n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[seeds, ..., in]` -> `[seeds, ..., out]`. Not baddbmm(bias, x, weight): that first copies the broadcast
        bias into its output, a kernel of its own on the GPU, where the compiled add fuses into the next kernel."""
        return (torch.bmm(x.flatten(1, -2), self.weight) + self.bias).unflatten(1, x.shape[1:-1])


def seeded(seed: int, num_seeds: int, build: Callable[[], tuple[nn.Module, ...]]) -> tuple[nn.Module, ...]:
    """`build()` (the run's networks, drawn in the order a run draws them) once per seed, stacked into one module
    each: every parameter's leading axis holds the seeds' blocks, seed after seed. Seed 0 draws from the global
    RNG as a run alone does (N = 1 is that run, draw for draw); seed i > 0 under its own seed `seed + i`, on a
    fork of the RNG, so what the run draws next does not depend on N."""
    parts = [build()]
    for i in range(1, num_seeds):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + i)
            parts.append(build())
    with torch.no_grad():
        for stacked, *others in zip(*parts, strict=True):
            for name, param in stacked.named_parameters():
                param.data = torch.cat([param.data, *(dict(m.named_parameters())[name].data for m in others)])
    return parts[0]


def seed_slice(module: nn.Module, i: int, num_seeds: int) -> nn.Module:
    """A copy of a stacked module, on the CPU, that holds seed i's parameters alone (a seeds axis of 1)."""
    single = copy.deepcopy(module).cpu()
    with torch.no_grad():
        for param in single.parameters():
            param.data = param.data.chunk(num_seeds)[i].clone()
    return single


def one_seed(module: nn.Module, i: int, num_seeds: int) -> nn.Module:
    """Seed i's part of a stacked module, as a module of its own that takes and returns unstacked batches
    (`[batch, ...]`): the policy a run of that seed alone would export."""
    return OneSeed(seed_slice(module, i, num_seeds))


class OneSeed(nn.Module):
    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x.unsqueeze(0)).squeeze(0)


def check_num_seeds(args) -> None:
    check(args.num_seeds >= 1, f"--num-seeds must be >= 1 (got {args.num_seeds})")
    check(args.num_seeds == 1 or args.env_backend == "gymnasium",
          f"--num-seeds {args.num_seeds} runs on gymnasium envs (--env-backend gymnasium); the device envs batch "
          "thousands of envs in one run already")
    last = args.seed + args.num_seeds - 1
    check(last < 2**32, f"--seed {args.seed} --num-seeds {args.num_seeds} ends at seed {last}; seeds must be below "
                        f"2**32: lower --seed to {2**32 - args.num_seeds} or less")


class SeedLoggers:
    """One RunLogger per seed, each with its own run folder (`{env}__{algo}__{seed + i}__{time}`, its args.json
    saying `seed + i`), that the loop calls as it would call one: `log` takes one value per seed for each
    metric, `log_episodes` the episodes of every seed, each with its seed's index. Seed 0's logger shows the
    progress and owns Ctrl-C (`stop`) for all; `dir` is its folder (the checkpoints of all seeds go there)."""

    def __init__(self, args, algo: str, total_steps: int, device, run_root: str = "runs", envs=None):
        self.loggers = []
        try:
            for i in range(args.num_seeds):
                seed_args = dataclasses.replace(args, seed=args.seed + i)
                first = self.loggers[0] if self.loggers else None
                self.loggers.append(RunLogger(seed_args, algo, total_steps, device, run_root=run_root,
                                              quiet=first is not None, stop=first.stop if first else None,
                                              envs=None if first else envs))  # env 0 (seed 0's) records
        except BaseException:  # a run that never started leaves no folder
            for logger in reversed(self.loggers):
                logger.close()  # first, all: their open files are what another seed may have lacked
            for logger in self.loggers:
                shutil.rmtree(logger.dir, ignore_errors=True)
            raise
        self.dir, self.stop = self.loggers[0].dir, self.loggers[0].stop

    def log(self, step: int, **values: list[float]) -> None:
        """`values`: per metric, one value per seed."""
        for i, logger in enumerate(self.loggers):
            logger.log(step, **{name: seed_values[i] for name, seed_values in values.items()})

    def log_episodes(self, step: int, finished: list[tuple]) -> None:
        """`finished`: (return, length, seed index) of each episode that ended (without the index: seed 0's)."""
        per_seed = [[] for _ in self.loggers]
        for episode in finished:
            per_seed[episode[2] if len(episode) > 2 else 0].append(episode[:2])
        for logger, episodes in zip(self.loggers, per_seed, strict=True):
            logger.log_episodes(step, episodes)

    def progress(self, step: int) -> None:
        for logger in self.loggers:
            logger.progress(step)

    def state_dict(self) -> dict:
        return {"seeds": [logger.state_dict() for logger in self.loggers]}

    def load_state_dict(self, state: dict) -> None:
        for logger, seed_state in zip(self.loggers, state["seeds"], strict=True):
            logger.load_state_dict(seed_state)

    def close(self, checkpoint: str | None = None, **extra) -> dict:
        """Every seed's summary.json; returns seed 0's, with the others' under `seeds` (each its own run)."""
        summaries = [logger.close(checkpoint=checkpoint, **extra) for logger in reversed(self.loggers)][::-1]
        if len(summaries) > 1 and summaries[0]["status"] in ("done", "interrupted"):  # after seed 0's own line
            returns = ", ".join(f"{ret:.1f}" if ret == ret else "none ended"  # NaN: no episode ended yet
                                for ret in (summary["mean_return_last20"] for summary in summaries))
            print(f"seeds {self.loggers[0].args['seed']}-{self.loggers[-1].args['seed']}: return(last 20) {returns}; "
                  f"a run folder each beside {self.dir}", file=sys.stderr)
        return {**summaries[0], "seeds": summaries} if len(summaries) > 1 else summaries[0]
