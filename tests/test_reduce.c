/* test_reduce.c: unit tests of the reduction kernels and the fp16/bf16 conversions
 * (lib/reduce.c, lib/half.c, lib/dtype.c), in one process.
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
#include "lib/dtype.h"

static const size_t counts[] = {0, 1, 7, 33, 4097};

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
static void check_one(weft_datatype_t dt, weft_redop_t op, size_t n, int mode) {
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
  weft__reduce(dst, a, b, n, dt, op);
  for (size_t i = 0; i < n * size; i++) {
    if (dst[i] != ref[i])
      fail_msg("%s %s count %zu mode %d: byte %zu (element %zu) is 0x%02x, expected 0x%02x",
               weft__dtype_name(dt), weft__op_name(op), n, mode, i, i / size,
               (unsigned char)dst[i], (unsigned char)ref[i]);
  }
  assert_int_equal(dst[n * size], 0x5a);
  free(a); free(b); free(d); free(ref);
}

static void every_dtype_and_op_matches_scalar_reference(void **state) {
  for (int dt = 0; dt < WEFT_NUM_DATATYPES; dt++)
    for (int op = 0; op < WEFT_NUM_OPS; op++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int mode = 0; mode < 3; mode++) check_one(dt, op, counts[c], mode);
}

static void integer_sum_and_prod_wrap_around(void **state) {
  int8_t i8a[2] = {127, -128}, i8b[2] = {1, -1};
  weft__reduce(i8a, i8a, i8b, 2, WEFT_INT8, WEFT_SUM);
  assert_int_equal(i8a[0], -128);
  assert_int_equal(i8a[1], 127);
  int8_t p8a[1] = {-128}, p8b[1] = {-1};
  weft__reduce(p8a, p8a, p8b, 1, WEFT_INT8, WEFT_PROD);
  assert_int_equal(p8a[0], -128);
  uint8_t u8a[2] = {200, 255}, u8b[2] = {2, 255}, u8d[2];
  weft__reduce(u8d, u8a, u8b, 2, WEFT_UINT8, WEFT_PROD);
  assert_int_equal(u8d[0], 144); /* 400 mod 256 */
  assert_int_equal(u8d[1], 1);   /* 65025 mod 256 */
  int32_t i32a[1] = {INT32_MAX}, i32b[1] = {1};
  weft__reduce(i32a, i32a, i32b, 1, WEFT_INT32, WEFT_SUM);
  assert_int_equal(i32a[0], INT32_MIN);
  int64_t i64a[1] = {INT64_MAX}, i64b[1] = {2};
  weft__reduce(i64a, i64a, i64b, 1, WEFT_INT64, WEFT_PROD);
  assert_true(i64a[0] == -2);
  uint64_t u64a[1] = {UINT64_MAX}, u64b[1] = {1};
  weft__reduce(u64a, u64a, u64b, 1, WEFT_UINT64, WEFT_AVG);
  assert_true(u64a[0] == 0);
}

static void signed_and_unsigned_min_max_differ(void **state) {
  int8_t a[1] = {-1}, b[1] = {1}, d[1];
  weft__reduce(d, a, b, 1, WEFT_INT8, WEFT_MAX);
  assert_int_equal(d[0], 1);
  weft__reduce(d, a, b, 1, WEFT_UINT8, WEFT_MAX); /* 0xff as uint8 is 255 */
  assert_int_equal(d[0], -1);
  int64_t x[1] = {INT64_MIN}, y[1] = {0}, z[1];
  weft__reduce(z, x, y, 1, WEFT_INT64, WEFT_MIN);
  assert_true(z[0] == INT64_MIN);
  weft__reduce(z, x, y, 1, WEFT_UINT64, WEFT_MIN);
  assert_true(z[0] == 0);
}

/* The documented behaviour: a NaN in b is returned, a NaN in a is dropped; of +0 and -0
 * (equal), b is returned. */
static void float_max_min_nan_follows_second_operand(void **state) {
  float nan = f32_from_bits(0x7fc00000u), one = 1.0f;
  float a[2] = {nan, one}, b[2] = {one, nan}, d[2];
  weft__reduce(d, a, b, 2, WEFT_FLOAT32, WEFT_MAX);
  assert_true(d[0] == 1.0f);
  assert_true(isnan(d[1]));
  weft__reduce(d, a, b, 2, WEFT_FLOAT32, WEFT_MIN);
  assert_true(d[0] == 1.0f);
  assert_true(isnan(d[1]));
  float pz[1] = {0.0f}, nz[1] = {-0.0f}, z[1];
  weft__reduce(z, pz, nz, 1, WEFT_FLOAT32, WEFT_MAX); /* equal: b is returned */
  assert_true(signbit(z[0]));
  weft__reduce(z, nz, pz, 1, WEFT_FLOAT32, WEFT_MIN);
  assert_false(signbit(z[0]));
  uint16_t h[2] = {0x7e00, 0x3c00}, g[2] = {0x3c00, 0x7e00}, o[2];
  weft__reduce(o, h, g, 2, WEFT_FLOAT16, WEFT_MAX);
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

static void half_round_trips_all_65536_patterns(void **state) {
  uint16_t in[65536], back[65536];
  float wide[65536];
  for (uint32_t h = 0; h < 65536; h++) in[h] = (uint16_t)h;
  weft__half_to_float_n(wide, in, 65536);
  weft__float_to_half_n(back, wide, 65536);
  for (uint32_t h = 0; h < 65536; h++) {
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
  uint16_t in[65536], back[65536];
  float wide[65536];
  for (uint32_t b = 0; b < 65536; b++) in[b] = (uint16_t)b;
  weft__bf16_to_float_n(wide, in, 65536);
  weft__float_to_bf16_n(back, wide, 65536);
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
  enum { n = 1000 };
  uint16_t a[n], b[n], d[n];
  fill_random(a, n, WEFT_FLOAT16);
  fill_random(b, n, WEFT_FLOAT16);
  weft__reduce(d, a, b, n, WEFT_FLOAT16, WEFT_AVG);
  weft__avg_finalize(d, n, WEFT_FLOAT16, 2);
  for (int i = 0; i < n; i++) {
    float s = weft__half_to_float(weft__float_to_half(weft__half_to_float(a[i]) +
                                                      weft__half_to_float(b[i])));
    assert_int_equal(d[i], weft__float_to_half(s / 2.0f));
  }
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sizes_and_names_follow_nccl_tests),
      cmocka_unit_test(every_dtype_and_op_matches_scalar_reference),
      cmocka_unit_test(integer_sum_and_prod_wrap_around),
      cmocka_unit_test(signed_and_unsigned_min_max_differ),
      cmocka_unit_test(float_max_min_nan_follows_second_operand),
      cmocka_unit_test(half_widens_all_65536_patterns_exactly),
      cmocka_unit_test(half_round_trips_all_65536_patterns),
      cmocka_unit_test(bf16_round_trips_all_65536_patterns),
      cmocka_unit_test(half_rounds_to_nearest_even),
      cmocka_unit_test(half_subnormals_round_correctly),
      cmocka_unit_test(bf16_rounds_to_nearest_even),
      cmocka_unit_test(avg_finalize_truncates_integers_toward_zero),
      cmocka_unit_test(avg_finalize_divides_floats_in_their_precision),
      cmocka_unit_test(avg_reduce_then_finalize_matches_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
