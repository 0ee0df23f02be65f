#!/usr/bin/env bash
# On a GPU: lint every problem, then evaluate problems with the gradient check on.
#   OUT=dir bash benchmarks/suite_check.sh [PROBLEM...]   (default: 3_Linear_BatchNorm 39 70)
# SKIP_LINT=1 skips the lint; WITH_COMPILE=1 keeps the torch.compile baseline (the config's default),
# which the default run leaves out to save time. Each problem is its own run (results/suite-PROBLEM),
# so a long suite can be split over several calls.
set -u
OUT=${OUT:-suite-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -z "${SKIP_LINT:-}" ]; then
  python3 run.py lint --device cuda --out "$OUT/lint.md" > "$OUT/lint.log" 2>&1
  echo "lint: exit $?" | tee -a "$OUT/exits.txt"
fi
if [ $# -eq 0 ]; then set -- 3_Linear_BatchNorm 39_Gemm_Scale_BatchNorm 70_Gemm_Sigmoid_Scaling_ResidualAdd; fi
extra=(--set "baselines.compile_modes=[]")
if [ -n "${WITH_COMPILE:-}" ]; then extra=(); fi
for problem in "$@"; do
  started=$(date +%s)
  python3 run.py --problem "$problem" "${extra[@]}" --run-id "suite-$problem" --quiet > "$OUT/run-$problem.log" 2>&1
  echo "$problem: exit $? ($(( $(date +%s) - started )) s)" | tee -a "$OUT/exits.txt"
  cp "results/suite-$problem/leaderboard.md" "$OUT/leaderboard-$problem.md" 2>/dev/null
  cp "results/suite-$problem/records.jsonl" "$OUT/records-$problem.jsonl" 2>/dev/null
done
cat "$OUT/exits.txt"
