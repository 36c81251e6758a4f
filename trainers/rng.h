/* trainers/rng.h: the seeded random numbers of the trainers (xoshiro256** seeded through
 * splitmix64, after Blackman and Vigna). The whole state is four words, so a checkpoint can
 * store it and a resumed run draws exactly the batches the uninterrupted run would have.
 */
#ifndef WEFT_TRAINERS_RNG_H
#define WEFT_TRAINERS_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct gpt_rng {
  uint64_t s[4];
} gpt_rng;

static inline uint64_t gpt_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline void gpt_rng_seed(gpt_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++)
    r->s[i] = gpt_splitmix64(&seed);
}

static inline uint64_t gpt_rng_next(gpt_rng *r) {
  uint64_t *s = r->s;
  uint64_t x = s[1] * 5, result = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = (s[3] << 45) | (s[3] >> 19);
  return result;
}

/* Uniform in [0, n); the modulo bias is below 2^-40 for the n used here. */
static inline uint64_t gpt_rng_below(gpt_rng *r, uint64_t n) {
  return gpt_rng_next(r) % n;
}

/* Uniform in (0, 1): 53 random bits, never 0 so log() is safe. */
static inline double gpt_rng_uniform(gpt_rng *r) {
  return ((double)(gpt_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Standard normal by Box-Muller (one value per call; simple beats fast here). */
static inline double gpt_rng_normal(gpt_rng *r) {
  double u1 = gpt_rng_uniform(r), u2 = gpt_rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
