#!/bin/sh
# trainers_report.sh: make bench-trainers' report (trainers/bench/report.py) takes the scaling
# ceiling within a round (TAP). Fabricated logs whose step times are known: the 1-rank run,
# the 2-rank run and the 2-rank --sync-only run disagree from round to round, so a report
# that took each run's median over the rounds and divided those, or paired one round's
# ceiling with another's 1-rank run, prints other figures. Under a second; needs only python3.

. "$(dirname "$0")/tap.sh"
command -v python3 >/dev/null 2>&1 || { echo "1..0 # SKIP no python3"; exit 0; }
src=$(cd "$(dirname "$0")/.." && pwd)
tap_workdir trainers_report

log() { # impl ranks round step_ms: a weft-train-ddp log of 8 steps of 2048 tokens per rank, warm-up 2
  {
    echo "# bench: impl $1 model small ranks $2 round $3 warmup 2 peak 1000.0 bind core"
    echo "# batch 16 per rank x accum 1 x $2 ranks = $((16 * $2)) sequences ($((2048 * $2)) tokens) per step"
    echo "# peak per rank: 1000.0 GFLOP/s (given), sgemm 512^3 900.0 GFLOP/s on OpenBLAS 0.3.21 core SkylakeX (test)"
    echo "# 10.000 MFLOP/token; MFU = that x tokens/s / ($2 ranks x peak)"
    for s in 1 2 3 4 5 6 7 8; do
      ms=$4
      [ $s -le 2 ] && ms=999.0
      echo "     $s   3.000000   1.0000    $ms      1000  50.0%      1.0      0.5    200.0"
    done
  } >"$dir/small-r$2-$1-$3.log"
}
# Round 1: 1 rank 100 ms, 2 ranks 110, --sync-only 105: ceiling 95.2%, weft 90.9% (0.95 of it).
# Round 2: 1 rank 100 ms, 2 ranks 100, --sync-only 125: ceiling 80.0%, weft 100.0% (1.25).
# Round 3: 1 rank 80 ms, 2 ranks 100, --sync-only 100: ceiling 80.0%, weft 80.0% (1.00).
# Medians over rounds (1 rank 100, 2 ranks 100, sync 105) would give a ceiling of 95.2%.
log weft 1 1 100.0; log weft 2 1 110.0; log sync 2 1 105.0
log weft 1 2 100.0; log weft 2 2 100.0; log sync 2 2 125.0
log weft 1 3 80.0;  log weft 2 3 100.0; log sync 2 3 100.0
python3 "$src/trainers/bench/report.py" "$dir" >"$dir/report" 2>>"$dir/log"
cat "$dir/report" >>"$dir/log"
if grep -q "small  round 1 95.2% (weft 90.9%), round 2 80.0% (weft 100.0%), round 3 80.0% (weft 80.0%)" "$dir/report"; then
  ok "the ceiling and weft's scaling, round by round"
else
  not_ok "expected round 1 95.2% (weft 90.9%), round 2 80.0% (weft 100.0%), round 3 80.0% (weft 80.0%)"
fi
if grep -q "ceiling median 80.0% (80.0-95.2%).*weft's scaling / ceiling median 1.00 (0.95-1.25)" "$dir/report"; then
  ok "the ceiling's median and weft against it are taken per round"
else
  not_ok "expected ceiling median 80.0% (80.0-95.2%), weft / ceiling 1.00 (0.95-1.25)"
fi
# The target itself reads the medians of the runs (1 rank 100 ms, 2 ranks 100): 100.0%.
if grep -q "scaling 1->2 ranks >= 97% *100.0% (torch -, ceiling 80.0%) *PASS" "$dir/report"; then
  ok "the scaling target names its ceiling"
else
  not_ok "expected the scaling target's line to read 100.0% and name the ceiling 80.0%"
fi
echo "1..$n"
[ $failed -eq 0 ]
