#!/bin/sh
# netns-rsh.sh: Open MPI's remote-shell agent for hosts emulated by tools/netns-hosts.sh:
#   mpirun --mca plm_rsh_agent /path/tools/netns-rsh.sh --hostfile FILE ...
# mpirun calls it as ssh would be called, "netns-rsh.sh [options] HOST WORDS...", and it runs
# WORDS joined by spaces through sh, as the remote shell would, but inside HOST's network
# namespace and under HOST's hostname, keeping stdin, stdout and stderr. So mpirun really
# starts its daemons (orted), and through them the ranks, on the other "hosts".
set -eu
# ssh options mpirun may add (such as -x): nothing to forward, no X11, so skip them.
while [ $# -gt 0 ]; do
  case "$1" in
    -[1246AaCfgKkMNnqsTtVvXxYy]*) shift ;;
    -*) shift; [ $# -gt 0 ] && shift ;;  # options with an argument (-p PORT, -l USER, ...)
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "netns-rsh.sh: usage: netns-rsh.sh HOST COMMAND..." >&2; exit 255; }
host=$1
shift
exec "$(dirname "$0")/netns-hosts.sh" exec "$host" sh -c "$*"
