/* trainers/moe_ckpt.c: weft-train-moe's segments and shape in a checkpoint; see moe_ckpt.h. */
#include "trainers/moe_ckpt.h"

#include <stdio.h>
#include <string.h>

int moe_ckpt_segments(const moe_model *m, int with_replicated, gpt_ckpt_seg *segs) {
  int n = 0, E = m->mc.experts, El = m->moe[0].nlocal;
  size_t esz = m->expert_size;
  if (with_replicated) segs[n++] = (gpt_ckpt_seg){0, 0, m->rep_total};
  for (int l = 0; l < m->layers; l++)
    segs[n++] = (gpt_ckpt_seg){m->rep_total + ((size_t)l * E + (size_t)m->ex.rank * El) * esz,
                               m->rep_total + (size_t)l * El * esz, (size_t)El * esz};
  return n;
}

gpt_ckpt_model moe_ckpt_model(const moe_model *m, const gpt_tokenizer *tok) {
  gpt_ckpt_model md = gpt_ckpt_model_gpt(&m->g->cfg, tok, moe_model_full_size(m));
  snprintf(md.kind, sizeof(md.kind), "moe");
  md.experts = m->mc.experts;
  md.expert_hidden = m->mc.hidden;
  md.topk = m->mc.topk;
  md.capacity_factor = m->mc.capacity_factor;
  md.aux_alpha = m->mc.aux_alpha;
  return md;
}

int moe_ckpt_shape(const char *dir, const gpt_ckpt_manifest *m, const gpt_tokenizer *tok, const moe_given *given,
                   int nranks, gpt_config *cfg, moe_config *mc, char *err, size_t errlen) {
  const gpt_ckpt_model *md = &m->model;
  if (gpt_ckpt_check_model(dir, md, "moe", tok, &given->model, err, errlen)) return -1;
  const char *flag = given->experts && given->experts != md->experts ? "--experts"
                     : given->hidden && given->hidden != md->expert_hidden ? "--expert-hidden"
                                                                           : NULL;
  if (flag) {
    snprintf(err, errlen, "checkpoint %s/manifest: model config differs: %s was given, the checkpoint has %d experts "
             "of hidden width %d; drop the flag to take the checkpoint's", dir, flag, md->experts, md->expert_hidden);
    return -1;
  }
  if (md->experts < 1 || md->experts % nranks) {
    snprintf(err, errlen, "checkpoint %s/manifest has %d experts per layer, which do not split over %d ranks: "
             "relaunch on a number of ranks that divides %d", dir, md->experts, nranks, md->experts);
    return -1;
  }
  *cfg = md->cfg;
  mc->dmodel = md->cfg.dmodel;
  mc->experts = md->experts;
  mc->hidden = md->expert_hidden;
  return 0;
}

void moe_ckpt_print_routing(const gpt_ckpt_model *md, const moe_config *mc) {
  if (md->topk == mc->topk && md->capacity_factor == mc->capacity_factor && md->aux_alpha == mc->aux_alpha) return;
  printf("# note: routing was top-%d, capacity factor %g, aux alpha %g and is top-%d, %g, %g now (--topk, "
         "--capacity-factor, --aux-alpha): training differs from an unbroken run\n",
         md->topk, md->capacity_factor, md->aux_alpha, mc->topk, mc->capacity_factor, mc->aux_alpha);
}
