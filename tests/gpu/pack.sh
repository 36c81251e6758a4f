#!/bin/sh
# pack.sh BUILD_DIR OUT.tar.xz [NCCLTESTS_BIN_DIR]: what gpu_check.sh runs, for a GPU
# machine that has the CUDA driver but not weft's build dependencies: the GPU test programs
# (stripped, in BUILD_DIR's layout), weftrun and the perf programs (bin/), libweft and
# libnccl.so.2 and the shared libraries they load that
# are not the C/C++ runtime's (hwloc, PMIx and what they load), and, if given, nccl-tests
# as tests/gpu/nccl_tests_build.sh built them. On that machine: mkdir /tmp/g && tar -xJf
# OUT.tar.xz -C /tmp/g, then LD_LIBRARY_PATH=/tmp/g/lib sh tests/gpu/gpu_check.sh /tmp/g OUT_DIR.
set -eu
b=$1
out=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/tests/gpu" "$d/lib"
for p in cuda_kernels_check test_cuda_collectives cuda_wait_probe test_nccl_cuda; do
  f=$b/tests/gpu/$p
  [ -x "$b/tests/gpu/.libs/$p" ] && f=$b/tests/gpu/.libs/$p # libtool's wrapper: the program behind it
  [ -x "$f" ] || { echo "pack.sh: $b/tests/gpu/$p is not built (./configure found no CUDA?)" >&2; exit 1; }
  cp "$f" "$d/tests/gpu/$p" # unstripped: gpu_check.sh's backtraces of a hung part name weft's functions
done
cp -L "$b/nccl/.libs/libnccl.so.2" "$d/lib/"
# weftrun and the perf programs (device buffers by default where a GPU is), with libweft
mkdir -p "$d/bin"
for p in weftrun all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf sendrecv_perf; do
  f=$b/$p
  [ -x "$b/.libs/$p" ] && f=$b/.libs/$p
  strip -o "$d/bin/$p" "$f"
done
cp -L "$b"/.libs/libweft.so.[0-9] "$d/lib/"
if [ $# -gt 2 ]; then
  mkdir -p "$d/nccl-tests"
  cp "$3"/*_perf "$3"/nccl_tests_devmap.so "$3"/libcudart.so.* "$d/nccl-tests/"
  cp -L "$b/nccl/.libs/libnccl.so.2" "$d/nccl-tests/" # beside them: never a system NCCL by mistake
fi
ldd "$d"/tests/gpu/* "$d"/bin/* "$d/lib/libnccl.so.2" 2>/dev/null | awk '/=> \// {print $3}' | sort -u | while read -r l; do
  case $(basename "$l") in
    libc.so*|libm.so*|libgcc_s.so*|libstdc++.so*|libpthread.so*|libdl.so*|librt.so*|libnccl.so*|libweft.so*) ;;
    *) cp -L "$l" "$d/lib/" ;;
  esac
done
tar -cJf "$out" -C "$d" .
echo "pack.sh: $(du -h "$out" | cut -f1) in $out"
