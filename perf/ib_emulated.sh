#!/bin/sh
# ib_emulated.sh: all_reduce_perf across two emulated hosts (network namespaces,
# tools/netns-hosts.sh; one rank on each) over the ib transport on the verbs emulator, then
# over TCP (socket) on the same namespaces for reference. The ib figures are EMULATED: the
# emulator's "wire" is process_vm_writev between two processes of this machine, so they say
# nothing about InfiniBand or RoCE (weft's ib transport has not run on real hardware).
#
#   sudo perf/ib_emulated.sh [BUILDDIR]     (BUILDDIR holds all_reduce_perf and the emulator)
#   env: MIN=8 MAX=64M ITERS=20 WARMUP=5 TRANSPORTS="ib socket"
#
# Ranks start torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR, ...) inside their host. Needs
# root, iproute2 and util-linux's unshare. Figures taken on a loaded machine are not final.
set -u
BUILD=$(cd "${1:-.}" && pwd) || exit 1
TOOLS=$(cd "$(dirname "$0")/../tools" && pwd)
NETNS="$TOOLS/netns-hosts.sh"
MIN=${MIN:-8}; MAX=${MAX:-64M}; ITERS=${ITERS:-20}; WARMUP=${WARMUP:-5}; TRANSPORTS=${TRANSPORTS:-ib socket}
EMU="$BUILD/tests/verbs_emu/.libs/libweft_verbs_emu.so"

die() { echo "ib_emulated.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
[ -x "$BUILD/all_reduce_perf" ] || die "no $BUILD/all_reduce_perf"
[ -f "$EMU" ] || die "no verbs emulator at $EMU (configure found no verbs headers?)"

NAME="ie$$"
DIR=$(mktemp -d /dev/shm/weft-ib-emulated.XXXXXX) || exit 1
cleanup() { "$NETNS" down "$NAME" >/dev/null 2>&1; rm -rf "$DIR"; }
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
"$NETNS" up "$NAME" 2 >"$DIR/up.log" 2>&1 || die "cannot create the hosts: $(head -n 1 "$DIR/up.log")"
ADDR0=$("$NETNS" addr "$NAME-h0")
PORT=$((20000 + $$ % 10000))

for t in $TRANSPORTS; do
  PORT=$((PORT + 1))
  case $t in
    ib) envs="WEFT_IB_LIBRARY=$EMU WEFT_VERBS_EMU_DIR=$DIR/emu"; label="ib over the verbs emulator: EMULATED, process_vm_writev, not InfiniBand" ;;
    *) envs="WEFT_IB_DISABLE=1"; label="$t (TCP over the namespaces' veth pair)" ;;
  esac
  echo "## all_reduce_perf, 2 ranks on 2 emulated hosts, $label"
  run_rank() { # RANK: one rank on host RANK, output in rank RANK's log
    # shellcheck disable=SC2086
    timeout 600 "$NETNS" exec "$NAME-h$1" env RANK="$1" WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
      MASTER_ADDR="$ADDR0" MASTER_PORT=$PORT WEFT_SOCKET_IFNAME=veth0 WEFT_TRANSPORT="$t" $envs \
      "$BUILD/all_reduce_perf" -b "$MIN" -e "$MAX" -f 2 -n "$ITERS" -w "$WARMUP" -d float -o sum \
      >"$DIR/rank$1.log" 2>&1
  }
  run_rank 1 & pid1=$!
  run_rank 0; rc0=$?
  wait "$pid1"; rc1=$?
  grep -v '^#  *Rank\|^# nThread\|^# Using\|^#$' "$DIR/rank0.log"
  if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then echo "# exit status $rc0 / $rc1"; tail -n 5 "$DIR/rank1.log"; fi
done
