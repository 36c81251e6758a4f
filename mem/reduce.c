/* reduce.c: the element-wise reduction kernels (dst = a op b) and the final division of
 * WEFT_AVG, for every datatype and operation.
 *
 * These loops sit on the data path of every reducing collective and are memory-bandwidth
 * bound, so each (type, op) pair is its own tight loop that GCC -O3 auto-vectorizes, and
 * the switch over type and op happens once per call, through a table, never per element.
 *
 * Run-time dispatch: this file holds the generic level (baseline ISA) and picks, once,
 * the kernel table to use: the best of generic, AVX2 (+FMA+F16C) and AVX-512
 * (F/BW/VL/DQ) that the CPU supports (__builtin_cpu_supports, which also checks that the
 * OS saves the wide registers), or the level WEFT_SIMD=generic|avx2|avx512 asks for.
 * mem/reduce_simd.c fills the SIMD tables; every level gives the generic bits.
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
 * - When sum or prod meets a NaN in both operands, the result is a quiet NaN whose
 *   payload is either operand's (the compiler may commute the operation); every level
 *   gives otherwise identical bits.
 * - fp16 and bf16 widen each element to fp32, apply the op in fp32, and round back to
 *   nearest-even. They run in blocks of BLOCK elements through stack arrays so that the
 *   conversion loops (half.c) and the fp32 op loop each vectorize. */
#include <pthread.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#include <string.h>
#include <strings.h>
#include "mem/kernels.h"
#include "lib/env.h"
#include "lib/log.h"

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

DEFINE_BLOCK_LOOPS(f16, weft__half_to_float_n_generic, weft__float_to_half_n_generic)
DEFINE_BLOCK_LOOPS(bf16, weft__bf16_to_float_n_generic, weft__float_to_bf16_n_generic)

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

/* The conversions are the level in use's (they give the same bits on every level). */
#define DEFINE_BLOCK_DIVIDE(name, WIDEN, NARROW)               \
  static void name(void *buf, size_t n, int nranks) {          \
    const struct weft__kernels *kern = weft__kernels();        \
    uint16_t *p = buf;                                         \
    const float k = (float)nranks;                             \
    float f[BLOCK];                                            \
    for (size_t i = 0; i < n; i += BLOCK) {                    \
      size_t m = n - i < BLOCK ? n - i : BLOCK;                \
      kern->WIDEN(f, p + i, m);                                \
      for (size_t j = 0; j < m; j++) f[j] /= k;                \
      kern->NARROW(p + i, f, m);                               \
    }                                                          \
  }

DEFINE_BLOCK_DIVIDE(divide_f16, half_to_float_n, float_to_half_n)
DEFINE_BLOCK_DIVIDE(divide_bf16, bf16_to_float_n, float_to_bf16_n)

/* Indexed [datatype][op]; the op order is weft_redop_t's: sum prod max min avg. */
static const struct weft__kernels generic_kernels = {
    .level = WEFT__SIMD_GENERIC,
    .reduce =
        {
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
        },
    .divide =
        {
            [WEFT_INT8] = divide_i8,       [WEFT_UINT8] = divide_u8,     [WEFT_INT32] = divide_i32,
            [WEFT_UINT32] = divide_u32,    [WEFT_INT64] = divide_i64,    [WEFT_UINT64] = divide_u64,
            [WEFT_FLOAT16] = divide_f16,   [WEFT_FLOAT32] = divide_f32,  [WEFT_FLOAT64] = divide_f64,
            [WEFT_BFLOAT16] = divide_bf16,
        },
    .half_to_float_n = weft__half_to_float_n_generic,
    .bf16_to_float_n = weft__bf16_to_float_n_generic,
    .float_to_half_n = weft__float_to_half_n_generic,
    .float_to_bf16_n = weft__float_to_bf16_n_generic,
};

static const char *const level_names[WEFT__SIMD_NUM_LEVELS] = {"generic", "avx2", "avx512"};

const char *weft__simd_name(weft__simd_t level) {
  if ((unsigned)level >= WEFT__SIMD_NUM_LEVELS) return "unknown";
  return level_names[level];
}

#if defined(__x86_64__) && defined(__GNUC__)
/* Clang's __builtin_cpu_supports does not know "f16c"; CPUID leaf 1 tells it (the AVX2
 * check above it has already confirmed that the OS saves the YMM registers). */
