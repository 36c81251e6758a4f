/* reduce.c: the element-wise reduction kernels (dst = a op b) and the final division of
 * WEFT_AVG, for every datatype and operation.
 *
 * These loops sit on the data path of every reducing collective and are memory-bandwidth
 * bound, so each (type, op) pair is its own tight loop that GCC -O3 auto-vectorizes, and
 * the switch over type and op happens once per call, through a table, never per element.
 * No `restrict`: dst may be exactly a or b (in-place reductions), and GCC's run-time alias
 * check still takes the vector path when the pointers are equal.
 *
 * Semantics (weft.h, as NCCL):
 * - Integer sum and prod wrap modulo 2^bits. Signed types run the unsigned loop on the
 *   same bytes: two's complement wrapping gives identical bits without signed-overflow UB.
 * - WEFT_AVG reduces like WEFT_SUM; weft__avg_finalize divides once at the end.
 * - Floating max/min are `a > b ? a : b` and `a < b ? a : b`, the semantics of x86
 *   maxps/minps, which lets them vectorize without -ffast-math. NaN handling is therefore
 *   order dependent: a NaN in b is returned, a NaN in a is dropped in favour of b. Between
 *   +0 and -0 (equal) b is returned.
 * - fp16 and bf16 widen each element to fp32, apply the op in fp32, and round back to
 *   nearest-even. They run in blocks of BLOCK elements through stack arrays so that the
 *   conversion loops (half.c) and the fp32 op loop each vectorize. */
#include "lib/dtype.h"

typedef void (*reduce_fn)(void *dst, const void *a, const void *b, size_t n);
typedef void (*divide_fn)(void *buf, size_t n, int nranks);

#define OP_SUM(p, q) ((p) + (q))
#define OP_PROD(p, q) ((p) * (q))
#define OP_MAX(p, q) ((p) > (q) ? (p) : (q))
#define OP_MIN(p, q) ((p) < (q) ? (p) : (q))

/* The cast narrows the int that uint8_t arithmetic is promoted to; it is where the
 * wrap-around of 8-bit sums and products happens. */
#define DEFINE_LOOP(name, T, OP)                                        \
  static void name(void *dst, const void *a, const void *b, size_t n) { \
    T *d = dst;                                                         \
    const T *x = a, *y = b;                                             \
    for (size_t i = 0; i < n; i++) d[i] = (T)OP(x[i], y[i]);            \
  }

