/* test_random.c: a long random sequence of mixed collectives on one communicator.
 *
 * A seed (WEFT_TEST_SEED, else the clock) is printed first as a TAP diagnostic,
 * "# seed N", so a failure can be replayed with WEFT_TEST_SEED=N. Every rank derives the
 * same sequence from it: 300 operations, each a random collective (all_reduce, broadcast,
 * reduce, all_gather, reduce_scatter, all_to_all, all_to_allv, gather, scatter, barrier, or
 * a ring of send/recv in a group) with a random datatype, op, count (0..20000, small ones
 * more often), root and in-place choice, on 4 ranks over shm and 3 over sockets. Each
 * result is checked against a reference the rank computes locally, with guard bytes before
 * and after every buffer; results that must be replicated (all_reduce, broadcast,
 * all_gather) are chained into a hash compared across ranks at the end. Passing means 0
 * mismatches; a failure names the operation's index, so the replay can stop there.
 *
 * Values are small integers, exact in every datatype (see test_collectives.c):
 *   reductions: sum/avg (3 r + 5 j + salt) mod 9 - 4 for signed types; prod: 2 when
 *   (7 j + r) mod 8 < 3 else 1, negated on signed types when (j + 3 r) mod 5 == 0;
 *   min/max (7 r + 3 j + salt) mod 11 - 5;  moves: (31 src + 17 dst + 5 j + salt) mod 127. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "mem/kernels.h"
#include "tests/harness.h"

#define NOPS 300
#define MAX_COUNT 20000
#define FILL 0xEE
#define MAX_REPORTS 30

enum { R_ALL_REDUCE, R_BROADCAST, R_REDUCE, R_ALL_GATHER, R_REDUCE_SCATTER, R_ALL_TO_ALL,
       R_ALL_TO_ALLV, R_GATHER, R_SCATTER, R_BARRIER, R_SENDRECV, R_NUM };
static const char *names[R_NUM] = {"all_reduce", "broadcast", "reduce", "all_gather",
                                   "reduce_scatter", "all_to_all", "all_to_allv", "gather",
                                   "scatter", "barrier", "send/recv ring"};

static uint64_t seed;

typedef struct {
  int nranks;
  const char *transport;
} params;

/* One operation of the sequence, the same on every rank. */
typedef struct {
  int index, coll, root, inplace, salt;
  weft_datatype_t dt;
  weft_redop_t op;
  size_t count;
  uint64_t key; /* drives all_to_allv's per-pair counts */
} rop;

typedef struct {
  harness_rank *r;
  int fatal;
  uint64_t replicated; /* chain of the results every rank must hold identically */
  char desc[200];
} state;

/* ---- the sequence ------------------------------------------------------------------------ */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static rop next_op(uint64_t *rng, int index, int n) {
  rop o;
  o.index = index;
  o.coll = (int)(splitmix(rng) % R_NUM);
  o.dt = (weft_datatype_t)(splitmix(rng) % WEFT_NUM_DATATYPES);
  o.op = (weft_redop_t)(splitmix(rng) % WEFT_NUM_OPS);
  uint64_t sz = splitmix(rng);
  /* Half small (0..64), a quarter up to 2000, a quarter up to MAX_COUNT. */
  o.count = (size_t)(sz % 4 < 2 ? (sz >> 8) % 65 : sz % 4 == 2 ? (sz >> 8) % 2001 : (sz >> 8) % (MAX_COUNT + 1));
  o.root = (int)(splitmix(rng) % (uint64_t)n);
  o.inplace = (int)(splitmix(rng) % 2);
  o.salt = (int)(splitmix(rng) % 97);
  o.key = splitmix(rng);
  return o;
}

/* ---- values and references --------------------------------------------------------------- */

static int is_signed(weft_datatype_t dt) {
  return dt != WEFT_UINT8 && dt != WEFT_UINT32 && dt != WEFT_UINT64;
}

