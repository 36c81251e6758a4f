/* trainers/test_ckpt.c: the trainers' sharded checkpoints (ckpt.h) resumed on any number
 * of ranks bit for bit, refused when damaged (weft issue 22); the format alone is
 * test_ckpt_format.c's.
 *
 * weftrun launches the trainers from the build directory (WEFT_TOP_BUILDDIR). One
 * unbroken run, weft-train-fsdp on 4 ranks x 2 sequences for 6 steps, checkpoints every 2
 * steps. Resumed from step 2 on 4 ranks it ends with the same state at step 6, bit for
 * bit; loaded on 2 FSDP ranks, 3 DDP ranks and 2 pipeline stages and gathered at once it
 * is the step-2 state bit for bit; trained on from there on 2 ranks x 4 sequences (the
 * same global batch) it stays within fp32 rounding of the unbroken run (the gradient
 * averages then sum 2 values, not 4). A crash between the shards and the manifest of
 * step 6 leaves step 4 to resume from, and the relaunch ends exactly where the unbroken
 * run did. --keep 2 leaves the last two checkpoints; damaged checkpoints stop every
 * trainer with the file named. Without ../shared/data/tinyshakespeare.txt or the
 * programs, the tests pass as "# SKIP".
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
#include "trainers/ckpt.h"
#include "trainers/test_util.h"

#define TINY "--layers 2 --dmodel 32 --heads 2 --seq 16 --eval-batches 0 --peak-gflops 100 --log none --plot none"

/* The unbroken run every launch test compares with: 4 FSDP ranks x 2 sequences, 6 steps,
 * checkpoints at 2, 4 and 6 in unbroken/run. */
static char unbroken[] = "/tmp/test_ckpt.XXXXXX";

static int unbroken_setup(void **state) {
  char args[4400];
  if (!mkdtemp(unbroken)) return -1;
  snprintf(args, sizeof(args), TINY " --batch 2 --steps 6 --checkpoint-dir %s/run --save-every 2 --keep 0", unbroken);
  return tu_launch(unbroken, 4, "weft-train-fsdp", 120, args, 0) ? -1 : 0;
}

static int unbroken_teardown(void **state) {
  tu_rmdir(unbroken);
  return 0;
}

static void unbroken_step(char *out, size_t n, long step) {
  char root[4200];
  snprintf(root, sizeof(root), "%s/run", unbroken);
  gpt_ckpt_step_dir(out, n, root, step);
}

/* Launches prog on nranks with TINY and args; asserts success. */
static void run_tiny(const char *dir, int nranks, const char *prog, const char *args) {
  char all[8400];
  snprintf(all, sizeof(all), TINY " %s", args);
  tu_run(dir, nranks, prog, 120, all);
}

/* The unbroken run resumed from step 2 on nranks with batch_flags for 4 steps, its own
 * checkpoints in dir/run; got gets its step-6 checkpoint. */
static void resume_unbroken_at_2(const char *dir, int nranks, const char *batch_flags, char *got, size_t n) {
  char args[8192], from[4200];
  unbroken_step(from, sizeof(from), 2);
  snprintf(args, sizeof(args), "%s --steps 4 --resume %s --checkpoint-dir %s/run", batch_flags, from, dir);
  run_tiny(dir, nranks, "weft-train-fsdp", args);
  snprintf(got, n, "%s/run/step-00000006", dir);
}

static void fsdp_resumed_on_4_ranks_ends_bit_for_bit_where_the_unbroken_run_did(void **state) {
  char dir[] = "/tmp/test_ckpt.XXXXXX", want[4200], got[4200];
  tu_mkdtemp(dir);
  resume_unbroken_at_2(dir, 4, "--batch 2", got, sizeof(got));
  unbroken_step(want, sizeof(want), 6);
  tu_expect_same_sharded(want, got);
  tu_rmdir(dir);
}

/* The single-file checkpoint dir/ckpt (of a run with --steps 0) against the sharded
 * checkpoint it resumed: the same state, bit for bit. */
