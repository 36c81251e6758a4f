/* trainers/moe_layer.h: one mixture-of-experts MLP layer, experts sharded across ranks
 * (weft issue 6, weft-train-moe).
 *
 * The layer replaces a GPT block's MLP: y = sum_k gate_k(x) * expert_{e_k}(x) over the top-k
 * experts of a softmax router, each expert a GELU MLP d -> hidden -> d. E experts live on
 * N ranks, E/N each (rank r owns [r E/N, (r+1) E/N)); a token's input row goes to the
 * owner of each chosen expert and its output row comes back, through weft_all_to_allv.
 *
 * Routing (moe_layer.c says it in full): k = 1 is Switch Transformer's (Fedus et al. 2021,
 * gate = the softmax probability, not renormalised); k = 2 is GShard's top-2 (Lepikhin et
 * al. 2020, gates renormalised over the two chosen: p1/(p1+p2), p2/(p1+p2); the second
 * expert is always dispatched, not by GShard's random test). Capacity is per (group,
 * expert), a group being the tokens of one rank (or one of --groups slices of a single
 * process's batch), so one process with every expert local and G groups routes exactly as
 * G ranks do: C = ceil(capacity_factor * k * tokens_per_group / E). Dropped assignments
 * add nothing: a token dropped by every expert passes through the residual only.
 *
 * Auxiliary load-balancing loss (Switch eq. 4, per group, averaged over the local groups):
 *     aux = alpha * E * sum_i f_i * P_i,
 * f_i = fraction of the group's tokens whose FIRST choice is expert i (not differentiable),
 * P_i = mean router probability of expert i over the group.
 */
#ifndef WEFT_TRAINERS_MOE_LAYER_H
#define WEFT_TRAINERS_MOE_LAYER_H

#include <stddef.h>
#include <weft.h>

#include "trainers/backend.h"

typedef struct moe_config {
  int dmodel, hidden; /* d; expert hidden width (default 4d) */
  int experts, topk;  /* E (a multiple of the number of ranks); k = 1 or 2 */
  float capacity_factor, aux_alpha;
} moe_config;

struct gpt_comm_stream;

/* Where the experts are: nranks == 1 means every expert is local and no weft call is made
 * (comm may then be NULL). With cs, every exchange runs on that stream (comm_stream.h,
 * which measures its busy and exposed time), so the backward can compute while one is in
 * flight; without it the exchanges are blocking calls and comm_s accumulates their time.
 * pending names the exchange started and not yet waited for (also with one rank, where
 * "exchange" is a copy), so tests can see what the layer computes while one is in flight. */
typedef struct moe_exchange {
  weft_comm_t comm;
  int rank, nranks;
  struct gpt_comm_stream *cs;
  double comm_s;
  const char *pending;
  const char *failed; /* which exchange failed, for the error message */
} moe_exchange;

/* Parameters of one expert, in this order inside its range of the flat buffer. */
enum moe_expert_tensor { MOE_FC_W, MOE_FC_B, MOE_FCPROJ_W, MOE_FCPROJ_B, MOE_EXPERT_NTENSORS };

/* Floats of one expert and the offset of tensor t inside it. */
size_t moe_expert_size(const moe_config *c);
size_t moe_expert_off(const moe_config *c, int t);

/* Routing and activations of one layer, saved by its forward for its backward. */
typedef struct moe_layer {
  moe_config c;
  int groups, nranks, rank, nlocal; /* local groups; experts per rank */
  int max_rows, capacity, rows;     /* capacity C and rows of the last forward */
  float *probs, *gate, *dgate;      /* [rows, E], [rows, k], [rows, k] */
  int *choice, *slot;               /* [rows, k]: expert, position in its buffer (-1 dropped) */
  int *kept, *first;                /* [groups, E]: assignments kept, first choices */
  float *pmean;                     /* [groups, E]: P_i */
  int *scnt, *rcount;               /* [nranks, groups, nlocal]: rows sent, rows received */
  size_t *soff;                     /* [groups, E]: row offset of each block in send order */
  size_t *roff, *xoff;              /* [nranks, groups, nlocal]: in receive order, expert-major */
  size_t *mstart;                   /* [nlocal + 1]: expert j's rows in expert-major order */
  size_t *sc, *sd, *rc, *rd;        /* all_to_allv counts and displacements [nranks], in floats */
  float *xin, *h, *a;               /* expert inputs [M, d], GELU's derivative at the pre-activation
                                     * (which the forward writes there first) and post-GELU [M, hidden] */
  float *back;                      /* expert outputs returned to this rank, in send order */
  double aux;                       /* aux loss of the last forward (mean over local groups) */
  int freeze_routing;               /* tests: keep the last choices and slots, recompute gates */
  long *stat_routed, *stat_kept;    /* [E] assignments since the caller last cleared them */
} moe_layer;

/* Scratch shared by all layers of a model. */
typedef struct moe_scratch {
  float *send, *recv, *dy, *da, *dlogits;
} moe_scratch;

/* Sizes buffers for up to max_rows local token rows, split into groups equal groups. */
int moe_layer_init(moe_layer *ly, const moe_config *c, int groups, int rank, int nranks, int max_rows,
                   char *err, size_t errlen);
void moe_layer_free(moe_layer *ly);
int moe_scratch_init(moe_scratch *s, const moe_layer *ly, char *err, size_t errlen);
void moe_scratch_free(moe_scratch *s);

/* out[rows, d] = MoE(xln) (no residual). router_w [d, E]; experts = this rank's nlocal
 * experts, moe_expert_size floats apart. rows must be a multiple of groups. */
weft_status_t moe_layer_forward(moe_layer *ly, moe_scratch *s, moe_exchange *ex, const gpt_backend *be,
                                const float *router_w, const float *experts, const float *xln, float *out,
                                int rows);
/* Backward of the last forward, plus the aux loss's gradient (weight 1): dout [rows, d]
 * -> WRITES dxln [rows, d] (must not alias dout); ACCUMULATES g_router and g_experts
 * (the local experts' gradients, unscaled: the caller divides them by nranks).
 * Overlap, with ex->cs (the exchanges asynchronous): the router's backward runs while the
 * output gradients go out, and the experts' weight-gradient products while the input
 * gradients come back (nothing waits for weight gradients until the optimizer; Megatron-LM
 * overlaps its tensor-parallel all-reduce of input gradients the same way). Neither
 * reordering changes a result's bits. */
weft_status_t moe_layer_backward(moe_layer *ly, moe_scratch *s, moe_exchange *ex, const gpt_backend *be,
                                 const float *router_w, const float *experts, float *g_router,
                                 float *g_experts, const float *xln, const float *dout, float *dxln);

#endif
