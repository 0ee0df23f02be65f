#!/usr/bin/env bash
# KernelBench's own eval on the corpus draw, on a GPU machine, with the GPU's busy share sampled from NVML
# (benchmarks/kernelbench_eval.py):
#   OUT=DIR [BUDGET=400] [RESULTS=FILE] [BUILDS=DIR] [KBCORPUS=DIR] bash benchmarks/kernelbench_eval_gpu.sh [args for kernelbench_eval.py]
# e.g. OUT=$OUT/kb BUDGET=400 bash benchmarks/kernelbench_eval_gpu.sh --fraction 0.23 --seed 7 --ours $OUT/r1/state.jsonl
# Needs KernelBench's modules in benchmarks/kernelbench/eval_src/ (benchmarks/kernelbench_fetch.sh; git-ignored, so
# carry benchmarks/kernelbench) and the corpus at .kbcorpus/ (a copy of ../shared/kbcorpus; carry it) or KBCORPUS=DIR.
# RESULTS (default $OUT/results.jsonl): carry the results of an earlier call in to go on where it stopped (same
# arguments); each call adds its own build and eval phases to the wall time.
# BUDGET (seconds, default 400) bounds the build and eval phases together; start-up and the report take about 30 s
# more, and the call is stopped at BUDGET + 120 s, so BUDGET=400 fits a 10-minute limit.
# Writes $OUT/log.txt, $OUT/results.jsonl, $OUT/report.md, $OUT/logs/ (each kernel's build and eval output), and
# $OUT/nvml.csv with $OUT/busy.txt: utilization.gpu sampled every 200 ms, its mean over the call and over each phase;
# and $OUT/cpu.csv, the host's CPU counters each second (benchmarks/host_cpu.py), summed into busy.txt's last line
# with the CPU-seconds per verdict.
# Builds live in BUILDS (default /tmp/kernelbench-eval-builds), kept for a later call on the same machine; remove it
# before a cold measurement there. Exit: kernelbench_eval.py's (0; 130 interrupted), 124 when the timeout stopped it.
set -o pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
BUDGET=${BUDGET:-400}
OUT=$(realpath -m "${OUT:-.cache/kernelbench-eval-out}")
RESULTS=$(realpath -m "${RESULTS:-$OUT/results.jsonl}")
BUILDS=$(realpath -m "${BUILDS:-${TMPDIR:-/tmp}/kernelbench-eval-builds}")
export KBCORPUS=$(realpath -m "${KBCORPUS:-$HERE/.kbcorpus}")
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
SAMPLES="$OUT/nvml.csv"

nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 200 > "$SAMPLES" 2>/dev/null &
SAMPLER=$!
python3 "$HERE/benchmarks/host_cpu.py" sample "$OUT/cpu.csv" &  # the host's CPUs over the call (its builds are CPU work)
CPU_SAMPLER=$!
. "$HERE/benchmarks/stoppable.sh"
trap 'stopped=1' INT TERM  # a stop ends kernelbench_eval.py, which keeps its results; then the report is written
{
  timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
  timeout 120 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "KernelBench: $(head -1 "$HERE/benchmarks/kernelbench/eval_src/COMMIT" 2>/dev/null || echo 'missing: run benchmarks/kernelbench_fetch.sh')"
  echo "corpus $KBCORPUS; results $RESULTS: $(cat "$RESULTS" 2>/dev/null | wc -l) lines; builds $BUILDS; budget $BUDGET s; $(nproc) CPUs"
  stoppable timeout -k 30 $((BUDGET + 120)) python3 "$HERE/benchmarks/kernelbench_eval.py" --corpus "$KBCORPUS" --out "$OUT" \
    --results "$RESULTS" --report "$OUT/report.md" --builds "$BUILDS" --budget-s "$BUDGET" "$@"
  code=$?
  if [ "$code" -ge 124 ] && [ "$code" -ne 130 ]; then  # stopped before it wrote the report: write it from the results
    timeout 120 python3 "$HERE/benchmarks/kernelbench_eval.py" --corpus "$KBCORPUS" --out "$OUT" --results "$RESULTS" \
      --report "$OUT/report.md" --report-only "$@" > /dev/null
  fi
  echo "results $RESULTS: $(cat "$RESULTS" 2>/dev/null | wc -l) lines; exit $code"
  exit "$code"
} 2>&1 | keep_log "$OUT/log.txt"
code=$?
kill "$SAMPLER" "$CPU_SAMPLER" 2>/dev/null
wait "$SAMPLER" "$CPU_SAMPLER" 2>/dev/null
[ "$RESULTS" != "$OUT/results.jsonl" ] && cp "$RESULTS" "$OUT/results.jsonl"
python3 - "$SAMPLES" "$RESULTS" "$OUT/cpu.csv" "$HERE/benchmarks" <<'EOF' | tee "$OUT/busy.txt" | tee -a "$OUT/log.txt"
import datetime, json, os, statistics, sys
from pathlib import Path
path, results, cpu = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, sys.argv[4])
import host_cpu
rows = []  # (epoch, gpu, utilization, memory MiB)
for line in open(path):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) == 4 and parts[2].isdigit():
        try:
            when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        except ValueError:
            continue
        rows.append((when, parts[1], int(parts[2]), float(parts[3])))
calls = [json.loads(l) for l in open(results) if '"kind": "call"' in l]
call = calls[-1] if calls else {}
spans = {"call": None}
for name in ("build", "eval"):
    if call.get(f"{name}_epoch"):
        spans[f"{name} phase"] = call[f"{name}_epoch"]
for gpu in sorted({r[1] for r in rows}):
    for label, span in spans.items():
        util = [(u, m) for t, g, u, m in rows if g == gpu and (span is None or span[0] <= t <= span[1])]
        if util:
            print(f"GPU {gpu}, {label}: {len(util)} samples; busy share (mean utilization.gpu) {statistics.mean(u for u, _ in util):.1f}%; "
                  f"samples with a kernel running {sum(u > 0 for u, _ in util) / len(util):.0%}; peak memory {max(m for _, m in util) / 1024:.1f} GiB")
latest = {}  # the last line of each kernel wins
for raw in open(results):
    try:
        line = json.loads(raw)
    except json.JSONDecodeError:
        continue
    if line.get("kind") != "call" and line.get("kernel"):
        latest[(line.get("problem"), line["kernel"])] = line
if os.path.isfile(cpu):  # every call's samples, as the rate counts every call's judged kernels
    print(host_cpu.render(host_cpu.summarise(host_cpu.load(Path(cpu)), sum(1 for l in latest.values() if l.get("judged")))))
EOF
exit "$code"
