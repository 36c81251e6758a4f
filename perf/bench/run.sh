#!/usr/bin/env bash
# make bench: measures weft against the speed targets of issue 4 and prints the ratio at each
# size, PASS or MISS per target. Runs from the build dir (make bench does that). Four
# `make compare` sweeps (np=2 over shm, the same for reduce, gather, scatter and sendrecv,
# np=2 all-reduce over TCP, np=4 on 2 cores), each alternating weft / Open MPI / Gloo with
# medians of COMPARE_ROUNDS rounds, plus the two-thread memory-bandwidth floor of each
# collective it has (perf/membw_floor.c). Two more sweeps run weft and Open MPI with weft's
# buffers from weft_mem_alloc, registered as windows (the perf tools' -R 2, as nccl-tests'
# -R with ncclMemAlloc), so its collectives run direct (algos/direct.h): np=2 over shm and 4
# ranks on 2 cores. The sweep shm_more is the one of reduce, gather, scatter (root 0) and
# sendrecv (a ring shift), np=2 over shm (no floor: membw_floor has none of them), and
# np4_more the same with 4 ranks on 2 cores. The
# optional sweep shm_plain_registered runs np=2 with the program's own buffers registered as
# windows (-R 1: weft adopts them, mem/host_adopt.h).
# BENCH_QUICK=1 runs small sizes and one round. BENCH_SWEEPS picks sweeps (default: shm
# shm_more socket np4 np4_more shm_registered np4_registered; the floors always run).
# Takes ~25-60 minutes in full on the 2-core VM (56 on the Zen 4 VM of 2026-11-30). Installs
# its peers first (Open MPI, Gloo: perf/compare/install-peers.sh, root or sudo; BENCH_INSTALL=0
# skips that), and fails when Open MPI did not run in a sweep (report.py).
# BENCH_BASELINE=DIR (another weft build dir, e.g. of the commit before a change) runs that
# build's tools too, alternating with this one's in every sweep (library "base"), and the
# report adds the A/B table: weft/base and both against Open MPI, per sweep and size.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${BENCH_OUT:-$PWD/bench}
mkdir -p "$out"
quick=${BENCH_QUICK:-0}
export COMPARE_ROUNDS=${COMPARE_ROUNDS:-3}
[ "$quick" = 1 ] && export COMPARE_QUICK=1
rc=0
t_start=$SECONDS
sweeps=${BENCH_SWEEPS:-shm shm_more socket np4 np4_more shm_registered np4_registered}
# The peers first, as tools/test.sh installs weft's own dependencies: on a fresh machine with
# Open MPI's mpirun but not its headers, every sweep once ran weft alone, and the report said
# "not measured" for each target against Open MPI and exited 0.
if [ "${BENCH_INSTALL:-1}" = 1 ]; then
  bash "$here/../compare/install-peers.sh" ||
    echo "bench: perf/compare/install-peers.sh failed; the sweeps run with the peers installed"
fi
nsweeps=$(echo $sweeps | wc -w)
isweep=0
# Progress: compare's own lines ("[k/K] round ... about T left", sizes) pass through, each
# prefixed with the bench sweep it belongs to; the full log still goes to NAME.log.
sweep() { # name, then environment assignments
  local name=$1; shift
  isweep=$((isweep + 1))
  echo "bench: sweep $isweep/$nsweeps: $name ($(( (SECONDS - t_start) / 60 )) min elapsed; then the floors)"
  env "$@" COMPARE_OUT="$out/$name" bash "$here/../compare/run.sh" 2>&1 | tee "$out/$name.log" |
    grep --line-buffered -E '^compare: (\[|    )' | sed -u "s/^compare: /bench: $name: /"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "bench: sweep $name failed (see $out/$name.log)"; rc=1; }
}
base=""
if [ -n "${BENCH_BASELINE:-}" ]; then
  export COMPARE_BASELINE=$BENCH_BASELINE
  base="base "
