/* cuda_kernels_check.c: the device kernels (mem/cuda_kernels.cu) against the host kernels,
 * bit for bit, then a printed bandwidth benchmark. A TAP program.
 *
 * For every datatype and op, counts {1, 7, 1000, 2^20 + 3} and four layouts (all pointers
 * 16-byte aligned; all shifted by one element, so the kernels run a head and a tail; the
 * inputs shifted and the outputs not, so they run element by element; the output being
 * input a), fresh random inputs (floats with NaNs of both kinds, infinities, signed zeros
 * and subnormals; fp16 / bf16 values near each other, whose sums round) go through
 * weft__cuda_reduce, weft__cuda_avg (divisors 2, 3, 7) and weft__cuda_reduce_fanout
 * (nin 2, 3, 4, 8; nout 1, 2), and through weft__reduce, weft__avg_finalize and
 * weft__reduce_nt (or, where that declines, the pairwise weft__reduce fold and
 * weft__avg_finalize the direct all-reduce falls back to). Outputs are poisoned first, and
 * the comparison covers two elements past the end, so an element written twice, not at
 * all or out of bounds shows. The one difference accepted is the host's own freedom: a
 * sum, product or average that yields NaN may carry any NaN's payload. Which operand's
 * NaN x86 returns depends on the operand order the compiler chose per SIMD level (GCC 12
 * swaps them in the AVX2 / AVX-512 bf16 kernels, not in the generic ones), so a fold over
 * 8 inputs in which inf - inf makes a NaN that later meets an input NaN keeps either one;
 * the first GPU run showed exactly that in 3 of 110 checks.
 *
 * Without a CUDA device it prints "1..0 # SKIP ..." and exits 0; else it exits 1 when a
 * check failed. WEFT_SEED sets the seed; --floors runs the benchmark alone (the floors of
 * the collectives' benchmark). tests/gpu/gpu_check.sh runs it on the GPU machine. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "weft.h"
#include "lib/dtype.h"
#include "mem/cuda_kernels.h"
#include "mem/kernels.h"
#include "mem/reduce_nt.h"

#define MAX_COUNT ((1u << 20) + 3)
#define GUARD 2 /* elements compared past the end of every output */
#define NBUF (WEFT__CUDA_FANOUT_MAX + 2)
#define POISON 0xa5

#define CUDA_CHECK(call)                                                                       \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      printf("Bail out! %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

/* Layouts: where inputs and outputs start, in elements past a 256-byte aligned buffer. */
enum { ALIGNED, SHIFTED, MIXED, IN_PLACE, NUM_LAYOUTS };
static const char *const layout_names[] = {"aligned", "shifted", "mixed", "in place"};
static const int in_shift[] = {0, 1, 1, 0}, out_shift[] = {0, 1, 0, 0};
static const size_t counts[] = {1, 7, 1000, MAX_COUNT};
#define NCOUNTS (sizeof counts / sizeof counts[0])

static const weft_datatype_t dtypes[] = {WEFT_INT8,    WEFT_UINT8,   WEFT_INT32,   WEFT_UINT32,
                                         WEFT_INT64,   WEFT_UINT64,  WEFT_FLOAT16, WEFT_FLOAT32,
                                         WEFT_FLOAT64, WEFT_BFLOAT16};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

/* Every buffer holds MAX_COUNT elements of 8 bytes, plus a shift and the guard. */
static const size_t buf_bytes = (MAX_COUNT + 1 + GUARD) * 8;
static char *d_in[WEFT__CUDA_FANOUT_MAX], *d_out[2]; /* device */
static char *h_in[WEFT__CUDA_FANOUT_MAX], *h_out[2]; /* host: inputs as drawn (unshifted),
                                                        and the host's outputs laid out as
                                                        the device's */
static char *back;       /* a device output copied back */
static size_t nan_pairs; /* NaN elements where host and device carry different payloads */

static uint64_t rng_state;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* ---- Inputs ----------------------------------------------------------------------- */

/* A float of 'bits' bits with exp_bits exponent bits: 1 time in 32 each a NaN (random
 * payload, quiet or signalling, either sign), an infinity, a zero and a subnormal; for the
 * 16-bit types any pattern 1 time in 4; else a value within 2^+-3 of 1.0, so that sums of
 * neighbours round and products neither overflow nor vanish too fast. */