static long red_value(weft_redop_t op, int sgn, int rank, size_t j, int salt) {
  long v;
  switch (op) {
  case WEFT_SUM:
  case WEFT_AVG:
    v = (long)((rank * 3 + j * 5 + (size_t)salt) % 9);
    return sgn ? v - 4 : v;
  case WEFT_PROD:
    v = (j * 7 + (size_t)rank) % 8 < 3 ? 2 : 1;
    return sgn && (j + (size_t)rank * 3) % 5 == 0 ? -v : v;
  default:
    v = (long)(((size_t)rank * 7 + j * 3 + (size_t)salt) % 11);
    return sgn ? v - 5 : v;
  }
}

static long move_value(int src, int dst, size_t j, int salt) {
  return (long)(((size_t)src * 31 + (size_t)dst * 17 + j * 5 + (size_t)salt) % 127);
}

static void fill_red(uint8_t *p, const rop *o, int rank, size_t j0, size_t count) {
  for (size_t j = 0; j < count; j++)
    harness_store(p, j, o->dt, red_value(o->op, is_signed(o->dt), rank, j0 + j, o->salt));
}

static void fill_move(uint8_t *p, size_t count, weft_datatype_t dt, int src, int dst, int salt) {
  for (size_t j = 0; j < count; j++) harness_store(p, j, dt, move_value(src, dst, j, salt));
}

/* The reduction over n ranks of elements j0 .. j0+count, as WEFT_AVG and the others define it. */
static void fill_reduced(uint8_t *p, const rop *o, int n, size_t j0, size_t count) {
  int sgn = is_signed(o->dt);
  for (size_t j = 0; j < count; j++) {
    long acc = red_value(o->op, sgn, 0, j0 + j, o->salt);
    for (int r = 1; r < n; r++) {
      long v = red_value(o->op, sgn, r, j0 + j, o->salt);
      if (o->op == WEFT_SUM || o->op == WEFT_AVG) acc += v;
      else if (o->op == WEFT_PROD) acc *= v;
      else if (o->op == WEFT_MAX) acc = v > acc ? v : acc;
      else acc = v < acc ? v : acc;
    }
    if (o->op != WEFT_AVG) { harness_store(p, j, o->dt, acc); continue; }
    float q = (float)acc / (float)n;
    switch (o->dt) {
    case WEFT_FLOAT16: ((uint16_t *)p)[j] = weft__float_to_half(q); break;
    case WEFT_BFLOAT16: ((uint16_t *)p)[j] = weft__float_to_bf16(q); break;
    case WEFT_FLOAT32: memcpy((float *)p + j, &q, sizeof q); break; /* p may be misaligned */
    case WEFT_FLOAT64: { double d = (double)acc / (double)n; memcpy((double *)p + j, &d, sizeof d); break; }
    default: harness_store(p, j, o->dt, acc / n); break;
    }
  }
}

/* Elements rank src sends to rank dst in all_to_allv operation o. */
static size_t vcount(const rop *o, int src, int dst) {
  uint64_t k = o->key ^ ((uint64_t)src * 0x9e3779b1u) ^ ((uint64_t)dst << 20);
  return o->count == 0 ? 0 : (size_t)(splitmix(&k) % (o->count / 4 + 1));
}

/* ---- checks ----------------------------------------------------------------------------- */

static int call_ok(state *s, weft_status_t st) {
  if (st == WEFT_SUCCESS) return 1;
  harness_fail(s->r, "%s: returned %s: \"%s\"", s->desc, harness_status_name(st),
               weft_get_last_error(s->r->comm));
  s->fatal = 1;
  return 0;
}

static void verify(state *s, const char *what, const uint8_t *got, const uint8_t *want,
                   size_t count, weft_datatype_t dt) {
  size_t esz = harness_esize(dt);
  if (count == 0 || memcmp(got, want, count * esz) == 0) return;
  if (s->r->failures >= MAX_REPORTS) { s->r->failures++; return; }
  for (size_t i = 0; i < count; i++)
    if (memcmp(got + i * esz, want + i * esz, esz) != 0) {
      harness_fail(s->r, "%s: %s[%zu]: got %.9g, expected %.9g", s->desc, what, i,
                   harness_load(got, i, dt), harness_load(want, i, dt));
      return;
    }
}

static uint8_t *galloc(size_t bytes) { return harness_guarded_alloc(bytes, FILL); }

