#!/usr/bin/env bash
# The fairness measurements on a GPU machine (docs/measurements.md): OUT=DIR bash benchmarks/fairness_gpu.sh PART...
#   tests     the GPU tests of the timing protocol (streams, work after return, graphs)
#   quick     one run each of 19_ReLU and the small launch-bound Linear+ReLU, builds running
#   kb        one run each of KernelBench's ResNet18, LSTM and Gemm_Scale_BatchNorm, and our 3_Linear_BatchNorm, builds running
#   ours      one run each of our 1_MLP, 21 and 70, builds running
#   repeats-lb, repeats-gb  five runs of a launch-bound (3_Linear_BatchNorm) or a GPU-bound (70) problem with real
#             candidates (no builds: the same conditions as `before-*`); each fits one 10-minute call
#   before-lb, before-gb    the same five runs with the harness as it was before paired timing (OLD=DIR: that checkout,
#             e.g. `git archive 111d007 harness run.py configs problems solutions | tar -x -C .cache/old-tree`)
# Needs benchmarks/kernelbench/ filled (python3 benchmarks/dataplane.py --fetch-from ...).
set -o pipefail
OUT=${OUT:-/tmp/fairness}
mkdir -p "$OUT"
KB=benchmarks/kernelbench
LB=3_Linear_BatchNorm
GB=70_Gemm_Sigmoid_Scaling_ResidualAdd
fair() { local name=$1 limit=$2; shift 2; timeout "$limit" python3 benchmarks/fairness.py --out "$OUT/$name" "$@" 2>&1 | tee "$OUT/$name.txt"; }
for part in "$@"; do
  case "$part" in
    tests) timeout 300 python3 -m pytest -q -x tests/test_gpu.py -k "stream or graph or after_return" 2>&1 | tee "$OUT/gpu_tests.txt" ;;
    quick) fair quick 300 $KB/level1/19_ReLU.py benchmarks/problems/linear_relu_256x1024.py ;;
    kb) fair kb 580 $KB/level3/9_ResNet18.py $KB/level3/35_LSTM.py $KB/level2/33_Gemm_Scale_BatchNorm.py 3_Linear_BatchNorm ;;
    ours) fair ours 580 1_MLP 21_Conv2d_Add_Scale_Sigmoid_GroupNorm 70_Gemm_Sigmoid_Scaling_ResidualAdd ;;
    repeats-lb) fair repeats-lb 580 --variants 0 --repeats 5 $LB ;;
    repeats-gb) fair repeats-gb 580 --variants 0 --repeats 5 $GB ;;
    before-lb) fair before-lb 580 --root "${OLD:?set OLD to the earlier checkout}" --variants 0 --repeats 5 $LB ;;
    before-gb) fair before-gb 580 --root "${OLD:?set OLD to the earlier checkout}" --variants 0 --repeats 5 $GB ;;
  esac
done
rm -rf .cache/fairness-builds .cache/measurements .cache/builds .cache/inductor 2>/dev/null
