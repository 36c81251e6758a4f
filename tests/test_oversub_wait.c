/* test_oversub_wait.c: how a rank waits when its host has more ranks than cores.
 *
 * Such a rank yields its CPU at once when it waits, except for small receives from peers
 * bound to other CPUs that hold theirs now: then it spins (weft__task_spin_for_peers,
 * lib/task.h). Two halves are checked:
 *   - the decision, on a communicator built by hand: which pending requests, peers and
 *     peer states make it spin;
 *   - what feeds it, on 2 real ranks over shm: a connection's other_cpus follows the ranks'
 *     CPU binding (the topology's cpusets, lib/connect.c), and a rank's announced yield
 *     reaches its peer through the shm doorbell (peer_on_cpu, transports/shm/shm.c).
 * Timing is left to the benchmarks (perf/bench/RESULTS.md): nothing here measures speed. */
#include <sched.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/comm.h"
#include "lib/req.h"
#include "lib/task.h"
#include "tests/harness.h"
#include "transports/transport.h"

/* ---- the decision ---------------------------------------------------------------------- */

enum { FAKE_RANKS = 4 };
static int fake_on_cpu[FAKE_RANKS];

static int fake_peer_on_cpu(const weft__conn *c) { return fake_on_cpu[c->peer]; }

static const weft__transport fake_transport = {.name = "fake", .peer_on_cpu = fake_peer_on_cpu};

typedef struct {
  struct weft_comm comm;
  weft__conn conns[FAKE_RANKS];
  weft__req reqs[FAKE_RANKS][2]; /* [peer][0 send, 1 recv] */
} fake_comm;

/* Rank 0 of 4; every peer bound elsewhere and on its CPU; nothing pending. */
static void fake_reset(fake_comm *f) {
  memset(f, 0, sizeof(*f));
  f->comm.nranks = FAKE_RANKS;
  f->comm.rank = 0;
  f->comm.conns = f->conns;
  for (int p = 1; p < FAKE_RANKS; p++) {
    f->conns[p].tr = &fake_transport;
    f->conns[p].peer = p;
    f->conns[p].other_cpus = 1;
    fake_on_cpu[p] = 1;
  }
}

static void fake_pend(fake_comm *f, int peer, int recv, size_t bytes) {
  weft__req *r = &f->reqs[peer][recv];
  r->bytes = bytes;
  if (recv) f->conns[peer].recv_head = r;
  else f->conns[peer].send_head = r;
}

static void oversubscribed_waits_spin_only_for_small_receives_from_peers_on_their_cpus(void **state) {
  (void)state;
  fake_comm *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  fake_reset(f);
  assert_int_equal(weft__task_spin_for_peers(&f->comm, WEFT__COLL_ALL_REDUCE), 0); /* nothing to wait for */

  fake_pend(f, 1, 1, 8);
  assert_int_equal(weft__task_spin_for_peers(&f->comm, WEFT__COLL_ALL_REDUCE), 1);
  fake_pend(f, 3, 1, WEFT__OVERSUB_SPIN_BYTES);
  assert_int_equal(weft__task_spin_for_peers(&f->comm, WEFT__COLL_ALL_REDUCE), 1); /* two small receives, both peers running */

  fake_on_cpu[3] = 0; /* peer 3 announced a yield or a sleep */
  assert_int_equal(weft__task_spin_for_peers(&f->comm, WEFT__COLL_ALL_REDUCE), 0);
  fake_on_cpu[3] = 1;

  f->conns[3].other_cpus = 0; /* peer 3 may run on this rank's CPU */
  assert_int_equal(weft__task_spin_for_peers(&f->comm, WEFT__COLL_ALL_REDUCE), 0);
  f->conns[3].other_cpus = 1;

  fake_pend(f, 3, 1, WEFT__OVERSUB_SPIN_BYTES + 1); /* a large message: the peer copies */
  assert_int_equal(weft__task_spin_for_peers(&f->comm, WEFT__COLL_ALL_REDUCE), 0);
  fake_pend(f, 3, 1, 8);
  assert_int_equal(weft__task_spin_for_peers(&f->comm, WEFT__COLL_ALL_REDUCE), 1);
  assert_int_equal(weft__task_spin_for_peers(&f->comm, WEFT__COLL_RECV), 1);
  assert_int_equal(weft__task_spin_for_peers(&f->comm, WEFT__COLL_BROADCAST), 0); /* a stream: yield */

  fake_pend(f, 2, 0, 8); /* a pending send waits for its receiver to drain the FIFO */
  assert_int_equal(weft__task_spin_for_peers(&f->comm, WEFT__COLL_ALL_REDUCE), 0);
  free(f);
}