static void expect_file_holds(const char *dir, const char *sharded) {
  char path[4200], err[1024];
  gpt_ckpt_manifest man;
  float *want = tu_read_sharded(sharded, &man);
  gpt_model *m = gpt_model_create(&man.model.cfg, 1, gpt_backend_cpu(), err, sizeof(err));
  assert_non_null(m);
  size_t n = m->lay.total;
  gpt_train_state st = {.adam_m = calloc(n, 4), .adam_v = calloc(n, 4)};
  snprintf(path, sizeof(path), "%s/ckpt", dir);
  if (gpt_checkpoint_load(path, m, &st, err, sizeof(err))) fail_msg("%s", err);
  assert_int_equal(st.step, man.step);
  assert_memory_equal(&st.rng, &man.rng, sizeof(st.rng));
  assert_memory_equal(m->params, want, n * sizeof(float));
  assert_memory_equal(st.adam_m, want + n, n * sizeof(float));
  assert_memory_equal(st.adam_v, want + 2 * n, n * sizeof(float));
  free(st.adam_m);
  free(st.adam_v);
  free(want);
  gpt_model_free(m);
  gpt_ckpt_manifest_free(&man);
}

/* Resharding is a copy: the 4-rank FSDP checkpoint, loaded by 2 FSDP ranks, 3 DDP ranks
 * and 2 pipeline stages and gathered to one file before any step, is its state exactly. */
static void fsdp_4_rank_checkpoint_loads_bit_for_bit_on_2_fsdp_3_ddp_and_2_pipeline_ranks(void **state) {
  char dir[] = "/tmp/test_ckpt.XXXXXX", args[8192], from[4200];
  tu_mkdtemp(dir);
  unbroken_step(from, sizeof(from), 2);
  const struct {
    const char *prog, *flags;
    int nranks;
  } runs[] = {{"weft-train-fsdp", "--batch 4", 2}, {"weft-train-ddp", "--batch 2", 3},
              {"weft-train-pipeline", "--batch 2 --microbatches 4", 2}};
  for (int i = 0; i < 3; i++) {
    snprintf(args, sizeof(args), "%s --steps 0 --resume %s --save %s/ckpt", runs[i].flags, from, dir);
    run_tiny(dir, runs[i].nranks, runs[i].prog, args);
    expect_file_holds(dir, from);
  }
  tu_rmdir(dir);
}

/* Trained on from step 2 on 2 ranks x 4 sequences: the same windows, but each gradient
 * average sums 2 values instead of 4, so the state drifts by fp32 rounding only. */
static void fsdp_resumed_on_2_ranks_stays_within_fp32_rounding_of_the_unbroken_run(void **state) {
  char dir[] = "/tmp/test_ckpt.XXXXXX", want[4200], got[4200];
  tu_mkdtemp(dir);
  resume_unbroken_at_2(dir, 2, "--batch 4", got, sizeof(got));
  unbroken_step(want, sizeof(want), 6);
  tu_expect_sharded_within(want, got, 1e-5, "4 -> 2 ranks after 4 more steps");
  tu_rmdir(dir);
}

/* The unbroken run's directory as a crash between step 6's shards and its manifest leaves
 * it: no manifest, a torn temporary of one. Naming step 6 is refused; the directory
 * resumes step 4 on 4 ranks, and the relaunch's step 6 is the unbroken run's. */
static void a_crash_before_the_manifest_leaves_the_previous_checkpoint_to_resume(void **state) {
  char dir[] = "/tmp/test_ckpt.XXXXXX", cmd[9000], args[8192], want[4200], got[4200];
  tu_mkdtemp(dir);
  snprintf(cmd, sizeof(cmd),
           "cp -r %s/run %s/run && cd %s/run/step-00000006 && head -c 200 manifest >manifest.tmp.4242 && rm manifest",
           unbroken, dir, dir);
  assert_int_equal(system(cmd), 0);
  snprintf(args, sizeof(args), TINY " --batch 2 --steps 2 --resume %s/run/step-00000006", dir);
  assert_int_not_equal(tu_launch(dir, 4, "weft-train-fsdp", 120, args, 1), 0);
  snprintf(got, sizeof(got), "%s/run/step-00000006/manifest: missing: incomplete checkpoint", dir);
  assert_true(tu_output_has(dir, got));
  snprintf(args, sizeof(args), "--batch 2 --steps 2 --resume %s/run --checkpoint-dir %s/run --keep 0", dir, dir);
  run_tiny(dir, 4, "weft-train-fsdp", args);
  snprintf(got, sizeof(got), "resumed from %s/run/step-00000004 (step 4", dir);
  assert_true(tu_output_has(dir, got));
  assert_true(tu_output_has(dir, "warning: skipping a newer checkpoint"));
  unbroken_step(want, sizeof(want), 6);
  snprintf(got, sizeof(got), "%s/run/step-00000006", dir);
  tu_expect_same_sharded(want, got);
  /* The crashed save's shards and temporary are gone: a manifest and 4 shards remain. */
  snprintf(cmd, sizeof(cmd), "test $(ls %s | wc -l) -eq 5", got);
  assert_int_equal(system(cmd), 0);
  tu_rmdir(dir);
}

