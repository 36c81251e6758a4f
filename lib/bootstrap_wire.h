/* bootstrap_wire.h: the messages between ranks and the bootstrap root. Every message is a
 * header {type, len} followed by len payload bytes; integers in host order (one job runs on
 * one architecture). */
#ifndef WEFT_BOOTSTRAP_WIRE_H
#define WEFT_BOOTSTRAP_WIRE_H
#include <stdint.h>

enum {
  WEFT__BS_HELLO = 1,      /* rank -> root: weft__bs_hello */
  WEFT__BS_REJECT = 2,     /* root -> rank: u32 status, then text */
  WEFT__BS_READY = 3,      /* root -> rank: every rank has joined */
  WEFT__BS_GATHER = 4,     /* rank -> root: this rank's blob of the current round */
  WEFT__BS_GATHERED = 5,   /* root -> rank: all blobs in rank order */
  WEFT__BS_BYE = 6,        /* rank -> root: leaving cleanly */
  WEFT__BS_FAILED = 7,     /* root -> rank: i32 failed rank (-1 root), then text */
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
} weft__bs_hello;

#define WEFT__BS_MAX_PAYLOAD (64u << 20)
#endif
