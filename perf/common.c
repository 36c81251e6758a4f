/*
 * common.c: element values of weft's nccl-tests-compatible benchmarks: the inputs each
 * rank gives and the exact results every datatype must hold (perf/common.h). The harness
 * itself is in perf/sweep.c (sizes, timing, validation), perf/options.c (flags) and
 * perf/output.c (nccl-tests' text and JSON).
 */
#include "perf/common.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------------------
 * fp16 / bf16 conversions (round to nearest-even), local because the library's are
 * internal.
 * ------------------------------------------------------------------------------------ */

static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  uint32_t sign = (x >> 16) & 0x8000, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) /* inf, NaN (kept quiet) */
    return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0));
  if (a >= 0x477ff000u) /* >= 65520 rounds to inf */
    return (uint16_t)(sign | 0x7c00);
  if (a < 0x38800000u) { /* below 2^-14: a subnormal half, in units of 2^-24 */
    float af;
    memcpy(&af, &a, sizeof(af));
    return (uint16_t)(sign | (uint32_t)lrintf(af * 16777216.0f));
  }
  uint32_t h = (((a >> 23) - 112) << 10) | ((a >> 13) & 0x3ff), rem = a & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
    h++; /* a carry into the exponent is still the right encoding */
  return (uint16_t)(sign | h);
}

static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float v = e == 0 ? ldexpf((float)m, -24)
                   : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), e - 25);
  return (h & 0x8000) ? -v : v;
}

static uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static float bf16_to_float(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, sizeof(f));
  return f;
}

/* ------------------------------------------------------------------------------------
 * Element values
 * ------------------------------------------------------------------------------------ */

void perf_store(void *buf, size_t i, weft_datatype_t type, double v) {
  switch (type) {
  case WEFT_INT8: ((int8_t *)buf)[i] = (int8_t)(int64_t)v; break;
  case WEFT_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
  case WEFT_INT32: ((int32_t *)buf)[i] = (int32_t)(int64_t)v; break;
  case WEFT_UINT32: ((uint32_t *)buf)[i] = (uint32_t)(int64_t)v; break;
  case WEFT_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case WEFT_UINT64: ((uint64_t *)buf)[i] = (uint64_t)(int64_t)v; break;
  case WEFT_FLOAT16: ((uint16_t *)buf)[i] = float_to_half((float)v); break;
  case WEFT_FLOAT32: ((float *)buf)[i] = (float)v; break;
  case WEFT_FLOAT64: ((double *)buf)[i] = v; break;
  case WEFT_BFLOAT16: ((uint16_t *)buf)[i] = float_to_bf16((float)v); break;
  default: break;
  }
}

double perf_load(const void *buf, size_t i, weft_datatype_t type) {
  switch (type) {
  case WEFT_INT8: return ((const int8_t *)buf)[i];
  case WEFT_UINT8: return ((const uint8_t *)buf)[i];
  case WEFT_INT32: return ((const int32_t *)buf)[i];
  case WEFT_UINT32: return ((const uint32_t *)buf)[i];
  case WEFT_INT64: return (double)((const int64_t *)buf)[i];
  case WEFT_UINT64: return (double)((const uint64_t *)buf)[i];
  case WEFT_FLOAT16: return half_to_float(((const uint16_t *)buf)[i]);
  case WEFT_FLOAT32: return ((const float *)buf)[i];
  case WEFT_FLOAT64: return ((const double *)buf)[i];
  case WEFT_BFLOAT16: return bf16_to_float(((const uint16_t *)buf)[i]);
  default: return 0;
  }
}

static int type_is_unsigned(weft_datatype_t t) {
  return t == WEFT_UINT8 || t == WEFT_UINT32 || t == WEFT_UINT64;
}

static int type_is_integer(weft_datatype_t t) { return t <= WEFT_UINT64; }

