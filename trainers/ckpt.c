/* trainers/ckpt.c: the save and load protocol of sharded checkpoints; see ckpt.h. */
#include "trainers/ckpt.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trainers/atomic_file.h"

/* What rank 0 broadcasts before the shards are written, and after the manifest. */
typedef struct save_news {
  uint64_t id;
  int32_t ok, pad;
  char msg[1024];
} save_news;

/* What each rank tells rank 0 about its shard. */
typedef struct shard_report {
  int32_t ok, pad;
  uint64_t bytes, sum;
  char msg[1000];
} shard_report;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int bcast(const gpt_ckpt_group *g, void *buf, size_t n, char *err, size_t errlen) {
  return g->nranks == 1 ? 0 : g->bcast(g->ctx, buf, n, err, errlen);
}

static int gather(const gpt_ckpt_group *g, const void *mine, void *all, size_t n, char *err, size_t errlen) {
  if (g->nranks > 1) return g->gather(g->ctx, mine, all, n, err, errlen);
  memcpy(all, mine, n);
  return 0;
}

/* 64 random bits (never 0), from the kernel or, failing that, the clock and the pid. */
static uint64_t random_id(void) {
  uint64_t id = 0;
  int fd = open("/dev/urandom", O_RDONLY);
  if (fd < 0 || read(fd, &id, sizeof(id)) != (ssize_t)sizeof(id)) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    id = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 40);
  }
  if (fd >= 0) close(fd);
  return id ? id : 1;
}

/* Rank 0: the directories exist (and are on disk), and the save has an id. */
static void begin(const gpt_ckpt_save_req *r, const char *dir, save_news *n) {
  n->ok = gpt_mkdir_durable(r->root, n->msg, sizeof(n->msg)) == 0 &&
          gpt_mkdir_durable(dir, n->msg, sizeof(n->msg)) == 0;
  n->id = random_id();
}

static void write_own(const gpt_ckpt_group *g, const gpt_ckpt_save_req *r, const char *dir, uint64_t id,
                      shard_report *rep) {
  char name[96], path[4400];
  gpt_ckpt_shard_name(name, sizeof(name), g->rank, g->nranks, id);
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  gpt_ckpt_stamp s = {.id = id, .rank = g->rank, .nranks = g->nranks, .step = r->step, .rng = r->rng,
                      .floats = r->model.floats};
  gpt_ckpt_file_info info;
  rep->ok = gpt_ckpt_shard_write(path, &s, &r->own, &info, rep->msg, sizeof(rep->msg)) == 0;
  rep->bytes = info.bytes;
  rep->sum = info.sum;
}

/* Rank 0 sees every shard with the size its rank reported: else the directory is not one
 * filesystem for all ranks (or a shard was replaced), and a manifest would promise files
 * a resume could not find. */
static int all_shards_visible(const gpt_ckpt_group *g, const char *dir, uint64_t id, const shard_report *all,
                              save_news *n) {
  for (int i = 0; i < g->nranks; i++) {
    char name[96], path[4400];
    struct stat sb;
    gpt_ckpt_shard_name(name, sizeof(name), i, g->nranks, id);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (stat(path, &sb) == 0 && (uint64_t)sb.st_size == all[i].bytes) continue;
    snprintf(n->msg, sizeof(n->msg),
             "rank 0 does not see rank %d's shard %.700s with the %llu bytes rank %d wrote: every rank must see "
             "the checkpoint directory on one shared filesystem",
             i, path, (unsigned long long)all[i].bytes, i);
    return 0;
  }
  return 1;
}

/* Rank 0, with every shard report: the manifest, then pruning. */
static void commit(const gpt_ckpt_group *g, const gpt_ckpt_save_req *r, const char *dir, uint64_t id,
                   const shard_report *all, save_news *n) {
  for (int i = 0; i < g->nranks; i++)
    if (!all[i].ok) {
      snprintf(n->msg, sizeof(n->msg), "rank %d: %s", i, all[i].msg);
      return;
    }
  if (!all_shards_visible(g, dir, id, all, n)) return;
  gpt_ckpt_manifest m = {.id = id, .model = r->model, .step = r->step, .rng = r->rng, .world = g->nranks,
                         .global_batch = r->global_batch, .groups = r->groups, .nshards = g->nranks};
  snprintf(m.trainer, sizeof(m.trainer), "%s", r->trainer);
  m.shard = calloc((size_t)g->nranks, sizeof(*m.shard));
  if (!m.shard) {
    snprintf(n->msg, sizeof(n->msg), "out of memory for the manifest of %.900s", dir);
    return;
  }
  for (int i = 0; i < g->nranks; i++) {
    gpt_ckpt_shard_name(m.shard[i].name, sizeof(m.shard[i].name), i, g->nranks, id);
    m.shard[i].info = (gpt_ckpt_file_info){all[i].bytes, all[i].sum};
  }
  n->ok = gpt_ckpt_manifest_write(dir, &m, n->msg, sizeof(n->msg)) == 0;
  free(m.shard);
  char why[1024];
  if (n->ok && gpt_ckpt_prune(r->root, r->step, r->keep, why, sizeof(why)))
    fprintf(stderr, "%s: warning: %s\n", r->trainer, why); /* the new checkpoint is fine */
}

