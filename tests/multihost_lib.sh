# shellcheck shell=sh
# multihost_lib.sh: shared part of the multi-host TAP tests (tests/multihost_*.sh), sourced,
# not run. It emulates hosts with tools/netns-hosts.sh (one network namespace per host, all
# on one bridge), runs the perf programs across them under Open MPI's mpirun (rsh agent
# tools/netns-rsh.sh, so mpirun really starts daemons and ranks on the other hosts) and
# torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set per rank), and
# checks three things: every result is exact (the perf programs' #wrong columns, exit status),
# ranks on one host talk over shm and across hosts over sockets (WEFT_DEBUG=INFO's "ready: X
# shm peers, Y socket peers"), and the inter-host bytes really crossed the veth links (the
# interfaces' byte counters inside each namespace).
#
# A test script sets LAYOUT (ranks per host, e.g. "2 2" or "1 2 3") and sources this file,
# which skips the whole script cleanly when the machine cannot emulate hosts. MH_INTER=ib
# (default socket) runs the ib transport between the hosts instead, over the verbs emulator
# (tests/verbs_emu/; each namespace is its own emulated host with its own HCA): the
# transport check then expects ib peers across hosts, and the traffic check that the data
# did NOT cross the veth links (the emulator's one-sided writes go through
# process_vm_writev; only the handle exchange and the bootstrap use TCP).
# Word splitting of $LAYOUT and of flag lists is on purpose:
# shellcheck disable=SC2086

cd "${WEFT_TOP_BUILDDIR:-.}" || { echo "1..0 # SKIP no build dir"; exit 0; }
MH_TOOLS=$(cd "$(dirname "$0")/../tools" 2>/dev/null && pwd)
MH_HOSTS="$MH_TOOLS/netns-hosts.sh"

mh_skip_all() { echo "1..0 # SKIP $1"; exit 0; }
[ "$(id -u)" -eq 0 ] || mh_skip_all "needs root to create network namespaces"
command -v ip >/dev/null 2>&1 || mh_skip_all "no ip command (iproute2)"
command -v unshare >/dev/null 2>&1 || mh_skip_all "no unshare command (util-linux)"
[ -x "$MH_HOSTS" ] || mh_skip_all "no tools/netns-hosts.sh next to the tests"
[ -x ./all_reduce_perf ] || mh_skip_all "perf programs not built"
MH_INTER=${MH_INTER:-socket}
MH_MPI_ENV=
if [ "$MH_INTER" = ib ]; then
  MH_EMU=$PWD/tests/verbs_emu/.libs/libweft_verbs_emu.so
  [ -f "$MH_EMU" ] || mh_skip_all "the verbs emulator is not built (no verbs headers?)"
fi

# The layout decides the launcher, the transports and the hosts, not the caller's environment.
unset WEFT_TRANSPORT WEFT_HOSTID WEFT_ROOT_ADDR WEFT_UNIQUE_ID WEFT_RANK WEFT_NRANKS WEFT_SECRET \
  WEFT_SOCKET_IFNAME WEFT_SOCKET_FAMILY MASTER_ADDR MASTER_PORT RANK WORLD_SIZE SLURM_PROCID \
  SLURM_NTASKS SLURM_STEP_NUM_TASKS PMI_RANK PMI_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMIX_RANK PMIX_NAMESPACE
# A hang becomes weft's own error, naming the peer, well before `timeout` kills the run.
WEFT_TIMEOUT_MS=30000
export WEFT_TIMEOUT_MS

# Names unique to this run (interface names are at most 15 characters).
MH_NAME="wm$$"
MH_DIR=$(mktemp -d "${TMPDIR:-/tmp}/weft_multihost.XXXXXX") || exit 1
MH_EMU_DIR=
if [ "$MH_INTER" = ib ]; then
  # The emulator's state lives in /dev/shm, which the namespaces share (tests/ib_netns.sh).
  MH_EMU_DIR=$(mktemp -d /dev/shm/weft-mh-emu.XXXXXX) || exit 1
  WEFT_IB_LIBRARY=$MH_EMU WEFT_VERBS_EMU_DIR=$MH_EMU_DIR WEFT_IB_TIMEOUT=14
  export WEFT_IB_LIBRARY WEFT_VERBS_EMU_DIR WEFT_IB_TIMEOUT
  MH_MPI_ENV="-x WEFT_IB_LIBRARY -x WEFT_VERBS_EMU_DIR -x WEFT_IB_TIMEOUT"
  unset WEFT_IB_HCA WEFT_IB_DISABLE WEFT_VERBS_EMU_FAULT WEFT_VERBS_EMU_DEVICES
