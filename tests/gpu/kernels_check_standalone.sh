#!/bin/sh
# kernels_check_standalone.sh: builds tests/gpu/cuda_kernels_check without configure (the
# host kernels' few sources, mem/cuda_kernels.cu, the check) into a temporary folder and
# runs it, for a machine with a GPU and nvcc but no weft build (the device machine).
# Usage, from the repository root: tests/gpu/kernels_check_standalone.sh [log file]
set -eu
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA/bin/nvcc}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$NVCC" -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Xcompiler -fPIC,-Wall -I. -Iinclude \
  -c mem/cuda_kernels.cu -o "$dir/cuda_kernels.o"
for f in mem/reduce.c mem/reduce_simd.c mem/half.c mem/reduce_nt.c lib/dtype.c lib/env.c lib/log.c; do
  gcc -std=gnu11 -O2 -I. -Iinclude -c "$f" -o "$dir/$(basename "$f" .c).o"
done
gcc -std=gnu11 -O2 -Wall -I. -Iinclude -I"$CUDA/include" -c tests/gpu/cuda_kernels_check.c -o "$dir/check.o"
gcc -o "$dir/cuda_kernels_check" "$dir"/*.o -L"$CUDA/lib64" -lcudart_static -ldl -lrt -lstdc++ -lm -lpthread
rc=0
if [ $# -gt 0 ]; then
  "$dir/cuda_kernels_check" >"$1" || rc=$?
  cat "$1"
else
  "$dir/cuda_kernels_check" || rc=$?
fi
exit $rc
