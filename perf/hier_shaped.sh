#!/bin/sh
# hier_shaped.sh: hierarchical against flat algorithms across emulated hosts on a shaped
# network. Builds HOSTS hosts x RANKS ranks in network namespaces (tools/netns-hosts.sh),
# limits every host's link to RATE with tc tbf (the egress of each host's veth0, so both
# directions of every inter-host flow are limited; shm inside a host is not), then runs the
# perf program with WEFT_ALGO=<coll>:ring and <coll>:hierarchical in turn, ROUNDS times
# interleaved, and prints per size the median out-of-place time of each and the ratio
# (flat / hierarchical: above 1, hierarchical is faster). Everything is removed on exit.
#
#   sudo perf/hier_shaped.sh [BUILDDIR]            (BUILDDIR holds all_reduce_perf; default .)
#   env: RATE=1gbit HOSTS=2 RANKS=2 ROUNDS=3 ITERS=3 MIN=4M MAX=64M
#        COLLS="all_reduce all_gather reduce_scatter"  (default: all_reduce)
#
# Ranks start torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR, ...) inside their host, so no
# MPI is needed. Figures taken while other jobs load the machine are not final: rerun on a
# quiet machine. Needs root, iproute2 (ip, tc) and util-linux's unshare.
set -u
BUILD=$(cd "${1:-.}" && pwd) || exit 1
TOOLS=$(cd "$(dirname "$0")/../tools" && pwd)
NETNS="$TOOLS/netns-hosts.sh"
RATE=${RATE:-1gbit}; HOSTS=${HOSTS:-2}; RANKS=${RANKS:-2}; ROUNDS=${ROUNDS:-3}; ITERS=${ITERS:-3}
MIN=${MIN:-4M}; MAX=${MAX:-64M}; COLLS=${COLLS:-all_reduce}

die() { echo "hier_shaped.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, tc)"
for c in ip tc unshare; do command -v $c >/dev/null 2>&1 || die "no $c command"; done
for c in $COLLS; do [ -x "$BUILD/${c}_perf" ] || die "no $BUILD/${c}_perf (build the perf programs)"; done

NAME="hs$$"
DIR=$(mktemp -d "${TMPDIR:-/tmp}/weft_hier_shaped.XXXXXX") || exit 1
cleanup() { "$NETNS" down "$NAME" >/dev/null 2>&1; rm -rf "$DIR"; }
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

"$NETNS" up "$NAME" "$HOSTS" >"$DIR/up.log" 2>&1 || die "cannot create the hosts: $(head -n 1 "$DIR/up.log")"
h=0
while [ $h -lt "$HOSTS" ]; do
  # tbf: RATE, a burst of 256 KiB (several TCP segments at line rate), 100 ms of queue.
  ip netns exec "$NAME-h$h" tc qdisc add dev veth0 root tbf rate "$RATE" burst 256kb latency 100ms ||
    die "tc tbf failed on $NAME-h$h"
  h=$((h + 1))
done
ADDR0=$("$NETNS" addr "$NAME-h0")
PORT=$((20000 + $$ % 20000))
N=$((HOSTS * RANKS))

# run COLL ALGO OUT: one perf run of N ranks, rank 0's output in OUT.
run() {
  PORT=$((PORT + 1)); pids=; r=0; h=0
  while [ $h -lt "$HOSTS" ]; do
    l=0
    while [ $l -lt "$RANKS" ]; do
      timeout 600 "$NETNS" exec "$NAME-h$h" env RANK=$r WORLD_SIZE=$N LOCAL_RANK=$l LOCAL_WORLD_SIZE="$RANKS" \
        GROUP_RANK=$h MASTER_ADDR="$ADDR0" MASTER_PORT=$PORT WEFT_SOCKET_IFNAME=veth0 \
        WEFT_ALGO="$(echo "$1" | tr -d _):$2" "$BUILD/${1}_perf" -b "$MIN" -e "$MAX" -f 2 \
        -n "$ITERS" -w 1 -c 1 -d float >"$DIR/rank$r.log" 2>&1 &
      pids="$pids $!"; r=$((r + 1)); l=$((l + 1))
    done
    h=$((h + 1))
  done
  rc=0
  for p in $pids; do wait "$p" || rc=1; done
  cp "$DIR/rank0.log" "$3"
  [ $rc -eq 0 ] || { echo "hier_shaped.sh: $1 $2 failed:" >&2; tail -n 5 "$DIR"/rank*.log >&2; return 1; }
  # Every result must be exact: #wrong 0 out of place and in place.
  awk '/^ *[0-9]/ && ($9 != "0" || $13 != "0") { bad = 1 } END { exit bad }' "$3" ||
    { echo "hier_shaped.sh: $1 $2: wrong results" >&2; return 1; }
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# weft: hierarchical vs flat ring, $HOSTS hosts x $RANKS ranks, inter-host links shaped to $RATE (tc tbf)"
echo "# median of $ROUNDS interleaved rounds of -n $ITERS out-of-place calls; $(uptime | sed 's/.*load/load/')"
for coll in $COLLS; do
  i=1
  while [ "$i" -le "$ROUNDS" ]; do
    for algo in ring hierarchical; do run "$coll" "$algo" "$DIR/$coll.$algo.$i" || exit 1; done
    i=$((i + 1))
  done
  echo
  printf '%-15s %12s %14s %16s %8s\n' "$coll" "size (B)" "ring (us)" "hierarchical (us)" "ratio"
  awk '/^ *[0-9]/ { print $1 }' "$DIR/$coll.ring.1" | while read -r size; do
    ring=$(cat "$DIR/$coll".ring.* | awk -v s="$size" '$1 == s { print $6 }' | median)
    hier=$(cat "$DIR/$coll".hierarchical.* | awk -v s="$size" '$1 == s { print $6 }' | median)
    printf '%-15s %12s %14.0f %16.0f %7.2fx\n' "" "$size" "$ring" "$hier" "$(echo "$ring $hier" | awk '{ print $1 / $2 }')"
  done
done
