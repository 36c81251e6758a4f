/* test_bad_input.c: wrong arguments get a clear error; nothing crashes or hangs.
 *
 * In the test program itself (no ranks needed): init with a rank outside [0, nranks),
 * nranks < 1, a NULL comm, a malformed id or a bad config; NULL pointers to every API
 * function that takes one; error strings for every status. On 2 rank processes: NULL
 * buffers with count > 0, counts whose byte size or buffer extent overflows size_t,
 * invalid datatypes and ops, roots and peers outside [0, nranks) for every collective and
 * point-to-point call; each must return WEFT_ERR_INVALID_ARGUMENT with a last error naming
 * the rank and the operation, and the communicator must still work afterwards. Then the
 * rendezvous: a unique id whose secret is altered is rejected (WEFT_ERR_AUTH) while the
 * other rank times out naming the missing rank; a rank number claimed twice and a
 * disagreeing nranks are rejected too. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* strcasestr */
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include <time.h>
#include "lib/bootstrap.h"
#include "lib/comm.h"
#include "tests/harness.h"

#define BAD_DT ((weft_datatype_t)WEFT_NUM_DATATYPES)
#define NEG_DT ((weft_datatype_t)-1)
#define BAD_OP ((weft_redop_t)WEFT_NUM_OPS)
#define NEG_OP ((weft_redop_t)-1)
/* count * 4 bytes overflows size_t. */
#define OVF_F32 (SIZE_MAX / 4 + 1)
/* count * 4 bytes fits, but 2 ranks' worth of them (all_gather, reduce_scatter and
 * all_to_all buffers) does not. */
#define OVF_F32_X2 (SIZE_MAX / 8 + 1)

/* ---- in the test program ------------------------------------------------------------- */

static void assert_message_mentions(const char *msg, const char *word, const char *call) {
  if (!msg || !*msg) fail_msg("%s: weft_get_last_error is empty", call);
  if (!strcasestr(msg, word))
    fail_msg("%s: the error message \"%s\" does not mention \"%s\"", call, msg, word);
}

/* must_name_rank >= -1: the message must name that rank ("rank 2"); must_mention: a word. */
static void init_rejects(int nranks, weft_unique_id_t id, int rank, const weft_config_t *cfg,
                         const char *call, int must_name_rank, const char *must_mention) {
  weft_comm_t comm = (weft_comm_t)0x1; /* must be reset to NULL on error */
  weft_status_t st = weft_comm_init_rank_config(&comm, nranks, id, rank, cfg);
  if (st != WEFT_ERR_INVALID_ARGUMENT)
    fail_msg("%s returned %s, expected WEFT_ERR_INVALID_ARGUMENT (\"%s\")", call,
             harness_status_name(st), weft_get_last_error(NULL));
  if (comm != NULL) fail_msg("%s failed but left *comm = %p, not NULL", call, (void *)comm);
  assert_message_mentions(weft_get_last_error(NULL), "init", call);
  if (must_mention) assert_message_mentions(weft_get_last_error(NULL), must_mention, call);
  if (must_name_rank >= -1 && !harness_names_rank(weft_get_last_error(NULL), must_name_rank))
    fail_msg("%s: the error message \"%s\" does not name rank %d", call,
             weft_get_last_error(NULL), must_name_rank);
}

/* The ids below come from harness_unique_id, not weft_get_unique_id: a root thread in this
 * process would be alive when the later tests fork their ranks (see harness.c). */
static void init_with_bad_rank_or_size_fails_with_invalid_argument(void **state) {
  weft_unique_id_t id;
  harness_unique_id(&id);
  init_rejects(2, id, 2, NULL, "init with rank 2 of 2 ranks", 2, NULL);
  init_rejects(2, id, -1, NULL, "init with rank -1", -2, "-1");
  init_rejects(0, id, 0, NULL, "init with 0 ranks", -2, "0");
  init_rejects(-3, id, 0, NULL, "init with -3 ranks", -2, "-3");
  weft_status_t st = weft_comm_init_rank(NULL, 2, id, 0);
  if (st != WEFT_ERR_INVALID_ARGUMENT)
    fail_msg("init with comm NULL returned %s", harness_status_name(st));
  assert_message_mentions(weft_get_last_error(NULL), "init", "init with comm NULL");
  weft_unique_id_t zero;
  memset(&zero, 0, sizeof zero);
  init_rejects(2, zero, 0, NULL, "init with an all-zero (malformed) id", -2, NULL);
}

