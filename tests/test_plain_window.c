/* test_plain_window.c: windows of plain malloc'd memory (mem/host_adopt.h, lib/window.c)
 * and each rank's own registrations of it (weft_comm_register, lib/reg.c).
 *
 * Adoption alone (one process): the program's bytes stay where they were, the interior
 * pages become the memfd's (the view and the program see each other's writes there), the
 * edges stay private and move only through weft__adopted_sync, bytes of other allocations
 * sharing the edge pages are never touched, a buffer inside an adopted one shares its
 * adoption while a partial overlap and shared memory are refused, and release gives back
 * private pages holding the latest bytes. Then 2 ranks over shm: direct all-reduce and
 * all-gather on windows of plain memory whose buffers cover both edges and the interior,
 * in place and out of place, exact, and the window deregistered leaves private memory
 * with the results; the same with weft_comm_register, whose registrations each peer maps
 * once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/comm.h"
#include "lib/reg.h"
#include "mem/host_adopt.h"
#include "tests/harness.h"

#define PAGE 4096u

/* The /proc/self/maps line holding p (its path part), or "" when none. */
static const char *mapping_of(const void *p, char *out, size_t len) {
  FILE *f = fopen("/proc/self/maps", "re");
  char line[512];
  out[0] = '\0';
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    unsigned long s, e;
    int at = 0;
    if (sscanf(line, "%lx-%lx %*s %*x %*x:%*x %*u %n", &s, &e, &at) < 2) continue;
    if ((uintptr_t)p >= s && (uintptr_t)p < e) {
      line[strcspn(line, "\n")] = '\0';
      snprintf(out, len, "%s", line + at);
      break;
    }
  }
  if (f != NULL) fclose(f);
  return out;
}

static int is_memfd(const void *p) {
  char m[256];
  return strstr(mapping_of(p, m, sizeof m), "/memfd:weft-adopted") != NULL;
}

/* Three pages and a bit of private memory; the buffer starts 100 bytes into the first page
 * and ends 200 bytes into the fifth, so both edges and a 3-page interior exist. */
static void adoption_moves_the_interior_and_keeps_the_edges_private(void **state) {
  (void)state;
  unsigned char *block = mmap(NULL, 6 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(block != MAP_FAILED);
  unsigned char *p = block + PAGE + 100;
  size_t bytes = 4 * PAGE + 100;
  for (size_t i = 0; i < 6 * PAGE; i++) block[i] = (unsigned char)(i * 13 + 1);
  weft__adopted *a = NULL;
  assert_int_equal(weft__host_adopt(p, bytes, &a), 0);
  for (size_t i = 0; i < 6 * PAGE; i++)
    if (block[i] != (unsigned char)(i * 13 + 1)) fail_msg("byte %zu changed by adoption", i);
  assert_false(is_memfd(block + PAGE));     /* head edge page: private */
  assert_true(is_memfd(block + 2 * PAGE));  /* interior */
  assert_true(is_memfd(block + 4 * PAGE));
  assert_false(is_memfd(block + 5 * PAGE)); /* tail edge page */
  /* Interior: one set of pages. */
  unsigned char *v = (unsigned char *)weft__adopted_view(a, p);
  p[PAGE] = 0xAB;
  assert_int_equal(v[PAGE], 0xAB);
  v[2 * PAGE] = 0xCD;
  assert_int_equal(p[2 * PAGE], 0xCD);
  /* Edges: copied by sync only, and only the span asked for. */
  weft__adopted_sync(a, p, bytes, 1);
  assert_memory_equal(v, p, bytes);
  v[0] = 0x11;
  v[bytes - 1] = 0x22;
  assert_int_not_equal(p[0], 0x11);
  weft__adopted_sync(a, p + 1, bytes - 1, 0); /* leaves p[0] alone */
  assert_int_not_equal(p[0], 0x11);
  assert_int_equal(p[bytes - 1], 0x22);
  weft__adopted_sync(a, p, 1, 0);
  assert_int_equal(p[0], 0x11);
  /* A buffer inside shares the adoption; a partial overlap and shared memory are refused. */
  weft__adopted *inner = NULL, *bad = NULL;
  assert_int_equal(weft__host_adopt(p + 10, 2 * PAGE, &inner), 0);
  assert_ptr_equal(inner, a);
  assert_int_equal(weft__host_adopt(p - 50, PAGE, &bad), WEFT__ADOPT_OVERLAP);
  void *shared = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(shared != MAP_FAILED);
  assert_int_equal(weft__host_adopt((char *)shared + 8, 3 * PAGE, &bad), WEFT__ADOPT_NOT_PRIVATE);
  munmap(shared, 4 * PAGE);
  /* Release: the last reference gives private pages back, with the latest bytes. */
  weft__host_adopt_release(inner);
  assert_true(is_memfd(block + 2 * PAGE));
  weft__host_adopt_release(a);
  assert_false(is_memfd(block + 2 * PAGE));
  assert_ptr_equal(weft__adopted_find(p, bytes), NULL);
  assert_int_equal(p[PAGE], 0xAB);
  assert_int_equal(p[2 * PAGE], 0xCD);
  assert_int_equal(block[0], (unsigned char)1);
  assert_int_equal(block[6 * PAGE - 1], (unsigned char)((6 * PAGE - 1) * 13 + 1));
  munmap(block, 6 * PAGE);
}

/* A buffer the program unmapped before release: release must not map anything there. */
static void release_after_the_program_unmapped_the_buffer_maps_nothing(void **state) {
  (void)state;
  unsigned char *block = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(block != MAP_FAILED);
  weft__adopted *a = NULL;
  assert_int_equal(weft__host_adopt(block + 16, 3 * PAGE, &a), 0);
  assert_int_equal(munmap(block, 4 * PAGE), 0);
  weft__host_adopt_release(a);
  FILE *f = fopen("/proc/self/maps", "re");
  char line[512];
  unsigned long s, e;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "%lx-%lx", &s, &e) == 2 && (uintptr_t)(block + PAGE) >= s && (uintptr_t)(block + PAGE) < e)
      fail_msg("release mapped something at the unmapped buffer: %s", line);
  fclose(f);
}

