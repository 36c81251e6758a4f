/* trainers/ddp_elastic.h: weft-train-ddp --elastic (issue 22): when a rank dies mid-step,
 * the survivors shrink the communicator (weft_comm_shrink with WEFT_SHRINK_FAILED), drop
 * the step that failed, and go on from the parameters they all hold.
 *
 * DDP replicas are identical, so nothing of the lost rank is needed. Almost: a rank can die
 * at the very end of an all-reduce that some survivors completed (and then updated their
 * parameters) while others failed. So after the shrink the new rank 0 broadcasts its
 * parameters, AdamW moments, step count and batch RNG, and every survivor goes on from
 * exactly that state: usually the one before the failed step.
 *
 * The batch after a loss (--elastic-batch):
 *   per-rank: each rank keeps its micro-batch and accumulation; the global batch shrinks
 *             with the rank count (N' x accum x batch).
 *   global:   the global batch G stays as close as it can: each survivor's share G / N'
 *             (rounded down when N' does not divide G, said in the line) is split into the
 *             fewest micro-steps whose micro-batch fits the model's buffers (at most the
 *             original --batch), so memory per rank does not grow.
 */
#ifndef WEFT_TRAINERS_DDP_ELASTIC_H
#define WEFT_TRAINERS_DDP_ELASTIC_H

#include <stddef.h>

#include "trainers/dp_batch.h"

typedef struct gpt_elastic {
  int on;            /* --elastic */
  const char *batch; /* --elastic-batch: "per-rank" (default) or "global" */
  int max_batch;     /* the micro-batch the model was built for */
  int lost;          /* ranks lost so far */
  double first_step_pending_s; /* when the last recovery ended; 0 after its first step */
  struct {                     /* WEFT_TRAIN_FAULT (tests only; see gpt_elastic_fault) */
    char phase[16];            /* "validation", "statistics" or "update"; "" when none */
    long step;
    int victim, laggard;
  } fault;
} gpt_elastic;

/* Checks the flags and reads WEFT_TRAIN_FAULT; -1 with the reason in err. */
int gpt_elastic_check(gpt_elastic *e, int max_batch, char *err, size_t errlen);

/* Where a rank's control flow is, for the survivors to agree on where they resume: the
 * trainer counts its step calls c (1, 2, ...); step call c is at 2c, the validation after it
 * at 2c + 1. A rank can die after some survivors finished a phase's last collective and went
 * on while others failed in it; those others are behind, and their phase is in fact
 * complete (the ones ahead could not have finished it without their part). */
static inline long gpt_elastic_step_at(long calls) { return 2 * calls; }
static inline long gpt_elastic_validation_at(long calls) { return 2 * calls + 1; }

/* After a failed collective on dp->dist.comm: revokes it, shrinks it to the survivors,
 * aborts the old one, takes the new rank 0's state (params, AdamW moments, step, RNG),
 * adjusts the batch (*accum as well) and the report, and has the new rank 0 print
 * "# rank R lost at step S; continuing on N ranks (...)" (S: the step that failed, or with
 * during, e.g. "validation", the last step done and what failed after it). The caller tears down what lived
 * on the old communicator before (its streams' calls end at once: it is revoked) and
 * rebuilds it after. *at: in, where this rank is (gpt_elastic_step_at / _validation_at);
 * out, the furthest any survivor is, where all resume: a rank whose *at grew leaves its
 * phase as done (the validation without a value; the step with its own statistics) and meets
 * the others in the next one; the others retry theirs. -1 with the reason in err when no
 * communicator could be built. */
int gpt_elastic_recover(gpt_elastic *e, gpt_dp *dp, int *accum, const char *during, long *at, char *err,
                        size_t errlen);

/* Fault injection for tests (test_elastic.c), from WEFT_TRAIN_FAULT=PHASE:STEP:VICTIM:LAGGARD
 * (ranks of the first communicator): once, when PHASE ("validation" after step STEP, the
 * "statistics" average of step STEP, or its "update" of the parameters, just before that
 * average) has succeeded and no rank was lost yet, every rank
 * all-gathers its pid (so all have finished the phase), rank VICTIM SIGKILLs itself, and
 * this returns 1 on rank LAGGARD once the victim's process has ended (at most 30 s), which
 * then acts as if its call had failed: the race in which a rank dies after some survivors
 * got its part of a collective and others did not, made certain. With "update" and no
 * such LAGGARD (e.g. -1), every survivor fails in the statistics average after its update.
 * 0 otherwise, and always without --elastic. */
int gpt_elastic_fault(gpt_elastic *e, const gpt_dp *dp, const char *phase);

/* Called after each successful step: the first one after a recovery prints when it ended
 * (CLOCK_REALTIME, for measuring the time from a kill to it). */
void gpt_elastic_step_done(gpt_elastic *e, const gpt_dp *dp);

#endif