static uint64_t random_float_bits(int bits, int exp_bits) {
  int mant = bits - 1 - exp_bits;
  uint64_t r = rng(), sign = (r & 1) << (bits - 1), exp_max = (1ull << exp_bits) - 1;
  uint64_t m = rng() & ((1ull << mant) - 1), bias = exp_max >> 1;
  switch ((r >> 1) & 31) {
    case 0: return sign | exp_max << mant | (m ? m : 1); /* NaN */
    case 1: return sign | exp_max << mant;               /* infinity */
    case 2: return sign;                                 /* zero */
    case 3: return sign | m;                             /* subnormal */
    case 4: case 5: case 6: case 7: case 8: case 9: case 10: case 11:
      if (bits == 16) return rng() & 0xffff;
      /* fall through */
    default: return sign | (bias - 3 + ((r >> 8) % 7)) << mant | m;
  }
}

static void fill_random(char *p, size_t n, weft_datatype_t dt) {
  size_t es = weft__dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    uint64_t v;
    switch (dt) {
      case WEFT_FLOAT16: v = random_float_bits(16, 5); break;
      case WEFT_BFLOAT16: v = random_float_bits(16, 8); break;
      case WEFT_FLOAT32: v = random_float_bits(32, 8); break;
      case WEFT_FLOAT64: v = random_float_bits(64, 11); break;
      default: v = rng(); break; /* integers: any pattern, so sums and products wrap */
    }
    memcpy(p + i * es, &v, es); /* little-endian: the low bytes */
  }
}

/* Fills host inputs 0..nin-1 with n fresh elements each. */
static void draw(weft_datatype_t dt, size_t n, int nin) {
  for (int k = 0; k < nin; k++) fill_random(h_in[k], n, dt);
}

/* Poisons device buffer d's span and uploads host input k (if k >= 0) at shift. */
static void upload(char *d, int k, size_t n, int shift, size_t es) {
  CUDA_CHECK(cudaMemset(d, POISON, (n + 1 + GUARD) * es));
  if (k >= 0) CUDA_CHECK(cudaMemcpy(d + shift * es, h_in[k], n * es, cudaMemcpyHostToDevice));
}

/* ---- Comparing ------------------------------------------------------------------- */

static uint64_t element(const char *p, size_t i, size_t es) {
  uint64_t v = 0;
  memcpy(&v, p + i * es, es);
  return v;
}

