/* trainers/pipeline_schedule.h: what a pipeline stage holds and the order it runs its
 * microbatches in (weft issue 6, weft-train-pipeline).
 *
 * Pure functions, no communication, so the tests exercise them alone (test_pipeline.c
 * replays every stage's op list against the others and checks order, deadlock freedom and
 * the bubble).
 *
 * Split: the L blocks go to P stages, L / P each; the L % P left over go one each to the
 * LAST stages, because under 1F1B the early stages keep the most microbatches in flight
 * (stage s up to P - s), so their memory is the tighter. Stage 0 also holds the embeddings,
 * stage P - 1 the final LayerNorm and the (tied) head.
 *
 * Schedules, for M microbatches on P stages (F k = forward of microbatch k, B k backward):
 *   GPipe (Huang et al. 2019):   F0 F1 .. F(M-1)  B0 B1 .. B(M-1)          M in flight
 *   1F1B (PipeDream-Flush; Narayanan et al. 2021, Megatron-LM's non-interleaved schedule):
 *     w = min(P - s - 1, M) warm-up forwards F0 .. F(w-1); then M - w times
 *     "F(w + i) B(i)"; then the cool-down B(M - w) .. B(M - 1).       min(P - s, M) in flight
 * Both idle (P - 1) (tf + tb) per stage and step with uniform stage times: the bubble
 * fraction (P - 1) / (M + P - 1). 1F1B only bounds the activations held.
 *
 * Messages: F k on stage s > 0 receives [mb*T, d] activations from s - 1 before it runs;
 * on s < P - 1 it sends its output to s + 1 after. B k on s < P - 1 receives the output's
 * gradient from s + 1 before it runs; on s > 0 it sends its input's gradient to s - 1
 * after. The trainer launches the sends of op i and the receives of op i + 1 as ONE group
 * (weft_group_start/end), as Megatron pairs send_forward_recv_backward: in 1F1B's steady
 * state stage s's "send F(w+i) output, receive B(i) gradient" meets stage s + 1's "send
 * B(i) gradient, receive F(w+i) input", so neither side waits for the other to finish
 * first, even if sends complete only when received.
 */
#ifndef WEFT_TRAINERS_PIPELINE_SCHEDULE_H
#define WEFT_TRAINERS_PIPELINE_SCHEDULE_H

typedef enum { PP_GPIPE, PP_1F1B } pp_schedule;
typedef enum { PP_FWD, PP_BWD } pp_kind;

typedef struct pp_op {
  pp_kind kind;
  int mb; /* microbatch 0 .. M-1 */
} pp_op;

/* Blocks [*first, *first + *count) of L on stage s of P. Returns -1 when L < P (a stage
 * without a block) or s is outside [0, P). */
int pp_stage_blocks(int L, int P, int s, int *first, int *count);

/* Writes the 2M ops of stage s (ops has room for 2M) and returns 2M, or -1 on bad
 * arguments (P < 1, M < 1, s outside [0, P)). */
int pp_schedule_ops(pp_schedule sched, int s, int P, int M, pp_op *ops);

/* Most microbatches whose forward has run and whose backward has not, at any point
 * of ops: the activation sets the stage needs. Microbatch k can use set k % that, since
 * forwards and backwards both go in increasing k, so the ones in flight are consecutive. */
int pp_max_in_flight(const pp_op *ops, int n);

/* The neighbour stage op receives from before it runs / sends to after it, or -1. */
int pp_op_recv_peer(const pp_op *op, int s, int P);
int pp_op_send_peer(const pp_op *op, int s, int P);

/* (P - 1) / (M + P - 1). */
double pp_bubble_theory(int P, int M);

/* "gpipe" or "1f1b"; returns -1 on anything else. */
int pp_schedule_parse(const char *name, pp_schedule *out);
const char *pp_schedule_name(pp_schedule sched);

#endif
