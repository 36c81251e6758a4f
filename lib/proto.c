/* proto.c: parsing WEFT_PROTO (NCCL_PROTO's grammar) and WEFT_LL_THRESHOLD into the
 * protocol choice a transport applies per message (see proto.h). */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "lib/comm.h"
#include "lib/env.h"
#include "lib/proto.h"
#include "lib/status.h"

/* The bit of one protocol name of len bytes, or 0 when unknown. */
static unsigned proto_bit(const char *name, size_t len) {
  if (len == 2 && strncasecmp(name, "LL", 2) == 0) return WEFT__PROTO_LL;
  if (len == 5 && strncasecmp(name, "LL128", 5) == 0) return WEFT__PROTO_LL;
  if (len == 6 && strncasecmp(name, "Simple", 6) == 0) return WEFT__PROTO_SIMPLE;
  return 0;
}

int weft__proto_parse(const char *spec, unsigned *mask, char *err, size_t errlen) {
  *mask = WEFT__PROTO_ALL;
  if (spec == NULL || *spec == '\0') return 0;
  int exclude = spec[0] == '^';
  const char *p = spec + exclude;
  unsigned named = 0;
  for (;;) {
    size_t len = strcspn(p, ",");
    while (len > 0 && (*p == ' ' || *p == '\t')) p++, len--;
    while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
    unsigned bit = proto_bit(p, len);
    if (bit == 0) {
      snprintf(err, errlen, "WEFT_PROTO=%s: unknown protocol \"%.*s\" (known: LL, LL128, "
               "Simple; a leading ^ excludes)", spec, (int)len, p);
      return -1;
    }
    named |= bit;
    p += strcspn(p, ",");
    if (*p == '\0') break;
    p++;
  }
  *mask = exclude ? WEFT__PROTO_ALL & ~named : named;
  if (*mask == 0) {
    snprintf(err, errlen, "WEFT_PROTO=%s leaves no protocol to use", spec);
    return -1;
  }
  return 0;
}

weft_status_t weft__proto_config(struct weft_comm *comm, int *ll_on, uint64_t *ll_max) {
  char err[256];
  unsigned mask;
  int rank = comm ? comm->rank : -1;
  if (weft__proto_parse(weft__env_str("WEFT_PROTO", ""), &mask, err, sizeof err) != 0)
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "rank %d: %s", rank, err);
  *ll_on = (mask & WEFT__PROTO_LL) != 0;
  size_t def = comm != NULL && comm->oversubscribed ? WEFT__LL_OVERSUB_THRESHOLD : WEFT__LL_DEFAULT_THRESHOLD;
  *ll_max = mask & WEFT__PROTO_SIMPLE ? weft__env_size("WEFT_LL_THRESHOLD", def) : UINT64_MAX;
  return WEFT_SUCCESS;
}

const char *weft__proto_name(int ll_on, uint64_t ll_max, size_t bytes) {
  return ll_on && bytes <= ll_max ? "LL" : "Simple";
}
