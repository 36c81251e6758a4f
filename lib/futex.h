/* futex.h: sleeping on a 32-bit word in shared memory (Linux futex), for waits that would
 * otherwise poll. The words live in MAP_SHARED memory seen by several processes, so these
 * use the shared (non-PRIVATE) futex operations.
 *
 * Why a futex: a rank that waits on shared memory has no fd to poll. A futex lets it sleep
 * until a peer rings, and the peer only makes the system call when the sleeper announced
 * itself (see transports/shm/shm_doorbell.h), so the fast path has none. A wake costs
 * about 30 us on the 2-core VM weft is developed on, which is why waits spin and yield
 * first. */
#ifndef WEFT_FUTEX_H
#define WEFT_FUTEX_H
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleeps while *word == expected, at most ns nanoseconds (relative). Returns 0 when woken
 * (or the word had already changed, or a signal came), ETIMEDOUT when ns passed. */
static inline int weft__futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  long rc = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts, NULL, 0);
  return rc == 0 || errno != ETIMEDOUT ? 0 : ETIMEDOUT;
}

/* Wakes every sleeper on word. */
static inline void weft__futex_wake(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
#endif
