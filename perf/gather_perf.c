/*
 * gather_perf: nccl-tests' gather_perf for weft (same flags, same columns).
 *
 * As nccl-tests (src/gather.cu): from a size of S bytes each rank sends S/n and the root
 * receives S; the size column is S, the count column the per-rank sendcount; algbw =
 * S / time, busbw = algbw * (n-1)/n: the root must take in the (n-1)/n it does not hold.
 * Only the root's receive buffer is checked. -r picks the root (-r all: each).
 */
#include "perf/common.h"

static void gather_counts(size_t count, int nranks, perf_counts_t *c) {
  size_t per_rank = count / (size_t)nranks;
  *c = (perf_counts_t){.sendcount = per_rank, .recvcount = per_rank * (size_t)nranks,
                       .paramcount = per_rank, .send_inplace_offset = per_rank};
}

static double gather_busbw_factor(int nranks) { return (double)(nranks - 1) / nranks; }

static void gather_fill(const perf_call_t *call, void *sendbuf) {
  perf_fill_moved(sendbuf, call->counts.sendcount, call->type, call->rank, 0);
}

static size_t gather_expected(const perf_call_t *call, void *expected) {
  if (call->rank != call->root)
    return 0;
  size_t per_rank = call->counts.sendcount;
  for (int r = 0; r < call->nranks; r++)
    perf_fill_moved(perf_elem(expected, r * per_rank, call->type), per_rank, call->type, r, 0);
  return call->counts.recvcount;
}

static weft_status_t gather_run(const perf_call_t *call, const void *sendbuf, void *recvbuf,
                                weft_comm_t comm, weft_stream_t stream) {
  return weft_gather(sendbuf, recvbuf, call->counts.paramcount, call->type, call->root, comm,
                     stream);
}

static const perf_coll_t gather_coll = {
    .name = "gather",
    .has_root = 1,
    .get_counts = gather_counts,
    .busbw_factor = gather_busbw_factor,
    .fill_input = gather_fill,
    .expected = gather_expected,
    .run = gather_run,
};

int main(int argc, char **argv) { return perf_main(argc, argv, &gather_coll); }
