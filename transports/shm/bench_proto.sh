#!/bin/bash
# bench_proto.sh: A/B latency of small collectives between two weft builds (and Open MPI),
# interleaved round by round so a noisy minute on a shared 2-core box hits every side alike.
# Written for the LL protocol / futex waiting / stream spin work (issue 4); medians of rounds.
#
#   transports/shm/bench_proto.sh BASE_BUILD NEW_BUILD [NP] [ROUNDS] [COLLS...]
#   e.g. transports/shm/bench_proto.sh /tmp/build-base /tmp/build-new 2 3 all_reduce broadcast
#
# Per collective and size it prints, for each side, the median over rounds of
#   time: the perf tool's timed loop (-n calls queued on a stream, one synchronize), and
#   p50:  the median single blocking call (the perf tools' extra pass; MPI: its own p50).
# On a box shared with other work, BENCH_PREFIX="chrt -f 10" (root; 2 ranks) keeps that load
# off the ranks, as a quiet machine would; with more ranks than cores use "nice -n -15"
# instead (real-time ranks that spin could starve each other).
# Environment: BENCH_MAXBYTES [64K], BENCH_FACTOR [4], BENCH_ITERS [200], BENCH_WARMUP [20],
# BENCH_MPI [1] (0 skips Open MPI; skipped anyway when mpicc/mpirun are missing),
# BENCH_ENV_BASE / BENCH_ENV_NEW (extra environment for each side's runs).
# The LL threshold (lib/proto.h) was measured as one build against itself:
#   BENCH_MPI=0 BENCH_PREFIX="chrt -f 10" BENCH_FACTOR=2 BENCH_ITERS=1000 \
#   BENCH_ENV_BASE=WEFT_PROTO=Simple BENCH_ENV_NEW=WEFT_PROTO=LL \
#   transports/shm/bench_proto.sh BUILD BUILD 2 3 all_reduce sendrecv
set -u
BASE=$1 NEW=$2 NP=${3:-2} ROUNDS=${4:-3}
shift 4 2>/dev/null || shift $#
COLLS=${*:-all_reduce broadcast all_gather all_to_all reduce_scatter}
MAXB=${BENCH_MAXBYTES:-64K} FACTOR=${BENCH_FACTOR:-4} ITERS=${BENCH_ITERS:-200} WARM=${BENCH_WARMUP:-20}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mktemp -d "${TMPDIR:-/tmp}/weft-bench-proto.XXXXXX")
tool() { case $1 in all_to_all) echo alltoall_perf ;; *) echo "$1_perf" ;; esac; }

MPI=${BENCH_MPI:-1}
if [ "$MPI" = 1 ] && command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  mpicc -std=gnu11 -O2 -I"$SRC/perf/compare" -o "$OUT/mpi_bench" "$SRC/perf/compare/mpi_bench.c" 2>"$OUT/mpicc.log" || MPI=0
else
  MPI=0
fi

run_weft() { # side build coll [env]
  local lat=""  # p50/p99 are behind -L 1 since weft 0.2 (always printed before)
  "$2/$(tool "$3")" -h 2>&1 | grep -q -- '-L,--latency' && lat="-L 1"
  env ${4:-} ${BENCH_PREFIX:-} "$2/weftrun" -n "$NP" "$2/$(tool "$3")" -b 8 -e "$MAXB" -f "$FACTOR" -n "$ITERS" -w "$WARM" \
    -d float -o sum $lat 2>/dev/null | awk -v side="$1" -v coll="$3" '/^ +[0-9]/ {print side, coll, $1, $6, $(NF-1)}'
}
run_mpi() { # coll
  ${BENCH_PREFIX:-} mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$NP" "$OUT/mpi_bench" "$1" \
    -b 8 -e "$MAXB" -f "$FACTOR" -n "$ITERS" -w "$WARM" 2>/dev/null |
    python3 -c 'import sys,json
for l in sys.stdin:
    if l.startswith("{"):
        d=json.loads(l); print("ompi", d["coll"], d["size"], d["time_us"], d["p50_us"])'
}

for r in $(seq "$ROUNDS"); do
  for c in $COLLS; do
    run_weft base "$BASE" "$c" "${BENCH_ENV_BASE:-}" >>"$OUT/rows"
    run_weft new "$NEW" "$c" "${BENCH_ENV_NEW:-}" >>"$OUT/rows"
    [ "$MPI" = 1 ] && [ "$c" != sendrecv ] && run_mpi "$c" >>"$OUT/rows"
  done
  echo "round $r done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done

python3 - "$OUT/rows" <<'PY'
import sys, statistics as st, collections
rows = collections.defaultdict(list)
for l in open(sys.argv[1]):
    side, coll, size, t, p50 = l.split()
    rows[(coll, int(size), side)].append((float(t), float(p50)))
colls = sorted({k[0] for k in rows}, key=lambda c: c)
sides = [s for s in ("base", "new", "ompi") if any(k[2] == s for k in rows)]
print("%-15s %7s " % ("coll", "bytes") + " ".join("%9s %9s" % (s + " time", s + " p50") for s in sides))
for c in colls:
    for size in sorted({k[1] for k in rows if k[0] == c}):
        cells = []
        for s in sides:
            v = rows.get((c, size, s))
            cells.append("%9.2f %9.2f" % (st.median(x[0] for x in v), st.median(x[1] for x in v)) if v else "%9s %9s" % ("-", "-"))
        print("%-15s %7d " % (c, size) + " ".join(cells))
PY
rm -rf "$OUT"
