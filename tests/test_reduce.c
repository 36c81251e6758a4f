/* test_reduce.c: unit tests of the reduction kernels and the fp16/bf16 conversions
 * (mem/reduce.c, mem/half.c, lib/dtype.c), in one process.
 *
 * Every kernel is checked bit for bit against a scalar reference written independently
 * of the kernels' macros, over counts that hit the empty case, the vector tails and
 * several fp16/bf16 blocks, out of place and in place on either input. The conversions
 * are checked exhaustively: every 16-bit pattern widens to the value the IEEE formula
 * gives, and every midpoint between two neighbouring 16-bit values rounds to the even one. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "mem/kernels.h"
#include "mem/reduce_nt.h"

static const size_t counts[] = {0, 1, 7, 33, 4097};

/* Per-level tests get their level's kernels as state (NULL: the CPU lacks the level and
 * the test was named "... # SKIP ..."). */
static const struct weft__kernels *level_kernels(void **state) {
  return *state ? weft__kernels_at(*(const weft__simd_t *)*state) : NULL;
}

/* weft__reduce on the given level. */
static void kreduce(const struct weft__kernels *k, void *dst, const void *a, const void *b,
                    size_t n, weft_datatype_t dt, weft_redop_t op) {
  if (n) k->reduce[dt][op](dst, a, b, n);
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* xorshift64: reproducible inputs without depending on libc's rand(). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Integers get any bit pattern (so sums and products wrap); floating types get finite
 * values of both signs in [-8, 8), some of them equal, so max/min see ties. */
static void fill_random(void *buf, size_t n, weft_datatype_t dt) {
  size_t size = weft__dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rng_next();
    char *p = (char *)buf + i * size;
    float v = (float)((int64_t)(r % 4096) - 2048) / 256.0f;
    if (r % 7 == 0) v = 1.5f;
    switch (dt) {
      case WEFT_FLOAT16: { uint16_t h = weft__float_to_half(v); memcpy(p, &h, 2); break; }
      case WEFT_BFLOAT16: { uint16_t h = weft__float_to_bf16(v); memcpy(p, &h, 2); break; }
      case WEFT_FLOAT32: memcpy(p, &v, 4); break;
      case WEFT_FLOAT64: {
        double d = (double)v + (double)(r >> 40) * 0x1p-30;
        memcpy(p, &d, 8);
        break;
      }
      default: memcpy(p, &r, size); break;
    }
  }
}

static int is_signed_int(weft_datatype_t dt) {
  return dt == WEFT_INT8 || dt == WEFT_INT32 || dt == WEFT_INT64;
}

/* Loads an integer element as int64 (sign-extended for signed types). */
static int64_t load_int(const void *p, weft_datatype_t dt) {
  switch (dt) {
    case WEFT_INT8: return *(const int8_t *)p;
    case WEFT_UINT8: return *(const uint8_t *)p;
    case WEFT_INT32: return *(const int32_t *)p;
    case WEFT_UINT32: return *(const uint32_t *)p;
    default: return *(const int64_t *)p;
  }
}

/* The reference integer op: sum and prod modulo 2^64 (then truncated to the width,
 * which is the same as wrapping in the width), max and min by signedness. */
static void ref_int(void *out, const void *a, const void *b, weft_datatype_t dt,
                    weft_redop_t op) {
  int64_t x = load_int(a, dt), y = load_int(b, dt);
  uint64_t ux = (uint64_t)x, uy = (uint64_t)y, r;
  int sgn = is_signed_int(dt);
  switch (op) {
    case WEFT_SUM: case WEFT_AVG: r = ux + uy; break;
    case WEFT_PROD: r = ux * uy; break;
    case WEFT_MAX: r = (sgn ? x > y : ux > uy) ? ux : uy; break;
    default: r = (sgn ? x < y : ux < uy) ? ux : uy; break;
  }
  memcpy(out, &r, weft__dtype_size(dt)); /* little-endian: the low bytes */
}

static double ref_apply(double x, double y, weft_redop_t op) {
  switch (op) {
    case WEFT_SUM: case WEFT_AVG: return x + y;
    case WEFT_PROD: return x * y;
    case WEFT_MAX: return x > y ? x : y;
    default: return x < y ? x : y;
  }
}

static void ref_elem(void *out, const void *a, const void *b, weft_datatype_t dt,
                     weft_redop_t op) {
  switch (dt) {
    case WEFT_FLOAT64: {
      double r = ref_apply(*(const double *)a, *(const double *)b, op);
      memcpy(out, &r, 8);
      break;
    }
    case WEFT_FLOAT32: { /* float op float is exact in double, then rounded once */
      float r = (float)ref_apply(*(const float *)a, *(const float *)b, op);
      memcpy(out, &r, 4);
      break;
    }
    case WEFT_FLOAT16: case WEFT_BFLOAT16: {
      int half = dt == WEFT_FLOAT16;
      uint16_t x = *(const uint16_t *)a, y = *(const uint16_t *)b;
      float fx = half ? weft__half_to_float(x) : weft__bf16_to_float(x);
      float fy = half ? weft__half_to_float(y) : weft__bf16_to_float(y);
      float r = (float)ref_apply(fx, fy, op);
      uint16_t h = half ? weft__float_to_half(r) : weft__float_to_bf16(r);
      memcpy(out, &h, 2);
      break;
    }
    default: ref_int(out, a, b, dt, op); break;
  }
}

