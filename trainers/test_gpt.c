/* trainers/test_gpt.c: checks of the reference GPT (trainers/gpt.h).
 *
 * Backward passes against central finite differences, in fp32 with eps 1e-3: every kernel
 * (LayerNorm, GELU, causal softmax, cross-entropy) on every element of its inputs, the causal
 * attention kernels against a double-precision reference on shapes with every tail, a block
 * and the head on their inputs, and the whole model on each parameter tensor. The error of an
 * element is |fd - analytic| / max(|fd|, |analytic|, 0.1 * largest |analytic| of its
 * tensor), on the largest gradients of each tensor one by one and on the whole tensor along
 * random directions (see trainers/test_fd.h). Then training on tinyshakespeare:
 * the loss falls over 50 steps, and a run saved and resumed after 3 steps gives the same
 * losses and parameters bit for bit as one that never stopped. The data tests pass with a
 * "# SKIP" directive when ../shared/data/tinyshakespeare.txt is missing.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "trainers/backend_cpu.h"
#include "trainers/blas_core.h"
#include "trainers/loop.h"
#include "trainers/test_fd.h"
#include "trainers/test_util.h"

static double dot(const float *a, const float *b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    s += (double)a[i] * b[i];
  return s;
}

static int fd_setup(void **state) {
  fd_reset(1e-3f, 1e-2);
  return 0;
}

static int fd_teardown(void **state) {
  print_message("largest finite-difference error %.2e (limit %.0e)\n", fd_worst, fd_tol);
  return 0;
}

/* ----------------------------------------------------------------- kernels */

/* Each kernel check: f = sum(out * R) for a fixed random R, so d f / d out = R. */
typedef struct kernel_ctx {
  const gpt_backend *be;
  int rows, d;
  float *x, *w, *b, *out, *mean, *rstd, *r;
  int *targets;
} kernel_ctx;

static double ln_fn(void *p) {
  kernel_ctx *k = p;
  k->be->layernorm_fwd(k->out, k->mean, k->rstd, k->x, k->w, k->b, k->rows, k->d);
  return dot(k->out, k->r, (size_t)k->rows * k->d);
}

static double gelu_fn(void *p) {
  kernel_ctx *k = p;
  k->be->gelu_fwd(k->out, NULL, k->x, (size_t)k->rows * k->d);
  return dot(k->out, k->r, (size_t)k->rows * k->d);
}

static double softmax_fn(void *p) {
  kernel_ctx *k = p;
  k->be->softmax_causal_fwd(k->out, k->x, k->d, 0.5f);
  return dot(k->out, k->r, (size_t)k->d * k->d);
}

static double ce_fn(void *p) {
  kernel_ctx *k = p;
  return k->be->cross_entropy(NULL, k->x, k->targets, k->rows, k->d);
}

static kernel_ctx kernel_setup(int rows, int d, gpt_rng *rng) {
  kernel_ctx k = {.be = gpt_backend_cpu(), .rows = rows, .d = d};
  size_t n = (size_t)rows * d;
  k.x = malloc(n * sizeof(float));
  k.out = malloc(n * sizeof(float));
  k.r = malloc(n * sizeof(float));
  k.w = malloc((size_t)d * sizeof(float));
  k.b = malloc((size_t)d * sizeof(float));
  k.mean = malloc((size_t)rows * sizeof(float));
  k.rstd = malloc((size_t)rows * sizeof(float));
  k.targets = malloc((size_t)rows * sizeof(int));
  fd_fill_normal(k.x, n, rng, 1.0);
  fd_fill_normal(k.r, n, rng, 1.0);
  fd_fill_normal(k.w, (size_t)d, rng, 1.0);
  fd_fill_normal(k.b, (size_t)d, rng, 1.0);
  for (int i = 0; i < rows; i++)
    k.targets[i] = (int)gpt_rng_below(rng, (uint64_t)d);
  return k;
}

static void kernel_free(kernel_ctx *k) {
  free(k->x);
  free(k->out);
  free(k->r);
  free(k->w);
  free(k->b);
  free(k->mean);
  free(k->rstd);
  free(k->targets);
}

