#!/bin/sh
# weftrun_perf.sh: end-to-end TAP test of weftrun and the nccl-tests-style perf programs,
# run from the build directory by `make check`: real processes, both transports, every
# perf program with every datatype (and op, and root), the -J JSON rows, and weftrun's
# failure path (a rank's exit status becomes weftrun's). Sizes are small: this checks
# correctness, not speed, and the whole script takes well under a minute.
# Every command runs under `timeout 120` so a hang fails the test instead of blocking.
# Flag lists in variables ($env_args, $small) are split into words on purpose:
# shellcheck disable=SC2086

. "$(dirname "$0")/tap.sh"
cd "${WEFT_TOP_BUILDDIR:-.}" || { echo "1..0 # SKIP no build dir"; exit 0; }

out=$(mktemp "${TMPDIR:-/tmp}/weftrun_perf.XXXXXX") || exit 1
json=$(mktemp "${TMPDIR:-/tmp}/weftrun_perf_json.XXXXXX") || exit 1
trap 'rm -f "$out" "$json"' EXIT

TAP_LOG=$out
TAP_TAIL=40

# check_perf NAME ENV-ASSIGNMENTS... -- WEFTRUN-ARGS...: exit 0, result rows of nccl-tests'
# 13 columns whose two #wrong columns are 0 (or N/A where nccl-tests does not check, as
# in-place sendrecv), and the nccl-tests footer.
check_perf() {
  name=$1; shift
  env_args=
  while [ "$1" != "--" ]; do env_args="$env_args $1"; shift; done
  shift
  # shellcheck disable=SC2086
  env $env_args timeout 120 ./weftrun "$@" >"$out" 2>&1
  rc=$?
  rows=$(grep -c '^ *[0-9]' "$out")
  bad=$(awk '/^ *[0-9]/ && (NF != 13 || ($9 != "0" && $9 != "N/A") ||
                            ($13 != "0" && $13 != "N/A"))' "$out" | wc -l)
  if [ $rc -eq 0 ] && [ "$rows" -gt 0 ] && [ "$bad" -eq 0 ] &&
     grep -q '^# Avg bus bandwidth' "$out" && grep -q '^# Out of bounds values : 0 OK' "$out"; then
    ok "$name ($rows rows)"
  else
    echo "# exit status $rc, $rows rows, $bad with wrong elements"
    not_ok "$name"
  fi
}

echo "1..39"

check_perf "all_reduce_perf on 2 ranks over shm" -- \
  -n 2 ./all_reduce_perf -b 8 -e 1M -f 4 -n 3 -w 1
check_perf "all_reduce_perf on 2 ranks over socket" WEFT_TRANSPORT=socket -- \
  -n 2 ./all_reduce_perf -b 8 -e 1M -f 4 -n 3 -w 1
check_perf "all_reduce_perf on 3 ranks, every datatype and op" -- \
  -n 3 ./all_reduce_perf -b 1 -e 4K -f 8 -n 2 -w 1 -d all -o all
check_perf "all_reduce_perf on 3 ranks, blocking calls, min time" -- \
  -n 3 ./all_reduce_perf -b 4 -e 64K -f 16 -n 2 -w 1 -z 1 -a 2 -d bfloat16 -o avg

# Every other perf program on 2 ranks: every datatype, and every op and root they take.
small="-b 1 -e 4K -f 8 -n 2 -w 1 -d all"
for p in all_gather alltoall sendrecv; do
  check_perf "${p}_perf on 2 ranks, every datatype" -- -n 2 ./${p}_perf $small
done
for p in broadcast gather scatter; do
  check_perf "${p}_perf on 2 ranks, every datatype and root" -- -n 2 ./${p}_perf $small -r all
done
check_perf "reduce_scatter_perf on 2 ranks, every datatype and op" -- \
  -n 2 ./reduce_scatter_perf $small -o all
check_perf "reduce_perf on 2 ranks, every datatype, op and root" -- \
  -n 2 ./reduce_perf -b 4 -e 4K -f 32 -n 2 -w 1 -d all -o all -r all
# And on 4 ranks, every datatype.
for p in all_reduce all_gather reduce_scatter alltoall broadcast reduce sendrecv gather scatter; do
  check_perf "${p}_perf on 4 ranks, every datatype" -- \
    -n 4 ./${p}_perf -b 8 -e 64K -f 8 -n 2 -w 1 -d all -r all
done
check_perf "alltoall_perf on 3 ranks over socket" WEFT_TRANSPORT=socket -- \
  -n 3 ./alltoall_perf -b 8 -e 64K -f 8 -n 2 -w 1 -d int8
check_perf "alltoall_perf on 6 ranks with a throttle of 2 steps" WEFT_A2A_THROTTLE=2 -- \
  -n 6 ./alltoall_perf -b 8 -e 64K -f 8 -n 2 -w 1 -d int32
