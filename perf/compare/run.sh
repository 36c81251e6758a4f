#!/bin/bash
# run.sh: `make compare`: the same sweep through weft, Open MPI and Gloo, in one run.
#
# Why: a number for weft alone says little on a shared 2-core box; the same ranks, sizes,
# dtype (float32, sum), iteration counts and result checks run through the peers right
# after it, alternating (weft, MPI, Gloo, then again for each round, the order turned by
# one each round so that no library always runs first), so that a noisy minute hits every
# library alike. Medians over rounds go into compare.md (busbw and
# latency per size, weft/peer ratios) and compare.png (busbw against size, one panel per
# collective, one line per library), written by report.py.
#
# Run from a build dir (`make compare` does): weft's perf tools and weftrun are there.
# Peers: perf/compare/mpi_bench.c (built with mpicc, run with mpirun) and
# perf/compare/gloo_bench.cc (built with g++ -lgloo, started by weftrun, TCP on
# loopback). A peer that is not installed is skipped with a message, never a failure;
# perf/compare/install-peers.sh installs them (or WEFT_COMPARE_INSTALL=1 here).
#
# Environment (defaults in brackets):
#   COMPARE_NP [2]            ranks
#   COMPARE_MINBYTES [8], COMPARE_MAXBYTES [256M], COMPARE_FACTOR [2]
#   COMPARE_ROUNDS [3]        alternating rounds; medians per size
#   COMPARE_ITERS [20], COMPARE_WARMUP [5]
#   COMPARE_SMALL_MAX [64K], COMPARE_SMALL_ITERS [500]: sizes up to COMPARE_SMALL_MAX run
#                             COMPARE_SMALL_ITERS timed calls (as OSU's benchmarks run 1000
#                             below 8 KiB): with 20, one ~30 us futex wake-up among them moves
#                             a 0.3 us mean by 1.5 us, and a median of 3 such means is noise
#   COMPARE_SMALL_WARMUP [200] warm-up calls at those sizes (OSU's benchmarks skip 200 below
#                             8 KiB): Open MPI's ranks, 4 bound to 2 cores, ran their first
#                             size's 500 calls at 80-140 us each after 5 warm-ups (an
#                             all-to-all of 16 B; 13 us from the second size on, and after 200)
#   COMPARE_COLLS             [all_reduce all_gather reduce_scatter all_to_all broadcast];
#                             reduce, gather, scatter (root 0) and sendrecv (a ring shift)
#                             run too when named (weft's reduce_perf ... sendrecv_perf)
#   COMPARE_LIBS              [weft mpi gloo]; with COMPARE_BASELINE, add "base"
#   COMPARE_BASELINE=DIR      another weft build dir (e.g. the commit before a change): library
#                             "base" runs its perf tools and weftrun, alternating with this
#                             build's on the same launch pattern, so a change's A/B is one run
#                             (compare.md then gives weft/base beside weft/MPI)
#   COMPARE_TRANSPORT [auto]  auto: weft picks (shm), Open MPI default BTLs (vader shm);
#                             socket: WEFT_TRANSPORT=socket, mpirun --mca btl tcp,self.
#                             Gloo is always TCP.
#   COMPARE_QUICK=1           sizes up to 4M, 1 round, 10 iters, 2 warm-ups
#   COMPARE_WEFT_FLAGS [-z 2] extra flags for weft's perf tools (-z 2: blocking calls
#                             without a barrier between them, as MPI and Gloo make them)
#   COMPARE_TIMEOUT [1800]    seconds one library's sweep may take
#   COMPARE_FLOOR=1           np=2 over shm: each round also runs perf/membw_floor for each
#                             collective at its sizes from 16 MiB (all-reduce: both forms),
#                             right after the libraries, into raw/COLL.floor.rK.jsonl, so that
#                             make bench takes floor / MPI within a round (these VMs' memory
#                             bandwidth moves 2x between minutes; a floor measured once, after
#                             the sweeps, read below both weft and Open MPI)
#   COMPARE_OUT [./compare]   where compare.md, compare.png and raw/ go
#   COMPARE_GLOO_PREFIX [/usr] where Gloo's include/ and lib/ are
#   WEFT_COMPARE_INSTALL=1    run install-peers.sh first
# Exit status: 0, or 1 when weft failed to run or returned wrong results (a peer's wrong
# results are reported, and shown WRONG in compare.md, but do not fail the run).
# shellcheck disable=SC2317 # run_weft/run_mpi/run_gloo are called as "run_$lib"
# make runs this with $(SHELL), which may be dash: go on in bash.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -u

