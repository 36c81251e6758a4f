/* trainers/dp_batch.h: the global batch of the data-parallel trainers (weft-train-ddp,
 * weft-train-fsdp) and the state around it they share.
 *
 * Every rank seeds the batch RNG alike (weft-train's), so each step draws the same global
 * batch of G = ranks * accum * batch windows everywhere, and rank r's micro-step k takes
 * windows [(r * accum + k) * batch, + batch). Validation scores eval_batches global
 * batches the same way and averages over ranks. So N ranks train and evaluate on exactly
 * what `weft-train --batch G` does (test_ddp.c and test_fsdp.c check it).
 */
#ifndef WEFT_TRAINERS_DP_BATCH_H
#define WEFT_TRAINERS_DP_BATCH_H

#include <stddef.h>

#include "trainers/trainer_main.h"

typedef struct gpt_dp {
  gpt_run base; /* data, model (sized for one micro-batch), AdamW state, batch RNG */
  gpt_dist dist;
  gpt_report rep; /* peak (averaged over ranks), log, totals */
  int accum, G;   /* G: global batch in sequences */
  int *gx, *gy;   /* the global batch [G, T]; each rank reads its slices */
  char resume[4200];   /* the checkpoint --resume resolved to on rank 0, "" when fresh */
  gpt_ckpt_track ckpt; /* --checkpoint-dir: when to save, the last complete checkpoint */
} gpt_dp;

/* Joins the job, loads the data and builds (or resumes: rank 0 resolves --resume for
 * all, gpt_ckpt_resolve_group) the model from f, allocates the global batch, fills the
 * report's ranks, tokens per step and FLOPs per token, and sets up the checkpoint
 * tracker. Returns -1 with the reason in err. */
int gpt_dp_init(gpt_dp *d, const char *prog, const gpt_trainer_flags *f, int accum, char *err, size_t errlen);
/* The peak for MFU (gpt_dist_measure_peak); -1 with the reason in err. */
int gpt_dp_measure_peak(gpt_dp *d, float given, char *err, size_t errlen);
void gpt_dp_free(gpt_dp *d);

/* Draws this step's global batch. */
void gpt_dp_draw(gpt_dp *d);
/* Where micro-step k of this rank starts in gx and gy. */
size_t gpt_dp_slice(const gpt_dp *d, int k);

/* The loss of one validation micro-batch (x, y of b windows of T tokens) into *loss. */
typedef int (*gpt_dp_loss_fn)(void *ctx, const int *x, const int *y, int b, int T, double *loss);
/* Mean validation loss over eval_batches global batches and the ranks. */
int gpt_dp_eval(gpt_dp *d, gpt_dp_loss_fn loss, void *ctx, double *val);

/* Header line: "# batch B per rank x accum K x N ranks = G sequences (G*T tokens) per step",
 * then where the run resumed from (gpt_ckpt_print_origin). */
void gpt_dp_print_batch(const gpt_dp *d);

/* A sharded checkpoint of d's state now, with own as this rank's part (buffers and
 * segments of the full layout); remembers it in d->ckpt. Collective. */
int gpt_dp_save(gpt_dp *d, const char *prog, const gpt_ckpt_local *own, char *err, size_t errlen);
/* Rank 0: closes the log and draws it, titled "PROG, N ranks, G*T tokens/step". */
void gpt_dp_plot(gpt_dp *d, const char *prog, const gpt_trainer_flags *f);

#endif
