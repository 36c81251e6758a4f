/* sweep.c: the collective sweep (sweep.h) of test_collectives.c and test_guarded.c:
 * every collective, on real rank processes, against a reference each rank computes
 * locally.
 *
 * In each run, one communicator runs all_reduce, broadcast, reduce, all_gather,
 * reduce_scatter and all_to_all over every datatype, every op where one applies, counts 0,
 * 1, 2, 3, 5, 7, 4095, 4097 (2^12 -+ 1; the quick sweep: 0, 1, 7, 4097) and one above the
 * pipeline chunk (sweep_params.big_bytes: 1 MiB, or 256 KiB with 4 KiB chunks), in place and out of
 * place, every root of broadcast and reduce (see sweep_reductions), and checks the received
 * elements, the guard bytes before and after every buffer, that send buffers stay
 * unchanged, and, after each count, that the results every rank must share (all_reduce,
 * broadcast, all_gather) are bitwise identical on every rank (a hash chain all-gathered).
 *
 * Values are small integers chosen so that every result is exact in every datatype
 * (bf16 holds integers up to 256 exactly, int8 up to 127):
 *   sum, avg: (3 rank + 5 j + 1) mod 9, minus 4 for signed types: |sum| <= 64 on 8 ranks;
 *   prod:     2 when (7 j + rank) mod 8 < 3, else 1, so at most 3 twos per index across <= 8
 *             ranks (|prod| <= 8); negated for signed types when (j + 3 rank) mod 5 == 0;
 *   min, max: (7 rank + 3 j) mod 11, minus 5 for signed types;
 *   moves:    (7 src + 3 dst + 5 j + 1) mod 11 (broadcast and all_gather use dst 0), so a
 *             block from the wrong rank, to the wrong rank or shifted by < 11 elements
 *             differs.
 * avg is the exact sum divided by nranks once, in the datatype's arithmetic (C integer
 * division; fp32 / fp64 division; fp16 / bf16: fp32 quotient rounded to nearest-even).
 * Every formula is periodic in the element index j with a period dividing 3960, so a
 * rank builds one period of its send data and of the expected result and tiles them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/comm.h"
#include "mem/guarded.h"
#include "mem/kernels.h"
#include "tests/harness.h"
#include "tests/sweep.h"

#define PERIOD 3960u   /* lcm(9, 8, 5, 11) */
#define FILL_BYTE 0xEE /* receive buffers start as this: never a valid expected value */
#define MAX_REPORTS 40 /* mismatch lines per rank before going quiet */

enum { C_ALL_REDUCE, C_BROADCAST, C_REDUCE, C_ALL_GATHER, C_REDUCE_SCATTER, C_ALL_TO_ALL,
       C_NUM };
static const char *coll_name[C_NUM] = {"all_reduce", "broadcast", "reduce", "all_gather",
                                        "reduce_scatter", "all_to_all"};


/* One rank's sweep state. */
typedef struct {
  harness_rank *r;
  int fatal;                    /* a call failed: the communicator is no longer trusted */
  uint8_t pat_a[PERIOD * 8];    /* one period of send data */
  uint8_t pat_b[PERIOD * 8];    /* one period of the expected result */
  uint64_t replicated;          /* chain of hashes of results every rank must hold bit for bit */
  double ms[C_NUM];             /* time spent per collective (rank 0 reports it) */
  long calls[C_NUM];
} sweep;

/* ---- element values and the reference ------------------------------------------------ */

static long move_value(int src, int dst, size_t j) {
  return (long)(((size_t)src * 7 + (size_t)dst * 3 + (j % PERIOD) * 5 + 1) % 11);
}

/* sum / n in the datatype's arithmetic, as WEFT_AVG defines it. */
static void store_avg(void *p, size_t i, weft_datatype_t dt, long sum, int n) {
  float q = (float)sum / (float)n;
  switch (dt) {
  case WEFT_FLOAT16: ((uint16_t *)p)[i] = weft__float_to_half(q); break;
  case WEFT_BFLOAT16: ((uint16_t *)p)[i] = weft__float_to_bf16(q); break;
  case WEFT_FLOAT32: memcpy((float *)p + i, &q, sizeof q); break; /* p may be misaligned */
  case WEFT_FLOAT64: { double d = (double)sum / (double)n; memcpy((double *)p + i, &d, sizeof d); break; }
  default: harness_store(p, i, dt, sum / n); break; /* C division truncates toward zero */
  }
}

