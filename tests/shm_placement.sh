#!/bin/sh
# The shm placement probe (transports/shm/shm_placement.h) runs at the first collective of
# >= 2 KiB per rank (not below: test 4), the first large one and, after 16 more that moved
# 256 MiB per rank in all, again (weft__shm_probe_due), on every rank alike, completes (no
# hang: the test harness's timeout and the comm's deadline bound it), and leaves results
# exact whatever it decides. When ranks outnumber cores it times round trips only between
# ring neighbours bound to two different CPUs (test 8), none when the ranks are not bound
# (test 6). The copy probe that follows it (transports/shm/shm_copy_probe.h) runs at the
# first probe on every rank, times both paths and leaves the same exact results; with more
# ranks than cores it runs once, and the verdict measured between two CPUs serves all of a
# rank's connections (test 9). A program of small calls probes again every 65536th
# (test 5). TAP output.
cd "${WEFT_TOP_BUILDDIR:-.}" || exit 1
echo "1..9"
ncpu=$(nproc)
if [ "$ncpu" -lt 2 ]; then
  for i in 1 2 3 4 5 6 7 8 9; do echo "ok $i # SKIP one CPU: the probe needs two ranks on two cores"; done
  exit 0
fi
log=$(mktemp); trap 'rm -f "$log"' EXIT
# s0, s1: the placement probes rank 0 and rank 1 ran by the log; wrong: wrong elements it reports.
probes_in_log() {
  s0=$(grep -c "placement probe [0-9]*: rank 0 -> peer 1" "$log")
  s1=$(grep -c "placement probe [0-9]*: rank 1 -> peer 0" "$log")
  wrong=$(awk '$1 ~ /^[0-9]+$/ && NF >= 13 {w += $9 + $13} END {print w + 0}' "$log")
}
# 4 sizes, warm-up, 20 timed and checked calls, in and out of place: over a hundred calls
# of >= 256 KiB, 42 of them 16 MiB, so the 16th 16 MiB call after the first probe has moved
# 256 MiB and probes again (the smaller ones alone would not: 256 KiB re-probes every 1024th).
WEFT_DEBUG=TRACE ./weftrun -n 2 ./all_reduce_perf -b 256K -e 16M -f 4 -n 20 -w 1 -c 1 >"$log" 2>&1
rc=$?
probes_in_log
p0=$s0 p1=$s1
if [ "$rc" = 0 ] && [ "$wrong" = 0 ]; then echo "ok 1 - 2-rank all-reduce with probes: exit 0, 0 wrong"
else echo "not ok 1 - 2-rank all-reduce with probes: exit $rc, $wrong wrong"; tail -n 5 "$log" | sed 's/^/# /'; fi
if [ "$p0" -ge 2 ] && [ "$p0" = "$p1" ]; then echo "ok 2 - both ranks ran the same probes ($p0 each)"
else echo "not ok 2 - probes per rank: rank 0 ran $p0, rank 1 ran $p1 (want equal, >= 2)"; fi
# The copy probe's times, "... bytes in I ns, out O ns, read R ns fresh, A sent again": each
# rank's first probe measured all four (R and A may be the unusable path's maximum, never 0).
copy_probes_ok() { # log ranks: every rank's first copy probe line has nonzero times
  r=0
  while [ "$r" -lt "$2" ]; do
    times="in [1-9][0-9]* ns, out [1-9][0-9]* ns, read [1-9][0-9]* ns fresh, [1-9][0-9]* sent again"
    grep -m1 "copy probe 1: rank $r -> peer" "$1" | grep -Eq "$times" || return 1
    r=$((r + 1))
  done
}
c0=$(grep -c "copy probe [0-9]*: rank 0 -> peer 1" "$log")
# The probe needs single copy; where the kernel refuses it (Yama, seccomp) setup says so.
no_cma=$(grep -c "CMA not permitted" "$log")
if [ "$no_cma" -gt 0 ]; then
  echo "ok 3 # SKIP single copy not permitted here: the copy probe has nothing to measure"
elif copy_probes_ok "$log" 2 && [ "$c0" -ge 1 ] && [ "$c0" -le "$p0" ]; then
  echo "ok 3 - the copy probe ran at the first placement probe on both ranks ($c0 of $p0 probes on rank 0)"
