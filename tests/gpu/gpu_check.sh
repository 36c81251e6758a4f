#!/bin/sh
# gpu_check.sh BIN_DIR OUT_DIR: the GPU machine's run, in one call. BIN_DIR holds
# tests/gpu/{cuda_kernels_check,test_cuda_collectives,cuda_wait_probe,test_nccl_cuda} (a build
# directory, or what tests/gpu/pack.sh packed). In order, most telling first, each part under a
# timeout (and every rank under its own alarm), logs in OUT_DIR, a summary on stdout:
#   floors    the device's copy and reduction bandwidth (cuda_kernels_check --floors);
#   probe     what CUDA does while a stream waits (cuda_wait_probe);
#   windows   buffers in registered device windows, 2 ranks sharing the GPU, the direct
#             path through CUDA IPC (staged below 4 KiB) in both its forms
#             (WEFT_CUDA_DIRECT=2, then 1): stream order and the benchmark, then the small
#             and the large sweeps and stream order with the test's kernels loaded lazily
#             (WEFT_GPU_TEST_LAZY=1) for the first form that did not hang;
#   mps       for the first form that did not hang, under MPS (the processes' kernels then
#             share the GPU instead of taking turns): stream order, the benchmark, and 3
#             and 4 ranks' small sweeps;
#   staged    the staged path (plain cudaMalloc buffers): stream order and small sweep;
#   perf      weft's all_reduce_perf and all_gather_perf on device buffers, plain and in
#             windows (-R 2);
#   nccl      libnccl.so.2 on device buffers and CUDA streams (tests/gpu/test_nccl_cuda),
#             and nccl-tests -c 1 on it where pack.sh packed them (tests/gpu/nccl_tests.sh),
#             then on NVIDIA's NCCL where the machine has one (the ratio of the two);
# GPU_KERNELS=1 adds the device kernels against the host kernels (~3 min). About 8 minutes
# in all (estimated: not yet run whole). Here, before the call:
#   sh tests/gpu/nccl_tests_build.sh NCCLTESTS_SRC build /tmp/nt-bin   # optional
#   sh tests/gpu/pack.sh build .gpu-carry/gpu.tar.xz /tmp/nt-bin          # .gpu-carry/ git-ignored
# and the call: carry .gpu-carry, timeout 590 s, command
#   mkdir -p /tmp/g && tar -xJf .gpu-carry/gpu.tar.xz -C /tmp/g && set -o pipefail;
#   LD_LIBRARY_PATH=/tmp/g/lib sh tests/gpu/gpu_check.sh /tmp/g $OUT 2>&1 | tee $OUT/summary.txt
set -u
b=$1
out=$2
mkdir -p "$out"
t=$b/tests/gpu/test_cuda_collectives
rc=0
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2

# GPU_CHECK_BUDGET (s, default 560): no part starts once the run has taken this long, so the
# call ends with its logs inside the device tool's limit instead of being killed mid-part
budget=${GPU_CHECK_BUDGET:-560}
# GPU_CHECK_SKIP: glob patterns of parts not to run (a second call skips what the first ran)
over_budget() {
  for pat in ${GPU_CHECK_SKIP:-}; do
    # shellcheck disable=SC2254
    case $1 in $pat) echo "== $1 skipped (GPU_CHECK_SKIP)"; return 0 ;; esac
  done
  [ $(( $(date +%s) - t0 )) -ge "$budget" ] && echo "== $1 skipped: the run is past GPU_CHECK_BUDGET=$budget s"
}

# backtraces PID: cuda-gdb's backtrace of every thread of PID's descendants (a hung part's
# ranks; the test programs are packed unstripped, so weft's functions have names)
descendants() {
  for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done
}
backtraces() {
  command -v cuda-gdb >/dev/null 2>&1 || PATH=$PATH:/usr/local/cuda/bin
  command -v cuda-gdb >/dev/null 2>&1 || { echo "no cuda-gdb"; return 0; }
  for p in $(descendants "$1"); do
    echo "=== pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-100)"
    timeout 20 cuda-gdb -q -batch -p "$p" -ex 'set pagination off' -ex 'thread apply all bt 16' 2>&1 |
      grep -v -E '^\[New |libcudadebugger|^\[Thread debugging|^Using host libthread' | head -150
  done
}

# part NAME TIMEOUT COMMAND...: runs it into $out/NAME.log, prints its TAP lines; one still
# running 25 s before its timeout gets its backtraces taken (NAME.bt)
part() {
  name=$1
  secs=$2
  shift 2
  over_budget "$name" && : >"$out/$name.log" && return 0
  start=$(date +%s)
  timeout "$secs" "$@" >"$out/$name.log" 2>&1 &
  tpid=$!
  waited=0
  while kill -0 "$tpid" 2>/dev/null; do
    sleep 1
    waited=$((waited + 1))
    # still running 25 s before its end (before the test ranks' own alarms): where is it?
    [ $waited -eq $((secs - 25)) ] && backtraces "$tpid" >"$out/$name.bt" 2>&1 &&
      echo "== $name: still running after $waited s; backtraces in $name.bt"
  done
  wait "$tpid" || rc=1
  echo "== $name ($(( $(date +%s) - start )) s): $(grep -E '^(not )?ok' "$out/$name.log" | sed 's/ - .*//' | tr '\n' ' ')"
  grep -E '^# rank|stuck' "$out/$name.log" | grep -v INFO | tail -6
}

part floors 90 "$b/tests/gpu/cuda_kernels_check" --floors
grep -E '^# (floor|reduce)' "$out/floors.log" | head -3
part probe 90 "$b/tests/gpu/cuda_wait_probe"
grep -E '^# (same|two|the copy)' "$out/probe.log"

