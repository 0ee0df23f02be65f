#!/usr/bin/env bash
# The integrity measurements on a GPU machine (docs/measurements.md): OUT=DIR bash benchmarks/integrity_gpu.sh PART...
#   probe     compute-sanitizer's location and version; the cost of the persisting-L2 check per timed call
#   kb        KernelBench's own three adversarial kernels against its level1/1_Square_matrix_multiplication_
#             (needs benchmarks/kernelbench/level1/ and benchmarks/kernelbench/adversarial/1_Square_matrix_multiplication_/)
#   matmul    our catalog for problems/level1/1_Matmul_Square (KernelBench's three ideas, rewritten)
#   catalog   our catalog for benchmarks/problems/linear_relu_256x1024.py (every class in docs/integrity.md)
#   team      every shipped candidate (solutions/) under the new checks, sanitizer included: the honest team
#             candidates must stay correct and unflagged
#   corpus    the verdict corpus (benchmarks/corpus/: honest and wrong kernels on KernelBench's files, needs
#             benchmarks/kernelbench/) under the default and the KernelBench profile
#   floor     the null candidate's fairness floor on a launch-bound problem (3_Linear_BatchNorm)
#   tests     the GPU tests (test_gpu.py, the GPU cases of test_judge.py; not the catalog test, which repeats the parts above)
#   clean     remove the builds and caches the parts above leave (they are kept between parts, so a part can reuse builds)
set -o pipefail
OUT=${OUT:-/tmp/integrity}
mkdir -p "$OUT"
SHORT=(--set timing.budget_s=2 --set timeouts.check=60 --set baselines.compile_modes=[])
for part in "$@"; do
  case "$part" in
    probe)
      (command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer) 2>&1 | tee "$OUT/probe.txt"
      timeout 60 "$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)" --version 2>&1 | tee -a "$OUT/probe.txt"
      timeout 120 python3 - <<'EOF' 2>&1 | tee -a "$OUT/probe.txt"
import time, torch
from harness.device.cuda_driver import persisting_l2, reset_persisting_l2
torch.zeros(1, device="cuda")
n = 100000
t = time.perf_counter()
for _ in range(n):
    persisting_l2()
print(f"persisting_l2(): {(time.perf_counter() - t) / n * 1e9:.0f} ns per call; limit now {persisting_l2()}")
t = time.perf_counter()
for _ in range(1000):
    reset_persisting_l2()
print(f"reset_persisting_l2(): {(time.perf_counter() - t) / 1000 * 1e6:.1f} us per call")
print("max persisting L2:", torch.cuda.get_device_properties(0).L2_cache_size, "L2 bytes")
EOF
      ;;
    kb) timeout 580 python3 run.py --problem benchmarks/kernelbench/level1/1_Square_matrix_multiplication_.py \
          --set solutions_dir=benchmarks/kernelbench/adversarial --results "$OUT/results" --run-id kb-adversarial "${SHORT[@]}" 2>&1 | tee "$OUT/kb.txt"
        cp -r "$OUT/results/kb-adversarial/logs" "$OUT/kb-logs" 2>/dev/null ;;
    matmul) timeout 580 python3 benchmarks/cheats.py --out "$OUT/cheats" "${SHORT[@]}" 1_Matmul_Square 2>&1 | tee "$OUT/matmul.txt" ;;
    catalog) timeout 590 python3 benchmarks/cheats.py --out "$OUT/cheats" "${SHORT[@]}" linear_relu_256x1024 2>&1 | tee "$OUT/catalog.txt" ;;
    team) timeout 590 python3 run.py --all --results "$OUT/results" --run-id team --json --quiet "${SHORT[@]}" > "$OUT/team.jsonl" 2> "$OUT/team.stderr.txt"
          python3 -c "import json,sys; [print(r['identity']['problem'], r['identity']['candidate'], r['decision']['status'], [f['code'] for f in r['integrity']['flags']], [s['outcome'] for s in r['integrity']['sanitizer']]) for r in map(json.loads, open(sys.argv[1])) if 'candidate' in r['identity']]" "$OUT/team.jsonl" | tee "$OUT/team.txt" ;;
    corpus) timeout 590 python3 benchmarks/verdict_corpus.py --out "$OUT/corpus" "${SHORT[@]}" --set timing.null_candidate=off --set sanitizer.enabled=off 2>&1 | tee "$OUT/corpus.txt" ;;
    floor) timeout 400 python3 benchmarks/fairness.py --variants 0 --repeats 2 --out "$OUT/floor" 3_Linear_BatchNorm 2>&1 | tee "$OUT/floor.txt" ;;
    tests) timeout 590 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_judge.py 2>&1 | tee "$OUT/gpu_tests.txt" ;;
    clean) rm -rf .cache/builds .cache/measurements .cache/inductor .cache/cheats results/ 2>/dev/null ;;
  esac
done
