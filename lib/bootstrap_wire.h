/* bootstrap_wire.h: the messages between ranks and the bootstrap root. Every message is a
 * header {type, len} followed by len payload bytes; integers in host order (one job runs on
 * one architecture). */
#ifndef WEFT_BOOTSTRAP_WIRE_H
#define WEFT_BOOTSTRAP_WIRE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum {
  WEFT__BS_HELLO = 1,      /* rank -> root: weft__bs_hello */
  WEFT__BS_REJECT = 2,     /* root -> rank: u32 status, then text */
  WEFT__BS_READY = 3,      /* root -> rank: every rank has joined; i32: the rank whose process
                              hosts the root, -1 when none does */
  WEFT__BS_GATHER = 4,     /* rank -> root: this rank's blob of the current round */
  WEFT__BS_GATHERED = 5,   /* root -> rank: all blobs in rank order */
  WEFT__BS_BYE = 6,        /* rank -> root: leaving cleanly */
  WEFT__BS_FAILED = 7,     /* root -> rank: i32 failed rank (-1 root), then text */
  WEFT__BS_HOST_LEFT = 8,  /* root -> rank: the rank hosting the root left cleanly, so the
                              root's end no longer says that rank failed */
};

typedef struct {
  uint32_t type;
  uint32_t len;
} weft__bs_header;

typedef struct {
  uint32_t magic;
  uint8_t secret[16];
  int32_t rank;
  int32_t nranks;
  int32_t timeout_ms;
  int32_t pid;          /* the rank's process: the root learns which rank hosts it */
} weft__bs_hello;

#define WEFT__BS_MAX_PAYLOAD (64u << 20)
/* The most ranks a communicator may have: bounds what an authenticated but wrong hello can
 * make the root allocate (its table grows page by page as ranks join, bootstrap_root.c). */
#define WEFT__BS_MAX_RANKS (1 << 24)

/* Parses a complete hello message (header and body, len bytes at msg): 0 with *out set,
 * -1 when it is not exactly a HELLO of the right size. No secret check. */
static inline int weft__bs_parse_hello(const void *msg, size_t len, weft__bs_hello *out) {
  weft__bs_header h;
  if (len != sizeof(h) + sizeof(*out)) return -1;
  memcpy(&h, msg, sizeof(h));
  if (h.type != WEFT__BS_HELLO || h.len != sizeof(*out)) return -1;
  memcpy(out, (const char *)msg + sizeof(h), sizeof(*out));
  return 0;
}
#endif
