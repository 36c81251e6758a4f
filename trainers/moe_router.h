/* trainers/moe_router.h: the top-k router of a MoE layer (moe_router.c), used by moe_layer.c.
 *
 * Split out because routing is pure arithmetic on one rank's tokens (no communication), so
 * it reads, and is checked, on its own.
 */
#ifndef WEFT_TRAINERS_MOE_ROUTER_H
#define WEFT_TRAINERS_MOE_ROUTER_H

#include "trainers/moe_layer.h"

/* probs = softmax(xln router_w); top-k choices, gates, capacity slots, per-group counts,
 * f and P, the aux loss and the load statistics of ly, for rows token rows. */
void moe_router_forward(moe_layer *ly, const gpt_backend *be, const float *router_w, const float *xln,
                        int rows);
/* From ly->dgate (d loss / d gate of every assignment) and the aux loss: accumulates the
 * router weight gradient and WRITES dxln = d loss / d xln through the router. dlogits is
 * scratch [rows, E]. */
void moe_router_backward(moe_layer *ly, const gpt_backend *be, const float *router_w, float *g_router,
                         const float *xln, float *dlogits, float *dxln);

#endif
