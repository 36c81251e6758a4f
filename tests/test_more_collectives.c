/* test_more_collectives.c: all_to_allv, gather, scatter and barrier on real rank processes.
 *
 * One test per transport (shm, socket) and rank count 1..8. On one communicator each runs,
 * for every datatype and counts {0, 1, 2, 3, 5, 7, 255, 257, larger than one pipeline
 * chunk}: gather and scatter from every root, in place and out of place, and all_to_allv
 * with uneven per-peer counts (some 0), blocks in shuffled order and gaps between them.
 * Every call is checked against a reference each rank computes locally; every buffer has
 * guard bytes before and after it; send buffers must stay unchanged; the gaps of
 * all_to_allv's receive buffer must stay untouched. Across ranks: each rank chains a hash of
 * every result it got, and after each (datatype, count) all ranks all-gather those hashes
 * and check them against the chain each rank computes for every other rank, so all ranks
 * agree bit for bit on what every rank received.
 * The runs use 4 KiB chunks (WEFT_CHUNK_BYTES) so "larger than one chunk" stays cheap; one
 * run keeps the default chunk with a block just above it.
 * Eight runs put every user buffer in the guarded memory space (mem/guarded.h), where weft
 * faults on any direct touch. Also: the barrier lets no rank out before the last one entered (ranks enter at staggered
 * times), on a stream too; an all_to_allv recvcount that disagrees with the sender fails on
 * the receiver naming both sizes; bad all_to_allv / gather / scatter arguments fail at the
 * call.
 *
 * Values: element j of the block rank s sends to rank d is (31 s + 17 d + 5 j + salt) mod 127,
 * exact in every datatype (int8 holds 127, bf16 every integer up to 256). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "tests/harness.h"

#define FILL 0xEE /* receive buffers start as this */
#define MAX_REPORTS 40

typedef struct {
  int nranks;
  const char *transport;
  size_t chunk_bytes; /* WEFT_CHUNK_BYTES of the run; 0: the default */
  size_t big_bytes;   /* the largest block, in bytes (above one chunk) */
  int guarded;        /* user buffers in the guarded memory space (harness.h) */
} params;

/* One rank's state. */
typedef struct {
  harness_rank *r;
  int fatal;           /* a call failed: stop, the communicator is no longer trusted */
  uint64_t got;        /* chain of hashes of the results this rank got */
  uint64_t want[HARNESS_MAX_RANKS]; /* the chain every rank should have */
  long calls;
} sweep;

static long value(int src, int dst, size_t j, int salt) {
  return (long)(((size_t)src * 31 + (size_t)dst * 17 + j * 5 + (size_t)salt) % 127);
}

static void fill_block(uint8_t *user, size_t count, weft_datatype_t dt, int src, int dst, int salt) {
  uint8_t *p = harness_view(user, count * harness_esize(dt));
  for (size_t j = 0; j < count; j++) harness_store(p, j, dt, value(src, dst, j, salt));
}

static int call_ok(sweep *s, weft_status_t st, const char *desc) {
  if (st == WEFT_SUCCESS) return 1;
  harness_fail(s->r, "%s: returned %s: \"%s\"", desc, harness_status_name(st),
               weft_get_last_error(s->r->comm));
  s->fatal = 1;
  return 0;
}

/* Compares bytes with the expected bytes; reports the first differing element. */
static void verify(sweep *s, const char *desc, const char *what, const uint8_t *user_got,
                   const uint8_t *want, size_t count, weft_datatype_t dt) {
  size_t esz = harness_esize(dt);
  const uint8_t *got = harness_view(user_got, count * esz);
  if (count == 0 || memcmp(got, want, count * esz) == 0) return;
  if (s->r->failures >= MAX_REPORTS) { s->r->failures++; return; }
  for (size_t i = 0; i < count; i++)
    if (memcmp(got + i * esz, want + i * esz, esz) != 0) {
      harness_fail(s->r, "%s: %s[%zu]: got %.9g, expected %.9g", desc, what, i,
                   harness_load(got, i, dt), harness_load(want, i, dt));
      return;
    }
}

