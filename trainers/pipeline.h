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

#include "trainers/dist_comm.h"
#include "trainers/loop.h"
#include "trainers/pipeline_stage.h"
#include "trainers/trainer_flags.h"
#include "trainers/trainer_report.h"

typedef struct pp_flags {
  gpt_trainer_flags c; /* c.run.batch is the microbatch */
  int M, stages;
  const char *schedule;
  pp_schedule sched;
} pp_flags;

/* One step, as rank 0 reports it; the arrays have one entry per stage. */
typedef struct pp_step {
  double loss, val_loss, gnorm, ms;
  const double *wait_s, *time_s, *mib;
} pp_step;

typedef struct pp_trainer {
  pp_flags f;
  gpt_run base; /* data, model (activations for one microbatch), AdamW state, batch RNG */
  gpt_dist dist;
  int G;         /* global batch in sequences */
  int *gx, *gy;  /* the global batch [G, T] */
  pp_stage stage;
  double *statv; /* 2 + 3P doubles for the step statistics */
  gpt_report rep; /* peak (averaged over ranks), log, step times; peak_mib of the largest stage */
  double *wait_s, *time_s; /* per stage, summed over steps 2.. (step 1 also when alone) */
  char resume[4200];       /* the checkpoint --resume resolved to on rank 0, "" when fresh */
  gpt_ckpt_track ckpt;     /* --checkpoint-dir: when to save, the last complete checkpoint */
  gpt_ckpt_seg segs[2];    /* this stage's own ranges (the wte copy excluded) */
  int nsegs;
} pp_trainer;

/* Rank 0: the header (a gpt_program callback: self is the pp_trainer). The CSV log has
 * two more columns, bubble and bubble_theory. */
void pp_report_header(const void *self);
/* Every rank: adds the step to the totals; rank 0 prints it and logs it. */
void pp_report_step(pp_trainer *t, const pp_step *s);
/* Rank 0. */
void pp_report_summary(const pp_trainer *t);
void pp_report_plot(pp_trainer *t);

#endif
