#!/usr/bin/env bash
# The GPU check: versions, the GPU tests (capture works, the four paths compute the same thing), then the speed
# suite; the benchmark's table last. Arguments after OUTDIR go to the benchmark (default: the whole suite).
#
#   scripts/gpu_check.sh OUTDIR                                       # JSON under OUTDIR/speed, logs in OUTDIR
#   scripts/gpu_check.sh OUTDIR --labels ppo-torch4096 --paths compile+cudagraphs
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_check.sh OUTDIR [benchmark flags ...]}; shift
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c "import sys, torch, tensordict, gymnasium; print('python', sys.version.split()[0], 'torch', torch.__version__, 'tensordict', tensordict.__version__, 'gymnasium', gymnasium.__version__)"
} 2>&1 | tee "$out/versions.txt"
timeout "${GPU_TEST_TIMEOUT:-400}" python -m pytest -q -p no:cacheprovider tests/test_gpu.py > "$out/gpu_tests.log" 2>&1
echo "gpu tests exit $?: $(tail -1 "$out/gpu_tests.log")"
python scripts/benchmark.py --suite speed --out "$out/speed" --timeout 240 "$@" > "$out/speed.log" 2>&1
grep -A100 "suite on" "$out/speed.log"
