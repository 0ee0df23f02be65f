#!/usr/bin/env bash
# The boundary around candidate code on a GPU machine, in two parts of under 10 minutes each:
#   OUT=DIR bash benchmarks/boundary_gpu.sh probe   # tamper probe per layer (device cuda), its costs, the GPU tests
#   OUT=DIR bash benchmarks/boundary_gpu.sh same    # corpus kernels with the boundary off and on: the same statuses?
# `same` needs the corpora at .kbcorpus/ and .kbcorpus2/ (copies of ../shared/kbcorpus and kbcorpus2; carry them).
# Writes $OUT/log.txt and, per part, boundary.md or same.md. Builds and scratch go to a folder removed at the end.
set -o pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=$(realpath -m "${OUT:?set OUT}")
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/boundary-gpu.XXXXXX")
trap 'rm -rf "$WORK"; pkill -9 -f "[s]leep 4242.5"' EXIT
export PYTHONUNBUFFERED=1

probe() {
  uname -r
  timeout 60 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  timeout 330 python3 benchmarks/boundary.py --device cuda --honest 3 --out "$OUT"
  echo "boundary.py exit $?"
  timeout 240 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_gpu_integrity.py
  echo "GPU tests exit $?"
}

same() {
  # Triton and CUDA kernels of both corpora, memcheck on (the sanitizer's child enters the layer too)
  for layer in off auto; do
    timeout 250 python3 benchmarks/kbcorpus.py --corpus .kbcorpus2 --problems l2_p12 l2_p22 l1_p26 l2_p54 --profiles loop \
      --out "$WORK/$layer-2" --state "$OUT/state2-$layer.jsonl" --report "$WORK/r.md" --budget-s 220 \
      --set "build_cache_dir=$WORK/builds" --set "sandbox.layer=$layer"
    echo "kbcorpus2 $layer exit $?"
  done
  python3 - "$OUT" <<'EOF' | tee "$OUT/same.md"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def statuses(name):
    path = out / name
    return {json.loads(l)["kernel"]: json.loads(l)["status"] for l in path.read_text().splitlines()} if path.exists() else {}
off, on = statuses("state2-off.jsonl"), statuses("state2-auto.jsonl")
print("| kernel | boundary off | boundary on (auto) | same |\n|---|---|---|---|")
for kernel in sorted(set(off) | set(on)):
    print(f"| {kernel} | {off.get(kernel, '-')} | {on.get(kernel, '-')} | {'yes' if off.get(kernel) == on.get(kernel) else 'NO'} |")
EOF
}

case "${1:-}" in
  probe) probe 2>&1 | tee "$OUT/log.txt" ;;
  same) same 2>&1 | tee "$OUT/log.txt" ;;
  *) echo "usage: OUT=DIR bash benchmarks/boundary_gpu.sh probe|same"; exit 2 ;;
esac
