#!/bin/sh
# launchers.sh: TAP test of how weft_comm_init_from_env finds its job, run from the build
# directory by `make check`: the most specific launcher wins when launchers nest (torchrun
# inside an srun step, mpirun inside a Slurm allocation, weftrun inside both), MPICH's
# PMI_RANK/PMI_SIZE, Slurm's step without PMIx (root address derived from the node list),
# Open MPI's mpirun with no MASTER_ADDR (the unique id through PMIx), and a program run
# with no launcher at all (one rank, with a line saying so). Launchers are imitated by
# setting their variables by hand, except mpirun, which runs for real when installed.
# Every command runs under `timeout` so a hang fails the test instead of blocking.

. "$(dirname "$0")/tap.sh"
cd "${WEFT_TOP_BUILDDIR:-.}" || { echo "1..0 # SKIP no build dir"; exit 0; }
out=$(mktemp "${TMPDIR:-/tmp}/launchers.XXXXXX") || exit 1
trap 'rm -f "$out" "$out".*' EXIT
TAP_LOG=$out
TAP_TAIL=30
# A port per run, so two test runs on one machine do not collide.
port=$((30000 + $$ % 20000))
PERF="./all_reduce_perf -b 8 -e 4K -f 8 -n 2 -w 1"
# Variables any launcher may have left in our own environment would spoil the imitations.
unset WEFT_RANK WEFT_NRANKS WEFT_UNIQUE_ID RANK WORLD_SIZE MASTER_ADDR MASTER_PORT \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS \
  SLURM_STEP_NUM_TASKS SLURM_JOB_ID SLURM_STEP_ID SLURM_STEP_NODELIST SLURM_JOB_NODELIST PMIX_RANK PMIX_NAMESPACE \
  WEFT_ROOT_ADDR

# ranks_seen FILE: how many ranks the perf program's "# Using devices" lists.
ranks_seen() { grep -c '^#  Rank ' "$1"; }
exact() { grep -q '^# Out of bounds values : 0 OK' "$1"; }

# two NAME ENV0 -- ENV1: starts rank 0 and rank 1 of $PERF with their own variables (as a
# launcher's two children), waits for both; ok when both exit 0 and rank 0 saw 2 ranks.
two() {
  name=$1; shift
  env0=
  while [ "$1" != "--" ]; do env0="$env0 $1"; shift; done
  shift
  # shellcheck disable=SC2086 # the assignments are words on purpose
  env $env0 timeout 60 $PERF >"$out" 2>&1 &
  p0=$!
  # shellcheck disable=SC2086
  env "$@" timeout 60 $PERF >"$out.1" 2>&1
  rc1=$?
  wait $p0
  rc0=$?
  seen=$(ranks_seen "$out") # by rank 0 alone: two 1-rank jobs would list 1 each
  cat "$out.1" >>"$out"
  if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ "$seen" -eq 2 ] && exact "$out"; then
    ok "$name"
  else
    echo "# exit status $rc0 / $rc1, rank 0 listed $seen ranks"
    not_ok "$name"
  fi
  port=$((port + 1))
}

echo "1..9"

slurm1="SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_STEP_NUM_TASKS=1 SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_STEP_NODELIST=localhost"
# shellcheck disable=SC2086
two "torchrun inside an srun step: torchrun's RANK/WORLD_SIZE win over SLURM_PROCID/SLURM_NTASKS" \
  $slurm1 RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port -- \
  $slurm1 RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port

# shellcheck disable=SC2086
two "MPICH hydra's PMI_RANK/PMI_SIZE with MASTER_ADDR, inside a Slurm allocation" \
  $slurm1 PMI_RANK=0 PMI_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port -- \
  $slurm1 PMI_RANK=1 PMI_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port

slurm="SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 SLURM_JOB_ID=$$ SLURM_STEP_ID=3 SLURM_STEP_NODELIST=localhost"
# shellcheck disable=SC2086
two "srun without PMIx: the root at the step's first node, port from the job and step ids" \
  $slurm SLURM_PROCID=0 -- $slurm SLURM_PROCID=1

# weftrun inside everything: its own variables win.
# shellcheck disable=SC2086
env $slurm1 RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  timeout 60 ./weftrun -n 3 $PERF >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(ranks_seen "$out")" -eq 3 ] && exact "$out"; then
  ok "weftrun inside torchrun's and Slurm's environments: weftrun's 3 ranks"
