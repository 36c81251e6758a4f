/* floor_stream.h: membw_floor's copy and reduction loops and its clock (membw_floor.c,
 * floor_fifo.c).
 * Stores to a destination that is not read again in the pass are non-temporal where the CPU
 * has them (x86-64 SSE2) and the destination is 16-byte aligned, so they cost no read for
 * ownership: the floor counts the least DRAM traffic, not a particular memcpy. Counts are in
 * floats. */
#ifndef WEFT_PERF_FLOOR_STREAM_H
#define WEFT_PERF_FLOOR_STREAM_H

#include <stdint.h>
#include <string.h>
#include <time.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* dst[0..n) = src[0..n), bypassing the cache when dst is 16-byte aligned. */
static inline void stream_copy(float *dst, const float *src, size_t n) {
#ifdef __SSE2__
  if (((uintptr_t)dst & 15) == 0) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    for (; i < n; i++) dst[i] = src[i];
    return;
  }
#endif
  memcpy(dst, src, n * sizeof(float));
}

/* dst[i] = a[i] + b[i], with non-temporal stores as stream_copy. */
static inline void stream_sum(float *dst, const float *a, const float *b, size_t n) {
  size_t i = 0;
#ifdef __SSE2__
  if (((uintptr_t)dst & 15) == 0)
    for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
#endif
  for (; i < n; i++) dst[i] = a[i] + b[i];
}

/* d0[i] = d1[i] = a[i] + b[i]: each sum computed once, stored to both outputs with
 * non-temporal stores. */
static inline void stream_sum2(float *d0, float *d1, const float *a, const float *b, size_t n) {
  size_t i = 0;
#ifdef __SSE2__
  if ((((uintptr_t)d0 | (uintptr_t)d1) & 15) == 0)
    for (; i + 4 <= n; i += 4) {
      __m128 v = _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i));
      _mm_stream_ps(d0 + i, v);
      _mm_stream_ps(d1 + i, v);
    }
#endif
  for (; i < n; i++) d0[i] = d1[i] = a[i] + b[i];
}

/* Seconds on the monotonic clock. */
static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Orders the non-temporal stores before whatever the caller publishes next. */
static inline void stream_fence(void) {
#ifdef __SSE2__
  _mm_sfence();
#endif
}

#endif
