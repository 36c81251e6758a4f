/* trainers/test_fsdp.c: weft-train-fsdp on N ranks must train exactly what one process
 * trains on the same global batch, holding 1/N of the state (weft issue 6).
 *
 * First the shard plan alone (fsdp_shard.h): on 1..5 ranks every float of every unit
 * belongs to exactly one rank, and the shards put back together give the flat buffer.
 * Then the references run in this process: gpt_run (weft-train's loop) for 5 steps on a
 * tiny model (2 layers, d 32, clipping active) with global batches 8 and 6. weftrun
 * launches weft-train-fsdp from the build directory (WEFT_TOP_BUILDDIR): 2 ranks x 4
 * sequences, the same without overlap, 2 x 2 x 2 accumulation micro-steps, 3 ranks x 2
 * (the blocks and the final LayerNorm do not divide by 3, so shards are padded), and
 * 1 rank x 8. Each writes its per-step CSV and a checkpoint; losses (1e-5 relative) and
 * final parameters (1e-5 absolute) must match the reference, one rank bit for bit. 3-rank
 * FSDP is also compared with 3-rank weft-train-ddp directly. Two checks that the checks can
 * fail: a run with another seed must be told apart, and the loss must go down in a longer
 * run. Last, 3 steps + save + resume for 2 must end bit-identical to 5 steps in one go. Without ../shared/data/tinyshakespeare.txt or the programs those tests pass as
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
#include "trainers/fsdp_shard.h"
#include "trainers/test_util.h"

enum { STEPS = 5, MAX_STEPS = 40 };

/* ------------------------------------------------------------------ shard plan */

static const gpt_config tiny = {.vocab = 65, .seq = 16, .layers = 2, .dmodel = 32, .heads = 2};

static void plan_covers_every_float_exactly_once_on_1_to_5_ranks(void **state) {
  char err[256];
  gpt_model *m = gpt_model_create(&tiny, 1, gpt_backend_cpu(), err, sizeof(err));
  assert_non_null(m);
  const gpt_layout *lay = &m->lay;
  int *owners = calloc(lay->total, sizeof(int));
  for (int N = 1; N <= 5; N++) {
    memset(owners, 0, lay->total * sizeof(int));
    for (int r = 0; r < N; r++) {
      fsdp_plan p;
      assert_int_equal(fsdp_plan_init(&p, lay, N, r), 0);
      for (int u = 0; u < p.nunits; u++) {
        size_t lo, hi, n = lay->unit_offset[u + 1] - lay->unit_offset[u];
        fsdp_shard_range(&p, lay, u, r, &lo, &hi);
        assert_true(lo >= lay->unit_offset[u] && hi <= lay->unit_offset[u + 1] && lo <= hi);
        assert_true(hi - lo <= p.shard[u]);
        assert_true(fsdp_padded(&p, u) >= n && fsdp_padded(&p, u) < n + (size_t)N);
        for (size_t i = lo; i < hi; i++) owners[i]++;
      }
      fsdp_plan_free(&p);
    }
    for (size_t i = 0; i < lay->total; i++)
      if (owners[i] != 1) fail_msg("%d ranks: float %zu has %d owners", N, i, owners[i]);
  }
  free(owners);
  gpt_model_free(m);
}

/* Copying each rank's shards in and laying them out as all-gathers would puts the flat
 * buffer back, with zeros in the padding; on 1 rank the local buffer IS the flat one. */
static void shards_put_back_together_give_the_flat_buffer_on_3_ranks(void **state) {
  char err[256];
  gpt_model *m = gpt_model_create(&tiny, 1, gpt_backend_cpu(), err, sizeof(err));
  assert_non_null(m);
  const gpt_layout *lay = &m->lay;
  for (size_t i = 0; i < lay->total; i++) m->params[i] = (float)i + 1.0f;
  enum { N = 3 };
  fsdp_plan p[N];
  float *local[N], *back = calloc(lay->total, sizeof(float));
  for (int r = 0; r < N; r++) {
    assert_int_equal(fsdp_plan_init(&p[r], lay, N, r), 0);
    local[r] = malloc(fsdp_local_total(&p[r]) * sizeof(float));
    fsdp_shard_copy_in(&p[r], lay, m->params, local[r]);
  }
  for (int u = 0; u < lay->nunits; u++) {
    size_t n = lay->unit_offset[u + 1] - lay->unit_offset[u], s = p[0].shard[u];
    for (size_t k = 0; k < fsdp_padded(&p[0], u); k++) {
      float v = local[k / s][p[0].local_off[u] + k % s];
      if (k < n)
        back[lay->unit_offset[u] + k] = v;
      else
        assert_true(v == 0.0f);
    }
  }
  assert_memory_equal(back, m->params, lay->total * sizeof(float));
  fsdp_plan one;
  assert_int_equal(fsdp_plan_init(&one, lay, 1, 0), 0);
  assert_int_equal(fsdp_local_total(&one), lay->total);
  for (int r = 0; r < N; r++) {
    free(local[r]);
    fsdp_plan_free(&p[r]);
  }
  fsdp_plan_free(&one);
  free(back);
  gpt_model_free(m);
}