else
  echo "# exit status $rc, $(ranks_seen "$out") ranks listed"
  not_ok "weftrun inside torchrun's and Slurm's environments: weftrun's 3 ranks"
fi

# No launcher: one rank, and a line that says so, for every tool alike.
timeout 60 $PERF >"$out" 2>&1
rc=$?
timeout 60 ./weft-topo >"$out.topo" 2>&1
rc_topo=$?
cat "$out.topo" >>"$out"
if [ $rc -eq 0 ] && [ "$(ranks_seen "$out")" -eq 1 ] && exact "$out" && [ $rc_topo -eq 0 ] &&
   [ "$(grep -c 'no launcher environment.*running as a single rank' "$out")" -eq 2 ] &&
   grep -q '^weft-topo: 1 ranks\? on 1 host' "$out.topo"; then
  ok "all_reduce_perf and weft-topo with no launcher run 1 rank and say so"
else
  echo "# exit status $rc / $rc_topo"
  not_ok "all_reduce_perf and weft-topo with no launcher run 1 rank and say so"
fi

# sbatch's batch script (SLURM_PROCID=0, the job's SLURM_NTASKS, no step): a tool run there
# directly is one rank, not rank 0 of 2 waiting for a rank that never comes.
env SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_JOB_ID=$$ SLURM_JOB_NODELIST=localhost timeout 60 $PERF >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(ranks_seen "$out")" -eq 1 ] && exact "$out"; then
  ok "sbatch's batch script (no srun step) runs a tool as one rank"
else
  echo "# exit status $rc, $(ranks_seen "$out") ranks listed"
  not_ok "sbatch's batch script (no srun step) runs a tool as one rank"
fi

# Open MPI's mpirun, for real: inside a (pretend) Slurm allocation, and with no
# MASTER_ADDR: the unique id goes through mpirun's PMIx server.
if ! command -v mpirun >/dev/null 2>&1; then
  ok "mpirun -np 4 all_reduce_perf with no MASTER_ADDR # SKIP no mpirun (Debian: openmpi-bin)"
  ok "mpirun inside a Slurm allocation: Open MPI's ranks win # SKIP no mpirun"
elif ! grep -q '^#define WEFT_HAVE_PMIX 1' config.h 2>/dev/null; then
  ok "mpirun -np 4 all_reduce_perf with no MASTER_ADDR # SKIP weft built without PMIx (Debian: libpmix-dev)"
  ok "mpirun inside a Slurm allocation: Open MPI's ranks win # SKIP weft built without PMIx"
else
  # Its own session directory, as tests/multihost_lib.sh's mh_mpirun says why: concurrent
  # mpiruns sharing /tmp/ompi.HOST.UID race at start and end.
  session=$(mktemp -d "${TMPDIR:-/tmp}/launchers-ompi.XXXXXX") || exit 1
  trap 'rm -rf "$out" "$out".* "$session"' EXIT
  MPIRUN="mpirun --oversubscribe --bind-to none --mca orte_tmpdir_base $session"
  [ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
  # shellcheck disable=SC2086
  timeout 120 $MPIRUN -np 4 $PERF >"$out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && [ "$(ranks_seen "$out")" -eq 4 ] && exact "$out"; then
    ok "mpirun -np 4 all_reduce_perf with no MASTER_ADDR (unique id through PMIx)"
  else
    echo "# exit status $rc, $(ranks_seen "$out") ranks listed"
    not_ok "mpirun -np 4 all_reduce_perf with no MASTER_ADDR (unique id through PMIx)"
  fi
  # shellcheck disable=SC2086
  env $slurm1 timeout 120 $MPIRUN -np 2 $PERF >"$out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && [ "$(ranks_seen "$out")" -eq 2 ] && exact "$out"; then
    ok "mpirun inside a Slurm allocation: Open MPI's ranks win"
  else
    echo "# exit status $rc, $(ranks_seen "$out") ranks listed"
    not_ok "mpirun inside a Slurm allocation: Open MPI's ranks win"
  fi
fi

# A torchrun environment without MASTER_ADDR: a clear error naming what to set, at once.
env RANK=0 WORLD_SIZE=2 timeout 30 $PERF >"$out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'MASTER_ADDR' "$out" && grep -q 'torchrun' "$out"; then
  ok "torchrun's variables without MASTER_ADDR fail at once, naming what to set"
else
  echo "# exit status $rc"
  not_ok "torchrun's variables without MASTER_ADDR fail at once, naming what to set"
fi

[ $failed -eq 0 ]