static void pattern_send(uint8_t *pat, weft_datatype_t dt, weft_redop_t op, int rank) {
  for (size_t j = 0; j < PERIOD; j++)
    harness_store(pat, j, dt, harness_red_value(op, dt, rank, j));
}

static void pattern_expect(uint8_t *pat, weft_datatype_t dt, weft_redop_t op, int n) {
  for (size_t j = 0; j < PERIOD; j++) {
    long acc = harness_red_value(op, dt, 0, j);
    for (int r = 1; r < n; r++) {
      long v = harness_red_value(op, dt, r, j);
      if (op == WEFT_SUM || op == WEFT_AVG) acc += v;
      else if (op == WEFT_PROD) acc *= v;
      else if (op == WEFT_MAX) acc = v > acc ? v : acc;
      else acc = v < acc ? v : acc;
    }
    if (op == WEFT_AVG) store_avg(pat, j, dt, acc, n);
    else harness_store(pat, j, dt, acc);
  }
}

static void pattern_move(uint8_t *pat, weft_datatype_t dt, int src, int dst) {
  for (size_t j = 0; j < PERIOD; j++) harness_store(pat, j, dt, move_value(src, dst, j));
}

/* In guarded mode weft gets buffers of the guarded space, which fault on any direct touch;
 * the test itself reads and writes them through harness_view. */
#define view harness_view

/* dst[i] = pat[(j0 + i) mod PERIOD] for i < count. */
static void tile(uint8_t *user_dst, size_t count, const uint8_t *pat, size_t esz, size_t j0) {
  uint8_t *dst = view(user_dst, count * esz);
  for (size_t i = 0; i < count;) {
    size_t k = (j0 + i) % PERIOD, run = PERIOD - k;
    if (run > count - i) run = count - i;
    memcpy(dst + i * esz, pat + k * esz, run * esz);
    i += run;
  }
}

/* ---- checks -------------------------------------------------------------------------- */

static int elem_differs(const uint8_t *got, const uint8_t *pat, size_t i, size_t esz,
                        size_t j0) {
  return memcmp(got + i * esz, pat + ((j0 + i) % PERIOD) * esz, esz) != 0;
}

/* Checks got[0..count) against the tiled pattern; reports the first mismatches. */
static void verify(sweep *s, const char *desc, const char *what, const uint8_t *user_got,
                   size_t count, weft_datatype_t dt, const uint8_t *pat, size_t j0) {
  size_t esz = harness_esize(dt), bad = 0, first = 0;
  const uint8_t *got = view(user_got, count * esz);
  for (size_t i = 0; i < count;) {
    size_t k = (j0 + i) % PERIOD, run = PERIOD - k;
    if (run > count - i) run = count - i;
    if (memcmp(got + i * esz, pat + k * esz, run * esz) != 0)
      for (size_t t = i; t < i + run; t++)
        if (elem_differs(got, pat, t, esz, j0) && bad++ == 0) first = t;
    i += run;
  }
  if (bad == 0) return;
  harness_rank *r = s->r;
  if (r->failures >= MAX_REPORTS) { r->failures++; return; }
  int shown = 0;
  for (size_t t = first; t < count && shown < 3; t++) {
    if (!elem_differs(got, pat, t, esz, j0)) continue;
    uint8_t want[8];
    memcpy(want, pat + ((j0 + t) % PERIOD) * esz, esz);
    harness_fail(r, "%s: %s[%zu]: got %.9g, expected %.9g (%zu of %zu elements differ)", desc,
                 what, t, harness_load(got, t, dt), harness_load(want, 0, dt), bad, count);
    shown++;
  }
}

/* With windows, buffers are carved from one registered block of this rank (a process per
 * rank, so the arena is per rank): a bump allocator that restarts when no buffer is live. */
