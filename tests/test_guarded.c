/* test_guarded.c: the collective sweep (tests/sweep.c) with every user buffer in the
 * guarded memory space (mem/guarded.h): mapped with no access where weft sees it, so any
 * algorithm or transport that touches user memory other than through the memory space
 * faults (a rank killed by SIGSEGV), or sees EFAULT from a system call, as it would on
 * device memory. Every algorithm of every collective is forced in turn (WEFT_ALGO), on 1
 * to 8 ranks over shm and over socket, in and out of place, with the direct algorithms on
 * registered guarded windows and the hierarchical ones on emulated hosts; sends and
 * receives (single, grouped, to self) and the barrier too. Gather, scatter and all-to-allv
 * run on guarded memory in test_more_collectives.c (its SWEEP_GUARDED cases).
 *
 * Counts 0, 1, 7 (odd), 4097 and a large one (256 KiB here, above a 64 KiB pipeline chunk
 * so ring and chain algorithms run several slices), every datatype and op: the quick
 * sweep. Each run forces one algorithm per collective; the columns below cover every row
 * of the registry (algos/registry.c) on some rank counts of each transport, and every rank
 * count 1..8 on each transport. `make check-guarded-full` (WEFT_GUARDED_FULL=1) runs every
 * column on every rank count 1..8 of both transports, with 1 MiB large counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "algos/algos.h"
#include "lib/algo.h"
#include "tests/harness.h"
#include "tests/sweep.h"

/* One algorithm per collective in each column (WEFT_ALGO's grammar). */
static const char *const columns[] = {
    "allreduce:ring;allgather:ring;reducescatter:ring;broadcast:chain;reduce:chain;alltoall:pairwise",
    "allreduce:recursive_doubling;allgather:bruck;reducescatter:recursive_doubling;broadcast:binomial;"
    "reduce:binomial;alltoall:bruck",
    "allreduce:rabenseifner;allgather:linear",
    "allreduce:tree",
};
enum { NCOLUMNS = sizeof columns / sizeof columns[0] };

/* The quick runs: column, transport, rank counts. */
static const struct {
  int column;
  const char *transport;
  int ranks[4];
} quick[] = {
    {0, "shm", {1, 3, 8}},    {0, "socket", {1, 2, 5}},
    {1, "shm", {2, 5, 7}},    {1, "socket", {3, 4}},
    {2, "shm", {4, 6}},       {2, "socket", {7}},
    {3, "shm", {3, 5}},       {3, "socket", {6, 8}},
};

static int full(void) { return getenv("WEFT_GUARDED_FULL") != NULL; }

static void run(int column, const char *transport, int n) {
  sweep_params p = {n, transport, 64 << 10, (size_t)(full() ? 1 << 20 : 256 << 10), 0, 1,
                    columns[column], NULL, 1, NULL};
  sweep_run(&(void *){&p});
}

/* Every row of the registry must sit in some column, or in the hierarchical or direct runs
 * below: a new algorithm without guarded coverage fails here. */
static void every_algorithm_has_a_guarded_run(void **state) {
  (void)state;
  for (int i = 0; i < weft__algo_table_len; i++) {
    const weft__algo *a = weft__algo_table[i];
    if (a->wanted != NULL || strcmp(a->name, "hierarchical") == 0) continue; /* runs below */
    if (a->coll == WEFT__COLL_ALL_TO_ALLV || a->coll == WEFT__COLL_GATHER || a->coll == WEFT__COLL_SCATTER ||
        a->coll == WEFT__COLL_BARRIER || a->coll >= WEFT__COLL_SEND)
      continue; /* test_more_collectives_guarded below */
    char want[64];
    snprintf(want, sizeof want, "%s", a->name);
    int found = 0;
    for (int c = 0; c < NCOLUMNS && !found; c++) found = strstr(columns[c], want) != NULL;
    if (!found) fail_msg("%s %s has no column in test_guarded.c", weft__coll_name(a->coll), a->name);
  }
}

static void every_algorithm_matches_reference_on_guarded_memory(void **state) {
  (void)state;
  if (full()) {
    for (int c = 0; c < NCOLUMNS; c++)
      for (int t = 0; t < 2; t++)
        for (int n = 1; n <= 8; n++) run(c, t ? "socket" : "shm", n);
    return;
  }
  for (size_t i = 0; i < sizeof quick / sizeof quick[0]; i++)
    for (int k = 0; k < 4 && quick[i].ranks[k] > 0; k++) run(quick[i].column, quick[i].transport, quick[i].ranks[k]);
}

/* The direct algorithms on registered guarded windows: every collective from 1 byte on,
 * and with the last rank's every third buffer outside the window (every rank falls back). */
static void direct_algorithms_match_reference_on_guarded_windows(void **state) {
  (void)state;
  static const struct { int n, mode; const char *tr; } runs[] = {
      {2, 1, "shm"}, {3, 2, "shm"}, {4, 1, "shm"}, {2, 1, "socket"}};
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    sweep_params p = {runs[i].n, runs[i].tr, 0, (size_t)256 << 10, runs[i].mode, 1, NULL, NULL, 1, NULL};
    sweep_run(&(void *){&p});
  }
}

