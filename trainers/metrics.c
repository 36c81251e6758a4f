/* trainers/metrics.c: peak FLOP/s, memory, the per-step CSV log and the loss plot; see
 * metrics.h.
 *
 * FMA loop: 12 independent accumulators, acc = acc * a + b, so each instruction waits on
 * nothing but its own chain; 12 chains cover the 4-cycle latency of 2 FMA ports. Each
 * vector FMA counts 2 FLOPs per lane. The widest unit wins (AVX-512 on a core that
 * double-pumps it gives about the AVX2 figure, which is the honest peak there).
 */
#include "trainers/metrics.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#define FMA_CHAINS 12

double gpt_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double gpt_peak_rss_mib(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru)) return 0.0;
  return ru.ru_maxrss / 1024.0; /* Linux reports KiB */
}

/* One FMA kernel per vector width; returns the sum so the loop is not optimised away. */
#define FMA_KERNEL(fn, isa, lanes)                                     \
  __attribute__((target(isa), noinline)) static float fn(long iters) { \
    typedef float vec __attribute__((vector_size(4 * (lanes))));       \
    vec acc[FMA_CHAINS], a, b;                                         \
    volatile float half = 0.5f; /* opaque, or GCC folds a chain */     \
    for (int i = 0; i < (lanes); i++) {                                \
      a[i] = half;                                                     \
      b[i] = 1.0f;                                                     \
    }                                                                  \
    for (int j = 0; j < FMA_CHAINS; j++) acc[j] = b * (float)(j + 3);  \
    for (long it = 0; it < iters; it++)                                \
      for (int j = 0; j < FMA_CHAINS; j++) acc[j] = acc[j] * a + b;    \
    float s = 0.0f;                                                    \
    for (int j = 0; j < FMA_CHAINS; j++)                               \
      for (int i = 0; i < (lanes); i++) s += acc[j][i];                \
    return s;                                                          \
  }

FMA_KERNEL(fma_avx512, "avx512f,fma", 16)
FMA_KERNEL(fma_avx2, "avx2,fma", 8)
FMA_KERNEL(fma_scalar, "sse2", 1)

/* Best of 80 short runs (about 1 ms each on AVX-512) of one kernel, in GFLOP/s: the best is
 * the one least disturbed by whatever else shares the core. Why so short: with the core
 * shared by a second busy process the scheduler's slices are a few ms, and 10 runs of 8 ms
 * each read 72-91 GFLOP/s on the Intel VM's core, which reaches 173-179 alone (SGEMM ran
 * 107-141 in the same start-ups); 80 of 1 ms read 176-179 (trainers/test_blas_core.c). */
static double time_fma(float (*fn)(long), int lanes) {
  const long iters = 500000;
  double best = 0.0;
  volatile float sink = fn(20 * iters); /* untimed ~20 ms first: the clock the unit settles at */
  for (int rep = 0; rep < 80; rep++) {
    double t0 = gpt_now_s();
    sink += fn(iters);
    double dt = gpt_now_s() - t0;
    double g = 2.0 * lanes * FMA_CHAINS * (double)iters / dt / 1e9;
    if (g > best) best = g;
  }
  (void)sink;
  return best;
}

double gpt_measure_sgemm(void) {
  const int n = 512;
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
        *c = malloc(sizeof(float) * n * n);
  double best = 0.0;
  if (!a || !b || !c) goto out;
  openblas_set_num_threads(1); /* as the trainers run it (backend_cpu.c), whoever calls first */
  for (int i = 0; i < n * n; i++) {
    a[i] = (float)(i % 7) * 0.1f;
    b[i] = (float)(i % 5) * 0.1f;
  }
  for (int rep = 0; rep < 10; rep++) {
    double t0 = gpt_now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double g = 2.0 * n * n * (double)n / (gpt_now_s() - t0) / 1e9;
    if (g > best) best = g;
  }
out:
  free(a);
  free(b);
  free(c);
  return best;
}