static void init_with_bad_config_fails_with_invalid_argument(void **state) {
  weft_unique_id_t id;
  harness_unique_id(&id);
  weft_config_t cfg = WEFT_CONFIG_INITIALIZER;
  cfg.magic = 0;
  init_rejects(1, id, 0, &cfg, "init with a config of the wrong magic", -2, NULL);
  weft_config_t cfg2 = WEFT_CONFIG_INITIALIZER;
  cfg2.timeout_ms = -5;
  init_rejects(1, id, 0, &cfg2, "init with timeout_ms -5", -2, NULL);
  weft_config_t cfg3 = WEFT_CONFIG_INITIALIZER;
  cfg3.blocking = 2;
  init_rejects(1, id, 0, &cfg3, "init with blocking 2", -2, NULL);
}

#define EXPECT_INVALID(call)                                                              \
  do {                                                                                    \
    weft_status_t st_ = (call);                                                           \
    if (st_ != WEFT_ERR_INVALID_ARGUMENT)                                                 \
      fail_msg("%s returned %s, expected WEFT_ERR_INVALID_ARGUMENT", #call,               \
               harness_status_name(st_));                                                 \
  } while (0)

static void api_calls_with_null_pointers_fail_with_invalid_argument(void **state) {
  int v = 0, n = 0;
  weft_status_t async;
  EXPECT_INVALID(weft_get_version(NULL));
  assert_int_equal(weft_get_version(&v), WEFT_SUCCESS);
  assert_int_equal(v, WEFT_VERSION_CODE);
  EXPECT_INVALID(weft_get_unique_id(NULL));
  weft_unique_id_t id, back;
  char str[WEFT_UNIQUE_ID_STRING_BYTES], bad[WEFT_UNIQUE_ID_STRING_BYTES];
  harness_unique_id(&id);
  EXPECT_INVALID(weft_unique_id_to_string(NULL, str));
  EXPECT_INVALID(weft_unique_id_to_string(&id, NULL));
  assert_int_equal(weft_unique_id_to_string(&id, str), WEFT_SUCCESS);
  assert_int_equal(strlen(str), 2 * WEFT_UNIQUE_ID_BYTES);
  assert_int_equal(weft_unique_id_from_string(str, &back), WEFT_SUCCESS);
  assert_memory_equal(&id, &back, sizeof id);
  EXPECT_INVALID(weft_unique_id_from_string(NULL, &back));
  EXPECT_INVALID(weft_unique_id_from_string(str, NULL));
  EXPECT_INVALID(weft_unique_id_from_string("abc", &back));
  memcpy(bad, str, sizeof bad);
  bad[17] = 'g';
  EXPECT_INVALID(weft_unique_id_from_string(bad, &back));
  EXPECT_INVALID(weft_stream_create(NULL));
  EXPECT_INVALID(weft_stream_synchronize(NULL));
  EXPECT_INVALID(weft_stream_query(NULL));
  EXPECT_INVALID(weft_comm_destroy(NULL));
  EXPECT_INVALID(weft_comm_abort(NULL));
  EXPECT_INVALID(weft_comm_count(NULL, &n));
  EXPECT_INVALID(weft_comm_user_rank(NULL, &n));
  EXPECT_INVALID(weft_comm_get_async_error(NULL, &async));
  float x[4] = {0};
  EXPECT_INVALID(weft_all_reduce(x, x, 4, WEFT_FLOAT32, WEFT_SUM, NULL, NULL));
  assert_message_mentions(weft_get_last_error(NULL), "all_reduce", "all_reduce with comm NULL");
  EXPECT_INVALID(weft_send(x, 4, WEFT_FLOAT32, 0, NULL, NULL));
  EXPECT_INVALID(weft_recv(x, 4, WEFT_FLOAT32, 0, NULL, NULL));
  assert_int_equal(weft_datatype_size(BAD_DT), 0);
  assert_int_equal(weft_datatype_size(NEG_DT), 0);
  for (int dt = 0; dt < WEFT_NUM_DATATYPES; dt++)
    assert_int_equal(weft_datatype_size((weft_datatype_t)dt), harness_esize((weft_datatype_t)dt));
  weft_status_t st = weft_group_end();
  if (st != WEFT_ERR_INVALID_USAGE)
    fail_msg("weft_group_end without weft_group_start returned %s, expected "
             "WEFT_ERR_INVALID_USAGE", harness_status_name(st));
}