/* Widths 16 (one vector of the kernels' 16 lanes) and 37 (two and a scalar tail of 5). */
static void layernorm_backward_matches_finite_differences(void **state) {
  const int widths[] = {16, 37};
  for (size_t i = 0; i < sizeof(widths) / sizeof(widths[0]); i++) {
    int d = widths[i];
    gpt_rng rng;
    gpt_rng_seed(&rng, 11);
    kernel_ctx k = kernel_setup(6, d, &rng);
    size_t n = 6 * (size_t)d;
    float *dx = calloc(n, sizeof(float)), *dw = calloc((size_t)d, sizeof(float)), *db = calloc((size_t)d, sizeof(float));
    ln_fn(&k);
    k.be->layernorm_bwd(dx, dw, db, k.r, k.x, k.w, k.mean, k.rstd, 6, d);
    fd_check_gradient("layernorm dx", k.x, dx, n, (int)n, ln_fn, &k, &rng);
    fd_check_gradient("layernorm dw", k.w, dw, (size_t)d, d, ln_fn, &k, &rng);
    fd_check_gradient("layernorm db", k.b, db, (size_t)d, d, ln_fn, &k, &rng);
    free(dx);
    free(dw);
    free(db);
    kernel_free(&k);
  }
}

/* dx from the derivative the forward kept, against finite differences of the forward; the
 * derivative written over its own input (as the MoE experts keep it) is the same; the bias
 * gradient summed on the way equals bias_grad of dx, bit for bit. */
static void gelu_backward_matches_finite_differences(void **state) {
  gpt_rng rng;
  gpt_rng_seed(&rng, 12);
  kernel_ctx k = kernel_setup(4, 32, &rng);
  float *dx = calloc(128, sizeof(float)), *dg = calloc(128, sizeof(float)), *out = calloc(128, sizeof(float));
  float *xin = malloc(128 * sizeof(float)), *db = calloc(32, sizeof(float)), *db_ref = calloc(32, sizeof(float));
  k.be->gelu_fwd(out, dg, k.x, 128);
  k.be->gelu_bwd(dx, NULL, dg, k.r, 4, 32);
  fd_check_gradient("gelu dx", k.x, dx, 128, 128, gelu_fn, &k, &rng);
  memcpy(xin, k.x, 128 * sizeof(float));
  k.be->gelu_fwd(out, xin, xin, 128);
  assert_memory_equal(xin, dg, 128 * sizeof(float));
  memcpy(out, k.r, 128 * sizeof(float));
  k.be->gelu_bwd(out, db, dg, out, 4, 32);
  assert_memory_equal(out, dx, 128 * sizeof(float));
  k.be->bias_grad(db_ref, dx, 4, 32);
  assert_memory_equal(db, db_ref, 32 * sizeof(float));
  free(dx), free(dg), free(out), free(xin), free(db), free(db_ref);
  kernel_free(&k);
}

static void causal_softmax_backward_matches_finite_differences(void **state) {
  gpt_rng rng;
  gpt_rng_seed(&rng, 13);
  kernel_ctx k = kernel_setup(8, 8, &rng); /* one 8 x 8 score matrix */
  float *ds = calloc(64, sizeof(float));
  softmax_fn(&k);
  k.be->softmax_causal_bwd(ds, k.out, k.r, 8, 0.5f);
  for (int i = 0; i < 8; i++)
    for (int j = i + 1; j < 8; j++)
      assert_true(k.out[i * 8 + j] == 0.0f && ds[i * 8 + j] == 0.0f);
  fd_check_gradient("softmax ds", k.x, ds, 64, 64, softmax_fn, &k, &rng);
  free(ds);
  kernel_free(&k);
}

static void cross_entropy_backward_matches_finite_differences(void **state) {
  gpt_rng rng;
  gpt_rng_seed(&rng, 14);
  kernel_ctx k = kernel_setup(5, 12, &rng);
  float *dl = calloc(60, sizeof(float));
  double loss = k.be->cross_entropy(dl, k.x, k.targets, 5, 12);
  assert_true(loss > 0.0 && isfinite(loss));
  fd_check_gradient("cross-entropy dlogits", k.x, dl, 60, 60, ce_fn, &k, &rng);
  free(dl);
  kernel_free(&k);
}

