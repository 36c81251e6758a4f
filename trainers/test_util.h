/* trainers/test_util.h: what the trainer tests share (test_ddp, test_fsdp, test_moe,
 * test_pipeline): finding the data and the build directory, skipping cleanly without
 * them, launching a trainer under weftrun with a timeout, and reading what it wrote (the
 * per-step CSV log, a weft-train checkpoint, a raw parameter dump) to compare it with a
 * reference within a tolerance.
 *
 * The programs are launched from WEFT_TOP_BUILDDIR (the top build directory; "." when
 * unset) as `timeout T ./weftrun -n N ./PROG ARGS >DIR/out 2>&1`; a launch that fails when
 * it should not (or succeeds when it should fail) has its output echoed as "# " comments.
 * Failures are cmocka assertions.
 */
#ifndef WEFT_TRAINERS_TEST_UTIL_H
#define WEFT_TRAINERS_TEST_UTIL_H

#include <stddef.h>

#include "trainers/loop.h"

struct CMUnitTest;

/* WEFT_SHARED_DATA/tinyshakespeare.txt (the Makefile points it at ../shared/data). */
const char *tu_data_path(void);
const char *tu_build_dir(void);

/* NULL when the data and every program in progs (NULL-terminated names in the build
 * directory) are there; else the first path that is missing. */
const char *tu_missing(const char *const *progs);
/* Turns tests[first..n) into passing tests named "NAME # SKIP WHY not found". */
void tu_skip(struct CMUnitTest *tests, size_t first, size_t n, const char *why);

/* A fresh directory from a template such as "/tmp/test_ddp.XXXXXX" (edited in place). */
void tu_mkdtemp(char *tmpl);
void tu_rmdir(const char *dir);

/* Launches prog on nranks with args (`--data` comes first, then args) within timeout_s;
 * stdout and stderr go to dir/out. Returns the shell's status; echoes the output when
 * (status != 0) != expect_fail. */
int tu_launch(const char *dir, int nranks, const char *prog, int timeout_s, const char *args, int expect_fail);
/* tu_launch, asserting success. */
void tu_run(const char *dir, int nranks, const char *prog, int timeout_s, const char *args);

/* How many lines of dir/out (a launch's output) contain needle; whether any does. */
int tu_output_count(const char *dir, const char *needle);
int tu_output_has(const char *dir, const char *needle);

/* The tests' tiny run: seq 16, d 32, 2 heads, `layers` layers, `steps` steps,
 * eval_batches validation batches, a fixed MFU peak (no measurement), the CSV log in
 * dir/log.csv, no plot, and out_flag ("--save", "--dump-params") writing dir/ckpt; then
 * extra. Within 120 s; returns the status as tu_launch. */
typedef struct tu_tiny {
  int layers, steps, eval_batches;
  const char *out_flag;
} tu_tiny;
int tu_launch_tiny(const char *dir, int nranks, const char *prog, tu_tiny t, const char *extra, int expect_fail);

/* Losses of steps 1..steps from dir/log.csv (asserts all are there); *val (if given) gets
 * the last validation loss in the log, NaN when none. */
void tu_read_losses(const char *dir, float *loss, int steps, float *val);
/* The parameters of the checkpoint dir/ckpt of a model shaped like like (asserting it is
 * at step `step`); caller frees. */
float *tu_read_checkpoint(const char *dir, const gpt_model *like, long step);
/* The whole state of the sharded checkpoint dir (ckpt.h): 3 x m->model.floats floats,
 * parameters then AdamW m then v, read with the trainers' own loader (asserting it
 * succeeds); *m gets its manifest (gpt_ckpt_manifest_free). Caller frees. */
float *tu_read_sharded(const char *dir, gpt_ckpt_manifest *m);
/* Asserts two sharded checkpoints hold the same step, batch RNG and state, bit for bit. */
void tu_expect_same_sharded(const char *dir_a, const char *dir_b);
/* Asserts got holds want's step and batch RNG, and parameters within tol of want's;
 * prints the largest difference (and whether they are identical) after what. */
void tu_expect_sharded_within(const char *want, const char *got, double tol, const char *what);

/* A raw float32 file; *n gets its length in floats. Caller frees. */
float *tu_read_floats(const char *path, size_t *n);

/* Largest relative difference of n losses. */
double tu_loss_rel_diff(const float *a, const float *b, int n);
/* Fails, naming the step, when a loss is further than rel_tol from the reference (plus the
 * 2e-7 the CSV's 6 decimals may round away). */
void tu_expect_losses(const float *got, const float *want, int n, double rel_tol);
/* Largest |a - b| over n floats (a NaN counts as infinite); *at gets where. */
double tu_max_abs_diff(const float *a, const float *b, size_t n, size_t *at);
/* Fails when a parameter is further than abs_tol from the reference. */
void tu_expect_params(const float *got, const float *want, size_t n, double abs_tol);

/* The single-process reference: weft-train's loop (gpt_run) on a tiny model (seq 16,
 * d 32, 2 heads, `layers` layers), batch `batch`, for `steps` steps, losses in loss;
 * then, with eval_batches > 0, *val gets the validation loss. Returns -1 on failure. */
int tu_reference_run(gpt_run *run, int layers, int batch, int eval_batches, int steps, float *loss, float *val);

#endif
