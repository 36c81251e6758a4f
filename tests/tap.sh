# tap.sh: TAP helpers the shell tests source (". tests/tap.sh", before any cd):
#   ok NAME        one passing test point
#   not_ok NAME    one failing test point, followed by the last TAP_TAIL (30) lines of
#                  $TAP_LOG, the file the failed step wrote its output to, as TAP comments
# $failed counts the failures; a script ends with [ $failed -eq 0 ].
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
  n=$((n + 1)); failed=$((failed + 1))
  echo "not ok $n - $1"
  if [ -n "${TAP_LOG:-}" ] && [ -f "$TAP_LOG" ]; then sed 's/^/# /' "$TAP_LOG" | tail -n "${TAP_TAIL:-30}"; fi
}