fi
mh_cleanup() { "$MH_HOSTS" down "$MH_NAME" >/dev/null 2>&1; rm -rf "$MH_DIR" ${MH_EMU_DIR:+"$MH_EMU_DIR"}; }
trap mh_cleanup EXIT
trap 'exit 1' INT TERM HUP

# The layout: MH_K hosts, MH_N ranks; rank r runs on host mh_host_of r (ranks fill hosts in
# order, as mpirun's by-slot mapping does).
MH_K=0; MH_N=0
for l in $LAYOUT; do MH_K=$((MH_K + 1)); MH_N=$((MH_N + l)); done
mh_local_count() { echo $LAYOUT | awk -v h="$1" '{ print $(h + 1) }'; }
mh_host_of() {
  echo $LAYOUT | awk -v r="$1" '{ for (h = 1; h <= NF; h++) { r -= $h; if (r < 0) { print h - 1; exit } } }'
}

if ! "$MH_HOSTS" up "$MH_NAME" "$MH_K" >"$MH_DIR/up.log" 2>&1; then
  mh_skip_all "cannot create network namespaces and veth pairs here: $(head -n 1 "$MH_DIR/up.log")"
fi
MH_SUBNET=$("$MH_HOSTS" subnet "$MH_NAME")
MH_ADDR0=$("$MH_HOSTS" addr "$MH_NAME-h0")
# The namespaces are ours alone, but Open MPI's daemons and weft's socket transport bind
# ephemeral ports in them (32768-60999 by default), and a bootstrap port drawn from that
# range once met "Address already in use": stay below it, whatever the run count.
MH_PORT=$((10000 + $$ % 20000))

h=0
: >"$MH_DIR/hostfile"
for l in $LAYOUT; do echo "$MH_NAME-h$h slots=$l" >>"$MH_DIR/hostfile"; h=$((h + 1)); done
MH_HAVE_MPIRUN=0
command -v mpirun >/dev/null 2>&1 && MH_HAVE_MPIRUN=1

mh_n=0
mh_failed=0
mh_out="$MH_DIR/out"
mh_ok() { mh_n=$((mh_n + 1)); echo "ok $mh_n - $1"; }
mh_not_ok() {  # NAME [quiet]: the tail of the run's output unless quiet
  mh_n=$((mh_n + 1)); mh_failed=$((mh_failed + 1))
  echo "not ok $mh_n - $1"
  [ -n "${2:-}" ] || [ ! -s "$mh_out" ] || grep -v '^ *[0-9]' "$mh_out" | tail -n 30 | sed 's/^/# /'
}
mh_done() { [ $mh_failed -eq 0 ]; }

# mpirun ENV-ASSIGNMENTS -- PROGRAM ARGS...: runs MH_N ranks across the hosts, output (stdout
# and stderr of every rank) in $mh_out. Each run gets its own bootstrap port, and its session
# directory under MH_DIR: by default every mpirun of the user shares /tmp/ompi.HOST.UID, and one
# that removes it at its end while another creates it fails the other's start ("A call to mkdir
# was unable to create the desired directory ... File exists", orte_init failed): seen once in a
# CI run of the suite, and 1 of 600 runs of two concurrent loops of `mpirun -np 1 true`.
mh_mpirun() {
  xs=
  while [ "$1" != "--" ]; do xs="$xs -x $1"; shift; done
  shift
  # make check-sanitize's options (leak suppressions) must reach the ranks on the other hosts
  for v in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS; do
    if [ -n "$(printenv "$v")" ]; then xs="$xs -x $v"; fi
  done
  MH_PORT=$((MH_PORT + 1))
  # stderr apart, appended after: a perf tool prints a row's size columns before the call
  # and its times after, and the ranks' INFO lines (the tuner's trace) written in between
  # once split a row in two, which read as a row with wrong elements (CI, 2026-12-03).
  timeout 60 mpirun --allow-run-as-root --hostfile "$MH_DIR/hostfile" -np "$MH_N" \
    --mca orte_tmpdir_base "$MH_DIR" --mca plm_rsh_agent "$MH_TOOLS/netns-rsh.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "$MH_SUBNET" --mca btl_tcp_if_include "$MH_SUBNET" \
    -x "WEFT_ROOT_ADDR=$MH_ADDR0:$MH_PORT" -x WEFT_SOCKET_IFNAME=veth0 -x WEFT_TIMEOUT_MS $MH_MPI_ENV $xs \
    "$@" >"$mh_out" 2>"$mh_out.err"
  mh_rc=$?
  cat "$mh_out.err" >>"$mh_out"
  return $mh_rc
}

