/* test_quiet_call.c: a blocking small collective allocates nothing and makes no system call.
 *
 * Why: an 8-byte all-reduce costs about half a microsecond; one malloc or one system call
 * per call would be a visible share of it (issue 14: "the blocking small call stays
 * allocation-free and system-call-free"). Each rank warms up, then makes CALLS blocking
 * 8-byte all-reduces (and broadcasts, all-gathers, reduce-scatters) while it counts:
 *   - allocations: this program defines malloc, calloc, realloc, aligned_alloc,
 *     posix_memalign and memalign, which count while counting is on and hand the work to
 *     glibc's own (__libc_malloc, ...); weft's code in the same process calls these (not
 *     under AddressSanitizer, which owns malloc: then only system calls are counted);
 *   - system calls of the calling thread: a perf counter on the raw_syscalls:sys_enter
 *     tracepoint (perf_event_open(2)), filtered to leave out the calls a rank makes while it
 *     waits for a late peer (sched_yield, futex, nanosleep, clock_nanosleep, poll, and the
 *     membarrier that a rank about to sleep calls in place of its fence, shm_membarrier.h):
 *     on a busy 2-core machine a peer may be descheduled, and waiting politely is the point.
 *     Where the tracepoint cannot be read (no tracefs, not permitted), that half is skipped.
 * 1 rank (no peer: it never waits) and 2 ranks over shm. The socket
 * transport moves bytes with send/recv system calls by design, so it is not checked. */
#include <errno.h>
#include <linux/perf_event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/harness.h"

enum { WARMUP = 2000, CALLS = 20000 };

/* ---- allocations ------------------------------------------------------------------------ */

/* AddressSanitizer owns malloc: under it (make check-sanitize) allocations are not counted. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QUIET_NO_ALLOC_COUNT 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define QUIET_NO_ALLOC_COUNT 1
#endif

static atomic_int counting;
static atomic_long allocations;

#ifndef QUIET_NO_ALLOC_COUNT
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static void count_one(void) {
  if (atomic_load_explicit(&counting, memory_order_relaxed)) atomic_fetch_add(&allocations, 1);
}

void *malloc(size_t n) {
  count_one();
  return __libc_malloc(n);
}
void *calloc(size_t n, size_t size) {
  count_one();
  return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n) {
  count_one();
  return __libc_realloc(p, n);
}
void *aligned_alloc(size_t align, size_t n) {
  count_one();
  return __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n) {
  count_one();
  return __libc_memalign(align, n);
}
int posix_memalign(void **out, size_t align, size_t n) {
  count_one();
  void *p = __libc_memalign(align, n);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}
#endif

/* ---- system calls ----------------------------------------------------------------------- */

/* A counter of the calling thread's system calls other than the waiting ones; -1 with the
 * reason in why when the tracepoint cannot be used here. */
