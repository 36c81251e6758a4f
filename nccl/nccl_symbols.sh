#!/bin/sh
# nccl_symbols.sh: weft's libnccl.so.2 exports, as nccl<Name> and pnccl<Name>, every function
# that nccl.h declares, nccl.h declares every function of NCCL 2.28's API (the list below,
# from NCCL's documentation), and the library exports nothing else (no weft_* name that could
# clash with libweft.so in the same process). TAP.
set -u
src=${srcdir:-.}
lib=nccl/.libs/libnccl.so.2
nccl228="ncclAllGather ncclAllReduce ncclAlltoAll ncclBcast ncclBroadcast ncclCommAbort ncclCommCount
ncclCommCuDevice ncclCommDeregister ncclCommDestroy ncclCommFinalize ncclCommGetAsyncError ncclCommInitAll
ncclCommInitRank ncclCommInitRankConfig ncclCommInitRankScalable ncclCommRegister ncclCommRevoke
ncclCommShrink ncclCommSplit ncclCommUserRank ncclCommWindowDeregister ncclCommWindowRegister ncclGather
ncclGetErrorString ncclGetLastError ncclGetUniqueId ncclGetVersion ncclGroupEnd ncclGroupSimulateEnd
ncclGroupStart ncclMemAlloc ncclMemFree ncclRecv ncclRedOpCreatePreMulSum ncclRedOpDestroy ncclReduce
ncclReduceScatter ncclResetDebugInit ncclScatter ncclSend"
echo "1..3"
if [ ! -f "$lib" ]; then
  echo "not ok 1 - $lib not built"; echo "not ok 2 # SKIP"; echo "not ok 3 # SKIP"; exit 1
fi
declared=$(sed -n 's/^\(ncclResult_t\|const char \*\|void\) *\(p\{0,1\}nccl[A-Za-z]*\)(.*/\2/p' \
  "$src/nccl/nccl.h" "$src/nccl/nccl_weft.h" | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TW]$/ {print $3}' | sort -u)
missing=""
for f in $declared; do
  echo "$exported" | grep -qx "$f" || missing="$missing $f"
done
[ -z "$missing" ] && echo "ok 1 - all $(echo "$declared" | wc -l) declared functions are exported" \
  || { echo "not ok 1 - declared but not exported:$missing"; rc=1; }
absent=""
for f in $nccl228; do
  echo "$declared" | grep -qx "$f" || absent="$absent $f"
  echo "$declared" | grep -qx "p$f" || absent="$absent p$f"
done
[ -z "$absent" ] && echo "ok 2 - nccl.h declares all 41 functions of NCCL 2.28 and their pnccl aliases" \
  || { echo "not ok 2 - NCCL 2.28 functions missing from nccl.h:$absent"; rc=1; }
extra=$(echo "$exported" | grep -v '^p\{0,1\}nccl' | tr '\n' ' ')
[ -z "$extra" ] && echo "ok 3 - nothing but nccl names is exported" \
  || { echo "not ok 3 - exported beyond NCCL's names: $extra"; rc=1; }
exit ${rc:-0}
