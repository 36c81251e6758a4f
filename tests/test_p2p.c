/* test_p2p.c: weft_send / weft_recv between real rank processes.
 *
 * Checks: a ring exchange inside a group (every rank sends to rank + 1 and receives from
 * rank - 1; on 1 rank that is a send to self), an all-pairs exchange in one group (self
 * included), blocking sends and receives outside a group arriving in order, and a receive
 * larger than the matching send failing on the receiver with a message naming both byte
 * sizes. Counts 0, 1, 4097 and about 2 MiB, over a mix of datatypes; every received
 * element, the guard bytes after each receive buffer and the send buffers are checked.
 *
 * Element j of the seq-th message from src to dst is (7 src + 3 dst + seq + 5 j + 1) mod 11:
 * a message from the wrong peer, out of order or shifted differs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/harness.h"

#define GUARD 64
#define GUARD_BYTE 0xC3
#define FILL_BYTE 0xEE
#define MIB2 ((size_t)2 << 20)

static long msg_value(int src, int dst, int seq, size_t j) {
  return (long)(((size_t)src * 7 + (size_t)dst * 3 + (size_t)seq + (j % 11) * 5 + 1) % 11);
}

/* A buffer of count elements holding message (src, dst, seq), plus guard bytes; NULL for
 * count 0 (the API allows NULL buffers then). */
static uint8_t *make_msg(size_t count, weft_datatype_t dt, int src, int dst, int seq) {
  if (count == 0) return NULL;
  size_t bytes = count * harness_esize(dt);
  uint8_t *b = malloc(bytes + GUARD);
  if (!b) abort();
  memset(b + bytes, GUARD_BYTE, GUARD);
  if (src < 0) memset(b, FILL_BYTE, bytes);
  for (size_t j = 0; j < count && src >= 0; j++)
    harness_store(b, j, dt, msg_value(src, dst, seq, j));
  return b;
}

static uint8_t *make_recv(size_t count, weft_datatype_t dt) {
  return make_msg(count, dt, -1, 0, 0);
}

/* Checks buf against message (src, dst, seq) and its guard bytes. */
static void check_msg(harness_rank *r, const char *desc, const uint8_t *buf, size_t count,
                      weft_datatype_t dt, int src, int dst, int seq) {
  if (count == 0) return;
  size_t esz = harness_esize(dt), bad = 0;
  uint8_t want[8];
  for (size_t j = 0; j < count; j++) {
    harness_store(want, 0, dt, msg_value(src, dst, seq, j));
    if (memcmp(buf + j * esz, want, esz) == 0) continue;
    if (bad++ < 3)
      harness_fail(r, "%s: element %zu: got %.9g, expected %.9g", desc, j,
                   harness_load(buf, j, dt), harness_load(want, 0, dt));
  }
  if (bad > 3) harness_fail(r, "%s: %zu of %zu elements differ", desc, bad, count);
  for (int g = 0; g < GUARD; g++)
    if (buf[count * esz + (size_t)g] != GUARD_BYTE) {
      harness_fail(r, "%s: guard byte %d after the buffer overwritten", desc, g);
      break;
    }
}

/* The message sizes and datatypes every exchange test walks through. */
typedef struct {
  size_t count;
  weft_datatype_t dt;
} msg_shape;

static const msg_shape shapes[] = {
    {0, WEFT_FLOAT32},     {1, WEFT_INT8},       {1, WEFT_FLOAT64},   {1, WEFT_BFLOAT16},
    {4097, WEFT_UINT8},    {4097, WEFT_FLOAT16}, {4097, WEFT_INT32},  {4097, WEFT_UINT64},
    {4097, WEFT_BFLOAT16}, {MIB2 / 4 + 1, WEFT_FLOAT32}, {MIB2 / 2 + 3, WEFT_FLOAT16},
    {MIB2 + 5, WEFT_INT8}, {MIB2 / 8 + 7, WEFT_INT64},
};
#define NUM_SHAPES (int)(sizeof shapes / sizeof shapes[0])

static void describe(char *d, size_t len, const char *what, const msg_shape *m, int peer) {
  snprintf(d, len, "%s count %zu %s peer %d", what, m->count, harness_dt_name(m->dt), peer);
}

static int group_end_ok(harness_rank *r, const char *desc) {
  return harness_expect_status(r, weft_group_end(), WEFT_SUCCESS, desc);
}

/* ---- ring ---------------------------------------------------------------------------- */