#define ARENA_BYTES ((size_t)8 << 20)
static struct {
  uint8_t *base;
  size_t used;
  int live;
  int plain_every; /* every plain_every-th buffer from malloc instead; 0: never */
  long allocs;
  void *malloced;  /* windows modes 3 and 4: the malloc'd block holding base, else NULL */
  weft_reg_t reg;  /* windows mode 4: base's registration (weft_comm_register) */
} arena;

static int in_arena(const uint8_t *p) {
  return arena.base != NULL && p >= arena.base && p < arena.base + ARENA_BYTES;
}

/* Checks the guard bytes before and after buf (bytes long), then frees it. */
static void release(sweep *s, const char *desc, uint8_t *buf, size_t bytes) {
  if (buf == NULL) return;
  harness_guarded_check(s->r, buf, bytes, desc);
  if (!in_arena(buf)) harness_guarded_free(buf);
  else if (--arena.live == 0) arena.used = 0;
}

/* Results every rank must hold identically (all_reduce, broadcast, all_gather) are chained
 * into one hash, compared across ranks after each count. */
static void replicate(sweep *s, const void *p, size_t bytes) {
  s->replicated = harness_hash(view(p, bytes), bytes, harness_hash(&bytes, sizeof bytes, s->replicated));
}

static int call_ok(sweep *s, weft_status_t st, const char *desc) {
  if (st == WEFT_SUCCESS) return 1;
  harness_fail(s->r, "%s: returned %s: \"%s\"", desc, harness_status_name(st),
               weft_get_last_error(s->r->comm));
  s->fatal = 1;
  return 0;
}

/* A buffer of bytes filled with FILL_BYTE, with guard bytes before and after it. */
static uint8_t *alloc_buf(size_t bytes) {
  size_t need = (bytes + 2 * HARNESS_GUARD + 63) / 64 * 64;
  int plain = arena.plain_every > 0 && ++arena.allocs % arena.plain_every == 0;
  if (arena.base == NULL || plain || need > ARENA_BYTES - arena.used)
    return harness_guarded_alloc(bytes, FILL_BYTE);
  uint8_t *user = arena.base + arena.used, *b = view(user, bytes + 2 * HARNESS_GUARD);
  arena.used += need;
  arena.live++;
  memset(b, HARNESS_GUARD_BYTE, HARNESS_GUARD);
  memset(b + HARNESS_GUARD, FILL_BYTE, bytes);
  memset(b + HARNESS_GUARD + bytes, HARNESS_GUARD_BYTE, HARNESS_GUARD);
  return user + HARNESS_GUARD;
}

static void describe(char *desc, size_t len, int coll, weft_datatype_t dt, int op, size_t count,
                     int inplace, int root) {
  int n = snprintf(desc, len, "%s %s", coll_name[coll], harness_dt_name(dt));
  if (op >= 0) n += snprintf(desc + n, len - (size_t)n, " %s", harness_op_name(op));
  n += snprintf(desc + n, len - (size_t)n, " count %zu %s", count,
                inplace ? "in-place" : "out-of-place");
  if (root >= 0) snprintf(desc + n, len - (size_t)n, " root %d", root);
}

/* ---- one call of each collective, checked ---------------------------------------------- */

static void do_all_reduce(sweep *s, weft_datatype_t dt, weft_redop_t op, size_t count,
                          int inplace) {
  harness_rank *r = s->r;
  size_t esz = harness_esize(dt), bytes = count * esz;
  char desc[160];
  describe(desc, sizeof desc, C_ALL_REDUCE, dt, op, count, inplace, -1);
  pattern_send(s->pat_a, dt, op, r->rank);
  pattern_expect(s->pat_b, dt, op, r->nranks);
  uint8_t *recv = (count || inplace) ? alloc_buf(bytes) : NULL;
  uint8_t *send = NULL;
  if (inplace) tile(recv, count, s->pat_a, esz, 0);
  else if (count) tile(send = alloc_buf(bytes), count, s->pat_a, esz, 0);
  weft_status_t st = weft_all_reduce(inplace ? recv : send, recv, count, dt, op, r->comm, NULL);
  if (call_ok(s, st, desc) && recv) {
    verify(s, desc, "recvbuf", recv, count, dt, s->pat_b, 0);
    replicate(s, recv, bytes);
    if (send) verify(s, desc, "sendbuf (must stay unchanged)", send, count, dt, s->pat_a, 0);
  }
  release(s, desc, recv, bytes);
  release(s, desc, send, bytes);
}