# The variable's old name still works, with a warning that names the new one.
check_perf "alltoall_perf with the deprecated WEFT_A2A_WINDOW" WEFT_A2A_WINDOW=2 -- \
  -n 3 ./alltoall_perf -b 8 -e 1K -f 8 -n 2 -w 1 -d int32
if grep -q 'WEFT_A2A_WINDOW is deprecated; use WEFT_A2A_THROTTLE' "$out"; then
  ok "WEFT_A2A_WINDOW warns that WEFT_A2A_THROTTLE replaces it"
else
  not_ok "WEFT_A2A_WINDOW warns that WEFT_A2A_THROTTLE replaces it"
fi
check_perf "gather_perf on 3 ranks over socket, every root" WEFT_TRANSPORT=socket -- \
  -n 3 ./gather_perf -b 8 -e 64K -f 8 -n 2 -w 1 -d bfloat16 -r -1
# Registered buffers: -R 1 (the tool's own, misaligned: weft adopts them) and -R 2
# (weft_mem_alloc); both run direct and must tear down cleanly.
check_perf "all_reduce_perf on 3 ranks, its own buffers registered, misaligned" -- \
  -n 3 ./all_reduce_perf -b 8 -e 1M -f 8 -n 2 -w 1 -R 1 -u 1 -d float
check_perf "alltoall_perf on 2 ranks, buffers from weft_mem_alloc registered" -- \
  -n 2 ./alltoall_perf -b 8 -e 1M -f 8 -n 2 -w 1 -R 2 -d int32

# -J: nccl-tests' JSON document (its format is checked in tests/nccl_tests_format.sh); here
# weft's own fields under "weft": the algorithm each row ran, the run's configuration.
rm -f "$json" "$json".*
timeout 120 ./weftrun -n 2 ./broadcast_perf -b 8 -e 1K -f 4 -n 2 -w 1 -r all -L 1 -J "$json" \
  >"$out" 2>&1
rc=$?
rows=$(grep -c '^ *[0-9]' "$out")
if ! command -v python3 >/dev/null 2>&1; then
  ok "broadcast_perf -J: weft's fields under \"weft\" # SKIP no python3"
elif [ $rc -eq 0 ] && python3 - "$json" "$rows" >>"$out" 2>&1 <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rows = doc["results"]
assert len(rows) == int(sys.argv[2]), "%d JSON rows, %s printed" % (len(rows), sys.argv[2])
for r in rows:
    # the algorithm actually run, from weft_get_algorithm: a real name, not a fallback
    assert r["weft"]["algorithm"] in ("chain", "binomial"), r["weft"]
    assert r["weft"]["p50_us"] > 0 and r["weft"]["p99_us"] >= r["weft"]["p50_us"], r["weft"]
    for half in ("out_of_place", "in_place"):
        assert r[half]["nwrong"] == 0 and r[half]["time"] > 0, r
c = doc["config"]["weft"]
assert c["collective"] == "broadcast" and c["nranks"] == 2 and c["hosts"] == 1, c
assert c["transport"] and c["algorithm"] and c["version"], c
assert sorted(set(int(r["root"]) for r in rows)) == [0, 1]
assert not any(e.startswith(("WEFT_UNIQUE_ID=", "WEFT_SECRET=")) for e in doc["env"]), "secret in env"
PY
then
  ok "broadcast_perf -J: weft's fields under \"weft\""
else
  echo "# exit status $rc"
  not_ok "broadcast_perf -J: weft's fields under \"weft\""
fi
rm -f "$json" "$json".*

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

# --bind-to core pins rank r to the r-th allowed CPU (mod their number); a bad value is refused.
timeout 60 ./weftrun -n 3 --bind-to core sh -c 'echo "rank $WEFT_RANK $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"' >"$out" 2>&1
rc=$?
ncpu=$(grep -c '^rank' "$out")
single=$(grep -Ec '^rank [0-2] [0-9]+$' "$out")
timeout 60 ./weftrun -n 2 --bind-to socks true >>"$out" 2>&1
bad=$?
if [ $rc -eq 0 ] && [ "$ncpu" -eq 3 ] && [ "$single" -eq 3 ] && [ $bad -eq 2 ] &&
   grep -q "bind-to takes auto, core, package or none" "$out"; then
  ok "weftrun --bind-to core gives each rank one CPU"
else
  echo "# exit status $rc / $bad, $single of $ncpu ranks on one CPU"
  not_ok "weftrun --bind-to core gives each rank one CPU"
fi

