#!/usr/bin/env bash
# The corpus of LLM-written kernels on a GPU machine, one part per call (benchmarks/kbcorpus.py):
#   OUT=DIR bash benchmarks/kbcorpus_gpu.sh STATE_FILE PART [extra args for kbcorpus.py]
# e.g. bash benchmarks/kbcorpus_gpu.sh .cache/kbstate/state.jsonl 3/12 --profiles default,kernelbench \
#        --fraction 0.5 --seed 1 --set baselines.compile_modes=[] --set timing.null_candidate=false
# The corpus must be at .kbcorpus/ in the repository root (a copy of ../shared/kbcorpus; git-ignored, so carry
# it), or at KBCORPUS=DIR. STATE_FILE is read and appended to: carry it in, and put $OUT/state.jsonl back in its
# place before the next call on a fresh machine. A call with the same selection and PART goes on where the last
# stopped; kernels whose run was stopped at its limit are `no record`: pass --retry 'no record' to run them again.
# BUDGET (seconds, default 420) bounds the runs of the call in all; start-up, a run's stop and the report take
# up to about 90 s more, so the call fits a 10-minute limit. Writes $OUT/log.txt (everything), $OUT/state.jsonl
# and $OUT/report.md. Run folders, link trees and caches live in a scratch folder removed at the end; builds live in
# BUILDS (default /tmp/kbcorpus-builds), kept for the next call on the same machine (remove it when done).
# Exit: kbcorpus.py's (0; 1: an unexplained disagreement, or a timing-mode profile changed a status; 130:
# interrupted), 124 when its timeout stopped it. Stopped (INT, TERM: Ctrl-C, an outer `timeout`), it stops the run in
# flight, whose finished records go into the state, and returns once nothing of it runs (benchmarks/stoppable.sh).
set -o pipefail
usage="usage: OUT=DIR bash benchmarks/kbcorpus_gpu.sh STATE_FILE PART [extra args for benchmarks/kbcorpus.py]"
STATE=$(realpath -m "${1:?$usage}")
PART=${2:?$usage}
shift 2
BUDGET=${BUDGET:-420}
CORPUS=$(realpath -m "${KBCORPUS:-.kbcorpus}")
OUT=$(realpath -m "${OUT:-.cache/kbcorpus-out}")
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT" "$(dirname "$STATE")"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kbcorpus.XXXXXX")
BUILDS=${BUILDS:-${TMPDIR:-/tmp}/kbcorpus-builds}  # kept between calls on one machine: a later part or profile reuses the builds
export PYTHONUNBUFFERED=1
. "$(pwd)/benchmarks/stoppable.sh"
trap 'stopped=1' INT TERM  # a stop (INT, TERM) ends kbcorpus.py's run, which keeps its records; then the state is copied

{
  timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  timeout 120 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "corpus $CORPUS: $(find "$CORPUS/solutions" -name '*.py' 2>/dev/null | wc -l) kernels; state $STATE: $(cat "$STATE" 2>/dev/null | wc -l) lines; part $PART; budget $BUDGET s"
  df -h "$WORK" | tail -n +2
  stoppable timeout -k 30 $((BUDGET + 100)) python3 benchmarks/kbcorpus.py --corpus "$CORPUS" --out "$WORK" --state "$STATE" \
    --report "$WORK/report.md" --part "$PART" --budget-s "$BUDGET" --set "build_cache_dir=$BUILDS" "$@"
  code=$?
  if [ "$code" -ge 124 ] || [ ! -s "$WORK/report.md" ]; then  # stopped before it wrote the report: write it from the state
    timeout 120 python3 benchmarks/kbcorpus.py --corpus "$CORPUS" --state "$STATE" --report "$WORK/report.md" --report-only > /dev/null
  fi
  echo "state $STATE: $(cat "$STATE" 2>/dev/null | wc -l) lines; exit $code"
  exit "$code"
} 2>&1 | keep_log "$OUT/log.txt"
code=$?

cp "$STATE" "$OUT/state.jsonl" 2>/dev/null
cp "$WORK/report.md" "$OUT/report.md" 2>/dev/null
rm -rf "$WORK"
# the harness's scratch folders whose run is gone (a run killed at its limit may leave one)
timeout 60 python3 -c 'from harness.parent.scratch import default_base, sweep_stale; sweep_stale(default_base())' 2>/dev/null
exit "$code"