static void do_broadcast(sweep *s, weft_datatype_t dt, size_t count, int inplace, int root) {
  harness_rank *r = s->r;
  size_t esz = harness_esize(dt), bytes = count * esz;
  char desc[160];
  describe(desc, sizeof desc, C_BROADCAST, dt, -1, count, inplace, root);
  pattern_move(s->pat_b, dt, root, 0);
  uint8_t *recv = (count || inplace) ? alloc_buf(bytes) : NULL;
  uint8_t *send = (count && !inplace) ? alloc_buf(bytes) : NULL;
  if (r->rank == root) tile(inplace ? recv : send, count, s->pat_b, esz, 0);
  weft_status_t st = weft_broadcast(inplace ? recv : send, recv, count, dt, root, r->comm, NULL);
  if (call_ok(s, st, desc) && recv) {
    verify(s, desc, "recvbuf", recv, count, dt, s->pat_b, 0);
    replicate(s, recv, bytes);
    if (send && r->rank == root)
      verify(s, desc, "root's sendbuf (must stay unchanged)", send, count, dt, s->pat_b, 0);
  }
  release(s, desc, recv, bytes);
  release(s, desc, send, bytes);
}

/* Non-roots pass recvbuf NULL out of place and sendbuf == recvbuf in place (then their
 * buffer must stay unchanged: recvbuf is used on root only). */
static void do_reduce(sweep *s, weft_datatype_t dt, weft_redop_t op, size_t count, int inplace,
                      int root) {
  harness_rank *r = s->r;
  size_t esz = harness_esize(dt), bytes = count * esz;
  int me_root = r->rank == root;
  char desc[160];
  describe(desc, sizeof desc, C_REDUCE, dt, op, count, inplace, root);
  pattern_send(s->pat_a, dt, op, r->rank);
  pattern_expect(s->pat_b, dt, op, r->nranks);
  uint8_t *send = (count || inplace) ? alloc_buf(bytes) : NULL;
  uint8_t *recv = inplace ? send : (me_root && count) ? alloc_buf(bytes) : NULL;
  if (send) tile(send, count, s->pat_a, esz, 0);
  weft_status_t st = weft_reduce(send, recv, count, dt, op, root, r->comm, NULL);
  if (call_ok(s, st, desc) && send) {
    if (me_root) verify(s, desc, "recvbuf", recv, count, dt, s->pat_b, 0);
    if (!me_root || !inplace)
      verify(s, desc, "sendbuf (must stay unchanged)", send, count, dt, s->pat_a, 0);
  }
  if (recv != send) release(s, desc, recv, bytes);
  release(s, desc, send, bytes);
}

static void do_all_gather(sweep *s, weft_datatype_t dt, size_t count, int inplace) {
  harness_rank *r = s->r;
  int n = r->nranks;
  size_t esz = harness_esize(dt), bytes = count * esz;
  char desc[160];
  describe(desc, sizeof desc, C_ALL_GATHER, dt, -1, count, inplace, -1);
  pattern_move(s->pat_a, dt, r->rank, 0);
  uint8_t *recv = (count || inplace) ? alloc_buf(bytes * (size_t)n) : NULL;
  uint8_t *send = NULL;
  if (inplace) tile(send = recv + bytes * (size_t)r->rank, count, s->pat_a, esz, 0);
  else if (count) tile(send = alloc_buf(bytes), count, s->pat_a, esz, 0);
  weft_status_t st = weft_all_gather(send, recv, count, dt, r->comm, NULL);
  if (call_ok(s, st, desc) && recv) {
    for (int p = 0; p < n; p++) {
      char what[64];
      snprintf(what, sizeof what, "recvbuf block of rank %d", p);
      pattern_move(s->pat_b, dt, p, 0);
      verify(s, desc, what, recv + bytes * (size_t)p, count, dt, s->pat_b, 0);
    }
    replicate(s, recv, bytes * (size_t)n);
    if (!inplace && send)
      verify(s, desc, "sendbuf (must stay unchanged)", send, count, dt, s->pat_a, 0);
  }
  if (!inplace) release(s, desc, send, bytes);
  release(s, desc, recv, bytes * (size_t)n);
}

