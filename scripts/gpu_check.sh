#!/usr/bin/env bash
# The GPU check: GPU tests, then a short steady-state run of each path. Usage: scripts/gpu_check.sh [OUTDIR]
set -uo pipefail
out=${1:-gpu_check}; mkdir -p "$out"
python -c "import torch, tensordict, gymnasium; print('torch', torch.__version__, 'tensordict', tensordict.__version__, 'gymnasium', gymnasium.__version__, torch.cuda.get_device_name())"
python -m pytest -q tests/test_gpu.py 2>&1 | tee "$out/gpu_tests.log" | tail -25
for flags in "" "--compile" "--cudagraphs" "--compile --cudagraphs"; do
  python algos/dqn.py --total-timesteps 60000 --learning-starts 10000 $flags --runs-dir "$out/runs" 2>&1 | grep '^done' | sed "s/^/dqn [$flags] /"
done