void gpt_measure_peak(gpt_peak *p) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    p->isa = "avx2";
    p->fma_gflops = time_fma(fma_avx2, 8);
  } else {
    p->isa = "scalar";
    p->fma_gflops = time_fma(fma_scalar, 1);
  }
  if (__builtin_cpu_supports("avx512f")) {
    double g = time_fma(fma_avx512, 16);
    if (g > p->fma_gflops * 1.05) p->fma_gflops = g, p->isa = "avx512";
  }
  p->sgemm_gflops = gpt_measure_sgemm();
}

void gpt_peak_given(double gflops, gpt_peak *p) { *p = (gpt_peak){gflops, gpt_measure_sgemm(), "given"}; }

FILE *gpt_log_open(const char *path, const char *extra_columns, char *err, size_t errlen) {
  FILE *f = fopen(path, "w");
  if (!f) {
    snprintf(err, errlen, "cannot write the step log %s: %s", path, strerror(errno));
    return NULL;
  }
  fprintf(f, "step,loss,val_loss,ms,tokens_per_s,mfu,comm_ms,exposed_comm_ms,peak_mib%s\n",
          extra_columns ? extra_columns : "");
  return f;
}

void gpt_log_row(FILE *f, const gpt_step_row *r, const double *extra, int nextra) {
  char val[32] = "";
  if (!isnan(r->val_loss)) snprintf(val, sizeof(val), "%.6f", r->val_loss);
  fprintf(f, "%ld,%.6f,%s,%.3f,%.1f,%.5f,%.3f,%.3f,%.1f", r->step, r->loss, val, r->ms, r->tokens_per_s, r->mfu,
          r->comm_ms, r->exposed_ms, r->peak_mib);
  for (int i = 0; i < nextra; i++) fprintf(f, ",%.5f", extra[i]);
  fputc('\n', f);
  fflush(f);
}

/* Fed to "python3 - CSV PNG TITLE" on stdin, so the trainer needs no file beside it. */
static const char plot_script[] =
    "import sys, csv\n"
    "try:\n"
    "    import matplotlib\n"
    "    matplotlib.use('Agg')\n"
    "    import matplotlib.pyplot as plt\n"
    "    from matplotlib.ticker import MaxNLocator\n"
    "except Exception as e:\n"
    "    sys.stderr.write('matplotlib not available: %s\\n' % e); sys.exit(3)\n"
    "rows = list(csv.DictReader(open(sys.argv[1])))\n"
    "s = [int(r['step']) for r in rows]\n"
    "plt.figure(figsize=(7, 4.5))\n"
    "plt.plot(s, [float(r['loss']) for r in rows], label='train loss')\n"
    "v = [(int(r['step']), float(r['val_loss'])) for r in rows if r['val_loss']]\n"
    "if v: plt.plot([a for a, b in v], [b for a, b in v], 'o-', label='validation loss')\n"
    "plt.gca().xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers\n"
    "plt.xlabel('step'); plt.ylabel('cross-entropy (nats/char)'); plt.title(sys.argv[3])\n"
    "plt.grid(alpha=0.3); plt.legend(); plt.tight_layout(); plt.savefig(sys.argv[2], dpi=100)\n";

/* Runs the script with one interpreter; returns its exit status (-1: could not run). */
static int run_plot(const char *python, const char *csv, const char *png, const char *title) {
  char cmd[4096];
  snprintf(cmd, sizeof(cmd), "%s - '%s' '%s' '%s' 2>/dev/null", python, csv, png, title);
  FILE *p = popen(cmd, "w");
  if (!p) return -1;
  fputs(plot_script, p);
  int st = pclose(p);
  return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

int gpt_plot_loss(const char *csv, const char *png, const char *title, char *msg, size_t msglen) {
  /* Single quotes around each argument; a quote inside one would break out, so refuse it. */
  if (strchr(csv, '\'') || strchr(png, '\'') || strchr(title, '\'')) {
    snprintf(msg, msglen, "plot skipped: a path contains a quote");
    return -1;
  }
  /* The python3 first on PATH may be a virtualenv without matplotlib; the system one
   * often has it. */
  int st = run_plot("python3", csv, png, title);
  if (st != 0) st = run_plot("/usr/bin/python3", csv, png, title);
  if (st != 0) {
    snprintf(msg, msglen, "plot skipped: no python3 with matplotlib (exit %d)", st);
    return -1;
  }
  snprintf(msg, msglen, "loss plot written to %s", png);
  return 0;
}