# By default weftrun places ranks as mpirun does: with 2 ranks (or fewer, on >= 2 CPUs)
# each on its own CPU, and --bind-to none opts out; -np is -n, as mpirun spells it.
allowed=$(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)
cpus=$(nproc)
show='echo "rank $WEFT_RANK $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"'
timeout 60 ./weftrun -np 2 sh -c "$show" >"$out" 2>&1
rc=$?
timeout 60 ./weftrun -np 2 --bind-to none sh -c "$show" >"$out.none" 2>&1
rc_none=$?
cat "$out.none" >>"$out"
if [ "$cpus" -lt 2 ]; then
  ok "weftrun binds 2 ranks to a core each by default # SKIP one CPU"
elif [ $rc -eq 0 ] && [ $rc_none -eq 0 ] && [ "$(head -n 2 "$out" | grep -Ec '^rank [01] [0-9]+$')" -eq 2 ] &&
     [ "$(head -n 2 "$out" | awk '{ print $3 }' | sort -u | wc -l)" -eq 2 ] &&
     [ "$(grep -c "^rank [01] $allowed\$" "$out.none")" -eq 2 ]; then
  ok "weftrun -np 2 binds each rank to its own core by default; --bind-to none leaves them free"
else
  echo "# exit status $rc / $rc_none; allowed here: $allowed"
  not_ok "weftrun -np 2 binds each rank to its own core by default; --bind-to none leaves them free"
fi
rm -f "$out.none"

# Fewer ranks than CPUs: by default each rank takes a block of CPUs / N of them (a rank
# runs two busy threads, its caller and its stream's thread), so a lone rank gets every
# allowed CPU (before: one CPU, which its caller and stream thread shared); --bind-to core
# still gives it one, as mpirun's.
timeout 60 ./weftrun -n 1 sh -c "$show" >"$out" 2>&1
rc=$?
timeout 60 ./weftrun -n 1 --bind-to core sh -c "$show" >"$out.core" 2>&1
rc_core=$?
cat "$out.core" >>"$out"
if [ "$cpus" -lt 2 ]; then
  ok "weftrun gives a lone rank every CPU by default # SKIP one CPU"
elif [ $rc -eq 0 ] && [ $rc_core -eq 0 ] && [ "$(grep -c "^rank 0 $allowed\$" "$out")" -eq 1 ] &&
     [ "$(grep -Ec '^rank 0 [0-9]+$' "$out.core")" -eq 1 ]; then
  ok "weftrun gives a lone rank every CPU ($allowed) by default, one with --bind-to core"
else
  echo "# exit status $rc / $rc_core; allowed here: $allowed"; sed 's/^/# /' "$out"
  not_ok "weftrun gives a lone rank every CPU ($allowed) by default, one with --bind-to core"
fi
rm -f "$out.core"

