#!/bin/sh
# run_dist_tests.sh PYTHONPATH_DIR [all|subset]: PyTorch's DistributedTest._DistTestBase against
# the weft backend (torch_dist_tests.py), then, per skip reason, how many tests PyTorch skipped
# for it and one line "N passed, N failed, N skipped". On a failure: unittest's report of each
# failed test (its traceback, which carries the failing rank's), then the failed tests' names
# last ("# test_x: FAIL"), so a caller showing only the tail still names them.
#   all:    every test (~5 min on 2 ranks, ~8 on 3: DIST_WORLD_SIZE, default 2)
#   subset: one test of each kind that runs on CPU (18 tests, about a minute): CI's share.
# DIST_TESTS_LOG=FILE keeps the whole log there (every rank's output included).
set -u
here=$(cd "$(dirname "$0")" && pwd)
pp=$1
which=${2:-subset}
py=${TORCH_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap '[ -n "${DIST_TESTS_LOG:-}" ] && cp "$tmp/log" "$DIST_TESTS_LOG"; rm -rf "$tmp"' EXIT
set --
want=""
if [ "$which" = subset ]; then
  want="test_all_reduce_sum test_all_reduce_full_group_max test_all_reduce_sum_async test_all_reduce_sum_complex
        test_broadcast test_reduce_sum test_all_gather test_all_gather_coalesced_simple test_gather test_scatter
        test_barrier test_send_recv test_isend test_irecv test_get_backend test_destroy_group
        test_DistributedDataParallelCPU test_static_graph_api_cpu"
  for k in $want; do
    # "*." + name: that test alone (unittest matches a pattern with a "*" against the whole
    # name, a plain one as a substring, which also ran every _cuda, _group and _nccl variant:
    # 80 tests, half of them skipped on CPU, 4 minutes of CI).
    set -- "$@" -k "*.$k"
  done
fi
# Without CI in the environment: PyTorch's run_tests() then writes a JUnit report through
# xmlrunner (common_utils: IS_CI = bool(os.getenv('CI'))), which Debian does not package, and
# every run died at import with "No module named 'xmlrunner'" before a single test (CI sets
# CI=true; by hand nobody does, so only CI failed).
env -u CI PYTHONPATH=$pp BACKEND=weft WORLD_SIZE=${DIST_WORLD_SIZE:-2} TEMP_DIR=$tmp \
  "$py" "$here/torch_dist_tests.py" -v "$@" >"$tmp/log" 2>&1
rc=$?
"$py" - "$tmp/log" "$rc" "$want" <<'PY'
import re, sys, collections
log = open(sys.argv[1]).read()
starts = [(m.start(), m.group(1)) for m in re.finditer(r"^(test_\w+) \(__main__", log, re.M)]
res = {}
for i, (pos, name) in enumerate(starts):
    seg = log[pos:starts[i + 1][0] if i + 1 < len(starts) else len(log)]
    m = re.search(r"skipped ['\"](.*)['\"]$|^(ok|FAIL|ERROR)$", seg, re.M)
    res[name] = ("skip: " + m.group(1)) if m and m.group(1) else (m.group(2) if m else "no result")
if sys.argv[2] != "0":
    # unittest's own report of each failure ("=====" / "ERROR: test_x (...)" / "-----" /
    # traceback), not the ranks' "ERROR:torch..." log lines; the head of each is enough.
    for rep in re.split(r"^={50,}$", log, flags=re.M)[1:]:
        lines = rep.strip("\n").splitlines()
        if lines and re.match(r"(FAIL|ERROR): ", lines[0]):
            print("\n".join(lines[:40]))
            if len(lines) > 40:
                print("... (%d more lines)" % (len(lines) - 40))
for reason, n in collections.Counter(r for r in res.values() if r.startswith("skip")).most_common():
    print("# %3d %s" % (n, reason))
# A test of the subset that PyTorch renamed or dropped would match nothing and pass unseen.
for n in sys.argv[3].split():
    if n not in res:
        res[n] = "not run"
for n, r in sorted(res.items()):
    if r in ("FAIL", "ERROR", "no result", "not run"):
        print("# %s: %s" % (n, r))
p = sum(r == "ok" for r in res.values()); s = sum(r.startswith("skip") for r in res.values())
print("%d passed, %d failed, %d skipped" % (p, len(res) - p - s, s))
sys.exit(1 if len(res) - p - s else 0)
PY
prc=$?
[ $rc -eq 0 ] && rc=$prc
exit $rc
