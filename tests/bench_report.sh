#!/bin/sh
# bench_report.sh: make bench's report (perf/bench/report.py) takes its ceilings within a
# round (TAP). A fabricated bench directory whose numbers are known: weft, Open MPI and the
# per-round floors (perf/compare's COMPARE_FLOOR=1 files) disagree from round to round, and a
# floor.jsonl measured "after the sweeps" disagrees with all of them, so a report that
# ignored the rounds, or paired one round's floor with another's times, prints other figures.
# Under a second; needs only python3.

. "$(dirname "$0")/tap.sh"
command -v python3 >/dev/null 2>&1 || { echo "1..0 # SKIP no python3"; exit 0; }
src=$(cd "$(dirname "$0")/.." && pwd)
tap_workdir bench_report
mkdir -p "$dir/shm/raw"
m=16777216
# busbw = S / t x factor (n = 2: all-reduce 1, all-gather 1/2), t in us: S / t / 1e3 GB/s.
row() { # coll lib rounds_us(r1 r2 r3): median time and busbw, and every round
  bw=$(python3 -c "import sys; f = 1.0 if '$1' == 'all_reduce' else 0.5; print($m / $4 / 1e3 * f)")
  echo "{\"coll\": \"$1\", \"lib\": \"$2\", \"size\": $m, \"time_us\": $4, \"busbw\": $bw, \"wrong\": 0," \
    "\"rounds\": 3, \"round_us\": {\"1\": $3, \"2\": $4, \"3\": $5}}"
}
{
  row all_gather weft 100 100 100
  row all_gather mpi 300 150 300
  row all_reduce weft 100 100 100
  row all_reduce mpi 1000 1000 1000
} >"$dir/shm/compare.jsonl"
# all-gather floor per round 50, 100, 50 us: weft/floor 0.5, 1.0, 0.5; ceiling 6, 1.5, 6.
for r in 1 2 3; do
  f=$([ $r = 2 ] && echo 100 || echo 50)
  echo "{\"coll\": \"all_gather\", \"size\": $m, \"time_us\": $f, \"busbw\": 1}" >"$dir/shm/raw/all_gather.floor.r$r.jsonl"
done
# all-reduce: the faster of the two forms counts: 80, 60, 70 us, so weft/floor 0.8, 0.6, 0.7.
printf '%s\n' "{\"coll\": \"all_reduce\", \"size\": $m, \"time_us\": 90, \"busbw\": 1}" \
  "{\"coll\": \"all_reduce_fused\", \"size\": $m, \"time_us\": 80, \"busbw\": 1}" >"$dir/shm/raw/all_reduce.floor.r1.jsonl"
printf '%s\n' "{\"coll\": \"all_reduce_fused\", \"size\": $m, \"time_us\": 60, \"busbw\": 1}" \
  "{\"coll\": \"all_reduce\", \"size\": $m, \"time_us\": 65, \"busbw\": 1}" >"$dir/shm/raw/all_reduce.floor.r2.jsonl"
printf '%s\n' "{\"coll\": \"all_reduce\", \"size\": $m, \"time_us\": 70, \"busbw\": 1}" >"$dir/shm/raw/all_reduce.floor.r3.jsonl"
# The floor "after the sweeps": 1 GB/s, below everything (x/floor > 1 if it were used).
printf '%s\n' "{\"coll\": \"all_gather\", \"size\": $m, \"time_us\": 8000, \"busbw\": 1.0}" \
  "{\"coll\": \"all_reduce_fused\", \"size\": $m, \"time_us\": 16000, \"busbw\": 1.0}" >"$dir/floor.jsonl"