/* Checks buf's guards, then frees it. */
static void gdone(state *s, uint8_t *buf, size_t bytes) {
  if (buf) harness_guarded_check(s->r, buf, bytes, s->desc);
  harness_guarded_free(buf);
}

static void replicate(state *s, const void *p, size_t bytes) {
  s->replicated = harness_hash(p, bytes, harness_hash(&bytes, sizeof bytes, s->replicated));
}

/* ---- the operations --------------------------------------------------------------------- */

static void run_all_reduce(state *s, const rop *o, uint8_t *want) {
  size_t bytes = o->count * harness_esize(o->dt);
  uint8_t *recv = galloc(bytes), *send = o->inplace ? recv : galloc(bytes);
  fill_red(send, o, s->r->rank, 0, o->count);
  if (!call_ok(s, weft_all_reduce(send, recv, o->count, o->dt, o->op, s->r->comm, NULL))) return;
  fill_reduced(want, o, s->r->nranks, 0, o->count);
  verify(s, "recvbuf", recv, want, o->count, o->dt);
  replicate(s, recv, bytes);
  if (!o->inplace) gdone(s, send, bytes);
  gdone(s, recv, bytes);
}

static void run_broadcast(state *s, const rop *o, uint8_t *want) {
  size_t bytes = o->count * harness_esize(o->dt);
  uint8_t *recv = galloc(bytes), *send = o->inplace ? recv : galloc(bytes);
  if (s->r->rank == o->root) fill_move(send, o->count, o->dt, o->root, 0, o->salt);
  if (!call_ok(s, weft_broadcast(send, recv, o->count, o->dt, o->root, s->r->comm, NULL))) return;
  fill_move(want, o->count, o->dt, o->root, 0, o->salt);
  verify(s, "recvbuf", recv, want, o->count, o->dt);
  replicate(s, recv, bytes);
  if (!o->inplace) gdone(s, send, bytes);
  gdone(s, recv, bytes);
}

static void run_reduce(state *s, const rop *o, uint8_t *want) {
  size_t bytes = o->count * harness_esize(o->dt);
  int me_root = s->r->rank == o->root;
  uint8_t *send = galloc(bytes);
  uint8_t *recv = o->inplace ? send : me_root ? galloc(bytes) : NULL;
  fill_red(send, o, s->r->rank, 0, o->count);
  if (!call_ok(s, weft_reduce(send, recv, o->count, o->dt, o->op, o->root, s->r->comm, NULL))) return;
  if (me_root) {
    fill_reduced(want, o, s->r->nranks, 0, o->count);
    verify(s, "root's recvbuf", recv, want, o->count, o->dt);
  }
  if (!me_root || !o->inplace) {
    fill_red(want, o, s->r->rank, 0, o->count);
    verify(s, "sendbuf (must stay unchanged)", send, want, o->count, o->dt);
  }
  if (recv != send) gdone(s, recv, bytes);
  gdone(s, send, bytes);
}

static void run_all_gather(state *s, const rop *o, uint8_t *want) {
  int n = s->r->nranks, me = s->r->rank;
  size_t bytes = o->count * harness_esize(o->dt);
  uint8_t *recv = galloc(bytes * (size_t)n);
  uint8_t *send = o->inplace ? recv + (size_t)me * bytes : galloc(bytes);
  fill_move(send, o->count, o->dt, me, 0, o->salt);
  if (!call_ok(s, weft_all_gather(send, recv, o->count, o->dt, s->r->comm, NULL))) return;
  for (int p = 0; p < n; p++) fill_move(want + (size_t)p * bytes, o->count, o->dt, p, 0, o->salt);
  verify(s, "recvbuf", recv, want, o->count * (size_t)n, o->dt);
  replicate(s, recv, bytes * (size_t)n);
  if (!o->inplace) gdone(s, send, bytes);
  gdone(s, recv, bytes * (size_t)n);
}

