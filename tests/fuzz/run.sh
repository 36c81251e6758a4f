#!/bin/sh
# run.sh BUILD SEEDS SECONDS NAME...: `make fuzz`: runs each libFuzzer target
# BUILD/tests/fuzz/fuzz_NAME for SECONDS on a working corpus BUILD/fuzz-corpus/NAME (the
# seeds of SEEDS/NAME copied in first, so the tree's seeds never grow), then prints one line
# per target: executions, seconds, corpus size, and the crash files (BUILD/fuzz-artifacts/).
# Exits 1 when any target crashed, leaked, tripped a sanitizer or a property check.
set -u
build=$1 seeds=$2 secs=$3
shift 3
bad=0
mkdir -p "$build/fuzz-artifacts"
for name in "$@"; do
  prog=$build/tests/fuzz/fuzz_$name
  corpus=$build/fuzz-corpus/$name
  log=$build/fuzz-artifacts/$name.log
  mkdir -p "$corpus"
  cp "$seeds/$name"/* "$corpus"/ 2>/dev/null
  # -max_len: the largest input a target reads (8 topology summaries are ~15 KiB).
  maxlen=4096
  case $name in topo_summary) maxlen=65536 ;; topo_xml) maxlen=16384 ;; esac
  "$prog" "$corpus" -max_total_time="$secs" -max_len=$maxlen -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$name-" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  files=$(ls "$corpus" | wc -l)
  if [ $rc -eq 0 ]; then
    echo "fuzz $name: ok: ${execs:-?} executions in ${took:-?} s, corpus $files files"
  else
    bad=1
    echo "fuzz $name: FAILED (exit $rc) after ${execs:-?} executions; log $log:"
    grep -E "ERROR|SUMMARY|property failed|Test unit written" "$log" | head -8 | sed 's/^/  /'
  fi
done
exit $bad
