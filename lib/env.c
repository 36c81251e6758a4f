/* env.c: typed reads of weft's environment variables. A malformed value of a tuning knob is
 * warned about and replaced by the default; values whose misreading is dangerous (timeouts,
 * ports, secrets, buffer sizes) go through the range-checked reads, which fail at once
 * naming the variable and the valid range. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "lib/env.h"
#include "lib/log.h"
#include "lib/status.h"

const char *weft__env_str(const char *name, const char *def) {
  const char *v = getenv(name);
  return (v == NULL || *v == '\0') ? def : v;
}

/* strtol/strtoull skip blanks and take a sign; the values here must be digits only. */
static int starts_with_digit(const char *text) { return text[0] >= '0' && text[0] <= '9'; }

int weft__parse_long(const char *text, long *out) {
  if (text == NULL || !(starts_with_digit(text) || (text[0] == '-' && starts_with_digit(text + 1)))) return -1;
  char *end;
  errno = 0;
  long x = strtol(text, &end, 0);
  if (errno != 0 || *end != '\0') return -1;
  *out = x;
  return 0;
}

int weft__parse_size(const char *text, size_t *out) {
  if (text == NULL || !starts_with_digit(text)) return -1;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(text, &end, 0);
  int shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
  }
  if (errno != 0 || *end != '\0' || x > (unsigned long long)SIZE_MAX >> shift) return -1;
  *out = (size_t)(x << shift);
  return 0;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int weft__parse_hex(const char *text, uint8_t *out, size_t n) {
  if (text == NULL || strlen(text) != 2 * n) return -1;
  for (size_t i = 0; i < n; i++) {
    int hi = hex_digit(text[2 * i]), lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

int weft__parse_port(const char *text, uint16_t *out) {
  if (text == NULL || !starts_with_digit(text) || strlen(text) > 5) return -1;
  long x = 0;
  for (const char *c = text; *c; c++) {
    if (*c < '0' || *c > '9') return -1;
    x = x * 10 + (*c - '0');
  }
  if (x < 1 || x > 65535) return -1;
  *out = (uint16_t)x;
  return 0;
}

long weft__env_long(const char *name, long def) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return def;
  long x;
  if (weft__parse_long(v, &x) != 0) {
    WEFT_WARN("%s=%s is not an integer; using %ld", name, v, def);
    return def;
  }
  return x;
}

size_t weft__env_size(const char *name, size_t def) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return def;
  size_t x;
  if (weft__parse_size(v, &x) != 0) {
    WEFT_WARN("%s=%s is not a size (e.g. 4096, 64K, 1M); using %zu", name, v, def);
    return def;
  }
  return x;
}

weft_status_t weft__env_long_in(const char *name, long def, long min, long max, long *out) {
  const char *v = getenv(name);
  *out = def;
  if (v == NULL || *v == '\0') return WEFT_SUCCESS;
  long x;
  if (weft__parse_long(v, &x) != 0 || x < min || x > max)
    return weft__error(NULL, WEFT_ERR_INVALID_USAGE, "%s=%s is not an integer from %ld to %ld", name, v,
                       min, max);
  *out = x;
  return WEFT_SUCCESS;
}

weft_status_t weft__env_size_in(const char *name, size_t def, size_t min, size_t max, int zero_ok,
                                size_t *out) {
  const char *v = getenv(name);
  *out = def;
  if (v == NULL || *v == '\0') return WEFT_SUCCESS;
  size_t x;
  if (weft__parse_size(v, &x) != 0 || ((x < min || x > max) && !(zero_ok && x == 0)))
    return weft__error(NULL, WEFT_ERR_INVALID_USAGE, "%s=%s is not a size from %zu to %zu bytes%s "
                       "(e.g. 4096, 64K, 1M)", name, v, min, max, zero_ok ? ", or 0" : "");
  *out = x;
  return WEFT_SUCCESS;
}

weft_status_t weft__env_timeout_ms(int *out) {
  long x;
  WEFT_TRY(weft__env_long_in("WEFT_TIMEOUT_MS", 120000, 1, INT_MAX, &x));
  *out = (int)x;
  return WEFT_SUCCESS;
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
