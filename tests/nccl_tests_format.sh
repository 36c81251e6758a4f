#!/bin/sh
# nccl_tests_format.sh: TAP test that weft's perf programs print what scripts written for
# nccl-tests read, run from the build directory by `make check`. tests/nccl_tests_format.py
# is a strict reader of nccl-tests' formats (fixed column widths from its printf formats,
# the header and footer lines, the -J JSON document's keys and value types); it must accept
# a sample built from nccl-tests' own formats (tests/data/nccl-tests-2.19-*) and weft's
# output alike, and reject near misses. Then make compare's report must read weft's -J
# documents. About 20 seconds.

. "$(dirname "$0")/tap.sh"
cd "${WEFT_TOP_BUILDDIR:-.}" || { echo "1..0 # SKIP no build dir"; exit 0; }
command -v python3 >/dev/null 2>&1 || { echo "1..0 # SKIP no python3"; exit 0; }
src=$(cd "$(dirname "$0")/.." && pwd)
fmt="python3 $src/tests/nccl_tests_format.py"
dir=$(mktemp -d "${TMPDIR:-/tmp}/nccl_tests_format.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
TAP_LOG=$dir/log
TAP_TAIL=20
# check NAME COMMAND...: ok when COMMAND exits 0; its output goes to the log.
check() {
  name=$1; shift
  if "$@" >"$dir/log" 2>&1; then ok "$name"; else not_ok "$name"; fi
}

echo "1..9"
check "the reader rejects rows that are off by a column or a width" $fmt selftest
check "the reader accepts nccl-tests 2.19's text (sample from its printf formats)" \
  $fmt text "$src/tests/data/nccl-tests-2.19-all_reduce_perf.txt" --rows 25 --extra 0
check "the reader accepts nccl-tests 2.19's -J document" \
  $fmt json "$src/tests/data/nccl-tests-2.19-all_reduce_perf.json" --rows 25 \
  --text "$src/tests/data/nccl-tests-2.19-all_reduce_perf.txt"

timeout 120 ./weftrun -n 2 ./all_reduce_perf -b 8 -e 4M -f 4 -n 5 -J "$dir/ar.json" >"$dir/ar.txt" 2>"$dir/ar.err"
rc=$?
check "all_reduce_perf prints nccl-tests' 13 columns, header and footer (exit $rc)" \
  $fmt text "$dir/ar.txt" --rows 10 --extra 0
check "all_reduce_perf -J writes nccl-tests' document, weft's extras under \"weft\"" \
  $fmt json "$dir/ar.json" --rows 10 --own-key weft --text "$dir/ar.txt"

# The optional columns where nccl-tests puts them (-I per half, -S last) and weft's -L after
# them; at 64 MiB the times pass 10 ms and must still fit their 7 characters.
timeout 120 ./weftrun -n 2 ./broadcast_perf -b 64 -e 64M -f 1024 -n 3 -w 0 -r all -I 1 -S 1 -L 1 \
  -J "$dir/bc.json" >"$dir/bc.txt" 2>"$dir/bc.err"
rc=$?
check "broadcast_perf -I 1 -S 1 -L 1 -r all: the extra columns fit at every size (exit $rc)" \
  $fmt text "$dir/bc.txt" --rows 6
check "broadcast_perf -I 1 -J: per-iteration objects in nccl-tests' document" \
  $fmt json "$dir/bc.json" --rows 6 --own-key weft --text "$dir/bc.txt"

# A -J path that exists is kept: the document goes to PATH.0, as nccl-tests does.
: >"$dir/taken.json"
timeout 60 ./weftrun -n 2 ./all_gather_perf -b 8 -e 8 -n 2 -J "$dir/taken.json" >"$dir/log" 2>&1
if [ ! -s "$dir/taken.json" ] && grep -q "Writing JSON output to $dir/taken.json.0" "$dir/log" &&
   $fmt json "$dir/taken.json.0" --rows 1 --own-key weft >>"$dir/log" 2>&1; then
  ok "-J on an existing file writes FILE.0 and says so"
else
  not_ok "-J on an existing file writes FILE.0 and says so"
fi

# make compare's report reads weft's -J documents (weft alone, small sizes, one round).
if COMPARE_LIBS=weft COMPARE_COLLS="all_reduce broadcast" COMPARE_MAXBYTES=64K COMPARE_SMALL_ITERS=20 \
   COMPARE_ROUNDS=1 COMPARE_OUT="$dir/compare" bash "$src/perf/compare/run.sh" >"$dir/log" 2>&1 &&
   [ "$(grep -cE '^\| (8|64K) \| [0-9.]+ \|' "$dir/compare/compare.md")" -eq 4 ]; then
  ok "make compare's report reads weft's rows (busbw at 8 B and 64 KiB for both collectives)"
else
  cat "$dir/compare/compare.md" >>"$dir/log" 2>/dev/null
  not_ok "make compare's report reads weft's rows (busbw at 8 B and 64 KiB for both collectives)"
fi
[ $failed -eq 0 ]
