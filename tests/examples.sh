#!/bin/sh
# examples.sh: TAP test of examples/ and of linking against weft the way users do, run from
# the build directory by `make check`: every example runs under weftrun and reports "ok" on
# every rank; then examples/allreduce_blocking.c is compiled and linked against libweft.a
# alone with `pkg-config --static --cflags --libs weft` (weft.pc as installed, pointed at
# a copy of libweft.a), which fails when weft.pc misses a library a static link needs
# (Requires.private: hwloc, libxml-2.0, pmix; Libs.private: -pthread -lm), and runs as one
# rank.

. "$(dirname "$0")/tap.sh"
cd "${WEFT_TOP_BUILDDIR:-.}" || { echo "1..0 # SKIP no build dir"; exit 0; }
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/weft-examples.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
TAP_LOG=$dir/out
TAP_TAIL=20

echo "1..6"
for spec in allreduce_blocking:4 streams_overlap:2 registered_buffers:2 registered_own_memory:2 point_to_point:3; do
  prog=${spec%:*} np=${spec#*:}
  timeout 120 ./weftrun -n "$np" "examples/$prog" >"$dir/out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c ": ok" "$dir/out")" -eq "$np" ]; then
    ok "examples/$prog on $np ranks"
  else
    echo "# exit status $rc"
    not_ok "examples/$prog on $np ranks"
  fi
done

# weft.pc as `make install` writes it, with libdir and includedir pointed here.
name="pkg-config --static --libs weft links a program against libweft.a"
if ! command -v pkg-config >/dev/null 2>&1 || [ ! -f .libs/libweft.a ]; then
  ok "$name # SKIP no pkg-config or no static library (.libs/libweft.a)"
else
  mkdir -p "$dir/lib/pkgconfig" "$dir/include"
  cp .libs/libweft.a "$dir/lib/"
  cp "$src/include/weft.h" "$dir/include/"
  sed -e "s|^libdir=.*|libdir=$dir/lib|" -e "s|^includedir=.*|includedir=$dir/include|" weft.pc \
    >"$dir/lib/pkgconfig/weft.pc"
  flags=$(PKG_CONFIG_PATH="$dir/lib/pkgconfig" pkg-config --static --cflags --libs weft 2>"$dir/out")
  echo "# pkg-config --static --cflags --libs weft: $flags" | sed "s|$dir|DIR|g"
  # WEFT_SANITIZE_LDFLAGS: a sanitizer build's libweft.a needs its runtime (make check-sanitize)
  # shellcheck disable=SC2086 # flags is a list of words
  if ${CC:-cc} -o "$dir/app" "$src/examples/allreduce_blocking.c" $flags ${WEFT_SANITIZE_LDFLAGS:-} >>"$dir/out" 2>&1 &&
     ! ldd "$dir/app" | grep -q libweft && "$dir/app" >>"$dir/out" 2>&1 && grep -q ": ok" "$dir/out"; then
    ok "$name"
  else
    not_ok "$name"
  fi
fi
[ $failed -eq 0 ]
