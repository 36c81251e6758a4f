#!/bin/sh
# multihost_ib_1_2_3.sh: tests/multihost_1_2_3.sh's layout (3 emulated hosts with 1, 2 and 3
# ranks) with the ib transport between the hosts over the verbs emulator (each network
# namespace its own emulated host and HCA) and shm within them: the 1 MiB all-reduce under
# mpirun (exact, shm within, ib across, the data not on the veth links; torchrun-style
# launch is in multihost_ib_2x2.sh), every datatype through all_reduce and alltoall up to
# 2 MiB, every root of broadcast; the hierarchical all-reduce forced (unequal hosts fold into
# their lowest rank) and the tuner's choice at 4 MiB taken alike on every rank; the
# hierarchical all-gather and reduce-scatter picked by the tuner up to 64 KiB; weft-topo
# listing each host's emulated HCA. 6 ranks share 2 cores. Skips as multihost_ib_2x2.sh.
# About 20 s.
# shellcheck disable=SC2086
# shellcheck disable=SC2034 # read by multihost_lib.sh
LAYOUT="1 2 3"
MH_INTER=ib
# shellcheck source=tests/multihost_lib.sh
. "$(dirname "$0")/multihost_lib.sh"

echo "1..12"
mh_check_mpirun_hosts
sizes="-b 16 -e 2M -f 16 -n 2 -w 1"
mh_check_layout mpirun
for p in all_reduce alltoall; do
  mh_check_mpirun "mpirun: ${p}_perf over ib, every datatype" -- ./${p}_perf $sizes -d all
done
mh_check_mpirun "mpirun: broadcast_perf over ib, every root" -- ./broadcast_perf $sizes -d int32 -r all
mh_check_tuner same 4194304
mh_check_mpirun "mpirun: all_reduce_perf over ib, hierarchical forced, every datatype" \
  WEFT_ALGO=allreduce:hierarchical -- ./all_reduce_perf $sizes -d all
small="-b 16 -e 64K -f 8 -n 2 -w 1"
for p in all_gather reduce_scatter; do
  mh_check_picked "mpirun: ${p}_perf over ib up to 64 KiB, tuner picks hierarchical" hierarchical -- \
    ./${p}_perf $small -d float
done
mh_check_hcas
mh_done