else
  echo "not ok 3 - copy probe: rank 0 ran $c0 of $p0 (want the first at least), times:"
  grep "copy probe" "$log" | head -n 4 | sed 's/^/# /'
fi
# A program whose calls are all small: 1 KiB calls never probe; the first 2 KiB one does
# (non-temporal payloads from 2 KiB on two L3s need its verdict), once.
WEFT_DEBUG=TRACE ./weftrun -n 2 ./all_reduce_perf -b 1K -e 1K -n 20 -w 1 -c 1 >"$log" 2>&1
rc1=$? n1=$(grep -c "placement probe" "$log")
WEFT_DEBUG=TRACE ./weftrun -n 2 ./all_reduce_perf -b 2K -e 4K -f 2 -n 20 -w 1 -c 1 >"$log" 2>&1
rc2=$?
probes_in_log
if [ "$rc1" = 0 ] && [ "$n1" = 0 ] && [ "$rc2" = 0 ] && [ "$wrong" = 0 ] && [ "$s0" = 1 ] && [ "$s1" = 1 ]; then
  echo "ok 4 - calls of 1 KiB never probe, the first of 2 KiB does, once per rank"
else
  echo "not ok 4 - 1 KiB calls: exit $rc1, $n1 probe lines (want 0); 2-4 KiB calls: exit $rc2, $wrong wrong," \
    "probes rank 0 $s0, rank 1 $s1 (want 1 each)"
fi
# 2 KiB calls, 40000 timed out of place and 40000 in place (and warm-up and checked
# calls): the first probes, and the 65537th again (WEFT__SHM_PROBE_EVERY_SMALL), on
# both ranks alike.
WEFT_DEBUG=TRACE ./weftrun -n 2 ./all_reduce_perf -b 2K -e 2K -n 40000 -w 1 -c 1 >"$log" 2>&1
rc=$?
probes_in_log
if [ "$rc" = 0 ] && [ "$wrong" = 0 ] && [ "$s0" = 2 ] && [ "$s1" = 2 ]; then
  echo "ok 5 - over 80000 calls of 2 KiB: the first and the 65537th probe, on both ranks"
else
  echo "not ok 5 - over 80000 calls of 2 KiB: exit $rc, $wrong wrong, probes rank 0 $s0, rank 1 $s1 (want 2 each)"
fi
over=$((ncpu + 1))
if [ "$over" -gt 9 ]; then
  for i in 6 7 8 9; do echo "ok $i # SKIP $ncpu cores: $over ranks would take too long here"; done
  exit 0
fi
# Unbound, a rank may run on any CPU: nothing to time, the first probe is a rendezvous.
WEFT_DEBUG=TRACE ./weftrun -n "$over" --bind-to none ./all_reduce_perf -b 256K -e 256K -n 20 -w 1 -c 1 \
  >"$log" 2>&1
rc=$?
n=$(grep -c "ns per round trip" "$log")
if [ "$rc" = 0 ] && [ "$n" = 0 ]; then echo "ok 6 - $over unbound ranks on $ncpu cores: no round trips timed"
else echo "not ok 6 - $over unbound ranks on $ncpu cores: exit $rc, $n timed round trips (want 0)"; fi
# weftrun binds ranks that outnumber the CPUs round-robin (rank r on CPU r mod n).
WEFT_DEBUG=TRACE ./weftrun -n "$over" ./all_reduce_perf -b 256K -e 256K -n 20 -w 1 -c 1 >"$log" 2>&1
rc=$?
probes_in_log
c=$(grep -c "copy probe" "$log")
if [ "$(grep -c "CMA not permitted" "$log")" -gt 0 ]; then
  echo "ok 7 # SKIP single copy not permitted here: the copy probe has nothing to measure"
elif [ "$rc" = 0 ] && [ "$c" = "$over" ] && copy_probes_ok "$log" "$over"; then
  echo "ok 7 - $over ranks on $ncpu cores: one copy probe per rank, over 21 large calls"
else
  echo "not ok 7 - $over ranks on $ncpu cores: exit $rc, $c copy probe lines (want $over, times nonzero)"
  grep "copy probe" "$log" | head -n 4 | sed 's/^/# /'
