/*
 * sendrecv_perf: nccl-tests' sendrecv_perf for weft (same flags, same columns).
 *
 * As nccl-tests (src/sendrecv.cu): in one group every rank sends count elements to
 * (rank+1)%n and receives as many from (rank-1+n)%n, a ring shift. Size S = count
 * elements; algbw = S / time, busbw = algbw (each link carries S once). In-place (send
 * and receive in one buffer) races by design, so it is timed but reported "N/A".
 */
#include "perf/common.h"

static void sendrecv_counts(size_t count, int nranks, perf_counts_t *c) {
  *c = (perf_counts_t){.sendcount = count, .recvcount = count, .paramcount = count};
}

static double sendrecv_busbw_factor(int nranks) { return 1.0; }

static void sendrecv_fill(const perf_call_t *call, void *sendbuf) {
  perf_fill_moved(sendbuf, call->counts.sendcount, call->type, call->rank, 0);
}

static size_t sendrecv_expected(const perf_call_t *call, void *expected) {
  int from = (call->rank - 1 + call->nranks) % call->nranks;
  perf_fill_moved(expected, call->counts.recvcount, call->type, from, 0);
  return call->counts.recvcount;
}

static weft_status_t sendrecv_run(const perf_call_t *call, const void *sendbuf, void *recvbuf,
                                  weft_comm_t comm, weft_stream_t stream) {
  int to = (call->rank + 1) % call->nranks, from = (call->rank - 1 + call->nranks) % call->nranks;
  weft_status_t st = weft_group_start();
  if (st != WEFT_SUCCESS)
    return st;
  weft_status_t s1 = weft_send(sendbuf, call->counts.paramcount, call->type, to, comm, stream);
  weft_status_t s2 = weft_recv(recvbuf, call->counts.paramcount, call->type, from, comm, stream);
  st = weft_group_end(); /* always closes the group, even after a failed call */
  return s1 != WEFT_SUCCESS ? s1 : s2 != WEFT_SUCCESS ? s2 : st;
}

static const perf_coll_t sendrecv_coll = {
    .name = "sendrecv",
    .inplace_unchecked = 1,
    .get_counts = sendrecv_counts,
    .busbw_factor = sendrecv_busbw_factor,
    .fill_input = sendrecv_fill,
    .expected = sendrecv_expected,
    .run = sendrecv_run,
};

int main(int argc, char **argv) { return perf_main(argc, argv, &sendrecv_coll); }
