/* test_ib_engine.c: the net_ib protocol engine (transports/ib/ib_net.h) between 2-4 real
 * processes over the verbs emulator: every pair connected both ways through handles moved
 * in a shared mailbox, messages of 0, 1, odd and 4 KiB..16 MiB bytes checked byte for byte
 * (and that nothing past the received size moved), over 1 and 3 QPs per connection; then
 * every fault the emulator injects, a dead peer, a wrong secret and a too-large send, each
 * of which must end on every rank in an error naming the peer within a deadline.
 * `test_ib_engine --ports` prints weft__ib_ports' answer (for the one-INFO-line case). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "lib/status.h"
#include "tests/harness.h"
#include "lib/siphash.h"
#include "transports/ib/tests/ib_mesh.h"
#include "transports/ib/tests/verbs_emu_pair.h"
#include "transports/ib/ib_net.h"

static const size_t sizes_small[] = {0, 1, 7, 4095, 4096, 65536 + 3, 1 << 20, 4 << 20};
static const size_t sizes_all[] = {0, 1, 7, 4095, 4096, 65536 + 3, 1 << 20, 4 << 20, 16 << 20};

typedef struct {
  const size_t *sizes;
  int nsizes;
  int nqps;
} traffic_case;

static int body_traffic(harness_rank *r) {
  const traffic_case *t = ((ib_mesh_arg *)r->arg)->user;
  char qps[8];
  snprintf(qps, sizeof(qps), "%d", t->nqps);
  setenv("WEFT_IB_QPS_PER_CONNECTION", qps, 1);
  ib_mesh m;
  if (ib_mesh_setup(r, &m, 10000) != 0) return r->failures;
  for (int s = 0; s < t->nsizes && r->failures == 0; s++)
    for (int iter = 0; iter < 2 && r->failures == 0; iter++) {
      weft_status_t st = ib_mesh_exchange(r, &m, t->sizes[s], iter, 20000);
      if (st != WEFT_SUCCESS) harness_fail(r, "exchange of %zu bytes: %s", t->sizes[s], weft_get_last_error(NULL));
    }
  ib_mesh_close(&m);
  return r->failures;
}

static void run_traffic(int n, const size_t *sizes, int nsizes, int nqps) {
  traffic_case t = {sizes, nsizes, nqps};
  ib_mesh_run(n, body_traffic, &t, 120);
}

static void two_ranks_move_0_1_odd_and_4k_to_16m_both_ways(void **state) {
  (void)state;
  run_traffic(2, sizes_all, 9, 1);
}

static void two_ranks_split_messages_over_3_qps(void **state) {
  (void)state;
  run_traffic(2, sizes_all, 9, 3);
}

static void three_ranks_all_pairs_up_to_4m(void **state) {
  (void)state;
  run_traffic(3, sizes_small, 8, 2);
}

static void four_ranks_all_pairs_up_to_4m(void **state) {
  (void)state;
  run_traffic(4, sizes_small, 8, 1);
}

/* ---- faults ------------------------------------------------------------------------------ */
typedef struct {
  const char *fault;       /* WEFT_VERBS_EMU_FAULT on rank 0 */
  const char *rank0_says;  /* in rank 0's error */
  weft_status_t rank0_status;
} fault_case;

static int body_fault(harness_rank *r) {
  const fault_case *f = ((ib_mesh_arg *)r->arg)->user;
  if (r->rank == 0) setenv("WEFT_VERBS_EMU_FAULT", f->fault, 1);
  ib_mesh m;
  if (ib_mesh_setup(r, &m, 1500) != 0) return r->failures;
  double t0 = harness_now_ms();
  weft_status_t st = WEFT_SUCCESS;
  for (int iter = 0; iter < 6 && st == WEFT_SUCCESS; iter++) st = ib_mesh_exchange(r, &m, 4096, iter, 10000);
  double ms = harness_now_ms() - t0;
  const char *msg = weft_get_last_error(NULL);
  if (st == WEFT_SUCCESS) {
    harness_fail(r, "%s: every exchange succeeded", f->fault);
  } else {
    harness_note(r, "%s: after %.0f ms: %s: %s", f->fault, ms, harness_status_name(st), msg);
    if (!harness_names_rank(msg, 1 - r->rank)) harness_fail(r, "the error does not name peer rank %d", 1 - r->rank);
    if (r->rank == 0 && strstr(msg, f->rank0_says) == NULL) harness_fail(r, "the error does not say '%s'", f->rank0_says);
    if (r->rank == 0 && st != f->rank0_status)
      harness_fail(r, "status %s, expected %s", harness_status_name(st), harness_status_name(f->rank0_status));
    if (ms > 6000) harness_fail(r, "the error took %.0f ms", ms);
  }
  ib_mesh_close(&m);
  return r->failures;
}

