/* stream_copy (backends/stream_copy.h) against the bytes it was given: every length from 0 to
 * 300 and random ones up to 3 MiB, at every source and destination offset within a cache line
 * (the aligned middle, the unaligned head and tail), with guard bytes on both sides of the
 * destination that must stay as they were. Fresh random bytes each run; the seed is printed and
 * ACCEL_TEST_SEED reproduces it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/stream_copy.h"
#include "tests/test.h"

#define GUARD 80
#define MAX_LEN ((size_t)3 << 20)

static uint64_t rng_state;

static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void fill_random(unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)rnd();
}

/* One copy of len bytes, the source at src_off and the destination at dst_off into buffers
 * aligned to 64 bytes; checks the copy and both guards. */
static void copy_case(unsigned char *src_buf, unsigned char *dst_buf, size_t len, size_t src_off,
                      size_t dst_off) {
  unsigned char *src = src_buf + src_off, *dst = dst_buf + GUARD + dst_off;
  fill_random(src, len);
  memset(dst_buf, 0xA5, GUARD + dst_off);
  memset(dst + len, 0x5A, GUARD);
  stream_copy(dst, src, len);
  if (memcmp(dst, src, len) != 0)
    TEST_FAIL("stream_copy of %zu bytes (source +%zu, destination +%zu): wrong bytes", len, src_off,
              dst_off);
  for (size_t i = 0; i < GUARD + dst_off; i++)
    if (dst_buf[i] != 0xA5)
      TEST_FAIL("stream_copy of %zu bytes (destination +%zu) wrote %zu bytes before it", len,
                dst_off, GUARD + dst_off - i);
  for (size_t i = 0; i < GUARD; i++)
    if (dst[len + i] != 0x5A)
      TEST_FAIL("stream_copy of %zu bytes (destination +%zu) wrote byte %zu after it", len, dst_off,
                i);
}

static unsigned char *aligned(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes) != 0)
    TEST_FAIL("out of memory");
  return p;
}

TEST(every_short_length_at_every_offset) {
  unsigned char *src = aligned(512), *dst = aligned(512 + 2 * GUARD);
  for (size_t len = 0; len <= 300; len++)
    for (size_t so = 0; so < 64; so += 7)
      for (size_t d = 0; d < 64; d++)
        copy_case(src, dst, len, so, d);
  free(src);
  free(dst);
}

TEST(long_copies_at_random_offsets) {
  unsigned char *src = aligned(MAX_LEN + 64), *dst = aligned(MAX_LEN + 64 + 2 * GUARD);
  for (int i = 0; i < 60; i++) {
    size_t len = i < 4 ? MAX_LEN - (size_t)i : (size_t)(rnd() % MAX_LEN);
    copy_case(src, dst, len, (size_t)(rnd() % 64), (size_t)(rnd() % 64));
  }
  free(src);
  free(dst);
}

static const test_case tests[] = {
    TEST_CASE(every_short_length_at_every_offset),
    TEST_CASE(long_copies_at_random_offsets),
};

static void seed_once(void) {
  const char *env = getenv("ACCEL_TEST_SEED");
  rng_state = env != NULL ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
  printf("# seed %" PRIu64 " (rerun with ACCEL_TEST_SEED=%" PRIu64 ")\n", rng_state, rng_state);
}

int main(int argc, char **argv) {
  seed_once();
  return test_main_(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
