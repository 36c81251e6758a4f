/* trainers/pipeline_stage.h: one pipeline stage of weft-train-pipeline: its blocks, its
 * activation sets, its op loop with the neighbour exchanges, and the parameter ranges
 * its optimizer owns.
 *
 * Parameters: every rank keeps gpt.h's full flat buffers (so unit offsets, AdamW's
 * decay flags and checkpoints need no remapping), but touches only its own ranges:
 *     stage 0       units 0 .. first+n (embeddings and its blocks)
 *     stage s       its blocks
 *     stage P - 1   its blocks and the final LayerNorm, plus a COPY of wte for the tied
 *                   head, kept identical to stage 0's: the two ranks sum their wte
 *                   gradients each step (Megatron's embedding group), then both run the
 *                   same AdamW on the same values. The copy counts once in the norm.
 * Untouched pages of the calloc'd buffers are never made resident, so a stage's memory is
 * its share.
 *
 * Activations: gpt_model keeps ONE set of saved activations, but a stage has up to
 * pp_max_in_flight microbatches between forward and backward. Each is a shallow copy of
 * the run's model (same params, grads, layout and scratch) with its own residual streams
 * and block activations for this stage's blocks only (and the head's on the last stage).
 * Gradients travel in two ping-pong buffers (microbatch k uses k & 1), so one can be sent
 * while the next is received.
 *
 * Time: every p2p group and the wte exchange is counted as waiting (wait_s): the op list
 * leaves the stage nothing else to compute then, so it is the stage's bubble (plus the
 * transfer itself, a memcpy through shared memory here).
 */
#ifndef WEFT_TRAINERS_PIPELINE_STAGE_H
#define WEFT_TRAINERS_PIPELINE_STAGE_H

#include <stddef.h>
#include <weft.h>

#include "trainers/adamw.h"
#include "trainers/gpt.h"
#include "trainers/pipeline_schedule.h"

typedef struct pp_range {
  size_t lo, hi; /* floats of the flat buffer */
  int copy;      /* the last stage's wte: not in the norm, not gathered */
} pp_range;

typedef struct pp_stage {
  gpt_model *base; /* the run's model: params, grads, layout, scratch */
  weft_comm_t comm;
  int s, P, M, mb, T;
  int first, nblocks; /* blocks [first, first + nblocks) */
  pp_schedule sched;
  pp_op *ops; /* 2M */
  int nops, nslots;
  gpt_model *slots; /* nslots activation sets */
  float *gbuf[2];   /* [mb*T, d] gradient buffers */
  float *wte_tmp;   /* the peer's wte gradient (first and last stage) */
  size_t msg;       /* floats per message: mb*T*d */
  pp_range ranges[2];
  int nranges;
  /* per step */
  const int *gx, *gy; /* the global batch [M*mb, T] */
  double loss_sum;    /* last stage: sum of the microbatch losses */
  double wait_s;      /* time in exchanges */
} pp_stage;

/* Builds stage s of P (s = the rank) over base, whose activations must be sized for mb
 * sequences. Returns -1 with the reason in err. */
int pp_stage_init(pp_stage *p, gpt_model *base, weft_comm_t comm, int s, int P, int M, int mb,
                  pp_schedule sched, char *err, size_t errlen);
void pp_stage_free(pp_stage *p);

/* Zeroes the gradients of the stage's ranges. */
void pp_stage_zero_grad(pp_stage *p);
/* Runs the stage's 2M ops on the global batch gx, gy [M*mb, T], accumulating gradients of
 * the M microbatch means. Returns -1 with err on a communication failure. */
int pp_stage_run(pp_stage *p, const int *gx, const int *gy, char *err, size_t errlen);
/* Sums the wte gradients of the first and last stage (no-op elsewhere and on 1 stage). */
int pp_stage_tie_grads(pp_stage *p, char *err, size_t errlen);
/* Sum of squares of the stage's gradients, the wte copy excluded. */
double pp_stage_grad_sumsq(const pp_stage *p);
/* AdamW step `step` on the stage's ranges; m, v are full-size moment buffers; grad_scale
 * multiplies the gradients first (clip factor / M). */
void pp_stage_update(pp_stage *p, const gpt_adamw *o, long step, float *m, float *v, float grad_scale);

/* Forward only of one microbatch x, y [mb, T] through the pipeline (evaluation); the last
 * stage sets *loss. Every stage calls it for the same microbatches in the same order. */
int pp_stage_eval(pp_stage *p, const int *x, const int *y, double *loss, char *err, size_t errlen);

/* Root 0 receives the full flat buffer assembled from every stage's own ranges of src
 * (sum of zero-padded copies: exact); tmp holds lay.total floats. */
int pp_stage_gather(pp_stage *p, const float *src, float *tmp, float *dst_on_root, char *err, size_t errlen);

#endif
