#!/usr/bin/env bash
# The verdicts of a full run (`run.py --all`: the seed completions and the team's kernels) on a GPU
# machine, as a table that two trees can be compared by:
#   bash benchmarks/seeds_gpu.sh LABEL [TREE] [run.py arguments...]
# writes $OUT/verdicts-LABEL.tsv (problem, candidate, status, flags) and $OUT/records-LABEL.jsonl.
# RUN_LIMIT (seconds, default 420) bounds the run. The records are read by this script's own checkout
# (harness.core.schema: a tree of an earlier schema version reads as today's), so two trees' tables compare.
set -u
LABEL=${1:?a label for this tree}; TREE=${2:-.}; shift $(( $# < 2 ? $# : 2 ))
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-gpu-verify}
OUT=$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd "$TREE" || exit 2
RUN_ID=seeds-$LABEL-$(date -u +%Y%m%d-%H%M%S)
started=$(date +%s)
timeout 120 python3 benchmarks/prebuild.py solutions/*/*.py --jobs 12 > "$OUT/prebuild-$LABEL.log" 2>&1
timeout "${RUN_LIMIT:-420}" python3 run.py --all --run-id "$RUN_ID" "$@" > "$OUT/run-$LABEL.log" 2>&1
echo "run.py exit code: $? after $(( $(date +%s) - started )) s" | tee -a "$OUT/run-$LABEL.log"
cp "results/$RUN_ID/records.jsonl" "$OUT/records-$LABEL.jsonl"
(cd "$HERE" && python3 - "$OUT/records-$LABEL.jsonl") > "$OUT/verdicts-$LABEL.tsv" <<'PY'
import json, sys
from harness.core.schema import upgrade
rows = [upgrade(json.loads(line)) for line in open(sys.argv[1])]
for r in sorted((r for r in rows if r.get("kind") == "candidate"), key=lambda r: (r["identity"]["problem"], r["identity"]["candidate"])):
    flags = ",".join(f.get("code", "") if isinstance(f, dict) else str(f) for f in r["integrity"].get("flags") or [])
    print("\t".join((r["identity"]["problem"], r["identity"]["candidate"], r["decision"]["status"], flags)))
PY
cat "$OUT/verdicts-$LABEL.tsv"
rm -rf "results/$RUN_ID"
