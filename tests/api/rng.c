/* api-rng: accel_rng_fill against an independent Philox4x32-10 written here from its
 * definition (backends/cpu/philox.h: cuRAND's device-API stream convention), itself checked against
 * Random123's known-answer vectors. Random seeds, offsets (every residue mod 4, across the
 * 2^32-block carry into the counter's second word) and sizes each run; the seed is printed and
 * ACCEL_TEST_SEED=<seed> replays it.
 *
 *   BITS     bit-exact with the reference stream
 *   UNIFORM  bit-exact with cuRAND's float formula x * 2.3283064e-10f + 1.1641532e-10f (each
 *            step rounded to float), and in (0, 1]
 *   NORMAL   Box-Muller over word pairs (even element from sin, odd from cos), within
 *            1e-4 stddev (1 + |z|) of a float64 evaluation of the same formula; moments of
 *            ~1e6 samples within 6 standard errors; offset must be even (else ACCEL_EINVAL)
 *   slices   a fill at offset o equals the matching slice of a fill from 0, bit for bit */
#include <math.h>

#include "../philox_ref.h"
#include "api_util.h"

/* ---- helpers ------------------------------------------------------------------------- */

static int fill(accel_ctx *ctx, accel_device dev, accel_buffer b, accel_dist dist, uint64_t seed,
                uint64_t offset, float mean, float sd) {
  accel_rng spec = {.dist = dist, .seed = seed, .offset = offset, .mean = mean, .stddev = sd};
  accel_future *f = NULL;
  int rc = accel_rng_fill(ctx, dev, b, &spec, &f);
  return rc != 0 ? rc : fut_status(f);
}

/* `count` elements of `dist` at (seed, offset), read back into a malloc'd array. */
static void *fill_read(accel_ctx *ctx, accel_device dev, accel_dist dist, uint64_t seed,
                       uint64_t offset, size_t count, float mean, float sd) {
  accel_buffer b = buf_new(ctx, dist == ACCEL_DIST_BITS ? ACCEL_U32 : ACCEL_F32, count);
  CHECK_OK(fill(ctx, dev, b, dist, seed, offset, mean, sd));
  void *out = xmalloc(count * 4);
  read_sync(ctx, b, 0, out, count);
  CHECK_OK(accel_buffer_destroy(ctx, b));
  return out;
}

/* A random stream position: small ones of every residue mod 4, large ones, and ones just
 * below the block index 2^32 (where the counter's second word carries). */
static uint64_t rnd_offset(void) {
  switch (rnd_range(0, 3)) {
  case 0:
    return rnd_range(0, 11);
  case 1:
    return rnd64() >> 2;
  case 2:
    return (4ull << 32) - rnd_range(1, 40);
  default:
    return rnd_range(0, 1u << 20);
  }
}

static uint64_t rnd_seed(void) {
  switch (rnd_range(0, 3)) {
  case 0:
    return rnd64() & 0xffffffffu; /* key high word 0 */
  case 1:
    return UINT64_MAX - rnd_range(0, 3);
  default:
    return rnd64();
  }
}

static size_t rnd_count(void) {
  static const size_t small[] = {1, 2, 3, 4, 5, 7, 9};
  size_t i = rnd_range(0, 9);
  return i < 7 ? small[i] : rnd_range(1, 5000);
}

static void check_bits(const uint32_t *got, uint64_t seed, uint64_t offset, size_t count) {
  for (size_t i = 0; i < count; i++) {
    uint32_t want = ref_word(seed, offset + i);
    if (got[i] != want)
      TEST_FAIL("BITS seed 0x%" PRIx64 " offset %" PRIu64 " count %zu: word %zu = 0x%08" PRIx32
                ", reference 0x%08" PRIx32,
                seed, offset, count, i, got[i], want);
  }
}

/* ---- tests --------------------------------------------------------------------------- */

/* Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter, key, expected. */
static const uint32_t kat[3][10] = {
    {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
    {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e,
     0xa20bc7c6, 0x6d5451fd},
    {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
     0x5001e420, 0x24126ea1},
};

TEST(reference_known_answers) {
  for (int v = 0; v < 3; v++) {
    uint32_t out[4];
    ref_philox(kat[v], kat[v] + 4, out);
    for (int w = 0; w < 4; w++)
      CHECK_EQ(out[w], kat[v][6 + w]);
  }
}

/* Seed 0, offset 0 is the block at counter 0, key 0: the first known answer. */
TEST(bits_known_answer) {
  accel_ctx *ctx = ctx_open(NULL);
  uint32_t *w = fill_read(ctx, 0, ACCEL_DIST_BITS, 0, 0, 8, 0, 0);
  for (int i = 0; i < 4; i++)
    CHECK_EQ(w[i], kat[0][6 + i]);
  check_bits(w, 0, 0, 8);
  free(w);
  accel_close(ctx);
}

TEST(bits_random) {
  accel_ctx *ctx = ctx_open(NULL);
  long iters = test_scaled(24, 6);
  for (long it = 0; it < iters; it++) {
    uint64_t seed = rnd_seed(), offset = rnd_offset();
    size_t count = rnd_count();
    uint32_t *w = fill_read(ctx, it % 2 ? ACCEL_DEVICE_ANY : 0, ACCEL_DIST_BITS, seed, offset,
                            count, 0, 0);
    check_bits(w, seed, offset, count);
    free(w);
  }
  /* One long fill: many batches of the generator. */
  size_t count = (size_t)test_scaled(1 << 18, 1 << 14);
  uint64_t seed = rnd64(), offset = rnd_range(0, 1000);
  uint32_t *w = fill_read(ctx, 0, ACCEL_DIST_BITS, seed, offset, count, 0, 0);
  check_bits(w, seed, offset, count);
  free(w);
  accel_close(ctx);
}

TEST(uniform_bit_exact) {
  accel_ctx *ctx = ctx_open(NULL);
  long iters = test_scaled(24, 6);
  for (long it = 0; it < iters; it++) {
    uint64_t seed = rnd_seed(), offset = rnd_offset();
    size_t count = rnd_count();
    float *u = fill_read(ctx, 0, ACCEL_DIST_UNIFORM, seed, offset, count, 0, 0);
    for (size_t i = 0; i < count; i++) {
      float want = ref_uniform(ref_word(seed, offset + i));
      if (memcmp(&u[i], &want, sizeof want) != 0)
        TEST_FAIL("UNIFORM seed 0x%" PRIx64 " offset %" PRIu64 ": element %zu = %a, want %a", seed,
                  offset, i, (double)u[i], (double)want);
      if (!(u[i] > 0.0f && u[i] <= 1.0f))
        TEST_FAIL("UNIFORM element %zu = %a: not in (0, 1]", i, (double)u[i]);
    }
    free(u);
  }
  accel_close(ctx);
}

/* A fill at offset o is the slice [o, o + n) of a fill from 0, for every distribution (normals
 * at even offsets). */
TEST(offset_fill_is_a_slice) {
  accel_ctx *ctx = ctx_open(NULL);
  for (int it = 0; it < 12; it++) {
    accel_dist dist = (accel_dist)(it % 3);
    uint64_t seed = rnd_seed(), o = rnd_range(0, 700);
    if (dist == ACCEL_DIST_NORMAL)
      o &= ~(uint64_t)1;
    size_t n = rnd_count();
    float mean = rnd_float(-3, 3), sd = rnd_float(0.5f, 2.0f);
    uint32_t *whole = fill_read(ctx, 0, dist, seed, 0, (size_t)o + n, mean, sd);
    /* Normals are bit-exact within one backend only (CUDA's and the CPU's log, sin and cos
     * may differ in the last bit), so with a GPU present ANY would compare two backends. */
    accel_device dev = it % 2 && dist != ACCEL_DIST_NORMAL ? ACCEL_DEVICE_ANY : 0;
    uint32_t *part = fill_read(ctx, dev, dist, seed, o, n, mean, sd);
    for (size_t i = 0; i < n; i++)
      if (part[i] != whole[o + i])
        TEST_FAIL("dist %d seed 0x%" PRIx64 ": fill at offset %" PRIu64
                  " element %zu = 0x%08" PRIx32 ", fill from 0 element %" PRIu64 " = 0x%08" PRIx32,
                  (int)dist, seed, o, i, part[i], o + i, whole[o + i]);
    free(whole);
    free(part);
  }
  accel_close(ctx);
}

/* Box-Muller pairing: even elements from sin, odd from cos, scaled by stddev, shifted by mean. */
TEST(normal_values) {
  accel_ctx *ctx = ctx_open(NULL);
  for (int it = 0; it < 8; it++) {
    uint64_t seed = rnd_seed(), offset = rnd_offset() & ~(uint64_t)1;
    size_t count = rnd_count();
    float mean = it == 0 ? 0.0f : rnd_float(-5, 5), sd = it == 0 ? 1.0f : rnd_float(0.1f, 4);
    float *z = fill_read(ctx, 0, ACCEL_DIST_NORMAL, seed, offset, count, mean, sd);
    for (size_t i = 0; i < count; i++) {
      double zr = ref_normal(seed, offset + i), want = mean + sd * zr;
      double tol = 1e-4 * sd * (1 + fabs(zr)) + 1e-6 * fabs(mean);
      if (!(fabs(z[i] - want) <= tol))
        TEST_FAIL("NORMAL seed 0x%" PRIx64 " offset %" PRIu64 " mean %g sd %g: element %zu = "
                  "%.9g, want %.9g",
                  seed, offset, (double)mean, (double)sd, i, (double)z[i], want);
    }
    free(z);
  }
  accel_close(ctx);
}

static void check_moments(accel_ctx *ctx, float mean, float sd) {
  size_t n = (size_t)test_scaled(1000000, 100000);
  uint64_t seed = rnd64();
  float *z = fill_read(ctx, 0, ACCEL_DIST_NORMAL, seed, rnd_range(0, 1000) * 2, n, mean, sd);
  double s = 0, s2 = 0;
  size_t within = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(z[i]))
      TEST_FAIL("NORMAL element %zu = %g", i, (double)z[i]);
    s += z[i];
    within += fabs((double)z[i] - mean) < sd;
  }
  double m = s / (double)n;
  for (size_t i = 0; i < n; i++)
    s2 += ((double)z[i] - m) * ((double)z[i] - m);
  double sdev = sqrt(s2 / (double)(n - 1)), frac = (double)within / (double)n;
  /* Standard errors: sd / sqrt(n) for the mean, sd / sqrt(2n) for the deviation, and
   * sqrt(p (1 - p) / n) for the share within one deviation (p = 0.682689 for a normal). */
  double p = 0.682689492137;
  printf("# normal mean %g sd %g (n %zu, seed 0x%" PRIx64 "): sample mean %.6f sd %.6f, "
         "share within 1 sd %.6f\n",
         (double)mean, (double)sd, n, seed, m, sdev, frac);
  if (!(fabs(m - mean) <= 6 * sd / sqrt((double)n)))
    TEST_FAIL("NORMAL sample mean %.6f, want %g", m, (double)mean);
  if (!(fabs(sdev - sd) <= 6 * sd / sqrt(2.0 * (double)n)))
    TEST_FAIL("NORMAL sample stddev %.6f, want %g", sdev, (double)sd);
  if (!(fabs(frac - p) <= 6 * sqrt(p * (1 - p) / (double)n)))
    TEST_FAIL("NORMAL share within one stddev %.6f, want %.6f", frac, p);
  free(z);
}