static void run_fault(const char *fault, const char *says, weft_status_t st) {
  fault_case f = {fault, says, st};
  ib_mesh_run(2, body_fault, &f, 30);
}

static void fault_remote_access_error_names_the_peer_and_status(void **state) {
  (void)state;
  run_fault("wr=3:rem_access", "remote access error", WEFT_ERR_SYSTEM);
}

static void fault_retry_exceeded_names_the_peer_and_status(void **state) {
  (void)state;
  run_fault("wr=4:retry_exc", "transport retry counter exceeded", WEFT_ERR_REMOTE);
}

static void fault_rnr_retry_exceeded_names_the_peer_and_status(void **state) {
  (void)state;
  run_fault("wr=5:rnr_retry", "RNR retry counter exceeded", WEFT_ERR_SYSTEM);
}

static void fault_qp_in_error_state_flushes_and_fails(void **state) {
  (void)state;
  run_fault("qp_error=3", "flushed", WEFT_ERR_SYSTEM);
}

static void fault_fatal_async_event_fails_the_comms(void **state) {
  (void)state;
  run_fault("fatal=4", "asynchronous event", WEFT_ERR_SYSTEM);
}

static void fault_delayed_completions_past_the_timeout_end_in_timeout(void **state) {
  (void)state;
  run_fault("delay_us=3000000", "within 1500 ms", WEFT_ERR_TIMEOUT);
}

static int body_delay_within_timeout(harness_rank *r) {
  if (r->rank == 0) setenv("WEFT_VERBS_EMU_FAULT", "delay_us=20000", 1);
  ib_mesh m;
  if (ib_mesh_setup(r, &m, 5000) != 0) return r->failures;
  for (int iter = 0; iter < 3; iter++)
    if (ib_mesh_exchange(r, &m, 100000, iter, 10000) != WEFT_SUCCESS)
      harness_fail(r, "a 20 ms delay failed the exchange: %s", weft_get_last_error(NULL));
  ib_mesh_close(&m);
  return r->failures;
}

static void fault_delayed_completions_within_the_timeout_still_deliver(void **state) {
  (void)state;
  ib_mesh_run(2, body_delay_within_timeout, NULL, 30);
}

/* ---- a dead peer, a wrong secret, a too-large send ---------------------------------------- */
/* 1 once process pid has exited (a zombie not yet reaped, or gone), within timeout_ms. */
static int wait_exited(pid_t pid, int timeout_ms) {
  double end = harness_now_ms() + timeout_ms;
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  while (harness_now_ms() < end) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return 1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    if (paren != NULL && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X')) return 1;
    usleep(2000);
  }
  return 0;
}

static int body_dead_peer(harness_rank *r) {
  ib_mesh m;
  if (ib_mesh_setup(r, &m, 1500) != 0) return r->failures;
  if (ib_mesh_exchange(r, &m, 4096, 0, 10000) != WEFT_SUCCESS) harness_fail(r, "first exchange failed");
  if (r->rank == 1) {
    r->shared->values[40] = getpid();
    r->shared->flags[40] = 1;
    _exit(0); /* gone, as a crashed process: its HCA state dies with it */
  }
  /* Post only once it is gone: the clear-to-send then finds no ACK. */
  if (!harness_wait_flag(r, 40, 1, 10000) || !wait_exited((pid_t)r->shared->values[40], 10000))
    harness_fail(r, "rank 1 did not exit");
  double t0 = harness_now_ms();
  weft_status_t st = ib_mesh_exchange(r, &m, 4096, 1, 10000);
  const char *msg = weft_get_last_error(NULL);
  harness_note(r, "after %.0f ms: %s", harness_now_ms() - t0, msg);
  if (st == WEFT_SUCCESS || !harness_names_rank(msg, 1)) harness_fail(r, "no error naming peer rank 1");
  if (strstr(msg, "transport retry counter exceeded") == NULL) harness_fail(r, "not a retry-exceeded error");
  ib_mesh_close(&m);
  return r->failures;
}

