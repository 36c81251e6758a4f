/* trainers/test_util.c: launching the trainers and reading what they wrote, for the
 * trainer tests; see test_util.h. */
#include "trainers/test_util.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* cmocka.h needs the headers above first. */
#include <cmocka.h>

#ifndef WEFT_SHARED_DATA
#define WEFT_SHARED_DATA "../shared/data"
#endif

enum { MAX_SKIPPED = 32 };

const char *tu_data_path(void) {
  static char path[4096];
  snprintf(path, sizeof(path), "%s/tinyshakespeare.txt", WEFT_SHARED_DATA);
  return path;
}

const char *tu_build_dir(void) {
  const char *d = getenv("WEFT_TOP_BUILDDIR");
  return d && *d ? d : ".";
}

const char *tu_missing(const char *const *progs) {
  static char prog[4200];
  if (access(tu_data_path(), R_OK)) return tu_data_path();
  for (; progs && *progs; progs++) {
    snprintf(prog, sizeof(prog), "%s/%s", tu_build_dir(), *progs);
    if (access(prog, X_OK)) return prog;
  }
  return NULL;
}

static void skipped(void **state) {}

void tu_skip(struct CMUnitTest *tests, size_t first, size_t n, const char *why) {
  static char names[MAX_SKIPPED][4400];
  for (size_t i = first, k = 0; i < n && k < MAX_SKIPPED; i++, k++) {
    snprintf(names[k], sizeof(names[k]), "%s # SKIP %s not found", tests[i].name, why);
    tests[i].name = names[k];
    tests[i].test_func = skipped;
  }
}

void tu_mkdtemp(char *tmpl) { assert_non_null(mkdtemp(tmpl)); }

void tu_rmdir(const char *dir) {
  char cmd[4200];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "# could not remove %s\n", dir);
}

int tu_launch(const char *dir, int nranks, const char *prog, int timeout_s, const char *args, int expect_fail) {
  char cmd[24576];
  snprintf(cmd, sizeof(cmd), "cd '%s' && timeout %d ./weftrun -n %d ./%s --data '%s' %s >%s/out 2>&1",
           tu_build_dir(), timeout_s, nranks, prog, tu_data_path(), args, dir);
  int rc = system(cmd);
  if ((rc != 0) != expect_fail) {
    snprintf(cmd, sizeof(cmd), "sed 's/^/# /' %s/out", dir);
    if (system(cmd)) fprintf(stderr, "# (no output)\n");
  }
  return rc;
}

void tu_run(const char *dir, int nranks, const char *prog, int timeout_s, const char *args) {
  assert_int_equal(tu_launch(dir, nranks, prog, timeout_s, args, 0), 0);
}

int tu_output_count(const char *dir, const char *needle) {
  char path[4200], line[8192];
  snprintf(path, sizeof(path), "%s/out", dir);
  FILE *f = fopen(path, "r");
  int n = 0;
  while (f && fgets(line, sizeof(line), f)) n += strstr(line, needle) != NULL;
  if (f) fclose(f);
  return n;
}

int tu_output_has(const char *dir, const char *needle) { return tu_output_count(dir, needle) > 0; }

int tu_launch_tiny(const char *dir, int nranks, const char *prog, tu_tiny t, const char *extra, int expect_fail) {
  char args[16384];
  snprintf(args, sizeof(args),
           "--layers %d --dmodel 32 --heads 2 --seq 16 --steps %d --eval-batches %d --peak-gflops 100 "
           "--log %s/log.csv --plot none %s %s/ckpt %s",
           t.layers, t.steps, t.eval_batches, dir, t.out_flag, dir, extra);
  return tu_launch(dir, nranks, prog, 120, args, expect_fail);
}