static void do_reduce_scatter(sweep *s, weft_datatype_t dt, weft_redop_t op, size_t count,
                              int inplace) {
  harness_rank *r = s->r;
  int n = r->nranks;
  size_t esz = harness_esize(dt), bytes = count * esz, all = count * (size_t)n;
  char desc[160];
  describe(desc, sizeof desc, C_REDUCE_SCATTER, dt, op, count, inplace, -1);
  pattern_send(s->pat_a, dt, op, r->rank);
  pattern_expect(s->pat_b, dt, op, n);
  uint8_t *send = (count || inplace) ? alloc_buf(all * esz) : NULL;
  if (send) tile(send, all, s->pat_a, esz, 0);
  uint8_t *recv = inplace ? send + bytes * (size_t)r->rank : count ? alloc_buf(bytes) : NULL;
  weft_status_t st = weft_reduce_scatter(send, recv, count, dt, op, r->comm, NULL);
  if (call_ok(s, st, desc) && send) {
    verify(s, desc, "recvbuf", recv, count, dt, s->pat_b, count * (size_t)r->rank);
    if (!inplace)
      verify(s, desc, "sendbuf (must stay unchanged)", send, all, dt, s->pat_a, 0);
  }
  if (!inplace) release(s, desc, recv, bytes);
  release(s, desc, send, all * esz);
}

static void do_all_to_all(sweep *s, weft_datatype_t dt, size_t count, int inplace) {
  harness_rank *r = s->r;
  int n = r->nranks;
  size_t esz = harness_esize(dt), bytes = count * esz, all = bytes * (size_t)n;
  char desc[160];
  describe(desc, sizeof desc, C_ALL_TO_ALL, dt, -1, count, inplace, -1);
  uint8_t *recv = (count || inplace) ? alloc_buf(all) : NULL;
  uint8_t *send = inplace ? recv : count ? alloc_buf(all) : NULL;
  for (int p = 0; p < n && send; p++) {
    pattern_move(s->pat_a, dt, r->rank, p);
    tile(send + bytes * (size_t)p, count, s->pat_a, esz, 0);
  }
  weft_status_t st = weft_all_to_all(send, recv, count, dt, r->comm, NULL);
  if (call_ok(s, st, desc) && recv) {
    for (int p = 0; p < n; p++) {
      char what[64];
      snprintf(what, sizeof what, "recvbuf block from rank %d", p);
      pattern_move(s->pat_b, dt, p, r->rank);
      verify(s, desc, what, recv + bytes * (size_t)p, count, dt, s->pat_b, 0);
    }
    for (int p = 0; p < n && !inplace && send; p++) {
      pattern_move(s->pat_a, dt, r->rank, p);
      verify(s, desc, "sendbuf (must stay unchanged)", send + bytes * (size_t)p, count, dt,
             s->pat_a, 0);
    }
  }
  if (!inplace) release(s, desc, send, all);
  release(s, desc, recv, all);
}

/* ---- the sweep ------------------------------------------------------------------------- */

#define TIMED(s, c, call)                      \
  do {                                         \
    if ((s)->fatal) return;                    \
    double t0_ = harness_now_ms();             \
    call;                                      \
    (s)->ms[c] += harness_now_ms() - t0_;      \
    (s)->calls[c]++;                           \
  } while (0)

/* Reduce covers every root: rotating with the combination for every dtype and op, and
 * all roots for float32 and int8 sums. The large count runs every dtype with sum and
 * float32 with every op; counts 2, 3, 5 and 4095 alternate in-place by type (sweep_body).
 * Measured on the 2-core test machine: the whole program takes ~50 s, of which ~9 s for
 * 8 ranks over shm; the full product at every count took ~110 s. */