/* Adds a result to a hash chain (empty results too, so the number of calls counts). */
static uint64_t chain(uint64_t h, const void *p, size_t bytes) {
  return harness_hash(harness_view(p, bytes), bytes, harness_hash(&bytes, sizeof bytes, h));
}

/* ---- gather ---------------------------------------------------------------------------- */

/* Root's expected receive buffer: block p from rank p. */
static void gather_expect(uint8_t *e, size_t count, weft_datatype_t dt, int n, int root, int salt) {
  size_t bytes = count * harness_esize(dt);
  for (int p = 0; p < n; p++) fill_block(e + (size_t)p * bytes, count, dt, p, root, salt);
}

static void do_gather(sweep *s, weft_datatype_t dt, size_t count, int root, int inplace,
                      uint8_t *expect) {
  harness_rank *r = s->r;
  int n = r->nranks, me_root = r->rank == root, salt = root + 3 * inplace;
  size_t esz = harness_esize(dt), bytes = count * esz, all = bytes * (size_t)n;
  char desc[160];
  snprintf(desc, sizeof desc, "gather %s count %zu root %d %s", harness_dt_name(dt), count, root,
           inplace ? "in-place" : "out-of-place");
  uint8_t *recv = me_root ? harness_guarded_alloc(all, FILL) : NULL;
  uint8_t *own = (me_root && inplace) ? NULL : harness_guarded_alloc(bytes, FILL);
  uint8_t *send = own ? own : recv + (size_t)root * bytes;
  fill_block(send, count, dt, r->rank, root, salt);
  weft_status_t st = weft_gather(send, recv, count, dt, root, r->comm, NULL);
  gather_expect(expect, count, dt, n, root, salt);
  if (call_ok(s, st, desc) && me_root) {
    verify(s, desc, "recvbuf", recv, expect, count * (size_t)n, dt);
    harness_guarded_check(r, recv, all, desc);
  }
  if (own) {
    uint8_t *mine = expect + (size_t)r->rank * bytes;
    if (!me_root) fill_block(mine, count, dt, r->rank, root, salt);
    verify(s, desc, "sendbuf (must stay unchanged)", own, mine, count, dt);
    harness_guarded_check(r, own, bytes, desc);
  }
  s->got = chain(s->got, recv, me_root ? all : 0);
  gather_expect(expect, count, dt, n, root, salt);
  for (int p = 0; p < n; p++) s->want[p] = chain(s->want[p], expect, p == root ? all : 0);
  harness_guarded_free(recv);
  harness_guarded_free(own);
}

/* ---- scatter --------------------------------------------------------------------------- */

static void do_scatter(sweep *s, weft_datatype_t dt, size_t count, int root, int inplace,
                       uint8_t *expect) {
  harness_rank *r = s->r;
  int n = r->nranks, me_root = r->rank == root, salt = 2 * root + inplace + 1;
  size_t esz = harness_esize(dt), bytes = count * esz, all = bytes * (size_t)n;
  char desc[160];
  snprintf(desc, sizeof desc, "scatter %s count %zu root %d %s", harness_dt_name(dt), count, root,
           inplace ? "in-place" : "out-of-place");
  uint8_t *send = me_root ? harness_guarded_alloc(all, FILL) : NULL;
  for (int p = 0; p < n && send; p++) fill_block(send + (size_t)p * bytes, count, dt, root, p, salt);
  uint8_t *own = (me_root && inplace) ? NULL : harness_guarded_alloc(bytes, FILL);
  uint8_t *recv = own ? own : send + (size_t)root * bytes;
  weft_status_t st = weft_scatter(send, recv, count, dt, root, r->comm, NULL);
  if (call_ok(s, st, desc)) {
    fill_block(expect, count, dt, root, r->rank, salt);
    verify(s, desc, "recvbuf", recv, expect, count, dt);
    if (own) harness_guarded_check(r, own, bytes, desc);
    if (me_root) {
      for (int p = 0; p < n; p++) {
        fill_block(expect, count, dt, root, p, salt);
        verify(s, desc, "root's sendbuf (must stay unchanged)", send + (size_t)p * bytes, expect,
               count, dt);
      }
      harness_guarded_check(r, send, all, desc);
    }
  }
  s->got = chain(s->got, recv, bytes);
  for (int p = 0; p < n; p++) {
    fill_block(expect, count, dt, root, p, salt);
    s->want[p] = chain(s->want[p], expect, bytes);
  }
  harness_guarded_free(send);
  harness_guarded_free(own);
}

