/*
 * scatter_perf: nccl-tests' scatter_perf for weft (same flags, same columns).
 *
 * As nccl-tests (src/scatter.cu): from a size of S bytes the root sends S and every rank
 * receives S/n, block `rank`; the size column is S, the count column the per-rank
 * recvcount; algbw = S / time, busbw = algbw * (n-1)/n: the root must push out the
 * (n-1)/n it does not keep. -r picks the root (-r all: each).
 */
#include "perf/common.h"

static void scatter_counts(size_t count, int nranks, perf_counts_t *c) {
  size_t per_rank = count / (size_t)nranks;
  *c = (perf_counts_t){.sendcount = per_rank * (size_t)nranks, .recvcount = per_rank,
                       .paramcount = per_rank, .recv_inplace_offset = per_rank};
}

static double scatter_busbw_factor(int nranks) { return (double)(nranks - 1) / nranks; }

/* Only the root's data is read; other ranks leave their send buffers alone. */
static void scatter_fill(const perf_call_t *call, void *sendbuf) {
  if (call->rank == call->root)
    perf_fill_moved(sendbuf, call->counts.sendcount, call->type, call->root, 0);
}

static size_t scatter_expected(const perf_call_t *call, void *expected) {
  size_t n = call->counts.recvcount;
  perf_fill_moved(expected, n, call->type, call->root, (size_t)call->rank * n);
  return n;
}

static weft_status_t scatter_run(const perf_call_t *call, const void *sendbuf, void *recvbuf,
                                 weft_comm_t comm, weft_stream_t stream) {
  return weft_scatter(sendbuf, recvbuf, call->counts.paramcount, call->type, call->root, comm,
                      stream);
}

static const perf_coll_t scatter_coll = {
    .name = "scatter",
    .has_root = 1,
    .get_counts = scatter_counts,
    .busbw_factor = scatter_busbw_factor,
    .fill_input = scatter_fill,
    .expected = scatter_expected,
    .run = scatter_run,
};

int main(int argc, char **argv) { return perf_main(argc, argv, &scatter_coll); }