/* ----------------------------------------------------------------- model */

/* The tiny model of the checks, with every parameter randomised (LayerNorm and biases too,
 * so their gradients are not trivially zero or symmetric). */
#define TINY_B 2
#define TINY_T 8
static const char tiny_text[] = "to be, or not to be: that is the question.";

typedef struct model_ctx {
  gpt_model *m;
  gpt_tokenizer tok;
  int tokens[TINY_B * TINY_T], targets[TINY_B * TINY_T];
  float *x, *y, *r; /* block / head input, output, output weights */
  int block;        /* which block block_fn runs */
} model_ctx;

static void tiny_model(model_ctx *c) {
  memset(c, 0, sizeof(*c));
  size_t len = strlen(tiny_text);
  gpt_tokenizer_build(&c->tok, (const unsigned char *)tiny_text, len);
  gpt_config cfg = {.vocab = c->tok.vocab, .seq = TINY_T, .layers = 2, .dmodel = 16, .heads = 2};
  char err[256];
  c->m = gpt_model_create(&cfg, TINY_B, gpt_backend_cpu(), err, sizeof(err));
  assert_non_null(c->m);
  gpt_init_params(c->m, 5);
  gpt_rng rng;
  gpt_rng_seed(&rng, 6);
  for (size_t i = 0; i < c->m->lay.total; i++)
    c->m->params[i] += (float)(0.1 * gpt_rng_normal(&rng));
  int ids[sizeof(tiny_text)];
  gpt_tokenizer_encode(&c->tok, (const unsigned char *)tiny_text, len, ids, NULL);
  for (int b = 0; b < TINY_B; b++)
    for (int t = 0; t < TINY_T; t++) {
      c->tokens[b * TINY_T + t] = ids[b * 13 + t];
      c->targets[b * TINY_T + t] = ids[b * 13 + t + 1];
    }
  size_t n = (size_t)TINY_B * TINY_T * cfg.dmodel;
  c->x = malloc(n * sizeof(float));
  c->y = malloc(n * sizeof(float));
  c->r = malloc(n * sizeof(float));
  fd_fill_normal(c->x, n, &rng, 1.0);
  fd_fill_normal(c->r, n, &rng, 1.0);
}

static void tiny_free(model_ctx *c) {
  gpt_model_free(c->m);
  free(c->x);
  free(c->y);
  free(c->r);
}

static double model_loss_fn(void *p) {
  model_ctx *c = p;
  gpt_eval_loss(c->m, c->tokens, c->targets, TINY_B, TINY_T);
  return c->m->loss; /* the double, finer than the float returned */
}

static void every_parameter_gradient_matches_finite_differences(void **state) {
  model_ctx c;
  tiny_model(&c);
  gpt_model *m = c.m;
  gpt_zero_grad(m);
  float loss = gpt_forward(m, c.tokens, c.targets, TINY_B, TINY_T);
  gpt_backward(m);
  assert_true(loss == (float)model_loss_fn(&c));
  gpt_rng rng;
  gpt_rng_seed(&rng, 7);
  for (int i = 0; i < m->lay.ntensors; i++) {
    const gpt_tensor *t = &m->lay.tensors[i];
    fd_check_gradient(t->name, m->params + t->offset, m->grads + t->offset, t->size, 4, model_loss_fn, &c, &rng);
  }
  tiny_free(&c);
}

static double block_fn(void *p) {
  model_ctx *c = p;
  gpt_model *m = c->m;
  gpt_block_forward(m, c->block, gpt_unit_ptr(m, m->params, 1 + c->block), c->x, c->y, TINY_B, TINY_T);
  return dot(c->y, c->r, (size_t)TINY_B * TINY_T * m->cfg.dmodel);
}

