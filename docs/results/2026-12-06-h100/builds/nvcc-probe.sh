#!/usr/bin/env bash
# nvcc alone on one load_inline-style cuda.cu (nvcc-probe.cu beside it), with torch's flags for sm_90 and -time:
#   OUT=DIR bash nvcc-probe.sh   (writes DIR/r/nvcc_time.csv, the phases, and DIR/r/nvcc_run.log, its /usr/bin/time -v)
cd "$(dirname "$0")"
mkdir -p $OUT/r /tmp/nv && cp nvcc-probe.cu /tmp/nv/cuda.cu && cd /tmp/nv
T=$(python3 -c "import torch,os;print(os.path.dirname(torch.__file__))"); PY=$(python3 -c "import sysconfig;print(sysconfig.get_paths()['include'])")
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
$NVCC --version | tail -1 > $OUT/r/nvcc_version.txt
/usr/bin/time -v timeout 120 $NVCC -DTORCH_EXTENSION_NAME=fused_ops -DTORCH_API_INCLUDE_EXTENSION_H -isystem $T/include -isystem $T/include/torch/csrc/api/include -isystem /usr/local/cuda/include -isystem $PY -D_GLIBCXX_USE_CXX11_ABI=1 -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr -gencode=arch=compute_90,code=sm_90 --compiler-options '-fPIC' -std=c++17 -c cuda.cu -o cuda.o -time $OUT/r/nvcc_time.csv > $OUT/r/nvcc_run.log 2>&1
cd / && rm -rf /tmp/nv