void tu_read_losses(const char *dir, float *loss, int steps, float *val) {
  char path[4200], line[512];
  snprintf(path, sizeof(path), "%s/log.csv", dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  int n = 0;
  long step;
  double l, v;
  if (val) *val = NAN;
  while (fgets(line, sizeof(line), f)) {
    if (sscanf(line, "%ld,%lf,", &step, &l) != 2 || step != n + 1 || n >= steps) continue;
    loss[n++] = (float)l;
    if (val && sscanf(strchr(line, ',') + 1, "%*[^,],%lf,", &v) == 1) *val = (float)v;
  }
  fclose(f);
  assert_int_equal(n, steps);
}

float *tu_read_checkpoint(const char *dir, const gpt_model *like, long step) {
  char path[4200], err[512];
  gpt_model *m = gpt_model_create(&like->cfg, 1, like->be, err, sizeof(err));
  assert_non_null(m);
  size_t n = like->lay.total;
  gpt_train_state st = {.adam_m = calloc(n, 4), .adam_v = calloc(n, 4)};
  snprintf(path, sizeof(path), "%s/ckpt", dir);
  if (gpt_checkpoint_load(path, m, &st, err, sizeof(err))) fail_msg("%s", err);
  assert_int_equal(st.step, step);
  float *params = malloc(n * sizeof(float));
  assert_non_null(params);
  memcpy(params, m->params, n * sizeof(float));
  free(st.adam_m);
  free(st.adam_v);
  gpt_model_free(m);
  return params;
}

float *tu_read_sharded(const char *dir, gpt_ckpt_manifest *m) {
  char err[2048];
  if (gpt_ckpt_manifest_read(dir, m, err, sizeof(err))) fail_msg("%s", err);
  size_t n = m->model.floats;
  float *all = malloc(3 * n * sizeof(float));
  assert_non_null(all);
  gpt_ckpt_seg whole = {0, 0, n};
  gpt_ckpt_local need = {{all, all + n, all + 2 * n}, &whole, 1};
  if (gpt_ckpt_load(dir, m, &need, err, sizeof(err))) fail_msg("%s", err);
  return all;
}

void tu_expect_same_sharded(const char *dir_a, const char *dir_b) {
  gpt_ckpt_manifest a, b;
  float *sa = tu_read_sharded(dir_a, &a), *sb = tu_read_sharded(dir_b, &b);
  assert_int_equal(a.step, b.step);
  assert_memory_equal(&a.rng, &b.rng, sizeof(a.rng));
  assert_int_equal(a.model.floats, b.model.floats);
  const char *what[3] = {"parameters", "AdamW m", "AdamW v"};
  size_t n = a.model.floats, at;
  for (int i = 0; i < 3; i++)
    if (memcmp(sa + i * n, sb + i * n, n * sizeof(float))) {
      double worst = tu_max_abs_diff(sa + i * n, sb + i * n, n, &at);
      fail_msg("%s differ from %s's: %s up to %.3g (float %zu)", dir_a, dir_b, what[i], worst, at);
    }
  free(sa);
  free(sb);
  gpt_ckpt_manifest_free(&a);
  gpt_ckpt_manifest_free(&b);
}

void tu_expect_sharded_within(const char *want_dir, const char *got_dir, double tol, const char *what) {
  gpt_ckpt_manifest a, b;
  float *want = tu_read_sharded(want_dir, &a), *got = tu_read_sharded(got_dir, &b);
  size_t at, n = a.model.floats;
  assert_int_equal(b.model.floats, n);
  double worst = tu_max_abs_diff(got, want, n, &at);
  print_message("# %s: parameters within %.3g (float %zu), %s bit for bit\n", what, worst, at,
                memcmp(got, want, n * sizeof(float)) ? "not" : "even");
  assert_int_equal(b.step, a.step);
  assert_memory_equal(&a.rng, &b.rng, sizeof(a.rng));
  tu_expect_params(got, want, n, tol);
  free(want);
  free(got);
  gpt_ckpt_manifest_free(&a);
  gpt_ckpt_manifest_free(&b);
}

float *tu_read_floats(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f) / sizeof(float);
  rewind(f);
  float *v = malloc(*n * sizeof(float));
  assert_true(*n > 0 && v && fread(v, sizeof(float), *n, f) == *n);
  fclose(f);
  return v;
}

double tu_loss_rel_diff(const float *a, const float *b, int n) {
  double worst = 0.0;
  for (int i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]) / fabs(b[i]));
  return worst;
}

void tu_expect_losses(const float *got, const float *want, int n, double rel_tol) {
  for (int i = 0; i < n; i++) {
    double rel = fabs(got[i] - want[i]) / fabs(want[i]);
    /* The CSV keeps 6 decimals, so a loss near 4 carries up to 1.3e-7 of print rounding. */
    if (rel > rel_tol + 2e-7) fail_msg("step %d: loss %.6f, reference %.6f", i + 1, got[i], want[i]);
  }
}

double tu_max_abs_diff(const float *a, const float *b, size_t n, size_t *at) {
  double worst = 0.0;
  *at = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d, *at = i;
  }
  return worst;
}

void tu_expect_params(const float *got, const float *want, size_t n, double abs_tol) {
  size_t at;
  double worst = tu_max_abs_diff(got, want, n, &at);
  if (worst > abs_tol)
    fail_msg("parameter %zu differs by %.3g (%.9g vs reference %.9g)", at, worst, got[at], want[at]);
}

int tu_reference_run(gpt_run *run, int layers, int batch, int eval_batches, int steps, float *loss, float *val) {
  char err[512];
  gpt_run_opts o = gpt_run_defaults();
  o.data = tu_data_path();
  o.model = (gpt_config){.seq = 16, .layers = layers, .dmodel = 32, .heads = 2};
  o.batch = batch;
  o.eval_batches = eval_batches;
  if (gpt_run_init(run, &o, err, sizeof(err))) {
    fprintf(stderr, "reference: %s\n", err);
    return -1;
  }
  for (int i = 0; i < steps; i++) loss[i] = gpt_run_step(run);
  if (val && eval_batches > 0) *val = gpt_run_eval(run);
  return 0;
}
