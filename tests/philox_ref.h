/* An independent Philox4x32-10 for tests, written from its definition (Random123; cuRAND's
 * device-API stream convention: backends/cpu/philox.h). tests/api/rng.c checks it
 * against Random123's known-answer vectors; other tests use it as the reference of
 * accel_rng_fill's bits. */
#ifndef ACCEL_TESTS_PHILOX_REF_H
#define ACCEL_TESTS_PHILOX_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* Random123's structure: the key is bumped before every round but the first. */
static inline void ref_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t x[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; round++) {
    if (round > 0) {
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    uint64_t p0 = (uint64_t)PHILOX_M0 * x[0], p1 = (uint64_t)PHILOX_M1 * x[2];
    uint32_t y0 = (uint32_t)(p1 >> 32) ^ x[1] ^ k0, y1 = (uint32_t)p1;
    uint32_t y2 = (uint32_t)(p0 >> 32) ^ x[3] ^ k1, y3 = (uint32_t)p0;
    x[0] = y0;
    x[1] = y1;
    x[2] = y2;
    x[3] = y3;
  }
  memcpy(out, x, sizeof x);
}

/* Word j of the stream of `seed`: word (j mod 4) of philox(counter = {q lo, q hi, 0, 0},
 * key = {seed lo, seed hi}), q = j div 4. The last block is kept (fills read it in order). */
static inline uint32_t ref_word(uint64_t seed, uint64_t j) {
  static _Thread_local uint64_t cached_seed, cached_q = UINT64_MAX;
  static _Thread_local uint32_t block[4];
  uint64_t q = j / 4;
  if (q != cached_q || seed != cached_seed) {
    uint32_t ctr[4] = {(uint32_t)q, (uint32_t)(q >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    ref_philox(ctr, key, block);
    cached_q = q;
    cached_seed = seed;
  }
  return block[j % 4];
}

/* cuRAND's _curand_uniform, with its constants as float literals (2^-32 and 2^-33 exactly). */
static inline float ref_uniform(uint32_t x) {
  float fx = (float)x;
  float scaled = fx * 2.3283064e-10f;
  return scaled + 1.1641532e-10f;
}

/* Element j of the standard normal stream: Box-Muller on words 2(j div 2), 2(j div 2) + 1,
 * with u and v formed in float as cuRAND does, the rest in double. */
static inline double ref_normal(uint64_t seed, uint64_t j) {
  uint64_t p = j & ~(uint64_t)1;
  float k = 2.3283064e-10f * 6.2831855f;
  float u = ref_uniform(ref_word(seed, p));
  float v = (float)ref_word(seed, p + 1) * k + k / 2.0f;
  double r = sqrt(-2.0 * log((double)u));
  return j % 2 ? cos((double)v) * r : sin((double)v) * r;
}

/* cuRAND's double uniform from two words: (w0 ^ (w1 << 21)) 2^-53 + 2^-54, in (0, 1). Element
 * j of an F64 fill takes words 2j and 2j + 1. */
static inline double ref_uniform_double(uint64_t seed, uint64_t j) {
  uint64_t z = (uint64_t)ref_word(seed, 2 * j) ^ ((uint64_t)ref_word(seed, 2 * j + 1) << 21);
  return (double)z * 0x1p-53 + 0x1p-54;
}

#endif
