/* all_reduce/ring.c: ring all-reduce = ring reduce-scatter, then ring all-gather, per slice.
 *
 * The count elements are split evenly into n blocks (block b belongs to the rank at ring
 * position b, the communicator's ring order, ring.h; r below is this rank's position); each block
 * is cut into pieces of at most chunk elements and slice k is the k-th piece of every block,
 * so a slice moves at most n * chunk elements. Per slice, 2(n-1) ring steps (ring.h):
 *   steps 0 .. n-2    reduce-scatter: receive block (r-s-2) and reduce it on arrival into
 *                     recvbuf with acc = this rank's sendbuf block (so in-place works);
 *                     step 0 sends from sendbuf, later steps forward the partial in recvbuf.
 *                     After it, block r of the slice is fully reduced; WEFT_AVG divides it
 *                     once, piece by piece as the last step's receive reduces it
 *                     (weft__ring_driver.avg_step), so every rank receives identical bits.
 *   steps n-1 .. 2n-3 all-gather: forward reduced blocks around the ring into recvbuf.
 * Large out-of-place calls (weft__ring_nt_output: the output is past half the L3) keep the
 * partials in a cache-resident scratch instead: steps 0 .. n-2 reduce into scratch slot s, the next step
 * sends from it, and step n-1 copies the reduced block into recvbuf as its send reads it
 * (weft__req.copy_to), past the cache, as the last step's receive lands. recvbuf is then
 * written once, without the read for ownership that ordinary stores make, and never read:
 * 2 bytes of DRAM traffic per byte per rank (read sendbuf, write recvbuf), against 3-3.5
 * when the partials go through recvbuf. The scratch is (n-1) * chunk bytes, the comm's.
 * Measured on 2 ranks (launches where the VM was in its fast phase): out of place 16-256 MiB
 * 6.5-7.5 GB/s busbw against 4.6-6.2 before. In place keeps the old path: there the reduce
 * stores to lines its acc read just brought in (no extra read), and the scratch path
 * measured 6.8-7.3 GB/s against 8.5-11. So does a rank whose receives come over a
 * transport that lands them itself (no WEFT__TRANSPORT_CAP_NT_LANDING: socket, where the
 * kernel writes recvbuf with ordinary stores): there the scratch only adds the copy into
 * recvbuf, and 2-rank socket all-reduces of 16-128 MiB ran 1.1-1.4x slower on it (Zen 3
 * VM, 3 interleaved rounds). Each rank decides for itself; the messages are the same.
 * Every step but the last feeds the next one's send as it lands (weft__ring_driver.fuse_steps,
 * weft__req.fwd: NCCL's recvReduceSend / recvCopySend), where the next connection lets the
 * core write its FIFO slots (WEFT__TRANSPORT_CAP_SEND_SLOT: shm): each piece goes on as
 * soon as it is reduced instead of after the whole message; on the scratch path the last
 * reduce-scatter step's pieces are reduced straight into the slot and copied from there
 * into recvbuf, never into the scratch (weft__ring_driver.slot_step; lib/req.c says why
 * only that step). WEFT_AVG forwards too: its division is the last reduce-scatter receive's,
 * not send_of's (which runs before the block it would divide is complete), except on a
 * communicator of more than 65535 ranks (weft__req.avg_div's range), which divides in
 * send_of and does not feed its sends.
 * Bytes each rank sends: 2 (n-1)/n * count * size (bandwidth optimal).
 * Latency term: 2 (n-1) steps per slice, ceil(count / (n chunk)) slices.
 * The tuner picks it for large messages (its row at the end of this file).
 * Sources: Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
 * workstations" (JPDC 2009); NCCL's ring all-reduce; Thakur, Rabenseifner & Gropp 2005. */
#include <stdint.h>
#include <string.h>
#include "algos/ring.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/task.h"
#include "transports/transport.h"

typedef struct {
  weft__ring_driver ring;
  weft__ring_layout layout;
  size_t esize;
  char *partial; /* large calls: (n-1) slots of chunk elements, the reduce-scatter partials */
  weft__req reqs[]; /* nsteps sends, then nsteps receives */
} ar_state;

static char *partial_slot(const ar_state *st, int s) {
  return st->partial + (size_t)s * st->layout.chunk * st->esize;
}

