#!/bin/sh
# weftrun_perf.sh: end-to-end TAP test of weftrun and all_reduce_perf, run from the
# build directory by `make check`: real processes, both transports, every datatype and
# op, and weftrun's failure path (a rank's exit status becomes weftrun's).
# Every command runs under `timeout 120` so a hang fails the test instead of blocking.

cd "${WEFT_TOP_BUILDDIR:-.}" || { echo "1..0 # SKIP no build dir"; exit 0; }

n=0
failed=0
out=$(mktemp "${TMPDIR:-/tmp}/weftrun_perf.XXXXXX") || exit 1
trap 'rm -f "$out"' EXIT

ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
  n=$((n + 1)); failed=$((failed + 1))
  echo "not ok $n - $1"
  sed 's/^/# /' "$out" | tail -n 40
}

# check_perf NAME ENV-ASSIGNMENTS... -- WEFTRUN-ARGS...: exit 0, result rows whose
# two #wrong columns are all 0, and the nccl-tests footer.
check_perf() {
  name=$1; shift
  env_args=
  while [ "$1" != "--" ]; do env_args="$env_args $1"; shift; done
  shift
  # shellcheck disable=SC2086
  env $env_args timeout 120 ./weftrun "$@" >"$out" 2>&1
  rc=$?
  rows=$(grep -c '^ *[0-9]' "$out")
  bad=$(awk '/^ *[0-9]/ && ($9 != 0 || $13 != 0)' "$out" | wc -l)
  if [ $rc -eq 0 ] && [ "$rows" -gt 0 ] && [ "$bad" -eq 0 ] &&
     grep -q '^# Avg bus bandwidth' "$out" && grep -q '^# Out of bounds values : 0 OK' "$out"; then
    ok "$name ($rows rows)"
  else
    echo "# exit status $rc, $rows rows, $bad with wrong elements"
    not_ok "$name"
  fi
}

echo "1..6"

check_perf "all_reduce_perf on 2 ranks over shm" -- \
  -n 2 ./all_reduce_perf -b 8 -e 1M -f 4 -n 3 -w 1
check_perf "all_reduce_perf on 2 ranks over socket" WEFT_TRANSPORT=socket -- \
  -n 2 ./all_reduce_perf -b 8 -e 1M -f 4 -n 3 -w 1
check_perf "all_reduce_perf on 3 ranks, every datatype and op" -- \
  -n 3 ./all_reduce_perf -b 1 -e 4K -f 8 -n 2 -w 1 -d all -o all
check_perf "all_reduce_perf on 3 ranks, blocking calls, min time" -- \
  -n 3 ./all_reduce_perf -b 4 -e 64K -f 16 -n 2 -w 1 -z 1 -a 2 -d bfloat16 -o avg

timeout 120 ./weftrun -n 2 sh -c 'exit $((WEFT_RANK * 3))' >"$out" 2>&1
rc=$?
if [ $rc -eq 3 ] && grep -q 'rank 1 (pid [0-9]*) exited with status 3' "$out"; then
  ok "weftrun exits 3 when rank 1 exits 3"
else
  echo "# exit status $rc, expected 3"
  not_ok "weftrun exits 3 when rank 1 exits 3"
fi

timeout 120 ./weftrun -n 3 sh -c 'echo "rank $WEFT_RANK/$WEFT_NRANKS local $WEFT_LOCAL_RANK/$WEFT_LOCAL_SIZE id ${#WEFT_UNIQUE_ID}"' >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c 'local [0-2]/3 id 256$' "$out")" -eq 3 ] &&
   [ "$(sort -u "$out" | grep -c '^rank [0-2]/3')" -eq 3 ]; then
  ok "weftrun gives every rank its environment"
else
  echo "# exit status $rc"
  not_ok "weftrun gives every rank its environment"
fi

[ $failed -eq 0 ]
