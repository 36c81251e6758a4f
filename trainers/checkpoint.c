/* trainers/checkpoint.c: checkpoint save and load; the format is in checkpoint.h. */
#include "trainers/checkpoint.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "trainers/atomic_file.h"

#define CKPT_MAGIC "WEFTGPT1"
#define CKPT_VERSION 1

typedef struct ckpt_header {
  char magic[8];
  uint32_t version, header_bytes;
  int32_t vocab, seq, layers, dmodel, heads, pad;
  unsigned char chars[256];
  int64_t step;
  uint64_t rng[4];
  uint64_t nparams;
} ckpt_header;

static int read_all(FILE *f, void *p, size_t n, uint64_t *h) {
  if (fread(p, 1, n, f) != n) return -1;
  *h = gpt_fnv1a(*h, p, n);
  return 0;
}

int gpt_checkpoint_save(const char *path, const gpt_model *m, const gpt_tokenizer *tok,
                        const gpt_train_state *st, char *err, size_t errlen) {
  ckpt_header h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, CKPT_MAGIC, 8);
  h.version = CKPT_VERSION;
  h.header_bytes = sizeof(h);
  h.vocab = m->cfg.vocab;
  h.seq = m->cfg.seq;
  h.layers = m->cfg.layers;
  h.dmodel = m->cfg.dmodel;
  h.heads = m->cfg.heads;
  memcpy(h.chars, tok->chars, (size_t)tok->vocab);
  h.step = st->step;
  memcpy(h.rng, st->rng.s, sizeof(h.rng));
  h.nparams = m->lay.total;

  gpt_afile a;
  if (gpt_afile_open(&a, path, err, errlen)) return -1;
  size_t bytes = m->lay.total * sizeof(float);
  gpt_afile_write(&a, &h, sizeof(h));
  gpt_afile_write(&a, m->params, bytes);
  gpt_afile_write(&a, st->adam_m, bytes);
  gpt_afile_write(&a, st->adam_v, bytes);
  uint64_t sum = a.sum;
  gpt_afile_write(&a, &sum, sizeof(sum));
  return gpt_afile_commit(&a, err, errlen) ? -1 : 0;
}

static FILE *open_header(const char *path, ckpt_header *h, uint64_t *sum, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "checkpoint %s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  *sum = GPT_FNV1A_INIT;
  if (read_all(f, h, sizeof(*h), sum) || memcmp(h->magic, CKPT_MAGIC, 8) || h->version != CKPT_VERSION ||
      h->header_bytes != sizeof(*h)) {
    snprintf(err, errlen, "checkpoint %s: not a weft GPT checkpoint (version %d)", path, CKPT_VERSION);
    fclose(f);
    return NULL;
  }
  return f;
}

int gpt_checkpoint_peek(const char *path, gpt_config *cfg, gpt_tokenizer *tok, char *err, size_t errlen) {
  ckpt_header h;
  uint64_t sum;
  FILE *f = open_header(path, &h, &sum, err, errlen);
  if (!f) return -1;
  fclose(f);
  *cfg = (gpt_config){h.vocab, h.seq, h.layers, h.dmodel, h.heads};
  if (gpt_config_check(cfg, err, errlen)) return -1;
  gpt_tokenizer_from_chars(tok, h.chars, h.vocab);
  return 0;
}

int gpt_checkpoint_load(const char *path, gpt_model *m, gpt_train_state *st, char *err, size_t errlen) {
  ckpt_header h;
  uint64_t sum, stored;
  FILE *f = open_header(path, &h, &sum, err, errlen);
  if (!f) return -1;
  const gpt_config *c = &m->cfg;
  if (h.vocab != c->vocab || h.seq != c->seq || h.layers != c->layers || h.dmodel != c->dmodel ||
      h.heads != c->heads || h.nparams != m->lay.total) {
    snprintf(err, errlen,
             "checkpoint %s: model config differs (file: vocab %d seq %d layers %d "
             "dmodel %d heads %d)",
             path, h.vocab, h.seq, h.layers, h.dmodel, h.heads);
    fclose(f);
    return -1;
  }
  size_t bytes = m->lay.total * sizeof(float);
  int rc = read_all(f, m->params, bytes, &sum) | read_all(f, st->adam_m, bytes, &sum) |
           read_all(f, st->adam_v, bytes, &sum);
  rc |= fread(&stored, sizeof(stored), 1, f) == 1 ? 0 : -1;
  fclose(f);
  if (rc || stored != sum) {
    snprintf(err, errlen, "checkpoint %s: %s", path, rc ? "truncated" : "checksum mismatch (corrupt file)");
    return -1;
  }
  st->step = h.step;
  memcpy(st->rng.s, h.rng, sizeof(h.rng));
  return 0;
}