#define DEFINE_LOOPS(sfx, T)             \
  DEFINE_LOOP(sum_##sfx, T, OP_SUM)      \
  DEFINE_LOOP(prod_##sfx, T, OP_PROD)    \
  DEFINE_LOOP(max_##sfx, T, OP_MAX)      \
  DEFINE_LOOP(min_##sfx, T, OP_MIN)

DEFINE_LOOPS(u8, uint8_t)
DEFINE_LOOPS(u32, uint32_t)
DEFINE_LOOPS(u64, uint64_t)
DEFINE_LOOPS(f32, float)
DEFINE_LOOPS(f64, double)
/* Signed types need their own comparisons only; sum and prod use the unsigned loops. */
DEFINE_LOOP(max_i8, int8_t, OP_MAX)
DEFINE_LOOP(min_i8, int8_t, OP_MIN)
DEFINE_LOOP(max_i32, int32_t, OP_MAX)
DEFINE_LOOP(min_i32, int32_t, OP_MIN)
DEFINE_LOOP(max_i64, int64_t, OP_MAX)
DEFINE_LOOP(min_i64, int64_t, OP_MIN)

/* 256 elements: two fp32 blocks are 2 KiB of stack, well inside L1, and long enough
 * that the three calls per block cost nothing next to the work. */
#define BLOCK 256

/* The widened blocks are loaded before dst is written, so dst == a or dst == b is safe. */
#define DEFINE_BLOCK_LOOP(name, WIDEN, NARROW, OP)                      \
  static void name(void *dst, const void *a, const void *b, size_t n) { \
    uint16_t *d = dst;                                                  \
    const uint16_t *x = a, *y = b;                                      \
    float fx[BLOCK], fy[BLOCK];                                         \
    for (size_t i = 0; i < n; i += BLOCK) {                             \
      size_t m = n - i < BLOCK ? n - i : BLOCK;                         \
      WIDEN(fx, x + i, m);                                              \
      WIDEN(fy, y + i, m);                                              \
      for (size_t j = 0; j < m; j++) fx[j] = OP(fx[j], fy[j]);          \
      NARROW(d + i, fx, m);                                             \
    }                                                                   \
  }

#define DEFINE_BLOCK_LOOPS(sfx, WIDEN, NARROW)          \
  DEFINE_BLOCK_LOOP(sum_##sfx, WIDEN, NARROW, OP_SUM)   \
  DEFINE_BLOCK_LOOP(prod_##sfx, WIDEN, NARROW, OP_PROD) \
  DEFINE_BLOCK_LOOP(max_##sfx, WIDEN, NARROW, OP_MAX)   \
  DEFINE_BLOCK_LOOP(min_##sfx, WIDEN, NARROW, OP_MIN)

DEFINE_BLOCK_LOOPS(f16, weft__half_to_float_n, weft__float_to_half_n)
DEFINE_BLOCK_LOOPS(bf16, weft__bf16_to_float_n, weft__float_to_bf16_n)

/* Indexed [datatype][op]; the op order is weft_redop_t's: sum prod max min avg. */
static const reduce_fn reduce_table[WEFT_NUM_DATATYPES][WEFT_NUM_OPS] = {
    [WEFT_INT8] = {sum_u8, prod_u8, max_i8, min_i8, sum_u8},
    [WEFT_UINT8] = {sum_u8, prod_u8, max_u8, min_u8, sum_u8},
    [WEFT_INT32] = {sum_u32, prod_u32, max_i32, min_i32, sum_u32},
    [WEFT_UINT32] = {sum_u32, prod_u32, max_u32, min_u32, sum_u32},
    [WEFT_INT64] = {sum_u64, prod_u64, max_i64, min_i64, sum_u64},
    [WEFT_UINT64] = {sum_u64, prod_u64, max_u64, min_u64, sum_u64},
    [WEFT_FLOAT16] = {sum_f16, prod_f16, max_f16, min_f16, sum_f16},
    [WEFT_FLOAT32] = {sum_f32, prod_f32, max_f32, min_f32, sum_f32},
    [WEFT_FLOAT64] = {sum_f64, prod_f64, max_f64, min_f64, sum_f64},
    [WEFT_BFLOAT16] = {sum_bf16, prod_bf16, max_bf16, min_bf16, sum_bf16},
};

void weft__reduce(void *dst, const void *a, const void *b, size_t count, weft_datatype_t dt,
                  weft_redop_t op) {
  /* Callers validate their arguments; this only keeps a bad value from indexing past
   * the table. */
  if (count == 0 || !weft__dtype_valid(dt) || !weft__op_valid(op)) return;
  reduce_table[dt][op](dst, a, b, count);
}

/* Division by nranks in the element's own type D (C's `/` truncates toward zero for
 * integers). Floating types divide rather than multiply by 1/nranks so the result is
 * the correctly rounded quotient. */
#define DEFINE_DIVIDE(name, T, D)                             \
  static void name(void *buf, size_t n, int nranks) {        \
    T *p = buf;                                               \
    const D k = (D)nranks;                                    \
    for (size_t i = 0; i < n; i++) p[i] = (T)(p[i] / k);      \
  }

DEFINE_DIVIDE(divide_i8, int8_t, int)
DEFINE_DIVIDE(divide_u8, uint8_t, unsigned)
DEFINE_DIVIDE(divide_i32, int32_t, int32_t)
DEFINE_DIVIDE(divide_u32, uint32_t, uint32_t)
DEFINE_DIVIDE(divide_i64, int64_t, int64_t)
DEFINE_DIVIDE(divide_u64, uint64_t, uint64_t)
DEFINE_DIVIDE(divide_f32, float, float)
DEFINE_DIVIDE(divide_f64, double, double)

#define DEFINE_BLOCK_DIVIDE(name, WIDEN, NARROW)               \
  static void name(void *buf, size_t n, int nranks) {          \
    uint16_t *p = buf;                                         \
    const float k = (float)nranks;                             \
    float f[BLOCK];                                            \
    for (size_t i = 0; i < n; i += BLOCK) {                    \
      size_t m = n - i < BLOCK ? n - i : BLOCK;                \
      WIDEN(f, p + i, m);                                      \
      for (size_t j = 0; j < m; j++) f[j] /= k;                \
      NARROW(p + i, f, m);                                     \
    }                                                          \
  }

DEFINE_BLOCK_DIVIDE(divide_f16, weft__half_to_float_n, weft__float_to_half_n)
DEFINE_BLOCK_DIVIDE(divide_bf16, weft__bf16_to_float_n, weft__float_to_bf16_n)

static const divide_fn divide_table[WEFT_NUM_DATATYPES] = {
    [WEFT_INT8] = divide_i8,       [WEFT_UINT8] = divide_u8,     [WEFT_INT32] = divide_i32,
    [WEFT_UINT32] = divide_u32,    [WEFT_INT64] = divide_i64,    [WEFT_UINT64] = divide_u64,
    [WEFT_FLOAT16] = divide_f16,   [WEFT_FLOAT32] = divide_f32,  [WEFT_FLOAT64] = divide_f64,
    [WEFT_BFLOAT16] = divide_bf16,
};

void weft__avg_finalize(void *buf, size_t count, weft_datatype_t dt, int nranks) {
  /* Dividing by 1 changes nothing; nranks < 1 is a caller bug that must not trap. */
  if (count == 0 || nranks <= 1 || !weft__dtype_valid(dt)) return;
  divide_table[dt](buf, count, nranks);
}