python3 "$src/perf/bench/report.py" "$dir" >"$dir/report" 2>"$dir/log"
rc=$?
cat "$dir/report" >>"$dir/log"
echo "1..18"
if [ $rc = 0 ]; then ok "report.py reads the fabricated bench (exit 0)"; else not_ok "report.py exits $rc"; fi
# all-gather at 16M, per round: weft/floor 0.5, 1.0, 0.5; MPI/floor 0.17, 0.67, 0.17; floor/MPI
# 6, 1.5, 6. (From the medians alone, 100 and 150 us against the 50 us floor: 0.50, 0.33, 3.00x.)
ag=$(sed -n '/^## all_gather: busbw vs Open MPI/,/^## /p' "$dir/report" | grep '^| 16M ')
case $ag in
  *"| 0.50 | 0.17 | 6.00x |"*) ok "all-gather 16M: weft/floor 0.50, MPI/floor 0.17, ceiling 6.00x (medians of per-round ratios)" ;;
  *) echo "# row: $ag" >>"$dir/log"; not_ok "all-gather 16M: expected weft/floor 0.50, MPI/floor 0.17, ceiling 6.00x" ;;
esac
# Its per-round column: the busbw ratio of each round is Open MPI's time over weft's, 300/100,
# 150/100, 300/100 (a median-only report has no such column; one that divided busbw the other
# way round would read 0.33-0.67x).
case $ag in
  *"| 6.00x | 1.50-3.00x |"*) ok "all-gather 16M: busbw ratio per round 1.50-3.00x beside the median" ;;
  *) not_ok "all-gather 16M: expected a per-round busbw ratio of 1.50-3.00x after the ceiling" ;;
esac
if sed -n '/^## all_gather: busbw vs Open MPI/,/^## /p' "$dir/report" |
   grep -q '^- floor columns: medians of per-round ratios'; then
  ok "the table says its floor columns are per round"
else
  not_ok "the table says its floor columns are per round"
fi
ar=$(sed -n '/^## all-reduce busbw vs the two-thread memory-bandwidth floor/,/^## /p' "$dir/report" | grep '^| 16M ')
case $ar in
  *"| 0.70x | 0.8x | 0.60-0.80x | MISS |"*) ok "all-reduce 16M vs floor: 0.70x, per round 0.60-0.80x (faster form each round)" ;;
  *) echo "# row: $ar" >>"$dir/log"; not_ok "all-reduce 16M vs floor: expected 0.70x, 0.60-0.80x" ;;
esac
# With DIR/floor_ab (make bench's interleaved floor rounds) the floor target reads weft's
# out-of-place busbw against the fused floor of the same round, and an in-place table is shown
# beside it: out of place 4, 5, 6 GB/s (0.4, 0.5, 0.6 of a 10 GB/s floor), in place 6, 7, 8.
mkdir -p "$dir/ab/floor_ab" && cp -r "$dir/shm" "$dir/ab/shm"
for r in 1 2 3; do
  echo "{\"coll\": \"all_reduce_fused\", \"size\": $m, \"time_us\": 1600, \"busbw\": 10}" >"$dir/ab/floor_ab/floor.r$r.jsonl"
  echo "{\"results\": [{\"size\": $m, \"out_of_place\": {\"bus_bw\": $((r + 3)), \"nwrong\": 0}," \
    "\"in_place\": {\"bus_bw\": $((r + 5)), \"nwrong\": 0}}]}" >"$dir/ab/floor_ab/weft_R0.r$r.16M.json"
done
# The two-copy floor of the same rounds (membw_floor -c all_reduce_plain): 5, 9, 6 GB/s, so
# 0.5, 0.9, 0.6 of the fused floor per round, and weft/two-copy 0.80, 0.56, 1.00 (from the
# medians alone weft/two-copy would read 0.83).
for r in 1 2 3; do
  bw=$(echo "5 9 6" | cut -d' ' -f$r)
  echo "{\"coll\": \"all_reduce_plain\", \"size\": $m, \"time_us\": 1600, \"busbw\": $bw}" >"$dir/ab/floor_ab/plain.r$r.jsonl"
done
python3 "$src/perf/bench/report.py" "$dir/ab" >"$dir/report_ab" 2>>"$dir/log"
cat "$dir/report_ab" >>"$dir/log"
out=$(sed -n '/^## all-reduce busbw vs the two-thread memory-bandwidth floor/,/^## /p' "$dir/report_ab" | grep '^| 16M ')
case $out in
  *"| 0.50x | 0.8x | 0.40-0.60x | MISS |"*) ok "floor_ab: the target reads the out-of-place busbw (0.50x, 0.40-0.60x)" ;;
  *) echo "# row: $out" >>"$dir/log"; not_ok "floor_ab: expected the out-of-place 0.50x, 0.40-0.60x" ;;