static void block_input_gradient_matches_finite_differences(void **state) {
  model_ctx c;
  tiny_model(&c);
  gpt_model *m = c.m;
  size_t n = (size_t)TINY_B * TINY_T * m->cfg.dmodel;
  float *dx = malloc(n * sizeof(float));
  gpt_rng rng;
  gpt_rng_seed(&rng, 8);
  for (c.block = 0; c.block < m->cfg.layers; c.block++) {
    gpt_zero_grad(m);
    block_fn(&c);
    gpt_block_backward(m, c.block, gpt_unit_ptr(m, m->params, 1 + c.block),
                       gpt_unit_ptr(m, m->grads, 1 + c.block), c.r, dx, TINY_B, TINY_T);
    fd_check_gradient("block dx", c.x, dx, n, 24, block_fn, &c, &rng);
  }
  free(dx);
  tiny_free(&c);
}

static double head_fn(void *p) {
  model_ctx *c = p;
  gpt_model *m = c->m;
  gpt_head_forward(m, gpt_unit_ptr(m, m->params, m->cfg.layers + 1), gpt_unit_ptr(m, m->params, 0), c->x,
                   c->targets, TINY_B, TINY_T);
  return m->loss;
}

static void head_input_gradient_matches_finite_differences(void **state) {
  model_ctx c;
  tiny_model(&c);
  gpt_model *m = c.m;
  size_t n = (size_t)TINY_B * TINY_T * m->cfg.dmodel;
  float *dx = malloc(n * sizeof(float));
  gpt_zero_grad(m);
  head_fn(&c);
  gpt_head_backward(m, gpt_unit_ptr(m, m->params, m->cfg.layers + 1), gpt_unit_ptr(m, m->params, 0),
                    gpt_unit_ptr(m, m->grads, m->cfg.layers + 1), gpt_unit_ptr(m, m->grads, 0), dx, TINY_B,
                    TINY_T);
  gpt_rng rng;
  gpt_rng_seed(&rng, 9);
  fd_check_gradient("head dx", c.x, dx, n, 24, head_fn, &c, &rng);
  free(dx);
  tiny_free(&c);
}

static void layout_units_cover_the_buffer_in_order(void **state) {
  gpt_config cfg = {.vocab = 65, .seq = 128, .layers = 4, .dmodel = 256, .heads = 4};
  char err[256];
  gpt_model *m = gpt_model_create(&cfg, 1, gpt_backend_cpu(), err, sizeof(err));
  assert_non_null(m);
  const gpt_layout *lay = &m->lay;
  assert_int_equal(lay->nunits, 6);
  assert_int_equal(lay->unit_offset[0], 0);
  assert_int_equal(lay->unit_offset[lay->nunits], lay->total);
  for (int u = 1; u <= cfg.layers; u++)
    assert_int_equal(lay->unit_offset[u + 1] - lay->unit_offset[u], lay->block_size);
  size_t off = 0;
  for (int i = 0; i < lay->ntensors; i++) {
    assert_int_equal(lay->tensors[i].offset, off);
    off += lay->tensors[i].size;
  }
  assert_int_equal(off, lay->total);
  /* 4 layers of 12 d^2 + 13 d, wte, wpe, final LN. */
  size_t d = 256, block = 12 * d * d + 13 * d;
  assert_int_equal(lay->total, 65 * d + 128 * d + 4 * block + 2 * d);
  assert_int_equal(gpt_num_params_nonembedding(&cfg), lay->total - 128 * d);
  double fpt = gpt_flops_per_token(&cfg);
  assert_true(fabs(fpt - (6.0 * (lay->total - 128 * d) + 12.0 * 4 * 4 * 64 * 128)) < 1.0);
  assert_null(gpt_model_create(&(gpt_config){65, 128, 4, 250, 4}, 1, gpt_backend_cpu(), err, sizeof(err)));
  assert_non_null(strstr(err, "multiple of heads"));
  gpt_model_free(m);
}

/* ----------------------------------------------------------------- training */

static gpt_run_opts small_run(void) {
  gpt_run_opts o = gpt_run_defaults();
  o.data = tu_data_path();
  o.model = (gpt_config){.seq = 32, .layers = 2, .dmodel = 32, .heads = 2};
  o.batch = 8;
  o.opt.lr = 3e-3f;
  o.eval_batches = 2;
  o.seed = 42;
  return o;
}

