/* trainers/pipeline_schedule.c: stage split and GPipe / 1F1B op order; see
 * pipeline_schedule.h. */
#include "trainers/pipeline_schedule.h"

#include <string.h>

int pp_stage_blocks(int L, int P, int s, int *first, int *count) {
  if (P < 1 || L < P || s < 0 || s >= P) return -1;
  int base = L / P, extra = L % P;
  /* The last `extra` stages get one more block each. */
  int plain = P - extra;
  *count = base + (s >= plain);
  *first = s * base + (s > plain ? s - plain : 0);
  return 0;
}

static int gpipe_ops(int M, pp_op *ops) {
  int n = 0;
  for (int k = 0; k < M; k++) ops[n++] = (pp_op){PP_FWD, k};
  for (int k = 0; k < M; k++) ops[n++] = (pp_op){PP_BWD, k};
  return n;
}

static int one_f_one_b_ops(int s, int P, int M, pp_op *ops) {
  int warm = P - s - 1 < M ? P - s - 1 : M, n = 0;
  for (int k = 0; k < warm; k++) ops[n++] = (pp_op){PP_FWD, k};
  for (int i = 0; i < M - warm; i++) {
    ops[n++] = (pp_op){PP_FWD, warm + i};
    ops[n++] = (pp_op){PP_BWD, i};
  }
  for (int k = M - warm; k < M; k++) ops[n++] = (pp_op){PP_BWD, k};
  return n;
}

int pp_schedule_ops(pp_schedule sched, int s, int P, int M, pp_op *ops) {
  if (P < 1 || M < 1 || s < 0 || s >= P) return -1;
  return sched == PP_GPIPE ? gpipe_ops(M, ops) : one_f_one_b_ops(s, P, M, ops);
}

int pp_max_in_flight(const pp_op *ops, int n) {
  int live = 0, most = 0;
  for (int i = 0; i < n; i++) {
    live += ops[i].kind == PP_FWD ? 1 : -1;
    if (live > most) most = live;
  }
  return most;
}

int pp_op_recv_peer(const pp_op *op, int s, int P) {
  if (op->kind == PP_FWD) return s > 0 ? s - 1 : -1;
  return s < P - 1 ? s + 1 : -1;
}

int pp_op_send_peer(const pp_op *op, int s, int P) {
  if (op->kind == PP_FWD) return s < P - 1 ? s + 1 : -1;
  return s > 0 ? s - 1 : -1;
}

double pp_bubble_theory(int P, int M) { return (double)(P - 1) / (M + P - 1); }

int pp_schedule_parse(const char *name, pp_schedule *out) {
  if (!strcmp(name, "gpipe")) {
    *out = PP_GPIPE;
    return 0;
  }
  if (!strcmp(name, "1f1b")) {
    *out = PP_1F1B;
    return 0;
  }
  return -1;
}

const char *pp_schedule_name(pp_schedule sched) { return sched == PP_GPIPE ? "gpipe" : "1f1b"; }
