#!/bin/sh
# nccl_tests_build.sh NCCLTESTS_SRC WEFT_BUILD_DIR OUT_DIR: builds NVIDIA's nccl-tests (an
# unmodified checkout, e.g. `git archive` of NVIDIA/nccl-tests) against weft's nccl.h and
# libnccl.so.2, with make variables only, and puts what tests/gpu/nccl_tests.sh needs in
# OUT_DIR: the stripped all_reduce/all_gather/reduce_scatter/sendrecv _perf binaries,
# libnccl.so.2, the CUDA runtime they link (libcudart.so.13) and the device-mapping shim.
#   - nccl.h is nccl_tests_nccl.h: weft's header at NCCL 2.27's API level, which compiles
#     out nccl-tests' NCCL 2.28 device-API paths (weft has no nccl_device.h);
#   - nvcc links the shared CUDA runtime (-cudart shared), so that nccl_tests_devmap.so
#     (LD_PRELOAD) can map the device ordinals of threads mode onto the one GPU.
# Environment: CUDA_HOME (/usr/local/cuda), NVCC_GENCODE (sm_90), JOBS (2).
set -eu
src=$1 weft=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
gencode=${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}
test -f "$weft/nccl/.libs/libnccl.so.2" || { echo "no $weft/nccl/.libs/libnccl.so.2: build weft first" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
home=$out/nccl-home
rm -rf "$home" && mkdir -p "$home/include" "$home/lib"
cp "$here/../../nccl/nccl.h" "$home/include/weft_nccl.h"
cp "$here/nccl_tests_nccl.h" "$home/include/nccl.h"
cp -L "$weft/nccl/.libs/libnccl.so.2" "$home/lib/libnccl.so.2"
ln -sf libnccl.so.2 "$home/lib/libnccl.so"
bins="all_reduce all_gather reduce_scatter sendrecv"
targets=""
for b in $bins; do targets="$targets $out/build/${b}_perf"; done
make -C "$src/src" -j"${JOBS:-2}" MPI=0 NCCL_HOME="$home" CUDA_HOME="$cuda" NVCC_GENCODE="$gencode" \
  NVCC="$cuda/bin/nvcc -cudart shared" BUILDDIR="$out/build" os.build $targets
for b in $bins; do
  cp "$out/build/${b}_perf" "$out/${b}_perf"
  strip "$out/${b}_perf"
done
cp -L "$weft/nccl/.libs/libnccl.so.2" "$out/libnccl.so.2"
strip --strip-unneeded "$out/libnccl.so.2"
cp -L "$cuda/lib64/libcudart.so.13" "$out/"
${CC:-cc} -shared -fPIC -O2 -Wall -o "$out/nccl_tests_devmap.so" "$here/nccl_tests_devmap.c" -ldl -lpthread
rm -rf "$out/build" "$home"
ls -la "$out"
