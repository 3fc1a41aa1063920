#!/usr/bin/env bash
# The GPU check: versions, the GPU tests, then the speed suite for the given algos; a short table last.
# Usage: scripts/gpu_check.sh OUTDIR [ALGO ...]   (results JSON under OUTDIR/speed, logs in OUTDIR)
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUTDIR [ALGO ...]}; shift
algos=("$@"); ((${#algos[@]})) || algos=(dqn td3 sac ppo)
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c "import sys, torch, tensordict, gymnasium; print('python', sys.version.split()[0], 'torch', torch.__version__, 'tensordict', tensordict.__version__, 'gymnasium', gymnasium.__version__)"
} 2>&1 | tee "$out/versions.txt"
timeout "${GPU_TEST_TIMEOUT:-300}" python -m pytest -q tests/test_gpu.py > "$out/gpu_tests.log" 2>&1
echo "gpu tests exit $?: $(tail -1 "$out/gpu_tests.log")"
python scripts/benchmark.py --suite speed --algos "${algos[@]}" --out "$out/speed" --timeout 240 \
  > "$out/speed.log" 2>&1
grep -A100 "suite on" "$out/speed.log"
