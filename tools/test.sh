#!/bin/sh
# Builds weft and runs the whole test suite (make check), then prints the totals as
# "N passed, N failed, N skipped".
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/tools/build.sh" || exit 1
cd "$top/build"
make -j"$(nproc)" check >make-check.out 2>&1
rc=$?
sed -n '/^===/,$p' make-check.out | head -40
grep -E "^(PASS|FAIL|ERROR|XPASS|SKIP):" make-check.out | grep -v "^PASS" | head -50
if [ $rc -ne 0 ]; then
  for log in $(grep -l -E "^(not ok|Bail out)" tests/*.log 2>/dev/null); do
    echo "--- $log (failures) ---"; grep -E -B2 -A8 "^(not ok|Bail out)" "$log" | head -60
  done
fi
count() { sed -n "s/^# $1: *\([0-9]*\).*/\1/p" make-check.out | tail -1; }
pass=$(count PASS); fail=$(count FAIL); err=$(count ERROR); skip=$(count SKIP); xpass=$(count XPASS)
fail=$(( ${fail:-0} + ${err:-0} + ${xpass:-0} ))
[ $rc -ne 0 ] && [ "$fail" -eq 0 ] && fail=1
echo "${pass:-0} passed, ${fail} failed, ${skip:-0} skipped"
exit $rc
