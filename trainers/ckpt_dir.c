/* trainers/ckpt_dir.c: step directories, picking the newest complete checkpoint, keeping
 * the last K; see ckpt_dir.h. */
#include "trainers/ckpt_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void gpt_ckpt_step_dir(char *out, size_t n, const char *root, long step) {
  snprintf(out, n, "%s/step-%08ld", root, step);
}

int gpt_ckpt_check_complete(const char *dir, gpt_ckpt_manifest *m, char *err, size_t errlen) {
  if (gpt_ckpt_manifest_read(dir, m, err, errlen)) return -1;
  for (int i = 0; i < m->nshards; i++) {
    char path[4400];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/%s", dir, m->shard[i].name);
    if (stat(path, &sb)) {
      snprintf(err, errlen, "checkpoint shard %s: %s (listed in %s/manifest)", path, strerror(errno), dir);
    } else if ((uint64_t)sb.st_size != m->shard[i].info.bytes) {
      snprintf(err, errlen, "checkpoint shard %s: %lld bytes, the manifest says %llu (truncated or replaced)", path,
               (long long)sb.st_size, (unsigned long long)m->shard[i].info.bytes);
    } else {
      continue;
    }
    gpt_ckpt_manifest_free(m);
    return -1;
  }
  return 0;
}

/* The step of a "step-N" name, or -1. */
static long step_of(const char *name) {
  long step;
  int end = 0;
  if (strncmp(name, "step-", 5) || name[5] < '0' || name[5] > '9') return -1;
  if (sscanf(name, "step-%ld%n", &step, &end) != 1 || name[end] != '\0') return -1;
  return step;
}

static int by_step_descending(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The steps of root's step-N directories, highest first; *n of them. NULL (with *n 0)
 * when there are none or root cannot be read (errno then says why). */
static long *scan_steps(const char *root, int *n) {
  *n = 0;
  DIR *d = opendir(root);
  if (!d) return NULL;
  long *steps = NULL;
  int cap = 0;
  for (struct dirent *e; (e = readdir(d));) {
    long s = step_of(e->d_name);
    if (s < 0) continue;
    if (*n == cap) {
      long *more = realloc(steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof(long));
      if (!more) break;
      steps = more;
    }
    steps[(*n)++] = s;
  }
  closedir(d);
  if (steps) qsort(steps, (size_t)*n, sizeof(long), by_step_descending);
  return steps;
}

/* A directory that is one checkpoint rather than a directory of them. */
static int is_one_checkpoint(const char *dir) {
  char path[4200];
  const char *base = strrchr(dir, '/');
  snprintf(path, sizeof(path), "%s/manifest", dir);
  return access(path, F_OK) == 0 || step_of(base ? base + 1 : dir) >= 0;
}

/* The complete checkpoint of root with the highest step into out; stderr gets a line for
 * each newer incomplete one. */
static int newest_complete(const char *root, char *out, size_t outlen, char *err, size_t errlen) {
  int n;
  long *steps = scan_steps(root, &n);
  char why[1024] = "", later[1024];
  for (int i = 0; i < n; i++) {
    gpt_ckpt_manifest m;
    gpt_ckpt_step_dir(out, outlen, root, steps[i]);
    /* The reason the NEWEST one is incomplete is the one worth reporting. */
    if (gpt_ckpt_check_complete(out, &m, i == 0 ? why : later, sizeof(why)) == 0) {
      gpt_ckpt_manifest_free(&m);
      free(steps);
      return 0;
    }
    fprintf(stderr, "warning: skipping a newer checkpoint: %s\n", i == 0 ? why : later);
  }
  free(steps);
  if (why[0])
    snprintf(err, errlen, "no complete checkpoint in %s (the newest: %s)", root, why);
  else
    snprintf(err, errlen, "no checkpoint in %s (no step-N directory)", root);
  return -1;
}

int gpt_ckpt_resolve(const char *path, char *out, size_t outlen, int *is_file, char *err, size_t errlen) {
  struct stat sb;
  *is_file = 0;
  if (stat(path, &sb)) {
    snprintf(err, errlen, "cannot open checkpoint %s: %s", path, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(sb.st_mode)) {
    *is_file = 1;
    snprintf(out, outlen, "%s", path);
    return 0;
  }
  if (!is_one_checkpoint(path)) return newest_complete(path, out, outlen, err, errlen);
  gpt_ckpt_manifest m;
  if (gpt_ckpt_check_complete(path, &m, err, errlen)) return -1;
  gpt_ckpt_manifest_free(&m);
  snprintf(out, outlen, "%s", path);
  return 0;
}

/* ------------------------------------------------------------------ pruning */

/* Removes dir's entries for which keep_entry says no (all when m is NULL), then dir
 * itself when m is NULL. Remembers the first failure in err. */
static int remove_entries(const char *dir, const gpt_ckpt_manifest *m, char *err, size_t errlen) {
  DIR *d = opendir(dir);
  int rc = 0;
  if (!d) rc = -1;
  for (struct dirent *e; d && (e = readdir(d));) {
    int keep = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || (m && !strcmp(e->d_name, "manifest"));
    for (int i = 0; m && i < m->nshards && !keep; i++) keep = !strcmp(e->d_name, m->shard[i].name);
    char path[4608];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    if (!keep && unlink(path) && rc == 0) rc = -1;
  }
  if (d) closedir(d);
  if (!m && rmdir(dir) && rc == 0) rc = -1;
  if (rc) snprintf(err, errlen, "cannot remove old checkpoint files in %s: %s", dir, strerror(errno));
  return rc;
}

int gpt_ckpt_prune(const char *root, long step, int keep, char *err, size_t errlen) {
  int n, kept = 0, rc = 0;
  long *steps = scan_steps(root, &n);
  char dir[4200], why[1024];
  for (int i = 0; i < n; i++) {
    gpt_ckpt_manifest m;
    gpt_ckpt_step_dir(dir, sizeof(dir), root, steps[i]);
    int complete = gpt_ckpt_check_complete(dir, &m, why, sizeof(why)) == 0;
    int wanted = steps[i] == step || (complete && (keep == 0 || kept < keep));
    if (complete && wanted) kept++;
    int drop = !wanted && (complete || steps[i] < step);
    if (steps[i] == step && complete && remove_entries(dir, &m, rc ? why : err, rc ? sizeof(why) : errlen)) rc = -1;
    if (drop && remove_entries(dir, NULL, rc ? why : err, rc ? sizeof(why) : errlen)) rc = -1;
    if (complete) gpt_ckpt_manifest_free(&m);
  }
  free(steps);
  return rc;
}