/* mode 0: dst separate; 1: dst == a; 2: dst == b. */
static void check_one(const struct weft__kernels *k, weft_datatype_t dt, weft_redop_t op,
                      size_t n, int mode) {
  size_t size = weft__dtype_size(dt), bytes = n * size + 1;
  char *a = malloc(bytes), *b = malloc(bytes), *d = malloc(bytes), *ref = malloc(bytes);
  assert_non_null(a); assert_non_null(b); assert_non_null(d); assert_non_null(ref);
  fill_random(a, n, dt);
  fill_random(b, n, dt);
  for (size_t i = 0; i < n; i++)
    ref_elem(ref + i * size, a + i * size, b + i * size, dt, op);
  memset(d, 0x5a, bytes);
  char *dst = mode == 0 ? d : (mode == 1 ? a : b);
  dst[n * size] = 0x5a; /* guard byte: nothing past count may be written */
  kreduce(k, dst, a, b, n, dt, op);
  for (size_t i = 0; i < n * size; i++) {
    if (dst[i] != ref[i])
      fail_msg("%s: %s %s count %zu mode %d: byte %zu (element %zu) is 0x%02x, expected "
               "0x%02x", weft__simd_name(k->level), weft__dtype_name(dt), weft__op_name(op),
               n, mode, i, i / size,
               (unsigned char)dst[i], (unsigned char)ref[i]);
  }
  assert_int_equal(dst[n * size], 0x5a);
  free(a); free(b); free(d); free(ref);
}

static void every_dtype_and_op_matches_scalar_reference(void **state) {
  const struct weft__kernels *k = level_kernels(state);
  if (!k) return;
  for (int dt = 0; dt < WEFT_NUM_DATATYPES; dt++)
    for (int op = 0; op < WEFT_NUM_OPS; op++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int mode = 0; mode < 3; mode++) check_one(k, dt, op, counts[c], mode);
}

static void integer_sum_and_prod_wrap_around(void **state) {
  const struct weft__kernels *k = level_kernels(state);
  if (!k) return;
  int8_t i8a[2] = {127, -128}, i8b[2] = {1, -1};
  kreduce(k, i8a, i8a, i8b, 2, WEFT_INT8, WEFT_SUM);
  assert_int_equal(i8a[0], -128);
  assert_int_equal(i8a[1], 127);
  int8_t p8a[1] = {-128}, p8b[1] = {-1};
  kreduce(k, p8a, p8a, p8b, 1, WEFT_INT8, WEFT_PROD);
  assert_int_equal(p8a[0], -128);
  uint8_t u8a[2] = {200, 255}, u8b[2] = {2, 255}, u8d[2];
  kreduce(k, u8d, u8a, u8b, 2, WEFT_UINT8, WEFT_PROD);
  assert_int_equal(u8d[0], 144); /* 400 mod 256 */
  assert_int_equal(u8d[1], 1);   /* 65025 mod 256 */
  int32_t i32a[1] = {INT32_MAX}, i32b[1] = {1};
  kreduce(k, i32a, i32a, i32b, 1, WEFT_INT32, WEFT_SUM);
  assert_int_equal(i32a[0], INT32_MIN);
  int64_t i64a[1] = {INT64_MAX}, i64b[1] = {2};
  kreduce(k, i64a, i64a, i64b, 1, WEFT_INT64, WEFT_PROD);
  assert_true(i64a[0] == -2);
  uint64_t u64a[1] = {UINT64_MAX}, u64b[1] = {1};
  kreduce(k, u64a, u64a, u64b, 1, WEFT_UINT64, WEFT_AVG);
  assert_true(u64a[0] == 0);
}

static void signed_and_unsigned_min_max_differ(void **state) {
  const struct weft__kernels *k = level_kernels(state);
  if (!k) return;
  int8_t a[1] = {-1}, b[1] = {1}, d[1];
  kreduce(k, d, a, b, 1, WEFT_INT8, WEFT_MAX);
  assert_int_equal(d[0], 1);
  kreduce(k, d, a, b, 1, WEFT_UINT8, WEFT_MAX); /* 0xff as uint8 is 255 */
  assert_int_equal(d[0], -1);
  int64_t x[1] = {INT64_MIN}, y[1] = {0}, z[1];
  kreduce(k, z, x, y, 1, WEFT_INT64, WEFT_MIN);
  assert_true(z[0] == INT64_MIN);
  kreduce(k, z, x, y, 1, WEFT_UINT64, WEFT_MIN);
  assert_true(z[0] == 0);
}

/* The documented behaviour: a NaN in b is returned, a NaN in a is dropped; of +0 and -0
 * (equal), b is returned. */
static void float_max_min_nan_follows_second_operand(void **state) {
  const struct weft__kernels *k = level_kernels(state);
  if (!k) return;
  float nan = f32_from_bits(0x7fc00000u), one = 1.0f;
  float a[2] = {nan, one}, b[2] = {one, nan}, d[2];
  kreduce(k, d, a, b, 2, WEFT_FLOAT32, WEFT_MAX);
  assert_true(d[0] == 1.0f);
  assert_true(isnan(d[1]));
  kreduce(k, d, a, b, 2, WEFT_FLOAT32, WEFT_MIN);
  assert_true(d[0] == 1.0f);
  assert_true(isnan(d[1]));
  float pz[1] = {0.0f}, nz[1] = {-0.0f}, z[1];
  kreduce(k, z, pz, nz, 1, WEFT_FLOAT32, WEFT_MAX); /* equal: b is returned */
  assert_true(signbit(z[0]));
  kreduce(k, z, nz, pz, 1, WEFT_FLOAT32, WEFT_MIN);
  assert_false(signbit(z[0]));
  uint16_t h[2] = {0x7e00, 0x3c00}, g[2] = {0x3c00, 0x7e00}, o[2];
  kreduce(k, o, h, g, 2, WEFT_FLOAT16, WEFT_MAX);
  assert_int_equal(o[0], 0x3c00);
  assert_true(isnan(weft__half_to_float(o[1])));
}