static void a_dead_peer_ends_in_an_error_naming_it(void **state) {
  (void)state;
  ib_mesh_arg a = {0};
  harness_opts o = {.nranks = 2, .no_init = 1, .deadline_s = 30, .may_be_killed = 0};
  a.mailbox = ib_mailbox_new();
  harness_run(&o, body_dead_peer, &a);
  ib_mailbox_free(a.mailbox);
}

static int body_wrong_secret(harness_rank *r) {
  ib_mesh_arg *a = r->arg;
  if (r->rank == 1) a->secret[0] ^= 1; /* another job's secret */
  ib_mesh m;
  int rc = ib_mesh_setup_quiet(r, &m, 1500);
  const char *msg = weft_get_last_error(NULL);
  if (rc == 0) harness_fail(r, "connected with a wrong secret");
  else if (strstr(msg, "does not prove the job's secret") == NULL) harness_fail(r, "unexpected error: %s", msg);
  else harness_note(r, "%s", msg);
  ib_mesh_close(&m);
  return r->failures;
}

static void a_handle_without_the_jobs_secret_is_refused(void **state) {
  (void)state;
  ib_mesh_run(2, body_wrong_secret, NULL, 30);
}

static int body_too_large(harness_rank *r) {
  ib_mesh m;
  if (ib_mesh_setup(r, &m, 1500) != 0) return r->failures;
  weft_status_t st = ib_mesh_exchange_sizes(r, &m, r->rank == 0 ? 8192 : 4096, 4096, 0, 10000);
  const char *msg = weft_get_last_error(NULL);
  if (r->rank == 0 && (st != WEFT_ERR_INVALID_ARGUMENT || strstr(msg, "into a receive of 4160 bytes") == NULL))
    harness_fail(r, "sending 8192 bytes into a 4096-byte receive: %s: %s", harness_status_name(st), msg);
  if (r->rank == 1 && (st == WEFT_SUCCESS || !harness_names_rank(msg, 0)))
    harness_fail(r, "the receiver's error does not name peer rank 0: %s", msg);
  ib_mesh_close(&m);
  return r->failures;
}

static void a_send_larger_than_the_receive_fails_on_both_sides(void **state) {
  (void)state;
  ib_mesh_run(2, body_too_large, NULL, 30);
}

/* ---- pure parts -------------------------------------------------------------------------- */
static void chunks_are_128_byte_aligned_and_cover_the_message(void **state) {
  (void)state;
  const size_t sizes[] = {0, 1, 127, 128, 129, 1000, 4096, 65539, 16 << 20};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
    for (int nqps = 1; nqps <= 8; nqps++) {
      size_t next = 0;
      for (int q = 0; q < nqps; q++) {
        size_t off, len;
        weft__ib_chunk(sizes[i], nqps, q, &off, &len);
        assert_int_equal(off, next);
        if (len > 0 && q < nqps - 1 && off + len < sizes[i]) assert_int_equal(len % 128, 0);
        next = off + len;
      }
      assert_int_equal(next, sizes[i]);
    }
}

static void siphash_matches_the_papers_test_vector(void **state) {
  (void)state;
  uint8_t key[16], msg[15];
  for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
  for (int i = 0; i < 15; i++) msg[i] = (uint8_t)i;
  assert_true(weft__siphash(key, msg, 15) == 0xa129ca6149be45e5ull);
}

/* ---- without a library: one INFO line ----------------------------------------------------- */
static char g_self[4096];