static int is_nan(uint64_t v, weft_datatype_t dt) {
  switch (dt) {
    case WEFT_FLOAT16: return (v & 0x7fff) > 0x7c00;
    case WEFT_BFLOAT16: return (v & 0x7fff) > 0x7f80;
    case WEFT_FLOAT32: return (v & 0x7fffffffu) > 0x7f800000u;
    case WEFT_FLOAT64: return (v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default: return 0;
  }
}

/* The host's one freedom: a sum / prod / avg that is NaN on both sides may carry either
 * NaN's payload (see the top). min and max must match exactly. */
static int tolerated(weft_datatype_t dt, weft_redop_t op, int nin, size_t i, uint64_t dv, uint64_t hv) {
  (void)nin;
  (void)i;
  return op != WEFT_MAX && op != WEFT_MIN && is_nan(dv, dt) && is_nan(hv, dt);
}

/* Compares device buffer d with host image h over [0, shift + n + GUARD) elements; 0
 * when equal, else 1 with the first mismatch in msg. */
static int compare(const char *d, const char *h, size_t n, int shift, weft_datatype_t dt, weft_redop_t op,
                   int nin, char *msg, size_t msglen) {
  size_t es = weft__dtype_size(dt), span = (n + shift + GUARD) * es;
  CUDA_CHECK(cudaMemcpy(back, d, span, cudaMemcpyDeviceToHost));
  if (memcmp(back, h, span) == 0) return 0;
  for (size_t k = 0; k < n + shift + GUARD; k++) {
    uint64_t dv = element(back, k, es), hv = element(h, k, es);
    long i = (long)k - shift;
    if (dv == hv) continue;
    if (i >= 0 && (size_t)i < n && tolerated(dt, op, nin, (size_t)i, dv, hv)) {
      nan_pairs++;
      continue;
    }
    snprintf(msg, msglen, "element %ld%s: device 0x%0*llx, host 0x%0*llx", i,
             i < 0 || (size_t)i >= n ? " (outside the output)" : "", (int)(2 * es),
             (unsigned long long)dv, (int)(2 * es), (unsigned long long)hv);
    return 1;
  }
  return 0;
}

static void launched(int rc, const char *what) {
  if (rc != 0) {
    printf("Bail out! %s returned %d (%s)\n", what, rc, cudaGetErrorString((cudaError_t)rc));
    exit(1);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
}

/* ---- The three checks, one TAP line each -------------------------------------------- */

static int test_no, failures;

static void report(int failed, const char *what, const char *detail) {
  test_no++;
  failures += failed;
  if (failed) printf("not ok %d - %s: %s\n", test_no, what, detail);
  else printf("ok %d - %s\n", test_no, what);
  fflush(stdout);
}

/* Layouts the big count runs through (the others add nothing there but time). */
static int layout_wanted(int layout, size_t n) { return n < MAX_COUNT || layout <= SHIFTED; }

static void check_reduce(weft_datatype_t dt, weft_redop_t op) {
  size_t es = weft__dtype_size(dt);
  char detail[256] = "", where[128];
  int failed = 0;
  for (size_t c = 0; c < NCOUNTS && !failed; c++)
    for (int l = 0; l < NUM_LAYOUTS && !failed; l++) {
      size_t n = counts[c];
      int ish = in_shift[l], osh = out_shift[l];
      if (!layout_wanted(l, n)) continue;
      draw(dt, n, 2);
      upload(d_in[0], 0, n, ish, es);
      upload(d_in[1], 1, n, ish, es);
      upload(d_out[0], -1, n, osh, es);
      memset(h_out[0], POISON, (n + 1 + GUARD) * es);
      weft__reduce(h_out[0] + osh * es, h_in[0], h_in[1], n, dt, op);
      char *out = l == IN_PLACE ? d_in[0] : d_out[0];
      launched(weft__cuda_reduce(out + osh * es, d_in[0] + ish * es, d_in[1] + ish * es, n, dt, op, NULL),
               "weft__cuda_reduce");
      if (compare(out, h_out[0], n, osh, dt, op, 2, where, sizeof where)) {
        snprintf(detail, sizeof detail, "count %zu, %s: %s", n, layout_names[l], where);
        failed = 1;
      }
    }
  char what[64];
  snprintf(what, sizeof what, "reduce %s %s", weft__dtype_name(dt), weft__op_name(op));
  report(failed, what, detail);
}

static void check_avg(weft_datatype_t dt) {
  static const int divisors[] = {2, 3, 7};
  size_t es = weft__dtype_size(dt);
  char detail[256] = "", where[128];
  int failed = 0;
  for (size_t c = 0; c < NCOUNTS && !failed; c++)
    for (int sh = 0; sh <= 1 && !failed; sh++)
      for (int v = 0; v < 3 && !failed; v++) {
        size_t n = counts[c];
        draw(dt, n, 1);
        upload(d_in[0], 0, n, sh, es);
        memset(h_out[0], POISON, (n + 1 + GUARD) * es);
        memcpy(h_out[0] + sh * es, h_in[0], n * es);
        weft__avg_finalize(h_out[0] + sh * es, n, dt, divisors[v]);
        launched(weft__cuda_avg(d_in[0] + sh * es, n, dt, divisors[v], NULL), "weft__cuda_avg");
        if (compare(d_in[0], h_out[0], n, sh, dt, WEFT_AVG, 1, where, sizeof where)) {
          snprintf(detail, sizeof detail, "count %zu, shift %d, divisor %d: %s", n, sh, divisors[v], where);
          failed = 1;
        }
      }
  char what[64];
  snprintf(what, sizeof what, "avg %s", weft__dtype_name(dt));
  report(failed, what, detail);
}

/* The host's bits: weft__reduce_nt, or where it declines the pairwise fold the direct
 * all-reduce runs instead (algos/all_reduce/direct.c), which its header says it equals. */
static void host_fanout(char **out, int nout, int nin, size_t n, weft_datatype_t dt, weft_redop_t op) {
  if (weft__reduce_nt(out, nout, h_in, nin, n, dt, op)) return;
  weft__reduce(out[0], h_in[0], h_in[1], n, dt, op);
  for (int k = 2; k < nin; k++) weft__reduce(out[0], out[0], h_in[k], n, dt, op);
  if (op == WEFT_AVG) weft__avg_finalize(out[0], n, dt, nin);
  for (int j = 1; j < nout; j++) memcpy(out[j], out[0], n * weft__dtype_size(dt));
}

static int fanout_once(weft_datatype_t dt, weft_redop_t op, size_t n, int l, int nin, int nout, char *where,
                       size_t wlen) {
  size_t es = weft__dtype_size(dt);
  int ish = in_shift[l], osh = out_shift[l];
  char *ho[2], *di[WEFT__CUDA_FANOUT_MAX], *dout[2], *dbase[2];
  for (int j = 0; j < nout; j++) {
    dbase[j] = l == IN_PLACE && j == 0 ? d_in[0] : d_out[j];
    upload(dbase[j], l == IN_PLACE && j == 0 ? 0 : -1, n, ish, es);
    dout[j] = dbase[j] + osh * es;
    memset(h_out[j], POISON, (n + 1 + GUARD) * es);
    ho[j] = h_out[j] + osh * es;
  }
  for (int k = 0; k < nin; k++) di[k] = d_in[k] + ish * es;
  host_fanout(ho, nout, nin, n, dt, op);
  launched(weft__cuda_reduce_fanout(dout, nout, di, nin, n, dt, op, NULL), "weft__cuda_reduce_fanout");
  for (int j = 0; j < nout; j++)
    if (compare(dbase[j], h_out[j], n, osh, dt, op, nin, where, wlen)) return 1;
  return 0;
}

static void check_fanout(weft_datatype_t dt, weft_redop_t op) {
  static const int nins[] = {2, 3, 4, 8};
  size_t es = weft__dtype_size(dt);
  char detail[256] = "", where[128];
  int failed = 0;
  for (size_t c = 0; c < NCOUNTS && !failed; c++)
    for (int l = 0; l < NUM_LAYOUTS && !failed; l++) {
      size_t n = counts[c];
      if (!layout_wanted(l, n)) continue;
      draw(dt, n, WEFT__CUDA_FANOUT_MAX);
      for (int k = 0; k < WEFT__CUDA_FANOUT_MAX; k++) upload(d_in[k], k, n, in_shift[l], es);
      for (int v = 0; v < 4 && !failed; v++)
        for (int nout = 1; nout <= 2 && !failed; nout++)
          if (fanout_once(dt, op, n, l, nins[v], nout, where, sizeof where)) {
            snprintf(detail, sizeof detail, "count %zu, %s, nin %d, nout %d: %s", n, layout_names[l], nins[v],
                     nout, where);
            failed = 1;
          }
    }
  char what[64];
  snprintf(what, sizeof what, "reduce_fanout %s %s", weft__dtype_name(dt), weft__op_name(op));
  report(failed, what, detail);
}

/* ---- Benchmark (printed, not judged) ----------------------------------------------- */

#define BENCH_BYTES ((size_t)256 << 20)
#define BENCH_RUNS 20

typedef struct {
  int kind; /* 0: d2d copy, 1: reduce, 2: fanout */
  weft_datatype_t dt;
  char *a, *b, *c, *d;
  size_t shift; /* bytes added to every pointer (mixed: to the inputs only) */
  int mixed;
} bench;

static void launched_async(int rc) {
  if (rc != 0) {
    printf("Bail out! benchmark launch returned %d (%s)\n", rc, cudaGetErrorString((cudaError_t)rc));
    exit(1);
  }
}

static void bench_once(const bench *x) {
  size_t s = x->shift, sc = x->mixed ? 0 : s, n = (BENCH_BYTES - 64) / weft__dtype_size(x->dt);
  if (x->kind == 0) CUDA_CHECK(cudaMemcpyAsync(x->c, x->a, BENCH_BYTES, cudaMemcpyDeviceToDevice, 0));
  else if (x->kind == 1)
    launched_async(weft__cuda_reduce(x->c + sc, x->a + s, x->b + s, n, x->dt, WEFT_SUM, NULL));
  else {
    char *out[2] = {x->c + sc, x->d + sc}, *in[2] = {x->a + s, x->b + s};
    launched_async(weft__cuda_reduce_fanout(out, 2, in, 2, n, x->dt, WEFT_SUM, NULL));
  }
}

static int cmp_float(const void *p, const void *q) {
  float a = *(const float *)p, b = *(const float *)q;
  return a < b ? -1 : a > b;
}

/* GB/s (1e9 bytes) of the median of BENCH_RUNS runs, counting operands x 256 MiB. */
static double bench_gbps(const bench *x, int operands) {
  cudaEvent_t e0, e1;
  float ms[BENCH_RUNS];
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; i++) bench_once(x); /* warm-up */
  for (int i = 0; i < BENCH_RUNS; i++) {
    CUDA_CHECK(cudaEventRecord(e0, 0));
    bench_once(x);
    CUDA_CHECK(cudaEventRecord(e1, 0));
    CUDA_CHECK(cudaEventSynchronize(e1));
    CUDA_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  qsort(ms, BENCH_RUNS, sizeof ms[0], cmp_float);
  double med = (ms[BENCH_RUNS / 2 - 1] + ms[BENCH_RUNS / 2]) / 2;
  return (double)operands * BENCH_BYTES / (med * 1e-3) / 1e9;
}

static void benchmark(void) {
  char *p[4];
  for (int i = 0; i < 4; i++) {
    CUDA_CHECK(cudaMalloc((void **)&p[i], BENCH_BYTES));
    CUDA_CHECK(cudaMemset(p[i], 0x3c, BENCH_BYTES)); /* finite values of every type */
  }
  bench copy = {0, WEFT_FLOAT32, p[0], p[1], p[2], p[3], 0, 0};
  double floor = bench_gbps(&copy, 2);
  printf("# floor: d2d copy 256 MiB: %.1f GB/s (read+write)\n", floor);
  static const struct {
    int kind, operands;
    weft_datatype_t dt;
    size_t shift;
    int mixed;
    const char *name;
  } runs[] = {
      {1, 3, WEFT_FLOAT32, 0, 0, "reduce float32 sum c=a+b, 256 MiB per operand"},
      {2, 4, WEFT_FLOAT32, 0, 0, "reduce_fanout float32 sum nin=2 nout=2, 256 MiB per operand"},
      {1, 3, WEFT_BFLOAT16, 0, 0, "reduce bfloat16 sum c=a+b"},
      {1, 3, WEFT_FLOAT16, 0, 0, "reduce float16 sum c=a+b"},
      {1, 3, WEFT_FLOAT64, 0, 0, "reduce float64 sum c=a+b"},
      {1, 3, WEFT_INT8, 0, 0, "reduce int8 sum c=a+b"},
      {1, 3, WEFT_FLOAT32, 4, 0, "reduce float32 sum c=a+b, every pointer +4 bytes (head, vectors)"},
      {1, 3, WEFT_FLOAT32, 4, 1, "reduce float32 sum c=a+b, a and b +4 bytes (element by element)"},
  };
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    bench x = {runs[i].kind, runs[i].dt, p[0], p[1], p[2], p[3], runs[i].shift, runs[i].mixed};
    double g = bench_gbps(&x, runs[i].operands);
    printf("# %s: %.1f GB/s (%d x 256 MiB moved), %.0f%% of the copy floor\n", runs[i].name, g, runs[i].operands,
           100.0 * g / floor);
  }
  for (int i = 0; i < 4; i++) CUDA_CHECK(cudaFree(p[i]));
}

/* ---- main -------------------------------------------------------------------------- */

int main(int argc, char **argv) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("1..0 # SKIP no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return 0;
  }
  const char *seed = getenv("WEFT_SEED");
  rng_state = seed && *seed ? strtoull(seed, NULL, 0) : 0x9e3779b97f4a7c15ull;
  if (rng_state == 0) rng_state = 1;
  struct cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("# device 0: %s, %d multiprocessors; seed 0x%llx\n", prop.name, prop.multiProcessorCount,
         (unsigned long long)rng_state);
  if (argc > 1 && strcmp(argv[1], "--floors") == 0) { /* the benchmark alone: the collectives' floors */
    printf("1..1\n");
    benchmark();
    printf("ok 1 - floors measured\n");
    return 0;
  }
  for (int k = 0; k < WEFT__CUDA_FANOUT_MAX; k++) {
    CUDA_CHECK(cudaMalloc((void **)&d_in[k], buf_bytes));
    if (!(h_in[k] = malloc(buf_bytes))) return printf("Bail out! out of memory\n"), 1;
  }
  for (int j = 0; j < 2; j++) {
    CUDA_CHECK(cudaMalloc((void **)&d_out[j], buf_bytes));
    if (!(h_out[j] = malloc(buf_bytes))) return printf("Bail out! out of memory\n"), 1;
  }
  if (!(back = malloc(buf_bytes))) return printf("Bail out! out of memory\n"), 1;

  printf("1..%d\n", (int)(NDTYPES * WEFT_NUM_OPS * 2 + NDTYPES));
  for (size_t t = 0; t < NDTYPES; t++)
    for (int op = 0; op < WEFT_NUM_OPS; op++) check_reduce(dtypes[t], (weft_redop_t)op);
  for (size_t t = 0; t < NDTYPES; t++) check_avg(dtypes[t]);
  for (size_t t = 0; t < NDTYPES; t++)
    for (int op = 0; op < WEFT_NUM_OPS; op++) check_fanout(dtypes[t], (weft_redop_t)op);
  printf("# %zu NaN elements carried another NaN's payload than the host's (allowed)\n", nan_pairs);

  for (int k = 0; k < WEFT__CUDA_FANOUT_MAX; k++) CUDA_CHECK(cudaFree(d_in[k]));
  for (int j = 0; j < 2; j++) CUDA_CHECK(cudaFree(d_out[j]));
  benchmark();
  for (int k = 0; k < WEFT__CUDA_FANOUT_MAX; k++) free(h_in[k]);
  for (int j = 0; j < 2; j++) free(h_out[j]);
  free(back);
  return failures != 0;
}