static int syscall_counter(char *why, size_t len) {
  FILE *f = fopen("/sys/kernel/tracing/events/raw_syscalls/sys_enter/id", "r");
  if (f == NULL) f = fopen("/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id", "r");
  long id = -1;
  if (f == NULL || fscanf(f, "%ld", &id) != 1) {
    snprintf(why, len, "no raw_syscalls:sys_enter tracepoint id under tracefs (%s)", strerror(errno));
    if (f != NULL) fclose(f);
    return -1;
  }
  fclose(f);
  struct perf_event_attr a;
  memset(&a, 0, sizeof(a));
  a.type = PERF_TYPE_TRACEPOINT;
  a.size = sizeof(a);
  a.config = (uint64_t)id;
  a.disabled = 1;
  int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
  if (fd < 0) {
    snprintf(why, len, "perf_event_open(raw_syscalls:sys_enter): %s", strerror(errno));
    return -1;
  }
  char filter[192];
  snprintf(filter, sizeof(filter),
           "id != %d && id != %d && id != %d && id != %d && id != %d && id != %d && id != %d",
           SYS_sched_yield, SYS_futex, SYS_nanosleep, SYS_clock_nanosleep, SYS_poll, SYS_ppoll,
           SYS_membarrier);
  if (ioctl(fd, PERF_EVENT_IOC_SET_FILTER, filter) != 0) {
    snprintf(why, len, "PERF_EVENT_IOC_SET_FILTER: %s", strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

/* The system calls counted between enabling and reading fd, less those that enabling,
 * disabling and reading cost themselves (measured on an empty window: 1 on Linux 6.x, the
 * disabling ioctl, whose entry the tracepoint still sees). */
static uint64_t counter_stop(int fd) {
  uint64_t n = 0;
  ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
  if (read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n)) return UINT64_MAX;
  return n;
}

static uint64_t counter_overhead(int fd) {
  ioctl(fd, PERF_EVENT_IOC_RESET, 0);
  ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
  uint64_t n = counter_stop(fd);
  ioctl(fd, PERF_EVENT_IOC_RESET, 0);
  return n;
}

/* ---- the calls ---------------------------------------------------------------------------- */

/* One blocking 8-byte collective, the i-th of a rotation of four. */
static weft_status_t small_call(harness_rank *r, int i, float *in, float *out) {
  switch (i % 4) {
    case 0: return weft_all_reduce(in, out, 2, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    case 1: return weft_broadcast(in, out, 2, WEFT_FLOAT32, 0, r->comm, NULL);
    case 2: return weft_all_gather(in, out, 2, WEFT_FLOAT32, r->comm, NULL);
    default: return weft_reduce_scatter(out, in, 1, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
  }
}

/* The calls run in CHUNKS chunks, each timed (outside the counted window). System calls are
 * checked only in chunks shorter than QUIET_CHUNK_MS: a wait of 20 ms and more checks the
 * peers' health (lib/task.c check_health: the bootstrap socket, the peers' processes), which
 * is a system call by design, and a busy machine can make a chunk that long. */
enum { CHUNKS = 20, QUIET_CHUNK_MS = 15 };

static int quiet_calls(harness_rank *r) {
  float in[2] = {1.0f + (float)r->rank, 2.0f}, out[2 * HARNESS_MAX_RANKS];
  char why[200];
  int fd = syscall_counter(why, sizeof(why));
  if (fd < 0 && r->rank == 0) harness_note(r, "system calls not counted: %s", why);
  uint64_t overhead = fd >= 0 ? counter_overhead(fd) : 0;
  if (overhead == UINT64_MAX) return harness_fail(r, "reading the system-call counter: %s", strerror(errno));
  for (int i = 0; i < WARMUP; i++)
    if (small_call(r, i, in, out) != WEFT_SUCCESS) return harness_fail(r, "warm-up call %d failed", i);
  uint64_t n_sys = 0;
  int quiet_chunks = 0;
  atomic_store(&counting, 1); /* from here the calls must allocate nothing */
  for (int c = 0; c < CHUNKS; c++) {
    double t0 = harness_now_ms();
    if (fd >= 0) ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
    for (int i = 0; i < CALLS / CHUNKS; i++) {
      weft_status_t st = small_call(r, i, in, out);
      if (st != WEFT_SUCCESS) {
        atomic_store(&counting, 0);
        return harness_fail(r, "call %d of chunk %d failed: %s", i, c, weft_get_error_string(st));
      }
    }
    uint64_t n = fd >= 0 ? counter_stop(fd) : 0;
    double ms = harness_now_ms() - t0;
    if (fd >= 0) ioctl(fd, PERF_EVENT_IOC_RESET, 0);
    if (n == UINT64_MAX) {
      atomic_store(&counting, 0);
      return harness_fail(r, "reading the system-call counter: %s", strerror(errno));
    }
    if (ms < QUIET_CHUNK_MS) {
      quiet_chunks++;
      n_sys += n >= overhead ? n - overhead : 0;
    }
  }
  atomic_store(&counting, 0);
  if (fd >= 0) close(fd);
  long n_alloc = atomic_load(&allocations);
  if (fd >= 0)
    harness_note(r, "%d blocking calls of 8 B: %ld allocations; %llu system calls besides waiting in the %d of %d "
                 "chunks of %d calls that took < %d ms", CALLS, n_alloc, (unsigned long long)n_sys, quiet_chunks,
                 CHUNKS, CALLS / CHUNKS, QUIET_CHUNK_MS);
  else
    harness_note(r, "%d blocking calls of 8 B: %ld allocations (system calls not counted)", CALLS, n_alloc);
#ifdef QUIET_NO_ALLOC_COUNT
  if (r->rank == 0) harness_note(r, "allocations not counted: built with AddressSanitizer, which owns malloc");
#endif
  if (n_alloc != 0) harness_fail(r, "%ld allocations in %d blocking small calls (want 0)", n_alloc, CALLS);
  if (n_sys != 0)
    harness_fail(r, "%llu system calls (not counting waits) in %d chunks of %d blocking small calls (want 0)",
                 (unsigned long long)n_sys, quiet_chunks, CALLS / CHUNKS);
  return r->failures;
}

static void one_rank_blocking_small_calls_allocate_nothing_and_make_no_system_call(void **state) {
  harness_run_simple(1, NULL, quiet_calls, NULL);
}

static void two_ranks_over_shm_blocking_small_calls_allocate_nothing_and_make_no_system_call(void **state) {
  harness_run_simple(2, "shm", quiet_calls, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_rank_blocking_small_calls_allocate_nothing_and_make_no_system_call),
      cmocka_unit_test(two_ranks_over_shm_blocking_small_calls_allocate_nothing_and_make_no_system_call),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