fi
for name in $sweeps; do
  case $name in
    shm) sweep shm COMPARE_NP=2 COMPARE_FLOOR=1 COMPARE_LIBS="${base}weft mpi gloo" ;;
    shm_more) sweep shm_more COMPARE_NP=2 COMPARE_COLLS="reduce gather scatter sendrecv" COMPARE_LIBS="${base}weft mpi gloo" ;;
    np4_more) sweep np4_more COMPARE_NP=4 COMPARE_COLLS="reduce gather scatter sendrecv" COMPARE_LIBS="${base}weft mpi gloo" ;;
    socket) sweep socket COMPARE_NP=2 COMPARE_TRANSPORT=socket COMPARE_COLLS=all_reduce COMPARE_LIBS="${base}weft mpi gloo" ;;
    np4) sweep np4 COMPARE_NP=4 COMPARE_LIBS="${base}weft mpi gloo" ;;
    shm_registered) sweep shm_registered COMPARE_NP=2 COMPARE_FLOOR=1 COMPARE_LIBS="${base}weft mpi" COMPARE_WEFT_FLAGS="-z 2 -R 2" ;;
    np4_registered) sweep np4_registered COMPARE_NP=4 COMPARE_LIBS="${base}weft mpi" COMPARE_WEFT_FLAGS="-z 2 -R 2" ;;
    shm_plain_registered) sweep shm_plain_registered COMPARE_NP=2 COMPARE_FLOOR=1 COMPARE_LIBS="${base}weft mpi" COMPARE_WEFT_FLAGS="-z 2 -R 1" ;;
    *) echo "bench: unknown sweep '$name' in BENCH_SWEEPS"; rc=1 ;;
  esac
done
# One floor per collective, all rows in floor.jsonl (each row names its "coll"); one
# membw_floor at a time, so the floors do not share the memory bus with each other. The np=2
# shm sweeps also run the floors in every round (COMPARE_FLOOR=1), and the report's ceilings
# use those, ratio within a round: this one, minutes after the sweeps, read below both weft
# and Open MPI in the 2026-11-27 bench (all-gather 32 MiB: floor 2835 us per call, weft 1819).
# It stays for sweeps run without per-round floors.
echo "bench: memory-bandwidth floors"
floor_args="-b 16M -e 256M -n 10"
[ "$quick" = 1 ] && floor_args="-b 1M -e 4M -n 5"
: > "$out/floor.jsonl"
for coll in all_reduce all_reduce_fused all_gather reduce_scatter all_to_all broadcast; do
  # shellcheck disable=SC2086 # floor_args is split into options on purpose
  ./membw_floor -c "$coll" $floor_args >> "$out/floor.jsonl" || {
    echo "bench: membw_floor -c $coll failed"; rc=1; }
done
# The "0.8 x floor" target, interleaved: the floors above run minutes apart from weft's
# sweeps, and these VMs' memory bandwidth moves 30% and more between launches, so each
# round runs the fused floor, the two-copy floor (what moving private buffers through shared
# memory costs, perf/floor_fifo.h), weft's all-reduce and weft's all-reduce on registered
# buffers (the program's own, -R 1, and weft_mem_alloc's, -R 2) back to back; the report
# takes the ratio within each round, then the median.
echo "bench: all-reduce against its floor, interleaved"
ab=$out/floor_ab
rm -rf "$ab"
mkdir -p "$ab"
# Each size runs in its own launches with buffers of that size, as the floor does. (Before
# lib/map_colour.h, weft_mem_alloc put 256 MiB blocks exactly 256 MiB apart, which halves
# L1 bandwidth on AMD Zen; that read as a "memfd effect" at 256 MiB in session 5.)
ab_sizes="16M 32M 64M 128M 256M"
[ "$quick" = 1 ] && ab_sizes="1M 4M"
for round in $(seq 1 "$COMPARE_ROUNDS"); do
  echo "bench: floor_ab round $round/$COMPARE_ROUNDS ($(( (SECONDS - t_start) / 60 )) min elapsed)"
  for size in $ab_sizes; do
    echo "bench: floor_ab round $round: $size"
    ./membw_floor -c all_reduce_fused -b "$size" -e "$size" -n 10 >> "$ab/floor.r$round.jsonl" || rc=1
    ./membw_floor -c all_reduce_plain -b "$size" -e "$size" -n 10 >> "$ab/plain.r$round.jsonl" || rc=1
    for reg in 0 1 2; do
      ./weftrun -n 2 --bind-to core ./all_reduce_perf -b "$size" -e "$size" -n 10 -w 3 -z 2 \
        -R $reg -J "$ab/weft_R$reg.r$round.$size.json" >> "$ab/weft_R$reg.r$round.txt" 2>&1 || rc=1
    done
  done
done
py=python3
"$py" -c 'import json' 2>/dev/null || py=/usr/bin/python3
"$py" "$here/report.py" "$out" || rc=1
exit $rc
