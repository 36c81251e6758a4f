/* trainers/test_ckpt_relaunch.c: a trainer that loses a rank stops on every survivor
 * naming the last complete checkpoint, and a relaunch from it finishes the run where an
 * unbroken run ends (weft issue 22).
 *
 * For weft-train-fsdp (4 ranks), weft-train-moe (4 ranks, 4 experts) and
 * weft-train-pipeline (2 stages of 4 blocks), each on a tiny model: an unbroken run of
 * STEPS steps; then the same run with a checkpoint every SAVE_EVERY steps, launched in the
 * background, whose rank `victim` is SIGKILLed once the first checkpoint is complete.
 * Every surviving rank must exit with "stopped at step S; last complete checkpoint: DIR
 * (step K); relaunch with --resume DIR --steps N to end at step T", DIR complete on disk
 * and K + N = T. The relaunch resumes DIR as printed, for STEPS - K steps, on another
 * launcher or rank count:
 * FSDP on 2 ranks x 4 sequences started torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT; no weftrun), MoE on 4 ranks again and on 2 ranks with 2 capacity groups
 * each, the pipeline on 3 stages. Its final checkpoint is compared with the unbroken
 * run's: bit for bit where the arithmetic is the same (MoE on 4 ranks; the pipeline, whose
 * stages compute every block, gradient sum and update alike however the blocks are
 * split), within fp32 rounding where the gradient averages sum another number of values
 * (FSDP on 2 ranks, MoE on 2: measured 3e-6 after 100 steps, asserted 1e-5).
 * Without ../shared/data/tinyshakespeare.txt or the programs the tests pass as "# SKIP".
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
/* cmocka.h needs the headers above first. */
#include <cmocka.h>

#include "trainers/blas_core.h"
#include "trainers/ckpt.h"
#include "trainers/test_spawn.h"
#include "trainers/test_util.h"

/* The killed run aims at KILLED_STEPS, so it is always still running when its rank is
 * killed; its state at any step is the unbroken run's (no schedule depends on --steps). */
enum { STEPS = 100, SAVE_EVERY = 4, KILLED_STEPS = 100000 };

#define TINY "--dmodel 32 --heads 2 --seq 16 --eval-batches 0 --peak-gflops 100 --log none --plot none"

typedef struct scenario {
  const char *prog, *flags; /* the model and batch of the first launch */
  int nranks, victim;
} scenario;

/* What the survivors said. */
typedef struct stop_note {
  char ckpt[4200];
  long ckpt_step, steps_left;
} stop_note;

