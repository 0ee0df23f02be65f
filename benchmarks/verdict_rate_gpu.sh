#!/usr/bin/env bash
# Verdicts per GPU-hour on a GPU machine, with the GPU's busy share sampled from NVML during the run:
#   OUT=DIR [TREE=DIR] [STATE=FILE] bash benchmarks/verdict_rate_gpu.sh PART [extra args for benchmarks/kbcorpus.py]
# e.g. bash benchmarks/verdict_rate_gpu.sh 1/1 --profiles loop --fraction 0.23 --seed 7
# TREE: the checkout whose harness runs (default: this one), so a run of an older commit (a `git worktree`)
# and of this one use the same script. The corpus is at .kbcorpus/ (carry it) or KBCORPUS=DIR.
# STATE (default $OUT/state.jsonl): carry a state in to go on where a call stopped.
# Writes (a later call on the same OUT appends its log, busy share, samples and host line) $OUT/log.txt, $OUT/state.jsonl, $OUT/report.md (kbcorpus.py), $OUT/rate.md (verdict_rate.py),
# $OUT/host.txt (the host's CPU speed before each call's run: benchmarks/host_probe.py), and
# $OUT/nvml.csv with $OUT/busy.txt: utilization.gpu sampled every 200 ms from the run's start to its end (NVML's
# utilization is the share of its sample period in which a kernel ran, so its mean is the GPU's busy share).
# $OUT/cpu.csv: the host's CPU counters sampled every second over the run (benchmarks/host_cpu.py); rate.md then says
# how busy the cores were, how long the run was bound by them, and the CPU-seconds per verdict.
set -o pipefail
usage="usage: OUT=DIR bash benchmarks/verdict_rate_gpu.sh PART [extra args for benchmarks/kbcorpus.py]"
PART=${1:?$usage}
shift
HERE=$(cd "$(dirname "$0")/.." && pwd)
TREE=$(realpath -m "${TREE:-$HERE}")
OUT=$(realpath -m "${OUT:-.cache/rate-out}")
export KBCORPUS=$(realpath -m "${KBCORPUS:-$HERE/.kbcorpus}")
STATE=$(realpath -m "${STATE:-$OUT/state.jsonl}")
mkdir -p "$OUT"
SAMPLES="$OUT/nvml.call.csv"  # this call's samples, appended to $OUT/nvml.csv at its end
# the host's CPU speed now (benchmarks/host_probe.py), before the run: two calls' rates compare only on hosts alike
HOST=$(timeout 60 python3 "$HERE/benchmarks/host_probe.py" 2>&1 | tail -1)
echo "$(date -u +%FT%TZ) $HOST" >> "$OUT/host.txt"

nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 200 > "$SAMPLES" 2>/dev/null &
SAMPLER=$!
python3 "$HERE/benchmarks/host_cpu.py" sample "$OUT/cpu.csv" &  # the host's CPUs over the run: is it bound by them?
CPU_SAMPLER=$!
START=$(date +%s.%N)
trap 'stopped=1' INT TERM  # stopped: kbcorpus_gpu.sh keeps what finished, and this call still copies and rates it
OUT="$OUT/corpus" bash "$TREE/benchmarks/kbcorpus_gpu.sh" "$STATE" "$PART" "$@"
code=$?
END=$(date +%s.%N)
kill "$SAMPLER" "$CPU_SAMPLER" 2>/dev/null
wait "$SAMPLER" "$CPU_SAMPLER" 2>/dev/null
{ echo "== call of $(date -u +%FT%TZ), exit $code"; echo "$HOST"; cat "$OUT/corpus/log.txt" 2>/dev/null; } >> "$OUT/log.txt"  # a resumed run keeps each call's
cp "$OUT/corpus/report.md" "$OUT/report.md" 2>/dev/null
[ -s "$OUT/corpus/state.jsonl" ] && cp "$OUT/corpus/state.jsonl" "$OUT/state.jsonl.tmp" && mv "$OUT/state.jsonl.tmp" "$STATE"
[ "$STATE" != "$OUT/state.jsonl" ] && cp "$STATE" "$OUT/state.jsonl"
rm -rf "$OUT/corpus"
python3 "$HERE/benchmarks/verdict_rate.py" "$OUT/state.jsonl" --profile loop --cpu "$OUT/cpu.csv" --out "$OUT/rate.md" | tee -a "$OUT/log.txt"
python3 - "$SAMPLES" "$START" "$END" <<'EOF' | tee -a "$OUT/busy.txt" | tee -a "$OUT/log.txt"
import statistics, sys
path, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
print(f"call of {end - start:.0f} s:")
by_gpu = {}
for line in open(path):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) == 4 and parts[2].isdigit():
        by_gpu.setdefault(parts[1], []).append((int(parts[2]), float(parts[3])))
for gpu, rows in sorted(by_gpu.items()):
    util = [u for u, _ in rows]
    print(f"GPU {gpu}: {len(rows)} samples over {end - start:.0f} s; busy share (mean utilization.gpu) {statistics.mean(util):.1f}%; "
          f"samples with a kernel running {sum(u > 0 for u in util) / len(util):.0%}; peak memory {max(m for _, m in rows) / 1024:.1f} GiB")
EOF
cat "$SAMPLES" >> "$OUT/nvml.csv" 2>/dev/null && rm -f "$SAMPLES"
exit "$code"
