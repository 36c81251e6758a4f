/* siphash.c: SipHash-2-4 (J.-P. Aumasson, D. J. Bernstein, "SipHash: a fast short-input
 * PRF", 2012), the one MAC with which every connection proves the job's secret (ib handles,
 * shm and socket setup messages, the shm socket's name). Written from the paper's
 * description; transports/ib/tests/test_ib_engine.c checks the paper's test vector. */
#include <string.h>
#include "lib/siphash.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void rounds(uint64_t v[4], int n) {
  for (int i = 0; i < n; i++) {
    v[0] += v[1]; v[1] = ROTL(v[1], 13); v[1] ^= v[0]; v[0] = ROTL(v[0], 32);
    v[2] += v[3]; v[3] = ROTL(v[3], 16); v[3] ^= v[2];
    v[0] += v[3]; v[3] = ROTL(v[3], 21); v[3] ^= v[0];
    v[2] += v[1]; v[1] = ROTL(v[1], 17); v[1] ^= v[2]; v[2] = ROTL(v[2], 32);
  }
}

uint64_t weft__siphash(const uint8_t key[16], const void *data, size_t len) {
  const uint8_t *p = data;
  uint64_t k0 = le64(key), k1 = le64(key + 8);
  uint64_t v[4] = {k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull,
                   k1 ^ 0x7465646279746573ull};
  size_t full = len / 8 * 8;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m = le64(p + i);
    v[3] ^= m;
    rounds(v, 2);
    v[0] ^= m;
  }
  uint8_t tail[8] = {0};
  memcpy(tail, p + full, len - full);
  uint64_t b = (uint64_t)len << 56 | le64(tail);
  v[3] ^= b;
  rounds(v, 2);
  v[0] ^= b;
  v[2] ^= 0xff;
  rounds(v, 4);
  return v[0] ^ v[1] ^ v[2] ^ v[3];
}

uint64_t weft__mac(const uint8_t secret[16], const void *msg, size_t len, const uint8_t nonce[16]) {
  uint8_t buf[256 + 16];
  if (len > 256) len = 256; /* setup messages are far smaller; the bound keeps this on the stack */
  memcpy(buf, msg, len);
  memcpy(buf + len, nonce, 16);
  return weft__siphash(secret, buf, len + 16);
}
