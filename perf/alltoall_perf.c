/*
 * alltoall_perf: nccl-tests' alltoall_perf for weft (same flags, same columns).
 *
 * As nccl-tests (src/alltoall.cu): from a size of S bytes each rank sends S and receives
 * S, in n blocks of S/n; the size column is S, the count column the per-peer count;
 * algbw = S / time, busbw = algbw * (n-1)/n: all but the block a rank keeps for itself
 * crosses the network. Unlike nccl-tests, in-place is validated too: weft supports it.
 */
#include "perf/common.h"

static void alltoall_counts(size_t count, int nranks, perf_counts_t *c) {
  size_t per_peer = count / (size_t)nranks;
  *c = (perf_counts_t){.sendcount = per_peer * (size_t)nranks,
                       .recvcount = per_peer * (size_t)nranks, .paramcount = per_peer};
}

static double alltoall_busbw_factor(int nranks) { return (double)(nranks - 1) / nranks; }

static void alltoall_fill(const perf_call_t *call, void *sendbuf) {
  perf_fill_moved(sendbuf, call->counts.sendcount, call->type, call->rank, 0);
}

/* Block p comes from rank p's block `rank`. */
static size_t alltoall_expected(const perf_call_t *call, void *expected) {
  size_t per_peer = call->counts.paramcount;
  for (int p = 0; p < call->nranks; p++)
    perf_fill_moved(perf_elem(expected, p * per_peer, call->type), per_peer, call->type, p,
                    (size_t)call->rank * per_peer);
  return call->counts.recvcount;
}

static weft_status_t alltoall_run(const perf_call_t *call, const void *sendbuf, void *recvbuf,
                                  weft_comm_t comm, weft_stream_t stream) {
  return weft_all_to_all(sendbuf, recvbuf, call->counts.paramcount, call->type, comm, stream);
}

static const perf_coll_t alltoall_coll = {
    .name = "alltoall",
    .get_counts = alltoall_counts,
    .busbw_factor = alltoall_busbw_factor,
    .fill_input = alltoall_fill,
    .expected = alltoall_expected,
    .run = alltoall_run,
};

int main(int argc, char **argv) { return perf_main(argc, argv, &alltoall_coll); }