enum { COUNT = 5 * 1024 + 37 }; /* floats: 5 pages and a bit, so both edges are in use */

/* Rank r's input for element i. */
static float input(int r, size_t i) { return (float)((int)(i % 1000) + 1000 * r); }

static int plain_windows_body(harness_rank *r) {
  setenv("WEFT_DIRECT_MIN_BYTES", "1", 1);
  size_t n = (size_t)r->nranks, bytes = 2 * COUNT * sizeof(float) + (n + 1) * COUNT * sizeof(float);
  char *block = malloc(bytes + 2 * PAGE);
  if (block == NULL) return harness_fail(r, "malloc failed");
  /* A neighbour shares the head edge page: adoption must leave it alone. */
  char *base = block + (PAGE + 200 - (uintptr_t)block % PAGE) % PAGE + 8 * (size_t)r->rank;
  memset(block, 0x5A, (size_t)(base - block));
  float *a = (float *)base, *b = a + COUNT, *g = b + COUNT; /* g: n blocks for all-gather + 1 */
  weft_window_t w = NULL;
  weft_status_t st = weft_comm_window_register(r->comm, base, bytes, &w, 0);
  if (!harness_expect_status(r, st, WEFT_SUCCESS, "window register of malloc'd memory")) return r->failures;
  if (!is_memfd(base + PAGE)) harness_fail(r, "the window's interior was not adopted");
  for (int inplace = 0; inplace < 2; inplace++) {
    for (size_t i = 0; i < COUNT; i++) a[i] = input(r->rank, i), b[i] = -1;
    uint64_t direct = r->comm->direct_calls;
    float *out = inplace ? a : b;
    st = weft_all_reduce(a, out, COUNT, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    if (!harness_expect_status(r, st, WEFT_SUCCESS, "all_reduce on plain windows")) break;
    if (r->comm->direct_calls != direct + 1) harness_fail(r, "all_reduce on plain windows did not run direct");
    for (size_t i = 0; i < COUNT; i++) {
      float want = 0;
      for (int j = 0; j < r->nranks; j++) want += input(j, i);
      if (out[i] != want) {
        harness_fail(r, "all_reduce %s: element %zu got %g, expected %g", inplace ? "in place" : "out of place", i,
                     out[i], want);
        break;
      }
    }
  }
  /* All-gather into the buffer's end (its tail edge), rank r's block from the head. */
  for (size_t i = 0; i < COUNT; i++) a[i] = input(r->rank, i);
  float *recv = g + COUNT - 7;
  st = weft_all_gather(a, recv, COUNT, WEFT_FLOAT32, r->comm, NULL);
  if (harness_expect_status(r, st, WEFT_SUCCESS, "all_gather on plain windows"))
    for (int j = 0; j < r->nranks; j++)
      for (size_t i = 0; i < COUNT; i++)
        if (recv[(size_t)j * COUNT + i] != input(j, i)) {
          harness_fail(r, "all_gather: block %d element %zu got %g", j, i, recv[(size_t)j * COUNT + i]);
          j = r->nranks;
          break;
        }
  for (char *p = block; p < base; p++)
    if (*p != 0x5A) {
      harness_fail(r, "the neighbour before the window changed at %td", p - block);
      break;
    }
  harness_expect_status(r, weft_comm_window_deregister(r->comm, w), WEFT_SUCCESS, "window deregister");
  if (is_memfd(base + PAGE)) harness_fail(r, "deregistration left the interior shared");
  if (recv[(size_t)(r->nranks - 1) * COUNT + 5] != input(r->nranks - 1, 5))
    harness_fail(r, "the results did not survive deregistration");
  free(block);
  return r->failures;
}

/* weft_comm_register on each rank alone: the same collectives run direct and exact; each
 * peer maps a registration once however often it is used, and maps it again after it
 * was deregistered and registered anew (a new registration, a new serial); bad handles
 * are refused. */
static int local_registration_body(harness_rank *r) {
  setenv("WEFT_DIRECT_MIN_BYTES", "1", 1);
  size_t bytes = 3 * COUNT * sizeof(float);
  char *block = malloc(bytes + 2 * PAGE);
  if (block == NULL) return harness_fail(r, "malloc failed");
  char *base = block + (PAGE + 300 - (uintptr_t)block % PAGE) % PAGE + 4 * (size_t)r->rank;
  float *a = (float *)base, *b = a + COUNT;
  for (int round = 0; round < 2 && r->failures == 0; round++) {
    weft_reg_t reg = NULL;
    weft_status_t st = weft_comm_register(r->comm, base, bytes, &reg);
    if (!harness_expect_status(r, st, WEFT_SUCCESS, "weft_comm_register of malloc'd memory")) break;
    for (int call = 0; call < 3; call++) {
      for (size_t i = 0; i < COUNT; i++) a[i] = input(r->rank, i) + (float)call, b[i] = -1;
      uint64_t direct = r->comm->direct_calls;
      st = weft_all_reduce(a, b + call % 2, COUNT - 2, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
      if (!harness_expect_status(r, st, WEFT_SUCCESS, "all_reduce on registered buffers")) break;
      if (r->comm->direct_calls != direct + 1) harness_fail(r, "all_reduce on registered buffers did not run direct");
      for (size_t i = 0; i < COUNT - 2; i++) {
        float want = 0;
        for (int j = 0; j < r->nranks; j++) want += input(j, i) + (float)call;
        if (b[call % 2 + i] != want) {
          harness_fail(r, "round %d call %d: element %zu got %g, expected %g", round, call, i, b[call % 2 + i], want);
          break;
        }
      }
    }
    for (int j = 0; j < r->nranks; j++)
      if (j != r->rank && weft__reg_imports_held(r->comm, j) != round + 1)
        harness_fail(r, "round %d: %d registrations of peer %d mapped here, expected %d", round,
                     weft__reg_imports_held(r->comm, j), j, round + 1);
    /* Everyone is done reading before anyone deregisters. */
    harness_expect_status(r, weft_barrier(r->comm, NULL), WEFT_SUCCESS, "barrier");
    harness_expect_status(r, weft_comm_deregister(r->comm, reg), WEFT_SUCCESS, "weft_comm_deregister");
    if (is_memfd(base + PAGE)) harness_fail(r, "deregistration left the interior shared");
  }
  harness_expect_status(r, weft_comm_deregister(r->comm, (weft_reg_t)block), WEFT_ERR_INVALID_ARGUMENT,
                        "weft_comm_deregister of a pointer that is no handle");
  weft_reg_t none = NULL;
  harness_expect_status(r, weft_comm_register(r->comm, base, 0, &none), WEFT_ERR_INVALID_ARGUMENT,
                        "weft_comm_register of 0 bytes");
  free(block);
  return r->failures;
}

static void local_registrations_run_direct_and_peers_map_each_once(void **state) {
  (void)state;
  harness_run_simple(3, "shm", local_registration_body, NULL);
}

static void direct_collectives_on_plain_windows_are_exact_at_both_edges(void **state) {
  (void)state;
  harness_run_simple(2, "shm", plain_windows_body, NULL);
  harness_run_simple(3, "shm", plain_windows_body, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(adoption_moves_the_interior_and_keeps_the_edges_private),
      cmocka_unit_test(release_after_the_program_unmapped_the_buffer_maps_nothing),
      cmocka_unit_test(direct_collectives_on_plain_windows_are_exact_at_both_edges),
      cmocka_unit_test(local_registrations_run_direct_and_peers_map_each_once),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