/* Runs this program with --ports under env (NAME=VALUE, NULL-terminated); returns its stderr. */
static char *run_ports(const char *const *env) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    for (int i = 0; env[i] != NULL; i += 2) setenv(env[i], env[i + 1], 1);
    execl(g_self, g_self, "--ports", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  static char out[8192];
  size_t n = 0;
  ssize_t k;
  while (n + 1 < sizeof(out) && (k = read(fds[0], out + n, sizeof(out) - 1 - n)) > 0) n += (size_t)k;
  out[n] = '\0';
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return out;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++) n++;
  return n;
}

static void without_the_library_one_info_line_says_unavailable(void **state) {
  (void)state;
  const char *const env[] = {"WEFT_IB_LIBRARY", "/nonexistent/libibverbs.so.1", "WEFT_DEBUG", "INFO", NULL};
  char *err = run_ports(env);
  fprintf(stderr, "# %s", err);
  assert_int_equal(count(err, "ib: transport unavailable"), 1);
  assert_non_null(strstr(err, "/nonexistent/libibverbs.so.1"));
}

static void disabled_or_unselected_ports_say_so_in_one_line(void **state) {
  (void)state;
  const char *const off[] = {"WEFT_IB_DISABLE", "1", "WEFT_DEBUG", "INFO", NULL};
  char *err = run_ports(off);
  assert_int_equal(count(err, "ib: transport unavailable: disabled by WEFT_IB_DISABLE=1"), 1);
  const char *const none[] = {"WEFT_IB_HCA", "^weftemu", "WEFT_DEBUG", "INFO", NULL};
  err = run_ports(none);
  fprintf(stderr, "# %s", err);
  assert_int_equal(count(err, "ib: transport unavailable"), 1);
  assert_non_null(strstr(err, "WEFT_IB_HCA"));
}

static int ports_main(void) {
  const char *why;
  int n = weft__ib_ports(NULL, &why);
  n = weft__ib_ports(NULL, &why); /* twice: still one line */
  printf("%d\n", n);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--ports") == 0) return ports_main();
  ssize_t k = readlink("/proc/self/exe", g_self, sizeof(g_self) - 1);
  g_self[k > 0 ? k : 0] = '\0';
  harness_filter_from_env();
  int rc;
  if (!emu_test_begin(&rc)) return rc;
  setenv("WEFT_IB_TIMEOUT", "12", 1); /* 16.8 ms per try: a dead peer is noticed in ~50 ms */
  setenv("WEFT_IB_RETRY_CNT", "2", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chunks_are_128_byte_aligned_and_cover_the_message),
      cmocka_unit_test(siphash_matches_the_papers_test_vector),
      cmocka_unit_test(without_the_library_one_info_line_says_unavailable),
      cmocka_unit_test(disabled_or_unselected_ports_say_so_in_one_line),
      cmocka_unit_test(two_ranks_move_0_1_odd_and_4k_to_16m_both_ways),
      cmocka_unit_test(two_ranks_split_messages_over_3_qps),
      cmocka_unit_test(three_ranks_all_pairs_up_to_4m),
      cmocka_unit_test(four_ranks_all_pairs_up_to_4m),
      cmocka_unit_test(fault_remote_access_error_names_the_peer_and_status),
      cmocka_unit_test(fault_retry_exceeded_names_the_peer_and_status),
      cmocka_unit_test(fault_rnr_retry_exceeded_names_the_peer_and_status),
      cmocka_unit_test(fault_qp_in_error_state_flushes_and_fails),
      cmocka_unit_test(fault_fatal_async_event_fails_the_comms),
      cmocka_unit_test(fault_delayed_completions_past_the_timeout_end_in_timeout),
      cmocka_unit_test(fault_delayed_completions_within_the_timeout_still_deliver),
      cmocka_unit_test(a_dead_peer_ends_in_an_error_naming_it),
      cmocka_unit_test(a_handle_without_the_jobs_secret_is_refused),
      cmocka_unit_test(a_send_larger_than_the_receive_fails_on_both_sides),
  };
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  emu_test_teardown();
  return rc;
}
