#!/usr/bin/env bash
# One tree's verdicts on a GPU machine, as files that another tree's can be compared with
# (benchmarks/verdicts_diff.py): a seeded draw of the corpus of LLM kernels, and the seed problems' candidates
# with the null candidate on (1_Scale_Bias_ReLU is launch-bound). Run it in the tree to measure:
#   OUT=DIR bash benchmarks/verdicts_gpu.sh LABEL
# The corpus must be at .kbcorpus/ (a copy of ../shared/kbcorpus; carry it) or at KBCORPUS=DIR.
# Writes $OUT/LABEL-corpus.jsonl (kbcorpus.py's state: status, reason, flags per kernel), $OUT/LABEL-seeds.jsonl
# (the run's records) and $OUT/LABEL-log.txt. CORPUS_BUDGET and SEEDS_LIMIT (seconds, default 300 and 200) bound
# the two parts. Builds and scratch go to a folder removed at the end.
set -o pipefail
LABEL=${1:?usage: OUT=DIR bash benchmarks/verdicts_gpu.sh LABEL}
OUT=$(realpath -m "${OUT:?set OUT}")
CORPUS=$(realpath -m "${KBCORPUS:-.kbcorpus}")
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/verdicts-gpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export PYTHONUNBUFFERED=1
{
  date -u
  echo "tree $(git rev-parse --short HEAD 2>/dev/null || cat .tree-commit 2>/dev/null)"
  timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  timeout 120 python3 run.py --version
  started=$(date +%s)
  timeout -k 20 $((${CORPUS_BUDGET:-300} + 80)) python3 benchmarks/kbcorpus.py --corpus "$CORPUS" --fraction 0.06 --seed 37 \
    --profiles default --out "$WORK/corpus" --state "$OUT/$LABEL-corpus.jsonl" --report "$WORK/report.md" \
    --budget-s "${CORPUS_BUDGET:-300}" --set "build_cache_dir=$WORK/builds" --set 'baselines.compile_modes=[]'
  echo "corpus exit $? after $(( $(date +%s) - started )) s"
  started=$(date +%s)
  timeout -k 20 "${SEEDS_LIMIT:-200}" python3 run.py --problem 1_Scale_Bias_ReLU --problem 37_Matmul_Swish_Sum_GroupNorm \
    --problem 21_Conv2d_Add_Scale_Sigmoid_GroupNorm --set 'baselines.compile_modes=[]' --set timing.null_candidate=on \
    --set "build_cache_dir=$WORK/builds" --results "$WORK/results" --run-id seeds
  echo "seeds exit $? after $(( $(date +%s) - started )) s"
  cp "$WORK/results/seeds/records.jsonl" "$OUT/$LABEL-seeds.jsonl"
} 2>&1 | tee "$OUT/$LABEL-log.txt"
