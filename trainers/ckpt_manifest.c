/* trainers/ckpt_manifest.c: the sharded checkpoint's manifest, as text; see ckpt_manifest.h. */
#include "trainers/ckpt_manifest.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainers/atomic_file.h"

#define MANIFEST_VERSION 1
/* Enough for 100k shards; a larger file is not a manifest of ours. */
enum { MANIFEST_MAX_BYTES = 16 << 20 };

void gpt_ckpt_shard_name(char *out, size_t n, int rank, int nranks, uint64_t id) {
  snprintf(out, n, "shard-%05d-of-%05d.%016" PRIx64, rank, nranks, id);
}

gpt_ckpt_stamp gpt_ckpt_manifest_stamp(const gpt_ckpt_manifest *m, int rank) {
  return (gpt_ckpt_stamp){.id = m->id, .rank = rank, .nranks = m->world, .step = m->step, .rng = m->rng,
                          .floats = m->model.floats};
}

static void print_body(FILE *f, const gpt_ckpt_manifest *m) {
  const gpt_ckpt_model *md = &m->model;
  const gpt_config *c = &md->cfg;
  fprintf(f, "weft-checkpoint %d\nid %016" PRIx64 "\ntrainer %s\nmodel %s\n", MANIFEST_VERSION, m->id, m->trainer,
          md->kind);
  fprintf(f, "config vocab %d seq %d layers %d dmodel %d heads %d\n", c->vocab, c->seq, c->layers, c->dmodel,
          c->heads);
  fprintf(f, "experts %d hidden %d\nrouting topk %d capacity %.9g aux %.9g\nchars ", md->experts, md->expert_hidden,
          md->topk, md->capacity_factor, md->aux_alpha);
  for (int i = 0; i < c->vocab; i++) fprintf(f, "%02x", md->chars[i]);
  fprintf(f, "\nfloats %" PRIu64 "\nstep %ld\nrng", md->floats, m->step);
  for (int i = 0; i < 4; i++) fprintf(f, " %016" PRIx64, m->rng.s[i]);
  fprintf(f, "\nworld_size %d\nglobal_batch %d\ngroups %d\nshards %d\n", m->world, m->global_batch, m->groups,
          m->nshards);
  for (int i = 0; i < m->nshards; i++)
    fprintf(f, "shard %d %s %" PRIu64 " %016" PRIx64 "\n", i, m->shard[i].name, m->shard[i].info.bytes,
            m->shard[i].info.sum);
}

int gpt_ckpt_manifest_write(const char *dir, const gpt_ckpt_manifest *m, char *err, size_t errlen) {
  char *body = NULL, path[4200];
  size_t len = 0;
  FILE *mem = open_memstream(&body, &len);
  if (!mem) {
    snprintf(err, errlen, "out of memory writing the manifest of %s", dir);
    return -1;
  }
  print_body(mem, m);
  fclose(mem);
  snprintf(path, sizeof(path), "%s/manifest", dir);
  gpt_afile a;
  int rc = gpt_afile_open(&a, path, err, errlen);
  if (rc == 0) {
    char line[64];
    gpt_afile_write(&a, body, len);
    snprintf(line, sizeof(line), "checksum %016" PRIx64 "\n", a.sum);
    gpt_afile_write(&a, line, strlen(line));
    rc = gpt_afile_commit(&a, err, errlen);
  }
  free(body);
  return rc;
}

/* ------------------------------------------------------------------ reading */

/* The whole file, NUL-terminated, in *text. */
static int slurp(const char *path, char **text, size_t *len, char *why, size_t whylen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT)
      snprintf(why, whylen, "missing: incomplete checkpoint (its save did not finish)");
    else
      snprintf(why, whylen, "cannot open: %s", strerror(errno));
    return -1;
  }
  long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  rewind(f);
  *text = size >= 0 && size <= MANIFEST_MAX_BYTES ? malloc((size_t)size + 1) : NULL;
  *len = *text ? fread(*text, 1, (size_t)size, f) : 0;
  fclose(f);
  if (!*text || *len != (size_t)size) {
    snprintf(why, whylen, "%s", size > MANIFEST_MAX_BYTES ? "too large to be a manifest" : "cannot read it");
    return -1;
  }
  (*text)[*len] = '\0';
  return 0;
}

/* The last line must be "checksum X" with X the FNV-1a of everything before it. */
static int check_sum(const char *text, size_t len, char *why, size_t whylen) {
  const char *last = len >= 2 ? text + len - 2 : text;
  while (last > text && last[-1] != '\n') last--;
  uint64_t stored;
  char tail;
  if (len < 2 || text[len - 1] != '\n' || sscanf(last, "checksum %" SCNx64 "%c", &stored, &tail) != 2 || tail != '\n') {
    snprintf(why, whylen, "no checksum line (torn or not a manifest)");
    return -1;
  }
  if (gpt_fnv1a(GPT_FNV1A_INIT, text, (size_t)(last - text)) == stored) return 0;
  snprintf(why, whylen, "checksum mismatch: the file is corrupt");
  return -1;
}

