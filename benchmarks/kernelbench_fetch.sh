#!/usr/bin/env bash
# KernelBench's own eval (github.com/ScalingIntelligence/KernelBench, MIT licence), for benchmarks/kernelbench_eval.py:
#   [KERNELBENCH_GIT=GIT_DIR_OR_URL] [COMMIT=REV] bash benchmarks/kernelbench_fetch.sh
# Copies, unchanged, the modules eval_kernel_against_ref needs at COMMIT (default 423217d, the commit of the earlier
# measurements) into benchmarks/kernelbench/eval_src/kernelbench/, with its LICENSE and a COMMIT file (the full hash and
# where it came from). That folder is git-ignored (/benchmarks/kernelbench/): a third-party tool run for comparison, not
# part of the tracked tree; carry benchmarks/kernelbench to a machine without network.
# KERNELBENCH_GIT: a git directory or checkout that has the commit (e.g. a bare mirror), else the URL cloned (bare,
# into a temporary folder). The modules: the package's __init__ (imports utils), eval (eval_kernel_against_ref,
# build_compile_cache), and what eval imports: timing (cuda-event timing, get_timing_stats), dataset, utils
# (get_gpu_vendor, set_gpu_arch). Their third-party imports besides torch and numpy (pydantic, requests, dotenv, tqdm,
# openai, litellm) are replaced by stand-ins at run time where missing (kernelbench_eval.py: stand_ins).
# How the copy in this checkout was made (2026-11-28): KERNELBENCH_GIT=/work/.mirror/ScalingIntelligence+KernelBench/repo
# (a snapshot of the public repository whose head is 423217d9fda91e0c2d67e4a43bf62f96f6d104f1).
set -euo pipefail
SOURCE=${KERNELBENCH_GIT:-https://github.com/ScalingIntelligence/KernelBench}
COMMIT=${COMMIT:-423217d}
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=${DEST:-$HERE/kernelbench/eval_src}
MODULES="__init__ eval timing dataset utils"

if [ -d "$SOURCE" ]; then
  GIT=(git --git-dir "$(git -C "$SOURCE" rev-parse --absolute-git-dir)")
else
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  git clone --quiet --bare "$SOURCE" "$TMP/kb.git"
  GIT=(git --git-dir "$TMP/kb.git")
fi
FULL=$("${GIT[@]}" rev-parse --verify "$COMMIT^{commit}")
if ! "${GIT[@]}" cat-file -e "$FULL:src/kernelbench/eval.py" 2>/dev/null; then
  echo "error: $FULL has no src/kernelbench/eval.py (an older layout, src/eval.py, is not supported)" >&2
  exit 1
fi
rm -rf "$DEST/kernelbench"
mkdir -p "$DEST/kernelbench"
for module in $MODULES; do
  "${GIT[@]}" show "$FULL:src/kernelbench/$module.py" > "$DEST/kernelbench/$module.py"
done
"${GIT[@]}" show "$FULL:LICENSE" > "$DEST/LICENSE"
printf '%s\n%s\n%s\n' "$FULL" "ScalingIntelligence/KernelBench ($SOURCE)" "src/kernelbench/{${MODULES// /,}}.py" > "$DEST/COMMIT"
echo "KernelBench $FULL: $(for m in $MODULES; do printf '%s.py ' "$m"; done)-> $DEST/kernelbench/"
