#!/bin/sh
# multihost_ib_2x2.sh: tests/multihost_2x2.sh's layout (2 emulated hosts x 2 ranks, network
# namespaces) with the ib transport between the hosts over the verbs emulator (each
# namespace its own emulated host and HCA) and shm within them: the 1 MiB all-reduce under
# mpirun and torchrun-style launch (exact, shm within, ib across, and the data not on the
# veth links), every datatype through all_reduce, alltoall and sendrecv, every op on
# bfloat16, every root of reduce; the tuner's pick of the hierarchical all-gather,
# reduce-scatter and broadcast (perf -J rows) and of the hierarchical all-reduce at 4 MiB;
# that all-reduce forced at every size; weft-topo listing each host's emulated HCA. Skips
# without root, namespaces, mpirun (its cases) or the emulator. About 40 s.
# shellcheck disable=SC2086
# shellcheck disable=SC2034 # read by multihost_lib.sh
LAYOUT="2 2"
MH_INTER=ib
# shellcheck source=tests/multihost_lib.sh
. "$(dirname "$0")/multihost_lib.sh"

echo "1..18"
mh_check_mpirun_hosts
sizes="-b 8 -e 4M -f 32 -n 2 -w 1"
mh_check_layout mpirun
mh_check_layout torchrun
for p in all_reduce alltoall sendrecv; do
  mh_check_mpirun "mpirun: ${p}_perf over ib, every datatype" -- ./${p}_perf $sizes -d all
done
mh_check_mpirun "mpirun: all_reduce_perf over ib, every op on bfloat16" -- \
  ./all_reduce_perf $sizes -d bfloat16 -o all
for p in reduce_scatter all_gather; do
  mh_check_picked "mpirun: ${p}_perf over ib, tuner picks hierarchical" hierarchical -- \
    ./${p}_perf -b 8 -e 1M -f 32 -n 2 -w 1 -d float
done
mh_check_picked "mpirun: broadcast_perf over ib, every root, tuner picks hierarchical" hierarchical -- \
  ./broadcast_perf -b 8 -e 1M -f 32 -n 2 -w 1 -d float16 -r all
mh_check_mpirun "mpirun: reduce_perf over ib, every op and root on float" -- \
  ./reduce_perf -b 8 -e 1M -f 32 -n 2 -w 1 -d float -o all -r all
mh_check_tuner hierarchical 4194304
mh_check_mpirun "mpirun: all_reduce_perf over ib, hierarchical forced, every datatype" \
  WEFT_ALGO=allreduce:hierarchical -- ./all_reduce_perf $sizes -d all
mh_check_hcas
mh_done
