/* ib_config.c: parsing WEFT_IB_* (see ib_config.h). */
#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/log.h"
#include "transports/ib/ib_config.h"

/* One "NAME[:PORT]" of length n at s. */
static int parse_entry(const char *s, size_t n, weft__ib_hca_entry *e, char *err, size_t len) {
  while (n > 0 && isspace((unsigned char)*s)) s++, n--;
  while (n > 0 && isspace((unsigned char)s[n - 1])) n--;
  const char *colon = memchr(s, ':', n);
  size_t name_len = colon ? (size_t)(colon - s) : n;
  if (name_len == 0 || name_len >= sizeof(e->name))
    return snprintf(err, len, "an empty or too long device name in '%.*s'", (int)n, s), -1;
  memcpy(e->name, s, name_len);
  e->name[name_len] = '\0';
  e->port = -1;
  if (colon == NULL) return 0;
  char port[16];
  size_t plen = n - name_len - 1;
  if (plen == 0 || plen >= sizeof(port)) return snprintf(err, len, "no port after ':' in '%.*s'", (int)n, s), -1;
  memcpy(port, colon + 1, plen);
  port[plen] = '\0';
  char *end;
  long p = strtol(port, &end, 10);
  if (*end != '\0' || p < 1 || p > 255)
    return snprintf(err, len, "port '%s' of %s is not a number in 1..255", port, e->name), -1;
  e->port = (int)p;
  return 0;
}

int weft__ib_hca_parse(const char *s, weft__ib_hca_list *out, char *err, size_t len) {
  memset(out, 0, sizeof(*out));
  if (s == NULL) return 0;
  while (isspace((unsigned char)*s)) s++;
  if (*s == '\0') return 0;
  weft__ib_hca_list l = {0};
  if (*s == '^') l.exclude = 1, s++;
  if (*s == '=') l.exact = 1, s++;
  for (;;) {
    const char *comma = strchr(s, ',');
    size_t n = comma ? (size_t)(comma - s) : strlen(s);
    if (l.n == WEFT__IB_MAX_HCA_ENTRIES)
      return snprintf(err, len, "more than %d entries", WEFT__IB_MAX_HCA_ENTRIES), -1;
    if (parse_entry(s, n, &l.e[l.n], err, len) != 0) return -1;
    l.n++;
    if (comma == NULL) break;
    s = comma + 1;
  }
  *out = l;
  return 0;
}

int weft__ib_hca_match(const weft__ib_hca_list *l, const char *dev, int port) {
  if (l->n == 0) return 1;
  int found = 0;
  for (int i = 0; i < l->n && !found; i++) {
    const weft__ib_hca_entry *e = &l->e[i];
    int name = l->exact ? strcmp(dev, e->name) == 0 : strncmp(dev, e->name, strlen(e->name)) == 0;
    found = name && (e->port < 0 || e->port == port);
  }
  return l->exclude ? !found : found;
}

/* Appends a sentence to err ("; " between sentences). */
__attribute__((format(printf, 3, 4))) static void append(char *err, size_t len, const char *fmt, ...) {
  size_t used = strlen(err);
  if (used + 3 >= len) return;
  if (used > 0) used += (size_t)snprintf(err + used, len - used, "; ");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + used, len - used, fmt, ap);
  va_end(ap);
}

/* An integer variable in [lo, hi]; 0, or 1 when malformed (then *v keeps its default). */
static int int_var(const char *(*get)(const char *), const char *name, int lo, int hi, int *v,
                   char *err, size_t len) {
  const char *s = get(name);
  if (s == NULL || s[0] == '\0') return 0;
  char *end;
  long x = strtol(s, &end, 0);
  if (end == s || *end != '\0' || x < lo || x > hi) {
    append(err, len, "%s='%s' is not an integer in %d..%d; using %d", name, s, lo, hi, *v);
    return 1;
  }
  *v = (int)x;
  return 0;
}

int weft__ib_config_parse(weft__ib_config *c, const char *(*get)(const char *name), char *err,
                          size_t len) {
  if (len > 0) err[0] = '\0';
  *c = (weft__ib_config){.gid_index = -1, .timeout = 20, .retry_cnt = 7, .qps_per_conn = 1};
  int bad = 0;
  char why[256];
  if (weft__ib_hca_parse(get("WEFT_IB_HCA"), &c->hca, why, sizeof(why)) != 0) {
    append(err, len, "WEFT_IB_HCA='%s': %s; using every HCA", get("WEFT_IB_HCA"), why);
    bad++;
  }
  bad += int_var(get, "WEFT_IB_GID_INDEX", -1, 255, &c->gid_index, err, len);
  bad += int_var(get, "WEFT_IB_TIMEOUT", 1, 31, &c->timeout, err, len);
  bad += int_var(get, "WEFT_IB_RETRY_CNT", 0, 7, &c->retry_cnt, err, len);
  bad += int_var(get, "WEFT_IB_QPS_PER_CONNECTION", 1, WEFT__IB_MAX_QPS, &c->qps_per_conn, err, len);
  bad += int_var(get, "WEFT_IB_DISABLE", 0, 1, &c->disable, err, len);
  return bad;
}

static weft__ib_config g_config;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const char *env_get(const char *name) { return getenv(name); }

static void load(void) {
  char err[1024];
  if (weft__ib_config_parse(&g_config, env_get, err, sizeof(err)) != 0) WEFT_WARN("ib: %s", err);
}

const weft__ib_config *weft__ib_config_get(void) {
  pthread_once(&g_once, load);
  return &g_config;
}