# torchrun ENV-ASSIGNMENTS -- PROGRAM ARGS...: starts every rank itself, inside its host, with
# torchrun's variables; rank 0's output (then the others') in $mh_out. Fails if any rank does.
mh_torchrun() {
  envs=
  while [ "$1" != "--" ]; do envs="$envs $1"; shift; done
  shift
  MH_PORT=$((MH_PORT + 1))
  r=0; pids=
  h=0
  for l in $LAYOUT; do
    lr=0
    while [ $lr -lt "$l" ]; do
      timeout 60 "$MH_HOSTS" exec "$MH_NAME-h$h" env RANK=$r WORLD_SIZE=$MH_N LOCAL_RANK=$lr \
        LOCAL_WORLD_SIZE="$l" GROUP_RANK=$h MASTER_ADDR="$MH_ADDR0" MASTER_PORT=$MH_PORT \
        TORCHELASTIC_RUN_ID="$MH_NAME" WEFT_SOCKET_IFNAME=veth0 $envs "$@" \
        >"$MH_DIR/rank$r.log" 2>&1 &
      pids="$pids $!"
      r=$((r + 1)); lr=$((lr + 1))
    done
    h=$((h + 1))
  done
  rc=0
  for p in $pids; do wait "$p" || rc=$?; done
  r=0; : >"$mh_out"
  while [ $r -lt $MH_N ]; do cat "$MH_DIR/rank$r.log" >>"$mh_out"; r=$((r + 1)); done
  return $rc
}

# Exit status 0, result rows whose #wrong columns are 0 (N/A where nccl-tests does not check),
# and the footer: the whole result of one perf run is exact.
mh_results_exact() {
  rows=$(grep -c '^ *[0-9]' "$mh_out")
  bad=$(awk '/^ *[0-9]/ && (NF != 13 || ($9 != "0" && $9 != "N/A") ||
                            ($13 != "0" && $13 != "N/A"))' "$mh_out" | wc -l)
  [ "$1" -eq 0 ] && [ "$rows" -gt 0 ] && [ "$bad" -eq 0 ] &&
    grep -q '^# Out of bounds values : 0 OK' "$mh_out" && return 0
  echo "# exit status $1, $rows rows, $bad with wrong elements"
  return 1
}

# check_mpirun NAME ENV... -- PROGRAM ARGS...
mh_check_mpirun() {
  name=$1; shift
  if [ $MH_HAVE_MPIRUN -eq 0 ]; then mh_ok "$name # SKIP no mpirun"; return; fi
  mh_mpirun "$@"
  if mh_results_exact $?; then mh_ok "$name ($rows rows)"; else mh_not_ok "$name"; fi
}

# mpirun alone first: every rank reports the hostname and network namespace it runs in, so a
# launcher problem shows up here rather than as a weft failure.
mh_check_mpirun_hosts() {
  name="mpirun starts every rank on its emulated host"
  if [ $MH_HAVE_MPIRUN -eq 0 ]; then mh_ok "$name # SKIP no mpirun"; return; fi
  # shellcheck disable=SC2016 # expanded by each rank's shell
  mh_mpirun -- sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname) $(readlink /proc/self/ns/net)"'
  rc=$?
  r=0
  while [ $r -lt $MH_N ]; do
    want="rank $r on $MH_NAME-h$(mh_host_of $r) net:"
    grep -q "^$want" "$mh_out" || { echo "# missing: $want..."; rc=1; }
    r=$((r + 1))
  done
  nets=$(awk '/^rank / { print $NF }' "$mh_out" | sort -u | wc -l)
  [ "$nets" -eq $MH_K ] || { echo "# $nets network namespaces, expected $MH_K"; rc=1; }
  if [ $rc -eq 0 ]; then mh_ok "$name"; else mh_not_ok "$name"; fi
}