static int parse_chars(const char *hex, gpt_ckpt_model *md) {
  if (md->cfg.vocab < 1 || md->cfg.vocab > 256 || strlen(hex) != 2 * (size_t)md->cfg.vocab) return -1;
  for (int i = 0; i < md->cfg.vocab; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
    md->chars[i] = (unsigned char)v;
  }
  return 0;
}

/* One "key values" line into m; the shard lines need m->shard allocated. Returns the bit
 * of the key (to check all were seen), or -1 on a malformed line. */
static int parse_line(const char *line, gpt_ckpt_manifest *m) {
  gpt_ckpt_model *md = &m->model;
  gpt_config *c = &md->cfg;
  char hex[600];
  int v, k;
  if (sscanf(line, "weft-checkpoint %d", &v) == 1) return v == MANIFEST_VERSION ? 1 << 0 : -1;
  if (sscanf(line, "id %" SCNx64, &m->id) == 1) return 1 << 1;
  if (sscanf(line, "trainer %63s", m->trainer) == 1) return 1 << 2;
  if (sscanf(line, "model %7s", md->kind) == 1) return 1 << 3;
  if (sscanf(line, "config vocab %d seq %d layers %d dmodel %d heads %d", &c->vocab, &c->seq, &c->layers, &c->dmodel,
             &c->heads) == 5)
    return 1 << 4;
  if (sscanf(line, "experts %d hidden %d", &md->experts, &md->expert_hidden) == 2) return 1 << 5;
  if (sscanf(line, "routing topk %d capacity %f aux %f", &md->topk, &md->capacity_factor, &md->aux_alpha) == 3)
    return 1 << 15;
  if (sscanf(line, "chars %599s", hex) == 1) return parse_chars(hex, md) ? -1 : 1 << 6;
  if (sscanf(line, "floats %" SCNu64, &md->floats) == 1) return 1 << 7;
  if (sscanf(line, "step %ld", &m->step) == 1) return 1 << 8;
  if (sscanf(line, "rng %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64, &m->rng.s[0], &m->rng.s[1], &m->rng.s[2],
             &m->rng.s[3]) == 4)
    return 1 << 9;
  if (sscanf(line, "world_size %d", &m->world) == 1) return 1 << 10;
  if (sscanf(line, "global_batch %d", &m->global_batch) == 1) return 1 << 11;
  if (sscanf(line, "groups %d", &m->groups) == 1) return 1 << 12;
  if (sscanf(line, "shards %d", &v) == 1) {
    if (m->shard || v < 1 || v > 100000) return -1;
    m->nshards = v;
    m->shard = calloc((size_t)v, sizeof(*m->shard));
    return m->shard ? 1 << 13 : -1;
  }
  gpt_ckpt_shard_entry e;
  if (sscanf(line, "shard %d %95s %" SCNu64 " %" SCNx64, &k, e.name, &e.info.bytes, &e.info.sum) == 4) {
    if (!m->shard || k < 0 || k >= m->nshards || m->shard[k].name[0] || strchr(e.name, '/')) return -1;
    m->shard[k] = e;
    return 1 << 14;
  }
  return strncmp(line, "checksum ", 9) ? -1 : 0;
}

static int parse(char *text, gpt_ckpt_manifest *m, char *why, size_t whylen) {
  int seen = 0, lineno = 0;
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    int bit = parse_line(line, m);
    lineno++;
    if (bit < 0) {
      snprintf(why, whylen, "line %d is malformed: %.80s", lineno, line);
      return -1;
    }
    seen |= bit;
  }
  int missing = 0;
  for (int i = 0; m->shard && i < m->nshards; i++) missing |= !m->shard[i].name[0];
  if (seen != (1 << 16) - 1 || missing || m->nshards != m->world || m->step < 0) {
    snprintf(why, whylen, "incomplete or inconsistent (a key or a shard line is missing)");
    return -1;
  }
  return 0;
}

int gpt_ckpt_manifest_read(const char *dir, gpt_ckpt_manifest *m, char *err, size_t errlen) {
  char path[4200], why[200];
  char *text = NULL;
  size_t len = 0;
  memset(m, 0, sizeof(*m));
  snprintf(path, sizeof(path), "%s/manifest", dir);
  int rc = slurp(path, &text, &len, why, sizeof(why));
  if (rc == 0) rc = check_sum(text, len, why, sizeof(why));
  if (rc == 0) rc = parse(text, m, why, sizeof(why));
  free(text);
  if (rc == 0) return 0;
  snprintf(err, errlen, "checkpoint manifest %s: %s", path, why);
  gpt_ckpt_manifest_free(m);
  return -1;
}

void gpt_ckpt_manifest_free(gpt_ckpt_manifest *m) {
  free(m->shard);
  memset(m, 0, sizeof(*m));
}
