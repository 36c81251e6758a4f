/* env.c: typed reads of weft's environment variables. A malformed value is a user error we
 * warn about and replace by the default rather than failing far from its cause. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "lib/env.h"
#include "lib/log.h"

const char *weft__env_str(const char *name, const char *def) {
  const char *v = getenv(name);
  return (v == NULL || *v == '\0') ? def : v;
}

long weft__env_long(const char *name, long def) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return def;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 0);
  if (errno != 0 || *end != '\0') {
    WEFT_WARN("%s=%s is not an integer; using %ld", name, v, def);
    return def;
  }
  return x;
}

size_t weft__env_size(const char *name, size_t def) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return def;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 0);
  int shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
  }
  if (errno != 0 || *end != '\0' || v[0] == '-') {
    WEFT_WARN("%s=%s is not a size (e.g. 4096, 64K, 1M); using %zu", name, v, def);
    return def;
  }
  return (size_t)(x << shift);
}

const char *weft__env_name(const char *name, const char *old) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static const char *warned[16];
  const char *v = getenv(name), *o = getenv(old);
  if ((v != NULL && *v != '\0') || o == NULL || *o == '\0') return name;
  int first = 1;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < 16 && warned[i] != NULL && first; i++) first = strcmp(warned[i], old) != 0;
  for (int i = 0; i < 16 && first; i++)
    if (warned[i] == NULL) {
      warned[i] = old;
      break;
    }
  pthread_mutex_unlock(&mu);
  if (first) WEFT_WARN("%s is deprecated; use %s (same meaning)", old, name);
  return old;
}
