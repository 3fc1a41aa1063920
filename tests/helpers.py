"""Shared test helpers: run a script as a user would or in-process, and read its metrics."""

from __future__ import annotations

import csv
import glob
import importlib
import os
import subprocess
import sys

import torch
import tyro

from scripts.registry import TEST_RUNS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def metric(run_dir: str, name: str) -> list[float]:
    """Values of one metric from a run's metrics.csv, in the order they were logged."""
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return [float(row["value"]) for row in csv.DictReader(f) if row["name"] == name]


def metrics_after(runs_dir: str, step: int) -> list[tuple]:
    """Every logged (step, name, value) after `step` of the run under `runs_dir`, except the clock's (a run of
    --num-seeds N: its N run folders' records, seed after seed)."""
    folders = glob.glob(os.path.join(runs_dir, "*", "metrics.csv"))
    assert folders, f"no run under {runs_dir}"
    rows = []
    for metrics_csv in sorted(folders, key=lambda path: int(os.path.basename(os.path.dirname(path)).split("__")[2])):
        with open(metrics_csv) as f:
            rows += [(r["step"], r["name"], r["value"]) for r in csv.DictReader(f)
                     if r["name"] != "sps" and int(r["step"]) > step]
    return rows


def run_script(script: str, *flags: str, cwd: str | None = None, timeout: float = 1800, env: dict | None = None):
    """Run `python algos/<script>.py flags...` as a user would (`env`: variables added to the environment);
    returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "algos", f"{script}.py"), *flags],
        cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )


def run_main(script: str, flags, runs_dir: str) -> str:
    """Run a script's main in this process (a fresh compile: dynamo's recompile limit is per code object);
    returns the run folder."""
    module = importlib.import_module(f"algos.{script}")
    torch._dynamo.reset()
    args = tyro.cli(module.Args, args=[*flags, "--runs-dir", runs_dir])
    torch.set_num_threads(args.threads)  # as common/cli.py's entry point does
    return module.main(args)["run_dir"]


def first_losses(case: str, runs_dir: str, *flags: str, n: int = 6) -> list[float]:
    """The first `n` losses that the test run `case` (scripts/registry.py) logs with `flags` added."""
    test_run = TEST_RUNS[case]
    losses = metric(run_main(test_run.script, [*test_run.flags, *flags], runs_dir), test_run.loss)
    assert len(losses) >= n, losses
    return losses[:n]


def assert_user_error(result, *words: str) -> None:
    """A user error: exit code 2, one `error:` line on stderr, the last, that names the problem; no traceback.
    (Lines before it are the run's own, e.g. progress lines that a slow machine prints before a late error.)"""
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    for word in words:
        assert word in errors[0], (word, errors[0])
