/* trainers/pipeline_report.c: what weft-train-pipeline prints and logs; see pipeline.h.
 *
 * The CSV has weft-train-ddp's columns (so metrics.c's plot reads it) plus bubble and
 * bubble_theory.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainers/pipeline.h"

static double mfu(const pp_trainer *t, double tokens_per_s) {
  return gpt_flops_per_token(&t->base.m->cfg) * tokens_per_s / (t->nranks * t->peak.fma_gflops * 1e9);
}

static double theory(const pp_trainer *t) { return pp_bubble_theory(t->nranks, t->f.M); }

static void print_stages(const pp_trainer *t) {
  int P = t->nranks, L = t->base.m->cfg.layers, first, n;
  pp_op *ops = calloc((size_t)2 * t->f.M, sizeof(pp_op));
  if (!ops) return;
  for (int s = 0; s < P; s++) {
    pp_stage_blocks(L, P, s, &first, &n);
    int nops = pp_schedule_ops(t->f.sched, s, P, t->f.M, ops);
    printf("#   stage %d: blocks %d..%d%s%s, up to %d microbatch(es) in flight\n", s, first, first + n - 1,
           s == 0 ? " + embeddings" : "", s == P - 1 ? " + final LN, tied head" : "",
           pp_max_in_flight(ops, nops));
  }
  free(ops);
}

static void print_header(const pp_trainer *t) {
  const gpt_config *c = &t->base.m->cfg;
  printf("# weft-train-pipeline: %d stages, schedule %s, %s, vocab %d\n", t->nranks,
         pp_schedule_name(t->f.sched), t->base.o.data, c->vocab);
  printf("# model: layers %d dmodel %d heads %d seq %d, %zu params\n", c->layers, c->dmodel, c->heads, c->seq,
         t->base.m->lay.total);
  printf("# microbatch %d x %d microbatches = %d sequences (%d tokens) per step; messages of %.2f MiB\n",
         t->base.o.batch, t->f.M, t->G, t->G * c->seq, t->stage.msg * 4.0 / (1024 * 1024));
  print_stages(t);
  if (t->peak.sgemm_gflops > 0)
    printf("# peak per rank: FMA loop %.1f GFLOP/s (%s), sgemm 512^3 %.1f GFLOP/s\n", t->peak.fma_gflops,
           t->peak.isa, t->peak.sgemm_gflops);
  else
    printf("# peak per rank: %.1f GFLOP/s (given)\n", t->peak.fma_gflops);
  printf("# %.3f MFLOP/token; MFU = that x tokens/s / (%d ranks x peak), bubbles count as lost time\n",
         gpt_flops_per_token(c) / 1e6, t->nranks);
  printf(
      "# comm_ms: time in weft calls (p2p, wte and norm exchange), mean over stages; expo_ms: its part\n"
      "# beyond the ideal bubble; bubble: comm / step time, mean over stages; ideal (P-1)/(M+P-1) = %.1f%%\n",
      100.0 * theory(t));
  printf("%6s %10s %8s %8s %9s %6s %8s %8s %8s %7s %7s\n", "step", "loss", "gnorm", "ms", "tok/s", "MFU",
         "comm_ms", "expo_ms", "peakMiB", "bubble", "ideal");
}

int pp_report_open(pp_trainer *t, char *err, size_t errlen) {
  if (strcmp(t->f.log, "none")) {
    t->log = fopen(t->f.log, "w");
    if (!t->log) {
      snprintf(err, errlen, "cannot write the step log %s: %s", t->f.log, strerror(errno));
      return -1;
    }
    fprintf(t->log,
            "step,loss,val_loss,ms,tokens_per_s,mfu,comm_ms,exposed_comm_ms,peak_mib,bubble,bubble_theory\n");
  }
  print_header(t);
  return 0;
}

/* Means over stages of the wait, of the wait beyond the ideal bubble, of the bubble, and
 * the largest stage's memory. */
typedef struct stage_means {
  double wait_s, expo_s, bubble, mib;
} stage_means;

static stage_means means(const pp_trainer *t, const pp_step *s) {
  stage_means m = {0};
  int P = t->nranks;
  for (int i = 0; i < P; i++) {
    m.wait_s += s->wait_s[i] / P;
    m.expo_s += fmax(0.0, s->wait_s[i] - theory(t) * s->time_s[i]) / P;
    m.bubble += s->time_s[i] > 0 ? s->wait_s[i] / s->time_s[i] / P : 0.0;
    m.mib = fmax(m.mib, s->mib[i]);
  }
  return m;
}

static void log_row(const pp_trainer *t, const pp_step *s, double tps, const stage_means *m) {
  char val[32] = "";
  if (!isnan(s->val_loss)) snprintf(val, sizeof(val), "%.6f", s->val_loss);
  fprintf(t->log, "%ld,%.6f,%s,%.3f,%.1f,%.5f,%.3f,%.3f,%.1f,%.5f,%.5f\n", t->base.st.step, s->loss, val,
          s->ms, tps, mfu(t, tps), m->wait_s * 1e3, m->expo_s * 1e3, m->mib, m->bubble, theory(t));
  fflush(t->log);
}

