/* unique_id.c: creating unique ids, their compact address form, and their hex spelling. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include "lib/bootstrap.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/status.h"

_Static_assert(sizeof(weft__id_layout) <= WEFT_UNIQUE_ID_BYTES, "unique id layout too large");

void weft__id_set_root(weft__id_layout *id, const weft__sockaddr *root) {
  id->family = root->ss.ss_family;
  memset(id->addr, 0, sizeof(id->addr));
  id->scope_id = 0;
  if (root->ss.ss_family == AF_INET) {
    const struct sockaddr_in *s = (const struct sockaddr_in *)&root->ss;
    memcpy(id->addr, &s->sin_addr, 4);
    id->port = ntohs(s->sin_port);
  } else {
    const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&root->ss;
    memcpy(id->addr, &s->sin6_addr, 16);
    id->port = ntohs(s->sin6_port);
    id->scope_id = s->sin6_scope_id;
  }
}

void weft__id_get_root(const weft__id_layout *id, weft__sockaddr *root) {
  memset(root, 0, sizeof(*root));
  if (id->family == AF_INET) {
    struct sockaddr_in *s = (struct sockaddr_in *)&root->ss;
    s->sin_family = AF_INET;
    memcpy(&s->sin_addr, id->addr, 4);
    s->sin_port = htons(id->port);
    root->len = sizeof(*s);
  } else {
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)&root->ss;
    s->sin6_family = AF_INET6;
    memcpy(&s->sin6_addr, id->addr, 16);
    s->sin6_port = htons(id->port);
    s->sin6_scope_id = id->scope_id;
    root->len = sizeof(*s);
  }
}

weft_status_t weft__id_check(const weft__id_layout *id) {
  if (id->magic != WEFT__ID_MAGIC || id->version != WEFT__ID_VERSION ||
      (id->family != AF_INET && id->family != AF_INET6))
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT,
                       "weft_comm_init_rank: the unique id is malformed (not made by weft_get_unique_id of this weft version)");
  return WEFT_SUCCESS;
}

weft_status_t weft_get_unique_id(weft_unique_id_t *id) {
  if (id == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_get_unique_id: id is NULL");
  weft__sockaddr addr;
  char ifname[64];
  WEFT_TRY(weft__sockaddr_pick_local(&addr, ifname, sizeof(ifname)));
  weft__id_layout l;
  memset(&l, 0, sizeof(l));
  l.magic = WEFT__ID_MAGIC;
  l.version = WEFT__ID_VERSION;
  if (getrandom(l.secret, sizeof(l.secret), 0) != (ssize_t)sizeof(l.secret))
    return weft__error(NULL, WEFT_ERR_SYSTEM, "getrandom failed: %s", strerror(errno));
  int timeout_ms;
  WEFT_TRY(weft__env_timeout_ms(&timeout_ms));
  WEFT_TRY(weft__bootstrap_root_start(&addr, l.secret, timeout_ms));
  weft__id_set_root(&l, &addr);
  char where[80];
  WEFT_INFO("unique id: bootstrap root listening on %s (%s)",
            weft__sockaddr_str(&addr, where, sizeof(where)), ifname);
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &l, sizeof(l));
  return WEFT_SUCCESS;
}

weft_status_t weft_unique_id_to_string(const weft_unique_id_t *id, char *str) {
  if (id == NULL || str == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_unique_id_to_string: NULL pointer");
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)id->internal;
  for (int i = 0; i < WEFT_UNIQUE_ID_BYTES; i++) {
    str[2 * i] = hex[p[i] >> 4];
    str[2 * i + 1] = hex[p[i] & 15];
  }
  str[2 * WEFT_UNIQUE_ID_BYTES] = '\0';
  return WEFT_SUCCESS;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

weft_status_t weft_unique_id_from_string(const char *str, weft_unique_id_t *id) {
  if (id == NULL || str == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_unique_id_from_string: NULL pointer");
  if (strlen(str) != 2 * WEFT_UNIQUE_ID_BYTES)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT,
                       "unique id string has %zu characters, expected %d hex digits", strlen(str),
                       2 * WEFT_UNIQUE_ID_BYTES);
  for (int i = 0; i < WEFT_UNIQUE_ID_BYTES; i++) {
    int hi = hexval(str[2 * i]), lo = hexval(str[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT,
                         "unique id string has a non-hex character at position %d", 2 * i);
    id->internal[i] = (char)(hi << 4 | lo);
  }
  return WEFT_SUCCESS;
}