/* 5 steps of weft-train-ddp on 2 ranks, a checkpoint after each, --keep 2. */
static void keep_2_leaves_the_last_two_checkpoints_of_a_run(void **state) {
  char dir[] = "/tmp/test_ckpt.XXXXXX", args[8192], cmd[4400];
  tu_mkdtemp(dir);
  snprintf(args, sizeof(args), "--batch 4 --steps 5 --checkpoint-dir %s/run --save-every 1 --keep 2", dir);
  run_tiny(dir, 2, "weft-train-ddp", args);
  snprintf(cmd, sizeof(cmd), "test \"$(ls %s/run | tr '\\n' ' ')\" = 'step-00000004 step-00000005 '", dir);
  if (system(cmd)) fail_msg("--keep 2 left something else in %s/run", dir);
  assert_int_equal(tu_output_count(dir, "# checkpoint "), 5);
  tu_rmdir(dir);
}

/* A damaged or mismatched checkpoint stops the launched trainer, naming the file. */
static void a_damaged_checkpoint_stops_the_trainers_naming_the_file(void **state) {
  char dir[] = "/tmp/test_ckpt.XXXXXX", cmd[9000], args[8192], newest[4400], step4[4400];
  tu_mkdtemp(dir);
  snprintf(cmd, sizeof(cmd), "cp -r %s/run %s/run && printf Z | dd of=$(ls %s/run/step-00000006/shard-00001-*) bs=1 "
           "seek=4000 conv=notrunc 2>/dev/null", unbroken, dir, dir);
  assert_int_equal(system(cmd), 0);
  snprintf(newest, sizeof(newest), "--resume %s/run", dir);
  snprintf(step4, sizeof(step4), "--resume %s/run/step-00000004", dir);
  const struct {
    const char *prog, *flags, *extra, *said, *file;
  } cases[] = {{"weft-train-fsdp", newest, "", "checksum mismatch: the file is corrupt", "shard-00001-of-00004"},
               {"weft-train-fsdp", step4, "--layers 3", "--layers 3 was given", "step-00000004/manifest"},
               {"weft-train-moe", step4, "", "holds a gpt model", "step-00000004/manifest"}};
  for (int i = 0; i < 3; i++) {
    snprintf(args, sizeof(args), TINY " --batch 2 --steps 1 %s %s", cases[i].flags, cases[i].extra);
    assert_int_not_equal(tu_launch(dir, 2, cases[i].prog, 120, args, 1), 0);
    if (!tu_output_has(dir, cases[i].said) || !tu_output_has(dir, cases[i].file))
      fail_msg("%s %s: no '%s' naming %s", cases[i].prog, args, cases[i].said, cases[i].file);
  }
  tu_rmdir(dir);
}

int main(int argc, char **argv) {
  /* The kernels the trainers it launches choose, so the in-process reference runs them too. */
  gpt_blas_choose(argv);
  const char *const progs[] = {"weft-train-fsdp", "weft-train-ddp", "weft-train-pipeline", "weft-train-moe", NULL};
  const char *why = tu_missing(progs);
  struct CMUnitTest tests[] = {
      cmocka_unit_test(fsdp_resumed_on_4_ranks_ends_bit_for_bit_where_the_unbroken_run_did),
      cmocka_unit_test(fsdp_4_rank_checkpoint_loads_bit_for_bit_on_2_fsdp_3_ddp_and_2_pipeline_ranks),
      cmocka_unit_test(fsdp_resumed_on_2_ranks_stays_within_fp32_rounding_of_the_unbroken_run),
      cmocka_unit_test(a_crash_before_the_manifest_leaves_the_previous_checkpoint_to_resume),
      cmocka_unit_test(keep_2_leaves_the_last_two_checkpoints_of_a_run),
      cmocka_unit_test(a_damaged_checkpoint_stops_the_trainers_naming_the_file),
  };
  size_t n = sizeof(tests) / sizeof(tests[0]);
  if (!why) return _cmocka_run_group_tests("test_ckpt", tests, n, unbroken_setup, unbroken_teardown);
  tu_skip(tests, 0, n, why);
  return _cmocka_run_group_tests("test_ckpt", tests, n, NULL, NULL);
}
