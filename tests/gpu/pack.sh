#!/bin/sh
# pack.sh BUILD_DIR OUT.tar.xz: what gpu_check.sh runs, for a GPU machine that has the CUDA
# driver but not weft's build dependencies: the GPU test programs (stripped, in BUILD_DIR's
# layout) and the shared libraries they load that are not the C/C++ runtime's (hwloc and
# what it loads). On that machine: mkdir /tmp/g && tar -xJf OUT.tar.xz -C /tmp/g, then
# LD_LIBRARY_PATH=/tmp/g/lib sh tests/gpu/gpu_check.sh /tmp/g OUT_DIR.
set -eu
b=$1
out=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/tests/gpu" "$d/lib"
for p in cuda_kernels_check test_cuda_collectives cuda_wait_probe; do
  [ -x "$b/tests/gpu/$p" ] || { echo "pack.sh: $b/tests/gpu/$p is not built (./configure found no CUDA?)" >&2; exit 1; }
  strip -o "$d/tests/gpu/$p" "$b/tests/gpu/$p"
done
ldd "$d"/tests/gpu/* | awk '/=>/ {print $3}' | sort -u | while read -r l; do
  case $(basename "$l") in
    libc.so*|libm.so*|libgcc_s.so*|libstdc++.so*|libpthread.so*|libdl.so*|librt.so*) ;;
    *) cp -L "$l" "$d/lib/" ;;
  esac
done
tar -cJf "$out" -C "$d" .
echo "pack.sh: $(du -h "$out" | cut -f1) in $out"
