/* trainers/test_pipeline.c: weft-train-pipeline's schedules, and its training against one
 * process on the same global batch (weft issue 6).
 *
 * Schedules (no processes): the exact GPipe and 1F1B op order of P = 4 stages and M = 8
 * microbatches; the uneven block split; and a replay of every stage's op list against the
 * others, with the exchanges grouped as the trainer groups them (sends of op i with the
 * receives of op i + 1), for P 1..6 and M 1..10: it must never deadlock even if a send
 * completes only when its receiver has posted the receive, every message must meet its
 * receive in order, and with uniform op times every stage must idle exactly the ideal
 * bubble (P-1)/(M+P-1).
 *
 * Training: the reference runs in this process (gpt_run, weft-train's loop, batch 8, 5
 * steps, 4 layers, clipping on, then 2 validation batches). weftrun then launches
 * weft-train-pipeline from the build directory (WEFT_TOP_BUILDDIR) on 2, 3 (uneven split)
 * and 4 stages with both schedules and M*mb = 8; losses and the validation loss (1e-5
 * relative) and the checkpoint's gathered parameters (1e-5 absolute) must match. One stage
 * with one microbatch must match bit for bit. Bad stage counts must fail with a message.
 * Without ../shared/data/tinyshakespeare.txt or the programs, the training tests pass as
 * "# SKIP".
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* cmocka.h needs the headers above first. */
#include <cmocka.h>

#include "trainers/blas_core.h"
#include "trainers/pipeline_schedule.h"
#include "trainers/test_util.h"

/* ------------------------------------------------------------------ op order */

static void format_ops(const pp_op *ops, int n, char *out, size_t len) {
  size_t at = 0;
  out[0] = '\0';
  for (int i = 0; i < n && at < len; i++)
    at += (size_t)snprintf(out + at, len - at, "%s%c%d", i ? " " : "", ops[i].kind == PP_FWD ? 'F' : 'B',
                           ops[i].mb);
}

static void expect_order(pp_schedule sched, int s, const char *want) {
  pp_op ops[16];
  char got[256];
  assert_int_equal(pp_schedule_ops(sched, s, 4, 8, ops), 16);
  format_ops(ops, 16, got, sizeof(got));
  assert_string_equal(got, want);
}

