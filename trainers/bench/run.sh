#!/bin/sh
# trainers/bench/run.sh: `make bench-trainers`, weft-train-ddp against PyTorch DDP (Gloo) on
# the same model, data and batch (weft issue 6), then report.py's table and targets.
#
#   trainers/bench/run.sh WEFTRUN WEFT_TRAIN_DDP [DATA]
#
# Two models (small: 4 layers, d 256, 4 heads, T 128, batch 16 per rank; large: 6 layers,
# d 384, 6 heads, T 256, batch 8 per rank, the same 2048 tokens per rank and step), each on
# 1 and 2 ranks, weft and torch interleaved, BENCH_ROUNDS rounds; report.py takes medians.
# Each run's tokens/s is its median step after the warm-up steps. The per-rank peak is
# measured first (weft-train-ddp's start-up FMA loop, on 1 and on 2 ranks at once; the
# highest wins) and passed to every run with --peak-gflops, so every MFU divides by it.
# Both sides choose OpenBLAS's kernels by one rule (trainers/blas_core.h; torch_gpt.py does
# the same): the AVX-512 (SkylakeX) kernels when OpenBLAS falls back to AVX2 ones on a CPU
# that has AVX-512, the AVX2 (Haswell) ones when it picks AVX-512 kernels on AMD's Zen 4
# (which runs AVX-512 in 256-bit halves: the AVX2 kernels are faster there). Each log names
# the core its side ran and report.py checks they agree.
# The targets are about the best kernels the CPU runs, so an OPENBLAS_CORETYPE in the
# environment (some machines' profiles set Haswell) is set aside for the runs, with a line
# saying so; BENCH_KEEP_CORETYPE=1 keeps it, putting both sides on that core instead.
# Each round also runs weft's multi-rank steps again with --sync-only (one value all-reduced
# per bucket, no gradient bytes): the scaling ceiling of synchronous data parallelism on this
# host that round (skew between the ranks, shared caches and memory), which report.py prints
# beside the scaling target.
#
# Knobs: BENCH_ROUNDS (3), BENCH_MODELS ("small large"), BENCH_RANKS ("1 2"),
# BENCH_OUT (trainers-bench: the logs, one per run), BENCH_QUICK=1 (one round, fewer steps), PYTHON
# (/usr/bin/python3: Debian's python3-torch lives there, not in a pyenv first on PATH),
# BENCH_PEAK_GFLOPS (skip the measurement), BENCH_BIND (core: each rank of both libraries
# pinned to one core, weft by `weftrun --bind-to core`, torch by taskset, as mpirun places <= 2
# ranks; none: unpinned), BENCH_CEILING (1: the --sync-only runs above; 0: none). Without
# torch it says how to install it (trainers/bench/install-torch.sh) and measures weft alone.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
weftrun=${1:?usage: run.sh WEFTRUN WEFT_TRAIN_DDP [DATA]}
ddp=${2:?usage: run.sh WEFTRUN WEFT_TRAIN_DDP [DATA]}
data=${3:-$here/../../../shared/data/tinyshakespeare.txt}
PYTHON=${PYTHON:-/usr/bin/python3}
rounds=${BENCH_ROUNDS:-3}
models=${BENCH_MODELS:-small large}
ranks_list=${BENCH_RANKS:-1 2}
out=${BENCH_OUT:-trainers-bench}
small_steps=20 small_warm=5 large_steps=10 large_warm=3
if [ "${BENCH_QUICK:-0}" = 1 ]; then
  rounds=1 small_steps=10 small_warm=3 large_steps=6 large_warm=2
fi

if [ ! -r "$data" ]; then
  echo "bench-trainers: no training text at $data (give it as the third argument)" >&2
  exit 1
fi
mkdir -p "$out"
rm -f "$out"/*.log "$out"/peak-r*.txt

have_torch=1
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  have_torch=0
  echo "bench-trainers: $PYTHON cannot import torch: measuring weft alone."
  echo "  Install the peer with: sudo $here/install-torch.sh   (python3-torch + libopenblas0-pthread)"
fi

# Model flags and step counts per model name.
model_flags() {
  case $1 in
    small) echo "--layers 4 --dmodel 256 --heads 4 --seq 128 --batch 16" ;;
    large) echo "--layers 6 --dmodel 384 --heads 6 --seq 256 --batch 8" ;;
    *) echo "bench-trainers: unknown model $1 (small or large)" >&2; exit 1 ;;
  esac
}
steps_of() { if [ "$1" = small ]; then echo "$small_steps $small_warm"; else echo "$large_steps $large_warm"; fi; }

bind=${BENCH_BIND:-core}
ncpu=$(nproc)
weft_bind=
case $bind in
  core) weft_bind="--bind-to core" ;;
  none) ;;
  *) echo "bench-trainers: BENCH_BIND is core or none, not '$bind'" >&2; exit 1 ;;
esac
torch_pin=$bind
if [ "$bind" = core ] && ! command -v taskset >/dev/null 2>&1; then
  echo "bench-trainers: no taskset (util-linux): torch ranks run unpinned"
  torch_pin=none
fi

# One thread per rank everywhere: OpenBLAS, OpenMP (torch's intra-op pool), MKL.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# A profile's OPENBLAS_CORETYPE=Haswell on a CPU with full-width AVX-512 halved the trainers'
# MFU (AMD EPYC VM, 2026-11-27: 41.8-44.3% against 69.6-73.2% with the kernels
# OpenBLAS and weft choose).
if [ -n "${OPENBLAS_CORETYPE+set}" ]; then
  if [ "${BENCH_KEEP_CORETYPE:-0}" = 1 ]; then
    echo "bench-trainers: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE in the environment: both sides run that core (BENCH_KEEP_CORETYPE=1)"
  else
    echo "bench-trainers: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE in the environment is set aside: both sides choose their kernels by weft's rule (BENCH_KEEP_CORETYPE=1 keeps it)"
    unset OPENBLAS_CORETYPE
  fi
fi

# Measured once per rank count: weft-train-ddp --steps 0 prints the start-up peak and exits.
measure_peak() {
  if [ -n "${BENCH_PEAK_GFLOPS:-}" ]; then echo "$BENCH_PEAK_GFLOPS"; return; fi
  "$weftrun" -n "$1" "$ddp" --data "$data" --steps 0 --eval-batches 0 --log none --plot none \
    | tee "$out/peak-r$1.txt" | sed -n 's/^# peak per rank: FMA loop \([0-9.]*\) GFLOP.*/\1/p' | head -n 1
}

