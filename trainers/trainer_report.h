/* trainers/trainer_report.h: what the distributed weft trainers print and log, shared so
 * their output stays column for column the same (the tests and the README read it).
 *
 * Rank 0 prints a header (the trainer's own lines, then the peak and the FLOPs per token
 * here), one line per step (step, loss, the trainer's extra columns, gradient norm, ms,
 * tokens/s, MFU, comm and exposed comm ms, peak MiB, more extra columns), a val_loss line
 * after each evaluation, and a summary: throughput over all steps, without the warm-up
 * step, and at the median step (robust on a shared machine). Every step is also a row of
 * the CSV log (metrics.h), which is drawn as a PNG at the end.
 * MFU = FLOPs/token x tokens/s / (ranks x peak per rank), PaLM appendix B.
 */
#ifndef WEFT_TRAINERS_TRAINER_REPORT_H
#define WEFT_TRAINERS_TRAINER_REPORT_H

#include <stdio.h>

#include "trainers/metrics.h"

/* Summed over the steps so far (values already averaged over ranks). */
typedef struct gpt_totals {
  int steps;
  double s, s_after_first, comm_s, exposed_s, peak_mib;
  double first_val, last_val; /* NaN until an evaluation */
  double *step_s;             /* every step's time, for the median */
} gpt_totals;

typedef struct gpt_report {
  int rank, nranks;
  double flops_per_token, tokens_per_step;
  gpt_peak peak; /* per rank, averaged over ranks */
  FILE *log;     /* rank 0's CSV log, or NULL */
  gpt_totals tot;
} gpt_report;

/* Room for the times of `steps` steps. Returns -1 when out of memory. */
int gpt_report_init(gpt_report *r, int steps);
/* Closes the log if still open. */
void gpt_report_free(gpt_report *r);

double gpt_report_mfu(const gpt_report *r, double tokens_per_s);

/* Rank 0, unless path is "none": opens the CSV log (extra_columns as gpt_log_open). */
int gpt_report_open_log(gpt_report *r, const char *path, const char *extra_columns, char *err, size_t errlen);

/* Header lines: "# PROG: N ranks, DATA, vocab V". */
void gpt_report_title(const gpt_report *r, const char *prog, const char *data, int vocab);
/* "# peak per rank: FMA loop F GFLOP/s (ISA), sgemm 512^3 S GFLOP/s = P% of it on OpenBLAS
 * V core C (why)" (with_share: the "= P%"; the core and why from gpt_blas_describe), then
 * "# X MFLOP/token<fpt_note>; MFU = ... (N ranks x peak)<mfu_note>" ("1 rank" for one). */
void gpt_report_peak(const gpt_report *r, int with_share, const char *fpt_note, const char *mfu_note);
/* The column names; mid goes after loss, end after peakMiB (both preformatted, "" for none). */
void gpt_report_columns(const char *mid, const char *end);

/* The row of a step that took dt seconds (val_loss NaN, MFU from dt). */
gpt_step_row gpt_report_row(const gpt_report *r, long step, double loss, double dt, double comm_s, double exposed_s,
                            double peak_mib);
/* Adds a step of dt seconds to the totals (every rank). */
void gpt_report_add(gpt_report *r, double dt, double comm_s, double exposed_s, double peak_mib);
/* Records an evaluation's loss (first and last). */
void gpt_report_eval(gpt_report *r, double val_loss);
/* A validation loss as the summary prints it: "%.6f", or "none (no evaluation ran)" when it
 * is NaN (--eval-batches 0, or no evaluation was due). Written into buf (n bytes, 32 are
 * enough), which it returns. Writes only buf: thread-safe on distinct buffers. */
const char *gpt_report_val_text(double val_loss, char *buf, size_t n);
/* Rank 0: the step's line (mid and end as gpt_report_columns). */
void gpt_report_line(const gpt_report *r, const gpt_step_row *row, double gnorm, const char *mid, const char *end);
/* Rank 0: the val_loss line if the row has one, then the CSV row (nextra extra values). */
void gpt_report_val_log(gpt_report *r, const gpt_step_row *row, const double *extra, int nextra);

/* Summary lines: whole run (mfu_note NULL: "of the peak" and the sgemm share; else the
 * note), without step 1, median step. */
void gpt_report_throughput(const gpt_report *r, const char *mfu_note);
/* "# comm X ms/step, exposed Y ms/step (Z% hidden behind compute), W% of step time exposed". */
void gpt_report_comm(const gpt_report *r);
/* Rank 0: closes the log and, unless plot is NULL or "none", draws it; prints where. */
void gpt_report_plot(gpt_report *r, const char *log_path, const char *plot, const char *title);

#endif
