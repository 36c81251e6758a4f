/* clock.h: monotonic time and deadlines. */
#ifndef WEFT_CLOCK_H
#define WEFT_CLOCK_H
#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC. */
static inline uint64_t weft__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The absolute deadline timeout_ms from now. */
static inline uint64_t weft__deadline_after_ms(int timeout_ms) {
  return weft__now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

/* Milliseconds left before deadline_ns (0 once passed), for poll(). */
static inline int weft__ms_left(uint64_t deadline_ns) {
  uint64_t now = weft__now_ns();
  if (now >= deadline_ns) return 0;
  uint64_t ms = (deadline_ns - now + 999999ull) / 1000000ull;
  return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}
#endif
