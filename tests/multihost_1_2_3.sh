#!/bin/sh
# multihost_1_2_3.sh: TAP test of weft across 3 emulated hosts with 1, 2 and 3 ranks (unequal
# hosts; network namespaces, tests/multihost_lib.sh): the 1 MiB all-reduce under mpirun and
# torchrun-style launch with the transport and veth traffic checks, then every perf program
# under mpirun at 16 B, 4 KiB and 1 MiB (more than a pipeline chunk) with every datatype,
# every op (on bfloat16 and float) and every root; the hierarchical all-reduce forced (hosts
# of unequal size fold into their lowest rank) and the tuner's choice at 4 MiB taken alike on
# every rank; the hierarchical all-gather, reduce-scatter and broadcast picked by the tuner up
# to 64 KiB (perf -J rows record the algorithm run), exact; weft-topo --probe across the
# hosts. 6 ranks share 2 cores. About 30 s.
# shellcheck disable=SC2086
# shellcheck disable=SC2034 # read by multihost_lib.sh
LAYOUT="1 2 3"
# shellcheck source=tests/multihost_lib.sh
. "$(dirname "$0")/multihost_lib.sh"

echo "1..24"
mh_check_mpirun_hosts
sizes="-b 16 -e 1M -f 256 -n 2 -w 1"
mh_check_layout mpirun
mh_check_layout torchrun
for p in all_reduce reduce_scatter all_gather alltoall sendrecv; do
  mh_check_mpirun "mpirun: ${p}_perf, every datatype" -- ./${p}_perf $sizes -d all
done
mh_check_mpirun "mpirun: all_reduce_perf, every op on bfloat16" -- \
  ./all_reduce_perf $sizes -d bfloat16 -o all
for p in broadcast gather scatter; do
  mh_check_mpirun "mpirun: ${p}_perf, every root" -- ./${p}_perf $sizes -d int32 -r all
done
mh_check_mpirun "mpirun: reduce_perf, every op and root on float" -- \
  ./reduce_perf -b 16 -e 4K -f 256 -n 2 -w 1 -d float -o all -r all
mh_check_tuner same 4194304
mh_check_mpirun "mpirun: all_reduce_perf, hierarchical forced, every datatype" \
  WEFT_ALGO=allreduce:hierarchical -- ./all_reduce_perf $sizes -d all
mh_check_mpirun "mpirun: all_reduce_perf, hierarchical forced, every op on bfloat16" \
  WEFT_ALGO=allreduce:hierarchical -- ./all_reduce_perf $sizes -d bfloat16 -o all
small="-b 16 -e 64K -f 8 -n 2 -w 1"
for p in all_gather reduce_scatter; do
  mh_check_picked "mpirun: ${p}_perf up to 64 KiB, tuner picks hierarchical" hierarchical -- \
    ./${p}_perf $small -d float
done
mh_check_picked "mpirun: broadcast_perf up to 64 KiB, every root, tuner picks hierarchical" hierarchical -- \
  ./broadcast_perf $small -d int8 -r all
mh_check_topo
mh_done