static void loss_decreases_over_50_steps_on_tinyshakespeare(void **state) {
  gpt_run_opts o = small_run();
  gpt_run r;
  char err[512];
  if (gpt_run_init(&r, &o, err, sizeof(err))) fail_msg("%s", err);
  float val0 = gpt_run_eval(&r), first = 0, last = 0;
  for (int i = 0; i < 50; i++) {
    float loss = gpt_run_step(&r);
    if (i < 5) first += loss / 5;
    if (i >= 45) last += loss / 5;
  }
  float val1 = gpt_run_eval(&r);
  print_message("train loss %.3f -> %.3f (first / last 5 steps), val %.3f -> %.3f\n", first, last, val0,
                val1);
  assert_true(last < first - 0.5f);
  assert_true(val1 < val0 - 0.5f);
  gpt_run_free(&r);
}

static void run_steps(gpt_run *r, int n, float *losses) {
  for (int i = 0; i < n; i++)
    losses[i] = gpt_run_step(r);
}

static void resumed_run_matches_uninterrupted_run_bit_for_bit(void **state) {
  gpt_run_opts o = small_run();
  gpt_run a, b;
  char err[512], ckpt[] = "/tmp/weft_test_gpt_XXXXXX";
  float la[6], lb[6];
  int fd = mkstemp(ckpt);
  assert_true(fd >= 0);
  close(fd);

  if (gpt_run_init(&a, &o, err, sizeof(err))) fail_msg("%s", err);
  run_steps(&a, 6, la);

  if (gpt_run_init(&b, &o, err, sizeof(err))) fail_msg("%s", err);
  run_steps(&b, 3, lb);
  if (gpt_run_save(&b, ckpt, err, sizeof(err))) fail_msg("%s", err);
  gpt_run_free(&b);

  o.resume = ckpt;
  o.model = (gpt_config){.seq = 1, .layers = 1, .dmodel = 1, .heads = 1}; /* ignored: from the file */
  if (gpt_run_init(&b, &o, err, sizeof(err))) fail_msg("%s", err);
  assert_int_equal(b.st.step, 3);
  run_steps(&b, 3, lb + 3);
  unlink(ckpt);

  assert_memory_equal(la, lb, sizeof(la));
  assert_int_equal(a.m->lay.total, b.m->lay.total);
  assert_memory_equal(a.m->params, b.m->params, a.m->lay.total * sizeof(float));
  assert_memory_equal(a.st.adam_v, b.st.adam_v, a.m->lay.total * sizeof(float));
  gpt_run_free(&a);
  gpt_run_free(&b);
}

static void corrupt_checkpoint_is_refused(void **state) {
  gpt_run_opts o = small_run();
  gpt_run r;
  char err[512], ckpt[] = "/tmp/weft_test_gpt_XXXXXX";
  int fd = mkstemp(ckpt);
  assert_true(fd >= 0);
  close(fd);
  if (gpt_run_init(&r, &o, err, sizeof(err))) fail_msg("%s", err);
  assert_int_equal(gpt_run_save(&r, ckpt, err, sizeof(err)), 0);
  gpt_run_free(&r);
  FILE *f = fopen(ckpt, "r+b");
  assert_non_null(f);
  fseek(f, 1000, SEEK_SET);
  fputc(0x5a, f);
  fclose(f);
  o.resume = ckpt;
  assert_int_equal(gpt_run_init(&r, &o, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "checksum"));
  gpt_run_free(&r);
  unlink(ckpt);
}

static void missing_data_file_is_reported(void **state) {
  gpt_run_opts o = small_run();
  o.data = "/nonexistent/weft/tiny.txt";
  gpt_run r;
  char err[512];
  assert_int_equal(gpt_run_init(&r, &o, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "/nonexistent/weft/tiny.txt"));
  gpt_run_free(&r);
}

/* ----------------------------------------------------------------- causal attention */

/* The largest |got - want| over n values, relative to the largest |want| (at least 1). */
static double rel_err(const float *got, const double *want, size_t n) {
  double worst = 0.0, scale = 1.0;
  for (size_t i = 0; i < n; i++) scale = fabs(want[i]) > scale ? fabs(want[i]) : scale;
  for (size_t i = 0; i < n; i++) worst = fabs(got[i] - want[i]) > worst ? fabs(got[i] - want[i]) : worst;
  return worst / scale;
}

