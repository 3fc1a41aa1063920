"""Shared test helpers: run a script's main in-process or as a user would, and read its metrics."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def metric(run_dir: str, name: str) -> list[float]:
    """Values of one metric from a run's metrics.csv, in the order they were logged."""
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return [float(row["value"]) for row in csv.DictReader(f) if row["name"] == name]


def run_script(script: str, *flags: str, cwd: str | None = None, timeout: float = 600):
    """Run `python algos/<script>.py flags...` as a user would; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "algos", f"{script}.py"), *flags],
        cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout,
    )


def assert_user_error(result, *words: str) -> None:
    """A user error: exit code 2, one line on stderr that names the problem, no traceback."""
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
