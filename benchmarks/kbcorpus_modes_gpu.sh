#!/usr/bin/env bash
# One part of the corpus (benchmarks/kbcorpus.py) under the default profile and under timing.mode graph and eager,
# the three runs side by side on one GPU (statuses are what they compare; speedups from runs that shared the GPU
# are not published), with the loop profile's timing, compile baselines and the null candidate off. The three see the
# same inputs and weights (check.seed, CHECK_SEED to change it): a kernel whose defect shows on some draws only would
# otherwise read differently in two modes by its draws, not by its timing:
#   PART=K/N [NULLS="problem files"] OUT=DIR bash benchmarks/kbcorpus_modes_gpu.sh [kbcorpus.py arguments, e.g. --retry "no record"]
# State per profile in .cache/kb/<profile>.jsonl (carry .cache/kb and .kbcorpus); $OUT gets states.jsonl (all three),
# logs.tgz, and, with NULLS, the null floors of those problems (benchmarks/fairness.py) measured alone first.
set -o pipefail; export PYTHONUNBUFFERED=1
. "$(dirname "$0")/stoppable.sh"
mkdir -p .cache/kb "$OUT"
if [ -n "${NULLS:-}" ]; then
  timeout 150 python3 benchmarks/fairness.py --repeats 1 --variants 0 --set 'baselines.compile_modes=[]' --set sanitizer.enabled=off --out "$OUT/fair" $NULLS 2>&1 | tee "$OUT/fair.txt"
fi
C="--fraction ${FRACTION:-0.5} --seed ${SEED:-1} --set check.seed=${CHECK_SEED:-20261128} --set baselines.compile_modes=[] --set timing.null_candidate=off --set timing.budget_s=1.5 --set timing.rounds=3 --set timing.max_rounds=6 --set timing.warmup_ms=10"
trap 'stopped=1' INT TERM  # stopped: each profile's run keeps what it finished, and the states are still gathered
for p in default graph eager; do
  OUT=$OUT/$p BUDGET=${BUDGET:-300} bash benchmarks/kbcorpus_gpu.sh ".cache/kb/$p.jsonl" "$PART" --profiles $p $C "$@" > /dev/null 2>&1 &
done
wait_all  # the runs still finish keeping what they have
cat "$OUT"/default/state.jsonl "$OUT"/graph/state.jsonl "$OUT"/eager/state.jsonl > "$OUT/states.jsonl" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$OUT" default graph eager 2>/dev/null
rm -rf "$OUT/default" "$OUT/graph" "$OUT/eager"
wc -l "$OUT/states.jsonl"