# More ranks than CPUs: one warning that says so, and round-robin binding (where mpirun
# --oversubscribe binds nothing): rank r on one CPU, the same as rank r + CPUs, so every CPU
# carries its share (tools/weftrun_bind.c); --bind-to none still leaves them free.
over=$((cpus * 2))
timeout 60 ./weftrun -n $over sh -c "$show" >"$out" 2>&1
rc=$?
timeout 60 ./weftrun -n $over --bind-to none sh -c "$show" >"$out.none" 2>&1
rc_none=$?
pinned=$(grep -Ec '^rank [0-9]+ [0-9]+$' "$out")
shared=$(awk '/^rank [0-9]+ [0-9]+$/ { cpu[$2 % '"$cpus"'] = cpu[$2 % '"$cpus"'] " " $3 }
  END { ok = 1; for (k in cpu) { split(cpu[k], c, " "); for (i in c) if (c[i] != c[1]) ok = 0 }; print ok }' "$out")
if [ $rc -eq 0 ] && [ $rc_none -eq 0 ] && [ "$(grep -c 'ranks outnumber cores' "$out")" -eq 1 ] &&
   [ "$pinned" -eq $over ] && [ "$shared" = 1 ] &&
   [ "$(awk '/^rank / { print $3 }' "$out" | sort -u | wc -l)" -eq "$cpus" ] &&
   [ "$(grep -c "^rank [0-9]* $allowed\$" "$out.none")" -eq $over ]; then
  ok "weftrun warns once when $over ranks outnumber $cpus CPUs and binds them round-robin"
else
  echo "# exit status $rc / $rc_none; $pinned of $over pinned, same CPU for r and r + $cpus: $shared"
  sed 's/^/# /' "$out" "$out.none"
  not_ok "weftrun warns once when $over ranks outnumber $cpus CPUs and binds them round-robin"
fi
rm -f "$out.none"

# After a rank fails, weftrun ends the others when --grace runs out, and never with --grace
# none (a job that goes on without the lost rank: weft-train-ddp --elastic). The failed
# rank's status stays weftrun's either way.
lost='if [ "$WEFT_RANK" = 0 ]; then exit 3; fi; sleep 2; echo "rank $WEFT_RANK finished"'
timeout 60 ./weftrun -n 2 --bind-to none --grace none sh -c "$lost" >"$out" 2>&1
rc_none=$?
timeout 60 ./weftrun -n 2 --bind-to none --grace 0.3 sh -c "$lost" >"$out.short" 2>&1
rc_short=$?
cat "$out.short" >>"$out"
if [ $rc_none -eq 3 ] && grep -q '^rank 1 finished$' "$out" && [ $rc_short -eq 3 ] &&
   ! grep -q '^rank 1 finished$' "$out.short" && grep -q 'grace period over' "$out.short"; then
  ok "weftrun --grace none lets the survivors finish; --grace 0.3 ends them"
else
  echo "# exit status $rc_none (--grace none) / $rc_short (--grace 0.3)"
  not_ok "weftrun --grace none lets the survivors finish; --grace 0.3 ends them"
fi
rm -f "$out.short"

timeout 10 ./weftrun --version >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -Eq '^weftrun \(weft\) [0-9]+\.[0-9]+\.[0-9]+$' "$out"; then
  ok "weftrun --version"
else
  echo "# exit status $rc"
  not_ok "weftrun --version"
fi

# weft-tune --measure: fits the tuner's model here and prints a WEFT_TUNER_MODEL the tuner
# takes without a warning (positive alpha and beta for both transports). Into a file, its
# header comes once (a child forked with stdout unflushed once wrote it again per launch)
# and the ranks' warnings of a transport that cannot run here (ib) stay out of it.
timeout 300 ./weft-tune --measure >"$out" 2>&1
rc=$?
model=$(sed -n 's/^export WEFT_TUNER_MODEL="\(.*\)"$/\1/p' "$out")
if [ $rc -eq 0 ] && [ "$(grep -c '^# weft-tune --measure:' "$out")" -eq 1 ] && ! grep -q ' WARN ' "$out" &&
   echo "$model" | grep -Eq '^shm:[0-9.e+-]+(,[0-9.e+-]+){4};socket:[0-9.e+-]+(,[0-9.e+-]+){4}$' &&
   echo "$model" | awk -F'[:,;]' '{ exit !($2 > 0 && $3 > 0 && $8 > 0 && $9 > 0) }' &&
   WEFT_TUNER_MODEL="$model" ./weft-tune -n 2 >>"$out" 2>&1 && ! grep -q 'cannot read' "$out"; then
  ok "weft-tune --measure prints a model the tuner accepts"
else
  echo "# exit status $rc, model '$model'"
  not_ok "weft-tune --measure prints a model the tuner accepts"
fi
# Its alpha is fitted to the choices it drives: a 2-rank 8 KiB all-reduce takes one step by
# recursive doubling or two by the ring of half the bytes each, and the ring ran 2-4x slower
# there (AMD EPYC VM, 2026-11-29: 2.7-3.4 against 0.7-0.9 us; 2026-11-30, two L3s: 2.8-2.9
# against 1.9-2.1); alpha taken from an 8-byte step (0.5 us there) made the model pick the
# ring. One more fit when the first picks the ring: that VM moves its vCPUs between one L3 and
# two within minutes, and a fit whose launches straddled a move once found the ring ahead
# at 4 KiB-1 MiB (CI, 2026-11-30: alpha 0.1-0.54 us, its 4-rank alpha 600-1000 us, where
# two later fits found 4.5-8.3 and 10-19 us); an 8-byte alpha (0.3-0.5 us) picks the ring with
# either later fit's beta, so the second fit still catches that.
pick_8k() {
  WEFT_TUNER_MODEL="$1" ./weft-tune -n 2 -t shm -c all_reduce -b 8K -e 8K 2>&1 | awk '/all_reduce/ { print $NF }'
}
pick=$(pick_8k "$model")
if [ "$pick" != recursive_doubling ]; then
  echo "# picked '$pick' under WEFT_TUNER_MODEL=$model; fitting once more"
  sed 's/^/# /' "$out" | grep 'log-depth'
  timeout 300 ./weft-tune --measure >"$out" 2>&1
  model=$(sed -n 's/^export WEFT_TUNER_MODEL="\(.*\)"$/\1/p' "$out")
  pick=$(pick_8k "$model")
fi
if [ "$pick" = recursive_doubling ]; then
  ok "weft-tune --measure: the fitted model keeps recursive doubling for a 2-rank 8 KiB all-reduce"
else
  echo "# picked '$pick' under WEFT_TUNER_MODEL=$model"
  not_ok "weft-tune --measure: the fitted model keeps recursive doubling for a 2-rank 8 KiB all-reduce"
fi

[ $failed -eq 0 ]
