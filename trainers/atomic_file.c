/* trainers/atomic_file.c: temporary name, fsync, rename, fsync of the directory; see
 * atomic_file.h. */
#include "trainers/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t gpt_fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

int gpt_afile_open(gpt_afile *a, const char *path, char *err, size_t errlen) {
  memset(a, 0, sizeof(*a));
  a->sum = GPT_FNV1A_INIT;
  if (strlen(path) >= sizeof(a->path)) {
    snprintf(err, errlen, "path too long: %.200s...", path);
    return -1;
  }
  snprintf(a->path, sizeof(a->path), "%s", path);
  snprintf(a->tmp, sizeof(a->tmp), "%s.tmp.%ld", path, (long)getpid());
  a->f = fopen(a->tmp, "wb");
  if (a->f) return 0;
  snprintf(err, errlen, "cannot create %s: %s", a->tmp, strerror(errno));
  return -1;
}

void gpt_afile_write(gpt_afile *a, const void *p, size_t n) {
  if (a->error || n == 0) return;
  if (fwrite(p, 1, n, a->f) != n) {
    a->error = errno ? errno : EIO;
    return;
  }
  a->sum = gpt_fnv1a(a->sum, p, n);
  a->bytes += n;
}

/* The directory part of path ("." when it has none). */
static void parent_of(const char *path, char *dir, size_t n) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(dir, n, ".");
    return;
  }
  size_t len = slash == path ? 1 : (size_t)(slash - path);
  snprintf(dir, n, "%.*s", (int)len, path);
}

int gpt_afile_commit(gpt_afile *a, char *err, size_t errlen) {
  int e = a->error;
  if (!e && fflush(a->f)) e = errno;
  if (!e && fsync(fileno(a->f))) e = errno;
  if (fclose(a->f) && !e) e = errno;
  a->f = NULL;
  if (!e && rename(a->tmp, a->path)) e = errno;
  if (e) {
    snprintf(err, errlen, "writing %s failed: %s", a->path, strerror(e));
    remove(a->tmp);
    return -1;
  }
  char dir[4096];
  parent_of(a->path, dir, sizeof(dir));
  return gpt_fsync_dir(dir, err, errlen);
}

void gpt_afile_abort(gpt_afile *a) {
  if (a->f) fclose(a->f);
  a->f = NULL;
  remove(a->tmp);
}

int gpt_fsync_dir(const char *dir, char *err, size_t errlen) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  int rc = fd < 0 ? -1 : fsync(fd);
  int e = errno;
  if (fd >= 0) close(fd);
  if (rc == 0) return 0;
  snprintf(err, errlen, "cannot sync directory %s: %s", dir, strerror(e));
  return -1;
}

int gpt_mkdir_durable(const char *dir, char *err, size_t errlen) {
  struct stat sb;
  if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return 0;
  if (mkdir(dir, 0777) && errno != EEXIST) {
    snprintf(err, errlen, "cannot create directory %s: %s", dir, strerror(errno));
    return -1;
  }
  char parent[4096];
  parent_of(dir, parent, sizeof(parent));
  return gpt_fsync_dir(parent, err, errlen);
}
