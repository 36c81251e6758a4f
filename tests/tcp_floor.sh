#!/bin/sh
# tcp_floor.sh: perf/tcp_floor runs on one, two and three loopback connections and prints its
# rows (TAP). It checks every received byte (a pattern that differs between the two ranks and
# along the buffer), so a part landing at the wrong place fails here rather than reading fast.
# Sizes that no count of connections divides evenly (uneven parts).
. "$(dirname "$0")/tap.sh"
tool=./tcp_floor
if [ ! -x "$tool" ]; then
  echo "1..0 # SKIP tcp_floor not built"
  exit 0
fi
echo "1..6"
for ns in 1 2 3; do
  rows_ok "tcp_floor -s $ns: 2 rows, every byte checked" 2 \
    '^{"size": [0-9]*, "time_us": [0-9.]*, "GBps": [0-9.]*}$' "$tool" -s "$ns" -b 1000001 -e 2000002 -n 2 -w 1
done
rows_ok "tcp_floor -r 0: the kernel's autotuning" 1 '^# receive buffer: the kernel' "$tool" -r 0 -b 1M -e 1M -n 1 -w 0
rows_ok "tcp_floor -r 256K: a fixed receive buffer" 1 '^# SO_RCVBUF 262144 bytes asked' "$tool" -r 256K -b 1M -e 1M -n 1 -w 0
out=$("$tool" -s 0 2>&1)
rc=$?
if [ "$rc" != 0 ] && echo "$out" | grep -q "NSOCKS"; then
  ok "tcp_floor -s 0 is refused, naming NSOCKS"
else
  not_ok "tcp_floor -s 0 (exit $rc)"
  echo "$out" | sed 's/^/# /'
fi
[ $failed -eq 0 ]