TEST(normal_moments) {
  accel_ctx *ctx = ctx_open(NULL);
  check_moments(ctx, 0.0f, 1.0f);
  check_moments(ctx, 3.5f, 0.5f);
  check_moments(ctx, -2.0f, 4.0f);
  accel_close(ctx);
}

/* An odd offset would split a Box-Muller pair: the call itself refuses it, makes no future and
 * leaves the buffer alone; stddev 0 gives the mean exactly. */
TEST(normal_offset_rules) {
  accel_ctx *ctx = ctx_open(NULL);
  accel_buffer b = buf_new(ctx, ACCEL_F32, 16);
  float ones[16], out[16];
  for (int i = 0; i < 16; i++)
    ones[i] = 1.0f;
  write_sync(ctx, b, 0, ones, 16);
  static const uint64_t odd[] = {1, 3, 5, 12345, (4ull << 32) - 1};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    accel_rng spec = {
        .dist = ACCEL_DIST_NORMAL, .seed = rnd64(), .offset = odd[i], .mean = 0, .stddev = 1};
    accel_future *f = FUT_SENTINEL;
    CHECK_ERR(accel_rng_fill(ctx, 0, b, &spec, &f), ACCEL_EINVAL);
    CHECK_PTR_EQ(f, FUT_SENTINEL);
    CHECK_ERR(accel_rng_fill(ctx, 0, b, &spec, NULL), ACCEL_EINVAL);
  }
  CHECK_OK(accel_finish(ctx, -1)); /* nothing went in flight, no error was recorded */
  read_sync(ctx, b, 0, out, 16);
  for (int i = 0; i < 16; i++)
    CHECK(out[i] == 1.0f);
  CHECK_OK(fill(ctx, 0, b, ACCEL_DIST_NORMAL, rnd64(), 2, 1.25f, 0.0f));
  read_sync(ctx, b, 0, out, 16);
  for (int i = 0; i < 16; i++)
    CHECK(out[i] == 1.25f);
  accel_close(ctx);
}

/* Every device gives the same stream. */
TEST(same_stream_on_every_device) {
  accel_ctx *ctx = ctx_open("embedded:?cpu_devices=2");
  CHECK_EQ(cpu_device_count(ctx), 2);
  uint64_t seed = rnd_seed(), offset = rnd_offset();
  size_t count = rnd_range(1, 3000);
  for (accel_device d = 0; d < accel_device_count(ctx); d++) { /* a GPU too, if present */
    uint32_t *w = fill_read(ctx, d, ACCEL_DIST_BITS, seed, offset, count, 0, 0);
    check_bits(w, seed, offset, count);
    free(w);
  }
  accel_close(ctx);
}

static const test_case tests[] = {
    TEST_CASE(reference_known_answers),
    TEST_CASE(bits_known_answer),
    TEST_CASE(bits_random),
    TEST_CASE(uniform_bit_exact),
    TEST_CASE(offset_fill_is_a_slice),
    TEST_CASE(normal_values),
    TEST_CASE(normal_moments),
    TEST_CASE(normal_offset_rules),
    TEST_CASE(same_stream_on_every_device),
};

TEST_MAIN(tests)