/* Issue 15 defect 9: ranks forked while a bootstrap root thread of this process was in
 * malloc deadlocked under ASan. The harness keeps every root out of the test program, so
 * after ids and whole runs it still has one thread (with roots in-process it had several). */
static int trivial_body(harness_rank *r) { return r->failures; }

static void the_test_program_stays_single_threaded_so_forked_ranks_cannot_deadlock(void **state) {
  weft_unique_id_t id;
  harness_unique_id(&id);
  harness_run_simple(2, "shm", trivial_body, NULL);
  int n = harness_thread_count();
  if (n != 1 && n != -1)
    fail_msg("the test program has %d threads after harness_unique_id and harness_run; ranks forked "
             "now could inherit a lock held by one of them", n);
}

static void error_strings_are_non_empty_and_distinct_for_every_status(void **state) {
  for (int a = 0; a < WEFT_NUM_STATUS; a++) {
    const char *sa = weft_get_error_string((weft_status_t)a);
    if (!sa || !*sa) fail_msg("weft_get_error_string(%d) is empty", a);
    for (int b = 0; b < a; b++)
      if (strcmp(sa, weft_get_error_string((weft_status_t)b)) == 0)
        fail_msg("statuses %d and %d share the error string \"%s\"", a, b, sa);
  }
  const char *u = weft_get_error_string((weft_status_t)999);
  assert_non_null(u);
  assert_string_equal(u, "unknown status");
  assert_string_equal(weft_get_error_string((weft_status_t)-1), "unknown status");
}

/* ---- on 2 ranks: every call with bad arguments ---------------------------------------- */

/* Checks one bad call on a rank: WEFT_ERR_INVALID_ARGUMENT, and a last error that names
 * this rank and the operation. */
static void expect_bad(harness_rank *r, weft_status_t st, const char *op, const char *what) {
  if (st != WEFT_ERR_INVALID_ARGUMENT) {
    harness_fail(r, "%s %s returned %s, expected WEFT_ERR_INVALID_ARGUMENT (\"%s\")", op, what,
                 harness_status_name(st), weft_get_last_error(r->comm));
    return;
  }
  const char *msg = weft_get_last_error(r->comm);
  if (!msg || !*msg || !strstr(msg, op) || !harness_names_rank(msg, r->rank))
    harness_fail(r, "%s %s: the last error \"%s\" does not name rank %d and \"%s\"", op, what,
                 msg ? msg : "(null)", r->rank, op);
  const char *tmsg = weft_get_last_error(NULL);
  if (!tmsg || !*tmsg)
    harness_fail(r, "%s %s: weft_get_last_error(NULL) (this thread's) is empty", op, what);
}

static void bad_all_reduce(harness_rank *r, float *b) {
  weft_comm_t c = r->comm;
  const char *op = "all_reduce";
  expect_bad(r, weft_all_reduce(NULL, b, 4, WEFT_FLOAT32, WEFT_SUM, c, NULL), op, "sendbuf NULL");
  expect_bad(r, weft_all_reduce(b, NULL, 4, WEFT_FLOAT32, WEFT_SUM, c, NULL), op, "recvbuf NULL");
  expect_bad(r, weft_all_reduce(b, b, OVF_F32, WEFT_FLOAT32, WEFT_SUM, c, NULL), op,
             "count overflowing size_t");
  expect_bad(r, weft_all_reduce(b, b, SIZE_MAX / 2, WEFT_FLOAT32, WEFT_SUM, c, NULL), op,
             "count SIZE_MAX/2");
  expect_bad(r, weft_all_reduce(b, b, 4, BAD_DT, WEFT_SUM, c, NULL), op, "dtype NUM_DATATYPES");
  expect_bad(r, weft_all_reduce(b, b, 4, NEG_DT, WEFT_SUM, c, NULL), op, "dtype -1");
  expect_bad(r, weft_all_reduce(b, b, 4, WEFT_FLOAT32, BAD_OP, c, NULL), op, "op NUM_OPS");
  expect_bad(r, weft_all_reduce(b, b, 4, WEFT_FLOAT32, NEG_OP, c, NULL), op, "op -1");
}

