/* trainers/metrics.h: what the distributed weft trainers measure and report.
 *
 * MFU (model FLOPs utilisation, PaLM appendix B) needs a peak to divide by. Instead of a
 * datasheet number we measure it at start-up: a loop of independent fused multiply-adds in
 * the widest vector unit the CPU has (the FMA peak), and a square cblas_sgemm (what a real
 * matrix product reaches, so MFU can be read against both). Then one CSV row per step, and
 * a PNG of training and validation loss drawn by python3 + matplotlib when present.
 */
#ifndef WEFT_TRAINERS_METRICS_H
#define WEFT_TRAINERS_METRICS_H

#include <stddef.h>
#include <stdio.h>

typedef struct gpt_peak {
  double fma_gflops;   /* fp32 FMA peak of one core, measured */
  double sgemm_gflops; /* one-thread cblas_sgemm on 512^3 */
  const char *isa;     /* vector unit the FMA loop ran on: "avx512", "avx2" or "scalar" */
} gpt_peak;

/* Measures both (about 0.3 s on an AVX-512 core). Call it on every rank at once, so it sees the same sharing
 * of the cores that training will. */
void gpt_measure_peak(gpt_peak *p);
/* A peak the user gave (--peak-gflops, GFLOP/s per core), marked "given" in isa, with the
 * SGEMM rate still measured: what the kernels reach is worth its line (about 30 ms). */
void gpt_peak_given(double gflops, gpt_peak *p);
/* The best of 10 one-thread cblas_sgemm on 512^3, in GFLOP/s (about 30 ms on an AVX-512
 * core): what the matrix products reach on the kernels OpenBLAS runs (blas_core.h). */
double gpt_measure_sgemm(void);

double gpt_now_s(void);
/* The process's peak resident set so far, in MiB. */
double gpt_peak_rss_mib(void);

/* One training step as the logs record it; val_loss is NaN on steps without evaluation. */
typedef struct gpt_step_row {
  long step;
  double loss, val_loss, ms, tokens_per_s, mfu, comm_ms, exposed_ms, peak_mib;
} gpt_step_row;

/* Opens the CSV log (header written; extra_columns, e.g. ",bubble,bubble_theory", or NULL,
 * appended to it) or returns NULL with the reason in err. */
FILE *gpt_log_open(const char *path, const char *extra_columns, char *err, size_t errlen);
/* One row; nextra more values (of the extra columns) follow with 5 decimals. */
void gpt_log_row(FILE *f, const gpt_step_row *r, const double *extra, int nextra);

/* Draws training and validation loss of a CSV log into png. Returns 0, or -1 with the
 * reason in msg (no python3 or no matplotlib: the plot is then simply skipped). */
int gpt_plot_loss(const char *csv, const char *png, const char *title, char *msg, size_t msglen);

#endif
