/* trainers/test_fd.c: finite-difference checks for the trainer tests; see test_fd.h. */
#include "trainers/test_fd.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* cmocka.h needs the headers above first. */
#include <cmocka.h>

float fd_eps = 1e-3f;
double fd_tol = 1e-2;
double fd_worst;

void fd_reset(float eps, double tol) {
  fd_eps = eps;
  fd_tol = tol;
  fd_worst = 0.0;
}

void fd_fill_normal(float *x, size_t n, gpt_rng *rng, double std) {
  for (size_t i = 0; i < n; i++) x[i] = (float)(std * gpt_rng_normal(rng));
}

double fd_max_abs(const float *x, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
  return m;
}

void fd_check_element(const char *what, size_t i, double fd, double an, double scale) {
  double err = fabs(fd - an) / fmax(fmax(fabs(fd), fabs(an)), fmax(0.1 * scale, 1e-30));
  fd_worst = fmax(fd_worst, err);
  if (err >= fd_tol)
    print_error("%s[%zu]: finite difference %.6g, backward %.6g, error %.3g\n", what, i, fd, an, err);
  assert_true(err < fd_tol);
}

double fd_element(float *x, size_t i, fd_scalar_fn f, void *ctx, double *step) {
  float keep = x[i], hi = keep + fd_eps, lo = keep - fd_eps;
  x[i] = hi;
  double fhi = f(ctx);
  x[i] = lo;
  double flo = f(ctx);
  x[i] = keep;
  *step = (double)hi - lo;
  return fhi - flo;
}

void fd_check_direction(const char *what, float *x, const float *grad, size_t n, fd_scalar_fn f, void *ctx,
                        gpt_rng *rng) {
  float *keep = malloc(n * sizeof(float)), *step = malloc(n * sizeof(float));
  assert_true(keep && step);
  memcpy(keep, x, n * sizeof(float));
  double an = 0.0;
  for (size_t i = 0; i < n; i++) {
    step[i] = (float)((grad[i] < 0 ? -fd_eps : fd_eps) * (0.5 + gpt_rng_uniform(rng)));
    an += (double)grad[i] * ((double)(keep[i] + step[i]) - (double)(keep[i] - step[i]));
  }
  for (size_t i = 0; i < n; i++) x[i] = keep[i] + step[i];
  double fhi = f(ctx);
  for (size_t i = 0; i < n; i++) x[i] = keep[i] - step[i];
  double flo = f(ctx);
  memcpy(x, keep, n * sizeof(float));
  char name[128];
  snprintf(name, sizeof(name), "%s (random direction)", what);
  fd_check_element(name, 0, fhi - flo, an, 0.0);
  free(keep);
  free(step);
}

void fd_check_gradient(const char *what, float *x, const float *grad, size_t n, int nsample, fd_scalar_fn f,
                       void *ctx, gpt_rng *rng) {
  double scale = fd_max_abs(grad, n), below = INFINITY;
  assert_true(scale > 0.0); /* an all-zero gradient would pass vacuously */
  for (int s = 0; s < nsample && s < (int)n; s++) {
    size_t top = n; /* the largest |grad| below the previous pick's */
    for (size_t i = 0; i < n; i++)
      if (fabs(grad[i]) < below && (top == n || fabs(grad[i]) > fabs(grad[top]))) top = i;
    if (top == n) break;
    below = fabs(grad[top]);
    double step, diff = fd_element(x, top, f, ctx, &step);
    fd_check_element(what, top, diff / step, grad[top], scale);
  }
  for (int d = 0; d < 2; d++) fd_check_direction(what, x, grad, n, f, ctx, rng);
}
