/* trainers/test_moe.c: checks of the mixture-of-experts trainer (weft issue 6).
 *
 * 1. Finite differences (central, fp32, eps 1e-3) against the backward of one MoE layer
 *    (router, top-k gates, capacity with dropped tokens, experts, aux loss) for k = 1 and
 *    k = 2, on its input, router and expert weights, with f = sum(r * out) + aux; and of
 *    the whole MoE GPT (ce + aux) on every parameter tensor. Each check first asserts that
 *    the configuration really drops assignments. Routing (the choices and capacity slots)
 *    is piecewise constant, so the perturbed evaluations keep the unperturbed routing
 *    (moe_layer.freeze_routing) while recomputing probabilities, gates and aux loss: the
 *    function whose gradient the backward computes.
 * 2. Expert parallelism changes nothing: weft-train-moe on 2 ranks (E = 4, k = 1 and 2)
 *    and on 4 ranks (k = 2) must give the losses (1e-5 relative) and final parameters (1e-5
 *    absolute) of ONE process holding every expert, with --groups N on the N ranks' global
 *    batch. As a control, the same process with --groups 1 (capacity over the whole batch,
 *    so other tokens drop) must NOT match, showing the comparison can fail.
 * 3. The backward's overlap (moe_layer.h): the router's products run while the output
 *    gradients are out, every expert weight-gradient product while the input gradients
 *    come back, and no input-gradient product then (it would delay the exchange); and
 *    weft-train-moe --overlap (the exchanges on a stream) matches one process as in 2.
 * Part 2 launches weftrun from the build directory (WEFT_TOP_BUILDDIR) and passes as
 * "# SKIP" without ../shared/data/tinyshakespeare.txt or the programs.
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
#include "trainers/data.h"
#include "trainers/moe_model.h"
#include "trainers/rng.h"
#include "trainers/test_fd.h"
#include "trainers/test_util.h"

/* eps 1e-3 and 1% for the layer (fd_setup); the whole model, deeper in fp32, has FD noise
 * near 1% at eps 1e-3 (errors change sign and size with eps: 3% at 3e-4, 1% at 2e-3 —
 * noise, not bias), so model_check takes eps 2e-3 and 2%. */

/* An expert no token reached has an all-zero gradient: then f must not depend on it. */
static void check_gradient_or_unused(const char *what, float *x, const float *grad, size_t n, fd_scalar_fn f,
                                     void *ctx, gpt_rng *rng) {
  if (fd_max_abs(grad, n) > 0.0) {
    fd_check_gradient(what, x, grad, n, 3, f, ctx, rng);
    return;
  }
  double step, diff = fd_element(x, n / 2, f, ctx, &step);
  if (diff != 0.0) fail_msg("%s: zero gradient, but f changes by %.3g", what, diff);
}

/* ----------------------------------------------------------------- one layer */

enum { L_D = 8, L_H = 16, L_E = 4, L_GROUPS = 2, L_ROWS = 12 };

typedef struct layer_ctx {
  moe_layer ly;
  moe_scratch s;
  moe_exchange ex;
  const gpt_backend *be;
  float *xln, *router, *experts, *out, *r;      /* r: output weights of f */
  float *gx, *grouter, *gexperts;              /* gradients */
} layer_ctx;

static double layer_fn(void *p) {
  layer_ctx *c = p;
  assert_int_equal(moe_layer_forward(&c->ly, &c->s, &c->ex, c->be, c->router, c->experts, c->xln, c->out, L_ROWS),
                   WEFT_SUCCESS);
  double f = c->ly.aux;
  for (size_t i = 0; i < (size_t)L_ROWS * L_D; i++)
    f += (double)c->r[i] * c->out[i];
  return f;
}

static void layer_setup(layer_ctx *c, int topk, uint64_t seed) {
  memset(c, 0, sizeof(*c));
  moe_config mc = {.dmodel = L_D, .hidden = L_H, .experts = L_E, .topk = topk, .capacity_factor = 1.0f,
                   .aux_alpha = 0.5f};
  char err[256];
  assert_int_equal(moe_layer_init(&c->ly, &mc, L_GROUPS, 0, 1, L_ROWS, err, sizeof(err)), 0);
  assert_int_equal(moe_scratch_init(&c->s, &c->ly, err, sizeof(err)), 0);
  c->ex = (moe_exchange){.comm = NULL, .rank = 0, .nranks = 1};
  c->be = gpt_backend_cpu();
  size_t nx = (size_t)L_ROWS * L_D, nr = (size_t)L_D * L_E, ne = L_E * moe_expert_size(&mc);
  c->xln = malloc(nx * 4), c->out = malloc(nx * 4), c->r = malloc(nx * 4), c->gx = malloc(nx * 4);
  c->router = malloc(nr * 4), c->grouter = calloc(nr, 4);
  c->experts = malloc(ne * 4), c->gexperts = calloc(ne, 4);
  gpt_rng rng;
  gpt_rng_seed(&rng, seed);
  fd_fill_normal(c->xln, nx, &rng, 1.0);
  fd_fill_normal(c->r, nx, &rng, 1.0);
  fd_fill_normal(c->router, nr, &rng, 0.7);
  fd_fill_normal(c->experts, ne, &rng, 0.3);
}

