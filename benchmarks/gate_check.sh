#!/usr/bin/env bash
# The regression gate on a GPU: a run gated against a re-run of itself must pass; the same
# candidate deliberately slowed (its GEMM done twice) must fail with exit 3.
#   OUT=dir bash benchmarks/gate_check.sh
set -u
OUT=${OUT:-gate-check}
mkdir -p "$OUT"
PROBLEM=70_Gemm_Sigmoid_Scaling_ResidualAdd
SOLUTIONS=$(mktemp -d)
mkdir -p "$SOLUTIONS/$PROBLEM"
cp "solutions/$PROBLEM/team_fused.py" "$SOLUTIONS/$PROBLEM/team_fused.py"
COMMON=(--problem "$PROBLEM" --set "solutions_dir=$SOLUTIONS" --set "baselines.compile_modes=[]" --quiet)
python3 run.py "${COMMON[@]}" --run-id gate-base > "$OUT/base.log" 2>&1
echo "base run: exit $?" | tee "$OUT/exits.txt"
python3 run.py baseline save results/gate-base --out "$OUT/baseline.jsonl" | tee -a "$OUT/exits.txt"
python3 run.py "${COMMON[@]}" --run-id gate-same --gate "$OUT/baseline.jsonl" > "$OUT/same.log" 2>&1
echo "same candidate again, gated: exit $?" | tee -a "$OUT/exits.txt"
python3 - "$SOLUTIONS/$PROBLEM/team_fused.py" <<'PY'
import sys
from pathlib import Path
path = Path(sys.argv[1])
text = path.read_text()
line = "        y = F.linear(x, self.gemm.weight, self.gemm.bias).contiguous()\n"
assert line in text
path.write_text(text.replace(line, "        F.linear(x, self.gemm.weight, self.gemm.bias)  # deliberately wasted: the GEMM twice\n" + line))
PY
python3 run.py "${COMMON[@]}" --run-id gate-slow --gate "$OUT/baseline.jsonl" --across-changes > "$OUT/slow.log" 2>&1
echo "slowed candidate, gated: exit $?" | tee -a "$OUT/exits.txt"
cp results/gate-same/gate.md "$OUT/gate_same.md"
cp results/gate-slow/gate.md "$OUT/gate_slow.md"
cat "$OUT/exits.txt"