static void one_f_one_b_order_for_4_stages_and_8_microbatches(void **state) {
  expect_order(PP_1F1B, 0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  expect_order(PP_1F1B, 1, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  expect_order(PP_1F1B, 2, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  expect_order(PP_1F1B, 3, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
}

static void gpipe_order_for_4_stages_and_8_microbatches(void **state) {
  for (int s = 0; s < 4; s++) expect_order(PP_GPIPE, s, "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
}

static void in_flight_is_p_minus_s_for_1f1b_and_m_for_gpipe(void **state) {
  pp_op ops[64];
  for (int P = 1; P <= 6; P++)
    for (int M = 1; M <= 10; M++)
      for (int s = 0; s < P; s++) {
        int n = pp_schedule_ops(PP_1F1B, s, P, M, ops);
        assert_int_equal(pp_max_in_flight(ops, n), P - s < M ? P - s : M);
        n = pp_schedule_ops(PP_GPIPE, s, P, M, ops);
        assert_int_equal(pp_max_in_flight(ops, n), M);
      }
}

static void uneven_split_gives_every_block_once_and_extras_to_the_last_stages(void **state) {
  int first, n, want_n[3] = {1, 1, 2};
  for (int s = 0; s < 3; s++) {
    assert_int_equal(pp_stage_blocks(4, 3, s, &first, &n), 0);
    assert_int_equal(n, want_n[s]);
    assert_int_equal(first, s);
  }
  for (int L = 1; L <= 12; L++)
    for (int P = 1; P <= L; P++) {
      int next = 0;
      for (int s = 0; s < P; s++) {
        assert_int_equal(pp_stage_blocks(L, P, s, &first, &n), 0);
        assert_int_equal(first, next);
        assert_true(n == L / P || n == L / P + 1);
        next += n;
      }
      assert_int_equal(next, L);
    }
  assert_int_equal(pp_stage_blocks(2, 3, 0, &first, &n), -1);
}

/* ------------------------------------------------------------------ replay */

enum { MAX_P = 6, MAX_M = 10, MAX_OPS = 2 * MAX_M };

/* Every stage's op list run against the others. Group g of a stage holds the sends of op
 * g - 1 and the receives of op g (g = 0 .. 2M). A message is posted by each side when it
 * posts the group holding it; with rendezvous a send completes only when both are posted,
 * otherwise at once. A group completes when all its messages have, then the stage
 * computes op g (forward 1, backward 2 time units) and posts group g + 1. */
typedef struct replay {
  int P, M, rendezvous;
  pp_op ops[MAX_P][MAX_OPS];
  int g[MAX_P];         /* group each stage is in */
  double post[MAX_P];   /* when it was posted */
  double idle[MAX_P];   /* time spent in groups */
  double finish[MAX_P]; /* when the last group completed */
  /* per boundary b (stages b, b+1) and microbatch: when each side posted, -1 before */
  double act_send[MAX_P][MAX_M], act_recv[MAX_P][MAX_M], grad_send[MAX_P][MAX_M], grad_recv[MAX_P][MAX_M];
  int act_order[MAX_P][2], grad_order[MAX_P][2]; /* next expected microbatch per side */
} replay;

/* The send side slot and the recv side slot of the message op sends or receives. */
static double *send_slot(replay *r, const pp_op *op, int s, double **other) {
  int b = op->kind == PP_FWD ? s : s - 1;
  *other = op->kind == PP_FWD ? &r->act_recv[b][op->mb] : &r->grad_recv[b][op->mb];
  return op->kind == PP_FWD ? &r->act_send[b][op->mb] : &r->grad_send[b][op->mb];
}

static double *recv_slot(replay *r, const pp_op *op, int s, double **other) {
  int b = op->kind == PP_FWD ? s - 1 : s;
  *other = op->kind == PP_FWD ? &r->act_send[b][op->mb] : &r->grad_send[b][op->mb];
  return op->kind == PP_FWD ? &r->act_recv[b][op->mb] : &r->grad_recv[b][op->mb];
}

/* Records stage s posting group g at time t; checks the messages keep their order. */
static void post_group(replay *r, int s, int g, double t) {
  double *other;
  r->g[s] = g;
  r->post[s] = t;
  if (g > 0 && pp_op_send_peer(&r->ops[s][g - 1], s, r->P) >= 0) {
    const pp_op *op = &r->ops[s][g - 1];
    int *next = op->kind == PP_FWD ? &r->act_order[s][0] : &r->grad_order[s - 1][0];
    assert_int_equal(op->mb, (*next)++);
    *send_slot(r, op, s, &other) = t;
  }
  if (g < 2 * r->M && pp_op_recv_peer(&r->ops[s][g], s, r->P) >= 0) {
    const pp_op *op = &r->ops[s][g];
    int *next = op->kind == PP_FWD ? &r->act_order[s - 1][1] : &r->grad_order[s][1];
    assert_int_equal(op->mb, (*next)++);
    *recv_slot(r, op, s, &other) = t;
  }
}

/* When stage s's current group completes, or -1 while it cannot. */
static double group_done(replay *r, int s) {
  int g = r->g[s];
  double done = r->post[s], *other;
  if (g > 0 && pp_op_send_peer(&r->ops[s][g - 1], s, r->P) >= 0) {
    send_slot(r, &r->ops[s][g - 1], s, &other);
    if (r->rendezvous && *other < 0) return -1;
    if (r->rendezvous) done = fmax(done, *other);
  }
  if (g < 2 * r->M && pp_op_recv_peer(&r->ops[s][g], s, r->P) >= 0) {
    recv_slot(r, &r->ops[s][g], s, &other);
    if (*other < 0) return -1;
    done = fmax(done, *other);
  }
  return done;
}

/* Advances stage s by one group if it can; returns whether it did. */
static int advance(replay *r, int s) {
  if (r->g[s] > 2 * r->M) return 0;
  double done = group_done(r, s);
  if (done < 0) return 0;
  r->idle[s] += done - r->post[s];
  int g = r->g[s];
  if (g == 2 * r->M) {
    r->finish[s] = done;
    r->g[s] = g + 1;
    return 1;
  }
  post_group(r, s, g + 1, done + (r->ops[s][g].kind == PP_FWD ? 1.0 : 2.0));
  return 1;
}

/* Runs the replay; returns the step time (the last stage to finish), or -1 on deadlock. */
static double run_replay(replay *r, pp_schedule sched, int P, int M, int rendezvous) {
  memset(r, 0, sizeof(*r));
  r->P = P, r->M = M, r->rendezvous = rendezvous;
  for (int b = 0; b < MAX_P; b++)
    for (int k = 0; k < MAX_M; k++)
      r->act_send[b][k] = r->act_recv[b][k] = r->grad_send[b][k] = r->grad_recv[b][k] = -1;
  for (int s = 0; s < P; s++) assert_int_equal(pp_schedule_ops(sched, s, P, M, r->ops[s]), 2 * M);
  for (int s = 0; s < P; s++) post_group(r, s, 0, 0.0);
  for (int moved = 1; moved;) {
    moved = 0;
    for (int s = 0; s < P; s++) moved |= advance(r, s);
  }
  double end = 0.0;
  for (int s = 0; s < P; s++) {
    if (r->g[s] <= 2 * M) return -1;
    end = fmax(end, r->finish[s]);
  }
  return end;
}

static void replay_all(pp_schedule sched, int rendezvous) {
  static replay r;
  for (int P = 1; P <= MAX_P; P++)
    for (int M = 1; M <= MAX_M; M++) {
      double end = run_replay(&r, sched, P, M, rendezvous);
      if (end < 0) fail_msg("%s deadlocks on %d stages, %d microbatches", pp_schedule_name(sched), P, M);
      assert_true(fabs(end - 3.0 * (M + P - 1)) < 1e-9);
      for (int s = 0; s < P; s++) {
        double bubble = (r.idle[s] + end - r.finish[s]) / end;
        if (fabs(bubble - pp_bubble_theory(P, M)) > 1e-9)
          fail_msg("%s P=%d M=%d stage %d: bubble %.6f, ideal %.6f", pp_schedule_name(sched), P, M, s, bubble,
                   pp_bubble_theory(P, M));
      }
    }
}

static void one_f_one_b_never_deadlocks_and_idles_the_ideal_bubble(void **state) {
  replay_all(PP_1F1B, 1);
  replay_all(PP_1F1B, 0);
}

static void gpipe_never_deadlocks_and_idles_the_ideal_bubble(void **state) {
  replay_all(PP_GPIPE, 1);
  replay_all(PP_GPIPE, 0);
}

/* ------------------------------------------------------------------ training */

enum { STEPS = 5, GLOBAL_BATCH = 8, EVAL_BATCHES = 2 };

static struct reference {
  gpt_run run;
  float loss[STEPS], val;
} ref;

static int reference_setup(void **state) {
  return tu_reference_run(&ref.run, 4, GLOBAL_BATCH, EVAL_BATCHES, STEPS, ref.loss, &ref.val);
}

static int reference_teardown(void **state) {
  gpt_run_free(&ref.run);
  return 0;
}

/* Launches weft-train-pipeline on nranks with extra flags into dir; returns its exit
 * status and prints its output as comments when it failed and should not have. */
static int launch(const char *dir, int nranks, const char *extra, int expect_fail) {
  return tu_launch_tiny(dir, nranks, "weft-train-pipeline", (tu_tiny){4, STEPS, EVAL_BATCHES, "--save"}, extra,
                        expect_fail);
}

static void expect_close(const char *what, double got, double want, double rel_tol) {
  /* The CSV keeps 6 decimals, so a loss near 4 carries up to 1.3e-7 of print rounding. */
  if (fabs(got - want) / fabs(want) > rel_tol + 2e-7) fail_msg("%s %.6f, reference %.6f", what, got, want);
}

/* Losses within rel_tol, parameters within abs_tol (0, 0: identical). */
static void expect_matches_reference(int nranks, const char *extra, double rel_tol, double abs_tol) {
  char dir[] = "/tmp/test_pipeline.XXXXXX";
  tu_mkdtemp(dir);
  assert_int_equal(launch(dir, nranks, extra, 0), 0);
  float loss[STEPS], val;
  tu_read_losses(dir, loss, STEPS, &val);
  tu_expect_losses(loss, ref.loss, STEPS, rel_tol);
  /* gpt_run_eval returns a float: up to 1.2e-7 more of rounding near 4. */
  expect_close("validation loss", val, ref.val, rel_tol + 1.5e-7);
  float *p = tu_read_checkpoint(dir, ref.run.m, STEPS);
  tu_expect_params(p, ref.run.m->params, ref.run.m->lay.total, abs_tol);
  free(p);
  tu_rmdir(dir);
}

static void two_stages_1f1b_match_one_process_on_the_global_batch(void **state) {
  expect_matches_reference(2, "--schedule 1f1b --batch 2 --microbatches 4", 1e-5, 1e-5);
}

static void two_stages_gpipe_match_one_process_on_the_global_batch(void **state) {
  expect_matches_reference(2, "--schedule gpipe --batch 2 --microbatches 4", 1e-5, 1e-5);
}

static void three_stages_uneven_1f1b_match_one_process(void **state) {
  expect_matches_reference(3, "--schedule 1f1b --batch 1 --microbatches 8 --stages 3", 1e-5, 1e-5);
}

static void three_stages_uneven_gpipe_match_one_process(void **state) {
  expect_matches_reference(3, "--schedule gpipe --batch 4 --microbatches 2", 1e-5, 1e-5);
}

static void four_stages_1f1b_match_one_process(void **state) {
  expect_matches_reference(4, "--schedule 1f1b --batch 2 --microbatches 4", 1e-5, 1e-5);
}

static void one_stage_one_microbatch_matches_one_process_bit_for_bit(void **state) {
  expect_matches_reference(1, "--batch 8 --microbatches 1", 0.0, 0.0);
}

static void expect_refused(int nranks, const char *extra, const char *message) {
  char dir[] = "/tmp/test_pipeline.XXXXXX", cmd[4400];
  tu_mkdtemp(dir);
  assert_int_not_equal(launch(dir, nranks, extra, 1), 0);
  snprintf(cmd, sizeof(cmd), "grep -q -- '%s' %s/out", message, dir);
  int found = system(cmd) == 0;
  tu_rmdir(dir);
  if (!found) fail_msg("expected \"%s\" in the output", message);
}

static void wrong_stage_count_and_too_few_layers_are_refused(void **state) {
  expect_refused(2, "--stages 3 --batch 2", "--stages 3 but launched on 2 ranks");
  expect_refused(5, "--batch 2", "4 layers cannot fill 5 pipeline stages");
}

int main(int argc, char **argv) {
  /* The kernels the trainers it launches choose, so the in-process reference runs them too. */
  gpt_blas_choose(argv);
  const char *const progs[] = {"weft-train-pipeline", NULL};
  const char *why = tu_missing(progs);
  struct CMUnitTest tests[] = {
      cmocka_unit_test(one_f_one_b_order_for_4_stages_and_8_microbatches),
      cmocka_unit_test(gpipe_order_for_4_stages_and_8_microbatches),
      cmocka_unit_test(in_flight_is_p_minus_s_for_1f1b_and_m_for_gpipe),
      cmocka_unit_test(uneven_split_gives_every_block_once_and_extras_to_the_last_stages),
      cmocka_unit_test(one_f_one_b_never_deadlocks_and_idles_the_ideal_bubble),
      cmocka_unit_test(gpipe_never_deadlocks_and_idles_the_ideal_bubble),
      /* The training tests, from here on, need the data and the programs. */
      cmocka_unit_test(two_stages_1f1b_match_one_process_on_the_global_batch),
      cmocka_unit_test(two_stages_gpipe_match_one_process_on_the_global_batch),
      cmocka_unit_test(three_stages_uneven_1f1b_match_one_process),
      cmocka_unit_test(three_stages_uneven_gpipe_match_one_process),
      cmocka_unit_test(four_stages_1f1b_match_one_process),
      cmocka_unit_test(one_stage_one_microbatch_matches_one_process_bit_for_bit),
      cmocka_unit_test(wrong_stage_count_and_too_few_layers_are_refused),
  };
  enum { FIRST_TRAINING = 6 };
  size_t n = sizeof(tests) / sizeof(tests[0]);
  if (!why) return _cmocka_run_group_tests("test_pipeline", tests, n, reference_setup, reference_teardown);
  tu_skip(tests, FIRST_TRAINING, n, why);
  return _cmocka_run_group_tests("test_pipeline", tests, n, NULL, NULL);
}
