/*
 * mpi_bench.c: the Open MPI side of `make compare`: one collective, float32 sum,
 * timed and checked exactly as weft's perf tools do it (bench_common.h has the sweep,
 * the values and the output; this file only maps a collective to its MPI call).
 *
 *   mpirun -np N mpi_bench all_reduce -b 8 -e 4M -f 2 -n 20 -w 5 [-t shm|tcp]
 *
 * MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoall, MPI_Bcast,
 * MPI_Reduce, MPI_Gather and MPI_Scatter (root 0) and, for sendrecv, one MPI_Sendrecv per
 * call (the ring shift: send to rank+1, receive from rank-1) on MPI_COMM_WORLD, out-of-place
 * except MPI_Bcast, which is in place by definition: the root's result is its own send
 * buffer. Rank 0 prints JSON lines.
 * Open MPI picks its own algorithms (coll/tuned decisions); we do not tune them.
 */
#include <mpi.h>

#include "bench_common.h"

static const float *mpi_run(void *ctx, bc_coll_t coll, const bc_counts_t *c, float *send,
                            float *recv) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  switch (coll) {
  case BC_ALL_REDUCE:
    MPI_Allreduce(send, recv, (int)c->recvcount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return recv;
  case BC_ALL_GATHER:
    MPI_Allgather(send, (int)c->block, MPI_FLOAT, recv, (int)c->block, MPI_FLOAT,
                  MPI_COMM_WORLD);
    return recv;
  case BC_REDUCE_SCATTER:
    MPI_Reduce_scatter_block(send, recv, (int)c->block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return recv;
  case BC_ALL_TO_ALL:
    MPI_Alltoall(send, (int)c->block, MPI_FLOAT, recv, (int)c->block, MPI_FLOAT,
                 MPI_COMM_WORLD);
    return recv;
  case BC_BROADCAST: {
    float *buf = rank == 0 ? send : recv;
    MPI_Bcast(buf, (int)c->recvcount, MPI_FLOAT, 0, MPI_COMM_WORLD);
    return buf;
  }
  case BC_REDUCE: /* off the root recv is not written, and not checked */
    MPI_Reduce(send, recv, (int)c->recvcount, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
    return recv;
  case BC_GATHER:
    MPI_Gather(send, (int)c->block, MPI_FLOAT, recv, (int)c->block, MPI_FLOAT, 0, MPI_COMM_WORLD);
    return recv;
  case BC_SCATTER:
    MPI_Scatter(send, (int)c->block, MPI_FLOAT, recv, (int)c->block, MPI_FLOAT, 0, MPI_COMM_WORLD);
    return recv;
  case BC_SENDRECV: {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Sendrecv(send, (int)c->sendcount, MPI_FLOAT, (rank + 1) % n, 0, recv, (int)c->recvcount,
                 MPI_FLOAT, (rank - 1 + n) % n, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return recv;
  }
  default: return recv;
  }
}

static void mpi_barrier(void *ctx) { MPI_Barrier(MPI_COMM_WORLD); }

static void mpi_sum(void *ctx, double *v, int n) {
  MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  bc_lib_t lib = {.name = "mpi", .run = mpi_run, .barrier = mpi_barrier, .sum = mpi_sum};
  MPI_Comm_rank(MPI_COMM_WORLD, &lib.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &lib.nranks);
  bc_opts_t o;
  if (bc_parse_args(argc, argv, &o) != 0) {
    MPI_Finalize();
    return 2;
  }
  if (lib.rank == 0) {
    int len = 0;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(version, &len);
    version[strcspn(version, ",\n")] = 0;
    printf("# mpi_bench %s nranks %d transport %s: %s\n", bc_coll_names[o.coll], lib.nranks,
           o.transport, version);
  }
  int bad = bc_sweep(&lib, &o);
  MPI_Finalize();
  if (bad && lib.rank == 0)
    fprintf(stderr, "mpi_bench: %s: %d sizes had wrong results\n", bc_coll_names[o.coll], bad);
  return bad ? 1 : 0;
}