static int ring_body(harness_rank *r) {
  int n = r->nranks, next = (r->rank + 1) % n, prev = (r->rank + n - 1) % n;
  for (int k = 0; k < NUM_SHAPES; k++) {
    const msg_shape *m = &shapes[k];
    char desc[160];
    describe(desc, sizeof desc, "ring exchange: recv", m, prev);
    uint8_t *send = make_msg(m->count, m->dt, r->rank, next, k);
    uint8_t *recv = make_recv(m->count, m->dt);
    weft_group_start();
    weft_status_t s1 = weft_send(send, m->count, m->dt, next, r->comm, NULL);
    weft_status_t s2 = weft_recv(recv, m->count, m->dt, prev, r->comm, NULL);
    int ok = harness_expect_status(r, s1, WEFT_SUCCESS, "weft_send inside a group") &
             harness_expect_status(r, s2, WEFT_SUCCESS, "weft_recv inside a group") &
             group_end_ok(r, desc);
    if (ok) {
      check_msg(r, desc, recv, m->count, m->dt, prev, r->rank, k);
      check_msg(r, "ring exchange: sendbuf must stay unchanged", send, m->count, m->dt,
                r->rank, next, k);
    }
    free(send);
    free(recv);
    if (!ok) return r->failures;
  }
  return r->failures;
}

/* ---- all pairs ----------------------------------------------------------------------- */

static int all_pairs_body(harness_rank *r) {
  int n = r->nranks;
  for (int k = 0; k < NUM_SHAPES; k++) {
    const msg_shape *m = &shapes[k];
    uint8_t *send[HARNESS_MAX_RANKS], *recv[HARNESS_MAX_RANKS];
    int ok = 1;
    weft_group_start();
    for (int p = 0; p < n; p++) {
      send[p] = make_msg(m->count, m->dt, r->rank, p, k);
      recv[p] = make_recv(m->count, m->dt);
      ok &= harness_expect_status(r, weft_send(send[p], m->count, m->dt, p, r->comm, NULL),
                                  WEFT_SUCCESS, "all-pairs weft_send inside a group");
      ok &= harness_expect_status(r, weft_recv(recv[p], m->count, m->dt, p, r->comm, NULL),
                                  WEFT_SUCCESS, "all-pairs weft_recv inside a group");
    }
    char desc[160];
    describe(desc, sizeof desc, "all-pairs exchange (group end)", m, -1);
    ok &= group_end_ok(r, desc);
    for (int p = 0; p < n; p++) {
      describe(desc, sizeof desc, "all-pairs exchange: recv", m, p);
      if (ok) check_msg(r, desc, recv[p], m->count, m->dt, p, r->rank, k);
      free(send[p]);
      free(recv[p]);
    }
    if (!ok) return r->failures;
  }
  return r->failures;
}

/* ---- self ---------------------------------------------------------------------------- */

/* Each rank sends to itself inside a group, the recv posted before the send. */
static int self_body(harness_rank *r) {
  const msg_shape m = {4097, WEFT_FLOAT32};
  uint8_t *self_send = make_msg(m.count, m.dt, r->rank, r->rank, 1);
  uint8_t *self_recv = make_recv(m.count, m.dt);
  weft_group_start();
  weft_status_t st = weft_recv(self_recv, m.count, m.dt, r->rank, r->comm, NULL);
  int ok = harness_expect_status(r, st, WEFT_SUCCESS, "weft_recv from self inside a group");
  ok &= harness_expect_status(r, weft_send(self_send, m.count, m.dt, r->rank, r->comm, NULL),
                              WEFT_SUCCESS, "weft_send to self inside a group");
  ok &= group_end_ok(r, "group with a send to self and its recv");
  if (ok) check_msg(r, "recv from self", self_recv, m.count, m.dt, r->rank, r->rank, 1);
  free(self_send);
  free(self_recv);
  return r->failures;
}

/* ---- blocking order ------------------------------------------------------------------ */

/* Rank 0 sends messages one by one (outside any group), rank 1 receives them in the same
 * order, then answers; equal sizes first so a reordering cannot hide behind a size check. */
static int order_body(harness_rank *r) {
  static const msg_shape seq[] = {{1000, WEFT_INT32}, {1000, WEFT_INT32}, {1000, WEFT_INT32},
                                  {7, WEFT_FLOAT64},  {0, WEFT_INT8},     {MIB2 + 1, WEFT_UINT8},
                                  {4097, WEFT_BFLOAT16}};
  int other = 1 - r->rank;
  for (int k = 0; k < (int)(sizeof seq / sizeof seq[0]); k++) {
    const msg_shape *m = &seq[k];
    char desc[160];
    describe(desc, sizeof desc, r->rank == 0 ? "blocking send" : "blocking recv", m, other);
    uint8_t *buf =
        r->rank == 0 ? make_msg(m->count, m->dt, 0, 1, k) : make_recv(m->count, m->dt);
    weft_status_t st = r->rank == 0 ? weft_send(buf, m->count, m->dt, 1, r->comm, NULL)
                                    : weft_recv(buf, m->count, m->dt, 0, r->comm, NULL);
    int ok = harness_expect_status(r, st, WEFT_SUCCESS, desc);
    if (ok && r->rank == 1) check_msg(r, desc, buf, m->count, m->dt, 0, 1, k);
    free(buf);
    if (!ok) return r->failures;
  }
  /* The answer: now rank 1 sends and rank 0 receives. */
  const msg_shape ans = {4097, WEFT_FLOAT32};
  uint8_t *buf =
      r->rank == 1 ? make_msg(ans.count, ans.dt, 1, 0, 99) : make_recv(ans.count, ans.dt);
  weft_status_t st = r->rank == 1 ? weft_send(buf, ans.count, ans.dt, 0, r->comm, NULL)
                                  : weft_recv(buf, ans.count, ans.dt, 1, r->comm, NULL);
  if (harness_expect_status(r, st, WEFT_SUCCESS, "answer send/recv") && r->rank == 0)
    check_msg(r, "answer from rank 1", buf, ans.count, ans.dt, 1, 0, 99);
  free(buf);
  return r->failures;
}

