#!/usr/bin/env bash
# The data plane on a GPU, in one call: the GPU tests, then null candidates (each problem file
# with Model renamed ModelNew) on the target problems, then the KernelBench set in a row.
#   OUT=dir [SKIP_GPU_TESTS=1] [SKIP_TARGETS=1] [SKIP_KERNELBENCH=1] bash benchmarks/dataplane_gpu.sh
# KernelBench's files are read from benchmarks/kernelbench/ (python3 benchmarks/dataplane.py --fetch-from ...).
set -o pipefail
OUT=${OUT:-results/dataplane}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
KB=benchmarks/kernelbench
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
python3 -c 'import torch; print("torch", torch.__version__)' | tee -a "$OUT/device.txt"
df -h "${TMPDIR:-/tmp}" | tail -1 | tee -a "$OUT/device.txt"
if [ -z "$SKIP_GPU_TESTS" ]; then
  echo "== GPU tests"
  timeout 420 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_judge.py 2>&1 | tail -15 | tee "$OUT/gpu_tests.txt"
fi
if [ -z "$SKIP_TARGETS" ]; then
  echo "== targets (eager reference only: baselines.compile_modes=[])"
  timeout 400 python3 benchmarks/dataplane.py --device cuda --timeout 120 --out "$OUT/targets" --set 'baselines.compile_modes=[]' \
    $KB/level1/19_ReLU.py problems/level2/21_Conv2d_Add_Scale_Sigmoid_GroupNorm.py problems/level1/7_GELU.py problems/level1/3_Softmax_Rows.py
fi
if [ -z "$SKIP_KERNELBENCH" ]; then
  echo "== KernelBench in a row (correctness only)"
  timeout 560 python3 benchmarks/dataplane.py --device cuda --timeout 150 --no-timing --out "$OUT/kernelbench" $KB
fi
df -h "${TMPDIR:-/tmp}" | tail -1 | tee -a "$OUT/device.txt"
