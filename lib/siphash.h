/* siphash.h: the keyed hash every proof of the job's secret uses (lib/siphash.c). */
#ifndef WEFT_SIPHASH_H
#define WEFT_SIPHASH_H
#include <stddef.h>
#include <stdint.h>

/* SipHash-2-4 of len bytes at data under the 128-bit key. Pure; thread-safe. */
uint64_t weft__siphash(const uint8_t key[16], const void *data, size_t len);

/* The MAC of a setup message: SipHash-2-4 under the secret of msg's first len bytes (at most
 * 256; the caller zeroes the MAC field inside them) followed by the 16-byte nonce of the
 * receiving side, which that side chose at random for this communicator and published
 * through the bootstrap (a transport's card): a message made for one communicator, or one
 * sent earlier, does not verify for another. Pure; thread-safe. */
uint64_t weft__mac(const uint8_t secret[16], const void *msg, size_t len, const uint8_t nonce[16]);

/* Constant-time equality of two MACs (no early exit to time). */
static inline int weft__mac_equal(uint64_t a, uint64_t b) {
  uint64_t d = a ^ b;
  d |= d >> 32;
  d |= d >> 16;
  d |= d >> 8;
  return (d & 0xff) == 0;
}
#endif
