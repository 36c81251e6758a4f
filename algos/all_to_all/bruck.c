/* all_to_all/bruck.c: Bruck's all-to-all, for small blocks and any rank count.
 *
 * Rank r first rotates its input into scratch: block i = its block for rank (r + i) mod n.
 * At step k (distance d = 2^k, k < ceil(log2 n)) it packs every block whose index has bit k
 * set, sends them to rank r + d, receives the same indices from rank r - d and unpacks them
 * in place. A block of index i thus moves by the sum of i's bits, i, and reaches its
 * destination still at index i; a last pass stores scratch block i as recvbuf block
 * (r - i) mod n, the input of that rank.
 * Bytes each rank sends: about n/2 * count * size per step, ceil(log2 n) steps (more bytes
 * than pairwise's n-1 blocks, in far fewer messages). Scratch: about 2 n blocks.
 * The tuner picks it for small blocks on several ranks.
 * Sources: Bruck, Ho, Kipnis, Upfal & Weathersby, IEEE TPDS 1997; Thakur, Rabenseifner &
 * Gropp 2005, section 3 (all-to-all for short messages). */
#include <string.h>
#include "algos/patterns.h"
#include "algos/rounds.h"
#include "lib/dtype.h"

typedef struct {
  weft__rounds rounds;
  size_t block;
  char *tmp, *out, *in; /* n blocks; two packing areas of n/2 + 1 blocks */
  weft__req req[2];
} bk_state;

/* Copies the blocks of tmp whose index has bit k set to or from pack; returns their bytes. */
static size_t pack(bk_state *st, int n, int k, char *packed, int unpack) {
  size_t off = 0;
  for (int i = 1; i < n; i++) {
    if (!((i >> k) & 1)) continue;
    char *b = st->tmp + (size_t)i * st->block;
    if (unpack) memcpy(b, packed + off, st->block);
    else memcpy(packed + off, b, st->block);
    off += st->block;
  }
  return off;
}

static void bk_post(weft__task *t, int k) {
  bk_state *st = t->state;
  int r = t->comm->rank, n = t->comm->nranks, d = 1 << k;
  size_t bytes = pack(st, n, k, st->out, 0);
  weft__round_send(&st->rounds, t, weft__ring_mod((long long)r + d, n), st->out, bytes);
  weft__round_recv(&st->rounds, t, weft__ring_mod((long long)r - d, n), st->in, NULL, bytes);
}

static void bk_finish(weft__task *t, int k) {
  bk_state *st = t->state;
  int r = t->comm->rank, n = t->comm->nranks;
  pack(st, n, k, st->in, 1);
  if (k != st->rounds.nrounds - 1) return;
  for (int i = 0; i < n; i++)
    weft__mem_copy(t->mem, (char *)t->recvbuf + (size_t)weft__ring_mod((long long)r - i, n) * st->block,
                   st->tmp + (size_t)i * st->block, st->block, 0);
}

static weft_status_t bk_start(weft__task *t) {
  int r = t->comm->rank, n = t->comm->nranks;
  size_t block = t->count * weft__dtype_size(t->dtype);
  int run = n > 1 && block > 0;
  size_t hdr = weft__align_up(sizeof(bk_state), 64), half = (size_t)(n / 2 + 1) * block;
  weft_status_t status;
  bk_state *st = weft__algo_state_alloc(t, hdr, run ? (size_t)n * block + 2 * half : 0, &status);
  if (st == NULL) return status;
  st->block = block;
  st->tmp = (char *)st + hdr;
  st->out = st->tmp + (size_t)n * block;
  st->in = st->out + half;
  if (!run) {
    if (t->sendbuf != t->recvbuf) weft__mem_copy(t->mem, t->recvbuf, t->sendbuf, block, 0);
    weft__rounds_init(&st->rounds, 0, st->req, 2, bk_post, bk_finish);
    return WEFT_SUCCESS;
  }
  for (int i = 0; i < n; i++)
    weft__mem_copy(t->mem, st->tmp + (size_t)i * block,
                   (const char *)t->sendbuf + (size_t)weft__ring_mod((long long)r + i, n) * block, block, 0);
  weft__rounds_init(&st->rounds, weft__ceil_log2(n), st->req, 2, bk_post, bk_finish);
  weft__rounds_progress(&st->rounds, t);
  return WEFT_SUCCESS;
}

static weft_status_t bk_progress(weft__task *t) {
  bk_state *st = t->state;
  return weft__rounds_progress(&st->rounds, t);
}

/* About n/2 blocks per step, packed and unpacked, plus the two rotations. */
static double bk_cost(const weft__cost_in *c) {
  double moved = c->L * (c->n / 2) * c->bytes;
  return c->L * c->a + moved * c->b * 2 + 2 * c->n * c->bytes * c->b;
}

const weft__algo weft__algo_all_to_all_bruck = {
    .name = "bruck", .coll = WEFT__COLL_ALL_TO_ALL, .start = bk_start, .progress = bk_progress,
    .cost = bk_cost, .max_bytes = 64 << 10, .spaces = WEFT__MEM_KINDS_CPU};
