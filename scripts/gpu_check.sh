#!/usr/bin/env bash
# On a CUDA machine: the GPU tests (capture works, the four paths compute the same thing), then a speed
# benchmark; the benchmark's table comes last. Arguments after the output folder go to the benchmark.
#
#   bash scripts/gpu_check.sh results/speed                          # the whole speed suite
#   bash scripts/gpu_check.sh /tmp/ab --labels ppo-torch4096 --paths compile+cudagraphs
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?give the output folder of the benchmark JSON}
shift
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'error: no CUDA device here')" || exit 2
python -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -n 15
python scripts/benchmark.py --suite speed --out "$out" "$@"
