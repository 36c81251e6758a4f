/*
 * gloo_bench.cc: the Gloo side of `make compare`: one collective, float32 sum, timed
 * and checked exactly as weft's perf tools do it (bench_common.h has the sweep, the
 * values and the output; this file only maps a collective to its Gloo call).
 *
 *   COMPARE_GLOO_STORE=/tmp/dir weftrun -n N gloo_bench all_reduce -b 8 -e 4M -f 2
 *
 * Rank and size come from the launcher's environment (WEFT_RANK/WEFT_NRANKS from
 * weftrun, or GLOO_RANK/GLOO_SIZE, or Open MPI's). Rendezvous goes through a
 * gloo::rendezvous::FileStore in COMPARE_GLOO_STORE (an empty directory per job), and
 * data through Gloo's TCP transport on loopback: Gloo has no shared-memory transport.
 *
 * Calls, as PyTorch's ProcessGroupGloo makes them: gloo::allreduce (AllreduceOptions,
 * ring), gloo::allgather, gloo::alltoall, gloo::broadcast, gloo::reduce, gloo::gather and
 * gloo::scatter (root 0) with unbound buffers; sendrecv is a pair of unbound buffers, one
 * send to rank+1 and one receive from rank-1 on one slot, both waited for (as
 * ProcessGroupGloo's send and recv). gloo::reduce uses its output buffer as scratch on
 * every rank (a ring reduce-scatter, then a gather to the root). Reduce-scatter has no
 * function-style call in Debian's Gloo, so it is the ReduceScatterHalvingDoubling
 * algorithm, built once per size outside the timing. It reduces in place, leaving this
 * rank's block at the start of the send buffer.
 */
#include <gloo/allgather.h>
#include <gloo/config.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

struct GlooBench {
  std::shared_ptr<gloo::Context> ctx;
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> rs;
  uint32_t tag = 0;
};

GlooBench *self(void *p) { return static_cast<GlooBench *>(p); }

void gloo_prepare(void *p, bc_coll_t coll, const bc_counts_t *c, float *send, float *recv) {
  GlooBench *b = self(p);
  if (coll != BC_REDUCE_SCATTER || c->block == 0)
    return;
  std::vector<int> recv_elems(b->ctx->size, static_cast<int>(c->block));
  b->rs.reset(new gloo::ReduceScatterHalvingDoubling<float>(
      b->ctx, std::vector<float *>{send}, static_cast<int>(c->sendcount), recv_elems));
}

