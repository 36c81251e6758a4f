/*
 * all_reduce_perf: nccl-tests' all_reduce_perf for weft. Same flags, same output;
 * run it with `weftrun -n N ./all_reduce_perf -b 8 -e 64M -f 2` (or mpirun, srun).
 *
 * busbw = algbw * 2(n-1)/n: a bandwidth-optimal all-reduce moves 2(n-1)/n of the
 * buffer in and out of every rank (reduce-scatter, then all-gather), so busbw is
 * comparable with the link bandwidth whatever the rank count (nccl-tests'
 * doc/PERFORMANCE.md).
 */
#include "perf/common.h"

static void all_reduce_counts(size_t count, int nranks, perf_counts_t *c) {
  *c = (perf_counts_t){.sendcount = count, .recvcount = count, .paramcount = count};
}

static double all_reduce_busbw_factor(int nranks) { return 2.0 * (nranks - 1) / nranks; }

static void all_reduce_fill(const perf_call_t *call, void *sendbuf) {
  perf_fill_input(sendbuf, call->counts.sendcount, call->type, call->op, call->rank, 0);
}

static size_t all_reduce_expected(const perf_call_t *call, void *expected) {
  perf_fill_reduced(expected, call->counts.recvcount, call->type, call->op, call->nranks, 0);
  return call->counts.recvcount;
}

static weft_status_t all_reduce_run(const perf_call_t *call, const void *sendbuf, void *recvbuf,
                                    weft_comm_t comm, weft_stream_t stream) {
  return weft_all_reduce(sendbuf, recvbuf, call->counts.paramcount, call->type, call->op, comm,
                         stream);
}

static const perf_coll_t all_reduce_coll = {
    .name = "all_reduce",
    .has_op = 1,
    .has_root = 0,
    .get_counts = all_reduce_counts,
    .busbw_factor = all_reduce_busbw_factor,
    .fill_input = all_reduce_fill,
    .expected = all_reduce_expected,
    .run = all_reduce_run,
};

int main(int argc, char **argv) { return perf_main(argc, argv, &all_reduce_coll); }