static void sweep_reductions(sweep *s, weft_datatype_t dt, size_t count, size_t block, int big,
                             int inplace, int ci) {
  int n = s->r->nranks;
  for (int op = 0; op < WEFT_NUM_OPS; op++) {
    if (big && op != WEFT_SUM && dt != WEFT_FLOAT32) continue;
    TIMED(s, C_ALL_REDUCE, do_all_reduce(s, dt, op, count, inplace));
    TIMED(s, C_REDUCE_SCATTER, do_reduce_scatter(s, dt, op, block, inplace));
    int all_roots = op == WEFT_SUM && (dt == WEFT_FLOAT32 || dt == WEFT_INT8);
    int first = all_roots ? 0 : ((int)dt + op + 3 * inplace + ci) % n;
    for (int root = first; root < (all_roots ? n : first + 1); root++)
      TIMED(s, C_REDUCE, do_reduce(s, dt, op, count, inplace, root));
  }
}

static void sweep_one(sweep *s, weft_datatype_t dt, size_t count, size_t block, int big,
                      int inplace, int ci) {
  int n = s->r->nranks;
  for (int root = 0; root < n; root++) {
    if (big && root != 0 && root != n - 1) continue;
    TIMED(s, C_BROADCAST, do_broadcast(s, dt, count, inplace, root));
  }
  TIMED(s, C_ALL_GATHER, do_all_gather(s, dt, block, inplace));
  TIMED(s, C_ALL_TO_ALL, do_all_to_all(s, dt, block, inplace));
  sweep_reductions(s, dt, count, block, big, inplace, ci);
}

/* Windows mode: the arena, registered (collective). 0 on success. */
static int open_window(harness_rank *r, const sweep_params *prm, weft_window_t *win) {
  setenv("WEFT_DIRECT_MIN_BYTES", "1", 1); /* read at registration: every size goes direct */
  void *m;
  weft_status_t st = WEFT_SUCCESS;
  if (prm->windows >= 3) { /* 64 bytes into a page: the head edge holds the first buffers */
    arena.malloced = malloc(ARENA_BYTES + 4096);
    if (arena.malloced == NULL) return harness_fail(r, "malloc of the arena failed") + 1;
    m = (char *)arena.malloced + (4096 + 64 - (uintptr_t)arena.malloced % 4096) % 4096;
  } else {
    st = harness_guarded_memory() ? weft__mem_guarded.alloc(&weft__mem_guarded, ARENA_BYTES, &m)
                                  : weft_mem_alloc(&m, ARENA_BYTES);
  }
  if (st != WEFT_SUCCESS) return harness_fail(r, "weft_mem_alloc: %s", harness_status_name(st)) + 1;
  arena.base = m;
  arena.plain_every = prm->windows == 2 && r->rank == r->nranks - 1 ? 3 : 0;
  st = prm->windows == 4 ? weft_comm_register(r->comm, m, ARENA_BYTES, &arena.reg)
                         : weft_comm_window_register(r->comm, m, ARENA_BYTES, win, 0);
  if (st != WEFT_SUCCESS)
    return harness_fail(r, "%s: %s: \"%s\"", prm->windows == 4 ? "weft_comm_register" : "weft_comm_window_register",
                        harness_status_name(st), weft_get_last_error(r->comm)) + 1;
  return 0;
}

/* Windows mode: did calls really run direct (and fall back, in mode 2)? Over shm with
 * two ranks or more they must have; elsewhere the window is unusable and none may. */
static void check_direct_ran(harness_rank *r, const sweep_params *prm) {
  uint64_t ran = r->comm->direct_calls, fell = r->comm->direct_fallbacks;
  int usable = r->nranks > 1 && strcmp(prm->transport, "shm") == 0 && prm->caps == NULL;
  if (usable && ran == 0) harness_fail(r, "no call ran direct, though all buffers were in windows");
  if (!usable && ran + fell > 0)
    harness_fail(r, "%llu calls ran direct on an unusable window", (unsigned long long)ran);
  if (usable && prm->windows == 2 && fell == 0)
    harness_fail(r, "no call fell back, though rank %d used malloc'd buffers", r->nranks - 1);
  if (r->rank == 0)
    harness_note(r, "windows: %llu calls ran direct, %llu fell back", (unsigned long long)ran,
                 (unsigned long long)fell);
}

