/* trainers/fsdp_step.h: the forward and backward of weft-train-fsdp, unit by unit, with the
 * parameters all-gathered just in time and the gradients reduce-scattered at once.
 *
 * Each rank keeps only its shards (fsdp_shard.h) of the parameters, gradients and AdamW
 * moments. A pass walks the units (forward 0, 1..L, L+1; backward L+1, L..1, 0):
 *
 *   forward  stage i: enqueue gather(i+1) | compute(i) | wait
 *   backward stage i: enqueue gather(i+1) | compute(i) | wait, add RS(i-1) | enqueue RS(i)
 *
 * All collectives go on one stream (comm_stream.h), whose synchronize waits for
 * everything queued; the order above makes "everything" exactly what the next stage
 * needs: while unit i computes, the stream gathers unit i+1 and reduce-scatters unit i-1's
 * gradient, and the wait after it returns once both are done. So gathered memory is a pool
 * of two parameter buffers and two gradient buffers, each one unit (padded), plus two
 * reduce-scatter landing areas of one shard: O(unit), not O(model).
 *
 * Unit 0 (wte, wpe) is special: the tied LM head multiplies by wte at the END of the
 * forward and the START of the backward, and the embedding's backward adds its own wte and
 * wpe gradients at the very end. So, as PyTorch FSDP does for the root module's shared
 * parameters, unit 0 stays gathered for the whole micro-step (gathered once, before the
 * embedding's forward) and its gradient buffer collects both contributions, the head's and
 * the embedding's, before its one reduce-scatter at the end of the backward.
 *
 * Bytes per rank and micro-step, P = padded parameter floats, N ranks: forward all-gathers
 * receive (N-1)/N * P * 4, the backward's again (N-1)/N * (P - P_0) * 4, reduce-scatters
 * send (N-1)/N * P * 4 (ring algorithms): 3x DDP's all-reduce volume / 2, as ZeRO-3 says.
 */
#ifndef WEFT_TRAINERS_FSDP_STEP_H
#define WEFT_TRAINERS_FSDP_STEP_H

#include <weft.h>

#include "trainers/fsdp_shard.h"
#include "trainers/comm_stream.h"
#include "trainers/gpt.h"

typedef struct fsdp_engine {
  gpt_model *m; /* activations and scratch only: m->params and m->grads are NULL */
  fsdp_plan plan;
  weft_comm_t comm;
  gpt_comm_stream st;
  int no_overlap; /* wait right after every enqueue (for comparison) */
  /* This rank's shards, fsdp_local_total(&plan) floats each. grads accumulates the
   * averaged gradients of the micro-steps since fsdp_zero_grad. */
  float *params, *grads, *adam_m, *adam_v;
  float *root_p, *root_g;   /* unit 0 gathered, kept for the micro-step */
  float *pbuf[2], *gbuf[2]; /* the pool: pool_floats each */
  float *rs_tmp[2];         /* reduce-scatter landings: one shard each */
  size_t pool_floats, max_shard;
  char err[512]; /* what failed, when a call returns -1 */
} fsdp_engine;

/* Shards m's parameters and the AdamW moments adam_m, adam_v (lay.total floats each; NULL
 * for zeros) for rank of comm's ranks. Frees nothing: the caller then frees the full
 * buffers. Returns -1 with the reason in err. */
int fsdp_engine_init(fsdp_engine *e, gpt_model *m, const float *adam_m, const float *adam_v,
                     weft_comm_t comm, int no_overlap, char *err, size_t errlen);
void fsdp_engine_free(fsdp_engine *e);

/* Bytes this rank holds for the sharded state (params + grads + m + v), and the gathered
 * pool's bytes (peak gathered memory). */
size_t fsdp_sharded_bytes(const fsdp_engine *e);
size_t fsdp_gathered_bytes(const fsdp_engine *e);

void fsdp_zero_grad(fsdp_engine *e);

/* Forward of one micro-batch [B, T]; the mean loss is then in e->m->loss. Collective.
 * Returns -1 with the reason in e->err. */
int fsdp_forward(fsdp_engine *e, const int *tokens, const int *targets, int B, int T);
/* Backward of the last fsdp_forward; adds the rank-averaged gradients of this rank's
 * shards to e->grads. Collective. Returns -1 with the reason in e->err. */
int fsdp_backward(fsdp_engine *e, const int *tokens, int B, int T);

/* Rank 0 gets the full flat buffer (lay.total floats) of a sharded one (local); the other
 * ranks pass full = NULL. Collective, blocking; the stream must be idle. */
int fsdp_gather_full(fsdp_engine *e, const float *local, float *full);

#endif
