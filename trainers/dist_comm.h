/* trainers/dist_comm.h: what the distributed weft trainers do with the communicator
 * besides training: join the job weftrun launched, report a failed call naming the
 * program, the rank and the operation, reduce a few numbers over the ranks in place, and
 * measure the MFU peak on every rank at once.
 *
 * The peak is measured after a barrier, so every rank's measurement sees the cores shared
 * as training will share them, then averaged over ranks (metrics.h); --peak-gflops X
 * skips the measurement.
 */
#ifndef WEFT_TRAINERS_DIST_COMM_H
#define WEFT_TRAINERS_DIST_COMM_H

#include <stddef.h>
#include <weft.h>

#include "trainers/ckpt.h"
#include "trainers/metrics.h"

typedef struct gpt_dist {
  const char *prog; /* "weft-train-ddp", the prefix of every message */
  weft_comm_t comm;
  int rank, nranks;
} gpt_dist;

/* weft_comm_init_from_env, then rank and size. launch names the rank count in the hint of
 * the error ("N" gives "launch with weftrun -n N"). Returns -1 with the reason in err. */
int gpt_dist_join(gpt_dist *d, const char *prog, const char *launch, char *err, size_t errlen);

/* Prints "PROG: rank R: WHAT: STATUS: LAST ERROR" to stderr; returns -1. */
int gpt_dist_fail(const gpt_dist *d, const char *what, weft_status_t st);

/* n values of type reduced with op over the ranks, in place (blocking). -1 after
 * gpt_dist_fail. */
int gpt_dist_reduce(const gpt_dist *d, void *v, size_t n, weft_datatype_t type, weft_redop_t op,
                    const char *what);
/* The mean over ranks of n doubles, in place. */
int gpt_dist_average(const gpt_dist *d, double *v, size_t n, const char *what);

/* The communicator as checkpoints see it (ckpt.h): weft_broadcast from rank 0 and
 * weft_gather to rank 0 of bytes, blocking. d must outlive the group. */
gpt_ckpt_group gpt_dist_ckpt_group(const gpt_dist *d);
/* gpt_ckpt_save over d, then gpt_ckpt_saved_note into t. Collective; -1 with err. */
int gpt_dist_ckpt_save(const gpt_dist *d, gpt_ckpt_track *t, const gpt_ckpt_save_req *r, char *err, size_t errlen);

/* given > 0: that peak, marked "given", and this rank's sgemm rate alone. Otherwise a barrier, gpt_measure_peak on every
 * rank, and the highest FMA and sgemm figures of any rank (the least disturbed). */
int gpt_dist_measure_peak(const gpt_dist *d, float given, gpt_peak *p);

#endif