double perf_input_value(weft_datatype_t type, weft_redop_t op, int rank, size_t i) {
  size_t r = (size_t)rank;
  switch (op) {
  case WEFT_PROD: /* rank r doubles element i iff 11 | i + r: <= 3 twos over 32 ranks */
    return (i + r) % 11 == 0 ? 2 : 1;
  case WEFT_MAX:
  case WEFT_MIN: {
    double v = (double)((r * 5 + i * 3) % 13);
    return type_is_unsigned(type) ? v : v - 6;
  }
  default: /* sum, avg: 0..3, so 32 ranks sum to <= 96: exact in int8 and bf16 */
    return (double)((r * 3 + i * 7) % 4);
  }
}

/* v wrapped modulo 2^bits into type's range, as weft's integer sum and prod wrap. */
static double wrap_integer(weft_datatype_t type, double v) {
  char tmp[8];
  perf_store(tmp, 0, type, v);
  return perf_load(tmp, 0, type);
}

double perf_reduce_value(weft_datatype_t type, weft_redop_t op, int nranks, size_t i) {
  double acc = perf_input_value(type, op, 0, i);
  for (int r = 1; r < nranks; r++) {
    double v = perf_input_value(type, op, r, i);
    switch (op) {
    case WEFT_PROD: acc *= v; break;
    case WEFT_MAX: acc = v > acc ? v : acc; break;
    case WEFT_MIN: acc = v < acc ? v : acc; break;
    default: acc += v; break;
    }
  }
  if (type_is_integer(type))
    acc = wrap_integer(type, acc);
  if (op != WEFT_AVG)
    return acc;
  /* avg divides once at the end in the type's arithmetic: integers truncate, float
   * and fp16/bf16 divide in fp32 (the final store rounds fp16/bf16), double in fp64 */
  if (type_is_integer(type))
    return trunc(acc / nranks);
  if (type == WEFT_FLOAT64)
    return acc / nranks;
  return (double)((float)acc / (float)nranks);
}

/* Every pattern of perf_input_value repeats in i with period 4, 11 or 13, and
 * perf_move_value's with period 113. */
#define VALUE_PERIOD (4 * 11 * 13)
#define MOVE_PERIOD 113

/* Copies buf's first `period` elements over the rest, doubling each time. */
static void tile_period(void *buf, size_t n, weft_datatype_t type, size_t period) {
  size_t es = weft_datatype_size(type), done = n < period ? n : period;
  while (done < n) {
    size_t len = done < n - done ? done : n - done;
    memcpy((char *)buf + done * es, buf, len * es);
    done += len;
  }
}

void perf_fill_input(void *buf, size_t n, weft_datatype_t type, weft_redop_t op, int rank,
                     size_t first) {
  for (size_t i = 0; i < n && i < VALUE_PERIOD; i++)
    perf_store(buf, i, type, perf_input_value(type, op, rank, first + i));
  tile_period(buf, n, type, VALUE_PERIOD);
}

void perf_fill_reduced(void *buf, size_t n, weft_datatype_t type, weft_redop_t op, int nranks,
                       size_t first) {
  for (size_t i = 0; i < n && i < VALUE_PERIOD; i++)
    perf_store(buf, i, type, perf_reduce_value(type, op, nranks, first + i));
  tile_period(buf, n, type, VALUE_PERIOD);
}

double perf_move_value(weft_datatype_t type, int rank, size_t i) {
  double v = (double)(((size_t)rank * 31 + i * 7) % MOVE_PERIOD); /* <= 112: exact in bf16 */
  return type_is_unsigned(type) ? v : v - 56;
}

void perf_fill_moved(void *buf, size_t n, weft_datatype_t type, int rank, size_t first) {
  for (size_t i = 0; i < n && i < MOVE_PERIOD; i++)
    perf_store(buf, i, type, perf_move_value(type, rank, first + i));
  tile_period(buf, n, type, MOVE_PERIOD);
}

void *perf_elem(void *buf, size_t i, weft_datatype_t type) {
  return (char *)buf + i * weft_datatype_size(type);
}