/* ---- all_to_allv ------------------------------------------------------------------------- */

/* Elements rank src sends to rank dst: some empty, the others near count. */
static size_t vcount(size_t count, int src, int dst) {
  if (count == 0 || (src * 5 + dst * 3) % 4 == 0) return 0;
  return count + (size_t)((src + dst) % 3);
}

/* Send layout of rank src: blocks in reverse rank order, one element of gap between them.
 * Receive layout of rank dst: blocks in rank order, two elements of gap. Returns the extent. */
static size_t v_layout(size_t count, int me, int n, int sending, size_t *counts, size_t *displs) {
  size_t off = 1;
  for (int k = 0; k < n; k++) {
    int p = sending ? n - 1 - k : k;
    counts[p] = sending ? vcount(count, me, p) : vcount(count, p, me);
    displs[p] = off;
    off += counts[p] + (sending ? 1 : 2);
  }
  return off;
}

/* The whole receive buffer rank `me` should end with, gaps still FILL. */
static size_t a2av_expect(uint8_t *e, size_t count, weft_datatype_t dt, int me, int n, int salt) {
  size_t counts[HARNESS_MAX_RANKS], displs[HARNESS_MAX_RANKS], esz = harness_esize(dt);
  size_t ext = v_layout(count, me, n, 0, counts, displs);
  memset(e, FILL, ext * esz);
  for (int p = 0; p < n; p++) fill_block(e + displs[p] * esz, counts[p], dt, p, me, salt);
  return ext;
}

static void do_all_to_allv(sweep *s, weft_datatype_t dt, size_t count, uint8_t *expect) {
  harness_rank *r = s->r;
  int n = r->nranks, me = r->rank, salt = (int)(count % 7);
  size_t esz = harness_esize(dt);
  size_t sc[HARNESS_MAX_RANKS], sd[HARNESS_MAX_RANKS], rc[HARNESS_MAX_RANKS], rd[HARNESS_MAX_RANKS];
  size_t sext = v_layout(count, me, n, 1, sc, sd), rext = v_layout(count, me, n, 0, rc, rd);
  char desc[160];
  snprintf(desc, sizeof desc, "all_to_allv %s count ~%zu", harness_dt_name(dt), count);
  uint8_t *send = harness_guarded_alloc(sext * esz, 0x5A), *recv = harness_guarded_alloc(rext * esz, FILL);
  for (int p = 0; p < n; p++) fill_block(send + sd[p] * esz, sc[p], dt, me, p, salt);
  uint8_t *send_copy = malloc(sext * esz + 1);
  memcpy(send_copy, harness_view(send, sext * esz), sext * esz);
  weft_status_t st = weft_all_to_allv(send, sc, sd, recv, rc, rd, dt, r->comm, NULL);
  if (call_ok(s, st, desc)) {
    a2av_expect(expect, count, dt, me, n, salt);
    verify(s, desc, "recvbuf (blocks and the gaps between them)", recv, expect, rext, dt);
    verify(s, desc, "sendbuf (must stay unchanged)", send, send_copy, sext, dt);
    harness_guarded_check(r, recv, rext * esz, desc);
    harness_guarded_check(r, send, sext * esz, desc);
  }
  s->got = chain(s->got, recv, rext * esz);
  for (int p = 0; p < n; p++) {
    size_t ext = a2av_expect(expect, count, dt, p, n, salt);
    s->want[p] = chain(s->want[p], expect, ext * esz);
  }
  free(send_copy);
  harness_guarded_free(send);
  harness_guarded_free(recv);
}

/* ---- the sweep ----------------------------------------------------------------------------- */

static void cross_check(sweep *s, const char *what) {
  uint64_t all[HARNESS_MAX_RANKS];
  if (s->fatal || !harness_all_gather_u64(s->r, s->got, all, what)) {
    s->fatal = 1;
    return;
  }
  for (int p = 0; p < s->r->nranks; p++)
    if (all[p] != s->want[p])
      harness_fail(s->r, "%s: rank %d's results differ from what this rank computes for it "
                   "(hash %016llx, expected %016llx)", what, p, (unsigned long long)all[p],
                   (unsigned long long)s->want[p]);
}

