/* trainers/trainer_main.c: the distributed trainers' program skeleton and step loop; see
 * trainer_main.h. */
#include "trainers/trainer_main.h"

#include <math.h>
#include <stdio.h>

int gpt_program_run(const gpt_program *p) {
  char err[1024] = "";
  int rc = gpt_report_init(p->rep, p->flags->steps) ? -1 : p->setup(p->self, err, sizeof(err));
  if (rc == 0) rc = gpt_report_open_log(p->rep, p->flags->log, p->log_columns, err, sizeof(err));
  if (rc == 0 && p->dist->rank == 0) p->header(p->self);
  if (rc == 0) rc = p->train(p->self, err, sizeof(err));
  if (rc == 0) rc = p->finish(p->self, err, sizeof(err));
  if (rc) {
    /* Exit without destroying the communicator (see trainer_main.h). */
    if (err[0] && p->err_names_rank) fprintf(stderr, "%s: rank %d: %s\n", p->prog, p->dist->rank, err);
    if (err[0] && !p->err_names_rank) fprintf(stderr, "%s: %s\n", p->prog, err);
    gpt_ckpt_print_stop(stderr, p->ckpt, p->prog, p->dist->rank);
    return 1;
  }
  p->teardown(p->self);
  return 0;
}

int gpt_run_steps(const gpt_steps *l, char *err, size_t errlen) {
  const gpt_trainer_flags *f = l->flags;
  for (int i = 0; i < f->steps; i++) {
    gpt_step_stats s = {0};
    double t0 = gpt_now_s();
    if (l->step_fn(l->self, &s)) return -1;
    double dt = gpt_now_s() - t0;
    gpt_step_row row = gpt_report_row(l->rep, *l->step, s.loss, dt, s.comm_s, s.exposed_s, s.peak_mib);
    gpt_report_add(l->rep, dt, s.comm_s, s.exposed_s, s.peak_mib);
    char aux[32] = "";
    if (l->aux_column) snprintf(aux, sizeof(aux), " %9.6f", s.aux);
    gpt_report_line(l->rep, &row, s.gnorm, aux, "");
    int last = i == f->steps - 1;
    if (l->before_eval && l->before_eval(l->self, row.step, last)) return -1;
    if (gpt_trainer_eval_due(f, row.step, last)) {
      if (l->eval(l->self, &row.val_loss)) return -1;
      if (!isnan(row.val_loss)) gpt_report_eval(l->rep, row.val_loss); /* NaN: lost (ddp.c --elastic) */
    }
    gpt_report_val_log(l->rep, &row, NULL, 0);
    if (gpt_ckpt_due(l->ckpt, row.step, last) && l->save(l->self, err, errlen)) return -1;
  }
  return 0;
}