# The "# Rank R ... on HOST" lines put every rank on the host the layout says.
mh_placement_right() {
  r=0
  while [ $r -lt $MH_N ]; do
    want="$MH_NAME-h$(mh_host_of $r)"
    got=$(awk -v r=$r '$1 == "#" && $2 == "Rank" && $3 == r { print $9 }' "$mh_out")
    [ "$got" = "$want" ] || { echo "# rank $r runs on '$got', expected $want"; return 1; }
    r=$((r + 1))
  done
}

# Every rank reports L-1 shm peers and N-L MH_INTER peers (socket or ib), L the rank count
# of its host, and no peer over any other transport ("ready: 1 shm peers, 2 socket peers,
# 0 ib peers"; the ib count is absent where ib is not built).
mh_transports_right() {
  r=0
  while [ $r -lt $MH_N ]; do
    l=$(mh_local_count "$(mh_host_of $r)")
    line=$(grep "rank $r of $MH_N ready: " "$mh_out" | sed 's/.* ready: //')
    want="$((l - 1)) shm peers, $((MH_N - l)) $MH_INTER peers"
    others=$(echo "$line" | tr ',' '\n' | grep -v " shm peers\| $MH_INTER peers" | grep -v '^ *0 ')
    if ! echo ", $line," | grep -q ", $((l - 1)) shm peers," || ! echo ", $line," | grep -q ", $((MH_N - l)) $MH_INTER peers," ||
       [ -n "$others" ]; then
      echo "# rank $r: expected $want (and no others); got: $line"
      return 1
    fi
    r=$((r + 1))
  done
}

# Byte counters of an interface inside host H's namespace: "rx tx".
mh_counters() {
  "$MH_HOSTS" exec "$MH_NAME-h$1" sh -c \
    "cat /sys/class/net/$2/statistics/rx_bytes /sys/class/net/$2/statistics/tx_bytes" | tr '\n' ' '
}
mh_snapshot() {  # FILE: one line per host: veth0 rx tx, lo rx tx
  : >"$1"
  h=0
  while [ $h -lt $MH_K ]; do
    echo "$(mh_counters $h veth0) $(mh_counters $h lo)" >>"$1"
    h=$((h + 1))
  done
}

# The traffic check: CALLS all-reduces of BYTES each. With data on every host, each host must
# receive at least BYTES per all-reduce (its result depends on all of the others' data) and
# send at least BYTES (the others' results depend on its data), whatever the algorithm: a
# lower bound for each host's veth0 rx and tx. Loopback inside a host must stay far below
# that: ranks on one host exchange data over shm, not TCP.
mh_traffic_right() {
  bytes=$1; calls=$2
  need=$((bytes * calls))
  h=0
  paste -d ' ' "$MH_DIR/before" "$MH_DIR/after" | while read -r vrx0 vtx0 lrx0 _ vrx1 vtx1 lrx1 _; do
    rx=$((vrx1 - vrx0)); tx=$((vtx1 - vtx0)); lo=$((lrx1 - lrx0))
    if [ "$MH_INTER" = ib ]; then # the data went through the emulated HCAs, not TCP
      echo "# host $h: veth0 rx $rx tx $tx bytes, lo $lo bytes (ib: need veth0 < $bytes, lo < $bytes)"
      [ $rx -lt "$bytes" ] && [ $tx -lt "$bytes" ] && [ $lo -lt "$bytes" ] || exit 1
    else
      echo "# host $h: veth0 rx $rx tx $tx bytes, lo $lo bytes (need veth0 >= $need, lo < $bytes)"
      [ $rx -ge $need ] && [ $tx -ge $need ] && [ $lo -lt "$bytes" ] || exit 1
    fi
    h=$((h + 1))
  done
}

