#!/bin/sh
# gpu_check.sh BIN_DIR OUT_DIR: the GPU machine's run, in one call. BIN_DIR holds
# tests/gpu/{cuda_kernels_check,test_cuda_collectives} (a build directory). Runs the
# stream-order checks, the small and the large sweeps on 2 ranks sharing the GPU (3 and 4
# with GPU_RANKS), the 2-rank and the 1-rank benchmarks, and (GPU_KERNELS=1) the device
# kernels against the host kernels with the copy and reduction floors. Logs in OUT_DIR; a
# summary on stdout.
set -u
b=$1
out=$2
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
rc=0
t=$b/tests/gpu/test_cuda_collectives
for part in order small large; do
  timeout $([ $part = order ] && echo 40 || echo 60) "$t" --only $part ${GPU_RANKS:-2} >"$out/$part.log" 2>&1 || rc=1
  echo "== $part: $(grep -E '^(not )?ok' "$out/$part.log" | tr '\n' ' ')"
  grep -E '^# rank' "$out/$part.log" | grep -v INFO | tail -8
done
timeout 80 "$t" --bench 2 >"$out/bench.log" 2>&1 || rc=1
echo "== bench (2 ranks, one GPU, float32 sum, out of place; busbw GB/s = 1e9 B/s)"
grep -v 'INFO' "$out/bench.log" | head -60
# 1 rank, up to 128 KiB: weft's own cost per call, without a second process on the GPU
WEFT_GPU_BENCH_MAX_BYTES=131072 timeout 40 "$t" --bench 1 >"$out/bench1.log" 2>&1 || rc=1
echo "== bench, 1 rank (weft's path alone), up to 128 KiB"
grep -v 'INFO' "$out/bench1.log" | head -20
if [ "${GPU_KERNELS:-0}" = 1 ]; then
  timeout 200 "$b/tests/gpu/cuda_kernels_check" >"$out/kernels.log" 2>&1 || rc=1
  echo "== kernels: $(grep -c '^ok' "$out/kernels.log") ok, $(grep -c '^not ok' "$out/kernels.log") not ok"
  grep -E '^not ok|^#' "$out/kernels.log" | head -20
fi
exit $rc
