#!/bin/sh
# ib_netns.sh: the ib engine between two emulated hosts (network namespaces, as the
# multi-host tests make them) over the verbs emulator: ib_engine_bw -c moves and checks
# messages of 1 B..4 MiB one way and an 8-byte ping-pong both ways, side 0 on host 0 and side
# 1 on host 1; the emulator's state directory and the handle mailbox live in /dev/shm, which
# the namespaces share. Also checks that the two hosts' emulated ports differ (each
# namespace is its own emulated host, with its own LID). Skips without root, iproute2,
# unshare or the emulator.
cd "${WEFT_TOP_BUILDDIR:-.}" || { echo "1..0 # SKIP no build dir"; exit 0; }
HOSTS=$(cd "$(dirname "$0")/../tools" 2>/dev/null && pwd)/netns-hosts.sh
EMU=$PWD/tests/verbs_emu/.libs/libweft_verbs_emu.so
skip() { echo "1..0 # SKIP $1"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
command -v unshare >/dev/null 2>&1 || skip "no unshare command (util-linux)"
[ -x ./ib_engine_bw ] && [ -f "$EMU" ] || skip "ib_engine_bw or the verbs emulator not built"

NAME="wi$$"
DIR=$(mktemp -d /dev/shm/weft-ibnetns.XXXXXX) || exit 1
cleanup() { "$HOSTS" down "$NAME" >/dev/null 2>&1; rm -rf "$DIR"; }
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
"$HOSTS" up "$NAME" 2 >"$DIR/up.log" 2>&1 || skip "cannot create network namespaces here: $(head -n 1 "$DIR/up.log")"

echo "1..2"
export WEFT_IB_LIBRARY="$EMU" WEFT_VERBS_EMU_DIR="$DIR/emu" WEFT_DEBUG=INFO WEFT_IB_TIMEOUT=14
unset WEFT_HOSTID WEFT_IB_HCA WEFT_IB_DISABLE
run() { # HOST ROLE
  timeout 120 "$HOSTS" exec "$NAME-h$1" ./ib_engine_bw --role "$2" --mailbox "$DIR/mailbox" -c -b 1 -e 4M -n 8 \
    >"$DIR/out$2" 2>&1
}
run 1 1 & pid1=$!
run 0 0; rc0=$?
wait $pid1; rc1=$?
if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]; then
  echo "ok 1 - ib engine between two network namespaces: 1 B..4 MiB checked, ping-pong"
else
  echo "not ok 1 - ib engine between two network namespaces (exit $rc0 / $rc1)"
  tail -n 20 "$DIR/out0" "$DIR/out1" | sed 's/^/# /'
fi
sed 's/^/# /' "$DIR/out1" | grep -v "weft INFO" | head -20
# Each namespace is an emulated host: its port's LID (from the host identity) differs.
lid0=$(sed -n 's/.*ib: weftemu0:1 IB .* LID \([0-9]*\) .*/\1/p' "$DIR/out0" | head -n 1)
lid1=$(sed -n 's/.*ib: weftemu0:1 IB .* LID \([0-9]*\) .*/\1/p' "$DIR/out1" | head -n 1)
if [ -n "$lid0" ] && [ -n "$lid1" ] && [ "$lid0" != "$lid1" ]; then
  echo "ok 2 - each namespace is its own emulated host (LID $lid0 and $lid1)"
else
  echo "not ok 2 - each namespace is its own emulated host (LIDs '$lid0' and '$lid1')"
fi
