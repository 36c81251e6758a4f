/*
 * reduce_scatter_perf: nccl-tests' reduce_scatter_perf for weft (same flags, columns).
 *
 * As nccl-tests (src/reduce_scatter.cu): from a size of S bytes each rank sends S and
 * receives S/n, its reduced block; the size column is S, the count column the per-rank
 * recvcount; algbw = S / time, busbw = algbw * (n-1)/n: every rank must send out the
 * (n-1)/n of its input that other ranks reduce.
 */
#include "perf/common.h"

static void reduce_scatter_counts(size_t count, int nranks, perf_counts_t *c) {
  size_t per_rank = count / (size_t)nranks;
  *c = (perf_counts_t){.sendcount = per_rank * (size_t)nranks, .recvcount = per_rank,
                       .paramcount = per_rank, .recv_inplace_offset = per_rank};
}

static double reduce_scatter_busbw_factor(int nranks) { return (double)(nranks - 1) / nranks; }

static void reduce_scatter_fill(const perf_call_t *call, void *sendbuf) {
  perf_fill_input(sendbuf, call->counts.sendcount, call->type, call->op, call->rank, 0);
}

/* Block `rank` of the reduction: elements rank * recvcount onwards of every input. */
static size_t reduce_scatter_expected(const perf_call_t *call, void *expected) {
  size_t n = call->counts.recvcount;
  perf_fill_reduced(expected, n, call->type, call->op, call->nranks, (size_t)call->rank * n);
  return n;
}

static weft_status_t reduce_scatter_run(const perf_call_t *call, const void *sendbuf,
                                        void *recvbuf, weft_comm_t comm, weft_stream_t stream) {
  return weft_reduce_scatter(sendbuf, recvbuf, call->counts.paramcount, call->type, call->op,
                             comm, stream);
}

static const perf_coll_t reduce_scatter_coll = {
    .name = "reduce_scatter",
    .has_op = 1,
    .get_counts = reduce_scatter_counts,
    .busbw_factor = reduce_scatter_busbw_factor,
    .fill_input = reduce_scatter_fill,
    .expected = reduce_scatter_expected,
    .run = reduce_scatter_run,
};

int main(int argc, char **argv) { return perf_main(argc, argv, &reduce_scatter_coll); }
