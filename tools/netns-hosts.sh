#!/bin/sh
# netns-hosts.sh: emulates K hosts on this machine with network namespaces, for tests that
# need ranks on "different hosts" (socket transport between hosts, shm within one) and for
# launching them with mpirun (tools/netns-rsh.sh) or torchrun-style environment variables.
#
#   netns-hosts.sh up NAME K      create hosts NAME-h0 .. NAME-h(K-1)
#   netns-hosts.sh down NAME      remove them, their links and the bridge (idempotent)
#   netns-hosts.sh exec HOST CMD  run CMD on HOST: in its namespace, under its hostname
#   netns-hosts.sh addr HOST      print HOST's IPv4 address
#   netns-hosts.sh subnet NAME    print the hosts' subnet, e.g. 198.18.7.0/24
#   netns-hosts.sh hosts NAME     print the host names, one a line
#
# Layout: a bridge NAME-br in the root namespace holds 198.x.y.254/24 (so mpirun, running
# in the root namespace, can be reached by the orteds); host i is namespace NAME-hi whose
# interface veth0 (peer NAME-vi on the bridge) holds 198.x.y.(i+1)/24, with lo up. Every
# host's hostname is its namespace's name. Addresses come only from 198.18.0.0/15 (RFC 2544
# benchmarking); each run takes a free /24 of it, so concurrent runs with distinct NAMEs
# (use the PID) do not collide. Interface names are limited to 15 characters, hence NAME
# to 10. Needs root, iproute2 and util-linux's unshare.
set -eu

die() { echo "netns-hosts.sh: $*" >&2; exit 1; }

check_name() {
  case "$1" in
    '' | *[!A-Za-z0-9_]*) die "NAME must be letters, digits or _: '$1'" ;;
  esac
  [ ${#1} -le 10 ] || die "NAME must be at most 10 characters: '$1'"
}

# A /24 of 198.18.0.0/15 with no address or route on this machine yet, starting from a
# PID-derived index so concurrent runs usually start apart.
free_subnet() {
  i=$(( $$ % 512 )); tries=0
  while [ $tries -lt 512 ]; do
    net="198.$((18 + i / 256)).$((i % 256))"
    if [ -z "$(ip -4 route show "$net.0/24" 2>/dev/null)" ] &&
       ! ip -4 -o addr show | grep -q " $net\."; then
      echo "$net"; return 0
    fi
    i=$(( (i + 1) % 512 )); tries=$((tries + 1))
  done
  die "no free /24 left in 198.18.0.0/15"
}

up() {
  name=$1; k=$2
  case "$k" in '' | *[!0-9]*) die "K must be a number: '$k'" ;; esac
  if [ "$k" -lt 1 ] || [ "$k" -gt 99 ]; then die "K must be 1..99"; fi
  [ ! -e "/sys/class/net/$name-br" ] || die "bridge $name-br exists already"
  # Choosing a subnet and claiming it with the bridge's address is one step for
  # concurrent runs (lock released when this script exits).
  if command -v flock >/dev/null 2>&1; then
    exec 9>/run/weft-netns-hosts.lock
    flock -w 10 9 || die "cannot lock /run/weft-netns-hosts.lock"
  fi
  net=$(free_subnet)
  trap 'down "$name"' EXIT  # a failure half way leaves nothing behind
  ip link add "$name-br" type bridge
  ip addr add "$net.254/24" dev "$name-br"
  ip link set "$name-br" up
  i=0
  while [ "$i" -lt "$k" ]; do
    ns="$name-h$i"
    ip netns add "$ns"
    # The peer is created directly inside the namespace, so its fixed name veth0 never
    # meets another run's veth0 in the root namespace.
    ip link add "$name-v$i" type veth peer name veth0 netns "$ns"
    ip link set "$name-v$i" master "$name-br" up
    ip -n "$ns" addr add "$net.$((i + 1))/24" dev veth0
    ip -n "$ns" link set veth0 up
    ip -n "$ns" link set lo up
    i=$((i + 1))
  done
  trap - EXIT
}

hosts() {
  ip netns list | awk -v p="$1-h" 'index($1, p) == 1 { print $1 }' | sort -t h -k 2 -n
}

# Kills what still runs inside a host (the processes are ours: they live in our
# namespace), then removes the namespace; the veth pair goes with it.
down() {
  name=$1
  for ns in $(hosts "$name"); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086 # one PID a word
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  for link in /sys/class/net/"$name"-v*; do
    if [ -e "$link" ]; then ip link del "${link##*/}" 2>/dev/null || true; fi
  done
  [ ! -e "/sys/class/net/$name-br" ] || ip link del "$name-br"
}

# Checks HOST is one of ours, i.e. a namespace named like NAME-hN.
check_host() {
  case "$1" in
    *-h[0-9]*) ;;
    *) die "not an emulated host: '$1'" ;;
  esac
  [ -e "/run/netns/$1" ] || die "no such emulated host: '$1'"
}

cmd=${1:-}
[ $# -ge 2 ] || die "usage: netns-hosts.sh up NAME K | down NAME | exec HOST CMD... | addr HOST | subnet NAME | hosts NAME"
shift
case "$cmd" in
  up) check_name "$1"; [ $# -eq 2 ] || die "usage: up NAME K"; up "$1" "$2" ;;
  down) check_name "$1"; down "$1" ;;
  hosts) check_name "$1"; hosts "$1" ;;
  subnet)
    check_name "$1"
    ip -4 -o addr show dev "$1-br" | awk '{ sub(/\.[0-9]+\//, ".0/", $4); print $4; exit }' ;;
  addr)
    check_host "$1"
    ip -n "$1" -4 -o addr show dev veth0 | awk '{ sub(/\/.*/, "", $4); print $4; exit }' ;;
  exec)
    check_host "$1"
    host=$1; shift
    [ $# -ge 1 ] || die "usage: exec HOST CMD..."
    # A UTS namespace of its own gives the command the host's hostname.
    # shellcheck disable=SC2016 # expanded by the inner sh
    exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$@" ;;
  *) die "unknown command '$cmd'" ;;
esac
