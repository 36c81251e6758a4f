/* fingerprint.h: the always-on check that both ends of every message are in the same call.
 *
 * Why: ranks that call different collectives (sum on one, max on another; float32 against
 * int32; a zero-count call on one rank only, which shifts every later pairing) used to
 * succeed with wrong results, since a message carried only its size. Now every message
 * carries the 16-byte fingerprint of the call that sent it (collective, count, datatype,
 * op, root, sequence number), and the receiver compares it with its own before it takes
 * any byte: a mismatch is an error naming both ranks and both calls (weft__fp_mismatch).
 * Transports carry it in what they already write per message: the socket header, the shm
 * slot header, for shm's LL lines a 32-bit check in the flag (weft__fp_check32) with the
 * full fingerprint beside the buffer, read only on a mismatch, and for ib a 32-byte header
 * in front of each message's first slice (its first 4064 bytes at most) in registered
 * staging (transports/ib/ib_transport.h; that slice is staged even from a registered
 * window, and a longer message has one more engine message). No extra message on the
 * 8-byte path, no system call, no allocation: there it is a 16-byte copy per post and one
 * compare per message.
 *
 * Sequence numbers: collectives count per communicator (every rank takes part in every
 * one, so the numbers agree, and a rank that skipped or added a call is caught); sends and
 * receives count per connection and direction (only the two ranks of a pair take part).
 * Zero-count calls advance the count like any other, so a call that moves nothing still
 * shifts what the next call expects and the shift is caught there. */
#ifndef WEFT_FINGERPRINT_H
#define WEFT_FINGERPRINT_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "weft.h"

struct weft_comm;

/* What a message says about the call that sent it. All zero: unset (weft__req_post fills
 * it from the communicator's current call). */
typedef struct weft__fp {
  uint64_t count; /* collectives: elements, as the caller gave them (all_to_allv: 0, its
                     counts are per pair); send/recv: bytes */
  uint32_t seq;   /* collective number on the comm, or message number on the pair (low 32 bits) */
  uint16_t root;  /* root + 1, 0 when the call has none (modulo 2^16) */
  uint8_t coll;   /* weft__coll_t + 1; sends and receives all say WEFT__COLL_SEND + 1 */
  uint8_t type;   /* datatype | op << 4 (op only for reductions) | WEFT__FP_DIRECT */
} weft__fp;

/* In fp.type: the direct algorithms' own messages (algos/direct.c), so a rank that runs
 * the usual algorithm for the same call (its buffers not registered where a peer's are:
 * lib/reg.h) takes no descriptor for data, nor the other way round. Ops fit in 3 bits. */
#define WEFT__FP_DIRECT 0x80u
_Static_assert(WEFT_NUM_OPS <= 8, "op << 4 stays below WEFT__FP_DIRECT");

_Static_assert(sizeof(weft__fp) == 16, "two words on the wire");

static inline int weft__fp_equal(const weft__fp *a, const weft__fp *b) {
  return memcmp(a, b, sizeof(*a)) == 0;
}

/* A 64-bit hash of fp, computed once per call (weft__fp_call), never 0. */
static inline uint64_t weft__fp_hash(const weft__fp *fp) {
  uint64_t w[2];
  memcpy(w, fp, sizeof(w));
  uint64_t x = w[0] * 0x9e3779b97f4a7c15ull + w[1];
  x = (x ^ x >> 31) * 0xc2b2ae3d27d4eb4full;
  x = (x ^ x >> 29) * 0x94d049bb133111ebull;
  return (x ^ x >> 32) | 1;
}

/* 32 bits of (a call's hash, message bytes, extra) for shm's LL flag: equal calls, sizes
 * and extras give equal checks; a difference in any changes it (but for one pair in 2^32).
 * One multiply per message: the hash of the call was made once per call. */
static inline uint32_t weft__fp_check32(uint64_t hash, uint64_t bytes, uint64_t extra) {
  return (uint32_t)((hash ^ (bytes + (extra << 40)) * 0xc2b2ae3d27d4eb4full) >> 32);
}

/* The running call of a communicator: its fingerprint and that fingerprint's hash. */
typedef struct weft__fp_call {
  weft__fp fp;
  uint64_t hash;
} weft__fp_call;

/* The fingerprint of the call described (coll a weft__coll_t). */
weft__fp weft__fp_make(int coll, uint64_t seq, size_t count, weft_datatype_t dtype,
                       weft_redop_t op, int root);

/* "all_reduce #7 (count 16, float32, sum)"; for a send/recv fingerprint "send #3 to rank 1
 * (64 bytes)" (is_send, other: the peer). Returns buf. */
const char *weft__fp_describe(const weft__fp *fp, int is_send, int other, char *buf, size_t len);

/* Raises the mismatch found by comm's rank when its receive from peer (expecting mine)
 * got a message of peer's call theirs: WEFT_ERR_INVALID_USAGE, "rank 1: call mismatch: all_reduce #7
 * (count 16, float32, sum) does not match rank 0's all_reduce #7 (count 16, float32, max)". */
weft_status_t weft__fp_mismatch(struct weft_comm *comm, int peer, const weft__fp *mine,
                                const weft__fp *theirs);
#endif
