/* trainers/pipeline.h: the state of weft-train-pipeline (pipeline.c) and its reporting
 * (pipeline_report.c: header, per-step line, summary, CSV log and loss plot).
 *
 * What is measured, per stage and step: step time (batch draw to AdamW), and wait time =
 * time inside weft calls (the p2p groups, the wte gradient exchange, the norm all-reduce),
 * when the stage has nothing to compute. Measured bubble = wait / step time, averaged over
 * stages, printed beside the ideal (P-1)/(M+P-1). expo_ms is the wait beyond that ideal:
 * transfers, stage imbalance and noise that a perfect pipeline would not pay. Tokens/s
 * use rank 0's whole step, so MFU = FLOPs/token x tokens/s / (P x peak) counts the bubble
 * as lost time.
 */
#ifndef WEFT_TRAINERS_PIPELINE_H
#define WEFT_TRAINERS_PIPELINE_H

#include <stdio.h>
#include <weft.h>

#include "trainers/loop.h"
#include "trainers/metrics.h"
#include "trainers/pipeline_stage.h"

typedef struct pp_flags {
  gpt_run_opts run; /* run.batch is the microbatch */
  int steps, eval_every, seed, M, stages;
  float peak_gflops;
  const char *schedule, *save, *log, *plot;
  pp_schedule sched;
} pp_flags;

/* One step, as rank 0 reports it; the arrays have one entry per stage. */
typedef struct pp_step {
  double loss, val_loss, gnorm, ms;
  const double *wait_s, *time_s, *mib;
} pp_step;

typedef struct pp_totals {
  int steps;
  double s, s_after_first, last_val;
  double *step_s;          /* every step's time, for the median */
  double *wait_s, *time_s; /* per stage, summed over steps 2.. (step 1 also when alone) */
  double peak_mib;
} pp_totals;

typedef struct pp_trainer {
  pp_flags f;
  gpt_run base; /* data, model (activations for one microbatch), AdamW state, batch RNG */
  weft_comm_t comm;
  int rank, nranks, G; /* G: global batch in sequences */
  int *gx, *gy;        /* the global batch [G, T] */
  pp_stage stage;
  gpt_peak peak; /* averaged over ranks */
  double *statv; /* 2 + 3P doubles for the step statistics */
  pp_totals tot;
  FILE *log;
} pp_trainer;

/* Rank 0: opens the CSV log (unless "none") and prints the header. */
int pp_report_open(pp_trainer *t, char *err, size_t errlen);
/* Every rank: adds the step to the totals; rank 0 prints it and logs it. */
void pp_report_step(pp_trainer *t, const pp_step *s);
/* Rank 0. */
void pp_report_summary(const pp_trainer *t);
void pp_report_plot(pp_trainer *t);

#endif