SRC=$(cd "$(dirname "$0")" && pwd)
BUILD=$(pwd)
log() { echo "compare: $*"; }

if [ "${COMPARE_QUICK:-0}" = 1 ]; then
  : "${COMPARE_MAXBYTES:=4M}" "${COMPARE_ROUNDS:=1}" "${COMPARE_ITERS:=10}" "${COMPARE_WARMUP:=2}"
  : "${COMPARE_SMALL_WARMUP:=20}"
fi
NP=${COMPARE_NP:-2}
MINB=${COMPARE_MINBYTES:-8}
MAXB=${COMPARE_MAXBYTES:-256M}
FACTOR=${COMPARE_FACTOR:-2}
ROUNDS=${COMPARE_ROUNDS:-3}
ITERS=${COMPARE_ITERS:-20}
WARMUP=${COMPARE_WARMUP:-5}
COLLS=${COMPARE_COLLS:-all_reduce all_gather reduce_scatter all_to_all broadcast}
LIBS=${COMPARE_LIBS:-weft mpi gloo}
TRANSPORT=${COMPARE_TRANSPORT:-auto}
WEFT_FLAGS=${COMPARE_WEFT_FLAGS:--z 2}
TIMEOUT=${COMPARE_TIMEOUT:-1800}
OUT=${COMPARE_OUT:-$BUILD/compare}
GLOO_PREFIX=${COMPARE_GLOO_PREFIX:-/usr}
RAW=$OUT/raw
SMALL_MAX=${COMPARE_SMALL_MAX:-64K}
SMALL_ITERS=${COMPARE_SMALL_ITERS:-500}
SMALL_WARMUP=${COMPARE_SMALL_WARMUP:-200}

# 64K -> 65536 (K, M, G suffixes, as the perf tools read them).
to_bytes() {
  case $1 in
    *[kK]) echo $((${1%?} * 1024)) ;;
    *[mM]) echo $((${1%?} * 1024 * 1024)) ;;
    *[gG]) echo $((${1%?} * 1024 * 1024 * 1024)) ;;
    *) echo "$1" ;;
  esac
}
# The sweep's sizes in two ranges, each "min max iters warmup": small sizes get more calls.
RANGES=()
lo=$(to_bytes "$MINB"); hi=$(to_bytes "$MAXB"); split=$(to_bytes "$SMALL_MAX")
s=$lo
while [ "$s" -le "$split" ] && [ "$s" -le "$hi" ]; do last_small=$s; s=$((s * FACTOR)); done
if [ -n "${last_small:-}" ]; then RANGES+=("$lo $last_small $SMALL_ITERS $SMALL_WARMUP"); fi
if [ "$s" -le "$hi" ]; then RANGES+=("$s $hi $ITERS $WARMUP"); fi
SWEEP=()

# shellcheck disable=SC2054 # tcp,self is one mpirun argument
case $TRANSPORT in
  auto | shm) MPI_MCA=(); WEFT_T=auto ;;
  socket | tcp) MPI_MCA=(--mca btl tcp,self --mca btl_tcp_if_include lo); WEFT_T=socket ;;
  *) log "COMPARE_TRANSPORT=$TRANSPORT: expected auto or socket"; exit 2 ;;
esac

if [ ! -x "$BUILD/weftrun" ]; then
  log "run me from a weft build dir (no ./weftrun in $BUILD); 'make compare' does"
  exit 2
fi
[ "${WEFT_COMPARE_INSTALL:-0}" = 1 ] && bash "$SRC/install-peers.sh"

rm -rf "$RAW"
mkdir -p "$RAW" "$OUT/bin"
: >"$RAW/skipped.txt"
: >"$RAW/failed.txt"
skip() { log "skipping $1: $2"; echo "$1: $2" >>"$RAW/skipped.txt"; }

# ---- build the peers' harnesses (only when their sources are newer) ----

have_lib() { case " $LIBS " in *" $1 "*) return 0 ;; esac; return 1; }

