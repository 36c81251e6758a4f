# tap.sh: TAP helpers the shell tests source (". tests/tap.sh", before any cd):
#   ok NAME        one passing test point
#   not_ok NAME    one failing test point, followed by the last TAP_TAIL (30) lines of
#                  $TAP_LOG, the file the failed step wrote its output to, as TAP comments
#   rows_ok NAME ROWS REGEX CMD...
#                  runs CMD: one passing point when it exits 0 and exactly ROWS lines of its
#                  output (stdout and stderr) match REGEX (grep's basic syntax), else a
#                  failing one saying the exit status and row count, with CMD's output
#   tap_workdir NAME
#                  dir = a fresh directory under $TMPDIR (removed when the script exits),
#                  TAP_LOG = $dir/log
# $failed counts the failures; a script ends with [ $failed -eq 0 ].
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
  n=$((n + 1)); failed=$((failed + 1))
  echo "not ok $n - $1"
  if [ -n "${TAP_LOG:-}" ] && [ -f "$TAP_LOG" ]; then sed 's/^/# /' "$TAP_LOG" | tail -n "${TAP_TAIL:-30}"; fi
}
rows_ok() {
  rows_name=$1 rows_want=$2 rows_re=$3
  shift 3
  rows_out=$("$@" 2>&1)
  rows_rc=$?
  rows_got=$(printf '%s\n' "$rows_out" | grep -c "$rows_re")
  if [ "$rows_rc" = 0 ] && [ "$rows_got" = "$rows_want" ]; then
    ok "$rows_name"
  else
    not_ok "$rows_name (exit $rows_rc, $rows_got rows)"
    printf '%s\n' "$rows_out" | sed 's/^/# /'
  fi
}

tap_workdir() {
  dir=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || exit 1
  trap 'rm -rf "$dir"' EXIT
  TAP_LOG=$dir/log
}
