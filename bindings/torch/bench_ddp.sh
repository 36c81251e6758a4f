#!/bin/sh
# bench_ddp.sh PYTHONPATH_DIR TORCH_GPT_PY TEXT: PyTorch DDP tokens/s on the GPT of
# trainers/bench (torch_gpt.py) with backend weft against backend gloo: 2 ranks, each pinned
# to one core with one thread (as make bench-trainers runs PyTorch), launches interleaved
# (weft, weft with DDP's buckets registered by weft_torch.registered_allreduce_hook, gloo,
# ...), BENCH_ROUNDS rounds (3), the median of each.
# A benchmark, not a test. Knobs: BENCH_ROUNDS, BENCH_STEPS (20), BENCH_MODEL_FLAGS.
set -u
pp=$1 gpt=$2 data=$3
py=${TORCH_PYTHON:-/usr/bin/python3}
rounds=${BENCH_ROUNDS:-3}
steps=${BENCH_STEPS:-20}
flags=${BENCH_MODEL_FLAGS:---layers 4 --dmodel 256 --heads 4 --seq 128 --batch 16}
out=$(mktemp -d)
port=29700
run() { # label round; label weftreg: weft with DDP's buckets registered (weft_torch's hook)
  port=$((port + 1))
  backend=$1 extra=
  [ "$1" = weftreg ] && backend=weft extra=--weft-register
  for r in 0 1; do
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 PYTHONPATH=$pp RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port taskset -c $r "$py" "$gpt" --data "$data" $flags \
      --steps "$steps" --warmup 3 --backend "$backend" $extra >"$out/$1.$2.$r" 2>&1 &
  done
  wait
  sed -n 's/.*# torch summary: backend \([a-z]*\) ranks 2 tokens\/s \([0-9.]*\).*/\2/p' "$out/$1.$2.0"
}
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
echo "# DDP tokens/s, 2 ranks, GPT $flags, $steps steps (median step after 3 warm-up), $rounds rounds interleaved"
echo "# $(nproc) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (shared machine: other jobs may run)"
: >"$out/weft.all"; : >"$out/weftreg.all"; : >"$out/gloo.all"
for i in $(seq 1 "$rounds"); do
  for b in weft weftreg gloo; do
    v=$(run $b "$i")
    echo "round $i backend $b tokens/s ${v:-FAILED}"
    [ -n "$v" ] && echo "$v" >>"$out/$b.all"
  done
done
w=$(median <"$out/weft.all"); wr=$(median <"$out/weftreg.all"); g=$(median <"$out/gloo.all")
echo "median tokens/s: weft $w gloo $g ratio weft/gloo $(awk -v w="$w" -v g="$g" 'BEGIN {printf "%.3f", (g > 0) ? w / g : 0}')"
echo "median tokens/s: weft with registered buckets $wr ratio to gloo $(awk -v w="$wr" -v g="$g" 'BEGIN {printf "%.3f", (g > 0) ? w / g : 0}')"
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg); runs' logs in $out"
