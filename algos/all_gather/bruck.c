/* all_gather/bruck.c: Bruck's all-gather, for small messages and any rank count.
 *
 * Rank r keeps a scratch of n blocks, rotated so that its block i is rank (r + i)'s input.
 * It starts with its own input in block 0. At step k (distance d = 2^k, k < ceil(log2 n))
 * it sends its first min(d, n - d) blocks to rank r - d and receives as many from rank
 * r + d into blocks d .. d + min(d, n - d) - 1: rank r + d's first blocks are the inputs of
 * ranks r + d, r + d + 1, ..., exactly the ones r lacks next. A last local pass copies
 * scratch block i to recvbuf block (r + i) mod n. Every block travels unchanged.
 * Bytes each rank sends: (n-1) * sendcount * size, in ceil(log2 n) messages (against n-1
 * for the ring). Scratch: n * sendcount * size. The tuner picks it for small messages.
 * Sources: Bruck, Ho, Kipnis, Upfal & Weathersby, "Efficient algorithms for all-to-all
 * communications in multiport message-passing systems" (IEEE TPDS 1997); Thakur,
 * Rabenseifner & Gropp 2005, section 3 (Bruck all-gather for short messages). */
#include <string.h>
#include "algos/patterns.h"
#include "algos/rounds.h"
#include "lib/dtype.h"

typedef struct {
  weft__rounds rounds;
  size_t block; /* bytes per rank */
  char *scratch;
  weft__req req[2];
} bk_state;

static void bk_post(weft__task *t, int k) {
  bk_state *st = t->state;
  int r = t->comm->rank, n = t->comm->nranks, d = 1 << k;
  size_t bytes = (size_t)weft__bruck_blocks(n, k) * st->block;
  weft__round_send(&st->rounds, t, weft__ring_mod((long long)r - d, n), st->scratch, bytes);
  weft__round_recv(&st->rounds, t, weft__ring_mod((long long)r + d, n),
                   st->scratch + (size_t)d * st->block, NULL, bytes);
}

static void bk_finish(weft__task *t, int k) {
  bk_state *st = t->state;
  if (k != st->rounds.nrounds - 1) return;
  int r = t->comm->rank, n = t->comm->nranks;
  /* Scratch blocks 0 .. n-r-1 are ranks r .. n-1, the rest ranks 0 .. r-1. */
  size_t head = (size_t)(n - r) * st->block;
  weft__mem_copy(t->mem, (char *)t->recvbuf + (size_t)r * st->block, st->scratch, head, 0);
  weft__mem_copy(t->mem, t->recvbuf, st->scratch + head, (size_t)r * st->block, 0);
}

static weft_status_t bk_start(weft__task *t) {
  int r = t->comm->rank, n = t->comm->nranks;
  size_t block = t->count * weft__dtype_size(t->dtype);
  int run = n > 1 && block > 0;
  size_t hdr = weft__align_up(sizeof(bk_state), 64);
  weft_status_t status;
  bk_state *st = weft__algo_state_take(t, hdr, run ? (size_t)n * block : 0, &status); /* every field set below */
  if (st == NULL) return status;
  st->block = block;
  st->scratch = (char *)st + hdr;
  if (!run) {
    char *mine = (char *)t->recvbuf + (size_t)r * block;
    if ((const char *)t->sendbuf != mine) weft__mem_copy(t->mem, mine, t->sendbuf, block, 0);
    weft__rounds_init(&st->rounds, 0, st->req, 2, bk_post, bk_finish);
    return WEFT_SUCCESS;
  }
  weft__mem_copy(t->mem, st->scratch, t->sendbuf, block, 0);
  weft__rounds_init(&st->rounds, weft__ceil_log2(n), st->req, 2, bk_post, bk_finish);
  weft__rounds_progress(&st->rounds, t);
  return WEFT_SUCCESS;
}

static weft_status_t bk_progress(weft__task *t) {
  bk_state *st = t->state;
  return weft__rounds_progress(&st->rounds, t);
}

/* Plus the copies into and out of the rotated scratch. */
static double bk_cost(const weft__cost_in *c) {
  return c->L * c->a + (c->n - 1) * c->bytes * c->b + 2 * c->n * c->bytes * c->b;
}

const weft__algo weft__algo_all_gather_bruck = {
    .name = "bruck", .coll = WEFT__COLL_ALL_GATHER, .start = bk_start, .progress = bk_progress,
    .cost = bk_cost, .max_bytes = 256 << 10, .spaces = WEFT__MEM_KINDS_CPU};
