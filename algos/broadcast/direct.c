/* broadcast/direct.c: broadcast on buffers in registered windows (driver and phases in
 * algos/direct.h).
 *
 * Every rank copies its share (block r of n) of the root's send buffer into every rank's
 * receive buffer, piece by piece, so the root's data is read once and the copies run on
 * all ranks at once. Only the root's send buffer must be in a window; in place at the root
 * its own copy is skipped.
 * Steps: 2 handshakes (direct.h). Bytes per rank: reads count x size / n, writes n times
 * that: the floor's broadcast (perf/membw_floor.c).
 * Source: the scatter + all-gather broadcast (van de Geijn) in one pass over shared memory. */
#include "algos/direct.h"
#include "transports/transport.h"
#include "lib/comm.h"
#include "lib/dtype.h"

static int extents(const weft__task *t, int rank, size_t *send_bytes, size_t *recv_bytes) {
  *recv_bytes = t->count * weft__dtype_size(t->dtype);
  *send_bytes = rank == t->root ? *recv_bytes : 0;
  return 1;
}

static void work(const weft__task *t, const weft__direct_bufs *b) {
  int n = t->comm->nranks;
  size_t es = weft__dtype_size(t->dtype), lo, hi, out_bytes = t->count * es;
  weft__direct_block(t->count, n, t->comm->rank, &lo, &hi);
  size_t piece = weft__direct_whole_blocks(t) ? (hi - lo) * es : WEFT__DIRECT_PIECE;
  for (size_t at = lo * es; at < hi * es; at += piece) {
    size_t k = hi * es - at < piece ? hi * es - at : piece;
    for (int j = 0; j < n; j++) weft__direct_copy(t, b->out[j] + at, b->in[t->root] + at, k, out_bytes);
  }
}

const weft__direct_ops weft__direct_broadcast = {extents, work};

const weft__algo weft__algo_broadcast_direct = {
    .name = "direct", .coll = WEFT__COLL_BROADCAST, .start = weft__direct_start,
    .progress = weft__direct_progress, .wanted = weft__direct_wanted, .spaces = WEFT__DIRECT_SPACES,
    .needs = WEFT__TRANSPORT_CAP_PEER_MEMORY};
