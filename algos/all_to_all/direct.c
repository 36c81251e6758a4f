/* all_to_all/direct.c: all-to-all on buffers in registered windows (driver and phases in
 * algos/direct.h).
 *
 * Rank r copies block j of its send buffer into block r of rank j's receive buffer, for
 * every j, starting with its successor so the ranks write to different peers at once.
 * In place is not direct (a peer would overwrite a block before its owner sent it): every
 * rank then falls back to the usual algorithm, which stages the input.
 * Steps: 2 handshakes (direct.h). Bytes per rank: reads n x count x size, writes the same.
 * Source: the floor's all-to-all (perf/membw_floor.c) over shared memory. */
#include "algos/direct.h"
#include "transports/transport.h"
#include "lib/comm.h"
#include "lib/dtype.h"

static int extents(const weft__task *t, int rank, size_t *send_bytes, size_t *recv_bytes) {
  *send_bytes = *recv_bytes = t->count * weft__dtype_size(t->dtype) * (size_t)t->comm->nranks;
  return t->sendbuf != t->recvbuf;
}

static void work(const weft__task *t, const weft__direct_bufs *b) {
  int n = t->comm->nranks, me = t->comm->rank;
  size_t block = t->count * weft__dtype_size(t->dtype), out_bytes = block * (size_t)n;
  for (int s = 1; s <= n; s++) {
    int j = (me + s) % n;
    weft__direct_copy(t, b->out[j] + (size_t)me * block, b->in[me] + (size_t)j * block, block, out_bytes);
  }
}

const weft__direct_ops weft__direct_all_to_all = {extents, work};

const weft__algo weft__algo_all_to_all_direct = {
    .name = "direct", .coll = WEFT__COLL_ALL_TO_ALL, .start = weft__direct_start,
    .progress = weft__direct_progress, .wanted = weft__direct_wanted, .spaces = WEFT__DIRECT_SPACES,
    .needs = WEFT__TRANSPORT_CAP_PEER_MEMORY};