static void ar_send_of(weft__task *t, size_t k, int s, const void **buf, size_t *bytes) {
  ar_state *st = t->state;
  int r = weft__comm_ring_pos(t->comm, t->comm->rank), n = t->comm->nranks;
  const char *base = s == 0 ? (const char *)t->sendbuf : (const char *)t->recvbuf;
  int b;
  if (s < n - 1) {
    b = weft__ring_rs_send_block(r, n, s);
  } else {
    b = weft__ring_ag_send_block(r, n, s - (n - 1));
  }
  size_t off, len = weft__ring_piece(&st->layout, b, k, &off);
  *buf = base + off * st->esize;
  if (st->partial != NULL && s >= 1 && s <= n - 1) *buf = partial_slot(st, s - 1);
  if (s == n - 1 && t->op == WEFT_AVG && st->ring.avg_step < 0) /* else divided on receipt */
    weft__mem_avg(t->mem, (void *)*buf, len, t->dtype, n);
  *bytes = len * st->esize;
}

static void ar_recv_of(weft__task *t, size_t k, int s, void **dst, const void **acc,
                       size_t *bytes) {
  ar_state *st = t->state;
  int r = weft__comm_ring_pos(t->comm, t->comm->rank), n = t->comm->nranks;
  int rs = s < n - 1;
  int b = rs ? weft__ring_rs_recv_block(r, n, s) : weft__ring_ag_recv_block(r, n, s - (n - 1));
  size_t off, len = weft__ring_piece(&st->layout, b, k, &off);
  *dst = rs && st->partial != NULL ? partial_slot(st, s) : (char *)t->recvbuf + off * st->esize;
  *acc = rs ? (const char *)t->sendbuf + off * st->esize : NULL;
  *bytes = len * st->esize;
}

/* Large calls: the fully reduced block leaves the scratch for recvbuf as it is sent. */
static void *ar_send_copy_to(weft__task *t, size_t k, int s) {
  ar_state *st = t->state;
  int n = t->comm->nranks;
  if (st->partial == NULL || s != n - 1) return NULL;
  size_t off;
  weft__ring_piece(&st->layout, weft__comm_ring_pos(t->comm, t->comm->rank), k, &off);
  return (char *)t->recvbuf + off * st->esize;
}

static const weft__ring_ops ar_ops = {ar_send_of, ar_recv_of, NULL, NULL, ar_send_copy_to};

static weft_status_t ar_start(weft__task *t) {
  int n = t->comm->nranks;
  int nsteps = 2 * (n - 1);
  size_t esize = weft__dtype_size(t->dtype);
  weft_status_t status;
  ar_state *st = weft__algo_state_alloc(t, sizeof(ar_state) + 2 * (size_t)nsteps * sizeof(weft__req),
                                        0, &status);
  if (st == NULL) return status;
  st->esize = esize;
  st->layout = weft__ring_layout_split(t->count, n, weft__chunk_elems(t->comm->chunk_bytes, esize));
  weft__ring_driver_init(&st->ring, t, &ar_ops, nsteps, weft__ring_nslices(&st->layout), st->reqs,
                         st->reqs + nsteps);
  if (n > 1 && t->sendbuf != t->recvbuf && weft__ring_nt_output(t->count * esize) &&
      (st->ring.prev->caps & WEFT__TRANSPORT_CAP_NT_LANDING)) {
    st->partial = weft__comm_scratch(t, (size_t)(n - 1) * st->layout.chunk * esize, &status);
    if (st->partial == NULL) return status;
    st->ring.nt = 1;
    /* Its partial lives in the scratch, its send copies to recvbuf. WEFT_AVG on more than
     * 2 ranks lands it in the scratch, divides it there and copies on (its division
     * would otherwise store to FIFO lines the peer last read; lib/req.c). */
    if (t->op != WEFT_AVG || n == 2) st->ring.slot_step = n - 2;
  }
  if (t->op == WEFT_AVG && n > 1 && n <= UINT16_MAX) st->ring.avg_step = n - 2;
  if (t->op != WEFT_AVG || st->ring.avg_step >= 0) st->ring.fuse_steps = nsteps - 1;
  if (n == 1 && t->sendbuf != t->recvbuf) weft__mem_copy(t->mem, t->recvbuf, t->sendbuf, t->count * esize, 0);
  return WEFT_SUCCESS;
}

static weft_status_t ar_progress(weft__task *t) {
  ar_state *st = t->state;
  return weft__ring_driver_progress(&st->ring, t);
}

/* Per slice 2 (n-1) steps; every rank moves 2 (n-1)/n of the buffer and reduces (n-1)/n. */
static double ar_cost(const weft__cost_in *c) {
  double slices = weft__cost_ceil_div(c->bytes, c->n * c->chunk);
  return slices * 2 * (c->n - 1) * c->a + 2 * (c->n - 1) / c->n * c->bytes * c->b +
         (c->n - 1) / c->n * c->bytes * c->g;
}

const weft__algo weft__algo_all_reduce_ring = {
    .name = "ring", .coll = WEFT__COLL_ALL_REDUCE, .start = ar_start, .progress = ar_progress,
    .cost = ar_cost, .spaces = WEFT__MEM_KINDS_CPU};
