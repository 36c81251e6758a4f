/* test_shm_secret.c: the shm transport's setup socket keeps the job's secret (issue 15,
 * defect 4). Its name is world-readable in /proc/net/unix, so it must not carry the secret;
 * a process that connects to it without proving the secret (silent, or with a forged
 * hello) must neither fail nor stall init. Here, inside transports/shm/, because it calls
 * the transport's own socket functions (tests/include_rules.sh keeps other files out). */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/bootstrap.h"
#include "lib/bootstrap_wire.h"
#include "tests/harness.h"
#include "transports/shm/shm_segment.h"

static int small_all_reduce(harness_rank *r) {
  float v[16] = {0};
  return harness_expect_status(r, weft_all_reduce(v, v, 16, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL),
                               WEFT_SUCCESS, "all_reduce of 16 float32 after init");
}

/* ---- secrets -------------------------------------------------------------------------- */

static void the_shm_setup_socket_name_does_not_show_the_secret(void **state) {
  weft_unique_id_t id;
  harness_unique_id(&id); /* made in a child: this program stays single-threaded for later forks */
  const uint8_t *secret = ((const weft__id_layout *)id.internal)->secret;
  int fd = weft__shm_sock_listen(secret, 7, 4);
  assert_true(fd >= 0);
  char hex[33];
  for (int i = 0; i < 16; i++) sprintf(hex + 2 * i, "%02x", secret[i]);
  hex[16] = '\0'; /* even half of it must not show */
  FILE *f = fopen("/proc/net/unix", "r");
  assert_non_null(f);
  char line[512];
  int leaked = 0, ours = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strstr(line, hex) != NULL) leaked = 1;
    if (strstr(line, "@weft-") != NULL && strstr(line, "-7\n") != NULL) ours = 1, printf("# %s", strstr(line, "@weft-"));
  }
  fclose(f);
  close(fd);
  if (!ours) fail_msg("the listening socket is not in /proc/net/unix");
  if (leaked) fail_msg("/proc/net/unix shows the secret (%s...) in the socket's name", hex);
}

/* A stranger thread in each rank that connects to the other rank's shm setup socket the
 * moment it listens (before the real peer can: it learns of the listener only through the
 * bootstrap): three connections that say nothing, and one hello that does not prove the
 * secret. Before the fix a silent one took the rank's only accept slot (init timed out) or
 * the junk one failed init. */
typedef struct {
  const uint8_t *secret;
  int target, connected;
  atomic_int stop;
} stranger_arg;

static void *stranger(void *p) {
  stranger_arg *a = p;
  int fds[4], n = 0;
  double give_up = harness_now_ms() + 5000;
  while (n < 4 && !atomic_load(&a->stop) && harness_now_ms() < give_up) {
    int fd = weft__shm_sock_connect(a->secret, a->target, 0); /* one try, no sleep */
    if (fd < 0) {
      sched_yield();
      continue;
    }
    if (n == 3) {
      uint8_t junk[200];
      for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 37 + 11);
      weft__shm_sock_send(fd, junk, sizeof junk, -1, (uint64_t)(harness_now_ms() * 1e6 + 1e9));
    }
    fds[n++] = fd;
  }
  a->connected = n;
  while (!atomic_load(&a->stop)) harness_sleep_ms(5);
  for (int i = 0; i < n; i++) close(fds[i]);
  return NULL;
}

static int stranger_body(harness_rank *r) {
  stranger_arg a = {.secret = ((const weft__id_layout *)r->id.internal)->secret, .target = 1 - r->rank};
  pthread_t t;
  pthread_create(&t, NULL, stranger, &a);
  double t0 = harness_now_ms();
  weft_status_t st = weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config);
  double ms = harness_now_ms() - t0;
  atomic_store(&a.stop, 1);
  pthread_join(t, NULL);
  if (!harness_expect_status(r, st, WEFT_SUCCESS, "init with a stranger on the shm setup sockets")) r->comm = NULL;
  else if (ms > 3000) harness_fail(r, "init took %.0f ms", ms);
  else small_all_reduce(r);
  harness_note(r, "init took %.0f ms; the stranger made %d connections to rank %d", ms, a.connected, a.target);
  return r->failures;
}

static void a_stranger_on_the_shm_setup_socket_neither_fails_nor_stalls_init(void **state) {
  for (int k = 0; k < 3; k++) {
    harness_opts o = {.nranks = 2, .transport = "shm", .timeout_ms = 10000, .deadline_s = 60, .no_init = 1};
    harness_run(&o, stranger_body, NULL);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_shm_setup_socket_name_does_not_show_the_secret),
      cmocka_unit_test(a_stranger_on_the_shm_setup_socket_neither_fails_nor_stalls_init),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
