/*
 * broadcast_perf: nccl-tests' broadcast_perf for weft (same flags, same columns).
 *
 * As nccl-tests (src/broadcast.cu): size S = count elements on every rank; algbw =
 * S / time, busbw = algbw: a pipelined broadcast streams S through every link once, so
 * the bus bandwidth equals the algorithm bandwidth. -r picks the root (-r all: each).
 */
#include "perf/common.h"

static void broadcast_counts(size_t count, int nranks, perf_counts_t *c) {
  *c = (perf_counts_t){.sendcount = count, .recvcount = count, .paramcount = count};
}

static double broadcast_busbw_factor(int nranks) { return 1.0; }

/* Only the root's data is read; other ranks leave their send buffers alone. */
static void broadcast_fill(const perf_call_t *call, void *sendbuf) {
  if (call->rank == call->root)
    perf_fill_moved(sendbuf, call->counts.sendcount, call->type, call->root, 0);
}

static size_t broadcast_expected(const perf_call_t *call, void *expected) {
  perf_fill_moved(expected, call->counts.recvcount, call->type, call->root, 0);
  return call->counts.recvcount;
}

static weft_status_t broadcast_run(const perf_call_t *call, const void *sendbuf, void *recvbuf,
                                   weft_comm_t comm, weft_stream_t stream) {
  return weft_broadcast(sendbuf, recvbuf, call->counts.paramcount, call->type, call->root, comm,
                        stream);
}

static const perf_coll_t broadcast_coll = {
    .name = "broadcast",
    .has_root = 1,
    .get_counts = broadcast_counts,
    .busbw_factor = broadcast_busbw_factor,
    .fill_input = broadcast_fill,
    .expected = broadcast_expected,
    .run = broadcast_run,
};

int main(int argc, char **argv) { return perf_main(argc, argv, &broadcast_coll); }