/* ---- size mismatch ------------------------------------------------------------------- */

/* Rank 0 sends 10 float32 (40 bytes), rank 1 posts a recv of 20 (80 bytes): rank 1 must
 * fail naming both sizes and peer 0. Rank 0 keeps its communicator until rank 1 has
 * checked (flag 0), so the error cannot turn into "peer exited". Both then abort: after a
 * mismatch the connection is out of step. */
static int mismatch_body(harness_rank *r) {
  float buf[20] = {0};
  if (r->rank == 0) {
    weft_status_t st = weft_send(buf, 10, WEFT_FLOAT32, 1, r->comm, NULL);
    harness_note(r, "the sender's weft_send returned %s", harness_status_name(st));
    if (!harness_wait_flag(r, 0, 1, 30000)) harness_fail(r, "rank 1 never finished its check");
  } else {
    double t0 = harness_now_ms();
    weft_status_t st = weft_recv(buf, 20, WEFT_FLOAT32, 0, r->comm, NULL);
    const char *msg = weft_get_last_error(r->comm);
    if (st == WEFT_SUCCESS)
      harness_fail(r, "recv of 80 bytes matched with a send of 40 bytes returned WEFT_SUCCESS");
    else if (!strstr(msg, "40") || !strstr(msg, "80") || !harness_names_rank(msg, 0))
      harness_fail(r, "size mismatch error %s does not name both sizes (40 and 80 bytes) and "
                   "peer 0: \"%s\"", harness_status_name(st), msg);
    else
      harness_note(r, "size mismatch reported in %.0f ms as %s: \"%s\"",
                   harness_now_ms() - t0, harness_status_name(st), msg);
    atomic_store(&r->shared->flags[0], 1);
  }
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

/* ---- tests --------------------------------------------------------------------------- */

typedef struct {
  int nranks;
  const char *transport;
  harness_body_fn body;
  int timeout_ms;
} p2p_params;

static void run_p2p(void **state) {
  const p2p_params *p = *state;
  harness_opts o = {0};
  o.nranks = p->nranks;
  o.transport = p->transport;
  o.timeout_ms = p->timeout_ms;
  harness_run(&o, p->body, NULL);
}

#define P2P(name, n, tr, body, tmo) \
  {name "_on_" #n "_ranks_over_" #tr, run_p2p, NULL, NULL, &(p2p_params){n, #tr, body, tmo}}

int main(void) {
  const struct CMUnitTest tests[] = {
      P2P("ring_exchange_in_a_group_matches_reference", 1, shm, ring_body, 0),
      P2P("ring_exchange_in_a_group_matches_reference", 2, shm, ring_body, 0),
      P2P("ring_exchange_in_a_group_matches_reference", 3, shm, ring_body, 0),
      P2P("ring_exchange_in_a_group_matches_reference", 5, shm, ring_body, 0),
      P2P("ring_exchange_in_a_group_matches_reference", 2, socket, ring_body, 0),
      P2P("ring_exchange_in_a_group_matches_reference", 3, socket, ring_body, 0),
      P2P("ring_exchange_in_a_group_matches_reference", 5, socket, ring_body, 0),
      P2P("all_pairs_exchange_in_one_group_matches_reference", 4, shm, all_pairs_body, 0),
      P2P("all_pairs_exchange_in_one_group_matches_reference", 3, socket, all_pairs_body, 0),
      P2P("send_to_self_within_a_group_delivers", 1, shm, self_body, 0),
      P2P("send_to_self_within_a_group_delivers", 2, socket, self_body, 0),
      P2P("blocking_sends_arrive_in_order", 2, shm, order_body, 0),
      P2P("blocking_sends_arrive_in_order", 2, socket, order_body, 0),
      P2P("recv_larger_than_send_fails_naming_both_byte_sizes", 2, shm, mismatch_body, 5000),
      P2P("recv_larger_than_send_fails_naming_both_byte_sizes", 2, socket, mismatch_body, 5000),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
