/* trainers/trainer_report.c: header, per-step line, summary, CSV log and plot of the
 * distributed trainers; see trainer_report.h. */
#include "trainers/trainer_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainers/blas_core.h"

int gpt_report_init(gpt_report *r, int steps) {
  r->tot = (gpt_totals){.first_val = NAN, .last_val = NAN};
  r->tot.step_s = calloc((size_t)steps + 1, sizeof(double));
  return r->tot.step_s ? 0 : -1;
}

void gpt_report_free(gpt_report *r) {
  if (r->log) fclose(r->log);
  r->log = NULL;
  free(r->tot.step_s);
  r->tot.step_s = NULL;
}

double gpt_report_mfu(const gpt_report *r, double tokens_per_s) {
  return r->flops_per_token * tokens_per_s / (r->nranks * r->peak.fma_gflops * 1e9);
}

int gpt_report_open_log(gpt_report *r, const char *path, const char *extra_columns, char *err, size_t errlen) {
  if (r->rank != 0 || !strcmp(path, "none")) return 0;
  r->log = gpt_log_open(path, extra_columns, err, errlen);
  return r->log ? 0 : -1;
}

void gpt_report_title(const gpt_report *r, const char *prog, const char *data, int vocab) {
  printf("# %s: %d ranks, %s, vocab %d\n", prog, r->nranks, data, vocab);
}

void gpt_report_peak(const gpt_report *r, int with_share, const char *fpt_note, const char *mfu_note) {
  const gpt_peak *p = &r->peak;
  char blas[320];
  gpt_blas_describe(blas, sizeof(blas));
  if (strcmp(p->isa, "given"))
    printf("# peak per rank: FMA loop %.1f GFLOP/s (%s)", p->fma_gflops, p->isa);
  else
    printf("# peak per rank: %.1f GFLOP/s (given)", p->fma_gflops);
  if (p->sgemm_gflops > 0) printf(", sgemm 512^3 %.1f GFLOP/s", p->sgemm_gflops);
  if (p->sgemm_gflops > 0 && with_share && strcmp(p->isa, "given"))
    printf(" = %.0f%% of it", 100.0 * p->sgemm_gflops / p->fma_gflops);
  printf(" on %s\n", blas);
  printf("# %.3f MFLOP/token%s; MFU = that x tokens/s / (%d rank%s x peak)%s\n", r->flops_per_token / 1e6,
         fpt_note, r->nranks, r->nranks == 1 ? "" : "s", mfu_note);
}

void gpt_report_columns(const char *mid, const char *end) {
  printf("%6s %10s%s %8s %8s %9s %6s %8s %8s %8s%s\n", "step", "loss", mid, "gnorm", "ms", "tok/s", "MFU",
         "comm_ms", "expo_ms", "peakMiB", end);
}

gpt_step_row gpt_report_row(const gpt_report *r, long step, double loss, double dt, double comm_s, double exposed_s,
                            double peak_mib) {
  double tps = r->tokens_per_step / dt;
  return (gpt_step_row){step, loss, NAN, dt * 1e3, tps, gpt_report_mfu(r, tps), comm_s * 1e3, exposed_s * 1e3,
                        peak_mib};
}

void gpt_report_add(gpt_report *r, double dt, double comm_s, double exposed_s, double peak_mib) {
  gpt_totals *t = &r->tot;
  t->s_after_first += t->steps > 0 ? dt : 0.0;
  t->step_s[t->steps++] = dt;
  t->s += dt;
  t->comm_s += comm_s;
  t->exposed_s += exposed_s;
  t->peak_mib = peak_mib;
}

void gpt_report_eval(gpt_report *r, double val_loss) {
  if (isnan(r->tot.first_val)) r->tot.first_val = val_loss;
  r->tot.last_val = val_loss;
}

const char *gpt_report_val_text(double val_loss, char *buf, size_t n) {
  if (isnan(val_loss)) snprintf(buf, n, "none (no evaluation ran)");
  else snprintf(buf, n, "%.6f", val_loss);
  return buf;
}

void gpt_report_line(const gpt_report *r, const gpt_step_row *row, double gnorm, const char *mid, const char *end) {
  if (r->rank != 0) return;
  printf("%6ld %10.6f%s %8.4f %8.1f %9.0f %5.1f%% %8.1f %8.1f %8.1f%s\n", row->step, row->loss, mid, gnorm, row->ms,
         row->tokens_per_s, 100.0 * row->mfu, row->comm_ms, row->exposed_ms, row->peak_mib, end);
  fflush(stdout);
}

void gpt_report_val_log(gpt_report *r, const gpt_step_row *row, const double *extra, int nextra) {
  if (r->rank != 0) return;
  if (!isnan(row->val_loss)) printf("%6ld val_loss %.6f\n", row->step, row->val_loss);
  fflush(stdout);
  if (r->log) gpt_log_row(r->log, row, extra, nextra);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median step time, from a sorted copy (the order of step_s is kept). */
static double median_step_s(const gpt_totals *t) {
  double *sorted = malloc((size_t)t->steps * sizeof(double));
  if (!sorted) return t->s / t->steps;
  memcpy(sorted, t->step_s, (size_t)t->steps * sizeof(double));
  qsort(sorted, (size_t)t->steps, sizeof(double), cmp_double);
  double med = sorted[t->steps / 2];
  free(sorted);
  return med;
}

void gpt_report_throughput(const gpt_report *r, const char *mfu_note) {
  const gpt_totals *t = &r->tot;
  double tokens = r->tokens_per_step, tps = tokens * t->steps / t->s, mfu = gpt_report_mfu(r, tps);
  printf("# summary: %d steps in %.2f s, %.0f tokens/s, MFU %.1f%%", t->steps, t->s, tps, 100.0 * mfu);
  if (mfu_note) {
    printf(" %s\n", mfu_note);
  } else {
    printf(" of the peak");
    if (r->peak.sgemm_gflops > 0)
      printf(" (%.1f%% of what sgemm reaches)", 100.0 * mfu * r->peak.fma_gflops / r->peak.sgemm_gflops);
    printf("\n");
  }
  if (t->steps > 1) {
    double tps1 = tokens * (t->steps - 1) / t->s_after_first;
    printf("# without step 1 (warm-up): %.0f tokens/s, MFU %.1f%%\n", tps1, 100.0 * gpt_report_mfu(r, tps1));
  }
  double med = median_step_s(t);
  printf("# median step %.1f ms: %.0f tokens/s, MFU %.1f%%\n", med * 1e3, tokens / med,
         100.0 * gpt_report_mfu(r, tokens / med));
}

void gpt_report_comm(const gpt_report *r) {
  const gpt_totals *t = &r->tot;
  printf("# comm %.1f ms/step, exposed %.1f ms/step (%.0f%% hidden behind compute), %.0f%% of step time "
         "exposed\n",
         t->comm_s * 1e3 / t->steps, t->exposed_s * 1e3 / t->steps,
         t->comm_s > t->exposed_s ? 100.0 * (1.0 - t->exposed_s / t->comm_s) : 0.0, 100.0 * t->exposed_s / t->s);
}

void gpt_report_plot(gpt_report *r, const char *log_path, const char *plot, const char *title) {
  if (r->rank != 0 || !r->log) return;
  fclose(r->log);
  r->log = NULL;
  if (!plot || !strcmp(plot, "none")) return;
  char msg[512];
  gpt_plot_loss(log_path, plot, title, msg, sizeof(msg));
  printf("# log %s; %s\n", log_path, msg);
}
