/*
 * all_gather_perf: nccl-tests' all_gather_perf for weft (same flags, same columns).
 *
 * As nccl-tests (src/all_gather.cu): from a size of S bytes each rank sends S/n and
 * receives S; the size column is S, the count column the per-rank sendcount;
 * algbw = S / time, busbw = algbw * (n-1)/n, because every rank must receive the
 * (n-1)/n of the result it does not hold, whatever the algorithm.
 */
#include "perf/common.h"

static void all_gather_counts(size_t count, int nranks, perf_counts_t *c) {
  size_t per_rank = count / (size_t)nranks;
  *c = (perf_counts_t){.sendcount = per_rank, .recvcount = per_rank * (size_t)nranks,
                       .paramcount = per_rank, .send_inplace_offset = per_rank};
}

static double all_gather_busbw_factor(int nranks) { return (double)(nranks - 1) / nranks; }

static void all_gather_fill(const perf_call_t *call, void *sendbuf) {
  perf_fill_moved(sendbuf, call->counts.sendcount, call->type, call->rank, 0);
}

static size_t all_gather_expected(const perf_call_t *call, void *expected) {
  size_t per_rank = call->counts.sendcount;
  for (int r = 0; r < call->nranks; r++)
    perf_fill_moved(perf_elem(expected, r * per_rank, call->type), per_rank, call->type, r, 0);
  return call->counts.recvcount;
}

static weft_status_t all_gather_run(const perf_call_t *call, const void *sendbuf, void *recvbuf,
                                    weft_comm_t comm, weft_stream_t stream) {
  return weft_all_gather(sendbuf, recvbuf, call->counts.paramcount, call->type, comm, stream);
}

static const perf_coll_t all_gather_coll = {
    .name = "all_gather",
    .get_counts = all_gather_counts,
    .busbw_factor = all_gather_busbw_factor,
    .fill_input = all_gather_fill,
    .expected = all_gather_expected,
    .run = all_gather_run,
};

int main(int argc, char **argv) { return perf_main(argc, argv, &all_gather_coll); }