# The windows parts, once per form of the direct path (WEFT_CUDA_DIRECT, lib/stream_cuda.c):
# 2 queues each rank's kernels on the caller's stream, 1 runs them on weft's thread's
# stream. A form that hangs would only hang again in every part after: they are skipped.
good=""
for mode in 2 1; do
  export WEFT_CUDA_DIRECT=$mode
  part win${mode}_order 45 "$t" --windows --only order 2
  if grep -q 'stuck' "$out/win${mode}_order.log"; then
    echo "== WEFT_CUDA_DIRECT=$mode hung: its other parts are skipped"
    continue
  fi
  part win${mode}_bench 90 "$t" --windows --bench 2
  grep -v INFO "$out/win${mode}_bench.log" | grep -E '^ |^#' | head -30
  if [ -z "$good" ]; then # the sweeps for the first form that runs (the time is short)
    good=$mode
    part win${mode}_small 60 "$t" --windows --only small 2
    part win${mode}_large 60 "$t" --windows --only large 2
    # the test's own kernels left to CUDA's lazy loading, first launched while weft's call
    # waits: whether a program must load its kernels early too (the test does by default)
    export WEFT_GPU_TEST_LAZY=1
    part win${mode}_lazy_order 45 "$t" --windows --only order 2
    unset WEFT_GPU_TEST_LAZY
  fi
done

if [ -n "$good" ] && command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
  export WEFT_CUDA_DIRECT=$good CUDA_MPS_PIPE_DIRECTORY=/tmp/weft-mps CUDA_MPS_LOG_DIRECTORY=/tmp/weft-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    echo "== MPS control daemon started (WEFT_CUDA_DIRECT=$good)"
    part mps_win_order 45 "$t" --windows --only order 2
    part mps_win_bench 90 "$t" --windows --bench 2
    grep -v INFO "$out/mps_win_bench.log" | grep -E '^ |^#' | head -30
    part mps_win_small34 90 "$t" --windows --only small 3 4
    echo quit | nvidia-cuda-mps-control
    sleep 1
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi
unset WEFT_CUDA_DIRECT

part staged_order 45 "$t" --only order 2
part staged_small 60 "$t" --only small 2

# weft's own nccl-tests-style programs, device buffers (their default where a GPU is), 2 ranks
# on the GPU: plain cudaMalloc buffers (staged), then device windows (-R 2, the direct path)
if [ -x "$b/bin/all_reduce_perf" ]; then
  for c in all_reduce all_gather; do
    part perf_$c 90 "$b/bin/weftrun" -n 2 "$b/bin/${c}_perf" -b 8 -e 128M -f 16 -c 1 -n 20 -w 5
    grep -E '^ +[0-9]' "$out/perf_$c.log" | tail -3
    if [ -n "$good" ]; then
      export WEFT_CUDA_DIRECT=$good
      part perf_${c}_R2 90 "$b/bin/weftrun" -n 2 "$b/bin/${c}_perf" -b 8 -e 128M -f 16 -c 1 -n 20 -w 5 -R 2
      grep -E '^ +[0-9]' "$out/perf_${c}_R2.log" | tail -3
      unset WEFT_CUDA_DIRECT
    fi
  done
fi

# libnccl.so.2 on device buffers and CUDA streams: its own test, then NVIDIA's nccl-tests
# where pack.sh packed them (2 ranks as threads of one process: no CUDA IPC between them)
if [ -x "$b/tests/gpu/test_nccl_cuda" ]; then
  part nccl_cuda 150 "$b/tests/gpu/test_nccl_cuda" 2 3
fi
if [ -d "$b/nccl-tests" ] && ! over_budget nccl-tests; then
  here=$(cd "$(dirname "$0")" && pwd)
  NCCL_TESTS_TIMEOUT=${NCCL_TESTS_TIMEOUT:-75} sh "$here/nccl_tests.sh" "$b" "$b/nccl-tests" "$out/nccl-tests" || rc=1
  # The same on NVIDIA's NCCL where the machine's PyTorch (or toolkit) brought one: 2 ranks on one GPU need
  # NCCL_MULTI_RANK_GPU_ENABLE (NCCL 2.30); side by side with the rows above
  nv=$(python3 -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl"); print(list(s.submodule_search_locations)[0] + "/lib")' 2>/dev/null)
  [ -f "$nv/libnccl.so.2" ] || nv=/usr/local/cuda/lib # the toolkit's, where it brings one
  if [ -n "$nv" ] && [ -f "$nv/libnccl.so.2" ] && ! over_budget nccl-tests-nvidia; then
    echo "== NVIDIA's NCCL ($nv), NCCL_MULTI_RANK_GPU_ENABLE=1"
    NCCL_TESTS_LIBDIR=$nv NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_TESTS_TIMEOUT=${NCCL_TESTS_TIMEOUT:-75} \
      sh "$here/nccl_tests.sh" "$b" "$b/nccl-tests" "$out/nccl-tests-nvidia"
  fi
fi

if [ "${GPU_KERNELS:-0}" = 1 ]; then
  part kernels 200 "$b/tests/gpu/cuda_kernels_check"
  echo "== kernels: $(grep -c '^ok' "$out/kernels.log") ok, $(grep -c '^not ok' "$out/kernels.log") not ok"
  grep -E '^not ok' "$out/kernels.log" | head -10
fi
echo "== done in $(( $(date +%s) - t0 )) s, status $rc"
exit $rc
