/* reduce_scatter/direct.c: reduce-scatter on buffers in registered windows (driver and
 * phases in algos/direct.h).
 *
 * Rank r reduces block r of every rank's send buffer, in rank order, piece by piece into
 * a scratch that stays in cache, and writes it to its own receive buffer. In place
 * (recvbuf == sendbuf + r * count) is safe: only rank r touches block r of any buffer.
 * Steps: 2 handshakes (direct.h). Bytes per rank: reads n x count x size, writes
 * count x size: the floor's reduce-scatter (perf/membw_floor.c).
 * Source: direct reduction from shared memory, as Open MPI's XPMEM path and NCCL's
 * symmetric-memory kernels. */
#include "algos/direct.h"
#include "transports/transport.h"
#include "lib/comm.h"
#include "lib/dtype.h"

static int extents(const weft__task *t, int rank, size_t *send_bytes, size_t *recv_bytes) {
  *recv_bytes = t->count * weft__dtype_size(t->dtype);
  *send_bytes = *recv_bytes * (size_t)t->comm->nranks;
  return 1;
}

/* Past the cache the output goes out with non-temporal stores, but not in place: there
 * they land on the lines the reduction has just read, as in all_reduce/direct.c. 2 ranks,
 * 5 alternating launches, busbw in place, ordinary / non-temporal stores: 64 MiB 5.4 /
 * 3.7, 256 MiB 4.9 / 3.7 (out of place non-temporal stores win: 4.5 / 3.7, 4.4 / 3.2). */
static void work(const weft__task *t, const weft__direct_bufs *b) {
  int n = t->comm->nranks, me = t->comm->rank;
  size_t es = weft__dtype_size(t->dtype), piece = WEFT__DIRECT_PIECE / es;
  size_t block = t->count * es, base = (size_t)me * block;
  int in_place = (const char *)t->recvbuf == (const char *)t->sendbuf + base;
  unsigned nt = in_place ? 0 : weft__mem_nt_flag(block, 0);
  /* Whole blocks (a device: algos/direct.h): one fold of every rank's block me into ours
   * (in place, our output is exactly our input's block: read before written). */
  if (weft__direct_whole_blocks(t) && n >= 2 && n <= WEFT__DIRECT_FOLD_MAX) {
    char *in[WEFT__DIRECT_FOLD_MAX], *out[1] = {b->out[me]};
    for (int j = 0; j < n; j++) in[j] = b->in[j] + base;
    if (t->count == 0 || t->mem->reduce_fanout(t->mem, out, 1, in, n, t->count, t->dtype, t->op)) return;
  }
  for (size_t at = 0; at < t->count; at += piece) {
    size_t k = t->count - at < piece ? t->count - at : piece, off = at * es;
    weft__mem_reduce(t->mem, b->tmp, b->in[0] + base + off, b->in[1] + base + off, k, t->dtype, t->op);
    for (int j = 2; j < n; j++) weft__mem_reduce(t->mem, b->tmp, b->tmp, b->in[j] + base + off, k, t->dtype, t->op);
    if (t->op == WEFT_AVG) weft__mem_avg(t->mem, b->tmp, k, t->dtype, n);
    weft__mem_copy(t->mem, b->out[me] + off, b->tmp, k * es, nt);
  }
}

const weft__direct_ops weft__direct_reduce_scatter = {extents, work};

const weft__algo weft__algo_reduce_scatter_direct = {
    .name = "direct", .coll = WEFT__COLL_REDUCE_SCATTER, .start = weft__direct_start,
    .progress = weft__direct_progress, .wanted = weft__direct_wanted, .spaces = WEFT__DIRECT_SPACES,
    .needs = WEFT__TRANSPORT_CAP_PEER_MEMORY};