static void bad_rooted(harness_rank *r, float *b) {
  weft_comm_t c = r->comm;
  int n = r->nranks, me = r->rank;
  const char *op = "broadcast";
  expect_bad(r, weft_broadcast(NULL, b, 4, WEFT_FLOAT32, me, c, NULL), op, "root's sendbuf NULL");
  expect_bad(r, weft_broadcast(b, NULL, 4, WEFT_FLOAT32, me, c, NULL), op, "recvbuf NULL");
  expect_bad(r, weft_broadcast(b, b, 4, WEFT_FLOAT32, n, c, NULL), op, "root == nranks");
  expect_bad(r, weft_broadcast(b, b, 4, WEFT_FLOAT32, -1, c, NULL), op, "root -1");
  expect_bad(r, weft_broadcast(b, b, 4, BAD_DT, 0, c, NULL), op, "dtype NUM_DATATYPES");
  expect_bad(r, weft_broadcast(b, b, OVF_F32, WEFT_FLOAT32, 0, c, NULL), op, "count overflow");
  op = "reduce";
  expect_bad(r, weft_reduce(NULL, b, 4, WEFT_FLOAT32, WEFT_SUM, 0, c, NULL), op, "sendbuf NULL");
  expect_bad(r, weft_reduce(b, NULL, 4, WEFT_FLOAT32, WEFT_SUM, me, c, NULL), op,
             "root's recvbuf NULL");
  expect_bad(r, weft_reduce(b, b, 4, WEFT_FLOAT32, WEFT_SUM, n, c, NULL), op, "root == nranks");
  expect_bad(r, weft_reduce(b, b, 4, WEFT_FLOAT32, WEFT_SUM, -1, c, NULL), op, "root -1");
  expect_bad(r, weft_reduce(b, b, 4, WEFT_FLOAT32, BAD_OP, 0, c, NULL), op, "op NUM_OPS");
  expect_bad(r, weft_reduce(b, b, 4, NEG_DT, WEFT_MAX, 0, c, NULL), op, "dtype -1");
  expect_bad(r, weft_reduce(b, b, OVF_F32, WEFT_FLOAT32, WEFT_SUM, 0, c, NULL), op,
             "count overflow");
}

static void bad_gather_scatter(harness_rank *r, float *b) {
  weft_comm_t c = r->comm;
  const char *op = "all_gather";
  expect_bad(r, weft_all_gather(NULL, b, 2, WEFT_FLOAT32, c, NULL), op, "sendbuf NULL");
  expect_bad(r, weft_all_gather(b, NULL, 2, WEFT_FLOAT32, c, NULL), op, "recvbuf NULL");
  expect_bad(r, weft_all_gather(b, b, OVF_F32, WEFT_FLOAT32, c, NULL), op, "count overflow");
  expect_bad(r, weft_all_gather(b, b, OVF_F32_X2, WEFT_FLOAT32, c, NULL), op,
             "nranks * count overflowing size_t");
  expect_bad(r, weft_all_gather(b, b, 2, BAD_DT, c, NULL), op, "dtype NUM_DATATYPES");
  op = "reduce_scatter";
  expect_bad(r, weft_reduce_scatter(NULL, b, 2, WEFT_FLOAT32, WEFT_SUM, c, NULL), op,
             "sendbuf NULL");
  expect_bad(r, weft_reduce_scatter(b, NULL, 2, WEFT_FLOAT32, WEFT_SUM, c, NULL), op,
             "recvbuf NULL");
  expect_bad(r, weft_reduce_scatter(b, b, OVF_F32_X2, WEFT_FLOAT32, WEFT_SUM, c, NULL), op,
             "nranks * count overflowing size_t");
  expect_bad(r, weft_reduce_scatter(b, b, 2, WEFT_FLOAT32, NEG_OP, c, NULL), op, "op -1");
  expect_bad(r, weft_reduce_scatter(b, b, 2, NEG_DT, WEFT_SUM, c, NULL), op, "dtype -1");
  op = "all_to_all";
  expect_bad(r, weft_all_to_all(NULL, b, 2, WEFT_FLOAT32, c, NULL), op, "sendbuf NULL");
  expect_bad(r, weft_all_to_all(b, NULL, 2, WEFT_FLOAT32, c, NULL), op, "recvbuf NULL");
  expect_bad(r, weft_all_to_all(b, b, OVF_F32_X2, WEFT_FLOAT32, c, NULL), op,
             "nranks * count overflowing size_t");
  expect_bad(r, weft_all_to_all(b, b, 2, BAD_DT, c, NULL), op, "dtype NUM_DATATYPES");
}

