/*
 * reduce_perf: nccl-tests' reduce_perf for weft (same flags, same columns).
 *
 * As nccl-tests (src/reduce.cu): size S = count elements on every rank; algbw =
 * S / time, busbw = algbw: a pipelined reduce streams S through every link once.
 * Only the root's receive buffer is checked. -r picks the root (-r all: each).
 */
#include "perf/common.h"

static void reduce_counts(size_t count, int nranks, perf_counts_t *c) {
  *c = (perf_counts_t){.sendcount = count, .recvcount = count, .paramcount = count};
}

static double reduce_busbw_factor(int nranks) { return 1.0; }

static void reduce_fill(const perf_call_t *call, void *sendbuf) {
  perf_fill_input(sendbuf, call->counts.sendcount, call->type, call->op, call->rank, 0);
}

static size_t reduce_expected(const perf_call_t *call, void *expected) {
  if (call->rank != call->root)
    return 0;
  perf_fill_reduced(expected, call->counts.recvcount, call->type, call->op, call->nranks, 0);
  return call->counts.recvcount;
}

static weft_status_t reduce_run(const perf_call_t *call, const void *sendbuf, void *recvbuf,
                                weft_comm_t comm, weft_stream_t stream) {
  return weft_reduce(sendbuf, recvbuf, call->counts.paramcount, call->type, call->op,
                     call->root, comm, stream);
}

static const perf_coll_t reduce_coll = {
    .name = "reduce",
    .has_op = 1,
    .has_root = 1,
    .get_counts = reduce_counts,
    .busbw_factor = reduce_busbw_factor,
    .fill_input = reduce_fill,
    .expected = reduce_expected,
    .run = reduce_run,
};

int main(int argc, char **argv) { return perf_main(argc, argv, &reduce_coll); }
