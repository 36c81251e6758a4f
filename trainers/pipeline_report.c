/* trainers/pipeline_report.c: what weft-train-pipeline prints and logs; see pipeline.h.
 *
 * The line, summary and CSV are the other trainers' (trainer_report.h) plus the bubble:
 * two more columns (bubble, ideal) and two more CSV fields (bubble, bubble_theory), so
 * metrics.c's plot reads the log as it reads weft-train-ddp's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainers/pipeline.h"

static double theory(const pp_trainer *t) { return pp_bubble_theory(t->dist.nranks, t->f.M); }

static void print_stages(const pp_trainer *t) {
  int P = t->dist.nranks, L = t->base.m->cfg.layers, first, n;
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
  printf("# weft-train-pipeline: %d stages, schedule %s, %s, vocab %d\n", t->dist.nranks,
         pp_schedule_name(t->f.sched), t->base.o.data, c->vocab);
  printf("# model: layers %d dmodel %d heads %d seq %d, %zu params\n", c->layers, c->dmodel, c->heads, c->seq,
         t->base.m->lay.total);
  printf("# microbatch %d x %d microbatches = %d sequences (%d tokens) per step; messages of %.2f MiB\n",
         t->base.o.batch, t->f.M, t->G, t->G * c->seq, t->stage.msg * 4.0 / (1024 * 1024));
  print_stages(t);
  gpt_ckpt_print_origin(&t->base.from, t->G, 0);
  gpt_report_peak(&t->rep, 0, "", ", bubbles count as lost time");
  printf(
      "# comm_ms: time in weft calls (p2p, wte and norm exchange), mean over stages; expo_ms: its part\n"
      "# beyond the ideal bubble; bubble: comm / step time, mean over stages; ideal (P-1)/(M+P-1) = %.1f%%\n",
      100.0 * theory(t));
  char end[32];
  snprintf(end, sizeof(end), " %7s %7s", "bubble", "ideal");
  gpt_report_columns("", end);
}

void pp_report_header(const void *self) { print_header(self); }

/* Means over stages of the wait, of the wait beyond the ideal bubble, of the bubble, and
 * the largest stage's memory. */
typedef struct stage_means {
  double wait_s, expo_s, bubble, mib;
} stage_means;

static stage_means means(const pp_trainer *t, const pp_step *s) {
  stage_means m = {0};
  int P = t->dist.nranks;
  for (int i = 0; i < P; i++) {
    m.wait_s += s->wait_s[i] / P;
    m.expo_s += fmax(0.0, s->wait_s[i] - theory(t) * s->time_s[i]) / P;
    m.bubble += s->time_s[i] > 0 ? s->wait_s[i] / s->time_s[i] / P : 0.0;
    m.mib = fmax(m.mib, s->mib[i]);
  }
  return m;
}

void pp_report_step(pp_trainer *t, const pp_step *s) {
  double dt = s->ms / 1e3;
  /* Step 1 pays the page faults of every activation set, so the bubble totals restart
   * at step 2 (they hold step 1 only while it is the only one). */
  if (t->rep.tot.steps < 2) {
    memset(t->wait_s, 0, (size_t)t->dist.nranks * sizeof(double));
    memset(t->time_s, 0, (size_t)t->dist.nranks * sizeof(double));
  }
  for (int i = 0; i < t->dist.nranks; i++) {
    t->wait_s[i] += s->wait_s[i];
    t->time_s[i] += s->time_s[i];
  }
  stage_means m = means(t, s);
  gpt_report_add(&t->rep, dt, m.wait_s, m.expo_s, m.mib);
  gpt_step_row row = gpt_report_row(&t->rep, t->base.st.step, s->loss, dt, m.wait_s, m.expo_s, m.mib);
  row.ms = s->ms;
  row.val_loss = s->val_loss;
  double extra[2] = {m.bubble, theory(t)};
  char end[32];
  snprintf(end, sizeof(end), " %6.1f%% %6.1f%%", 100.0 * m.bubble, 100.0 * theory(t));
  gpt_report_line(&t->rep, &row, s->gnorm, "", end);
  gpt_report_val_log(&t->rep, &row, extra, 2);
}

static void summary_bubble(const pp_trainer *t) {
  const gpt_totals *tot = &t->rep.tot;
  double mean = 0.0, wait = 0.0;
  printf("# bubble per stage%s:", tot->steps > 1 ? " (steps 2..)" : "");
  for (int i = 0; i < t->dist.nranks; i++) {
    double b = t->time_s[i] > 0 ? t->wait_s[i] / t->time_s[i] : 0.0;
    mean += b / t->dist.nranks;
    wait += t->wait_s[i] / t->dist.nranks;
    printf(" %.1f%%", 100.0 * b);
  }
  int n = tot->steps > 1 ? tot->steps - 1 : tot->steps;
  printf("; mean %.1f%% measured vs %.1f%% ideal (P-1)/(M+P-1) = %d/%d, %s\n", 100.0 * mean,
         100.0 * theory(t), t->dist.nranks - 1, t->f.M + t->dist.nranks - 1, pp_schedule_name(t->f.sched));
  printf("# comm (waiting in weft calls) %.1f ms/step per stage; peak memory %.1f MiB on the largest stage\n",
         wait * 1e3 / n, tot->peak_mib);
}

void pp_report_summary(const pp_trainer *t) {
  if (t->rep.tot.steps == 0) return;
  gpt_report_throughput(&t->rep, NULL);
  summary_bubble(t);
  char val[32];
  printf("# tied wte identical on stages 0 and %d; final val_loss %s\n", t->dist.nranks - 1,
         gpt_report_val_text(t->rep.tot.last_val, val, sizeof(val)));
}

void pp_report_plot(pp_trainer *t) {
  char title[160];
  snprintf(title, sizeof(title), "weft-train-pipeline, %d stages, %s, M=%d, %d tokens/step", t->dist.nranks,
           pp_schedule_name(t->f.sched), t->f.M, t->G * t->base.m->cfg.seq);
  gpt_report_plot(&t->rep, t->f.c.log, t->f.c.plot, title);
}