/* Causal attention of every (b, h) in double, straight from the definitions (backend_cpu.h):
 * P = softmax(scale Q K^T) over j <= i, Y = P V; dP = dY V^T, dS = scale P (dP - rowsum(P dP)),
 * dQ = dS K, dK = dS^T Q, dV = P^T dY. */
static void attention_reference(const float *qkv, const float *datty, double *probs, double *atty, double *dqkv,
                                int B, int T, int H, int hd, float scale) {
  size_t d = (size_t)H * hd, ld = 3 * d;
  double *dp = calloc((size_t)T * T, sizeof(double));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const float *q = qkv + (size_t)b * T * ld + (size_t)h * hd, *k = q + d, *v = k + d;
      const float *dy = datty + (size_t)b * T * d + (size_t)h * hd;
      double *p = probs + ((size_t)b * H + h) * T * T, *y = atty + (size_t)b * T * d + (size_t)h * hd;
      double *dq = dqkv + (size_t)b * T * ld + (size_t)h * hd, *dk = dq + d, *dv = dk + d;
      for (int i = 0; i < T; i++) {
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j <= i; j++) {
          double sc = 0.0;
          for (int c = 0; c < hd; c++) sc += (double)q[i * ld + c] * k[j * ld + c];
          p[i * T + j] = scale * sc;
          mx = p[i * T + j] > mx ? p[i * T + j] : mx;
        }
        for (int j = 0; j <= i; j++) sum += p[i * T + j] = exp(p[i * T + j] - mx);
        for (int j = 0; j <= i; j++) p[i * T + j] /= sum;
        for (int c = 0; c < hd; c++) {
          double acc = 0.0;
          for (int j = 0; j <= i; j++) acc += p[i * T + j] * v[j * ld + c];
          y[i * d + c] = acc;
        }
        double rowdot = 0.0;
        for (int j = 0; j <= i; j++) {
          double g = 0.0;
          for (int c = 0; c < hd; c++) g += (double)dy[i * d + c] * v[j * ld + c];
          dp[i * T + j] = g;
          rowdot += p[i * T + j] * g;
        }
        for (int j = 0; j <= i; j++) dp[i * T + j] = scale * p[i * T + j] * (dp[i * T + j] - rowdot); /* dS */
      }
      for (int i = 0; i < T; i++)
        for (int c = 0; c < hd; c++) {
          double gq = 0.0, gk = 0.0, gv = 0.0;
          for (int j = 0; j <= i; j++) gq += dp[i * T + j] * k[j * ld + c];
          for (int r = i; r < T; r++) {
            gk += dp[r * T + i] * q[r * ld + c];
            gv += p[r * T + i] * dy[r * d + c];
          }
          dq[i * ld + c] = gq;
          dk[i * ld + c] = gk;
          dv[i * ld + c] = gv;
        }
    }
  free(dp);
}

/* The register-blocked kernels (16 floats a vector with AVX-512, 8 without: whichever this
 * CPU runs) against the reference, on shapes that leave every tail: T below, at and past a
 * block of 4 rows and a vector of 8 and 16, hd narrower than a vector, between widths, and
 * wider than one pass of accumulators (64 floats with AVX-512, 16 without). */
