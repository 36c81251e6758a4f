/* trainers/test_ddp.c: weft-train-ddp on N ranks must train exactly what one process
 * trains on the same global batch (weft issue 6).
 *
 * The reference runs in this process: gpt_run (weft-train's loop) with batch 8 for 5 steps
 * on a tiny model, clipping active. Then weftrun launches weft-train-ddp from the build
 * directory (WEFT_TOP_BUILDDIR) with 2 ranks x 4 sequences (overlapped, many small
 * buckets), the same with --no-overlap, 2 ranks x 2 sequences x 2 accumulation
 * micro-steps, and 1 rank x 8; each writes its per-step CSV and a checkpoint, and its
 * losses (1e-5 relative) and final parameters (1e-5 absolute) must match the reference.
 * One rank must match it bit for bit: averaging over one rank changes nothing. Each run
 * evaluates nothing, and its summary must say so ("final val_loss none ..."), not "nan".
 * Without ../shared/data/tinyshakespeare.txt or the programs, the tests pass as "# SKIP".
 */
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
#include "trainers/test_util.h"

enum { STEPS = 5, GLOBAL_BATCH = 8 };

/* The single-process reference: losses of every step and the final parameters. */
typedef struct reference {
  gpt_run run;
  float loss[STEPS];
} reference;

static reference ref;

static int reference_setup(void **state) {
  return tu_reference_run(&ref.run, 2, GLOBAL_BATCH, 0, STEPS, ref.loss, NULL);
}

static int reference_teardown(void **state) {
  gpt_run_free(&ref.run);
  return 0;
}

/* Runs weft-train-ddp on nranks with extra flags; fills loss[] from its CSV and returns
 * the parameters of its checkpoint (caller frees). */
static float *run_ddp(int nranks, const char *extra, float loss[STEPS]) {
  char dir[] = "/tmp/test_ddp.XXXXXX";
  tu_mkdtemp(dir);
  assert_int_equal(tu_launch_tiny(dir, nranks, "weft-train-ddp", (tu_tiny){2, STEPS, 0, "--save"}, extra, 0), 0);
  /* no evaluation ran (--eval-batches 0): the summary says so instead of "nan" */
  assert_true(tu_output_has(dir, "final val_loss none (no evaluation ran)"));
  assert_false(tu_output_has(dir, "val_loss nan"));
  tu_read_losses(dir, loss, STEPS, NULL);
  float *params = tu_read_checkpoint(dir, ref.run.m, STEPS);
  tu_rmdir(dir);
  return params;
}

/* Losses within rel_tol, parameters within abs_tol (0, 0: identical). */
static void expect_matches_reference(int nranks, const char *extra, double rel_tol, double abs_tol) {
  float loss[STEPS];
  float *p = run_ddp(nranks, extra, loss);
  tu_expect_losses(loss, ref.loss, STEPS, rel_tol);
  tu_expect_params(p, ref.run.m->params, ref.run.m->lay.total, abs_tol);
  free(p);
}
static void two_ranks_overlapped_match_one_process_on_the_doubled_batch(void **state) {
  expect_matches_reference(2, "--batch 4 --bucket-mb 0.02 --first-bucket-mb 0.01", 1e-5, 1e-5);
}

static void two_ranks_without_overlap_match_one_process(void **state) {
  expect_matches_reference(2, "--batch 4 --no-overlap", 1e-5, 1e-5);
}

static void two_ranks_accumulating_two_micro_steps_match_one_process(void **state) {
  expect_matches_reference(2, "--batch 2 --accum 2 --bucket-mb 0.05", 1e-5, 1e-5);
}

/* The 2-rank runs above keep their gradients in a registered window (direct all-reduce,
 * the default); this one in plain memory (the FIFO path). */
static void two_ranks_with_plain_gradient_memory_match_one_process(void **state) {
  expect_matches_reference(2, "--batch 4 --bucket-mb 0.02 --first-bucket-mb 0.01 --no-register", 1e-5, 1e-5);
}

/* --sync-only (the scaling ceiling of make bench-trainers) must keep the gradients out of
 * the all-reduce: rank 0 then trains on its own half of the batch and ends elsewhere than
 * the reference, and the program says it did not compare the replicas. */
static void sync_only_leaves_the_gradients_unaveraged(void **state) {
  char dir[] = "/tmp/test_ddp.XXXXXX";
  tu_mkdtemp(dir);
  tu_tiny t = {2, STEPS, 0, "--save"};
  assert_int_equal(tu_launch_tiny(dir, 2, "weft-train-ddp", t, "--batch 4 --sync-only", 0), 0);
  assert_true(tu_output_has(dir, "replicas not compared (--sync-only"));
  float *p = tu_read_checkpoint(dir, ref.run.m, STEPS);
  tu_rmdir(dir);
  double maxdiff = 0.0;
  for (size_t i = 0; i < ref.run.m->lay.total; i++) {
    double d = p[i] > ref.run.m->params[i] ? p[i] - ref.run.m->params[i] : ref.run.m->params[i] - p[i];
    if (d > maxdiff) maxdiff = d;
  }
  free(p);
  if (maxdiff < 1e-4)
    fail_msg("--sync-only ended within %g of the averaged run: the gradients were all-reduced", maxdiff);
}

static void one_rank_matches_one_process_bit_for_bit(void **state) {
  expect_matches_reference(1, "--batch 8 --bucket-mb 0.02", 0.0, 0.0);
}

int main(int argc, char **argv) {
  /* The kernels the trainers it launches choose, so the in-process reference runs them too. */
  gpt_blas_choose(argv);
  const char *const progs[] = {"weft-train-ddp", NULL};
  const char *why = tu_missing(progs);
  struct CMUnitTest tests[] = {
      cmocka_unit_test(two_ranks_overlapped_match_one_process_on_the_doubled_batch),
      cmocka_unit_test(two_ranks_without_overlap_match_one_process),
      cmocka_unit_test(two_ranks_accumulating_two_micro_steps_match_one_process),
      cmocka_unit_test(two_ranks_with_plain_gradient_memory_match_one_process),
      cmocka_unit_test(sync_only_leaves_the_gradients_unaveraged),
      cmocka_unit_test(one_rank_matches_one_process_bit_for_bit),
  };
  size_t n = sizeof(tests) / sizeof(tests[0]);
  if (why) {
    tu_skip(tests, 0, n, why);
    return _cmocka_run_group_tests("test_ddp", tests, n, NULL, NULL);
  }
  return _cmocka_run_group_tests("test_ddp", tests, n, reference_setup, reference_teardown);
}