esac
inp=$(sed -n '/^## all-reduce in place (as PyTorch DDP calls it)/,/^## /p' "$dir/report_ab" | grep '^| 16M ')
case $inp in
  *"| 0.70x | 0.8x | 0.60-0.80x | MISS |"*) ok "floor_ab: the in-place table reads the in-place busbw (0.70x, 0.60-0.80x)" ;;
  *) echo "# row: $inp" >>"$dir/log"; not_ok "floor_ab: expected an in-place row of 0.70x, 0.60-0.80x" ;;
esac
pl=$(sed -n '/^## the floor target on plain buffers/,/^## /p' "$dir/report_ab")
case $(echo "$pl" | grep '^| 16M ') in
  *"| 6 | 10 | 0.60 | 0.50-0.90 | 0.80 | 0.56-1.00 | two copies below 0.8 |"*)
    ok "floor_ab: the two-copy floor 0.60 of the fused (0.50-0.90), weft 0.80 of it (0.56-1.00), per round" ;;
  *) echo "# table: $pl" >>"$dir/log"; not_ok "floor_ab: expected two-copy/fused 0.60 and weft/two-copy 0.80 per round" ;;
esac
if echo "$pl" | grep -q '^- 1 of 1 sizes where weft missed 0.8 of the fused floor have a two-copy floor below'; then
  ok "the missed size is counted as one whose two-copy floor is below the target"
else
  not_ok "the missed size is counted as one whose two-copy floor is below the target"
fi
# A sweep whose Open MPI did not run (perf/compare/run.sh's raw/skipped.txt) fails the report,
# naming the sweep and the reason; Gloo's absence alone does not (it is no target's peer).
mkdir -p "$dir/nompi" && cp -r "$dir/shm" "$dir/nompi/shm"
echo "Gloo: /usr/include/gloo not found (run perf/compare/install-peers.sh)" >"$dir/nompi/shm/raw/skipped.txt"
python3 "$src/perf/bench/report.py" "$dir/nompi" >"$dir/report_gloo" 2>>"$dir/log"
rc=$?
if [ $rc = 0 ]; then ok "a sweep without Gloo still reports (exit 0)"; else not_ok "a sweep without Gloo: exit $rc"; fi
echo "Open MPI: mpi_bench did not build (see raw/mpi_build.log)" >>"$dir/nompi/shm/raw/skipped.txt"
python3 "$src/perf/bench/report.py" "$dir/nompi" >"$dir/report_nompi" 2>>"$dir/log"
rc=$?
cat "$dir/report_nompi" >>"$dir/log"
if [ $rc != 0 ] &&
   grep -q '^- FAILED: Open MPI did not run in sweep shm: mpi_bench did not build' "$dir/report_nompi"; then
  ok "a sweep without Open MPI fails the report (exit $rc) and says which and why"
else
  not_ok "a sweep without Open MPI: exit $rc, expected 1 and a FAILED line naming sweep shm"
fi
# Sweep shm_more (reduce, gather, scatter, sendrecv; np=2): the same latency and busbw targets,
# no floor. At 8 B Open MPI takes 2, 0.5, 1, 3 us against weft's 1 (gather misses: 0.50x); at
# 16 MiB twice weft's 100 us (2.00x: every busbw table passes 1.5x).
more_row() { # coll lib size time_us: busbw = S / t x factor (n = 2: gather, scatter 1/2)
  bw=$(python3 -c "print($3 / $4 / 1e3 * (0.5 if '$1' in ('gather', 'scatter') else 1.0))")
  echo "{\"coll\": \"$1\", \"lib\": \"$2\", \"size\": $3, \"time_us\": $4, \"busbw\": $bw," \
    "\"wrong\": 0, \"rounds\": 3, \"round_us\": {\"1\": $4, \"2\": $4, \"3\": $4}}"
}
mkdir -p "$dir/more/shm_more" && cp -r "$dir/shm" "$dir/more/shm"
for c in reduce:2 gather:0.5 scatter:1 sendrecv:3; do
  more_row "${c%:*}" weft 8 1
  more_row "${c%:*}" mpi 8 "${c#*:}"
  more_row "${c%:*}" weft $m 100
  more_row "${c%:*}" mpi $m 200