static void attention_kernels_match_the_definition(void **state) {
  static const int shapes[][4] = {{2, 1, 1, 4},  {1, 5, 2, 12},  {1, 17, 3, 8},  {2, 33, 2, 24},
                                  {1, 40, 1, 40}, {1, 67, 2, 64}, {1, 20, 1, 72}, {1, 9, 1, 136}};
  gpt_rng rng;
  gpt_rng_seed(&rng, 21);
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    int B = shapes[s][0], T = shapes[s][1], H = shapes[s][2], hd = shapes[s][3];
    size_t d = (size_t)H * hd, nqkv = (size_t)B * T * 3 * d, ny = (size_t)B * T * d, np = (size_t)B * H * T * T;
    float scale = 1.0f / sqrtf((float)hd);
    float *qkv = malloc(nqkv * sizeof(float)), *datty = malloc(ny * sizeof(float));
    float *probs = malloc(np * sizeof(float)), *atty = malloc(ny * sizeof(float));
    float *dqkv = malloc(nqkv * sizeof(float));
    double *rp = calloc(np, sizeof(double)), *ry = calloc(ny, sizeof(double)), *rd = calloc(nqkv, sizeof(double));
    for (size_t i = 0; i < nqkv; i++) qkv[i] = (float)gpt_rng_normal(&rng);
    for (size_t i = 0; i < ny; i++) datty[i] = (float)gpt_rng_normal(&rng);
    /* NaN above the diagonal, which the forward leaves as it was (backend_cpu.h) and the
     * backward must not read (a NaN read would spread into dqkv). */
    for (size_t i = 0; i < np; i++) probs[i] = NAN;
    assert_int_equal(gpt_cpu_attention_fwd(qkv, probs, atty, B, T, H, hd, scale), 0);
    assert_int_equal(gpt_cpu_attention_bwd(qkv, probs, datty, dqkv, B, T, H, hd, scale), 0);
    for (size_t i = 0; i < np; i++) {
      size_t row = i / T % T, col = i % T;
      if (col <= row) continue;
      if (!isnan(probs[i]))
        fail_msg("B %d T %d H %d hd %d: probs[%zu][%zu] above the diagonal was written (%g)", B, T, H, hd, row,
                 col, probs[i]);
      probs[i] = 0.0f;
    }
    attention_reference(qkv, datty, rp, ry, rd, B, T, H, hd, scale);
    double e[3] = {rel_err(probs, rp, np), rel_err(atty, ry, ny), rel_err(dqkv, rd, nqkv)};
    if (e[0] > 1e-5 || e[1] > 1e-5 || e[2] > 1e-5)
      fail_msg("B %d T %d H %d hd %d: relative error probs %.1e, y %.1e, dqkv %.1e (limit 1e-5)", B, T, H, hd,
               e[0], e[1], e[2]);
    free(qkv), free(datty), free(probs), free(atty), free(dqkv), free(rp), free(ry), free(rd);
  }
}

int main(int argc, char **argv) {
  /* The kernels the trainers it launches choose, so the in-process reference runs them too. */
  gpt_blas_choose(argv);
  int have_data = access(tu_data_path(), R_OK) == 0;
  struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(layernorm_backward_matches_finite_differences, fd_setup, fd_teardown),
      cmocka_unit_test_setup_teardown(gelu_backward_matches_finite_differences, fd_setup, fd_teardown),
      cmocka_unit_test_setup_teardown(causal_softmax_backward_matches_finite_differences, fd_setup,
                                      fd_teardown),
      cmocka_unit_test_setup_teardown(cross_entropy_backward_matches_finite_differences, fd_setup,
                                      fd_teardown),
      cmocka_unit_test(attention_kernels_match_the_definition),
      cmocka_unit_test_setup_teardown(every_parameter_gradient_matches_finite_differences, fd_setup,
                                      fd_teardown),
      cmocka_unit_test_setup_teardown(block_input_gradient_matches_finite_differences, fd_setup, fd_teardown),
      cmocka_unit_test_setup_teardown(head_input_gradient_matches_finite_differences, fd_setup, fd_teardown),
      cmocka_unit_test(layout_units_cover_the_buffer_in_order),
      cmocka_unit_test(missing_data_file_is_reported),
      cmocka_unit_test(loss_decreases_over_50_steps_on_tinyshakespeare),
      cmocka_unit_test(resumed_run_matches_uninterrupted_run_bit_for_bit),
      cmocka_unit_test(corrupt_checkpoint_is_refused),
  };
  size_t n = sizeof(tests) / sizeof(tests[0]);
  /* The data tests pass with a TAP SKIP directive in their names. */
  if (!have_data) tu_skip(tests, n - 3, n, tu_data_path());
  return _cmocka_run_group_tests("test_gpt", tests, n, NULL, NULL);
}
