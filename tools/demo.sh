#!/bin/sh
# The main job: build weft, then all_reduce_perf from 8 B to 64 MiB on 2 ranks (processes) of
# this host. Extra arguments go to all_reduce_perf (e.g. -d bfloat16 -o max); WEFT_TRANSPORT,
# NRANKS and the other variables of the README apply.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/tools/build.sh"
cd "$top/build"
exec ./weftrun -n "${NRANKS:-2}" ./all_reduce_perf -b 8 -e 64M -f 2 "$@"
