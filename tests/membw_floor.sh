#!/bin/sh
# membw_floor.sh: perf/membw_floor runs every collective form and prints its row (TAP). Every
# form checks both of its outputs element by element (else exit 1), so a floor that skips or
# misplaces work fails here rather than reading fast in make bench. The size is not a multiple
# of the 64 KiB chunk (a partial last chunk) nor of all_reduce_plain's slot.
. "$(dirname "$0")/tap.sh"
tool=./membw_floor
if [ ! -x "$tool" ]; then
  echo "1..0 # SKIP membw_floor not built"
  exit 0
fi
colls="all_reduce all_reduce_fused all_reduce_plain all_gather reduce_scatter all_to_all broadcast"
echo "1..8"
for coll in $colls; do
  rows_ok "membw_floor -c $coll: 2 rows, outputs checked" 2 \
    "^{\"coll\": \"$coll\", \"size\": [0-9]*, \"time_us\": [0-9.]*, \"busbw\": [0-9.]*}$" \
    "$tool" -c "$coll" -b 1000000 -e 2000000 -n 3 -w 2
done
# all_reduce_plain's FIFOs at their smallest: 2 slots of 4 KiB, so the slots wrap hundreds of
# times a pass and the last piece is partial.
rows_ok "membw_floor -c all_reduce_plain -s 4K -k 2: 1 row, outputs checked" 1 \
  "^{\"coll\": \"all_reduce_plain\", \"size\": 1000000, \"time_us\": [0-9.]*, \"busbw\": [0-9.]*}$" \
  "$tool" -c all_reduce_plain -b 1000000 -e 1000000 -s 4K -k 2 -n 3 -w 2
[ $failed -eq 0 ]
