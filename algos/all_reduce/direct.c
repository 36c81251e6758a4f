/* all_reduce/direct.c: all-reduce on buffers in registered windows (driver and phases in
 * algos/direct.h).
 *
 * Rank r owns block r of the n near-equal blocks. Piece by piece (WEFT__DIRECT_PIECE
 * bytes) it reduces block r of every rank's send buffer, in rank order, into a scratch
 * that stays in cache, and writes the result into block r of every rank's receive buffer.
 * Every rank's output is the same bytes, computed once. In place is safe: only rank r
 * reads or writes block r, and a piece is read completely before it is written.
 * Steps: 2 handshakes (direct.h), no message carries data. Bytes per rank: reads
 * (count / n) x n x size from memory, writes the same; the least any all-reduce moves, as
 * the memory-bandwidth floor counts it (perf/membw_floor.c, all_reduce_fused).
 * Source: the reduce-scatter + all-gather decomposition (Rabenseifner 2004) with both
 * halves fused into one pass over shared memory, as NCCL's symmetric-memory kernels do. */
#include "algos/direct.h"
#include "transports/transport.h"
#include "lib/comm.h"
#include "lib/dtype.h"

static int extents(const weft__task *t, int rank, size_t *send_bytes, size_t *recv_bytes) {
  *send_bytes = *recv_bytes = t->count * weft__dtype_size(t->dtype);
  return 1;
}

/* One fan-out of every rank's block [lo, hi) into every rank's output (the space's
 * reduce_fanout); 0 when the space cannot for these arguments. */
static int fold(const weft__task *t, const weft__direct_bufs *b, size_t lo, size_t hi) {
  int n = t->comm->nranks;
  size_t es = weft__dtype_size(t->dtype);
  char *out[WEFT__DIRECT_FOLD_MAX], *in[WEFT__DIRECT_FOLD_MAX];
  if (n > WEFT__DIRECT_FOLD_MAX || n < 2) return 0;
  for (int j = 0; j < n; j++) {
    out[j] = b->out[j] + lo * es;
    in[j] = b->in[j] + lo * es;
  }
  return hi == lo || t->mem->reduce_fanout(t->mem, out, n, in, n, hi - lo, t->dtype, t->op);
}

/* Past the cache, float32 / float64 sums, products and averages take one fused pass
 * (the space's reduce_fanout; mem/reduce_nt.h on the host): 2 ranks, 64 MiB, 6 interleaved
 * launches each, 9.6-12.5 GB/s busbw against 8.1-9.4 for reducing 8 KiB pieces into a
 * scratch and writing that out with non-temporal stores; the
 * fused two-thread floor read 11.9-12.3 then.
 * Out of place, "past the cache" counts every buffer the call touches on the host, all
 * ranks' send and receive buffers (they share the L3), against twice the non-temporal
 * threshold (half the L3 by default). 3 interleaved launches each, busbw:
 *   2 ranks, 8 MiB (32 MiB touched): 12.4-23.0 GB/s fused, 5.8-7.5 cached;
 *   4 ranks, 4 MiB (32 MiB touched): 8.9-9.9 fused, 3.9-6.7 cached;
 *   2 ranks, 4 MiB (16 MiB touched): the cached path keeps 25-27 against 13-24 fused.
 * In place never: there the pass stores to the lines its own loads just brought in, and
 * the cached path with ordinary stores wins at every size (PyTorch's all-reduce is in
 * place). Busbw, 5 alternating launches, cached / fused with non-temporal stores (as
 * before, from 16 MiB): 2 ranks 16 MiB 15.5 / 7.1, 64 MiB 11.3 / 6.9, 256 MiB 10.6 / 7.8;
 * 4 ranks on 2 cores 11.0 / 5.6, 6.8 / 5.5, 6.7 / 5.4. */
static int fused(const weft__task *t, const weft__direct_bufs *b, size_t lo, size_t hi) {
  int n = t->comm->nranks;
  double bytes = (double)t->count * (double)weft__dtype_size(t->dtype);
  double thr = (double)weft__mem_nt_threshold();
  double touched = 2.0 * n * bytes; /* every rank's send and receive buffer */
  return t->sendbuf != t->recvbuf && touched >= 2.0 * thr && fold(t, b, lo, hi);
}

/* Whole blocks (a device: algos/direct.h): the same fan-out, in place too (each element is
 * read before it is written). */
static int whole(const weft__task *t, const weft__direct_bufs *b, size_t lo, size_t hi) {
  return weft__direct_whole_blocks(t) && fold(t, b, lo, hi);
}

static void work(const weft__task *t, const weft__direct_bufs *b) {
  int n = t->comm->nranks;
  size_t es = weft__dtype_size(t->dtype), piece = WEFT__DIRECT_PIECE / es, lo, hi;
  /* Out of place, non-temporal stores past the cache; in place ordinary ones (above). */
  unsigned nt = t->sendbuf == t->recvbuf ? 0 : weft__mem_nt_flag(t->count * es, 0);
  weft__direct_block(t->count, n, t->comm->rank, &lo, &hi);
  if (whole(t, b, lo, hi) || fused(t, b, lo, hi)) return;
  for (size_t at = lo; at < hi; at += piece) {
    size_t k = hi - at < piece ? hi - at : piece, off = at * es;
    weft__mem_reduce(t->mem, b->tmp, b->in[0] + off, b->in[1] + off, k, t->dtype, t->op);
    for (int j = 2; j < n; j++) weft__mem_reduce(t->mem, b->tmp, b->tmp, b->in[j] + off, k, t->dtype, t->op);
    if (t->op == WEFT_AVG) weft__mem_avg(t->mem, b->tmp, k, t->dtype, n);
    for (int j = 0; j < n; j++) weft__mem_copy(t->mem, b->out[j] + off, b->tmp, k * es, nt);
  }
}

const weft__direct_ops weft__direct_all_reduce = {extents, work};

const weft__algo weft__algo_all_reduce_direct = {
    .name = "direct", .coll = WEFT__COLL_ALL_REDUCE, .start = weft__direct_start,
    .progress = weft__direct_progress, .wanted = weft__direct_wanted, .spaces = WEFT__DIRECT_SPACES,
    .needs = WEFT__TRANSPORT_CAP_PEER_MEMORY};