static void run_reduce_scatter(state *s, const rop *o, uint8_t *want) {
  int n = s->r->nranks, me = s->r->rank;
  size_t bytes = o->count * harness_esize(o->dt), all = bytes * (size_t)n;
  uint8_t *send = galloc(all);
  uint8_t *recv = o->inplace ? send + (size_t)me * bytes : galloc(bytes);
  fill_red(send, o, me, 0, o->count * (size_t)n);
  if (!call_ok(s, weft_reduce_scatter(send, recv, o->count, o->dt, o->op, s->r->comm, NULL))) return;
  fill_reduced(want, o, n, o->count * (size_t)me, o->count);
  verify(s, "recvbuf", recv, want, o->count, o->dt);
  if (!o->inplace) gdone(s, recv, bytes);
  gdone(s, send, all);
}

static void run_all_to_all(state *s, const rop *o, uint8_t *want) {
  int n = s->r->nranks, me = s->r->rank;
  size_t bytes = o->count * harness_esize(o->dt), all = bytes * (size_t)n;
  uint8_t *recv = galloc(all), *send = o->inplace ? recv : galloc(all);
  for (int p = 0; p < n; p++) fill_move(send + (size_t)p * bytes, o->count, o->dt, me, p, o->salt);
  if (!call_ok(s, weft_all_to_all(send, recv, o->count, o->dt, s->r->comm, NULL))) return;
  for (int p = 0; p < n; p++) fill_move(want + (size_t)p * bytes, o->count, o->dt, p, me, o->salt);
  verify(s, "recvbuf", recv, want, o->count * (size_t)n, o->dt);
  if (!o->inplace) gdone(s, send, all);
  gdone(s, recv, all);
}

/* Blocks packed in rank order with no gaps on both sides (test_more_collectives covers gaps). */
static void run_all_to_allv(state *s, const rop *o, uint8_t *want) {
  int n = s->r->nranks, me = s->r->rank;
  size_t esz = harness_esize(o->dt);
  size_t sc[HARNESS_MAX_RANKS], sd[HARNESS_MAX_RANKS], rc[HARNESS_MAX_RANKS], rd[HARNESS_MAX_RANKS];
  size_t sext = 0, rext = 0;
  for (int p = 0; p < n; p++) {
    sc[p] = vcount(o, me, p), sd[p] = sext, sext += sc[p];
    rc[p] = vcount(o, p, me), rd[p] = rext, rext += rc[p];
  }
  uint8_t *send = galloc(sext * esz), *recv = galloc(rext * esz);
  for (int p = 0; p < n; p++) fill_move(send + sd[p] * esz, sc[p], o->dt, me, p, o->salt);
  if (!call_ok(s, weft_all_to_allv(send, sc, sd, recv, rc, rd, o->dt, s->r->comm, NULL))) return;
  for (int p = 0; p < n; p++) fill_move(want + rd[p] * esz, rc[p], o->dt, p, me, o->salt);
  verify(s, "recvbuf", recv, want, rext, o->dt);
  gdone(s, send, sext * esz);
  gdone(s, recv, rext * esz);
}

static void run_gather(state *s, const rop *o, uint8_t *want) {
  int n = s->r->nranks, me = s->r->rank, me_root = me == o->root;
  size_t bytes = o->count * harness_esize(o->dt), all = bytes * (size_t)n;
  uint8_t *recv = me_root ? galloc(all) : NULL;
  uint8_t *send = me_root && o->inplace ? recv + (size_t)me * bytes : galloc(bytes);
  fill_move(send, o->count, o->dt, me, o->root, o->salt);
  if (!call_ok(s, weft_gather(send, recv, o->count, o->dt, o->root, s->r->comm, NULL))) return;
  if (me_root) {
    for (int p = 0; p < n; p++) fill_move(want + (size_t)p * bytes, o->count, o->dt, p, me, o->salt);
    verify(s, "root's recvbuf", recv, want, o->count * (size_t)n, o->dt);
    gdone(s, recv, all);
  }
  if (!(me_root && o->inplace)) gdone(s, send, bytes);
}