static void sweep_count(sweep *s, weft_datatype_t dt, size_t count, uint8_t *expect) {
  int n = s->r->nranks;
  for (int root = 0; root < n && !s->fatal; root++)
    for (int inplace = 0; inplace < 2 && !s->fatal; inplace++) {
      do_gather(s, dt, count, root, inplace, expect);
      do_scatter(s, dt, count, root, inplace, expect);
      s->calls += 2;
    }
  if (!s->fatal) do_all_to_allv(s, dt, count, expect);
  char what[96];
  snprintf(what, sizeof what, "%s count %zu: cross-rank check", harness_dt_name(dt), count);
  cross_check(s, what);
}

static int sweep_body(harness_rank *r) {
  const params *prm = r->arg;
  harness_use_guarded_memory(prm->guarded);
  sweep *s = calloc(1, sizeof *s);
  s->r = r;
  double t0 = harness_now_ms();
  /* The largest buffer: all_to_allv's extent or the gather's n blocks, with gaps. */
  uint8_t *expect = malloc((size_t)r->nranks * (prm->big_bytes + 64) + 4096);
  for (int dt = 0; dt < WEFT_NUM_DATATYPES && !s->fatal; dt++) {
    size_t esz = harness_esize(dt);
    const size_t counts[] = {0, 1, 2, 3, 5, 7, 255, 257, prm->big_bytes / esz};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0] && !s->fatal; i++) {
      /* The default-chunk run checks only the large block, on a few types. */
      if (prm->chunk_bytes == 0 && (i + 1 < sizeof counts / sizeof counts[0] || esz == 2))
        continue;
      sweep_count(s, dt, counts[i], expect);
      weft_status_t st = weft_barrier(r->comm, NULL);
      if (!call_ok(s, st, "barrier between counts")) break;
    }
  }
  free(expect);
  if (s->fatal && r->comm) {
    weft_comm_abort(r->comm);
    r->comm = NULL;
  }
  if (r->rank == 0)
    harness_note(r, "%ld gather/scatter calls and the all_to_allv sweep took %.1f s", s->calls,
                 (harness_now_ms() - t0) / 1e3);
  free(s);
  return r->failures;
}

static void run_sweep(void **state) {
  const params *prm = *state;
  harness_opts o = {0};
  o.nranks = prm->nranks;
  o.transport = prm->transport;
  o.chunk_bytes = prm->chunk_bytes;
  o.deadline_s = 240;
  harness_run(&o, sweep_body, (void *)prm);
}

/* ---- barrier ordering ---------------------------------------------------------------------- */

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* one clock for every process of the machine */
  return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Round k: rank (k + r) mod n waits (r+1) * 20 ms before entering, so the ranks enter at
 * staggered times; each records when it entered (shared page) and, after the barrier,
 * checks that every rank had entered and that it left after the last entry. Rounds
 * alternate between a NULL stream and a stream. */
static int barrier_body(harness_rank *r) {
  int n = r->nranks;
  weft_stream_t stream = NULL;
  if (!harness_expect_status(r, weft_stream_create(&stream), WEFT_SUCCESS, "stream_create"))
    return r->failures;
  for (int k = 0; k < 3 && k * n + n <= 64; k++) {
    int delay = ((r->rank + k) % n + 1) * 20;
    struct timespec ts = {0, (long)delay * 1000000L};
    nanosleep(&ts, NULL);
    long long entered = now_ns();
    atomic_store(&r->shared->values[k * n + r->rank], entered);
    weft_status_t st = k % 2 ? weft_barrier(r->comm, stream) : weft_barrier(r->comm, NULL);
    if (k % 2 && st == WEFT_SUCCESS) st = weft_stream_synchronize(stream);
    long long left = now_ns();
    if (!harness_expect_status(r, st, WEFT_SUCCESS, "barrier")) break;
    for (int p = 0; p < n; p++) {
      long long e = atomic_load(&r->shared->values[k * n + p]);
      if (e == 0) harness_fail(r, "barrier round %d: left before rank %d entered", k, p);
      else if (e > left)
        harness_fail(r, "barrier round %d: left at %lld ns, before rank %d entered at %lld ns",
                     k, left, p, e);
    }
  }
  weft_stream_destroy(stream);
  return r->failures;
}

