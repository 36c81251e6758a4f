#!/bin/sh
# multihost_2x2.sh: TAP test of weft across 2 emulated hosts with 2 ranks each (network
# namespaces, tests/multihost_lib.sh): the 1 MiB all-reduce under mpirun and torchrun-style
# launch with the transport and veth traffic checks, then every perf program under mpirun
# at 8 B, 256 B, 8 KiB and 256 KiB (where sockets start splitting messages) with every
# datatype, every op (on bfloat16 and float) and every root; the tuner's pick of the
# hierarchical all-gather, reduce-scatter and broadcast at every one of those sizes (perf
# -J rows record the algorithm run) and of the hierarchical all-reduce at 4 MiB, that
# all-reduce forced at every size; weft-topo --probe across the hosts. About 25 s.
# shellcheck disable=SC2086
# shellcheck disable=SC2034 # read by multihost_lib.sh
LAYOUT="2 2"
# shellcheck source=tests/multihost_lib.sh
. "$(dirname "$0")/multihost_lib.sh"

echo "1..21"
mh_check_mpirun_hosts
sizes="-b 8 -e 1M -f 32 -n 2 -w 1"
mh_check_layout mpirun
mh_check_layout torchrun
for p in all_reduce alltoall sendrecv; do
  mh_check_mpirun "mpirun: ${p}_perf, every datatype" -- ./${p}_perf $sizes -d all
done
for p in reduce_scatter all_gather; do
  mh_check_picked "mpirun: ${p}_perf, every datatype, tuner picks hierarchical" hierarchical -- \
    ./${p}_perf $sizes -d all
done
mh_check_mpirun "mpirun: all_reduce_perf, every op on bfloat16" -- \
  ./all_reduce_perf $sizes -d bfloat16 -o all
mh_check_picked "mpirun: broadcast_perf, every root, tuner picks hierarchical" hierarchical -- \
  ./broadcast_perf $sizes -d float16 -r all
for p in gather scatter; do
  mh_check_mpirun "mpirun: ${p}_perf, every root" -- ./${p}_perf $sizes -d float16 -r all
done
mh_check_mpirun "mpirun: reduce_perf, every op and root on float" -- \
  ./reduce_perf $sizes -d float -o all -r all
mh_check_tuner hierarchical 4194304
mh_check_mpirun "mpirun: all_reduce_perf, hierarchical forced, every datatype" \
  WEFT_ALGO=allreduce:hierarchical -- ./all_reduce_perf $sizes -d all
mh_check_mpirun "mpirun: all_reduce_perf, hierarchical forced, every op on bfloat16" \
  WEFT_ALGO=allreduce:hierarchical -- ./all_reduce_perf $sizes -d bfloat16 -o all
mh_check_topo
mh_done
