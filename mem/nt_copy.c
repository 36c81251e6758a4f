/* nt_copy.c: memcpy with non-temporal stores; see nt_copy.h. */
#include "mem/nt_copy.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "lib/env.h"
#include "mem/space.h"

#if defined(__x86_64__)
#include <emmintrin.h>

void weft__nt_copy_unfenced(void *dst, const void *src, size_t n) {
  char *d = dst;
  const char *s = src;
  size_t head = (64 - ((uintptr_t)d & 63)) & 63; /* whole 64-byte lines from here on */
  if (head > n) head = n;
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
    _mm_stream_si128((__m128i *)d, a);
    _mm_stream_si128((__m128i *)(d + 16), b);
    _mm_stream_si128((__m128i *)(d + 32), c);
    _mm_stream_si128((__m128i *)(d + 48), e);
  }
  memcpy(d, s, n);
}

void weft__store_fence(void) { _mm_sfence(); }
#else
void weft__nt_copy_unfenced(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
void weft__store_fence(void) { atomic_thread_fence(memory_order_release); }
#endif

void weft__nt_copy(void *dst, const void *src, size_t n) {
  weft__nt_copy_unfenced(dst, src, n);
  weft__store_fence(); /* non-temporal stores are weakly ordered: finish them before publishing */
}

size_t weft__mem_nt_threshold(void) {
  static _Atomic size_t cached = SIZE_MAX; /* SIZE_MAX: not read yet */
  size_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v == SIZE_MAX) {
    v = weft__env_size("WEFT_NT_COPY_BYTES", 16u << 20);
    if (v == 0 || v == SIZE_MAX) v = SIZE_MAX - 1; /* off */
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}