static void barrier_orders_entries(void **state) {
  const params *prm = *state;
  harness_run_simple(prm->nranks, prm->transport, barrier_body, NULL);
}

/* ---- errors ----------------------------------------------------------------------------- */

/* Rank 0 sends 4 int32 to rank 1, which expects 5: rank 1's error names 16 and 20 bytes. */
static int a2av_mismatch_body(harness_rank *r) {
  int32_t send[8] = {1, 2, 3, 4, 5, 6, 7, 8}, recv[8] = {0};
  size_t sc[2] = {0, 4}, sd[2] = {0, 0}, rc[2] = {0, 0}, rd[2] = {0, 0};
  if (r->rank == 1) {
    sc[1] = 0; /* nothing to self, nothing to rank 0 */
    rc[0] = 5;
  }
  weft_status_t st = weft_all_to_allv(send, sc, sd, recv, rc, rd, WEFT_INT32, r->comm, NULL);
  if (r->rank == 1) {
    const char *msg = weft_get_last_error(r->comm);
    if (harness_expect_status(r, st, WEFT_ERR_INVALID_USAGE, "all_to_allv with a wrong recvcount") &&
        (!strstr(msg, "16") || !strstr(msg, "20") || !harness_names_rank(msg, 0)))
      harness_fail(r, "the error should name peer 0 and both sizes (16, 20 bytes): \"%s\"", msg);
  }
  weft_comm_abort(r->comm); /* rank 0's send may or may not have completed */
  r->comm = NULL;
  return r->failures;
}

static void all_to_allv_recvcount_mismatch_is_an_error_naming_both_sizes(void **state) {
  harness_opts o = {0};
  o.nranks = 2;
  o.transport = *state;
  o.timeout_ms = 3000;
  harness_run(&o, a2av_mismatch_body, NULL);
}

static int bad_args_body(harness_rank *r) {
  int32_t buf[16] = {0};
  size_t c[2] = {1, 1}, d[2] = {0, 1};
  weft_comm_t comm = r->comm;
  harness_expect_status(r, weft_all_to_allv(buf, NULL, d, buf + 8, c, d, WEFT_INT32, comm, NULL),
                        WEFT_ERR_INVALID_ARGUMENT, "all_to_allv with sendcounts NULL");
  harness_expect_status(r, weft_all_to_allv(buf, c, d, buf + 1, c, d, WEFT_INT32, comm, NULL),
                        WEFT_ERR_INVALID_ARGUMENT, "all_to_allv with overlapping buffers");
  size_t huge[2] = {SIZE_MAX / 2, 1};
  harness_expect_status(r, weft_all_to_allv(buf, huge, d, buf + 8, c, d, WEFT_INT32, comm, NULL),
                        WEFT_ERR_INVALID_ARGUMENT, "all_to_allv with an overflowing extent");
  harness_expect_status(r, weft_all_to_allv(NULL, c, d, buf + 8, c, d, WEFT_INT32, comm, NULL),
                        WEFT_ERR_INVALID_ARGUMENT, "all_to_allv with sendbuf NULL");
  harness_expect_status(r, weft_gather(buf, buf, 1, WEFT_INT32, 2, comm, NULL),
                        WEFT_ERR_INVALID_ARGUMENT, "gather with root 2 of 2 ranks");
  harness_expect_status(r, weft_scatter(buf, buf, 1, WEFT_INT32, -1, comm, NULL),
                        WEFT_ERR_INVALID_ARGUMENT, "scatter with root -1");
  harness_expect_status(r, weft_gather(buf, buf, 1, (weft_datatype_t)99, 0, comm, NULL),
                        WEFT_ERR_INVALID_ARGUMENT, "gather with datatype 99");
  harness_expect_status(r, weft_barrier(NULL, NULL), WEFT_ERR_INVALID_ARGUMENT, "barrier(NULL)");
  /* Everything above failed at the call: the communicator still works. */
  harness_expect_status(r, weft_barrier(comm, NULL), WEFT_SUCCESS, "barrier after bad calls");
  return r->failures;
}

