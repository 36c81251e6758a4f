#!/bin/sh
# nccl_tests.sh BUILD_DIR NCCLTESTS_BIN_DIR OUT_DIR: runs NVIDIA's nccl-tests (built by
# nccl_tests_build.sh) on weft's libnccl.so.2, 2 ranks as the 2 threads of one process
# sharing GPU 0 (-t 2 -g 1; nccl_tests_devmap.so maps thread 1's device 1 onto device 0):
# all_reduce, all_gather, reduce_scatter and sendrecv, 8 B to 64 MiB, results checked (-c 1).
# Each run's output goes to OUT_DIR/<test>.log; its summary lines are printed. Exit status:
# 0 when every run ended in time with 0 wrong values.
# libnccl.so.2 comes from BUILD_DIR/nccl/.libs when there, else from NCCLTESTS_BIN_DIR.
# Environment: NCCL_TESTS_LIBDIR (run on the libnccl.so.2 there instead, e.g. NVIDIA's),
# NCCL_TESTS_TIMEOUT (seconds per run, 180), NCCL_TESTS_ARGS (the arguments,
# "-b 8 -e 64M -f 4 -c 1 -t 2 -g 1"), NCCL_TESTS_MPS=1 (run under an MPS control daemon of
# its own: the ranks' contexts then share the GPU at once instead of taking turns).
set -u
build=$1 bin=$(cd "$2" && pwd) out=$3
mkdir -p "$out"
out=$(cd "$out" && pwd)
lib=$bin
test -f "$build/nccl/.libs/libnccl.so.2" && lib=$(cd "$build/nccl/.libs" && pwd)
[ -n "${NCCL_TESTS_LIBDIR:-}" ] && lib=$NCCL_TESTS_LIBDIR # another libnccl.so.2 (NVIDIA's, side by side)
args=${NCCL_TESTS_ARGS:--b 8 -e 64M -f 4 -c 1 -t 2 -g 1}
limit=${NCCL_TESTS_TIMEOUT:-180}
if [ "${NCCL_TESTS_MPS:-0}" = 1 ]; then
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps-pipe CUDA_MPS_LOG_DIRECTORY=$out/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && echo "# MPS control daemon started"
fi
status=0
echo "# libnccl.so.2 loaded: $(LD_LIBRARY_PATH="$lib:$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$bin/all_reduce_perf" | grep libnccl)"
for t in all_reduce all_gather reduce_scatter sendrecv; do
  log=$out/$t.log
  echo "## ${t}_perf $args (libnccl.so.2 from $lib)"
  # shellcheck disable=SC2086
  LD_LIBRARY_PATH="$lib:$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LD_PRELOAD="$bin/nccl_tests_devmap.so" \
    WEFT_DEVMAP_DEVICES=2 timeout -k 10 "$limit" "$bin/${t}_perf" $args >"$log" 2>&1
  rc=$?
  grep -E "^#  Rank|Out of bounds|Avg bus bandwidth|wrong|Test (FAIL|failure)|failure|error" "$log" | head -20
  awk '$1 ~ /^[0-9]+$/ && $1 >= 1048576' "$log" | head -8 # the rows from 1 MiB: time, algbw, busbw
  [ $rc -eq 124 ] && echo "# $t: TIMEOUT after ${limit}s; last lines:" && tail -5 "$log"
  [ $rc -ne 0 ] && echo "# $t: exit status $rc" && tail -3 "$log"
  grep -q "Out of bounds values : 0 OK" "$log" || rc=1
  [ $rc -ne 0 ] && status=1
  echo "# $t: $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
done
if [ "${NCCL_TESTS_MPS:-0}" = 1 ]; then echo quit | nvidia-cuda-mps-control; fi
exit $status