static int sweep_body(harness_rank *r) {
  const sweep_params *prm = r->arg;
  harness_use_guarded_memory(prm->guarded);
  if (prm->hosts != NULL && harness_init_on_emulated_host(r, prm->hosts)) return r->failures;
  sweep *s = calloc(1, sizeof *s);
  if (!s) abort();
  s->r = r;
  weft_window_t win = NULL;
  if (prm->windows && open_window(r, prm, &win) != 0) s->fatal = 1;
  double t0 = harness_now_ms();
  /* The counts: 0, 1, 2, 3, 5, 7, 2^k - 1, 2^k + 1, then one above a chunk; the
   * quick sweep keeps 0, 1, 7 and 4097. */
  static const size_t all_small[] = {0, 1, 2, 3, 5, 7, 4095, 4097};
  static const size_t quick_small[] = {0, 1, 7, 4097};
  const size_t *small = prm->quick ? quick_small : all_small;
  const int NSMALL = prm->quick ? 4 : 8;
  for (int ci = 0; ci <= NSMALL && !s->fatal; ci++) {
    for (int dt = 0; dt < WEFT_NUM_DATATYPES && !s->fatal; dt++) {
      int big = ci == NSMALL;
      size_t count = big ? prm->big_bytes / harness_esize(dt) + 3 : small[ci];
      /* Per-rank blocks of all_gather, reduce_scatter and all_to_all: the large one is
       * split so the whole buffer stays about big_bytes. */
      size_t esz = harness_esize(dt);
      size_t block = big ? prm->big_bytes / esz / (size_t)r->nranks + 3 : count;
      /* Counts 0, 1, 7 and the large one run in place and out of place for every type;
       * 2, 3, 5 and 4095 alternate between the two by type, to keep the time down. */
      int both = count == 0 || count == 1 || count == 7 || big;
      for (int inplace = 0; inplace < 2 && !s->fatal; inplace++)
        if (both || inplace == (dt + ci) % 2) sweep_one(s, dt, count, block, big, inplace, ci);
    }
    char what[64];
    snprintf(what, sizeof what, "count class %d: all_reduce, broadcast, all_gather", ci);
    if (!s->fatal && !harness_same_on_all_ranks(r, s->replicated, what)) s->fatal = 1;
  }
  if (prm->windows && !s->fatal) {
    check_direct_ran(r, prm);
    weft_status_t st = prm->windows == 4 ? weft_comm_deregister(r->comm, arena.reg)
                                          : weft_comm_window_deregister(r->comm, win);
    arena.reg = NULL;
    if (st != WEFT_SUCCESS) s->fatal = harness_fail(r, "window deregister: %s", harness_status_name(st)) + 1;
    else if (arena.malloced != NULL) free(arena.malloced);
    else if (weft_mem_free(arena.base) != WEFT_SUCCESS) harness_fail(r, "weft_mem_free failed");
    arena.base = NULL;
    arena.malloced = NULL;
  }
  if (s->fatal && r->comm) {
    weft_comm_abort(r->comm); /* the others then fail fast instead of waiting for us */
    r->comm = NULL;
  }
  if (r->rank == 0) {
    char line[512];
    int n = snprintf(line, sizeof line, "sweep took %.1f s:", (harness_now_ms() - t0) / 1e3);
    for (int c = 0; c < C_NUM; c++)
      n += snprintf(line + n, sizeof line - (size_t)n, " %s %ld calls %.1f s;", coll_name[c],
                    s->calls[c], s->ms[c] / 1e3);
    harness_note(r, "%s", line);
  }
  free(s);
  return r->failures;
}

void sweep_run(void **state) {
  const sweep_params *prm = *state;
  if (prm->algo != NULL) setenv("WEFT_ALGO", prm->algo, 1); /* the forked ranks inherit it */
  if (prm->caps != NULL) setenv("WEFT_TRANSPORT_CAPS", prm->caps, 1);
  harness_opts o = {0};
  o.nranks = prm->nranks;
  o.transport = prm->hosts != NULL ? NULL : prm->transport;
  o.chunk_bytes = prm->chunk_bytes;
  o.no_init = prm->hosts != NULL;
  o.deadline_s = 240;
  harness_run(&o, sweep_body, (void *)prm);
  if (prm->algo != NULL) unsetenv("WEFT_ALGO");
  if (prm->caps != NULL) unsetenv("WEFT_TRANSPORT_CAPS");
}
