#!/bin/sh
# slurm.sh: TAP test of weft under a real one-node Slurm, run from the build directory by
# `make check`. It starts its own munged, slurmctld and slurmd on localhost (a private
# directory, socket and ports; nothing of the system's Slurm or munge is used or touched),
# runs `srun -n 4 all_reduce_perf` without PMIx (root address derived from the step) and
# `srun --mpi=pmix -n 4 all_reduce_perf` (unique id through Slurm's PMIx server), with no
# MASTER_ADDR either time, then stops the daemons it started. Needs root (slurmd starts
# the tasks) and Debian's slurmctld, slurmd, slurm-client and munge (tools/install-deps.sh);
# without them it skips, saying why. About 10 seconds.

. "$(dirname "$0")/tap.sh"
cd "${WEFT_TOP_BUILDDIR:-.}" || { echo "1..0 # SKIP no build dir"; exit 0; }
skip_all() { echo "1..0 # SKIP $1"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip_all "needs root (slurmd starts the tasks)"
for p in munged mungekey slurmctld slurmd srun sinfo; do
  command -v "$p" >/dev/null 2>&1 || [ -x "/usr/sbin/$p" ] ||
    skip_all "$p not found (Debian: slurmctld slurmd slurm-client munge; tools/install-deps.sh)"
done
PATH=$PATH:/usr/sbin
[ -x ./all_reduce_perf ] || skip_all "all_reduce_perf not built"

dir=$(mktemp -d "${TMPDIR:-/tmp}/weft-slurm.XXXXXX") || exit 1
chmod 755 "$dir" # munged wants its socket's directory searchable
# tmp: TmpFS, where slurmd makes the PMIx plugin's spmix_appdir_<uid>_<job>.<step>; under /tmp a
# stale one from an interrupted run (job ids restart at 1) failed every --mpi=pmix launch
mkdir -p "$dir/state" "$dir/spool" "$dir/tmp"
# Stops what this script started, by the pids the daemons wrote, then removes the directory.
stop() {
  for d in slurmd slurmctld munged; do
    [ -s "$dir/$d.pid" ] && kill "$(cat "$dir/$d.pid")" 2>/dev/null
  done
  sleep 1
  for d in slurmd slurmctld munged; do
    [ -s "$dir/$d.pid" ] && kill -9 "$(cat "$dir/$d.pid")" 2>/dev/null
  done
  rm -rf "$dir"
}
trap stop EXIT
trap 'exit 1' INT TERM

node=$(hostname -s)
# Two runs on one machine do not share ports, and none is one weft derives for the bootstrap
# root under Slurm (20000-39999, lib/launch_slurm.c: this test's jobs 1 and 2 use 20064 and
# 20128, which the old base 20000 + ($$ % 2000) * 4 gave slurmctld one run in 1000: "cannot
# listen on 0.0.0.0:20064: Address already in use") or the kernel hands out for connections
# (32768-60999).
base=$((61000 + ($$ % 1000) * 4))
ncpu=$(nproc)
[ "$ncpu" -lt 4 ] && ncpu=4 # 4 tasks on this node whatever it has (config_overrides)
cat >"$dir/slurm.conf" <<EOF
ClusterName=weft$$
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmctldPort=$base
SlurmdPort=$((base + 1))
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
TmpFS=$dir/tmp
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
NodeName=$node NodeAddr=127.0.0.1 CPUs=$ncpu State=UNKNOWN
PartitionName=weft Nodes=ALL Default=YES MaxTime=10 State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"

mungekey -c -k "$dir/munge.key" >"$dir/mungekey.log" 2>&1 || skip_all "mungekey failed: $(cat "$dir/mungekey.log")"
munged -f --socket="$dir/munge.sock" --key-file="$dir/munge.key" --log-file="$dir/munged.log" \
  --pid-file="$dir/munged.pid" --seed-file="$dir/munged.seed" ||
  skip_all "munged did not start: $(tail -n 1 "$dir/munged.log" 2>/dev/null)"
slurmctld -f "$dir/slurm.conf" || skip_all "slurmctld did not start: $(tail -n 1 "$dir/slurmctld.log" 2>/dev/null)"
slurmd -f "$dir/slurm.conf" -N "$node" || skip_all "slurmd did not start: $(tail -n 1 "$dir/slurmd.log" 2>/dev/null)"
up=0
for _ in $(seq 1 40); do
  case $(sinfo -h -o %T 2>/dev/null) in idle*) up=1; break ;; esac
  sleep 0.5
done
[ $up -eq 1 ] || skip_all "the one-node Slurm did not come up in 20 s: $(tail -n 1 "$dir/slurmctld.log")"

out=$dir/out
TAP_LOG=$out
unset MASTER_ADDR MASTER_PORT WEFT_ROOT_ADDR RANK WORLD_SIZE WEFT_RANK WEFT_NRANKS WEFT_UNIQUE_ID

echo "1..2"
# srun MPI, a word to match in the log, test name
for mpi in none pmix; do
  if [ $mpi = pmix ] && ! srun --mpi=list 2>&1 | grep -q pmix; then
    ok "srun --mpi=pmix -n 4 all_reduce_perf # SKIP Slurm has no pmix plugin"
    continue
  fi
  if [ $mpi = pmix ] && ! grep -q '^#define WEFT_HAVE_PMIX 1' config.h 2>/dev/null; then
    ok "srun --mpi=pmix -n 4 all_reduce_perf # SKIP weft built without PMIx (Debian: libpmix-dev)"
    continue
  fi
  name="srun --mpi=$mpi -n 4 all_reduce_perf, no MASTER_ADDR"
  WEFT_DEBUG=INFO timeout 120 srun --mpi=$mpi -n 4 ./all_reduce_perf -b 8 -e 1M -f 8 -n 5 -w 1 >"$out" 2>&1
  rc=$?
  ranks=$(grep -c '^#  Rank ' "$out")
  if [ $mpi = pmix ]; then how=$(grep -c 'unique id exchanged through PMIx' "$out"); need=3
  else how=$(grep -c 'from the Slurm environment' "$out"); need=4; fi
  grep -v ' weft INFO ' "$out" | sed 's/^/# /' | tail -n 12
  if [ $rc -eq 0 ] && [ "$ranks" -eq 4 ] && grep -q '^# Out of bounds values : 0 OK' "$out" &&
     [ "$how" -ge "$need" ]; then
    ok "$name"
  else
    echo "# exit status $rc, $ranks ranks listed, $how log lines of the expected wire-up"
    not_ok "$name"
  fi
done
[ $failed -eq 0 ]