build_mpi() {
  if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    skip "Open MPI" "mpicc not found (run perf/compare/install-peers.sh)"
    return 1
  fi
  local bin=$OUT/bin/mpi_bench
  [ "$bin" -nt "$SRC/mpi_bench.c" ] && [ "$bin" -nt "$SRC/bench_common.h" ] && return 0
  mpicc -std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -o "$bin" "$SRC/mpi_bench.c" \
    2>"$RAW/mpi_build.log" && return 0
  skip "Open MPI" "mpi_bench did not build (see $RAW/mpi_build.log)"
  return 1
}

build_gloo() {
  if [ ! -f "$GLOO_PREFIX/include/gloo/allreduce.h" ]; then
    skip "Gloo" "$GLOO_PREFIX/include/gloo not found (run perf/compare/install-peers.sh)"
    return 1
  fi
  if ! command -v g++ >/dev/null; then
    skip "Gloo" "g++ not found (run perf/compare/install-peers.sh)"
    return 1
  fi
  local bin=$OUT/bin/gloo_bench
  [ "$bin" -nt "$SRC/gloo_bench.cc" ] && [ "$bin" -nt "$SRC/bench_common.h" ] && return 0
  g++ -std=c++17 -O2 -Wall -Wextra -Wno-unused-parameter -I"$GLOO_PREFIX/include" \
    -o "$bin" "$SRC/gloo_bench.cc" -L"$GLOO_PREFIX/lib" -lgloo -pthread \
    2>"$RAW/gloo_build.log" && return 0
  skip "Gloo" "gloo_bench did not build (see $RAW/gloo_build.log)"
  return 1
}

ACTIVE=""
for lib in $LIBS; do
  case $lib in
    weft) ACTIVE="$ACTIVE weft" ;;
    base)
      if [ -x "${COMPARE_BASELINE:-}/weftrun" ]; then ACTIVE="$ACTIVE base"
      else log "COMPARE_LIBS has base but COMPARE_BASELINE='${COMPARE_BASELINE:-}' is no weft build dir"; exit 2; fi ;;
    mpi) build_mpi && ACTIVE="$ACTIVE mpi" ;;
    gloo) build_gloo && ACTIVE="$ACTIVE gloo" ;;
    *) log "unknown library '$lib' in COMPARE_LIBS (weft, base, mpi, gloo)"; exit 2 ;;
  esac
done

# ---- weft's perf tools: which exist (placeholders exit 77 on -h) ----

weft_tool() {
  case $1 in
    all_to_all) echo alltoall_perf ;;
    *) echo "$1_perf" ;;
  esac
}

WEFT_COLLS=""
for coll in $COLLS; do
  tool=$BUILD/$(weft_tool "$coll")
  if have_lib weft && ! { [ -x "$tool" ] && "$tool" -h >/dev/null 2>&1; }; then
    skip "weft $coll" "$(basename "$tool") is not built yet"
  else
    WEFT_COLLS="$WEFT_COLLS $coll"
  fi
done

# ---- one sweep of one library; its output goes to raw/COLL.LIB.rROUND.* ----

STATUS=0
# Open MPI's mpirun binds each rank to a core by default when there are at most 2 ranks
# (to a package above that); weft's ranks get the same placement through weftrun, so the
# comparison is like for like. With more ranks than CPUs weftrun binds them round-robin
# (tools/weftrun_bind.c: the scheduler left 3 of 4 on one of 2 CPUs for seconds), and Open
# MPI's ranks get the same (--map-by core:OVERSUBSCRIBE --bind-to core:overload-allowed:
# rank r on core r mod n). COMPARE_BIND=none turns it off.
BIND="--bind-to none"
ROUND_ROBIN=0
if [ "${COMPARE_BIND:-auto}" != none ]; then
  if [ "$NP" -le 2 ]; then BIND="--bind-to core"
  elif [ "$NP" -gt "$(nproc)" ]; then BIND="--bind-to core"; ROUND_ROBIN=1
  fi