done >"$dir/more/shm_more/compare.jsonl"
python3 "$src/perf/bench/report.py" "$dir/more" >"$dir/report_more" 2>>"$dir/log"
rc=$?
cat "$dir/report_more" >>"$dir/log"
section() { sed -n "/^## $1/,/^## /p" "$dir/report_more"; }
lat=$(section "gather: latency vs Open MPI at every size, np=2" | grep '^| 8 ')
case $rc/$lat in
  "0/"*"| 0.50x | 1.0x |"*"| MISS |") ok "shm_more: gather 8 B latency 0.50x, MISS (exit 0)" ;;
  *) echo "# exit $rc, row: $lat" >>"$dir/log"; not_ok "shm_more: expected gather 8 B at 0.50x, MISS, exit 0" ;;
esac
case $(section "sendrecv: latency vs Open MPI at every size, np=2" | grep '^| 8 ') in
  *"| 3.00x | 1.0x |"*"| PASS |") ok "shm_more: sendrecv 8 B latency 3.00x, PASS" ;;
  *) not_ok "shm_more: expected sendrecv 8 B at 3.00x, PASS" ;;
esac
bw=$(section "reduce: busbw vs Open MPI at >= 16 MiB, np=2")
case $(echo "$bw" | grep '^| 16M ') in
  *"| 2.00x | 1.5x |"*"| PASS |")
    if echo "$bw" | grep -q 'floor'; then not_ok "shm_more: reduce's busbw table has no floor columns"
    else ok "shm_more: reduce 16M busbw 2.00x, PASS, no floor columns"; fi ;;
  *) not_ok "shm_more: expected reduce 16M busbw at 2.00x, PASS" ;;
esac
if grep -q '^- MISS: reduce, gather, scatter, sendrecv >= 1.0x Open MPI at every size (np=2)$' "$dir/report_more" &&
   grep -q '^- PASS: reduce, gather, scatter, sendrecv >= 1.5x at >= 16 MiB (np=2)$' "$dir/report_more"; then
  ok "shm_more: the Summary lists its two targets (latency MISS, busbw PASS)"
else
  not_ok "shm_more: expected Summary lines MISS (latency) and PASS (busbw) for reduce, gather, scatter, sendrecv"
fi
# Sweep np4_more (the same four, 4 ranks on 2 cores): the at-every-size target, one table each.
mkdir -p "$dir/more/np4_more"
for c in reduce:2 gather:2 scatter:0.5 sendrecv:2; do
  more_row "${c%:*}" weft 8 1
  more_row "${c%:*}" mpi 8 "${c#*:}"
done >"$dir/more/np4_more/compare.jsonl"
python3 "$src/perf/bench/report.py" "$dir/more" >"$dir/report_more4" 2>>"$dir/log"
case $(sed -n "/^## 4 ranks on 2 cores: scatter vs Open MPI/,/^## /p" "$dir/report_more4" | grep '^| 8 ') in
  *"| 0.50x | 1.0x |"*"| MISS |") ok "np4_more: scatter 8 B at 4 ranks 0.50x, MISS" ;;
  *) not_ok "np4_more: expected scatter 8 B at 4 ranks at 0.50x, MISS" ;;
esac
if grep -q '^- MISS: 4 ranks on 2 cores: reduce, gather, scatter, sendrecv >= Open MPI at every size$' \
  "$dir/report_more4"; then
  ok "np4_more: the Summary lists its target (MISS)"
else
  not_ok "np4_more: expected the Summary line MISS for 4 ranks on 2 cores: reduce, gather, scatter, sendrecv"
fi
if grep -q 'reduce, gather, scatter, sendrecv' "$dir/report"; then
  not_ok "without DIR/shm_more the report names no target of it"
else
  ok "without DIR/shm_more the report names no target of it"
fi
[ $failed -eq 0 ]
