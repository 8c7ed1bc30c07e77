/* Shared by the GPU tests of the cuda backend (tests/cuda): skipping cleanly without a GPU,
 * and a seeded generator for fresh inputs each run (ACCEL_TEST_SEED=<seed> replays one). */
#ifndef ACCEL_TESTS_CUDA_TEST_H
#define ACCEL_TESTS_CUDA_TEST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../test.h"

/* meson's exit status for a skipped test: never a silent pass. */
#define CUDA_TEST_SKIP 77

static inline int cuda_test_skip(const char *why) {
  printf("SKIP: no CUDA device (%s): the GPU tests need one\n", why);
  fflush(stdout);
  return CUDA_TEST_SKIP;
}

static uint64_t cuda_test_rng_state;

static inline uint64_t cuda_test_seed(void) {
  const char *s = getenv("ACCEL_TEST_SEED");
  uint64_t seed = s != NULL ? strtoull(s, NULL, 0) : test_now_ns() ^ ((uint64_t)getpid() << 32);
  cuda_test_rng_state = seed;
  printf("# seed %" PRIu64 " (rerun with ACCEL_TEST_SEED=%" PRIu64 ")\n", seed, seed);
  return seed;
}

/* splitmix64 */
static inline uint64_t cuda_rnd64(void) {
  uint64_t z = (cuda_test_rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static inline size_t cuda_rnd_range(size_t lo, size_t hi) {
  return lo + (size_t)(cuda_rnd64() % (uint64_t)(hi - lo + 1));
}

/* |x| in [lo, hi) with a random sign: never zero. */
static inline float cuda_rnd_nz(float lo, float hi) {
  float mag = lo + (hi - lo) * (float)((double)(cuda_rnd64() >> 11) * 0x1p-53);
  return (cuda_rnd64() & 1) ? -mag : mag;
}

static inline void *cuda_xmalloc(size_t bytes) {
  void *p = malloc(bytes > 0 ? bytes : 1);
  if (p == NULL)
    TEST_FAIL("out of memory");
  return p;
}

#endif