fi
# weft's tool for COLL from build dir DIR; the baseline ("base") runs the same from its own.
run_weft_from() {
  local dir=$1 coll=$2 base=$3 tool
  tool=$dir/$(weft_tool "$coll")
  case " $WEFT_COLLS " in *" $coll "*) ;; *) return 0 ;; esac
  local json=()
  # one nccl-tests JSON document per size range, named by its first size
  "$tool" -h 2>&1 | grep -q -- '-J' && json=(-J "$base.${SWEEP[1]}.json")
  # shellcheck disable=SC2086 # WEFT_FLAGS is a list of flags
  WEFT_TRANSPORT=$WEFT_T timeout "$TIMEOUT" "$dir/weftrun" -n "$NP" $BIND "$tool" "${SWEEP[@]}" \
    -d float -o sum -c 1 $WEFT_FLAGS "${json[@]}" >>"$base.txt" 2>>"$base.err"
}
run_weft() { run_weft_from "$BUILD" "$@"; }
run_base() { run_weft_from "$COMPARE_BASELINE" "$@"; }

# The same placement as weft's ranks: bound to a core each when BIND is set, else unbound.
MPI_BIND=(--bind-to none)
[ "$BIND" = "--bind-to core" ] && MPI_BIND=(--bind-to core)
[ "$ROUND_ROBIN" = 1 ] && MPI_BIND=(--map-by core:OVERSUBSCRIBE --bind-to core:overload-allowed)
run_mpi() {
  timeout "$TIMEOUT" mpirun --allow-run-as-root --oversubscribe "${MPI_BIND[@]}" -np "$NP" \
    "${MPI_MCA[@]}" "$OUT/bin/mpi_bench" "$1" "${SWEEP[@]}" -t "$TRANSPORT" \
    >>"$2.jsonl" 2>>"$2.err"
}

run_gloo() {
  local store rc
  store=$(mktemp -d "${TMPDIR:-/tmp}/weft-compare-gloo.XXXXXX")
  # shellcheck disable=SC2086 # BIND is two words
  COMPARE_GLOO_STORE=$store timeout "$TIMEOUT" "$BUILD/weftrun" -n "$NP" $BIND \
    "$OUT/bin/gloo_bench" "$1" "${SWEEP[@]}" -t tcp >>"$2.jsonl" 2>>"$2.err"
  rc=$?
  rm -rf "$store"
  return "$rc"
}

# The memory-bandwidth floor of COLL at this round's sizes from 16 MiB (COMPARE_FLOOR=1).
FLOOR_MIN=$((16 << 20))
run_floor() {
  local coll=$1 out=$2 lo=$FLOOR_MIN form
  [ "$lo" -lt "$(to_bytes "$MINB")" ] && lo=$(to_bytes "$MINB")
  [ "$lo" -gt "$(to_bytes "$MAXB")" ] && return 0
  for form in $coll $([ "$coll" = all_reduce ] && echo all_reduce_fused); do
    timeout "$TIMEOUT" "$BUILD/membw_floor" -c "$form" -b "$lo" -e "$(to_bytes "$MAXB")" -f "$FACTOR" \
      -n "$ITERS" -w 2 >>"$out" || return 1
  done
}
FLOOR=${COMPARE_FLOOR:-0}
if [ "$FLOOR" = 1 ] && { [ "$NP" != 2 ] || [ "$WEFT_T" != auto ] || [ ! -x "$BUILD/membw_floor" ]; }; then
  log "COMPARE_FLOOR=1: the floor is of 2 ranks over shared memory, with ./membw_floor; not run here"
  FLOOR=0
fi

# Whether the two CPUs share an L3 before and after each sweep (perf/l3_probe.c): on the
# development VM that flips every few seconds to minutes and moves every large-message
# figure 2-5x, so report.py gives medians per placement beside the overall ones.
probe_l3() {
  [ -x "$BUILD/l3_probe" ] && "$BUILD/l3_probe" >>"$1.l3" 2>/dev/null
  return 0
}

# ---- progress: which sweep, which sizes, and about how long is left ----
# The estimate: a sweep already run in an earlier round is expected to take as long again;
# one not run yet, the mean of the sweeps done so far.
declare -A SWEEP_SECS=()
NSWEEPS=$((ROUNDS * $(echo $COLLS | wc -w) * $(echo $ACTIVE | wc -w)))
DONE=0
T_START=$SECONDS
hms() { if [ "$1" -ge 60 ]; then echo "$(($1 / 60))m$(printf %02d $(($1 % 60)))s"; else echo "${1}s"; fi; }
estimate_left() { # the sweeps after DONE, in loop order
  local left=0 k=0 known=0 sum=0 key
  for key in "${!SWEEP_SECS[@]}"; do known=$((known + 1)); sum=$((sum + SWEEP_SECS[$key])); done
  [ "$known" -eq 0 ] && { echo "?"; return; }
  for r in $(seq 1 "$ROUNDS"); do for c in $COLLS; do for l in $ACTIVE; do
    k=$((k + 1))
    [ "$k" -le "$DONE" ] && continue
    left=$((left + ${SWEEP_SECS[$c.$l]:-$((sum / known))}))
  done; done; done
  echo "about $(hms "$left")"
}
progress() { # round coll lib
  log "[$((DONE + 1))/$NSWEEPS] round $1/$ROUNDS $2 $3: sizes $MINB..$MAXB;" \
    "$(hms $((SECONDS - T_START))) elapsed, $(estimate_left) left"
}

