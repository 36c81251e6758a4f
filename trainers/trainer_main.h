/* trainers/trainer_main.h: the program skeleton and the step loop of the distributed weft
 * trainers, so weft-train-ddp, -fsdp, -moe and -pipeline start, train, report and fail
 * the same way and keep only their own step, evaluation and summary.
 *
 * Program: report state for --steps steps, the trainer's setup (join the job, data,
 * model, peak), rank 0 opens the CSV log and prints the header, training, the trainer's
 * finish (checks, summary, checkpoint, plot), teardown. On an error the process exits 1
 * WITHOUT destroying the communicator: the other ranks then see this rank gone and fail at
 * once, instead of waiting for their deadline. Each then names the last complete
 * checkpoint it knows of and the relaunch that continues from it (gpt_ckpt_print_stop).
 *
 * Step loop: the trainer's step (averaged statistics), the row and the totals, rank 0's
 * line, the trainer's hook before an evaluation (MoE prints the per-expert load), the
 * evaluation every --eval-every steps and after the last, then the val_loss line and the
 * CSV row, then a checkpoint when one is due (every --save-every steps and after the last).
 */
#ifndef WEFT_TRAINERS_TRAINER_MAIN_H
#define WEFT_TRAINERS_TRAINER_MAIN_H

#include <stddef.h>

#include "trainers/dist_comm.h"
#include "trainers/trainer_flags.h"
#include "trainers/trainer_report.h"

typedef struct gpt_program {
  const char *prog;
  void *self;               /* the trainer, passed to every callback */
  const gpt_dist *dist;     /* filled by setup */
  gpt_report *rep;          /* its log and totals */
  const gpt_trainer_flags *flags;
  const char *log_columns;  /* extra CSV columns (gpt_log_open), or NULL */
  int err_names_rank;       /* the final error as "PROG: rank R: ERR" (1) or "PROG: ERR" (0) */
  const gpt_ckpt_track *ckpt; /* the checkpoints, named when the run stops on an error; or NULL */
  int (*setup)(void *self, char *err, size_t errlen);
  void (*header)(const void *self); /* rank 0 */
  int (*train)(void *self, char *err, size_t errlen);
  int (*finish)(void *self, char *err, size_t errlen);
  void (*teardown)(void *self);
} gpt_program;

/* Runs the program; returns the exit status (0, or 1 after the error was printed). */
int gpt_program_run(const gpt_program *p);

/* What a step measured, averaged over ranks. */
typedef struct gpt_step_stats {
  double loss, comm_s, exposed_s, peak_mib;
  double aux; /* MoE's load-balancing loss, a column after the loss when aux_column is set */
  float gnorm;
} gpt_step_stats;

typedef struct gpt_steps {
  void *self;
  const gpt_trainer_flags *flags;
  gpt_report *rep;
  const long *step; /* the trainer's optimizer step count, read after each step */
  int aux_column;
  int (*step_fn)(void *self, gpt_step_stats *s);
  int (*eval)(void *self, double *val); /* *val NaN: no value (a lost rank took it; no line) */
  int (*before_eval)(void *self, long step, int last); /* or NULL */
  gpt_ckpt_track *ckpt;                                 /* when to save, and the last saved; or NULL */
  int (*save)(void *self, char *err, size_t errlen);    /* a checkpoint of the state now (collective) */
} gpt_steps;

/* Runs --steps steps; returns -1 when a callback failed (err says why, or the callback
 * printed it). */
int gpt_run_steps(const gpt_steps *l, char *err, size_t errlen);

#endif