/* The value of a binary16 pattern by the IEEE 754 formula, computed in double. */
static double half_value(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double mag = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  if (e == 0x1f) mag = m ? NAN : INFINITY;
  return (h & 0x8000) ? -mag : mag;
}

static void half_widens_all_65536_patterns_exactly(void **state) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = weft__half_to_float((uint16_t)h);
    double want = half_value((uint16_t)h);
    if (isnan(want)) {
      assert_true(isnan(f));
      assert_true(f32_bits(f) & 0x00400000u); /* quiet */
      assert_int_equal(f32_bits(f) >> 31, h >> 15);
      continue;
    }
    if ((double)f != want || !signbit(f) != !signbit(want))
      fail_msg("half 0x%04x widened to %a, expected %a", h, (double)f, want);
  }
}

/* The level's array conversions against the scalar (generic) ones and the IEEE rules. */
static void half_round_trips_all_65536_patterns(void **state) {
  const struct weft__kernels *k = level_kernels(state);
  if (!k) return;
  uint16_t in[65536], back[65536];
  float wide[65536];
  for (uint32_t h = 0; h < 65536; h++) in[h] = (uint16_t)h;
  k->half_to_float_n(wide, in, 65536);
  k->float_to_half_n(back, wide, 65536);
  for (uint32_t h = 0; h < 65536; h++) {
    assert_int_equal(f32_bits(wide[h]), f32_bits(weft__half_to_float(in[h])));
    assert_int_equal(weft__float_to_half(weft__half_to_float(in[h])), back[h]);
    int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (!nan) {
      assert_int_equal(back[h], h);
      continue;
    }
    /* NaN: stays NaN, made quiet, sign and payload kept. */
    assert_int_equal(back[h], h | 0x0200);
  }
}

static void bf16_round_trips_all_65536_patterns(void **state) {
  const struct weft__kernels *k = level_kernels(state);
  if (!k) return;
  uint16_t in[65536], back[65536];
  float wide[65536];
  for (uint32_t b = 0; b < 65536; b++) in[b] = (uint16_t)b;
  k->bf16_to_float_n(wide, in, 65536);
  k->float_to_bf16_n(back, wide, 65536);
  for (uint32_t b = 0; b < 65536; b++) {
    int nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f);
    uint32_t want_wide = nan ? (b | 0x40) << 16 : b << 16;
    assert_int_equal(f32_bits(weft__bf16_to_float((uint16_t)b)), want_wide);
    assert_int_equal(f32_bits(wide[b]), want_wide);
    assert_int_equal(back[b], nan ? (b | 0x40) : b);
    assert_int_equal(weft__float_to_bf16(wide[b]), back[b]);
  }
}

/* Between every two neighbouring non-negative 16-bit values lo < hi, the exact midpoint
 * (representable in fp32) must round to the one with an even pattern, and the fp32
 * values just below / above it to lo / hi. Covers zero, subnormals, every binade and the
 * overflow boundary, where hi is infinity and the midpoint is the largest finite value
 * plus half its ulp. */
static void check_midpoints(float (*widen)(uint16_t), uint16_t (*narrow)(float),
                            uint16_t inf, const char *what) {
  for (uint32_t lo = 0; lo < inf; lo++) {
    double vlo = widen((uint16_t)lo);
    double vhi = lo + 1 < inf ? widen((uint16_t)(lo + 1)) : 2 * vlo - widen((uint16_t)(lo - 1));
    double mid = (vlo + vhi) / 2;
    float m = (float)mid;
    if ((double)m != mid) fail_msg("%s: midpoint above 0x%04x is not exact in fp32", what, lo);
    uint16_t even = (lo & 1) ? (uint16_t)(lo + 1) : (uint16_t)lo;
    if (narrow(m) != even || narrow(-m) != (even | 0x8000))
      fail_msg("%s: midpoint %a rounds to 0x%04x, expected 0x%04x", what, mid, narrow(m), even);
    assert_int_equal(narrow(nextafterf(m, 0.0f)), lo);
    assert_int_equal(narrow(nextafterf(m, INFINITY)), lo + 1);
  }
}