# The traffic run: all_reduce_perf at 1 MiB, ITERS timed calls out-of-place and ITERS in-place
# (plus untimed, warm-up and check calls not counted), with WEFT_DEBUG=INFO.
MH_TRAFFIC_ITERS=10
MH_TRAFFIC_ARGS="./all_reduce_perf -b 1M -e 1M -n $MH_TRAFFIC_ITERS -w 1 -d float -o sum"

# mh_check_layout LAUNCHER: the traffic run under mpirun or torchrun, three TAP lines.
mh_check_layout() {
  launcher=$1
  crossed="traffic crossed the veth links"
  [ "$MH_INTER" != ib ] || crossed="the data did not cross the veth links (ib)"
  if [ "$launcher" = mpirun ] && [ $MH_HAVE_MPIRUN -eq 0 ]; then
    for what in "all_reduce_perf 1 MiB exact, ranks on the right hosts" "shm within hosts, $MH_INTER across" \
                "$crossed"; do
      mh_ok "$launcher: $what # SKIP no mpirun"
    done
    return
  fi
  mh_snapshot "$MH_DIR/before"
  if [ "$launcher" = mpirun ]; then
    mh_mpirun WEFT_DEBUG=INFO -- $MH_TRAFFIC_ARGS
  else
    mh_torchrun WEFT_DEBUG=INFO -- $MH_TRAFFIC_ARGS
  fi
  rc=$?
  mh_snapshot "$MH_DIR/after"
  what="$launcher: all_reduce_perf 1 MiB exact, ranks on the right hosts"
  if mh_results_exact $rc && mh_placement_right; then mh_ok "$what"; else mh_not_ok "$what"; fi
  what="$launcher: shm within hosts, $MH_INTER across"
  if mh_transports_right; then mh_ok "$what"; else mh_not_ok "$what"; fi
  what="$launcher: $crossed"
  if mh_traffic_right 1048576 $((2 * MH_TRAFFIC_ITERS)) >"$MH_DIR/traffic" 2>&1; then
    mh_ok "$what"; cat "$MH_DIR/traffic"
  else
    cat "$MH_DIR/traffic"; mh_not_ok "$what" quiet
  fi
}

# mh_check_tuner ALGO BYTES: all_reduce_perf -c 1 at BYTES under mpirun with the tuner's trace
# (WEFT_TUNER_TRACE=1 logs "tuner: all_reduce ..., BYTES B, ...: ALGO (why)" at INFO): the
# results are exact and every rank's trace names ALGO for every all-reduce of BYTES. ALGO
# "same": whichever algorithm the model takes, but the same on every rank (a fallback is
# taken by all ranks or none).
mh_check_tuner() {
  algo=$1; bytes=$2
  name="mpirun: the tuner picks $algo for the $bytes B all-reduce on every rank"
  [ "$algo" != same ] || name="mpirun: the tuner picks one algorithm for the $bytes B all-reduce on every rank"
  if [ $MH_HAVE_MPIRUN -eq 0 ]; then mh_ok "$name # SKIP no mpirun"; return; fi
  mh_mpirun WEFT_DEBUG=INFO WEFT_TUNER_TRACE=1 -- \
    ./all_reduce_perf -b "$bytes" -e "$bytes" -n 2 -w 1 -c 1 -d float -o sum
  rc=$?
  sed -n "s/.*\\[\\([0-9]*\\)\\] weft INFO tuner: all_reduce .*, $bytes B, .*: \\([a-z_]*\\) (.*/\\1 \\2/p" \
    "$mh_out" | sort -u >"$MH_DIR/picks"
  picked=$(awk '{ print $2 }' "$MH_DIR/picks" | sort -u | tr '\n' ' ' | sed 's/ $//')
  ranks=$(awk '{ print $1 }' "$MH_DIR/picks" | sort -u | wc -l)
  echo "# picked on the $ranks ranks that traced: $picked"
  if ! mh_results_exact $rc; then mh_not_ok "$name"; return; fi
  if [ "$ranks" -ne $MH_N ] || [ "$(echo $picked | wc -w)" -ne 1 ] ||
     { [ "$algo" != same ] && [ "$picked" != "$algo" ]; }; then
    mh_not_ok "$name" quiet; return
  fi
  mh_ok "$name ($picked)"
}