/* Parses the first survivor's stop line; asserts every survivor printed one. */
static stop_note read_stop_note(const char *dir, int survivors) {
  char path[4200], line[8192];
  stop_note n = {.ckpt = ""};
  int seen = tu_output_count(dir, "stopped at step");
  if (seen != survivors) fail_msg("%d of %d survivors said where they stopped", seen, survivors);
  snprintf(path, sizeof(path), "%s/out", dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  while (n.ckpt[0] == '\0' && fgets(line, sizeof(line), f)) {
    const char *p = strstr(line, "last complete checkpoint: ");
    long end;
    if (p && sscanf(p, "last complete checkpoint: %4199s (step %ld); relaunch with --resume %*s --steps %ld to end at "
                       "step %ld", n.ckpt, &n.ckpt_step, &n.steps_left, &end) == 4)
      assert_int_equal(end, KILLED_STEPS);
  }
  fclose(f);
  if (!n.ckpt[0]) fail_msg("no survivor named a checkpoint");
  assert_int_equal(n.ckpt_step + n.steps_left, KILLED_STEPS);
  if (n.ckpt_step >= STEPS) fail_msg("killed only at step %ld", n.ckpt_step);
  return n;
}

/* The run of s with checkpoints, its victim SIGKILLed after the first checkpoint. */
static stop_note kill_mid_run(const scenario *s, const char *dir) {
  char args[8192], first[4400];
  snprintf(args, sizeof(args), TINY " %s --steps %d --checkpoint-dir %s/run --save-every %d", s->flags, KILLED_STEPS,
           dir, SAVE_EVERY);
  pid_t job = ts_spawn(dir, s->nranks, s->prog, 120, args, "WEFT_TIMEOUT_MS=30000");
  snprintf(first, sizeof(first), "%s/run/step-%08d/manifest", dir, SAVE_EVERY);
  ts_wait_for_file(job, dir, first, 60);
  assert_int_equal(kill(ts_rank_pid(job, s->victim, 10), SIGKILL), 0);
  int st = ts_wait(job, 90);
  if (!WIFEXITED(st) || WEXITSTATUS(st) == 0) fail_msg("the job survived losing rank %d (status %d)", s->victim, st);
  stop_note n = read_stop_note(dir, s->nranks - 1);
  gpt_ckpt_manifest m;
  char err[2048];
  if (gpt_ckpt_check_complete(n.ckpt, &m, err, sizeof(err))) fail_msg("the checkpoint named is not: %s", err);
  assert_int_equal(m.step, n.ckpt_step);
  gpt_ckpt_manifest_free(&m);
  print_message("# rank %d killed: survivors stopped naming %s (step %ld)\n", s->victim, n.ckpt, n.ckpt_step);
  return n;
}

/* The unbroken run: dir/run/step-STEPS. */
static void unbroken_run(const scenario *s, const char *dir) {
  char args[8192];
  snprintf(args, sizeof(args), TINY " %s --steps %d --checkpoint-dir %s/run", s->flags, STEPS, dir);
  tu_run(dir, s->nranks, s->prog, 120, args);
}

/* The final states of the unbroken run and the relaunch: equal, or within tol. */
static void expect_final(const char *unbroken, const char *relaunched, double tol) {
  char a[4300], b[4300];
  snprintf(a, sizeof(a), "%s/run/step-%08d", unbroken, STEPS);
  snprintf(b, sizeof(b), "%s/run/step-%08d", relaunched, STEPS);
  if (tol > 0.0) {
    tu_expect_sharded_within(a, b, tol, "relaunch against the unbroken run");
    return;
  }
  tu_expect_same_sharded(a, b);
  print_message("# relaunch ends bit for bit where the unbroken run does\n");
}

/* A relaunch: its ranks, flags (the run's, with its own batch split), launcher, and how
 * close its end must be to the unbroken run's (0: bit for bit). */
typedef struct relaunch {
  int nranks;
  const char *flags;
  int torchrun;
  double tol;
} relaunch;

/* The unbroken run, the run that loses its victim, then each relaunch from the
 * checkpoint the survivors named, into one directory (each replaces the last's end). */
static void lose_a_rank_and_relaunch(const scenario *s, const relaunch *r, int n) {
  char unbroken[] = "/tmp/test_relaunch.XXXXXX", killed[] = "/tmp/test_relaunch.XXXXXX";
  char again[] = "/tmp/test_relaunch.XXXXXX", args[8192];
  tu_mkdtemp(unbroken);
  tu_mkdtemp(killed);
  tu_mkdtemp(again);
  unbroken_run(s, unbroken);
  stop_note note = kill_mid_run(s, killed);
  for (int i = 0; i < n; i++) {
    snprintf(args, sizeof(args), TINY " %s --resume %s --steps %ld --checkpoint-dir %s/run", r[i].flags, note.ckpt,
             STEPS - note.ckpt_step, again);
    if (r[i].torchrun)
      assert_int_equal(ts_launch_torchrun(again, r[i].nranks, s->prog, 120, args), 0);
    else
      tu_run(again, r[i].nranks, s->prog, 120, args);
    expect_final(unbroken, again, r[i].tol);
  }
  tu_rmdir(unbroken);
  tu_rmdir(killed);
  tu_rmdir(again);
}

static void fsdp_loses_rank_1_of_4_and_finishes_on_2_ranks_started_torchrun_style(void **state) {
  const scenario s = {"weft-train-fsdp", "--layers 2 --batch 2", 4, 1};
  const relaunch r = {2, "--layers 2 --batch 4", 1, 1e-5};
  lose_a_rank_and_relaunch(&s, &r, 1);
}

/* Rank 0, which writes the manifests, is the one lost. On 2 ranks, --groups 2 keeps the
 * 4 capacity groups of 2 sequences. */
static void moe_loses_rank_0_of_4_and_finishes_on_4_and_on_2_ranks(void **state) {
  const scenario s = {"weft-train-moe", "--layers 2 --batch 2 --experts 4 --topk 2", 4, 0};
  const relaunch r[] = {{4, s.flags, 0, 0.0}, {2, "--layers 2 --batch 4 --groups 2 --experts 4 --topk 2", 0, 1e-5}};
  lose_a_rank_and_relaunch(&s, r, 2);
}

static void pipeline_loses_its_last_stage_and_finishes_on_3_stages(void **state) {
  const scenario s = {"weft-train-pipeline", "--layers 4 --batch 2 --microbatches 4", 2, 1};
  const relaunch r = {3, s.flags, 0, 0.0};
  lose_a_rank_and_relaunch(&s, &r, 1);
}

int main(int argc, char **argv) {
  /* The kernels the trainers it launches choose, so the in-process reference runs them too. */
  gpt_blas_choose(argv);
  const char *const progs[] = {"weft-train-fsdp", "weft-train-moe", "weft-train-pipeline", "weftrun", NULL};
  const char *why = tu_missing(progs);
  struct CMUnitTest tests[] = {
      cmocka_unit_test(fsdp_loses_rank_1_of_4_and_finishes_on_2_ranks_started_torchrun_style),
      cmocka_unit_test(moe_loses_rank_0_of_4_and_finishes_on_4_and_on_2_ranks),
      cmocka_unit_test(pipeline_loses_its_last_stage_and_finishes_on_3_stages),
  };
  size_t n = sizeof(tests) / sizeof(tests[0]);
  if (why) tu_skip(tests, 0, n, why);
  return _cmocka_run_group_tests("test_ckpt_relaunch", tests, n, NULL, NULL);
}