/* The two-level algorithms on emulated hosts (shm within a host, socket across). */
static void hierarchical_algorithms_match_reference_on_guarded_memory(void **state) {
  (void)state;
  static const char *layouts[] = {"0011", "011222", "22110"};
  for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
    sweep_params p = {(int)strlen(layouts[i]), NULL, 64 << 10, (size_t)256 << 10, 0, 1,
                      "allreduce:hierarchical;allgather:hierarchical;reducescatter:hierarchical;"
                      "broadcast:hierarchical",
                      layouts[i], 1, NULL};
    sweep_run(&(void *){&p});
  }
}

/* The single-copy path (shm's CMA: the receiver reads the sender's buffer with
 * process_vm_readv at its space's host view) for every message, on 3 ranks; then with every
 * message of two pages or more as a put (the sender also writes the second half into the
 * receiver's host view with process_vm_writev). */
static void single_copy_messages_match_reference_on_guarded_memory(void **state) {
  (void)state;
  setenv("WEFT_SHM_CMA_BYTES", "1", 1);
  setenv("WEFT_PROTO", "Simple", 1); /* LL would keep the smallest messages off the single copy */
  static const char *calls[] = {"all", "put"}; /* reductions and one-way calls too (lib/req.h) */
  for (size_t i = 0; i < 2; i++) {
    setenv("WEFT_SHM_CMA_CALLS", calls[i], 1);
    sweep_params p = {3, "shm", 64 << 10, (size_t)256 << 10, 0, 1, NULL, NULL, 1, NULL};
    sweep_run(&(void *){&p});
  }
  unsetenv("WEFT_SHM_CMA_BYTES");
  unsetenv("WEFT_SHM_CMA_CALLS");
  unsetenv("WEFT_PROTO");
}

/* Sends and receives (single and grouped, a send to self among them) and the barrier, on
 * guarded buffers: each rank sends count elements to the next rank and receives from the
 * previous one, and copies a block to itself in the same group. */
static int p2p_body(harness_rank *r) {
  harness_use_guarded_memory(1);
  int n = r->nranks, next = (r->rank + 1) % n, prev = (r->rank + n - 1) % n;
  static const size_t counts[] = {0, 1, 7, 4097, (256 << 10) + 3};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    size_t count = counts[i], bytes = count * sizeof(int32_t);
    uint8_t *send = harness_guarded_alloc(bytes, 0), *recv = harness_guarded_alloc(bytes, 0xEE);
    uint8_t *self = harness_guarded_alloc(bytes, 0xEE);
    int32_t *s = (int32_t *)harness_view(send, bytes);
    for (size_t j = 0; j < count; j++) s[j] = (int32_t)(r->rank * 1000003 + (long)j);
    weft_status_t st = WEFT_SUCCESS;
    if (n > 1 && r->rank % 2 == 0) {
      st = weft_send(send, count, WEFT_INT32, next, r->comm, NULL);
      if (st == WEFT_SUCCESS) st = weft_recv(recv, count, WEFT_INT32, prev, r->comm, NULL);
    } else if (n > 1) {
      st = weft_recv(recv, count, WEFT_INT32, prev, r->comm, NULL);
      if (st == WEFT_SUCCESS) st = weft_send(send, count, WEFT_INT32, next, r->comm, NULL);
    }
    if (!harness_expect_status(r, st, WEFT_SUCCESS, "send/recv on guarded buffers")) break;
    weft_group_start();
    weft_send(send, count, WEFT_INT32, r->rank, r->comm, NULL);
    weft_recv(self, count, WEFT_INT32, r->rank, r->comm, NULL);
    if (n > 1) weft_send(send, count, WEFT_INT32, next, r->comm, NULL);
    if (n > 1) weft_recv(recv, count, WEFT_INT32, prev, r->comm, NULL);
    if (!harness_expect_status(r, weft_group_end(), WEFT_SUCCESS, "grouped send/recv on guarded buffers")) break;
    const int32_t *got = (const int32_t *)harness_view(recv, bytes), *mine = (const int32_t *)harness_view(self, bytes);
    for (size_t j = 0; j < count; j++) {
      if (n > 1 && got[j] != (int32_t)(prev * 1000003 + (long)j)) {
        harness_fail(r, "count %zu: element %zu from rank %d is %d", count, j, prev, (int)got[j]);
        break;
      }
      if (mine[j] != s[j]) {
        harness_fail(r, "count %zu: element %zu sent to self is %d, expected %d", count, j, (int)mine[j], (int)s[j]);
        break;
      }
    }
    harness_guarded_check(r, recv, bytes, "recv");
    harness_guarded_check(r, self, bytes, "recv from self");
    harness_guarded_free(send);
    harness_guarded_free(recv);
    harness_guarded_free(self);
    harness_expect_status(r, weft_barrier(r->comm, NULL), WEFT_SUCCESS, "barrier");
  }
  return r->failures;
}

static void sends_and_receives_match_on_guarded_memory(void **state) {
  (void)state;
  static const struct { int n; const char *tr; } runs[] = {{1, "shm"}, {2, "shm"}, {3, "socket"}, {5, "shm"}, {4, "socket"}};
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) harness_run_simple(runs[i].n, runs[i].tr, p2p_body, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_algorithm_has_a_guarded_run),
      cmocka_unit_test(every_algorithm_matches_reference_on_guarded_memory),
      cmocka_unit_test(direct_algorithms_match_reference_on_guarded_windows),
      cmocka_unit_test(hierarchical_algorithms_match_reference_on_guarded_memory),
      cmocka_unit_test(sends_and_receives_match_on_guarded_memory),
      cmocka_unit_test(single_copy_messages_match_reference_on_guarded_memory),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