static void bad_arguments_fail_at_the_call(void **state) {
  harness_run_simple(2, "shm", bad_args_body, NULL);
}

/* The pairwise exchanges with a window of 2 steps in flight (algos/throttle.h), so steps are
 * posted from progress as earlier ones complete. Forked ranks read the variable afresh. */
static int throttle_of_two(void **state) {
  (void)state;
  return setenv("WEFT_A2A_THROTTLE", "2", 1);
}
static int throttle_default(void **state) {
  (void)state;
  return unsetenv("WEFT_A2A_THROTTLE");
}

#define KIB4 ((size_t)4096)
#define SWEEP(n, tr)                                                                           \
  {"all_to_allv_gather_scatter_match_reference_on_" #n "_ranks_over_" #tr, run_sweep, NULL, \
   NULL, &(params){n, #tr, KIB4, 3 * KIB4 + 8, 0}}
/* Every user buffer in the guarded memory space: weft faults on any direct touch. */
#define SWEEP_GUARDED(n, tr)                                                                   \
  {"all_to_allv_gather_scatter_match_reference_on_guarded_memory_on_" #n "_ranks_over_" #tr,  \
   run_sweep, NULL, NULL, &(params){n, #tr, KIB4, 3 * KIB4 + 8, 1}}
#define BARRIER(n, tr)                                                                            \
  {"barrier_lets_no_rank_out_before_all_entered_on_" #n "_ranks_over_" #tr, barrier_orders_entries, \
   NULL, NULL, &(params){n, #tr, 0, 0, 0}}

int main(void) {
  const struct CMUnitTest tests[] = {
      SWEEP(1, shm), SWEEP(2, shm), SWEEP(3, shm), SWEEP(4, shm),
      SWEEP(5, shm), SWEEP(6, shm), SWEEP(7, shm), SWEEP(8, shm),
      SWEEP(1, socket), SWEEP(2, socket), SWEEP(3, socket), SWEEP(4, socket),
      SWEEP(5, socket), SWEEP(6, socket), SWEEP(7, socket), SWEEP(8, socket),
      {"all_to_allv_gather_scatter_with_default_chunks_and_a_block_above_one_chunk_on_4_ranks_over_shm",
       run_sweep, NULL, NULL, &(params){4, "shm", 0, (512u << 10) + 64, 0}},
      {"all_to_allv_gather_scatter_with_a_throttle_of_two_steps_on_7_ranks_over_shm", run_sweep, throttle_of_two,
       throttle_default, &(params){7, "shm", KIB4, 3 * KIB4 + 8, 0}},
      {"all_to_allv_gather_scatter_with_a_throttle_of_two_steps_on_5_ranks_over_socket", run_sweep,
       throttle_of_two, throttle_default, &(params){5, "socket", KIB4, 3 * KIB4 + 8, 0}},
      SWEEP_GUARDED(1, shm), SWEEP_GUARDED(2, socket), SWEEP_GUARDED(3, shm), SWEEP_GUARDED(4, socket),
      SWEEP_GUARDED(5, shm), SWEEP_GUARDED(6, socket), SWEEP_GUARDED(7, shm), SWEEP_GUARDED(8, socket),
      BARRIER(1, shm), BARRIER(2, shm), BARRIER(3, shm), BARRIER(5, shm), BARRIER(8, shm),
      BARRIER(3, socket), BARRIER(7, socket),
      {"all_to_allv_recvcount_mismatch_is_an_error_naming_both_sizes_over_shm",
       all_to_allv_recvcount_mismatch_is_an_error_naming_both_sizes, NULL, NULL, "shm"},
      {"all_to_allv_recvcount_mismatch_is_an_error_naming_both_sizes_over_socket",
       all_to_allv_recvcount_mismatch_is_an_error_naming_both_sizes, NULL, NULL, "socket"},
      {"bad_all_to_allv_gather_scatter_barrier_arguments_fail_at_the_call", bad_arguments_fail_at_the_call,
       NULL, NULL, NULL},
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