static int cpu_has_f16c(void) {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
}
#endif

int weft__simd_supported(weft__simd_t level) {
  if (level == WEFT__SIMD_GENERIC) return 1;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init(); /* needed only before constructors run; cheap and idempotent */
  int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             cpu_has_f16c();
  if (level == WEFT__SIMD_AVX2) return avx2;
  if (level == WEFT__SIMD_AVX512)
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
  return 0;
}

static weft__simd_t best_supported_at_most(weft__simd_t level) {
  while (level > WEFT__SIMD_GENERIC && !weft__simd_supported(level)) level--;
  return level;
}

weft__simd_t weft__simd_choose(const char *request, int *unknown) {
  if (unknown) *unknown = 0;
  if (!request || !*request) return best_supported_at_most(WEFT__SIMD_NUM_LEVELS - 1);
  for (int l = 0; l < WEFT__SIMD_NUM_LEVELS; l++)
    if (strcasecmp(request, level_names[l]) == 0) return best_supported_at_most(l);
  if (unknown) *unknown = 1;
  return best_supported_at_most(WEFT__SIMD_NUM_LEVELS - 1);
}

/* Built once by init_kernels; a level whose table stays unfilled is unsupported. */
static struct weft__kernels simd_kernels[WEFT__SIMD_NUM_LEVELS];
static int simd_filled[WEFT__SIMD_NUM_LEVELS];
static const struct weft__kernels *active;
static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;

static void init_kernels(void) {
  simd_kernels[WEFT__SIMD_GENERIC] = generic_kernels;
  simd_filled[WEFT__SIMD_GENERIC] = 1;
  for (int l = WEFT__SIMD_GENERIC + 1; l < WEFT__SIMD_NUM_LEVELS; l++) {
    simd_filled[l] = weft__simd_supported(l) && weft__simd_fill(&simd_kernels[l], l);
    for (int dt = 0; dt < WEFT_NUM_DATATYPES; dt++) /* the integer divisions: generic */
      if (simd_kernels[l].divide[dt] == NULL) simd_kernels[l].divide[dt] = generic_kernels.divide[dt];
  }
  const char *request = weft__env_str("WEFT_SIMD", NULL);
  int unknown;
  weft__simd_t level = weft__simd_choose(request, &unknown);
  while (!simd_filled[level]) level--; /* a CPU level this build has no kernels for */
  if (unknown)
    WEFT_WARN("WEFT_SIMD=%s is not one of generic, avx2, avx512; using %s", request,
              level_names[level]);
  else if (request && strcasecmp(request, level_names[level]) != 0)
    WEFT_WARN("WEFT_SIMD=%s is not supported by this CPU; using %s", request,
              level_names[level]);
  WEFT_INFO("reduction kernels: %s", level_names[level]);
  __atomic_store_n(&active, &simd_kernels[level], __ATOMIC_RELEASE);
}

const struct weft__kernels *weft__kernels(void) {
  const struct weft__kernels *k = __atomic_load_n(&active, __ATOMIC_ACQUIRE);
  if (k) return k;
  pthread_once(&kernels_once, init_kernels);
  return active;
}

const struct weft__kernels *weft__kernels_at(weft__simd_t level) {
  if ((unsigned)level >= WEFT__SIMD_NUM_LEVELS) return NULL;
  weft__kernels();
  return simd_filled[level] ? &simd_kernels[level] : NULL;
}

void weft__reduce(void *dst, const void *a, const void *b, size_t count, weft_datatype_t dt,
                  weft_redop_t op) {
  /* Callers validate their arguments; this only keeps a bad value from indexing past
   * the table. */
  if (count == 0 || !weft__dtype_valid(dt) || !weft__op_valid(op)) return;
  weft__kernels()->reduce[dt][op](dst, a, b, count);
}

void weft__avg_finalize(void *buf, size_t count, weft_datatype_t dt, int nranks) {
  /* Dividing by 1 changes nothing; nranks < 1 is a caller bug that must not trap. */
  if (count == 0 || nranks <= 1 || !weft__dtype_valid(dt)) return;
  weft__kernels()->divide[dt](buf, count, nranks);
}