static void run_scatter(state *s, const rop *o, uint8_t *want) {
  int n = s->r->nranks, me = s->r->rank, me_root = me == o->root;
  size_t bytes = o->count * harness_esize(o->dt), all = bytes * (size_t)n;
  uint8_t *send = me_root ? galloc(all) : NULL;
  for (int p = 0; p < n && send; p++) fill_move(send + (size_t)p * bytes, o->count, o->dt, me, p, o->salt);
  uint8_t *recv = me_root && o->inplace ? send + (size_t)me * bytes : galloc(bytes);
  if (!call_ok(s, weft_scatter(send, recv, o->count, o->dt, o->root, s->r->comm, NULL))) return;
  fill_move(want, o->count, o->dt, o->root, me, o->salt);
  verify(s, "recvbuf", recv, want, o->count, o->dt);
  if (!(me_root && o->inplace)) gdone(s, recv, bytes);
  if (me_root) gdone(s, send, all);
}

/* Each rank sends count elements to the next rank and receives from the previous one. */
static void run_sendrecv(state *s, const rop *o, uint8_t *want) {
  int n = s->r->nranks, me = s->r->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
  size_t bytes = o->count * harness_esize(o->dt);
  uint8_t *send = galloc(bytes), *recv = galloc(bytes);
  fill_move(send, o->count, o->dt, me, next, o->salt);
  weft_group_start();
  weft_send(send, o->count, o->dt, next, s->r->comm, NULL);
  weft_recv(recv, o->count, o->dt, prev, s->r->comm, NULL);
  if (!call_ok(s, weft_group_end())) return;
  fill_move(want, o->count, o->dt, prev, me, o->salt);
  verify(s, "recvbuf", recv, want, o->count, o->dt);
  gdone(s, send, bytes);
  gdone(s, recv, bytes);
}

static void run_op(state *s, const rop *o, uint8_t *want) {
  typedef void (*run_fn)(state *, const rop *, uint8_t *);
  static const run_fn fns[R_NUM] = {run_all_reduce, run_broadcast, run_reduce, run_all_gather,
                                    run_reduce_scatter, run_all_to_all, run_all_to_allv, run_gather,
                                    run_scatter, NULL, run_sendrecv};
  snprintf(s->desc, sizeof s->desc, "op %d of seed %llu: %s %s %s count %zu root %d %s", o->index,
           (unsigned long long)seed, names[o->coll], harness_dt_name(o->dt), harness_op_name(o->op),
           o->count, o->root, o->inplace ? "in-place" : "out-of-place");
  if (o->coll == R_BARRIER) {
    call_ok(s, weft_barrier(s->r->comm, NULL));
    return;
  }
  fns[o->coll](s, o, want);
}

static int random_body(harness_rank *r) {
  state s = {0};
  s.r = r;
  uint64_t rng = seed;
  uint8_t *want = malloc((size_t)MAX_COUNT * 8 * (size_t)r->nranks + 64);
  double t0 = harness_now_ms();
  int done = 0;
  for (; done < NOPS && !s.fatal; done++) {
    rop o = next_op(&rng, done, r->nranks);
    run_op(&s, &o, want);
  }
  free(want);
  if (!s.fatal) harness_same_on_all_ranks(r, s.replicated, "replicated results of the sequence");
  if (s.fatal && r->comm) {
    weft_comm_abort(r->comm);
    r->comm = NULL;
  }
  if (r->rank == 0)
    harness_note(r, "seed %llu: %d operations, %d failed checks, %.1f s", (unsigned long long)seed,
                 done, r->failures, (harness_now_ms() - t0) / 1e3);
  return r->failures;
}

static void random_sequence(void **state_) {
  const params *p = *state_;
  harness_opts o = {0};
  o.nranks = p->nranks;
  o.transport = p->transport;
  o.deadline_s = 240;
  harness_run(&o, random_body, NULL);
}

int main(void) {
  const char *env = getenv("WEFT_TEST_SEED");
  seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
  printf("# seed %llu (replay: WEFT_TEST_SEED=%llu)\n", (unsigned long long)seed,
         (unsigned long long)seed);
  fflush(stdout);
  const struct CMUnitTest tests[] = {
      {"random_mixed_collectives_match_reference_on_4_ranks_over_shm", random_sequence, NULL, NULL,
       &(params){4, "shm"}},
      {"random_mixed_collectives_match_reference_on_3_ranks_over_socket", random_sequence, NULL,
       NULL, &(params){3, "socket"}},
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