/* ---- what feeds it, on real ranks ------------------------------------------------------- */

typedef struct {
  int cpu[2]; /* the CPU each rank binds to before init; -1: left unbound */
  int want_other_cpus;
} bind_case;

/* The CPUs this process may run on, first two in *a, *b; how many there are. */
static int allowed_cpus(int *a, int *b) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &set)) continue;
    if (n == 0) *a = c;
    if (n == 1) *b = c;
    n++;
  }
  return n;
}

static int bind_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set);
}

static int yield_announced_body(harness_rank *r) {
  const bind_case *bc = r->arg;
  int cpu = bc->cpu[r->rank];
  if (cpu >= 0 && bind_to(cpu) != 0) return harness_fail(r, "sched_setaffinity(CPU %d) failed", cpu);
  weft_status_t st = weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config);
  if (st != WEFT_SUCCESS) {
    r->comm = NULL;
    return harness_fail(r, "init: %s", weft_get_last_error(NULL));
  }
  struct weft_comm *comm = r->comm;
  int peer = 1 - r->rank;
  weft__conn *c = &comm->conns[peer];
  if (c->other_cpus != bc->want_other_cpus)
    harness_fail(r, "ranks bound to CPUs %d and %d: connection to peer %d has other_cpus %d, want %d", bc->cpu[0],
                 bc->cpu[1], peer, c->other_cpus, bc->want_other_cpus);
  if (comm->nyielding != 1) harness_fail(r, "%d yielding hooks, want 1 (shm's)", comm->nyielding);
  if (c->tr->peer_on_cpu == NULL) harness_fail(r, "connection to peer %d (%s) has no peer_on_cpu hook", peer, c->tr->name);
  if (r->failures) return r->failures;

  /* Rank 0 announces a yield, then tells rank 1 through the harness's shared page (not
   * through weft, whose waits announce yields of their own); rank 1 must see it; then the
   * same with the CPU taken back. */
  for (int round = 1; round <= 2 && !r->failures; round++) {
    int announced = round == 1;
    if (r->rank == 0) {
      comm->yielding[0](comm, announced);
      atomic_store(&r->shared->flags[0], round);
      if (!harness_wait_flag(r, 1, round, 10000)) harness_fail(r, "rank 1 never looked (round %d)", round);
    } else {
      if (!harness_wait_flag(r, 0, round, 10000)) {
        harness_fail(r, "rank 0 never announced (round %d)", round);
        break;
      }
      int on = c->tr->peer_on_cpu(c);
      if (on == announced)
        harness_fail(r, "peer 0 %s, but peer_on_cpu says %d", announced ? "announced a yield" : "took its CPU back", on);
      atomic_store(&r->shared->flags[1], round);
    }
  }
  return r->failures;
}

static void run_bind_case(const bind_case *bc) {
  harness_opts o = {0};
  o.nranks = 2;
  o.transport = "shm";
  o.no_init = 1;
  o.deadline_s = 60;
  harness_run(&o, yield_announced_body, (void *)bc);
}

static void shm_peers_bound_to_two_cpus_see_each_others_yields(void **state) {
  (void)state;
  int a = -1, b = -1;
  if (allowed_cpus(&a, &b) < 2) skip(); /* one CPU: no two ranks can be bound apart */
  bind_case bc = {{a, b}, 1};
  run_bind_case(&bc);
}

static void shm_peers_sharing_a_cpu_or_unbound_do_not_count_as_apart(void **state) {
  (void)state;
  int a = -1, b = -1;
  allowed_cpus(&a, &b);
  bind_case same = {{a, a}, 0};
  run_bind_case(&same);
  bind_case unbound = {{-1, -1}, 0};
  run_bind_case(&unbound);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(oversubscribed_waits_spin_only_for_small_receives_from_peers_on_their_cpus),
      cmocka_unit_test(shm_peers_bound_to_two_cpus_see_each_others_yields),
      cmocka_unit_test(shm_peers_sharing_a_cpu_or_unbound_do_not_count_as_apart),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