run_weft() { # model ranks round peak [sync: --sync-only, logged as impl sync]
  impl=${5:-weft}
  only=
  [ "$impl" = sync ] && only=--sync-only
  set -- "$1" "$2" "$3" "$4" $(steps_of "$1")
  log="$out/$1-r$2-$impl-$3.log"
  echo "# bench: impl $impl model $1 ranks $2 round $3 warmup $6 peak $4 bind $bind" >"$log"
  "$weftrun" -n "$2" $weft_bind "$ddp" --data "$data" $(model_flags "$1") --steps "$5" --eval-batches 0 \
    --log none --plot none --peak-gflops "$4" $only >>"$log" 2>&1 || echo "# bench: FAILED (exit $?)" >>"$log"
}

# Ranks by hand with torchrun's environment (Debian 12's torchrun fails on Python 3.11).
run_torch() { # model ranks round peak
  set -- "$1" "$2" "$3" "$4" $(steps_of "$1")
  log="$out/$1-r$2-torch-$3.log"
  echo "# bench: impl torch model $1 ranks $2 round $3 warmup $6 peak $4 bind $bind" >"$log"
  port=$((20000 + $$ % 10000 + $3 * 17 + $2))
  pids=
  r=$(($2 - 1))
  while [ "$r" -ge 0 ]; do
    dest=/dev/null
    [ "$r" = 0 ] && dest=$log.rank0
    pin=
    [ "$torch_pin" = core ] && pin="taskset -c $((r % ncpu))"
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      $pin "$PYTHON" "$here/torch_gpt.py" --data "$data" $(model_flags "$1") --steps "$5" --warmup "$6" \
      --peak-gflops "$4" >"$dest" 2>&1 &
    pids="$pids $!"
    r=$((r - 1))
  done
  status=0
  for p in $pids; do wait "$p" || status=$?; done
  cat "$log.rank0" >>"$log" && rm -f "$log.rank0"
  [ "$status" = 0 ] || echo "# bench: FAILED (exit $status)" >>"$log"
}

# The per-core peak is a property of the core; on a busy machine a measurement can only come
# out low (the FMA loop keeps its best of 10 tries), so the highest one is used everywhere.
peak=0
for R in $ranks_list; do
  p=$(measure_peak "$R")
  if [ -z "$p" ]; then
    echo "bench-trainers: could not measure the peak with $ddp on $R ranks" >&2
    exit 1
  fi
  echo "bench-trainers: peak per rank measured on $R rank(s): $p GFLOP/s (FMA loop)"
  peak=$(echo "$peak $p" | awk '{print ($2 > $1) ? $2 : $1}')
done
echo "$peak" >"$out/peak"
echo "bench-trainers: MFU of every run divides by $peak GFLOP/s per rank"
# What the start-up line says of the kernels: "sgemm 512^3 S GFLOP/s ... on OpenBLAS V core C (why)".
for f in "$out"/peak-r*.txt; do
  [ -r "$f" ] && sed -n 's/^# peak per rank: .*, \(sgemm 512^3 .*\)/bench-trainers: weft: \1/p' "$f" | head -n 1
done

for round in $(seq 1 "$rounds"); do
  for model in $models; do
    for R in $ranks_list; do
      # Alternate who goes first, so neither always runs right after the other's load.
      if [ $((round % 2)) = 1 ] || [ "$have_torch" = 0 ]; then
        run_weft "$model" "$R" "$round" "$peak"
        [ "$have_torch" = 1 ] && run_torch "$model" "$R" "$round" "$peak"
      else
        run_torch "$model" "$R" "$round" "$peak"
        run_weft "$model" "$R" "$round" "$peak"
      fi
      if [ "$R" -gt 1 ] && [ "${BENCH_CEILING:-1}" = 1 ]; then
        run_weft "$model" "$R" "$round" "$peak" sync
      fi
      echo "bench-trainers: round $round/$rounds $model on $R rank(s) done"
    done
  done
done

"$PYTHON" "$here/report.py" "$out"