log "$NP ranks, sizes $MINB..$MAXB x$FACTOR, $ROUNDS round(s) of $ITERS iters," \
  "transport $TRANSPORT, libraries:$ACTIVE; output in $OUT"
# The libraries in round $1's order: $ACTIVE turned left by round - 1. On the 2-core VMs a
# launch's place in the sequence moved small-message times by itself: two builds of weft
# (8-256 B all-reduce, time old / new, medians per size) read 0.91-1.00x over 12 alternating
# pairs with the old one first, 1.08-1.19x over 20 with the new one first, and 0.97-1.01x
# over 20 once the order swapped every pair.
round_order() {
  local -a libs=($ACTIVE)
  local n=${#libs[@]} i
  for ((i = 0; i < n; i++)); do printf '%s ' "${libs[$(((i + $1 - 1) % n))]}"; done
}
for round in $(seq 1 "$ROUNDS"); do
  for coll in $COLLS; do
    for lib in $(round_order "$round"); do
      base=$RAW/$coll.$lib.r$round
      rm -f "$base.txt" "$base".*json "$base.jsonl" "$base.err" "$base.l3"
      progress "$round" "$coll" "$lib"
      t0=$SECONDS
      rc=0
      probe_l3 "$base"
      for range in "${RANGES[@]}"; do
        set -- $range
        SWEEP=(-b "$1" -e "$2" -f "$FACTOR" -n "$3" -w "$4")
        [ "${#RANGES[@]}" -gt 1 ] && log "    $coll $lib: sizes $1..$2 B, $3 iterations each"
        "run_$lib" "$coll" "$base" || { rc=$?; break; }
      done
      probe_l3 "$base"
      secs=$((SECONDS - t0))
      SWEEP_SECS[$coll.$lib]=$secs
      DONE=$((DONE + 1))
      if [ "$rc" = 0 ]; then
        log "round $round/$ROUNDS $coll $lib: ok (${secs} s)"
        continue
      fi
      [ "$rc" = 124 ] && what="timed out after $TIMEOUT s" || what="exit $rc"
      log "round $round/$ROUNDS $coll $lib: FAILED ($what); last lines of $base.err:"
      tail -n 5 "$base.err" 2>/dev/null | sed 's/^/    /'
      echo "round $round $coll $lib: $what ($(tail -n 1 "$base.err" 2>/dev/null))" >>"$RAW/failed.txt"
      if [ "$lib" = weft ] || [ "$lib" = base ]; then STATUS=1; fi
    done
    if [ "$FLOOR" = 1 ]; then
      rm -f "$RAW/$coll.floor.r$round.jsonl"
      run_floor "$coll" "$RAW/$coll.floor.r$round.jsonl" ||
        log "round $round/$ROUNDS $coll floor: membw_floor FAILED (no ceiling this round)"
    fi
  done
done

# ---- the report: a python with matplotlib draws the plot, any python3 the table ----

PY=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import matplotlib' 2>/dev/null; then PY=$p; break; fi
done
PLOT=()
if [ -z "$PY" ]; then
  log "no plot: matplotlib not found (run perf/compare/install-peers.sh)"
  PY=python3
  PLOT=(--no-plot)
fi
"$PY" "$SRC/report.py" --raw "$RAW" --out "$OUT" --np "$NP" --transport "$TRANSPORT" \
  --colls "$COLLS" --libs "$LIBS" --rounds "$ROUNDS" --iters "$ITERS" "${PLOT[@]}"
rc=$?
[ $rc = 0 ] || STATUS=1 # report.py exits 1 when weft returned wrong results
exit $STATUS