static void half_rounds_to_nearest_even(void **state) {
  check_midpoints(weft__half_to_float, weft__float_to_half, 0x7c00, "half");
  assert_int_equal(weft__float_to_half(1.0f + 0x1p-11f), 0x3c00);        /* tie: even */
  assert_int_equal(weft__float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);    /* tie: up */
  assert_int_equal(weft__float_to_half(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  assert_int_equal(weft__float_to_half(65504.0f), 0x7bff);
  assert_int_equal(weft__float_to_half(65519.99f), 0x7bff);
  assert_int_equal(weft__float_to_half(65520.0f), 0x7c00);                /* tie to inf */
  assert_int_equal(weft__float_to_half(1e10f), 0x7c00);
  assert_int_equal(weft__float_to_half(-INFINITY), 0xfc00);
  assert_int_equal(weft__float_to_half(-0.0f), 0x8000);
  assert_true(isnan(weft__half_to_float(weft__float_to_half(NAN))));
  /* a NaN whose payload is only in the low 13 bits must not become infinity */
  assert_int_equal(weft__float_to_half(f32_from_bits(0x7f800001u)), 0x7e00);
  assert_int_equal(weft__float_to_half(f32_from_bits(0xff800001u)), 0xfe00);
}

static void half_subnormals_round_correctly(void **state) {
  assert_int_equal(weft__float_to_half(0x1p-24f), 0x0001);     /* smallest subnormal */
  assert_int_equal(weft__float_to_half(0x1p-25f), 0x0000);     /* tie to even: zero */
  assert_int_equal(weft__float_to_half(0x1.8p-25f), 0x0001);   /* above the tie */
  assert_int_equal(weft__float_to_half(3 * 0x1p-25f), 0x0002); /* 1.5 ulp: tie to even */
  assert_int_equal(weft__float_to_half(0x1p-14f), 0x0400);     /* smallest normal */
  assert_int_equal(weft__float_to_half(0x1p-14f - 0x1p-25f), 0x0400); /* 1023.5 ulp: even */
  assert_int_equal(weft__float_to_half(0x1p-30f), 0x0000);
  assert_int_equal(weft__float_to_half(-0x1p-24f), 0x8001);
  assert_int_equal(weft__float_to_half(1e-45f), 0x0000);       /* fp32 subnormal */
  assert_true(weft__half_to_float(0x0001) == 0x1p-24f);
  assert_true(weft__half_to_float(0x03ff) == 1023 * 0x1p-24f);
  assert_true(weft__half_to_float(0x8000) == 0.0f && signbit(weft__half_to_float(0x8000)));
}

static void bf16_rounds_to_nearest_even(void **state) {
  check_midpoints(weft__bf16_to_float, weft__float_to_bf16, 0x7f80, "bf16");
  assert_int_equal(weft__float_to_bf16(f32_from_bits(0x3f808000u)), 0x3f80); /* tie: even */
  assert_int_equal(weft__float_to_bf16(f32_from_bits(0x3f818000u)), 0x3f82); /* tie: up */
  assert_int_equal(weft__float_to_bf16(f32_from_bits(0x3f808001u)), 0x3f81);
  assert_int_equal(weft__float_to_bf16(f32_from_bits(0x7f7fffffu)), 0x7f80); /* to inf */
  assert_int_equal(weft__float_to_bf16(f32_from_bits(0x00008000u)), 0x0000); /* subnormal tie */
  assert_int_equal(weft__float_to_bf16(f32_from_bits(0x00018000u)), 0x0002);
  assert_int_equal(weft__float_to_bf16(f32_from_bits(0x7f800001u)), 0x7fc0); /* NaN stays */
  assert_int_equal(weft__float_to_bf16(f32_from_bits(0xffffffffu)), 0xffff);
  assert_int_equal(weft__float_to_bf16(INFINITY), 0x7f80);
}

static void avg_finalize_truncates_integers_toward_zero(void **state) {
  int8_t i8[4] = {-7, 7, -128, 127};
  weft__avg_finalize(i8, 4, WEFT_INT8, 2);
  assert_int_equal(i8[0], -3);
  assert_int_equal(i8[1], 3);
  assert_int_equal(i8[2], -64);
  assert_int_equal(i8[3], 63);
  uint8_t u8[2] = {255, 5};
  weft__avg_finalize(u8, 2, WEFT_UINT8, 2);
  assert_int_equal(u8[0], 127);
  assert_int_equal(u8[1], 2);
  int32_t i32[2] = {-7, INT32_MIN};
  weft__avg_finalize(i32, 2, WEFT_INT32, 2);
  assert_int_equal(i32[0], -3);
  assert_int_equal(i32[1], INT32_MIN / 2);
  uint32_t u32[1] = {UINT32_MAX};
  weft__avg_finalize(u32, 1, WEFT_UINT32, 3);
  assert_int_equal(u32[0], UINT32_MAX / 3);
  int64_t i64[1] = {-22};
  weft__avg_finalize(i64, 1, WEFT_INT64, 7);
  assert_true(i64[0] == -3);
  uint64_t u64[1] = {UINT64_MAX};
  weft__avg_finalize(u64, 1, WEFT_UINT64, 8);
  assert_true(u64[0] == UINT64_MAX / 8);
}

static void avg_finalize_divides_floats_in_their_precision(void **state) {
  /* 5 / 3 differs from 5 * (1 / 3) in fp32: the finalize must really divide */
  volatile float three = 3.0f;
  float f[3] = {1.0f, -7.0f, 5.0f};
  weft__avg_finalize(f, 3, WEFT_FLOAT32, 3);
  assert_true(f[0] == 1.0f / three);
  assert_true(f[1] == -7.0f / three);
  assert_true(f[2] == 5.0f / three);
  assert_true(f[2] != 5.0f * (1.0f / three));
  double d[1] = {1.0};
  weft__avg_finalize(d, 1, WEFT_FLOAT64, 3);
  assert_true(d[0] == 1.0 / 3.0);
  uint16_t h[3] = {0x3c00, 0xc700, 0x0001}; /* 1, -7, smallest subnormal */
  weft__avg_finalize(h, 3, WEFT_FLOAT16, 3);
  assert_int_equal(h[0], 0x3555); /* 0.33325 */
  assert_int_equal(h[1], weft__float_to_half(-7.0f / 3.0f));
  assert_int_equal(h[2], 0x0000); /* 1/3 ulp rounds to zero */
  uint16_t b[1] = {0x3f80};
  weft__avg_finalize(b, 1, WEFT_BFLOAT16, 3);
  assert_int_equal(b[0], 0x3eab); /* 0.333984375 */
  /* nranks 1 changes nothing; a bad nranks must not trap */
  int32_t x[1] = {-7};
  weft__avg_finalize(x, 1, WEFT_INT32, 1);
  weft__avg_finalize(x, 1, WEFT_INT32, 0);
  assert_int_equal(x[0], -7);
}

/* A long fp16 avg across several blocks: sum then finalize equals the element-wise
 * reference (covers the block loops of the finalize step). */
static void avg_reduce_then_finalize_matches_reference(void **state) {
  const struct weft__kernels *k = level_kernels(state);
  if (!k) return;
  enum { n = 1000 };
  uint16_t a[n], b[n], d[n];
  fill_random(a, n, WEFT_FLOAT16);
  fill_random(b, n, WEFT_FLOAT16);
  kreduce(k, d, a, b, n, WEFT_FLOAT16, WEFT_AVG);
  weft__avg_finalize(d, n, WEFT_FLOAT16, 2);
  for (int i = 0; i < n; i++) {
    float s = weft__half_to_float(weft__float_to_half(weft__half_to_float(a[i]) +
                                                      weft__half_to_float(b[i])));
    assert_int_equal(d[i], weft__float_to_half(s / 2.0f));
  }
}

/* ---- Levels against the generic level --------------------------------------------- */

/* Float bit patterns that stress the kernels: signed zeros, subnormals, the largest
 * finite values, infinities, quiet and signalling NaNs with payloads, fp16/bf16 rounding
 * ties; the rest random bits (so also NaN and Inf now and then). */
static uint32_t hostile_f32(uint64_t r) {
  static const uint32_t special[] = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u, 0x00018000u,
      0x00008000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u,
      0xffc00001u, 0x7f800001u, 0xff812345u, 0x7fffffffu, 0x3f808000u, 0x3f818000u,
      0x33000000u, 0x33800000u, 0x387fc000u, 0x38800000u, 0x477ff000u, 0x477fe000u,
      0x47800000u, 0x3f801000u, 0x3f803000u, 0xb3400000u};
  size_t ns = sizeof special / sizeof special[0];
  if (r % 3 == 0) return special[(r >> 8) % ns];
  return (uint32_t)(r >> 16);
}

/* Every element of the 16-bit types and of fp32 is drawn from the hostile patterns; fp64
 * and the integer types get random bits. */
static void fill_hostile(void *buf, size_t n, weft_datatype_t dt) {
  size_t size = weft__dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rng_next();
    char *p = (char *)buf + i * size;
    uint32_t f = hostile_f32(r);
    if (dt == WEFT_FLOAT16 || dt == WEFT_BFLOAT16) {
      uint16_t h = (uint16_t)(r % 5 == 0 ? f >> 16 : r >> 24); /* any 16-bit pattern */
      if (r % 7 == 0) h = (uint16_t)(dt == WEFT_FLOAT16 ? 0x7c00u : 0x7f80u) | (uint16_t)(r >> 60);
      memcpy(p, &h, 2);
    } else if (dt == WEFT_FLOAT32) {
      memcpy(p, &f, 4);
    } else {
      memcpy(p, &r, size);
    }
  }
}