void pp_report_step(pp_trainer *t, const pp_step *s) {
  pp_totals *tot = &t->tot;
  int first = tot->steps == 0;
  double dt = s->ms / 1e3, tps = (double)t->G * t->base.m->cfg.seq / dt;
  tot->step_s[tot->steps++] = dt;
  tot->s += dt;
  tot->s_after_first += first ? 0.0 : dt;
  /* Step 1 pays the page faults of every activation set, so the bubble totals restart
   * at step 2 (they hold step 1 only while it is the only one). */
  if (tot->steps <= 2) {
    memset(tot->wait_s, 0, (size_t)t->nranks * sizeof(double));
    memset(tot->time_s, 0, (size_t)t->nranks * sizeof(double));
  }
  for (int i = 0; i < t->nranks; i++) {
    tot->wait_s[i] += s->wait_s[i];
    tot->time_s[i] += s->time_s[i];
  }
  stage_means m = means(t, s);
  tot->peak_mib = m.mib;
  if (t->rank != 0) return;
  printf("%6ld %10.6f %8.4f %8.1f %9.0f %5.1f%% %8.1f %8.1f %8.1f %6.1f%% %6.1f%%\n", t->base.st.step,
         s->loss, s->gnorm, s->ms, tps, 100.0 * mfu(t, tps), m.wait_s * 1e3, m.expo_s * 1e3, m.mib,
         100.0 * m.bubble, 100.0 * theory(t));
  if (!isnan(s->val_loss)) printf("%6ld val_loss %.6f\n", t->base.st.step, s->val_loss);
  fflush(stdout);
  if (t->log) log_row(t, s, tps, &m);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void summary_bubble(const pp_trainer *t) {
  const pp_totals *tot = &t->tot;
  double mean = 0.0, wait = 0.0;
  printf("# bubble per stage%s:", tot->steps > 1 ? " (steps 2..)" : "");
  for (int i = 0; i < t->nranks; i++) {
    double b = tot->time_s[i] > 0 ? tot->wait_s[i] / tot->time_s[i] : 0.0;
    mean += b / t->nranks;
    wait += tot->wait_s[i] / t->nranks;
    printf(" %.1f%%", 100.0 * b);
  }
  int n = tot->steps > 1 ? tot->steps - 1 : tot->steps;
  printf("; mean %.1f%% measured vs %.1f%% ideal (P-1)/(M+P-1) = %d/%d, %s\n", 100.0 * mean,
         100.0 * theory(t), t->nranks - 1, t->f.M + t->nranks - 1, pp_schedule_name(t->f.sched));
  printf("# comm (waiting in weft calls) %.1f ms/step per stage; peak memory %.1f MiB on the largest stage\n",
         wait * 1e3 / n, tot->peak_mib);
}

void pp_report_summary(const pp_trainer *t) {
  const pp_totals *tot = &t->tot;
  if (tot->steps == 0) return;
  double tokens = (double)t->G * t->base.m->cfg.seq, tps = tokens * tot->steps / tot->s;
  printf("# summary: %d steps in %.2f s, %.0f tokens/s, MFU %.1f%% of the peak", tot->steps, tot->s, tps,
         100.0 * mfu(t, tps));
  if (t->peak.sgemm_gflops > 0)
    printf(" (%.1f%% of what sgemm reaches)",
           100.0 * mfu(t, tps) * t->peak.fma_gflops / t->peak.sgemm_gflops);
  printf("\n");
  if (tot->steps > 1) {
    double tps1 = tokens * (tot->steps - 1) / tot->s_after_first;
    printf("# without step 1 (warm-up): %.0f tokens/s, MFU %.1f%%\n", tps1, 100.0 * mfu(t, tps1));
  }
  double *sorted = malloc((size_t)tot->steps * sizeof(double));
  if (sorted) {
    memcpy(sorted, tot->step_s, (size_t)tot->steps * sizeof(double));
    qsort(sorted, (size_t)tot->steps, sizeof(double), cmp_double);
    double med = sorted[tot->steps / 2];
    printf("# median step %.1f ms: %.0f tokens/s, MFU %.1f%%\n", med * 1e3, tokens / med,
           100.0 * mfu(t, tokens / med));
    free(sorted);
  }
  summary_bubble(t);
  printf("# tied wte identical on stages 0 and %d; final val_loss %.6f\n", t->nranks - 1, tot->last_val);
}

void pp_report_plot(pp_trainer *t) {
  if (!t->log) return;
  fclose(t->log);
  t->log = NULL;
  if (!t->f.plot || !strcmp(t->f.plot, "none")) return;
  char title[160], msg[512];
  snprintf(title, sizeof(title), "weft-train-pipeline, %d stages, %s, M=%d, %d tokens/step", t->nranks,
           pp_schedule_name(t->f.sched), t->f.M, t->G * t->base.m->cfg.seq);
  gpt_plot_loss(t->f.log, t->f.plot, title, msg, sizeof(msg));
  printf("# log %s; %s\n", t->f.log, msg);
}
