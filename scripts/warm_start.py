"""A script's startup on a cold compile cache and then on the warm one, back to back: the same command twice, both
runs measured by scripts/measure.py (startup: the compile, warmup and capture calls), with torch inductor's
cache (TORCHINDUCTOR_CACHE_DIR: its FX graphs, AOT autograd graphs and autotuning results) and warp's kernel cache
(WARP_CACHE_PATH) in a folder of their own that starts empty.

    python scripts/warm_start.py td3 --out results/experiments/warm-start/td3.json -- --compile --cudagraphs \
        --total-timesteps 6000 --learning-starts 2000
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from scripts.benchmark import save_record  # noqa: E402
from turborl.cli import parse  # noqa: E402


@dataclass
class Args:
    script: tyro.conf.Positional[str]
    """the script to start twice (a name in scripts/registry.py)"""
    out: str | None = None
    """JSON output"""


def start(script: str, flags: list[str], cache: str, measured: str) -> dict:
    """One run of the command with its caches in `cache`: its startup and the process's whole wall time."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor"),
           "WARP_CACHE_PATH": os.path.join(cache, "warp")}
    began = time.perf_counter()
    result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "measure.py"), script, "--out", measured,
                             "--", *flags], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if result.returncode != 0:
        raise SystemExit(f"error: {script} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    with open(measured) as f:
        return {"startup_seconds": json.load(f)["startup_seconds"], "process_seconds": wall}


def main(args: Args, flags: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        measured = os.path.join(cache, "measure.json")
        cold = start(args.script, flags, cache, measured)
        warm = start(args.script, flags, cache, measured)
    record = {"script": args.script, "flags": flags, "cold": cold, "warm": warm,
              "warm_over_cold_startup": warm["startup_seconds"] / cold["startup_seconds"]}
    print(f"{'':6} {'startup s':>10} {'process s':>10}")
    for name in ("cold", "warm"):
        print(f"{name:6} {record[name]['startup_seconds']:10.1f} {record[name]['process_seconds']:10.1f}")
    print(f"warm / cold startup: {record['warm_over_cold_startup']:.0%}")
    save_record(args.out, record)
    return record


if __name__ == "__main__":
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    main(parse(Args, argv[:split], description=__doc__.strip()), argv[split + 1:])
