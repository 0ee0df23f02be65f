#!/usr/bin/env bash
# On a GPU: lint every problem, then evaluate a few problems with the gradient check on.
#   OUT=dir bash benchmarks/suite_check.sh [PROBLEM...]   (default: 3_Linear_BatchNorm 39 70)
set -u
OUT=${OUT:-suite-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 run.py lint --device cuda --out "$OUT/lint.md" > "$OUT/lint.log" 2>&1
echo "lint: exit $?" | tee "$OUT/exits.txt"
if [ $# -eq 0 ]; then set -- 3_Linear_BatchNorm 39_Gemm_Scale_BatchNorm 70_Gemm_Sigmoid_Scaling_ResidualAdd; fi
for problem in "$@"; do
  python3 run.py --problem "$problem" --set "baselines.compile_modes=[]" --run-id "suite-$problem" --quiet > "$OUT/run-$problem.log" 2>&1
  echo "$problem: exit $?" | tee -a "$OUT/exits.txt"
  cp "results/suite-$problem/leaderboard.md" "$OUT/leaderboard-$problem.md" 2>/dev/null
  cp "results/suite-$problem/records.jsonl" "$OUT/records-$problem.jsonl" 2>/dev/null
done
cat "$OUT/exits.txt"