static void layer_free(layer_ctx *c) {
  moe_layer_free(&c->ly);
  moe_scratch_free(&c->s);
  void *b[] = {c->xln, c->out, c->r, c->gx, c->router, c->grouter, c->experts, c->gexperts};
  for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++)
    free(b[i]);
}

static int count_dropped(const moe_layer *ly) {
  int n = 0;
  for (int i = 0; i < ly->rows * ly->c.topk; i++)
    n += ly->slot[i] < 0;
  return n;
}

static void layer_check(int topk, uint64_t seed) {
  layer_ctx c;
  layer_setup(&c, topk, seed);
  layer_fn(&c);
  int dropped = count_dropped(&c.ly);
  print_message("top-%d: capacity %d, %d of %d assignments dropped, aux %.4f\n", topk, c.ly.capacity, dropped,
                L_ROWS * topk, c.ly.aux);
  assert_true(dropped > 0 && dropped < L_ROWS * topk);
  assert_int_equal(moe_layer_backward(&c.ly, &c.s, &c.ex, c.be, c.router, c.experts, c.grouter, c.gexperts, c.xln,
                                      c.r, c.gx),
                   WEFT_SUCCESS);
  c.ly.freeze_routing = 1;
  gpt_rng rng;
  gpt_rng_seed(&rng, seed + 1);
  fd_check_gradient("xln", c.xln, c.gx, (size_t)L_ROWS * L_D, 6, layer_fn, &c, &rng);
  fd_check_gradient("router_w", c.router, c.grouter, (size_t)L_D * L_E, 6, layer_fn, &c, &rng);
  size_t esz = moe_expert_size(&c.ly.c);
  for (int e = 0; e < L_E; e++)
    for (int t = 0; t < MOE_EXPERT_NTENSORS; t++) {
      char name[64];
      size_t lo = moe_expert_off(&c.ly.c, t), hi = moe_expert_off(&c.ly.c, t + 1);
      snprintf(name, sizeof(name), "expert %d tensor %d", e, t);
      check_gradient_or_unused(name, c.experts + e * esz + lo, c.gexperts + e * esz + lo, hi - lo, layer_fn, &c,
                               &rng);
    }
  print_message("largest finite-difference error %.2e (limit %.0e, eps %.0e)\n", fd_worst, fd_tol, (double)fd_eps);
  layer_free(&c);
}

/* ----------------------------------------------------------------- overlap */

/* Which exchange was in flight at each matrix product of the backward (layer_ctx.ex). */
static const moe_exchange *watched;
static const gpt_backend *cpu;
static int products_during[2][2]; /* [dispatch, combine][input-gradient, weight-gradient] */

