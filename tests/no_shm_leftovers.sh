#!/bin/sh
# no_shm_leftovers.sh: TAP check run last by `make check`: the tests left nothing behind.
#
# 1. /dev/shm holds no entry whose name contains "weft" made during this run (newer than
#    tests/check-start.stamp, which make writes before the run's first test starts; every
#    entry when run alone): the shm transport uses memfd, which the kernel frees with its
#    last mapping, and the tests remove their verbs emulator directories. Older entries,
#    from a run killed before its clean-up, are listed but not counted.
# 2. No orphaned weft rank process: the test harness names its rank processes
#    "weft-rank-N" and reaps them all; one whose parent is no longer a test program was
#    leaked (tests still running in parallel under `make -j check` are not counted).

echo "1..2"

stamp=tests/check-start.stamp
if [ -f "$stamp" ]; then
  leftovers=$(find /dev/shm -maxdepth 1 -name '*weft*' -newer "$stamp" 2>/dev/null)
  find /dev/shm -maxdepth 1 -name '*weft*' ! -newer "$stamp" 2>/dev/null | sed 's/^/# older than this run, not counted: /'
else
  leftovers=$(find /dev/shm -maxdepth 1 -name '*weft*' 2>/dev/null)
fi
if [ -z "$leftovers" ]; then
  echo "ok 1 - no weft files left in /dev/shm"
else
  echo "not ok 1 - no weft files left in /dev/shm"
  echo "$leftovers" | sed 's/^/# left: /'
fi

orphans=""
for dir in /proc/[0-9]*; do
  comm=$(cat "$dir/comm" 2>/dev/null) || continue
  case "$comm" in
    weft-rank-*) ;;
    *) continue ;;
  esac
  ppid=$(awk '/^PPid:/ { print $2 }' "$dir/status" 2>/dev/null)
  pcomm=$(cat "/proc/$ppid/comm" 2>/dev/null)
  case "$pcomm" in
    test_*|lt-test_*) ;;
    *) orphans="$orphans ${dir#/proc/}($comm, parent $ppid $pcomm)" ;;
  esac
done
if [ -z "$orphans" ]; then
  echo "ok 2 - no leftover weft rank processes"
else
  echo "not ok 2 - no leftover weft rank processes"
  echo "# leftover:$orphans"
fi