/* ------------------------------------------------------------------ training runs */

/* The single-process references: losses of every step and the final parameters. */
typedef struct reference {
  int global_batch;
  gpt_run run;
  float loss[STEPS];
} reference;

static reference ref8 = {.global_batch = 8}, ref6 = {.global_batch = 6};

static int reference_run(reference *r) {
  return tu_reference_run(&r->run, 2, r->global_batch, 0, STEPS, r->loss, NULL);
}

static int references_setup(void **state) {
  return reference_run(&ref8) || reference_run(&ref6) ? -1 : 0;
}

static int references_teardown(void **state) {
  gpt_run_free(&ref8.run);
  gpt_run_free(&ref6.run);
  return 0;
}

/* What one launch of a trainer produced. */
typedef struct result {
  int steps;
  float loss[MAX_STEPS];
  float *params; /* final parameters from its checkpoint (lay.total floats) */
  size_t local_floats, full_floats; /* from weft-train-fsdp's "# memory per rank" line */
} result;

static void read_memory_line(const char *dir, result *res) {
  char path[4200], line[1024];
  snprintf(path, sizeof(path), "%s/out", dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  while (fgets(line, sizeof(line), f)) {
    const char *a = strstr(line, "(4 x "), *b = a ? strstr(a + 1, "(4 x ") : NULL;
    if (strncmp(line, "# memory per rank:", 18) || !b) continue;
    res->local_floats = strtoul(a + 5, NULL, 10);
    res->full_floats = strtoul(b + 5, NULL, 10);
  }
  fclose(f);
}

/* Runs prog (weft-train-fsdp or weft-train-ddp) on nranks for steps with extra flags. */
static result run_trainer(const char *prog, int nranks, int steps, const char *extra) {
  char dir[] = "/tmp/test_fsdp.XXXXXX";
  tu_mkdtemp(dir);
  assert_int_equal(tu_launch_tiny(dir, nranks, prog, (tu_tiny){2, steps, 0, "--save"}, extra, 0), 0);
  result res = {.steps = steps};
  tu_read_losses(dir, res.loss, steps, NULL);
  res.params = tu_read_checkpoint(dir, ref8.run.m, steps);
  read_memory_line(dir, &res);
  tu_rmdir(dir);
  return res;
}

/* Largest relative loss difference and absolute parameter difference of a against b. */
static void differences(const result *a, const float *b_loss, const float *b_params, double *loss_rel,
                        double *param_abs, size_t *at) {
  *loss_rel = tu_loss_rel_diff(a->loss, b_loss, STEPS);
  *param_abs = tu_max_abs_diff(a->params, b_params, ref8.run.m->lay.total, at);
}

/* Losses within rel_tol, parameters within abs_tol (0, 0: identical). */
static void expect_match(const result *a, const float *b_loss, const float *b_params, double rel_tol,
                         double abs_tol) {
  double rel, worst;
  size_t at;
  differences(a, b_loss, b_params, &rel, &worst, &at);
  printf("# losses within %.3g relative, parameters within %.3g\n", rel, worst);
  /* The CSV keeps 6 decimals, so a loss near 4 carries up to 1.3e-7 of print rounding. */
  if (rel > rel_tol + 2e-7) fail_msg("losses differ by %.3g relative", rel);
  if (worst > abs_tol)
    fail_msg("parameter %zu differs by %.3g (%.9g vs %.9g)", at, worst, a->params[at], b_params[at]);
}

static void expect_fsdp_matches(const reference *r, int nranks, const char *extra, double rel_tol,
                                double abs_tol) {
  result res = run_trainer("weft-train-fsdp", nranks, STEPS, extra);
  expect_match(&res, r->loss, r->run.m->params, rel_tol, abs_tol);
  free(res.params);
}

static void two_ranks_match_one_process_on_the_doubled_batch(void **state) {
  expect_fsdp_matches(&ref8, 2, "--batch 4", 1e-5, 1e-5);
}

static void two_ranks_without_overlap_match_one_process(void **state) {
  expect_fsdp_matches(&ref8, 2, "--batch 4 --no-overlap", 1e-5, 1e-5);
}

static void two_ranks_accumulating_two_micro_steps_match_one_process(void **state) {
  expect_fsdp_matches(&ref8, 2, "--batch 2 --accum 2", 1e-5, 1e-5);
}

static void three_ranks_with_padded_shards_match_one_process(void **state) {
  expect_fsdp_matches(&ref6, 3, "--batch 2", 1e-5, 1e-5);
}

static void one_rank_matches_one_process_bit_for_bit(void **state) {
  expect_fsdp_matches(&ref8, 1, "--batch 8", 0.0, 0.0);
}

/* Each rank holds ceil(n_u / 3) floats of unit u, 4 times (params, grads, m, v); DDP
 * holds all of them: so 3 x local is the full count plus at most 2 floats per unit. */
static void three_ranks_match_ddp_and_hold_a_third_of_its_state(void **state) {
  result f = run_trainer("weft-train-fsdp", 3, STEPS, "--batch 2");
  result d = run_trainer("weft-train-ddp", 3, STEPS, "--batch 2");
  expect_match(&f, d.loss, d.params, 1e-5, 1e-5);
  size_t total = ref8.run.m->lay.total, units = (size_t)ref8.run.m->lay.nunits;
  assert_int_equal(f.full_floats, total);
  if (f.local_floats * 3 < total || f.local_floats * 3 > total + 2 * units)
    fail_msg("rank holds %zu floats of %zu: not a third", f.local_floats, total);
  free(f.params);
  free(d.params);
}

/* The comparison must see a real difference: another initialisation and batch seed. */
static void a_run_with_another_seed_is_told_apart(void **state) {
  result res = run_trainer("weft-train-fsdp", 2, STEPS, "--batch 4 --seed 2");
  double rel, worst;
  size_t at;
  differences(&res, ref8.loss, ref8.run.m->params, &rel, &worst, &at);
  if (worst < 1e-3 || rel < 1e-4)
    fail_msg("seed 2 looks like seed 1: losses %.3g relative, parameters %.3g apart", rel, worst);
  free(res.params);
}

/* 30 steps at a higher learning rate: the last 5 losses average well below the first 5. */
static void loss_goes_down_on_two_ranks(void **state) {
  enum { N = 30 };
  result res = run_trainer("weft-train-fsdp", 2, N, "--batch 4 --lr 3e-3");
  double first = 0.0, last = 0.0;
  for (int i = 0; i < 5; i++) first += res.loss[i] / 5, last += res.loss[N - 5 + i] / 5;
  if (!(last < first - 0.3)) fail_msg("loss went from %.4f to %.4f", first, last);
  free(res.params);
}

/* The "# parameter checksum" weft-train-fsdp prints at the end of a run with flags. */
static double checksum_of(int nranks, const char *flags) {
  char dir[] = "/tmp/test_fsdp.XXXXXX", args[4096], path[4200], line[512];
  tu_mkdtemp(dir);
  snprintf(args, sizeof(args),
           "--layers 2 --dmodel 32 --heads 2 --seq 16 --batch 4 --eval-batches 0 --peak-gflops 100 --log none %s",
           flags);
  tu_run(dir, nranks, "weft-train-fsdp", 120, args);
  snprintf(path, sizeof(path), "%s/out", dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  double sum = NAN;
  while (fgets(line, sizeof(line), f)) sscanf(line, "# parameter checksum %lf", &sum);
  fclose(f);
  tu_rmdir(dir);
  if (isnan(sum)) fail_msg("no parameter checksum from weft-train-fsdp %s", args);
  return sum;
}

/* 3 steps, save, resume for 2 more on 2 ranks: the same parameters, bit for bit, as 5
 * steps in one go (the moments and the batch RNG come back from the shards). */
static void a_resumed_run_continues_bit_for_bit(void **state) {
  char dir[] = "/tmp/test_fsdp.XXXXXX", flags[4200];
  tu_mkdtemp(dir);
  double whole = checksum_of(2, "--steps 5");
  snprintf(flags, sizeof(flags), "--steps 3 --save %s/ckpt", dir);
  double first = checksum_of(2, flags);
  snprintf(flags, sizeof(flags), "--steps 2 --resume %s/ckpt", dir);
  double resumed = checksum_of(2, flags);
  tu_rmdir(dir);
  assert_true(first != whole);
  if (resumed != whole) fail_msg("resumed run: checksum %.17g, uninterrupted %.17g", resumed, whole);
}

int main(int argc, char **argv) {
  /* The kernels the trainers it launches choose, so the in-process reference runs them too. */
  gpt_blas_choose(argv);
  const char *const progs[] = {"weft-train-fsdp", "weft-train-ddp", NULL};
  const char *why = tu_missing(progs);
  struct CMUnitTest tests[] = {
      cmocka_unit_test(plan_covers_every_float_exactly_once_on_1_to_5_ranks),
      cmocka_unit_test(shards_put_back_together_give_the_flat_buffer_on_3_ranks),
      cmocka_unit_test(two_ranks_match_one_process_on_the_doubled_batch),
      cmocka_unit_test(two_ranks_without_overlap_match_one_process),
      cmocka_unit_test(two_ranks_accumulating_two_micro_steps_match_one_process),
      cmocka_unit_test(three_ranks_with_padded_shards_match_one_process),
      cmocka_unit_test(one_rank_matches_one_process_bit_for_bit),
      cmocka_unit_test(three_ranks_match_ddp_and_hold_a_third_of_its_state),
      cmocka_unit_test(a_run_with_another_seed_is_told_apart),
      cmocka_unit_test(loss_goes_down_on_two_ranks),
      cmocka_unit_test(a_resumed_run_continues_bit_for_bit),
  };
  enum { PLAN_TESTS = 2 };
  size_t n = sizeof(tests) / sizeof(tests[0]);
  if (!why) return _cmocka_run_group_tests("test_fsdp", tests, n, references_setup, references_teardown);
  /* The plan tests need nothing; the training runs are skipped. */
  tu_skip(tests, PLAN_TESTS, n, why);
  return _cmocka_run_group_tests("test_fsdp", tests, n, NULL, NULL);
}