static void watching_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                          const float *b, int ldb, float beta, float *c, int ldc) {
  const char *p = watched->pending;
  int which = p == NULL ? -1 : strstr(p, "backward dispatch") ? 0 : strstr(p, "backward combine") ? 1 : -1;
  /* Weight gradients are the A^T B products that accumulate (beta 1). */
  if (which >= 0) products_during[which][trans_a && beta == 1.0f]++;
  cpu->gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void backward_overlaps_the_exchanges_with_independent_products(void **state) {
  (void)state;
  layer_ctx c;
  layer_setup(&c, 2, 5);
  layer_fn(&c);
  cpu = c.be;
  gpt_backend be = *cpu;
  be.gemm = watching_gemm;
  watched = &c.ex;
  memset(products_during, 0, sizeof(products_during));
  assert_int_equal(moe_layer_backward(&c.ly, &c.s, &c.ex, &be, c.router, c.experts, c.grouter, c.gexperts, c.xln,
                                      c.r, c.gx),
                   WEFT_SUCCESS);
  int active = 0;
  for (int j = 0; j < c.ly.nlocal; j++) active += c.ly.mstart[j + 1] > c.ly.mstart[j];
  print_message("%d active experts; products during the dispatch: %d input, %d weight; during the combine: %d "
                "input, %d weight\n", active, products_during[0][0], products_during[0][1], products_during[1][0],
                products_during[1][1]);
  assert_true(active > 0);
  assert_int_equal(products_during[0][1], 1); /* the router's weight gradient */
  assert_int_equal(products_during[0][0], 1); /* the router's input gradient */
  assert_int_equal(products_during[1][1], 2 * active);
  assert_int_equal(products_during[1][0], 0);
  assert_null(c.ex.pending);
  layer_free(&c);
}

static int fd_setup(void **state) {
  fd_reset(1e-3f, 1e-2);
  return 0;
}

static void top1_layer_backward_matches_finite_differences(void **state) {
  layer_check(1, 7);
}

static void top2_layer_backward_matches_finite_differences(void **state) {
  layer_check(2, 21);
}

/* ----------------------------------------------------------------- whole model */

#define TINY_B 2
#define TINY_T 8
static const char tiny_text[] = "to be, or not to be: that is the question.";

typedef struct model_ctx {
  moe_model *m;
  int tokens[TINY_B * TINY_T], targets[TINY_B * TINY_T];
} model_ctx;

static double model_fn(void *p) {
  model_ctx *c = p;
  assert_int_equal(moe_model_forward(c->m, c->tokens, c->targets, TINY_B, TINY_T), WEFT_SUCCESS);
  return c->m->ce + c->m->aux;
}

static void model_setup(model_ctx *c, int topk) {
  memset(c, 0, sizeof(*c));
  gpt_tokenizer tok;
  size_t len = strlen(tiny_text);
  gpt_tokenizer_build(&tok, (const unsigned char *)tiny_text, len);
  gpt_config cfg = {.vocab = tok.vocab, .seq = TINY_T, .layers = 2, .dmodel = 16, .heads = 2};
  moe_config mc = {.dmodel = 16, .hidden = 24, .experts = 4, .topk = topk, .capacity_factor = 1.0f,
                   .aux_alpha = 0.3f};
  moe_exchange ex = {.comm = NULL, .rank = 0, .nranks = 1};
  char err[256];
  c->m = moe_model_create(&cfg, &mc, TINY_B, 2, ex, err, sizeof(err));
  if (!c->m) fail_msg("%s", err);
  moe_model_init_params(c->m, 5);
  gpt_rng rng;
  gpt_rng_seed(&rng, 6);
  for (size_t i = 0; i < c->m->lay.total; i++)
    c->m->params[i] += (float)(0.1 * gpt_rng_normal(&rng));
  /* Routers far from uniform (so tokens drop) and experts large enough that their
   * gradients stand above fp32's finite-difference noise. */
  for (int l = 0; l < 2; l++)
    fd_fill_normal(moe_block_ptr(c->m, c->m->params, l) + c->m->blk_router, (size_t)16 * 4, &rng, 0.5);
  fd_fill_normal(c->m->params + c->m->rep_total, c->m->lay.total - c->m->rep_total, &rng, 0.3);
  int ids[sizeof(tiny_text)];
  gpt_tokenizer_encode(&tok, (const unsigned char *)tiny_text, len, ids, NULL);
  for (int b = 0; b < TINY_B; b++)
    for (int t = 0; t < TINY_T; t++) {
      c->tokens[b * TINY_T + t] = ids[b * 13 + t];
      c->targets[b * TINY_T + t] = ids[b * 13 + t + 1];
    }
}

static void model_check(int topk) {
  fd_reset(2e-3f, 2e-2);
  model_ctx c;
  model_setup(&c, topk);
  moe_model *m = c.m;
  model_fn(&c);
  int dropped = 0;
  for (int l = 0; l < m->layers; l++)
    dropped += count_dropped(&m->moe[l]);
  print_message("top-%d model: ce %.4f aux %.4f, %d assignments dropped\n", topk, m->ce, m->aux, dropped);
  assert_true(dropped > 0);
  assert_int_equal(moe_model_backward(m), WEFT_SUCCESS);
  for (int l = 0; l < m->layers; l++)
    m->moe[l].freeze_routing = 1;
  gpt_rng rng;
  gpt_rng_seed(&rng, 7);
  for (int i = 0; i < m->lay.ntensors; i++) {
    const gpt_tensor *t = &m->lay.tensors[i];
    check_gradient_or_unused(t->name, m->params + t->offset, m->grads + t->offset, t->size, model_fn, &c, &rng);
  }
  print_message("largest finite-difference error %.2e (limit %.0e, eps %.0e)\n", fd_worst, fd_tol, (double)fd_eps);
  moe_model_free(m);
}

static void top1_model_gradient_matches_finite_differences(void **state) {
  model_check(1);
}

static void top2_model_gradient_matches_finite_differences(void **state) {
  model_check(2);
}

/* ----------------------------------------------------------------- expert parallelism */

enum { STEPS = 5, GLOBAL_BATCH = 8 };

typedef struct run_result {
  float loss[STEPS];
  float *params;
  size_t n;
} run_result;

/* Runs weft-train-moe on nranks with extra flags; reads its CSV and --dump-params file
 * (dir/ckpt, raw float32). */
static void run_moe(int nranks, const char *extra, run_result *r) {
  char dir[] = "/tmp/test_moe.XXXXXX", args[4096], path[4200];
  tu_mkdtemp(dir);
  snprintf(args, sizeof(args), "--experts 4 --capacity-factor 1.0 --aux-alpha 0.05 --load-every 0 %s", extra);
  assert_int_equal(tu_launch_tiny(dir, nranks, "weft-train-moe", (tu_tiny){2, STEPS, 0, "--dump-params"}, args, 0), 0);
  tu_read_losses(dir, r->loss, STEPS, NULL);
  snprintf(path, sizeof(path), "%s/ckpt", dir);
  r->params = tu_read_floats(path, &r->n);
  tu_rmdir(dir);
}

/* Largest parameter difference; losses compared within rel_tol when rel_tol is set. */
static double compare(const run_result *a, const run_result *b, double rel_tol) {
  if (rel_tol > 0) tu_expect_losses(a->loss, b->loss, STEPS, rel_tol);
  assert_int_equal(a->n, b->n);
  size_t at;
  return tu_max_abs_diff(a->params, b->params, a->n, &at);
}

/* N ranks with --batch 8/N (and extra flags) against one process with every expert and
 * --groups N. */
static void expect_expert_parallel_matches_one_process(int nranks, int topk, const char *extra) {
  char ep[256], one[256];
  snprintf(ep, sizeof(ep), "--topk %d --batch %d %s", topk, GLOBAL_BATCH / nranks, extra);
  snprintf(one, sizeof(one), "--topk %d --batch %d --groups %d", topk, GLOBAL_BATCH, nranks);
  run_result a, b;
  run_moe(nranks, ep, &a);
  run_moe(1, one, &b);
  double worst = compare(&a, &b, 1e-5);
  print_message("%d ranks, top-%d%s%s: largest parameter difference %.3g (limit 1e-5)\n", nranks, topk,
                *extra ? ", " : "", extra, worst);
  assert_true(worst <= 1e-5);
  free(a.params);
  free(b.params);
}

static void two_ranks_top1_match_one_process_with_two_groups(void **state) {
  expect_expert_parallel_matches_one_process(2, 1, "");
}

static void two_ranks_top2_match_one_process_with_two_groups(void **state) {
  expect_expert_parallel_matches_one_process(2, 2, "");
}

static void two_ranks_overlapped_match_one_process_with_two_groups(void **state) {
  expect_expert_parallel_matches_one_process(2, 2, "--overlap");
}

static void four_ranks_top2_match_one_process_with_four_groups(void **state) {
  expect_expert_parallel_matches_one_process(4, 2, "");
}

/* Capacity over the whole batch instead of per rank drops other tokens: the runs differ. */
static void one_group_does_not_match_two_ranks(void **state) {
  run_result a, b;
  run_moe(2, "--topk 2 --batch 4", &a);
  run_moe(1, "--topk 2 --batch 8 --groups 1", &b);
  double worst = compare(&a, &b, 0.0);
  print_message("control: largest parameter difference %.3g (must exceed 1e-4)\n", worst);
  assert_true(worst > 1e-4);
  free(a.params);
  free(b.params);
}

int main(int argc, char **argv) {
  /* The kernels the trainers it launches choose, so the in-process reference runs them too. */
  gpt_blas_choose(argv);
  const char *const progs[] = {"weft-train-moe", NULL};
  const char *why = tu_missing(progs);
  struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(top1_layer_backward_matches_finite_differences, fd_setup),
      cmocka_unit_test_setup(top2_layer_backward_matches_finite_differences, fd_setup),
      cmocka_unit_test_setup(top1_model_gradient_matches_finite_differences, fd_setup),
      cmocka_unit_test_setup(top2_model_gradient_matches_finite_differences, fd_setup),
      cmocka_unit_test(backward_overlaps_the_exchanges_with_independent_products),
      /* From here on, weft-train-moe runs: skipped without the data or the program. */
      cmocka_unit_test(two_ranks_top1_match_one_process_with_two_groups),
      cmocka_unit_test(two_ranks_top2_match_one_process_with_two_groups),
      cmocka_unit_test(two_ranks_overlapped_match_one_process_with_two_groups),
      cmocka_unit_test(four_ranks_top2_match_one_process_with_four_groups),
      cmocka_unit_test(one_group_does_not_match_two_ranks),
  };
  enum { FIRST_RUN = 5 };
  size_t n = sizeof(tests) / sizeof(tests[0]);
  if (why) tu_skip(tests, FIRST_RUN, n, why);
  return _cmocka_run_group_tests("test_moe", tests, n, NULL, NULL);
}