const float *gloo_run(void *p, bc_coll_t coll, const bc_counts_t *c, float *send, float *recv) {
  GlooBench *b = self(p);
  switch (coll) {
  case BC_ALL_REDUCE: {
    gloo::AllreduceOptions o(b->ctx);
    o.setInput(send, c->sendcount);
    o.setOutput(recv, c->recvcount);
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    o.setReduceFunction(
        static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
    o.setTag(b->tag);
    gloo::allreduce(o);
    return recv;
  }
  case BC_ALL_GATHER: {
    gloo::AllgatherOptions o(b->ctx);
    o.setInput(send, c->sendcount);
    o.setOutput(recv, c->recvcount);
    o.setTag(b->tag);
    gloo::allgather(o);
    return recv;
  }
  case BC_REDUCE_SCATTER:
    b->rs->run();
    return send;
  case BC_ALL_TO_ALL: {
    gloo::AlltoallOptions o(b->ctx);
    o.setInput(send, c->sendcount);
    o.setOutput(recv, c->recvcount);
    o.setTag(b->tag);
    gloo::alltoall(o);
    return recv;
  }
  case BC_BROADCAST: {
    gloo::BroadcastOptions o(b->ctx);
    if (b->ctx->rank == 0)
      o.setInput(send, c->sendcount);
    o.setOutput(recv, c->recvcount);
    o.setRoot(0);
    o.setTag(b->tag);
    gloo::broadcast(o);
    return recv;
  }
  case BC_REDUCE: {
    gloo::ReduceOptions o(b->ctx);
    o.setInput(send, c->sendcount);
    o.setOutput(recv, c->recvcount);
    o.setRoot(0);
    o.setReduceFunction(
        static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
    o.setTag(b->tag);
    gloo::reduce(o);
    return recv;
  }
  case BC_GATHER: {
    gloo::GatherOptions o(b->ctx);
    o.setInput(send, c->sendcount);
    if (b->ctx->rank == 0)
      o.setOutput(recv, c->recvcount);
    o.setRoot(0);
    o.setTag(b->tag);
    gloo::gather(o);
    return recv;
  }
  case BC_SCATTER: {
    gloo::ScatterOptions o(b->ctx);
    if (b->ctx->rank == 0) {
      std::vector<float *> blocks;
      for (int r = 0; r < b->ctx->size; r++)
        blocks.push_back(send + static_cast<size_t>(r) * c->block);
      o.setInputs(blocks, c->block);
    }
    o.setOutput(recv, c->recvcount);
    o.setRoot(0);
    o.setTag(b->tag);
    gloo::scatter(o);
    return recv;
  }
  case BC_SENDRECV: {
    int n = b->ctx->size, rank = b->ctx->rank;
    auto out = b->ctx->createUnboundBuffer(send, c->sendcount * sizeof(float));
    auto in = b->ctx->createUnboundBuffer(recv, c->recvcount * sizeof(float));
    in->recv((rank - 1 + n) % n, b->tag);
    out->send((rank + 1) % n, b->tag);
    in->waitRecv();
    out->waitSend();
    return recv;
  }
  default: return recv;
  }
}

void gloo_barrier(void *p) {
  gloo::BarrierOptions o(self(p)->ctx);
  o.setTag(1);
  gloo::barrier(o);
}

void gloo_sum(void *p, double *v, int n) {
  gloo::AllreduceOptions o(self(p)->ctx);
  o.setOutput(v, static_cast<size_t>(n)); /* output only: in place */
  o.setReduceFunction(
      static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<double>));
  o.setTag(2);
  gloo::allreduce(o);
}

int env_int(const char *const *names, int fallback) {
  for (; *names; names++)
    if (getenv(*names))
      return atoi(getenv(*names));
  return fallback;
}

}  // namespace

int main(int argc, char **argv) {
  static const char *const rank_vars[] = {"WEFT_RANK", "GLOO_RANK", "OMPI_COMM_WORLD_RANK",
                                          nullptr};
  static const char *const size_vars[] = {"WEFT_NRANKS", "GLOO_SIZE", "OMPI_COMM_WORLD_SIZE",
                                          nullptr};
  int rank = env_int(rank_vars, 0), size = env_int(size_vars, 1);
  const char *store_dir = getenv("COMPARE_GLOO_STORE");
  bc_opts_t o;
  if (bc_parse_args(argc, argv, &o) != 0)
    return 2;
  if (!store_dir || !*store_dir) {
    fprintf(stderr, "gloo_bench: rank %d: COMPARE_GLOO_STORE (a shared empty directory) is "
                    "not set\n", rank);
    return 2;
  }
  GlooBench b;
  try {
    gloo::transport::tcp::attr attr("127.0.0.1");
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(std::chrono::seconds(120));
    ctx->connectFullMesh(store, dev);
    b.ctx = ctx;
    bc_lib_t lib = {&b, rank, size, "gloo", gloo_prepare, gloo_run, gloo_barrier, gloo_sum};
    if (rank == 0)
      printf("# gloo_bench %s nranks %d transport %s: Gloo %d.%d.%d tcp\n",
             bc_coll_names[o.coll], size, o.transport, GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR,
             GLOO_VERSION_PATCH);
    int bad = bc_sweep(&lib, &o);
    b.rs.reset();
    if (bad && rank == 0)
      fprintf(stderr, "gloo_bench: %s: %d sizes had wrong results\n", bc_coll_names[o.coll],
              bad);
    return bad ? 1 : 0;
  } catch (const std::exception &e) {
    fprintf(stderr, "gloo_bench: rank %d: %s: %s\n", rank, bc_coll_names[o.coll], e.what());
    return 2;
  }
}
