#!/bin/sh
# include_rules.sh: the seam between the core, the algorithms, the memory spaces and the
# transports, checked over #include lines (TAP). The rules:
#   1. a transport's headers (transports/<name>/...) are included only by files of
#      transports/<name>/: the core and everything else know a transport only through
#      transports/transport.h and the registry;
#   2. lib/ and algos/ do not include each other in a cycle: algos/ builds on lib/, so no
#      file of lib/ includes one of algos/;
#   3. algorithms touch memory only through memory spaces: no file of algos/ includes a
#      header of mem/ other than mem/space.h (the kernels, the non-temporal copy, ...).
# Each rule is also run on a scratch copy of the tree with one violation planted, and must
# fail there: the check shows it can fail, on every run.
# Usage: include_rules.sh [SOURCE_DIR]   (default: the source tree this script is in)
top=${1:-$(cd "$(dirname "$0")/.." && pwd)}
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; }

# Every quoted include of the sources under $1, as "file:included" lines (paths relative).
includes() {
  (cd "$1" && find lib algos mem transports topo tools perf tests trainers include \
      -name '*.[ch]' -o -name '*.cc' 2>/dev/null |
    while read -r f; do
      sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
        while read -r inc; do echo "$f:$inc"; done
    done)
}

# Rule 1: prints the offending lines.
foreign_transport_includes() {
  includes "$1" | awk -F: '
    $2 ~ /^transports\/[^\/]+\/./ {
      split($2, p, "/"); own = "transports/" p[2] "/"
      if (index($1, own) != 1) print $1 " includes " $2
    }'
}

# Rule 2: prints the lib/ files that include algos/ headers (algos/ includes lib/ anyway).
lib_algos_cycle() {
  up=$(includes "$1" | awk -F: '$1 ~ /^algos\// && $2 ~ /^lib\// {print; exit}')
  includes "$1" | awk -F: -v up="$up" '
    $1 ~ /^lib\// && $2 ~ /^algos\// {print $1 " includes " $2 " (and " up ": a cycle)"}'
}

# Rule 3: prints the algos/ files that include mem/ headers other than mem/space.h.
algos_past_the_space() {
  includes "$1" | awk -F: '$1 ~ /^algos\// && $2 ~ /^mem\// && $2 != "mem/space.h" {print $1 " includes " $2}'
}

check() { # check NAME FUNCTION DIR: ok when FUNCTION prints nothing
  out=$($2 "$3")
  if [ -z "$out" ]; then ok "$1"; else not_ok "$1"; echo "$out" | sed 's/^/# /'; fi
}

# The check fails where it must: a planted violation of each rule in a copy of the tree.
check_catches() { # check_catches NAME FUNCTION FILE LINE
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/include_rules.XXXXXX") || exit 1
  (cd "$top" && tar cf - lib algos mem transports topo tools perf tests trainers include 2>/dev/null) |
    (cd "$tmp" && tar xf -)
  echo "$4" >>"$tmp/$3"
  out=$($2 "$tmp")
  rm -rf "$tmp"
  if [ -n "$out" ]; then ok "$1"; else not_ok "$1"; fi
}

echo "1..6"
check "no file outside transports/<name>/ includes that transport's headers" foreign_transport_includes "$top"
check "lib/ includes nothing of algos/ (no include cycle between them)" lib_algos_cycle "$top"
check "algos/ reaches memory only through mem/space.h" algos_past_the_space "$top"
check_catches "a planted lib/task.c include of transports/shm/shm_state.h is caught" \
  foreign_transport_includes lib/task.c '#include "transports/shm/shm_state.h"'
check_catches "a planted lib/select.c include of algos/direct.h is caught" \
  lib_algos_cycle lib/select.c '#include "algos/direct.h"'
check_catches "a planted algos/all_reduce/ring.c include of mem/kernels.h is caught" \
  algos_past_the_space algos/all_reduce/ring.c '#include "mem/kernels.h"'
[ $failed -eq 0 ]