# mh_check_picked NAME ALGO ENV... -- PROGRAM ARGS...: the perf run under mpirun, with -J,
# is exact and every JSON row records ALGO as the algorithm weft ran (weft_get_algorithm),
# so the tuner's choice is checked per size, datatype and root.
mh_check_picked() {
  name=$1; algo=$2; shift 2
  if [ $MH_HAVE_MPIRUN -eq 0 ]; then mh_ok "$name # SKIP no mpirun"; return; fi
  rm -f "$MH_DIR/rows.json"
  mh_mpirun "$@" -J "$MH_DIR/rows.json"
  rc=$?
  if ! mh_results_exact $rc; then mh_not_ok "$name"; return; fi
  # Each result's "weft" object records the algorithm run (the config's "weft" what was
  # asked). Rows of 0 elements per rank (8 B over 4 ranks of a 8-byte type) move nothing:
  # any choice.
  python3 -c 'import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    if r["count"] > 0: print(r["weft"]["algorithm"])' "$MH_DIR/rows.json" >"$MH_DIR/algos" 2>&1
  nrows=$(wc -l <"$MH_DIR/algos")
  others=$(grep -cvx "$algo" "$MH_DIR/algos")
  if [ "$nrows" -eq 0 ] || [ "$others" -ne 0 ]; then
    echo "# $nrows JSON rows, $others not $algo: $(sort "$MH_DIR/algos" | uniq -c | tr '\n' ' ')"
    mh_not_ok "$name" quiet; return
  fi
  mh_ok "$name ($nrows rows, all $algo)"
}

# weft-topo across the hosts under mpirun: the matrix names MH_K hosts with NET between them,
# the ring order keeps each host's ranks together (MH_K - 1 host boundaries), and --probe
# measures every pair (small sizes: the point is that it runs, not the figures).
mh_check_topo() {
  name="mpirun: weft-topo --probe prints $MH_K hosts, NET links and a host-contiguous ring"
  if [ $MH_HAVE_MPIRUN -eq 0 ]; then mh_ok "$name # SKIP no mpirun"; return; fi
  [ -x ./weft-topo ] || { mh_ok "$name # SKIP weft-topo not built"; return; }
  mh_mpirun -- ./weft-topo --probe --lat-iters 5 --bw-bytes 64K --bw-iters 2
  rc=$?
  ring=$(grep '^Ring order' "$mh_out")
  bars=$(echo "$ring" | sed 's/.*: //' | tr -cd '|' | wc -c)
  if [ $rc -eq 0 ] && grep -q "^weft-topo: $MH_N ranks on $MH_K hosts" "$mh_out" &&
     grep -q '^rank0 .*NET' "$mh_out" && [ "$bars" -eq $((MH_K - 1)) ] &&
     grep -qi 'latency' "$mh_out"; then
    echo "# $ring"
    mh_ok "$name"
  else
    echo "# exit status $rc; ring line: $ring"
    mh_not_ok "$name"
  fi
}

# weft-topo under mpirun (ib runs): every host lists its emulated HCA, and every rank has one.
mh_check_hcas() {
  name="mpirun: weft-topo lists each host's emulated HCA"
  if [ $MH_HAVE_MPIRUN -eq 0 ]; then mh_ok "$name # SKIP no mpirun"; return; fi
  [ -x ./weft-topo ] || { mh_ok "$name # SKIP weft-topo not built"; return; }
  mh_mpirun -- ./weft-topo
  rc=$?
  cp "$mh_out" "$MH_DIR/weft-topo.txt"
  hcas=$(grep -c 'weftemu0' "$mh_out")
  if [ $rc -eq 0 ] && [ "$hcas" -ge $MH_K ]; then
    grep -i 'weftemu\|^weft-topo:\|^host\|HCA' "$mh_out" | head -n 20 | sed 's/^/# /'
    mh_ok "$name"
  else
    echo "# exit status $rc, $hcas lines name weftemu0"
    mh_not_ok "$name"
  fi
}