fi
# Each timed line names the two CPUs: they differ in every line, and with one CPU carrying
# two ranks and the others one, every rank has a ring neighbour on another CPU and times it.
timed=$(grep "ns per round trip (CPU" "$log")
same=$(printf '%s\n' "$timed" | sed -n 's/.*(CPU \([0-9]*\) to CPU \([0-9]*\))$/\1 \2/p' | awk '$1 == $2' | wc -l)
untimed=0 r=0
while [ "$r" -lt "$over" ]; do
  printf '%s\n' "$timed" | grep -Eq "placement probe 1: rank $r (->|<-) peer" || untimed=$((untimed + 1))
  r=$((r + 1))
done
if [ "$rc" = 0 ] && [ "$wrong" = 0 ] && [ -n "$timed" ] && [ "$same" = 0 ] && [ "$untimed" = 0 ]; then
  echo "ok 8 - $over bound ranks on $ncpu cores: every rank timed a neighbour on another CPU, none on its own"
else
  echo "not ok 8 - $over bound ranks on $ncpu cores: exit $rc, $wrong wrong, $same lines with one CPU," \
    "$untimed ranks timed nothing"
  grep "placement probe" "$log" | head -n 6 | sed 's/^/# /'
fi
# With more ranks than cores the verdict measured between two CPUs serves each rank's
# connections, to ranks on its own CPU too (weft__shm_cpu_verdict): every rank says so once,
# naming two CPUs, with the verdict of its pair across CPUs: the one it measured toward its
# successor when that one sits on another CPU (rank r on CPU r mod ncpu), else the one its
# predecessor measured toward it ("... and W from it" in their INFO line).
verdict_of() { # "from" rank, "to" rank: the large messages' verdict it logged, or nothing
  grep "rank $1 -> peer $2: .* KiB copied in" "$log" | head -n 1 | sed -n 's/.* below 64 KiB and \(.*\) from it,.*/\1/p'
}
across_verdict() { # rank: the verdict toward its successor on another CPU, else from its predecessor there
  for dir in out in; do
    p=0
    while [ "$p" -lt "$over" ]; do
      if [ $((p % ncpu)) != $(($1 % ncpu)) ]; then
        if [ "$dir" = out ]; then v=$(verdict_of "$1" "$p"); else v=$(verdict_of "$p" "$1"); fi
        [ -n "$v" ] && { echo "$v"; return; }
      fi
      p=$((p + 1))
    done
  done
}
bad=""
if [ "$(grep -c "CMA not permitted" "$log")" -gt 0 ]; then
  echo "ok 9 # SKIP single copy not permitted here: no verdict to share"
  exit 0
fi
r=0
while [ "$r" -lt "$over" ]; do
  said=$(grep "shm: rank $r: more ranks than cores: the copy verdict measured between CPU" "$log")
  n=$(printf '%s' "$said" | grep -c "serves all its connections")
  cpus=$(printf '%s\n' "$said" | sed -n 's/.*between CPU \([0-9]*\) and CPU \([0-9]*\) .*/\1 \2/p' | head -n 1)
  got=$(printf '%s\n' "$said" | sed -n 's/.*all-to-all on \(.*\) from 64 KiB).*/\1/p' | head -n 1)
  want=$(across_verdict "$r")
  # shellcheck disable=SC2086 # the two CPU numbers, as words
  set -- $cpus
  if [ "$n" != 1 ] || [ "$#" != 2 ] || [ "$1" = "$2" ] || [ -z "$got" ] || [ "$got" != "$want" ]; then
    bad="$bad rank $r: $n lines, CPUs '$cpus', verdict '$got' (want '$want');"
  fi
  r=$((r + 1))
done
if [ "$rc" = 0 ] && [ -z "$bad" ]; then
  echo "ok 9 - $over bound ranks on $ncpu cores: each rank's connections take the verdict measured between CPUs"
else
  echo "not ok 9 - $over bound ranks on $ncpu cores: exit $rc;$bad"
  grep -E "more ranks than cores|KiB copied in" "$log" | head -n 8 | sed 's/^/# /'
fi
