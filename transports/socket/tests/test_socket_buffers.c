/* test_socket_buffers.c: the receive buffers of the socket transport's data sockets
 * (transports/socket/socket_state.h; WEFT__SOCK_SAME_HOST_RCVBUF, lib/sockutil.h): a peer on this host
 * gets a fixed receive buffer when WEFT_SOCKET_BUFFER_BYTES is unset and net.core.rmem_max
 * admits it, a peer on another host keeps the kernel's autotuning, and a set
 * WEFT_SOCKET_BUFFER_BYTES applies to every peer. Here, inside transports/socket/, because
 * it reads the transport's state (tests/include_rules.sh keeps other files out). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "tests/harness.h"
#include "transports/socket/socket_state.h"

/* What the body of a run expects of every data socket to the peer: SO_RCVBUF exactly
 * `want` (Linux reports twice what was asked), or, when want is 0, anything but a
 * buffer that was set (autotuning starts at tcp_rmem's default, well under 2 MiB). */
typedef struct {
  const char *hosts;  /* emulated hosts (harness_init_on_emulated_host), NULL: one host */
  const char *env;    /* WEFT_SOCKET_BUFFER_BYTES, NULL: unset */
  int want;
} buffers_case;

static int buffers_body(harness_rank *r) {
  const buffers_case *c = r->arg;
  if (c->env != NULL) setenv("WEFT_SOCKET_BUFFER_BYTES", c->env, 1);
  else unsetenv("WEFT_SOCKET_BUFFER_BYTES");
  if (c->hosts != NULL) {
    if (harness_init_on_emulated_host(r, c->hosts) != 0) return r->failures;
  } else if (!harness_expect_status(r, weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config),
                                    WEFT_SUCCESS, "init over sockets")) {
    r->comm = NULL;
    return r->failures;
  }
  sock_state *st = weft__socket_state_of(r->comm);
  int peer = 1 - r->rank;
  sock_peer *sp = st != NULL ? st->by_rank[peer] : NULL;
  if (sp == NULL) return harness_fail(r, "no socket connection to peer %d", peer);
  const char *hosts = c->hosts != NULL ? c->hosts : "one host", *env = c->env != NULL ? c->env : "unset";
  for (int i = 0; i < sp->nsocks; i++) {
    int got = 0;
    socklen_t len = sizeof got;
    if (getsockopt(sp->fd[i], SOL_SOCKET, SO_RCVBUF, &got, &len) != 0)
      harness_fail(r, "getsockopt(SO_RCVBUF) on socket %d to peer %d failed", i, peer);
    else if (c->want > 0 && got != c->want)
      harness_fail(r, "socket %d to peer %d (%s, WEFT_SOCKET_BUFFER_BYTES %s): SO_RCVBUF %d, expected %d", i,
                   peer, hosts, env, got, c->want);
    else if (c->want == 0 && got == 2 * (int)WEFT__SOCK_SAME_HOST_RCVBUF)
      harness_fail(r, "socket %d to peer %d (%s, WEFT_SOCKET_BUFFER_BYTES %s): SO_RCVBUF %d, the fixed "
                   "size, where the kernel's autotuning was expected", i, peer, hosts, env, got);
    else harness_note(r, "socket %d to peer %d: SO_RCVBUF %d", i, peer, got);
  }
  float v[1024];
  for (int i = 0; i < 1024; i++) v[i] = (float)(r->rank + 1);
  if (harness_expect_status(r, weft_all_reduce(v, v, 1024, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL), WEFT_SUCCESS,
                            "all_reduce of 1024 float32"))
    for (int i = 0; i < 1024; i++)
      if (v[i] != 3.0f) return harness_fail(r, "all_reduce: element %d is %g, expected 3", i, v[i]);
  return r->failures;
}

static void run_case(const buffers_case *c) {
  harness_opts o = {.nranks = 2, .transport = "socket", .timeout_ms = 10000, .deadline_s = 60, .no_init = 1};
  harness_run(&o, buffers_body, (void *)c);
}

static void a_peer_on_this_host_gets_a_fixed_receive_buffer(void **state) {
  size_t max = weft__sock_rmem_max();
  buffers_case c = {.want = max >= WEFT__SOCK_SAME_HOST_RCVBUF ? 2 * (int)WEFT__SOCK_SAME_HOST_RCVBUF : 0};
  printf("# net.core.rmem_max %zu: %s\n", max, c.want > 0 ? "the fixed size expected" : "too small, autotuning expected");
  run_case(&c);
}

static void a_peer_on_another_host_keeps_autotuning(void **state) {
  buffers_case c = {.hosts = "ab", .want = 0};
  run_case(&c);
}

static void a_set_buffer_size_applies_to_every_peer(void **state) {
  buffers_case one = {.env = "256K", .want = 2 * 256 * 1024}, two = {.hosts = "ab", .env = "256K", .want = 2 * 256 * 1024};
  if (weft__sock_rmem_max() < 256 * 1024) skip();
  run_case(&one);
  run_case(&two);
}

/* The rule itself, without sockets: the set size wins, then the host, then rmem_max. */
static void the_rule_reads_the_setting_the_host_and_rmem_max(void **state) {
  weft__peer_info peers[2] = {{.host_hash = 7}, {.host_hash = 7}};
  struct weft_comm comm = {.rank = 0, .peers = peers};
  sock_state st = {.buffer_auto = 1};
  assert_int_equal(weft__socket_rcvbuf(&comm, &st, 1, 4u << 20), WEFT__SOCK_SAME_HOST_RCVBUF);
  assert_int_equal(weft__socket_rcvbuf(&comm, &st, 1, WEFT__SOCK_SAME_HOST_RCVBUF), WEFT__SOCK_SAME_HOST_RCVBUF);
  assert_int_equal(weft__socket_rcvbuf(&comm, &st, 1, 212992), 0); /* Linux's usual default */
  assert_int_equal(weft__socket_rcvbuf(&comm, &st, 1, 0), 0);      /* unreadable */
  peers[1].host_hash = 8;
  assert_int_equal(weft__socket_rcvbuf(&comm, &st, 1, 4u << 20), 0);
  st = (sock_state){.buffer_auto = 0, .buffer_bytes = 65536};
  assert_int_equal(weft__socket_rcvbuf(&comm, &st, 1, 0), 65536);
  st.buffer_bytes = 0; /* WEFT_SOCKET_BUFFER_BYTES=0: autotuning everywhere */
  peers[1].host_hash = 7;
  assert_int_equal(weft__socket_rcvbuf(&comm, &st, 1, 4u << 20), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_rule_reads_the_setting_the_host_and_rmem_max),
      cmocka_unit_test(a_peer_on_this_host_gets_a_fixed_receive_buffer),
      cmocka_unit_test(a_peer_on_another_host_keeps_autotuning),
      cmocka_unit_test(a_set_buffer_size_applies_to_every_peer),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