int gpt_ckpt_save(const gpt_ckpt_group *g, const gpt_ckpt_save_req *r, gpt_ckpt_saved *out, char *err,
                  size_t errlen) {
  double t0 = now_s();
  out->id = 0;
  gpt_ckpt_step_dir(out->dir, sizeof(out->dir), r->root, r->step);
  save_news news = {0};
  shard_report mine = {0}, *all = NULL;
  if (g->rank == 0 && !(all = calloc((size_t)g->nranks, sizeof(*all))))
    snprintf(news.msg, sizeof(news.msg), "out of memory for the shard reports");
  else if (g->rank == 0)
    begin(r, out->dir, &news);
  int rc = bcast(g, &news, sizeof(news), err, errlen);
  if (rc == 0 && !news.ok) rc = -1, snprintf(err, errlen, "checkpoint at step %ld: rank 0: %s", r->step, news.msg);
  if (rc) {
    free(all);
    return -1;
  }
  out->id = news.id;
  write_own(g, r, out->dir, news.id, &mine);
  rc = gather(g, &mine, all, sizeof(mine), err, errlen);
  save_news done = {.id = news.id};
  if (rc == 0 && g->rank == 0) commit(g, r, out->dir, news.id, all, &done);
  out->bytes = 0;
  for (int i = 0; all && rc == 0 && i < g->nranks; i++) out->bytes += (double)all[i].bytes;
  free(all);
  if (rc || bcast(g, &done, sizeof(done), err, errlen)) return -1;
  out->seconds = now_s() - t0;
  if (done.ok) return 0;
  snprintf(err, errlen, "checkpoint at step %ld not written: %s", r->step, done.msg);
  return -1;
}

int gpt_ckpt_load(const char *dir, const gpt_ckpt_manifest *m, const gpt_ckpt_local *need, char *err,
                  size_t errlen) {
  size_t copied = 0, want = gpt_ckpt_local_floats(need);
  for (int i = 0; i < m->nshards; i++) {
    char path[4400];
    snprintf(path, sizeof(path), "%s/%s", dir, m->shard[i].name);
    gpt_ckpt_stamp s = gpt_ckpt_manifest_stamp(m, i);
    if (gpt_ckpt_shard_read(path, &s, &m->shard[i].info, need, &copied, err, errlen)) return -1;
  }
  if (copied == want) return 0;
  snprintf(err, errlen,
           "checkpoint %s: its %d shards hold %zu of the %zu floats this rank needs (the shards overlap or miss "
           "part of the model)",
           dir, m->nshards, copied, want);
  return -1;
}

/* What rank 0 tells the others about --resume. */
typedef struct resolved {
  int32_t ok, is_file;
  char path[4200];
  char msg[1024];
} resolved;

int gpt_ckpt_resolve_group(const gpt_ckpt_group *g, const char *path, char *out, size_t outlen, int *is_file,
                           char *err, size_t errlen) {
  resolved *r = calloc(1, sizeof(*r));
  if (!r) {
    snprintf(err, errlen, "out of memory resolving --resume %s", path);
    return -1;
  }
  int file = 0, rc = 0;
  if (g->rank == 0) r->ok = gpt_ckpt_resolve(path, r->path, sizeof(r->path), &file, r->msg, sizeof(r->msg)) == 0;
  r->is_file = file;
  if (bcast(g, r, sizeof(*r), err, errlen)) rc = -1;
  if (rc == 0 && !r->ok) rc = -1, snprintf(err, errlen, "%s", r->msg);
  if (rc == 0) snprintf(out, outlen, "%s", r->path);
  *is_file = r->is_file;
  free(r);
  return rc;
}