static int is_nan_elem(const void *p, weft_datatype_t dt) {
  uint16_t h;
  uint32_t u;
  uint64_t q;
  switch (dt) {
    case WEFT_FLOAT16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7c00;
    case WEFT_BFLOAT16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7f80;
    case WEFT_FLOAT32: memcpy(&u, p, 4); return (u & 0x7fffffffu) > 0x7f800000u;
    case WEFT_FLOAT64:
      memcpy(&q, p, 8);
      return (q & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default: return 0;
  }
}

/* Bit-identical, except one documented freedom: when sum or prod meets a NaN in both
 * operands, which payload comes out is up to the compiler (x86 returns the first source
 * operand's NaN, and GCC may swap the operands of a commutative add or multiply), so two
 * NaNs count as equal there. max and min return an operand and must match exactly. */
static int same_result(const void *got, const void *want, const void *x, const void *y,
                       weft_datatype_t dt, weft_redop_t op) {
  size_t size = weft__dtype_size(dt);
  if (memcmp(got, want, size) == 0) return 1;
  return op != WEFT_MAX && op != WEFT_MIN && is_nan_elem(x, dt) && is_nan_elem(y, dt) &&
         is_nan_elem(got, dt) && is_nan_elem(want, dt);
}

/* Every dtype and op, counts around the vector widths (1..130, 4097), in and out of place,
 * against the generic level on the same inputs. */
static void level_matches_generic_bit_for_bit(void **state) {
  const struct weft__kernels *k = level_kernels(state);
  if (!k) return;
  const struct weft__kernels *g = weft__kernels_at(WEFT__SIMD_GENERIC);
  enum { max_n = 4097 };
  char *a = malloc(max_n * 8), *b = malloc(max_n * 8), *ga = malloc(max_n * 8);
  char *gb = malloc(max_n * 8), *gd = malloc(max_n * 8), *d = malloc(max_n * 8);
  assert_non_null(a); assert_non_null(b); assert_non_null(ga); assert_non_null(gb);
  assert_non_null(gd); assert_non_null(d);
  for (int dt = 0; dt < WEFT_NUM_DATATYPES; dt++) {
    size_t size = weft__dtype_size(dt);
    for (int op = 0; op < WEFT_NUM_OPS; op++) {
      for (size_t n = 1; n <= max_n; n = n < 130 ? n + 1 : max_n + (n == max_n)) {
        fill_hostile(a, n, dt);
        fill_hostile(b, n, dt);
        g->reduce[dt][op](gd, a, b, n);
        k->reduce[dt][op](d, a, b, n);
        memcpy(ga, a, n * size);
        k->reduce[dt][op](ga, ga, b, n); /* in place on a */
        memcpy(gb, b, n * size);
        k->reduce[dt][op](gb, a, gb, n); /* in place on b */
        for (size_t i = 0; i < n; i++) {
          size_t at = i * size;
          const char *x = a + at, *y = b + at;
          if (!same_result(d + at, gd + at, x, y, dt, op) ||
              !same_result(ga + at, gd + at, x, y, dt, op) ||
              !same_result(gb + at, gd + at, x, y, dt, op))
            fail_msg("%s: %s %s count %zu element %zu differs from generic",
                     weft__simd_name(k->level), weft__dtype_name(dt), weft__op_name(op), n, i);
        }
      }
    }
  }
  free(a); free(b); free(ga); free(gb); free(gd); free(d);
}

/* WEFT_AVG's division (divide[dt], weft__avg_finalize) on hostile inputs, every dtype,
 * counts around the vector widths and divisors up to the largest a ring all-reduce uses
 * (65535), against the generic loops: bit for bit, NaNs included (one operand). */
static void level_divide_matches_generic_bit_for_bit(void **state) {
  const struct weft__kernels *k = level_kernels(state);
  if (!k) return;
  const struct weft__kernels *g = weft__kernels_at(WEFT__SIMD_GENERIC);
  static const int divisors[] = {2, 3, 7, 10, 255, 4096, 65535};
  enum { max_n = 4097 };
  char *in = malloc(max_n * 8), *kd = malloc(max_n * 8), *gd = malloc(max_n * 8);
  assert_non_null(in); assert_non_null(kd); assert_non_null(gd);
  for (int dt = 0; dt < WEFT_NUM_DATATYPES; dt++) {
    size_t size = weft__dtype_size(dt);
    assert_non_null(k->divide[dt]);
    for (size_t v = 0; v < sizeof divisors / sizeof divisors[0]; v++) {
      for (size_t n = 1; n <= max_n; n = n < 70 ? n + 1 : max_n + (n == max_n)) {
        fill_hostile(in, n, dt);
        memcpy(kd, in, n * size);
        memcpy(gd, in, n * size);
        k->divide[dt](kd, n, divisors[v]);
        g->divide[dt](gd, n, divisors[v]);
        for (size_t i = 0; i < n; i++)
          if (memcmp(kd + i * size, gd + i * size, size) != 0)
            fail_msg("%s: %s / %d count %zu element %zu differs from generic",
                     weft__simd_name(k->level), weft__dtype_name(dt), divisors[v], n, i);
      }
    }
  }
  free(in); free(kd); free(gd);
}

/* Narrowing inputs: for every non-negative 16-bit pattern its value, the midpoints to its
 * neighbours and one fp32 ulp either side of them, negated too; then hostile and random
 * fp32 patterns. */
static size_t narrowing_inputs(float *out, float (*widen)(uint16_t), uint16_t inf) {
  size_t m = 0;
  for (uint32_t lo = 0; lo < inf; lo++) {
    float vlo = widen((uint16_t)lo), vhi = widen((uint16_t)(lo + 1));
    float mid = (float)(((double)vlo + (double)vhi) / 2);
    float v[4] = {vlo, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
    for (int j = 0; j < 4; j++) {
      out[m++] = v[j];
      out[m++] = -v[j];
    }
  }
  for (int i = 0; i < 1 << 19; i++) out[m++] = f32_from_bits(hostile_f32(rng_next()));
  return m;
}

static void check_conversions(const struct weft__kernels *k, const struct weft__kernels *g,
                              float (*widen)(uint16_t), uint16_t inf, int half) {
  size_t cap = (size_t)inf * 8 + (1u << 19);
  float *in = malloc(cap * 4), *kw = malloc(65536 * 4), *gw = malloc(65536 * 4);
  uint16_t *kn = malloc(cap * 2), *gn = malloc(cap * 2), pat[65536];
  assert_non_null(in); assert_non_null(kw); assert_non_null(gw);
  assert_non_null(kn); assert_non_null(gn);
  for (uint32_t h = 0; h < 65536; h++) pat[h] = (uint16_t)h;
  (half ? k->half_to_float_n : k->bf16_to_float_n)(kw, pat, 65536);
  (half ? g->half_to_float_n : g->bf16_to_float_n)(gw, pat, 65536);
  for (uint32_t h = 0; h < 65536; h++)
    if (f32_bits(kw[h]) != f32_bits(gw[h]))
      fail_msg("%s: %s 0x%04x widens to 0x%08x, generic 0x%08x", weft__simd_name(k->level),
               half ? "half" : "bf16", h, f32_bits(kw[h]), f32_bits(gw[h]));
  size_t m = narrowing_inputs(in, widen, inf);
  /* odd offsets and lengths: the tails run too */
  for (size_t off = 0; off < 3; off++) {
    (half ? k->float_to_half_n : k->float_to_bf16_n)(kn, in + off, m - 2 * off);
    (half ? g->float_to_half_n : g->float_to_bf16_n)(gn, in + off, m - 2 * off);
    for (size_t i = 0; i < m - 2 * off; i++)
      if (kn[i] != gn[i])
        fail_msg("%s: fp32 0x%08x narrows to %s 0x%04x, generic 0x%04x",
                 weft__simd_name(k->level), f32_bits(in[off + i]), half ? "half" : "bf16",
                 kn[i], gn[i]);
  }
  free(in); free(kw); free(gw); free(kn); free(gn);
}

static void level_conversions_match_generic_for_every_pattern(void **state) {
  const struct weft__kernels *k = level_kernels(state);
  if (!k) return;
  const struct weft__kernels *g = weft__kernels_at(WEFT__SIMD_GENERIC);
  check_conversions(k, g, weft__half_to_float, 0x7c00, 1);
  check_conversions(k, g, weft__bf16_to_float, 0x7f80, 0);
}

/* WEFT_SIMD's parsing; the level in use is the one it asks for (make check runs with it
 * unset: the best level of this CPU). */
static void simd_level_follows_request_and_cpu(void **state) {
  int unknown;
  weft__simd_t best = weft__simd_choose(NULL, &unknown);
  assert_int_equal(unknown, 0);
  assert_true(weft__simd_supported(best));
  assert_true(best == WEFT__SIMD_NUM_LEVELS - 1 || !weft__simd_supported(best + 1));
  assert_int_equal(weft__simd_choose("", NULL), best);
  assert_int_equal(weft__simd_choose("generic", NULL), WEFT__SIMD_GENERIC);
  assert_int_equal(weft__simd_choose("AVX2", NULL),
                   weft__simd_supported(WEFT__SIMD_AVX2) ? WEFT__SIMD_AVX2 : WEFT__SIMD_GENERIC);
  assert_true(weft__simd_choose("avx512", NULL) <= WEFT__SIMD_AVX512);
  assert_int_equal(weft__simd_choose("sse9", &unknown), best);
  assert_int_equal(unknown, 1);
  assert_int_equal(weft__kernels()->level, weft__simd_choose(getenv("WEFT_SIMD"), NULL));
  assert_non_null(weft__kernels_at(WEFT__SIMD_GENERIC));
  assert_null(weft__kernels_at(WEFT__SIMD_NUM_LEVELS));
  assert_string_equal(weft__simd_name(WEFT__SIMD_AVX512), "avx512");
  /* weft__reduce runs the level in use */
  float x[3] = {1, 2, 3}, y[3] = {4, 5, 6};
  weft__reduce(x, x, y, 3, WEFT_FLOAT32, WEFT_SUM);
  assert_true(x[0] == 5 && x[1] == 7 && x[2] == 9);
}

static void sizes_and_names_follow_nccl_tests(void **state) {
  static const char *names[] = {"int8", "uint8", "int32", "uint32", "int64",
                                "uint64", "half", "float", "double", "bfloat16"};
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  for (int dt = 0; dt < WEFT_NUM_DATATYPES; dt++) {
    assert_string_equal(weft__dtype_name(dt), names[dt]);
    assert_int_equal(weft__dtype_size(dt), sizes[dt]);
    assert_int_equal(weft_datatype_size(dt), sizes[dt]);
    assert_true(weft__dtype_valid(dt));
  }
  assert_int_equal(weft_datatype_size(WEFT_NUM_DATATYPES), 0);
  assert_int_equal(weft_datatype_size((weft_datatype_t)-1), 0);
  assert_false(weft__dtype_valid((weft_datatype_t)-1));
  assert_false(weft__op_valid(WEFT_NUM_OPS));
  assert_false(weft__op_valid((weft_redop_t)-1));
  assert_string_equal(weft__op_name(WEFT_SUM), "sum");
  assert_string_equal(weft__op_name(WEFT_PROD), "prod");
  assert_string_equal(weft__op_name(WEFT_MAX), "max");
  assert_string_equal(weft__op_name(WEFT_MIN), "min");
  assert_string_equal(weft__op_name(WEFT_AVG), "avg");
  /* invalid values are ignored, not dereferenced */
  weft__reduce(NULL, NULL, NULL, 10, WEFT_NUM_DATATYPES, WEFT_SUM);
  weft__reduce(NULL, NULL, NULL, 10, WEFT_FLOAT32, WEFT_NUM_OPS);
  weft__avg_finalize(NULL, 10, (weft_datatype_t)-1, 2);
}

/* Tests that run once per SIMD level, then the level-independent ones. */
static const struct {
  const char *name;
  CMUnitTestFunction fn;
} per_level[] = {
    {"every_dtype_and_op_matches_scalar_reference", every_dtype_and_op_matches_scalar_reference},
    {"integer_sum_and_prod_wrap_around", integer_sum_and_prod_wrap_around},
    {"signed_and_unsigned_min_max_differ", signed_and_unsigned_min_max_differ},
    {"float_max_min_nan_follows_second_operand", float_max_min_nan_follows_second_operand},
    {"half_round_trips_all_65536_patterns", half_round_trips_all_65536_patterns},
    {"bf16_round_trips_all_65536_patterns", bf16_round_trips_all_65536_patterns},
    {"avg_reduce_then_finalize_matches_reference", avg_reduce_then_finalize_matches_reference},
    {"level_matches_generic_bit_for_bit", level_matches_generic_bit_for_bit},
    {"level_divide_matches_generic_bit_for_bit", level_divide_matches_generic_bit_for_bit},
    {"level_conversions_match_generic_for_every_pattern",
     level_conversions_match_generic_for_every_pattern},
};

/* weft__reduce_nt (the direct all-reduce's fused pass) gives the bits of weft__reduce
 * in rank order plus weft__avg_finalize, for every supported type and op, 2-4 inputs,
 * 1-3 outputs, any element alignment and count; writes nothing outside the outputs; and
 * declines what it does not handle (other ops and types, outputs of mixed alignment).
 * Values have full mantissas, so a different summation order would change the bits. */
static void fill_rounding(void *buf, size_t n, weft_datatype_t dt) {
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rng_next();
    double v = ((double)(r & 0xffffffffffull) / 1099511627776.0 - 0.5) * (double)(1u << ((r >> 40) & 7));
    if (dt == WEFT_FLOAT32) ((float *)buf)[i] = (float)v;
    else ((double *)buf)[i] = v;
  }
}

static void reduce_stream_matches_reduce_then_finalize(void **state) {
  enum { MAXC = 4099, PAD = 8 };
  static const size_t stream_counts[] = {0, 1, 5, 17, 1000, MAXC};
  static const weft_redop_t ops[] = {WEFT_SUM, WEFT_PROD, WEFT_AVG};
  static const weft_datatype_t dts[] = {WEFT_FLOAT32, WEFT_FLOAT64};
  for (int di = 0; di < 2; di++) {
    weft_datatype_t dt = dts[di];
    /* aligned_alloc wants a size that is a multiple of the alignment (C11; ASan aborts
     * otherwise): round the (MAXC + 2 PAD) elements up to whole 64-byte lines. */
    size_t es = weft__dtype_size(dt), bytes = ((MAXC + 2 * PAD) * es + 63) / 64 * 64;
    char *in_mem[4], *out_mem[3], *ref = aligned_alloc(64, bytes);
    for (int k = 0; k < 4; k++) in_mem[k] = aligned_alloc(64, bytes);
    for (int j = 0; j < 3; j++) out_mem[j] = aligned_alloc(64, bytes);
    for (int oi = 0; oi < 3; oi++)
      for (int nin = 2; nin <= 4; nin++)
        for (int nout = 1; nout <= 3; nout++)
          for (size_t ci = 0; ci < sizeof stream_counts / sizeof *stream_counts; ci++)
            for (size_t shift = 0; shift < 3; shift++) {
              size_t count = stream_counts[ci];
              char *in[4], *out[3];
              for (int k = 0; k < nin; k++) {
                fill_rounding(in_mem[k], MAXC + 2 * PAD, dt);
                in[k] = in_mem[k] + (PAD + (size_t)k) * es; /* inputs need no alignment */
              }
              for (int j = 0; j < nout; j++) {
                memset(out_mem[j], 0x5a, bytes);
                out[j] = out_mem[j] + (PAD + shift) * es;
              }
              memcpy(ref, in[0], count * es);
              for (int k = 1; k < nin; k++) weft__reduce(ref, ref, in[k], count, dt, ops[oi]);
              if (ops[oi] == WEFT_AVG) weft__avg_finalize(ref, count, dt, nin);
              assert_int_equal(weft__reduce_nt(out, nout, in, nin, count, dt, ops[oi]), 1);
              for (int j = 0; j < nout; j++) {
                if (memcmp(out[j], ref, count * es) != 0)
                  fail_msg("%s op %d, %d inputs, output %d of %d, count %zu, shift %zu: bits differ",
                           weft__dtype_name(dt), (int)ops[oi], nin, j, nout, count, shift);
                for (size_t b = 0; b < bytes; b++) {
                  size_t at = (size_t)(out[j] - out_mem[j]);
                  if ((b < at || b >= at + count * es) && (unsigned char)out_mem[j][b] != 0x5a)
                    fail_msg("%s: byte %zu outside output %d was written", weft__dtype_name(dt), b, j);
                }
              }
            }
    char *in2[2] = {in_mem[0], in_mem[1]}, *mixed[2] = {out_mem[0], out_mem[1] + es};
    assert_int_equal(weft__reduce_nt(mixed, 2, in2, 2, 100, dt, WEFT_SUM), 0);
    assert_int_equal(weft__reduce_nt(mixed, 1, in2, 2, 100, dt, WEFT_MAX), 0);
    free(ref);
    for (int k = 0; k < 4; k++) free(in_mem[k]);
    for (int j = 0; j < 3; j++) free(out_mem[j]);
  }
  char *in2[2] = {NULL, NULL}, *out1[1] = {NULL};
  assert_int_equal(weft__reduce_nt(out1, 1, in2, 2, 0, WEFT_INT32, WEFT_SUM), 0);
}

int main(void) {
  static const struct CMUnitTest once[] = {
      cmocka_unit_test(sizes_and_names_follow_nccl_tests),
      cmocka_unit_test(simd_level_follows_request_and_cpu),
      cmocka_unit_test(half_widens_all_65536_patterns_exactly),
      cmocka_unit_test(half_rounds_to_nearest_even),
      cmocka_unit_test(half_subnormals_round_correctly),
      cmocka_unit_test(bf16_rounds_to_nearest_even),
      cmocka_unit_test(avg_finalize_truncates_integers_toward_zero),
      cmocka_unit_test(avg_finalize_divides_floats_in_their_precision),
      cmocka_unit_test(reduce_stream_matches_reduce_then_finalize),
  };
  enum { n_once = sizeof once / sizeof once[0], n_per = sizeof per_level / sizeof per_level[0] };
  static weft__simd_t levels[WEFT__SIMD_NUM_LEVELS];
  struct CMUnitTest tests[n_once + n_per * WEFT__SIMD_NUM_LEVELS];
  size_t n = 0;
  memcpy(tests, once, sizeof once);
  n = n_once;
  for (int l = 0; l < WEFT__SIMD_NUM_LEVELS; l++) {
    levels[l] = (weft__simd_t)l;
    int have = weft__kernels_at(levels[l]) != NULL;
    for (size_t t = 0; t < n_per; t++) {
      /* A level the CPU lacks passes with a TAP SKIP directive in its name. */
      char *name = NULL;
      if (asprintf(&name, have ? "%s: %s" : "%s: %s # SKIP %s not supported by this CPU",
                   weft__simd_name(levels[l]), per_level[t].name,
                   weft__simd_name(levels[l])) < 0)
        return 1;
      tests[n++] = (struct CMUnitTest){.name = name, .test_func = per_level[t].fn,
                                       .initial_state = have ? &levels[l] : NULL};
    }
  }
  int failed = _cmocka_run_group_tests("test_reduce", tests, n, NULL, NULL);
  for (size_t t = n_once; t < n; t++) free((char *)tests[t].name);
  return failed;
}
