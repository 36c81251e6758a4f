/* trainers/test_fd.h: central finite differences against a backward pass, for the trainer
 * tests (test_gpt.c, test_moe.c).
 *
 * f(x) is a scalar of a float vector x; grad is its analytic gradient at x. Checked two ways:
 * - the nsample elements with the largest |grad|, one by one (fp32 differences cannot
 *   resolve elements far below the tensor's scale, so a random small one would test noise);
 * - two random directions u over the whole tensor, (f(x + eps u) - f(x - eps u)) against
 *   grad . (2 eps u), which sees every element, small ones included. u_i has grad_i's sign
 *   and a random size in [0.5, 1.5), so the terms add up instead of cancelling into noise.
 * The error of an element is |fd - analytic| / max(|fd|, |analytic|, 0.1 * largest
 * |analytic| of its tensor); it must stay below fd_tol. Failures are cmocka assertions.
 */
#ifndef WEFT_TRAINERS_TEST_FD_H
#define WEFT_TRAINERS_TEST_FD_H

#include <stddef.h>

#include "trainers/rng.h"

typedef double (*fd_scalar_fn)(void *ctx);

extern float fd_eps;     /* perturbation (1e-3 unless a test sets another) */
extern double fd_tol;    /* largest relative error allowed (1e-2) */
extern double fd_worst;  /* largest error seen since fd_reset */

/* Sets eps and tol and forgets the largest error. */
void fd_reset(float eps, double tol);

void fd_fill_normal(float *x, size_t n, gpt_rng *rng, double std);
double fd_max_abs(const float *x, size_t n);

/* Asserts an element's finite difference matches its analytic gradient. */
void fd_check_element(const char *what, size_t i, double fd, double an, double scale);
/* f(x + eps e_i) - f(x - eps e_i), x[i] restored; *step gets the fp32 distance 2 eps. */
double fd_element(float *x, size_t i, fd_scalar_fn f, void *ctx, double *step);
/* One random direction over the whole tensor (see above). */
void fd_check_direction(const char *what, float *x, const float *grad, size_t n, fd_scalar_fn f, void *ctx,
                        gpt_rng *rng);
/* The nsample largest |grad| one by one, then two random directions. */
void fd_check_gradient(const char *what, float *x, const float *grad, size_t n, int nsample, fd_scalar_fn f,
                       void *ctx, gpt_rng *rng);

#endif