static void bad_p2p(harness_rank *r, float *b) {
  weft_comm_t c = r->comm;
  int n = r->nranks, other = 1 - r->rank;
  expect_bad(r, weft_send(NULL, 4, WEFT_FLOAT32, other, c, NULL), "send", "sendbuf NULL");
  expect_bad(r, weft_send(b, 4, WEFT_FLOAT32, n, c, NULL), "send", "peer == nranks");
  expect_bad(r, weft_send(b, 4, WEFT_FLOAT32, -1, c, NULL), "send", "peer -1");
  expect_bad(r, weft_send(b, 4, BAD_DT, other, c, NULL), "send", "dtype NUM_DATATYPES");
  expect_bad(r, weft_send(b, OVF_F32, WEFT_FLOAT32, other, c, NULL), "send", "count overflow");
  expect_bad(r, weft_recv(NULL, 4, WEFT_FLOAT32, other, c, NULL), "recv", "recvbuf NULL");
  expect_bad(r, weft_recv(b, 4, WEFT_FLOAT32, n, c, NULL), "recv", "peer == nranks");
  expect_bad(r, weft_recv(b, 4, WEFT_FLOAT32, -1, c, NULL), "recv", "peer -1");
  expect_bad(r, weft_recv(b, 4, NEG_DT, other, c, NULL), "recv", "dtype -1");
  expect_bad(r, weft_recv(b, OVF_F32, WEFT_FLOAT32, other, c, NULL), "recv", "count overflow");
}

