/* all_gather/direct.c: all-gather on buffers in registered windows (driver and phases in
 * algos/direct.h).
 *
 * Rank r writes its send buffer into block r of every rank's receive buffer, piece by
 * piece, so each piece is read from memory once and copied n times from cache. In place
 * (sendbuf == recvbuf + r * count) the copy to itself is skipped.
 * Steps: 2 handshakes (direct.h). Bytes per rank: reads count x size, writes n times that.
 * Source: the memory-bandwidth floor's all-gather (perf/membw_floor.c) over shared
 * memory, as NCCL's symmetric-memory all-gather. */
#include "algos/direct.h"
#include "transports/transport.h"
#include "lib/comm.h"
#include "lib/dtype.h"

static int extents(const weft__task *t, int rank, size_t *send_bytes, size_t *recv_bytes) {
  *send_bytes = t->count * weft__dtype_size(t->dtype);
  *recv_bytes = *send_bytes * (size_t)t->comm->nranks;
  return 1;
}

static void work(const weft__task *t, const weft__direct_bufs *b) {
  int n = t->comm->nranks, me = t->comm->rank;
  size_t block = t->count * weft__dtype_size(t->dtype), out_bytes = block * (size_t)n;
  size_t piece = weft__direct_whole_blocks(t) ? block : WEFT__DIRECT_PIECE;
  for (size_t at = 0; at < block; at += piece) {
    size_t k = block - at < piece ? block - at : piece;
    for (int j = 0; j < n; j++)
      weft__direct_copy(t, b->out[j] + (size_t)me * block + at, b->in[me] + at, k, out_bytes);
  }
}

const weft__direct_ops weft__direct_all_gather = {extents, work};

const weft__algo weft__algo_all_gather_direct = {
    .name = "direct", .coll = WEFT__COLL_ALL_GATHER, .start = weft__direct_start,
    .progress = weft__direct_progress, .wanted = weft__direct_wanted, .spaces = WEFT__DIRECT_SPACES,
    .needs = WEFT__TRANSPORT_CAP_PEER_MEMORY};