/* A correct all_reduce and broadcast after the bad calls: the communicator still works. */
static void still_works(harness_rank *r, const char *after) {
  float v[1000];
  for (int i = 0; i < 1000; i++) v[i] = (float)(r->rank + i % 5);
  weft_status_t st = weft_all_reduce(v, v, 1000, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
  char what[160];
  snprintf(what, sizeof what, "all_reduce after %s", after);
  if (!harness_expect_status(r, st, WEFT_SUCCESS, what)) return;
  for (int i = 0; i < 1000; i++)
    if (v[i] != (float)(1 + 2 * (i % 5))) {
      harness_fail(r, "%s: element %d: got %g, expected %d", what, i, v[i], 1 + 2 * (i % 5));
      return;
    }
  int32_t w[7] = {0};
  if (r->rank == 1)
    for (int i = 0; i < 7; i++) w[i] = 40 + i;
  snprintf(what, sizeof what, "broadcast after %s", after);
  st = weft_broadcast(w, w, 7, WEFT_INT32, 1, r->comm, NULL);
  if (harness_expect_status(r, st, WEFT_SUCCESS, what))
    for (int i = 0; i < 7; i++)
      if (w[i] != 40 + i) {
        harness_fail(r, "%s: element %d: got %d, expected %d", what, i, w[i], 40 + i);
        return;
      }
}

static int bad_calls_body(harness_rank *r) {
  float b[16] = {0};
  bad_all_reduce(r, b);
  bad_rooted(r, b);
  bad_gather_scatter(r, b);
  bad_p2p(r, b);
  still_works(r, "bad arguments");
  /* A bad call on a stream is refused at the call and never reaches the stream. */
  weft_stream_t s;
  if (!harness_expect_status(r, weft_stream_create(&s), WEFT_SUCCESS, "weft_stream_create"))
    return r->failures;
  expect_bad(r, weft_all_reduce(NULL, b, 4, WEFT_FLOAT32, WEFT_SUM, r->comm, s), "all_reduce",
             "sendbuf NULL on a stream");
  harness_expect_status(r, weft_stream_synchronize(s), WEFT_SUCCESS,
                        "weft_stream_synchronize after a refused call");
  weft_stream_destroy(s);
  weft_status_t async = WEFT_ERR_INTERNAL;
  weft_comm_get_async_error(r->comm, &async);
  harness_expect_status(r, async, WEFT_SUCCESS, "async error after refused calls");
  /* A group whose send to self has no matching recv is refused as a whole. */
  weft_group_start();
  weft_send(b, 4, WEFT_FLOAT32, r->rank, r->comm, NULL);
  weft_status_t st = weft_group_end();
  harness_expect_status(r, st, WEFT_ERR_INVALID_USAGE, "group with an unmatched send to self");
  still_works(r, "a refused group");
  return r->failures;
}

static void bad_arguments_fail_cleanly_and_the_communicator_still_works(void **state) {
  harness_opts o = {0};
  o.nranks = 2;
  o.transport = *(const char *const *)*state;
  o.deadline_s = 60;
  harness_run(&o, bad_calls_body, NULL);
}

/* ---- rendezvous with a wrong secret, a taken rank, a disagreeing nranks ---------------- */

enum { JOIN_WRONG_SECRET, JOIN_SAME_RANK };
#define JOIN_TIMEOUT_MS 3000

/* Rank 1 joins with an altered id (or a taken rank); each rank records
 * its init status in shared->values[rank] and raises flags[rank]; rank 0 then judges. */
static int bad_join_body(harness_rank *r) {
  int kind = *(const int *)r->arg;
  int rank = r->rank, nranks = r->nranks;
  r->config.timeout_ms = JOIN_TIMEOUT_MS;
  if (rank == 1 && kind == JOIN_WRONG_SECRET) {
    weft__id_layout layout;
    memcpy(&layout, r->id.internal, sizeof layout);
    layout.secret[5] ^= 0x20;
    memcpy(r->id.internal, &layout, sizeof layout);
  }
  if (rank == 1 && kind == JOIN_SAME_RANK) rank = 0;
  double t0 = harness_now_ms();
  weft_comm_t comm = NULL;
  weft_status_t st = weft_comm_init_rank_config(&comm, nranks, r->id, rank, &r->config);
  double ms = harness_now_ms() - t0;
  const char *msg = weft_get_last_error(NULL);
  harness_note(r, "init as rank %d of %d returned %s after %.0f ms: \"%s\"", rank, nranks,
               harness_status_name(st), ms, msg);
  if (comm) weft_comm_abort(comm);
  if (st == WEFT_SUCCESS) harness_fail(r, "init succeeded although the join was invalid");
  if (st != WEFT_SUCCESS && comm != NULL) harness_fail(r, "init failed but *comm is not NULL");
  if (ms > JOIN_TIMEOUT_MS + 3000)
    harness_fail(r, "init took %.0f ms with a %d ms timeout", ms, JOIN_TIMEOUT_MS);
  atomic_store(&r->shared->values[r->rank], (long long)st);
  atomic_store(&r->shared->flags[r->rank], 1);
  if (kind == JOIN_WRONG_SECRET && r->rank == 1) {
    if (st != WEFT_ERR_AUTH) harness_fail(r, "wrong secret: got %s, expected WEFT_ERR_AUTH",
                                          harness_status_name(st));
    if (ms > JOIN_TIMEOUT_MS)
      harness_fail(r, "wrong secret rejected only after %.0f ms (timeout %d ms)", ms,
                   JOIN_TIMEOUT_MS);
  }
  if (kind == JOIN_WRONG_SECRET && r->rank == 0) {
    if (st != WEFT_ERR_TIMEOUT && st != WEFT_ERR_REMOTE)
      harness_fail(r, "rank 0 with rank 1 rejected: got %s, expected WEFT_ERR_TIMEOUT or "
                   "WEFT_ERR_REMOTE", harness_status_name(st));
    if (!harness_names_rank(msg, 1))
      harness_fail(r, "rank 0's init error does not name the missing rank 1: \"%s\"", msg);
  }
  if (kind != JOIN_WRONG_SECRET && r->rank == 0) {
    if (!harness_wait_flag(r, 1, 1, 15000)) harness_fail(r, "the other rank never finished init");
    weft_status_t other = (weft_status_t)atomic_load(&r->shared->values[1]);
    if (st != WEFT_ERR_AUTH && other != WEFT_ERR_AUTH)
      harness_fail(r, "conflicting joins: statuses %s and %s, expected one WEFT_ERR_AUTH",
                   harness_status_name(st), harness_status_name(other));
  }
  return r->failures;
}

static void run_bad_join(int kind) {
  harness_opts o = {0};
  o.nranks = 2;
  o.transport = "socket";
  o.no_init = 1;
  o.deadline_s = 60;
  harness_run(&o, bad_join_body, &kind);
}

static void unique_id_with_a_wrong_secret_is_rejected_and_the_other_rank_names_it(void **s) {
  run_bad_join(JOIN_WRONG_SECRET);
}

static void rank_number_claimed_twice_is_rejected(void **state) {
  run_bad_join(JOIN_SAME_RANK);
}

/* The root knows of a conflict on nranks as soon as the second count arrives: every rank
 * (the waiting ones too) must be refused at once, naming both counts, never at its 30 s
 * deadline. Rank 2 says 4 ranks, ranks 0 and 1 say 3; whichever arrives first, all three
 * fail with WEFT_ERR_INVALID_USAGE within a few seconds. */
#define DISAGREE_TIMEOUT_MS 30000
static int disagree_body(harness_rank *r) {
  r->config.timeout_ms = DISAGREE_TIMEOUT_MS;
  int nranks = r->rank == 2 ? 4 : 3;
  double t0 = harness_now_ms();
  weft_comm_t comm = NULL;
  weft_status_t st = weft_comm_init_rank_config(&comm, nranks, r->id, r->rank, &r->config);
  double ms = harness_now_ms() - t0;
  const char *msg = weft_get_last_error(NULL);
  harness_note(r, "init as rank %d of %d returned %s after %.0f ms: \"%s\"", r->rank, nranks,
               harness_status_name(st), ms, msg);
  if (comm) weft_comm_abort(comm);
  if (st != WEFT_ERR_INVALID_USAGE)
    harness_fail(r, "got %s, expected WEFT_ERR_INVALID_USAGE", harness_status_name(st));
  if (!strstr(msg, "disagree") || !strstr(msg, "3") || !strstr(msg, "4"))
    harness_fail(r, "the error \"%s\" does not say the ranks disagree on 3 and 4", msg);
  if (ms > 5000)
    harness_fail(r, "refused only after %.0f ms (deadline %d ms): the root knew at once", ms,
                 DISAGREE_TIMEOUT_MS);
  return r->failures;
}

static void ranks_disagreeing_on_nranks_are_all_rejected_at_once(void **state) {
  harness_opts o = {0};
  o.nranks = 3;
  o.transport = "socket";
  o.no_init = 1;
  o.deadline_s = 60;
  harness_run(&o, disagree_body, NULL);
}

/* A unique id serves one communicator: a second init with it, after its communicator is
 * complete, must be refused at once (not left to time out) and say why. */
static int reuse_id_body(harness_rank *r) {
  if (r->rank == 0) {
    weft_config_t cfg = WEFT_CONFIG_INITIALIZER;
    cfg.timeout_ms = 10000;
    weft_comm_t again = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    weft_status_t st = weft_comm_init_rank_config(&again, r->nranks, r->id, 0, &cfg);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    harness_expect_status(r, st, WEFT_ERR_INVALID_USAGE, "second init with a used unique id");
    if (again != NULL) harness_fail(r, "failed init left *comm non-NULL");
    if (strstr(weft_get_last_error(NULL), "already complete") == NULL)
      harness_fail(r, "message does not say the id is used up: \"%s\"", weft_get_last_error(NULL));
    if (secs > 5.0) harness_fail(r, "refusal took %.1f s; it must come at once", secs);
  }
  /* The first communicator still works. */
  int32_t one = 1, sum = 0;
  harness_expect_status(r, weft_all_reduce(&one, &sum, 1, WEFT_INT32, WEFT_SUM, r->comm, NULL),
                        WEFT_SUCCESS, "all_reduce after the refused init");
  if (sum != r->nranks) harness_fail(r, "all_reduce gave %d, expected %d", sum, r->nranks);
  return r->failures;
}

static void unique_id_reused_for_a_second_communicator_is_refused_at_once(void **state) {
  harness_run_simple(2, "shm", reuse_id_body, NULL);
}

/* Window registration with memory weft can neither map nor adopt (a shared anonymous
 * mapping: not from weft_mem_alloc, not private) fails on every rank, naming the rank
 * that passed it; the communicator still works, and a proper window registers.
 * weft_mem_free refuses a pointer it did not hand out. */
static int bad_window_body(harness_rank *r) {
  static float plain[1024];
  float *shared = mmap(NULL, sizeof plain, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return harness_fail(r, "mmap of a shared anonymous buffer failed");
  void *mem = NULL;
  weft_window_t w = NULL;
  harness_expect_status(r, weft_mem_alloc(&mem, 0), WEFT_ERR_INVALID_ARGUMENT, "weft_mem_alloc of 0 bytes");
  harness_expect_status(r, weft_mem_free(plain), WEFT_ERR_INVALID_ARGUMENT, "weft_mem_free of static memory");
  if (!harness_expect_status(r, weft_mem_alloc(&mem, 1 << 16), WEFT_SUCCESS, "weft_mem_alloc"))
    return r->failures;
  void *buf = r->rank == 1 ? (void *)shared : mem;
  weft_status_t st = weft_comm_window_register(r->comm, buf, sizeof plain, &w, 0);
  harness_expect_status(r, st, WEFT_ERR_INVALID_ARGUMENT, "window register with rank 1's shared mapping");
  const char *msg = weft_get_last_error(r->comm);
  const char *want = r->rank == 1 ? "not inside one weft_mem_alloc block" : "peer 1";
  if (strstr(msg, want) == NULL) harness_fail(r, "window register error \"%s\" lacks \"%s\"", msg, want);
  if (w != NULL) harness_fail(r, "a failed registration returned a window");
  still_works(r, "a refused window registration");
  st = weft_comm_window_register(r->comm, mem, 1 << 16, &w, 0);
  if (harness_expect_status(r, st, WEFT_SUCCESS, "window register of weft_mem_alloc memory")) {
    float *v = mem;
    for (int i = 0; i < 4096; i++) v[i] = (float)(r->rank + 1);
    st = weft_all_reduce(v, v + 4096, 4096, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    if (harness_expect_status(r, st, WEFT_SUCCESS, "all_reduce in a window") && v[4096 + 4095] != 3.0f)
      harness_fail(r, "all_reduce in a window: got %g, expected 3", v[4096 + 4095]);
    harness_expect_status(r, weft_comm_window_deregister(r->comm, w), WEFT_SUCCESS, "window deregister");
  }
  harness_expect_status(r, weft_mem_free(mem), WEFT_SUCCESS, "weft_mem_free");
  munmap(shared, sizeof plain);
  return r->failures;
}

static void window_of_foreign_memory_is_refused_on_every_rank(void **state) {
  harness_run_simple(2, "shm", bad_window_body, NULL);
}

/* WEFT_DIRECT=0 on one rank: registration succeeds everywhere, no call runs direct (the
 * window is unusable on every rank alike), and results stay right. */
static int direct_off_body(harness_rank *r) {
  void *mem = NULL;
  weft_window_t w = NULL;
  if (r->rank == 1) setenv("WEFT_DIRECT", "0", 1);
  if (!harness_expect_status(r, weft_mem_alloc(&mem, 1 << 16), WEFT_SUCCESS, "weft_mem_alloc"))
    return r->failures;
  weft_status_t st = weft_comm_window_register(r->comm, mem, 1 << 16, &w, 0);
  if (harness_expect_status(r, st, WEFT_SUCCESS, "window register with WEFT_DIRECT=0 on rank 1")) {
    float *v = mem;
    for (int i = 0; i < 4096; i++) v[i] = (float)(r->rank + 1);
    st = weft_all_reduce(v, v + 4096, 4096, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    if (harness_expect_status(r, st, WEFT_SUCCESS, "all_reduce in an unusable window") && v[4096] != 3.0f)
      harness_fail(r, "all_reduce in an unusable window: got %g, expected 3", v[4096]);
    if (r->comm->direct_calls + r->comm->direct_fallbacks != 0)
      harness_fail(r, "a call tried the direct path on a window WEFT_DIRECT=0 made unusable");
    harness_expect_status(r, weft_comm_window_deregister(r->comm, w), WEFT_SUCCESS, "window deregister");
  }
  harness_expect_status(r, weft_mem_free(mem), WEFT_SUCCESS, "weft_mem_free");
  return r->failures;
}

static void window_with_direct_off_on_one_rank_takes_the_usual_path(void **state) {
  harness_run_simple(2, "shm", direct_off_body, NULL);
}

int main(void) {
  static const char *shm = "shm", *sock = "socket";
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(init_with_bad_rank_or_size_fails_with_invalid_argument),
      cmocka_unit_test(init_with_bad_config_fails_with_invalid_argument),
      cmocka_unit_test(api_calls_with_null_pointers_fail_with_invalid_argument),
      cmocka_unit_test(error_strings_are_non_empty_and_distinct_for_every_status),
      cmocka_unit_test(the_test_program_stays_single_threaded_so_forked_ranks_cannot_deadlock),
      {"bad_arguments_fail_cleanly_and_the_communicator_still_works_on_2_ranks_over_shm",
       bad_arguments_fail_cleanly_and_the_communicator_still_works, NULL, NULL, &shm},
      {"bad_arguments_fail_cleanly_and_the_communicator_still_works_on_2_ranks_over_socket",
       bad_arguments_fail_cleanly_and_the_communicator_still_works, NULL, NULL, &sock},
      cmocka_unit_test(unique_id_with_a_wrong_secret_is_rejected_and_the_other_rank_names_it),
      cmocka_unit_test(rank_number_claimed_twice_is_rejected),
      cmocka_unit_test(ranks_disagreeing_on_nranks_are_all_rejected_at_once),
      cmocka_unit_test(unique_id_reused_for_a_second_communicator_is_refused_at_once),
      cmocka_unit_test(window_of_foreign_memory_is_refused_on_every_rank),
      cmocka_unit_test(window_with_direct_off_on_one_rank_takes_the_usual_path),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
