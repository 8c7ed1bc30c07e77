/* Tests of the cpu backend's kernels (backends/cpu/cpu_kernels.h) against independent naive
 * references in double precision, on fresh random inputs each run. The seed is printed; rerun
 * a failure with ACCEL_TEST_SEED=<seed>. Tolerances are stated at each check.
 *
 * The RNG is also checked against fixed answers: Random123's known-answer vectors for the
 * Philox4x32-10 block function, and cuRAND's own output (curand_golden.h, made on a GPU by
 * curand_golden.cu). */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/error.h"
#include "backends/cpu/cpu_kernels.h"
#include "curand_golden.h"
#include "ops/dtype_conv.h"

/* ---- harness -------------------------------------------------------------------------- */

static int failures;
static int checks;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    checks++;                                                                                      \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__, __LINE__, #cond);                            \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

/* Stop after this many failures in one loop: one bug should not print a million lines. */
#define LOOP_FAIL_LIMIT 20
#define FAILED_TOO_OFTEN() (failures > LOOP_FAIL_LIMIT)

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes > 0 ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    exit(2);
  }
  return p;
}

/* The test's own generator (splitmix64), unrelated to Philox. */
static uint64_t rng_state;

static uint64_t rnd64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform integer in [lo, hi]. */
static int64_t rnd_int(int64_t lo, int64_t hi) {
  return lo + (int64_t)(rnd64() % (uint64_t)(hi - lo + 1));
}

/* Uniform in [lo, hi); never exactly 0 in practice, and the tests never rely on zeros. */
static float rnd_float(float lo, float hi) {
  return lo + (hi - lo) * (float)((double)(rnd64() >> 11) * 0x1p-53);
}

static void rnd_fill(float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++)
    x[i] = rnd_float(lo, hi);
}

static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Distance in units in the last place between two finite floats of the same sign. */
static double ulps(float a, float b) {
  if (a == b)
    return 0;
  if ((a < 0) != (b < 0))
    return INFINITY;
  return fabs((double)float_bits(a) - (double)float_bits(b));
}

/* ---- Philox: an independent reference --------------------------------------------------- */

/* Philox4x32-10 written out from the paper's definition, with the key schedule precomputed:
 * round r uses key + r * (W0, W1); S-box: hi/lo of M0 * L0 and M1 * L1 crossed over. */
static void ref_philox(const uint32_t in[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t x[4] = {in[0], in[1], in[2], in[3]};
  for (uint32_t r = 0; r < 10; r++) {
    uint32_t k0 = key[0] + r * 0x9E3779B9u, k1 = key[1] + r * 0xBB67AE85u;
    uint64_t a = (uint64_t)x[0] * 0xD2511F53u, b = (uint64_t)x[2] * 0xCD9E8D57u;
    uint32_t y[4] = {(uint32_t)(b >> 32) ^ x[1] ^ k0, (uint32_t)b, (uint32_t)(a >> 32) ^ x[3] ^ k1,
                     (uint32_t)a};
    memcpy(x, y, sizeof x);
  }
  memcpy(out, x, sizeof x);
}

/* Word offset + i of the stream for `seed`, as backends/cpu/philox.h defines it. The index is split
 * into (block, word) first so that offsets near 2^64 do not wrap: the stream goes on past word
 * 2^64 - 1 into block 2^62, as cuRAND's 128-bit counter does. */
static uint32_t ref_word(uint64_t seed, uint64_t offset, uint64_t i) {
  uint64_t q = offset / 4 + (offset % 4 + i) / 4;
  uint32_t ctr[4] = {(uint32_t)q, (uint32_t)(q >> 32), 0, 0};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t out[4];
  ref_philox(ctr, key, out);
  return out[(offset % 4 + i) % 4];
}

/* cuRAND's uniform from the definition, without float arithmetic: round x to 24 significant
 * bits (nearest, ties to even) with integers, scale by 2^-32 and add 2^-33 in double (both
 * exact: at most 33 significant bits), then one rounding to float. */
static float ref_uniform(uint32_t x) {
  int shift = 0;
  while ((x >> shift) >= (1u << 24))
    shift++;
  uint64_t m = x >> shift;
  if (shift > 0) {
    uint32_t dropped = x & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (dropped > halfway || (dropped == halfway && (m & 1)))
      m++;
  }
  return (float)(ldexp((double)m, shift - 32) + 0x1p-33);
}

/* ---- Philox tests ------------------------------------------------------------------------ */

/* Random123 tests/kat_vectors, "philox4x32 10": counter, key, expected output. */
static const uint32_t kat[3][10] = {
    {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
    {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e,
     0xa20bc7c6, 0x6d5451fd},
    {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
     0x5001e420, 0x24126ea1},
};

static void test_philox_kat(void) {
  for (int t = 0; t < 3; t++) {
    uint32_t out[4], ref[4];
    be_cpu_philox4x32_10(kat[t], kat[t] + 4, out);
    ref_philox(kat[t], kat[t] + 4, ref);
    for (int i = 0; i < 4; i++) {
      CHECK(out[i] == kat[t][6 + i], "kat %d word %d: %08" PRIx32 " != %08" PRIx32, t, i, out[i],
            kat[t][6 + i]);
      CHECK(ref[i] == kat[t][6 + i], "reference kat %d word %d", t, i);
    }
  }
}

/* Every word of a fill against the reference, at random seeds, offsets of every residue mod 4,
 * block indices above 2^32, and word indices that cross 2^64. */
static void test_philox_stream_definition(void) {
  uint64_t offsets[] = {
      0,         1, 2, 3, (uint64_t)rnd_int(0, 1 << 20), (1ull << 34) - 3, rnd64(), UINT64_MAX - 5,
      UINT64_MAX};
  uint32_t buf[300];
  for (size_t t = 0; t < sizeof offsets / sizeof offsets[0]; t++) {
    uint64_t seed = rnd64();
    size_t n = (size_t)rnd_int(1, 300);
    CHECK(be_cpu_philox_fill_u32(buf, n, seed, offsets[t]) == 0, "fill");
    for (size_t i = 0; i < n && !FAILED_TOO_OFTEN(); i++)
      CHECK(buf[i] == ref_word(seed, offsets[t], i), "seed %" PRIx64 " word %" PRIu64 "+%zu", seed,
            offsets[t], i);
  }
}

static void check_golden_u32_uniform(const curand_golden *g, const char *where) {
  uint32_t w[CURAND_GOLDEN_WORDS];
  float u[CURAND_GOLDEN_WORDS];
  CHECK(be_cpu_philox_fill_u32(w, CURAND_GOLDEN_WORDS, g->seed, g->offset) == 0, "fill");
  CHECK(be_cpu_philox_fill_uniform(u, CURAND_GOLDEN_WORDS, g->seed, g->offset) == 0, "fill");
  for (int i = 0; i < CURAND_GOLDEN_WORDS; i++) {
    CHECK(w[i] == g->u32[i],
          "%s seed %" PRIx64 " offset %" PRIu64 " word %d: %08" PRIx32 " != cuRAND %08" PRIx32,
          where, g->seed, g->offset, i, w[i], g->u32[i]);
    CHECK(float_bits(u[i]) == float_bits(g->uniform[i]), "%s uniform %d: %a != cuRAND %a", where, i,
          (double)u[i], (double)g->uniform[i]);
  }
}

/* cuRAND's normals: the host branch uses the same libm functions as we do (allow 4 ulp for a
 * different libm build); the GPU uses __sincosf, accurate to about 2^-21 absolute over
 * [-pi, pi] and less beyond, so compare absolutely, scaled by the magnitude. */
static void check_golden_normal(const curand_golden *g, const char *where, int on_gpu) {
  float z[CURAND_GOLDEN_WORDS];
  CHECK(be_cpu_philox_fill_normal(z, CURAND_GOLDEN_WORDS, g->seed, g->offset & ~1ull, 0.0f, 1.0f) ==
            0,
        "fill");
  for (int i = 0; i < CURAND_GOLDEN_WORDS; i++) {
    double d = fabs((double)z[i] - g->normal[i]);
    int ok = on_gpu ? d <= 2e-5 * (1.0 + fabs(g->normal[i])) : ulps(z[i], g->normal[i]) <= 4;
    CHECK(ok, "%s normal %d (seed %" PRIx64 "): %a vs cuRAND %a", where, i, g->seed, (double)z[i],
          (double)g->normal[i]);
  }
}

static void test_philox_curand_golden(void) {
  size_t n = sizeof curand_golden_device / sizeof curand_golden_device[0];
  for (size_t t = 0; t < n; t++) {
    check_golden_u32_uniform(&curand_golden_device[t], "GPU");
    check_golden_u32_uniform(&curand_golden_host[t], "host");
    check_golden_normal(&curand_golden_device[t], "GPU", 1);
    check_golden_normal(&curand_golden_host[t], "host", 0);
  }
}

#define SLICE_WORDS 6000
#define GUARD 0xA5A5A5A5u

/* fill(o, n) == fill(0, N)[o, o + n) for u32, uniform and normal, with nothing written past n
 * (a guard word). */
static void test_philox_slices(void) {
  uint64_t seed = rnd64();
  uint32_t *whole = xmalloc(SLICE_WORDS * sizeof *whole);
  float *uwhole = xmalloc(SLICE_WORDS * sizeof *uwhole);
  float *zwhole = xmalloc(SLICE_WORDS * sizeof *zwhole);
  uint32_t *part = xmalloc((SLICE_WORDS + 1) * sizeof *part);
  float mean = rnd_float(-3, 3), sd = rnd_float(0.5f, 2);
  CHECK(be_cpu_philox_fill_u32(whole, SLICE_WORDS, seed, 0) == 0, "fill");
  CHECK(be_cpu_philox_fill_uniform(uwhole, SLICE_WORDS, seed, 0) == 0, "fill");
  CHECK(be_cpu_philox_fill_normal(zwhole, SLICE_WORDS, seed, 0, mean, sd) == 0, "fill");
  for (int t = 0; t < 400 && !FAILED_TOO_OFTEN(); t++) {
    size_t n = (size_t)(t % 4 == 0 ? rnd_int(0, 9) : rnd_int(0, SLICE_WORDS / 2));
    size_t o = (size_t)rnd_int(0, SLICE_WORDS - (int64_t)n);
    part[n] = GUARD;
    CHECK(be_cpu_philox_fill_u32(part, n, seed, o) == 0, "fill");
    CHECK(memcmp(part, whole + o, n * sizeof *part) == 0, "u32 slice %zu+%zu", o, n);
    CHECK(part[n] == GUARD, "u32 fill wrote past %zu", n);
    float *f = (float *)(void *)part;
    CHECK(be_cpu_philox_fill_uniform(f, n, seed, o) == 0, "fill");
    CHECK(memcmp(f, uwhole + o, n * sizeof *f) == 0, "uniform slice %zu+%zu", o, n);
    CHECK(part[n] == GUARD, "uniform fill wrote past %zu", n);
    o &= ~(size_t)1;
    CHECK(be_cpu_philox_fill_normal(f, n, seed, o, mean, sd) == 0, "fill");
    CHECK(memcmp(f, zwhole + o, n * sizeof *f) == 0, "normal slice %zu+%zu", o, n);
    CHECK(part[n] == GUARD, "normal fill wrote past %zu", n);
  }
  free(whole);
  free(uwhole);
  free(zwhole);
  free(part);
}

/* Uniform: bit for bit against the integer reference on random words, every word of a fill,
 * and the edges of the float rounding (ties, the top words that round to 1.0f). */
static void test_philox_uniform_exact(void) {
  static const uint32_t edges[] = {0,          1,          2,          0x00FFFFFF, 0x01000000,
                                   0x01000001, 0x01000003, 0x7FFFFFBF, 0x7FFFFFC0, 0x80000000,
                                   0xFFFFFF7F, 0xFFFFFF80, 0xFFFFFF81, 0xFFFFFFFF};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
    CHECK(float_bits(be_cpu_philox_uniform(edges[i])) == float_bits(ref_uniform(edges[i])),
          "uniform(%08" PRIx32 ") = %a, want %a", edges[i], (double)be_cpu_philox_uniform(edges[i]),
          (double)ref_uniform(edges[i]));
  CHECK(be_cpu_philox_uniform(0) == 0x1p-33f, "uniform(0) = 2^-33");
  CHECK(be_cpu_philox_uniform(UINT32_MAX) == 1.0f, "uniform(max) = 1");
  /* cuRAND spells 2^-32 as the decimal 2.3283064e-10f; it must be exactly 2^-32. */
  CHECK(2.3283064e-10f == 0x1p-32f, "cuRAND's constant");
  for (int i = 0; i < 100000 && !FAILED_TOO_OFTEN(); i++) {
    uint32_t x = (uint32_t)rnd64();
    CHECK(float_bits(be_cpu_philox_uniform(x)) == float_bits(ref_uniform(x)), "x=%08" PRIx32, x);
  }
  enum { N = 4099 };
  static uint32_t w[N];
  static float u[N];
  uint64_t seed = rnd64(), off = rnd64() >> 2;
  be_cpu_philox_fill_u32(w, N, seed, off);
  be_cpu_philox_fill_uniform(u, N, seed, off);
  for (int i = 0; i < N && !FAILED_TOO_OFTEN(); i++) {
    CHECK(float_bits(u[i]) == float_bits(ref_uniform(w[i])), "fill word %d", i);
    CHECK(u[i] > 0.0f && u[i] <= 1.0f, "uniform %a out of (0, 1]", (double)u[i]);
  }
}

/* Normal: each element against cuRAND's Box-Muller evaluated in double from the same two
 * words (even element from sin, odd from cos). The float pipeline (logf, sqrtf, sinf/cosf, one
 * multiply) is within a few ulp of r: allow 2e-6 * max(1, r) absolute. */
static void test_philox_normal_formula(void) {
  enum { N = 20001 };
  static uint32_t w[N + 1];
  static float z[N];
  uint64_t seed = rnd64(), off = (rnd64() >> 2) & ~1ull;
  float mean = rnd_float(-10, 10), sd = rnd_float(0.1f, 5);
  CHECK(be_cpu_philox_fill_u32(w, N + 1, seed, off) == 0, "fill");
  CHECK(be_cpu_philox_fill_normal(z, N, seed, off, mean, sd) == 0, "fill");
  const float k = 0x1p-32f * 6.2831855f; /* cuRAND's CURAND_2POW32_INV_2PI, a float */
  for (int i = 0; i < N && !FAILED_TOO_OFTEN(); i++) {
    int even = i % 2 == 0;
    uint32_t x = w[i - i % 2], y = w[i - i % 2 + 1];
    double u = ref_uniform(x);
    float vf = (float)y * k;
    vf = vf + k / 2; /* two float roundings, as cuRAND's host branch */
    double r = sqrt(-2.0 * log(u));
    double want = (even ? sin((double)vf) : cos((double)vf)) * r * sd + mean;
    double tol = 2e-6 * (r > 1 ? r : 1) * sd + 2 * FLT_EPSILON * fabs(want);
    CHECK(fabs(z[i] - want) <= tol, "normal %d: %.9g, want %.9g (tol %.3g)", i, (double)z[i], want,
          tol);
  }
}

/* Box-Muller at the edges of its inputs, against double with a relative tolerance of 8 eps:
 * y = 0 puts v at 2^-33 * 2pi (sin v is tiny but not 0), x = max gives u = 1 and r = 0. */
static void test_philox_box_muller_edges(void) {
  static const uint32_t xs[] = {0, 1, 0x80000000u, 0xFFFFFF00u, UINT32_MAX};
  static const uint32_t ys[] = {0, 1, 2, 0x40000000u, 0x7FFFFFFFu, 0xFFFFFF00u, UINT32_MAX};
  const float k = 0x1p-32f * 6.2831855f;
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
    for (size_t j = 0; j < sizeof ys / sizeof ys[0]; j++) {
      float z[2], vf = (float)ys[j] * k;
      vf = vf + k / 2;
      be_cpu_philox_box_muller(xs[i], ys[j], z);
      double r = sqrt(-2.0 * log((double)ref_uniform(xs[i])));
      double want[2] = {r * sin((double)vf), r * cos((double)vf)};
      for (int e = 0; e < 2; e++)
        CHECK(fabs(z[e] - want[e]) <= 8 * FLT_EPSILON * fabs(want[e]) + FLT_TRUE_MIN,
              "box_muller(%08" PRIx32 ", %08" PRIx32 ")[%d] = %a, want %a", xs[i], ys[j], e,
              (double)z[e], want[e]);
    }
  }
}

/* Moments over 2^20 samples, within 5 standard errors: mean (sd/sqrt(N)), sd (sd/sqrt(2N)),
 * skewness (sqrt(6/N)) and excess kurtosis (sqrt(24/N)). Uniform: mean 1/2, variance 1/12. */
static void test_philox_moments(void) {
  enum { N = 1 << 20 };
  float *z = xmalloc(N * sizeof *z);
  float mean = rnd_float(-5, 5), sd = rnd_float(0.2f, 4);
  uint64_t seed = rnd64(), off = (rnd64() >> 3) * 2;
  CHECK(be_cpu_philox_fill_normal(z, N, seed, off, mean, sd) == 0, "fill");
  double s1 = 0, s2 = 0, s3 = 0, s4 = 0;
  for (int i = 0; i < N; i++)
    s1 += z[i];
  double m = s1 / N;
  for (int i = 0; i < N; i++) {
    double d = z[i] - m;
    s2 += d * d;
    s3 += d * d * d;
    s4 += d * d * d * d;
  }
  double var = s2 / N, skew = s3 / N / pow(var, 1.5), kurt = s4 / N / (var * var) - 3;
  CHECK(fabs(m - mean) <= 5 * sd / sqrt(N), "normal mean %.6g, want %.6g", m, (double)mean);
  CHECK(fabs(sqrt(var) - sd) <= 5 * sd / sqrt(2.0 * N), "normal sd %.6g, want %.6g", sqrt(var),
        (double)sd);
  CHECK(fabs(skew) <= 5 * sqrt(6.0 / N), "normal skewness %.4g", skew);
  CHECK(fabs(kurt) <= 5 * sqrt(24.0 / N), "normal excess kurtosis %.4g", kurt);
  CHECK(be_cpu_philox_fill_uniform(z, N, seed, off + 1) == 0, "fill");
  s1 = s2 = 0;
  for (int i = 0; i < N; i++) {
    s1 += z[i];
    s2 += ((double)z[i] - 0.5) * ((double)z[i] - 0.5);
  }
  CHECK(fabs(s1 / N - 0.5) <= 5 * sqrt(1.0 / 12 / N), "uniform mean %.6g", s1 / N);
  CHECK(fabs(s2 / N - 1.0 / 12) <= 5 * sqrt(1.0 / 180 / N), "uniform variance %.6g", s2 / N);
  free(z);
}

static void test_philox_errors(void) {
  float z[4] = {1, 2, 3, 4};
  CHECK(be_cpu_philox_fill_normal(z, 4, 1, 3, 0, 1) == ACCEL_EINVAL, "odd offset");
  CHECK(be_cpu_philox_fill_normal(z, 4, 1, UINT64_MAX, 0, 1) == ACCEL_EINVAL, "odd offset");
  CHECK(z[0] == 1 && z[3] == 4, "a refused fill wrote");
  CHECK(be_cpu_philox_fill_normal(NULL, 4, 1, 2, 0, 1) == ACCEL_EINVAL, "NULL");
  CHECK(be_cpu_philox_fill_uniform(NULL, 1, 1, 2) == ACCEL_EINVAL, "NULL");
  CHECK(be_cpu_philox_fill_u32(NULL, 1, 1, 2) == ACCEL_EINVAL, "NULL");
  CHECK(be_cpu_philox_fill_u32(NULL, 0, 1, 2) == 0, "empty fill");
  CHECK(be_cpu_philox_fill_normal(NULL, 0, 1, 2, 0, 1) == 0, "empty fill");
}

/* ---- BLAS ---------------------------------------------------------------------------------- */

#define C_SENTINEL 12345.5f

typedef struct gemm_case {
  be_sgemm_args g;
  float *a, *b, *c, *c0; /* c0: C before the call */
  size_t a_len, b_len, c_len;
} gemm_case;

static int64_t rnd_dim(void) {
  int64_t p = rnd_int(0, 99);
  if (p < 5)
    return 0;
  if (p < 15)
    return 1;
  return p < 85 ? rnd_int(2, 40) : rnd_int(41, 160);
}

static float rnd_scalar(float p_zero) {
  float p = rnd_float(0, 1);
  if (p < p_zero)
    return 0.0f;
  if (p < p_zero + 0.15f)
    return 1.0f;
  if (p < p_zero + 0.25f)
    return -1.0f;
  return rnd_float(-2, 2);
}

/* A stored matrix rows x cols with leading dimension ld in a buffer of exactly the length the
 * checks demand, (cols - 1) * ld + rows: values in [-1, 1), the padding rows hold `pad` (NaN
 * for inputs, which must never be read; a sentinel for C, which must never be written). */
static float *make_matrix(int64_t rows, int64_t cols, int64_t ld, size_t *len, float pad) {
  *len = rows > 0 && cols > 0 ? (size_t)((cols - 1) * ld + rows) : 0;
  float *m = xmalloc(*len * sizeof *m);
  for (size_t i = 0; i < *len; i++)
    m[i] = (int64_t)(i % (size_t)ld) < rows ? rnd_float(-1, 1) : pad;
  return m;
}

static int64_t rnd_ld(int64_t rows) {
  int64_t ld = rows > 1 ? rows : 1;
  return rnd_int(0, 2) == 0 ? ld + rnd_int(1, 5) : ld;
}

/* trans: bit 0 transposes A, bit 1 B. */
static void gemm_make(gemm_case *t, int64_t m, int64_t n, int64_t k, int trans) {
  be_sgemm_args *g = &t->g;
  g->m = m, g->n = n, g->k = k;
  g->trans_a = trans & 1 ? BE_BLAS_TRANS : BE_BLAS_NO_TRANS;
  g->trans_b = trans & 2 ? BE_BLAS_TRANS : BE_BLAS_NO_TRANS;
  g->alpha = rnd_scalar(0.05f);
  g->beta = rnd_scalar(0.25f);
  int64_t r, c;
  be_blas_stored_shape(g->trans_a, m, k, &r, &c);
  g->lda = rnd_ld(r);
  t->a = make_matrix(r, c, g->lda, &t->a_len, NAN);
  be_blas_stored_shape(g->trans_b, k, n, &r, &c);
  g->ldb = rnd_ld(r);
  t->b = make_matrix(r, c, g->ldb, &t->b_len, NAN);
  g->ldc = rnd_ld(m);
  t->c = make_matrix(m, n, g->ldc, &t->c_len, C_SENTINEL);
  if (g->beta == 0.0f) /* beta = 0: C is not read, NaN in it must vanish */
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++)
        t->c[i + j * g->ldc] = NAN;
  if (g->alpha == 0.0f) { /* then BLAS reads neither A nor B: all NaN proves it */
    for (size_t i = 0; i < t->a_len; i++)
      t->a[i] = NAN;
    for (size_t i = 0; i < t->b_len; i++)
      t->b[i] = NAN;
  }
  t->c0 = xmalloc((t->c_len ? t->c_len : 1) * sizeof *t->c0);
  memcpy(t->c0, t->c, t->c_len * sizeof *t->c);
}

static void gemm_free(gemm_case *t) {
  free(t->a);
  free(t->b);
  free(t->c);
  free(t->c0);
}

static double op_elem(const float *x, be_blas_trans tr, int64_t ld, int64_t i, int64_t j) {
  return tr == BE_BLAS_TRANS ? x[j + i * ld] : x[i + j * ld];
}

/* One element of the naive reference in double, and the bound on float error for it:
 * 2 (k + 2) eps (|alpha| sum |a b| + |beta c|), the classical gamma_k bound with slack. */
static void gemm_ref(const gemm_case *t, int64_t i, int64_t j, double *want, double *tol) {
  const be_sgemm_args *g = &t->g;
  double sum = 0, mag = 0;
  for (int64_t l = 0; l < g->k && g->alpha != 0.0f; l++) {
    double p = op_elem(t->a, g->trans_a, g->lda, i, l) * op_elem(t->b, g->trans_b, g->ldb, l, j);
    sum += p;
    mag += fabs(p);
  }
  double c = g->beta == 0.0f ? 0.0 : (double)g->beta * t->c0[i + j * g->ldc];
  *want = (g->alpha != 0.0f ? g->alpha * sum : 0.0) + c;
  *tol = 2.0 * (double)(g->k + 2) * FLT_EPSILON * (fabs(g->alpha) * mag + fabs(c)) + 1e-30;
}

static void gemm_verify(const gemm_case *t, const char *what) {
  const be_sgemm_args *g = &t->g;
  for (int64_t j = 0; j < g->n; j++) {
    for (int64_t i = 0; i < g->ldc && i + j * g->ldc < (int64_t)t->c_len; i++) {
      if (FAILED_TOO_OFTEN())
        return;
      float got = t->c[i + j * g->ldc];
      if (i >= g->m) {
        CHECK(float_bits(got) == float_bits(C_SENTINEL), "%s: padding of C written", what);
        continue;
      }
      double want, tol;
      gemm_ref(t, i, j, &want, &tol);
      CHECK(isfinite(got) && fabs(got - want) <= tol,
            "%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " t=%d%d alpha=%g beta=%g ld=%" PRId64
            ",%" PRId64 ",%" PRId64 ": C(%" PRId64 ",%" PRId64 ") = %.9g, want %.9g (tol %.3g)",
            what, g->m, g->n, g->k, g->trans_a, g->trans_b, (double)g->alpha, (double)g->beta,
            g->lda, g->ldb, g->ldc, i, j, (double)got, want, tol);
    }
  }
}

static void run_gemm(int64_t m, int64_t n, int64_t k, int trans, const char *what) {
  gemm_case t;
  gemm_make(&t, m, n, k, trans);
  int err = be_cpu_sgemm(&t.g, t.a, t.a_len, t.b, t.b_len, t.c, t.c_len);
  CHECK(err == 0, "%s: sgemm returned %d", what, err);
  gemm_verify(&t, what);
  gemm_free(&t);
}

static void test_sgemm_random(void) {
  for (int i = 0; i < 400 && !FAILED_TOO_OFTEN(); i++)
    run_gemm(rnd_dim(), rnd_dim(), rnd_dim(), i % 4, "random");
  for (int i = 0; i < 8; i++) { /* each of the four transpose pairs twice */
    run_gemm(1, 1, 1, i % 4, "1x1x1");
    run_gemm(rnd_int(1, 50), rnd_int(1, 50), 0, i % 4, "k=0");
    run_gemm(0, rnd_int(1, 50), rnd_int(1, 50), i % 4, "m=0");
    run_gemm(rnd_int(1, 50), 0, rnd_int(1, 50), i % 4, "n=0");
    run_gemm(rnd_int(1, 9), rnd_int(30, 70), rnd_int(1, 9), i % 4, "wide");
  }
  for (int i = 0; i < 4; i++)
    run_gemm(rnd_int(150, 260), rnd_int(150, 260), rnd_int(150, 260), i, "large");
}

/* m or n = 0: nothing is touched, even with NULL buffers; k = 0 and beta = 0 zeroes C. */
static void test_sgemm_edges(void) {
  be_sgemm_args g = {BE_BLAS_NO_TRANS,    BE_BLAS_NO_TRANS, 0, 5, 3, 1.0f, 0.0f, 1, 3, 1,
                     BE_SGEMM_MATH_DEVICE};
  float c[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
  CHECK(be_cpu_sgemm(&g, NULL, 0, NULL, 0, c, 6) == ACCEL_EINVAL, "B too short for 3x5");
  float b[15];
  rnd_fill(b, 15, -1, 1);
  CHECK(be_cpu_sgemm(&g, NULL, 0, b, 15, NULL, 0) == 0, "m = 0 is a no-op");
  g = (be_sgemm_args){BE_BLAS_TRANS,       BE_BLAS_NO_TRANS, 2, 3, 0, 1.0f, 0.0f, 1, 1, 2,
                      BE_SGEMM_MATH_DEVICE};
  CHECK(be_cpu_sgemm(&g, NULL, 0, NULL, 0, c, 6) == 0, "k = 0");
  for (int i = 0; i < 6; i++)
    CHECK(c[i] == 0.0f && !signbit(c[i]), "k = 0, beta = 0: C(%d) = %g", i, (double)c[i]);
  rnd_fill(c, 6, 1, 2);
  float c0 = c[4];
  g.beta = -3.0f;
  CHECK(be_cpu_sgemm(&g, NULL, 0, NULL, 0, c, 6) == 0, "k = 0");
  CHECK(c[4] == -3.0f * c0, "k = 0: C = beta C");
}

static void test_sgemm_errors(void) {
  float a[64], b[64], c[64];
  rnd_fill(a, 64, -1, 1);
  rnd_fill(b, 64, -1, 1);
  rnd_fill(c, 64, -1, 1);
  float c_before = c[0];
  /* 4x3 = (4x2)(2x3), all tight. */
  be_sgemm_args ok = {BE_BLAS_NO_TRANS,    BE_BLAS_NO_TRANS, 4, 3, 2, 1.5f, 0.5f, 4, 2, 4,
                      BE_SGEMM_MATH_DEVICE};
  be_sgemm_args g = ok;
  CHECK(be_cpu_sgemm(&g, a, 8, b, 6, c, 12) == 0, "tight lengths");
  c[0] = c_before;
  CHECK(be_cpu_sgemm(&g, a, 7, b, 6, c, 12) == ACCEL_EINVAL, "A one short");
  CHECK(be_cpu_sgemm(&g, a, 8, b, 5, c, 12) == ACCEL_EINVAL, "B one short");
  CHECK(be_cpu_sgemm(&g, a, 8, b, 6, c, 11) == ACCEL_EINVAL, "C one short");
  CHECK(c[0] == c_before, "a refused sgemm wrote C");
  g.lda = 3;
  CHECK(be_cpu_sgemm(&g, a, 64, b, 64, c, 64) == ACCEL_EINVAL, "lda < m");
  g = ok, g.trans_a = BE_BLAS_TRANS; /* A stored 2x4: lda >= 2 is enough, len 8 */
  g.lda = 2;
  CHECK(be_cpu_sgemm(&g, a, 8, b, 6, c, 12) == 0, "trans A, lda = k");
  g.lda = 1;
  CHECK(be_cpu_sgemm(&g, a, 64, b, 64, c, 64) == ACCEL_EINVAL, "trans A, lda < k");
  g = ok, g.trans_b = BE_BLAS_TRANS, g.ldb = 2; /* B stored 3x2: ldb >= 3 */
  CHECK(be_cpu_sgemm(&g, a, 64, b, 64, c, 64) == ACCEL_EINVAL, "trans B, ldb < n");
  g = ok, g.ldc = 3;
  CHECK(be_cpu_sgemm(&g, a, 64, b, 64, c, 64) == ACCEL_EINVAL, "ldc < m");
  g = ok, g.m = -1;
  CHECK(be_cpu_sgemm(&g, a, 64, b, 64, c, 64) == ACCEL_EINVAL, "m < 0");
  g = ok, g.trans_a = (be_blas_trans)7;
  CHECK(be_cpu_sgemm(&g, a, 64, b, 64, c, 64) == ACCEL_EINVAL, "bad transpose");
  g = ok, g.m = 0, g.ldc = 0;
  CHECK(be_cpu_sgemm(&g, a, 64, b, 64, c, 64) == ACCEL_EINVAL, "ldc = 0 even with m = 0");
  CHECK(be_cpu_sgemm(NULL, a, 64, b, 64, c, 64) == ACCEL_EINVAL, "NULL args");
  g = ok;
  CHECK(be_cpu_sgemm(&g, NULL, 8, b, 6, c, 12) == ACCEL_EINVAL, "NULL A");
  CHECK(be_cpu_sgemm(&g, a, 8, b, 6, NULL, 12) == ACCEL_EINVAL, "NULL C");
  g.alpha = 0.0f;
  CHECK(be_cpu_sgemm(&g, NULL, 8, NULL, 6, c, 12) == 0, "alpha = 0 reads neither A nor B");
  /* Too big for OpenBLAS's int: refused before anything runs (lengths claimed, not real). */
  g = ok, g.m = (int64_t)1 << 31, g.lda = g.m, g.ldc = g.m, g.k = 1, g.n = 1, g.ldb = 1;
  CHECK(be_cpu_sgemm(&g, a, (size_t)1 << 31, b, 1, c, (size_t)1 << 31) == ACCEL_ELIMIT, "m = 2^31");
  /* Leading dimension so large that (cols - 1) * ld overflows: refused, not wrapped. */
  g = ok, g.ldb = INT64_MAX; /* B 2x3: 2 * (2^63 - 1) + 2 = 2^64 */
  CHECK(be_cpu_sgemm(&g, a, 8, b, SIZE_MAX, c, 12) == ACCEL_EINVAL, "ld overflow");
}

static void test_blas_args(void) {
  CHECK(be_blas_check_matrix(3, 4, 3, 12) == 0, "tight");
  CHECK(be_blas_check_matrix(3, 4, 5, 18) == 0, "last element at 3 * 5 + 2");
  CHECK(be_blas_check_matrix(3, 4, 5, 17) == ACCEL_EINVAL, "one short");
  CHECK(be_blas_check_matrix(3, 4, 2, 100) == ACCEL_EINVAL, "ld < rows");
  CHECK(be_blas_check_matrix(0, 4, 1, 0) == 0, "empty, ld = 1");
  CHECK(be_blas_check_matrix(0, 4, 0, 0) == ACCEL_EINVAL, "ld = 0");
  CHECK(be_blas_check_matrix(3, 0, 3, 0) == 0, "no columns");
  CHECK(be_blas_check_matrix(-1, 4, 3, 100) == ACCEL_EINVAL, "rows < 0");
  CHECK(be_blas_check_matrix(3, -1, 3, 100) == ACCEL_EINVAL, "cols < 0");
  CHECK(be_blas_check_matrix(1, INT64_MAX, INT64_MAX, UINT64_MAX) == ACCEL_EINVAL, "overflow");
  CHECK(be_blas_check_matrix(1, 2, INT64_MAX, UINT64_MAX) == 0, "no overflow: 2^63");
  CHECK(be_blas_check_vector(5, 2, 9) == 0, "(5 - 1) * 2 + 1");
  CHECK(be_blas_check_vector(5, 2, 8) == ACCEL_EINVAL, "one short");
  CHECK(be_blas_check_vector(5, 0, 100) == ACCEL_EINVAL, "inc 0");
  CHECK(be_blas_check_vector(5, -1, 100) == ACCEL_EINVAL, "inc < 0");
  CHECK(be_blas_check_vector(0, 1, 0) == 0, "empty");
  CHECK(be_blas_check_vector(-1, 1, 10) == ACCEL_EINVAL, "n < 0");
}

/* Vectors with stride inc: live elements in [-1, 1), the gaps hold the sentinel. */
static float *make_vector(int64_t n, int64_t inc, size_t *len) {
  *len = n > 0 ? (size_t)((n - 1) * inc + 1) : 0;
  float *v = xmalloc((*len ? *len : 1) * sizeof *v);
  for (size_t i = 0; i < *len; i++)
    v[i] = i % (size_t)inc == 0 ? rnd_float(-1, 1) : C_SENTINEL;
  return v;
}

/* saxpy: each element within 2 eps (|alpha x| + |y|) of the double result; gaps untouched. */
static void check_saxpy_once(int64_t n) {
  int64_t incx = rnd_int(1, 3), incy = rnd_int(1, 3);
  size_t xl, yl;
  float *x = make_vector(n, incx, &xl), *y = make_vector(n, incy, &yl);
  float *y0 = xmalloc((yl ? yl : 1) * sizeof *y0);
  memcpy(y0, y, yl * sizeof *y);
  float alpha = rnd_scalar(0.05f);
  CHECK(be_cpu_saxpy(n, alpha, x, incx, xl, y, incy, yl) == 0, "saxpy");
  for (size_t i = 0; i < yl && !FAILED_TOO_OFTEN(); i++) {
    if (i % (size_t)incy != 0) {
      CHECK(float_bits(y[i]) == float_bits(C_SENTINEL), "saxpy wrote a gap");
      continue;
    }
    double ax = (double)alpha * x[i / (size_t)incy * (size_t)incx];
    double want = ax + y0[i], tol = 2 * FLT_EPSILON * (fabs(ax) + fabs(y0[i]));
    CHECK(fabs(y[i] - want) <= tol, "saxpy n=%" PRId64 " y[%zu] = %.9g, want %.9g", n, i,
          (double)y[i], want);
  }
  free(x);
  free(y);
  free(y0);
}

/* sdot: within 2 (n + 1) eps sum |x y| of the double result. */
static void check_sdot_once(int64_t n) {
  int64_t incx = rnd_int(1, 3), incy = rnd_int(1, 3);
  size_t xl, yl;
  float *x = make_vector(n, incx, &xl), *y = make_vector(n, incy, &yl);
  double want = 0, mag = 0;
  for (int64_t i = 0; i < n; i++) {
    double p = (double)x[i * incx] * y[i * incy];
    want += p;
    mag += fabs(p);
  }
  float got = NAN;
  CHECK(be_cpu_sdot(n, x, incx, xl, y, incy, yl, &got) == 0, "sdot");
  CHECK(fabs(got - want) <= 2.0 * (double)(n + 1) * FLT_EPSILON * mag,
        "sdot n=%" PRId64 ": %.9g, want %.9g", n, (double)got, want);
  free(x);
  free(y);
}

static void test_saxpy_sdot(void) {
  for (int64_t n = 0; n < 40 * 2; n++) { /* short vectors and random lengths up to 5000 */
    int64_t len = n < 40 ? n : rnd_int(40, 5000);
    check_saxpy_once(len);
    check_sdot_once(len);
  }
  float x[8], y[8], r = 1.0f;
  rnd_fill(x, 8, -1, 1);
  rnd_fill(y, 8, -1, 1);
  CHECK(be_cpu_sdot(0, NULL, 1, 0, NULL, 1, 0, &r) == 0 && r == 0.0f, "empty dot is 0");
  CHECK(be_cpu_sdot(4, x, 1, 4, y, 1, 4, NULL) == ACCEL_EINVAL, "NULL result");
  CHECK(be_cpu_sdot(5, x, 2, 8, y, 1, 8, &r) == ACCEL_EINVAL, "x too short");
  CHECK(be_cpu_saxpy(4, 2.0f, x, 1, 4, NULL, 1, 4) == ACCEL_EINVAL, "NULL y");
  CHECK(be_cpu_saxpy(4, 2.0f, x, 0, 8, y, 1, 8) == ACCEL_EINVAL, "incx = 0");
  CHECK(be_cpu_saxpy(4, 2.0f, x, 1, 8, y, -1, 8) == ACCEL_EINVAL, "incy < 0");
  CHECK(be_cpu_saxpy((int64_t)1 << 31, 2.0f, x, 1, (size_t)1 << 31, y, 1, (size_t)1 << 31) ==
            ACCEL_ELIMIT,
        "n = 2^31");
}

/* ---- element-wise ------------------------------------------------------------------------- */

static void test_fill_copy(void) {
  enum { N = 1037 };
  static uint32_t u[N + 1];
  static float f[N + 1];
  uint32_t pat = (uint32_t)rnd64() | 1u;
  float val = rnd_float(-100, 100);
  u[N] = GUARD;
  memcpy(&f[N], &(uint32_t){GUARD}, sizeof f[N]);
  CHECK(be_cpu_fill_u32(u, N, pat) == 0, "fill");
  CHECK(be_cpu_fill_f32(f, N, val) == 0, "fill");
  int bad_u = 0, bad_f = 0;
  for (int i = 0; i < N; i++) {
    bad_u += u[i] != pat;
    bad_f += float_bits(f[i]) != float_bits(val);
  }
  CHECK(bad_u == 0 && bad_f == 0, "fill: %d and %d wrong", bad_u, bad_f);
  CHECK(u[N] == GUARD && float_bits(f[N]) == GUARD, "fill wrote past the end");
  unsigned char src[300], dst[300];
  for (int i = 0; i < 300; i++)
    src[i] = (unsigned char)rnd64(), dst[i] = (unsigned char)~src[i];
  CHECK(be_cpu_copy(dst, src, 299) == 0, "copy");
  CHECK(memcmp(dst, src, 299) == 0 && dst[299] == (unsigned char)~src[299], "copy");
  unsigned char want[300];
  memcpy(want, src, 300);
  CHECK(be_cpu_copy(src + 7, src, 200) == 0, "overlapping copy");
  CHECK(memcmp(src + 7, want, 200) == 0, "overlapping copy moved wrong bytes");
  CHECK(be_cpu_fill_u32(NULL, 1, 0) == ACCEL_EINVAL && be_cpu_fill_f32(NULL, 0, 1) == 0, "NULL");
  CHECK(be_cpu_copy(NULL, src, 1) == ACCEL_EINVAL && be_cpu_copy(NULL, NULL, 0) == 0, "NULL");
}

typedef int unary_fn(float *y, const float *x, size_t n);
typedef double ref_fn(double x);

static double ref_sigmoid(double x) {
  return 1.0 / (1.0 + exp(-x));
}
static double ref_relu(double x) {
  return x < 0 ? 0.0 : x;
}

/* Inputs: random over [-30, 30], with extremes that would overflow a naive exp. Out of place
 * and in place; each result within `ulp_tol` ulp of the double reference rounded to float. */
static void check_unary(const char *name, unary_fn *fn, ref_fn *ref, double ulp_tol) {
  enum { N = 5003 };
  static float x[N], y[N];
  rnd_fill(x, N, -30, 30);
  static const float extremes[] = {100,    -100,   1000,    -1000,   88.8f,
                                   -88.8f, 1e-20f, -1e-20f, FLT_MAX, -FLT_MAX};
  memcpy(x, extremes, sizeof extremes);
  for (int pass = 0; pass < 2; pass++) {
    float *out = pass == 0 ? y : x;
    float xin[N];
    memcpy(xin, x, sizeof xin);
    CHECK(fn(out, x, N) == 0, "%s", name);
    for (int i = 0; i < N && !FAILED_TOO_OFTEN(); i++) {
      float want = (float)ref(xin[i]);
      CHECK(ulps(out[i], want) <= ulp_tol, "%s%s(%a) = %a, want %a", name, pass ? " in place" : "",
            (double)xin[i], (double)out[i], (double)want);
    }
  }
  float nan_in = NAN, nan_out = 0;
  CHECK(fn(&nan_out, &nan_in, 1) == 0 && isnan(nan_out), "%s(NaN) is NaN", name);
  CHECK(fn(NULL, x, 1) == ACCEL_EINVAL && fn(y, NULL, 1) == ACCEL_EINVAL, "%s NULL", name);
  CHECK(fn(NULL, NULL, 0) == 0, "%s empty", name);
}

static void test_unary(void) {
  check_unary("sigmoid", be_cpu_sigmoid_f32, ref_sigmoid, 4);
  check_unary("tanh", be_cpu_tanh_f32, tanh, 2);
  check_unary("relu", be_cpu_relu_f32, ref_relu, 0);
  float z[2] = {-0.0f, 0.0f}, r[2];
  be_cpu_relu_f32(r, z, 2);
  CHECK(signbit(r[0]) && !signbit(r[1]), "relu keeps the sign of zero");
}

/* One row against double: y_j = exp(x_j - max) / sum. Relative tolerance (|x_j - max| + 8)
 * eps: x_j - max is rounded to float before exp, which scales its error by |x_j - max|; plus
 * two subnormal steps, for results below FLT_MIN that have fewer significant bits. */
static void check_softmax_row(const float *x, const float *y, size_t cols, size_t row) {
  double max = x[0], sum = 0, ysum = 0;
  for (size_t j = 1; j < cols; j++)
    max = x[j] > max ? x[j] : max;
  for (size_t j = 0; j < cols; j++)
    sum += exp((double)x[j] - max);
  for (size_t j = 0; j < cols && !FAILED_TOO_OFTEN(); j++) {
    double want = exp((double)x[j] - max) / sum;
    double tol = (fabs((double)x[j] - max) + 8) * FLT_EPSILON * want + 2 * FLT_TRUE_MIN;
    CHECK(isfinite(y[j]) && fabs(y[j] - want) <= tol, "softmax row %zu col %zu: %.9g, want %.9g",
          row, j, (double)y[j], want);
    ysum += y[j];
  }
  CHECK(fabs(ysum - 1.0) <= 1e-5, "softmax row %zu sums to %.9g", row, ysum);
}

static void check_softmax_once(float scale, int in_place) {
  size_t rows = (size_t)rnd_int(1, 20), cols = (size_t)rnd_int(1, 400);
  float *x = xmalloc(rows * cols * sizeof *x), *y = xmalloc(rows * cols * sizeof *y);
  float *x0 = xmalloc(rows * cols * sizeof *x0);
  rnd_fill(x, rows * cols, -scale, scale);
  memcpy(x0, x, rows * cols * sizeof *x);
  float *out = in_place ? x : y;
  CHECK(be_cpu_softmax_f32(out, x, rows, cols) == 0, "softmax");
  for (size_t r = 0; r < rows && !FAILED_TOO_OFTEN(); r++)
    check_softmax_row(x0 + r * cols, out + r * cols, cols, r);
  free(x);
  free(y);
  free(x0);
}

static void test_softmax(void) {
  for (int i = 0; i < 40 && !FAILED_TOO_OFTEN(); i++)
    check_softmax_once(i % 2 ? 1000.0f : 5.0f, i % 3 == 0);
  /* A constant row of large values: exp(1000) overflows unless the max is subtracted. */
  float x[4] = {1000, 1000, 1000, 1000}, y[4];
  CHECK(be_cpu_softmax_f32(y, x, 1, 4) == 0, "softmax");
  CHECK(y[0] == 0.25f && y[3] == 0.25f, "softmax of equal large values: %g", (double)y[0]);
  float xn[3] = {1, NAN, 2}, yn[3];
  be_cpu_softmax_f32(yn, xn, 1, 3);
  CHECK(isnan(yn[0]) && isnan(yn[2]), "NaN in a row makes the row NaN");
  CHECK(be_cpu_softmax_f32(y, x, SIZE_MAX / 2, 4) == ACCEL_EINVAL, "rows * cols overflow");
  CHECK(be_cpu_softmax_f32(NULL, x, 1, 4) == ACCEL_EINVAL, "NULL");
  CHECK(be_cpu_softmax_f32(NULL, NULL, 0, 4) == 0 && be_cpu_softmax_f32(NULL, NULL, 3, 0) == 0,
        "empty");
}

/* ---- other dtypes ------------------------------------------------------------------------ */

/* The 16-bit gemm is exactly "widen A, B (and C) to f32, one FP32 sgemm, round C to nearest
 * even": bit for bit against be_cpu_sgemm on the widened copies, every matrix of a batch. */
static void check_gemm16_exact(uint32_t ab, uint32_t ct, int trans, float beta) {
  be_gemm_args g = {.trans_a = (be_blas_trans)(trans & 1),
                    .trans_b = (be_blas_trans)(trans >> 1),
                    .m = rnd_int(1, 40),
                    .n = rnd_int(1, 40),
                    .k = rnd_int(1, 40),
                    .alpha = rnd_float(0.5f, 2),
                    .beta = beta,
                    .ab_type = ab,
                    .c_type = ct,
                    .batch = 3};
  int64_t ar = g.trans_a ? g.k : g.m, ac = g.trans_a ? g.m : g.k;
  int64_t br = g.trans_b ? g.n : g.k, bc = g.trans_b ? g.k : g.n;
  g.lda = ar + rnd_int(0, 3), g.ldb = br + rnd_int(0, 3), g.ldc = g.m + rnd_int(0, 3);
  g.stride_a = ac * g.lda, g.stride_b = 0, g.stride_c = g.n * g.ldc + 1;
  size_t a_len = (size_t)(3 * g.stride_a), b_len = (size_t)(bc * g.ldb);
  size_t c_len = (size_t)(3 * g.stride_c), ces = ct == ACCEL_F32 ? 4 : 2;
  uint16_t *a = xmalloc(a_len * 2), *b = xmalloc(b_len * 2);
  uint8_t *c = xmalloc(c_len * ces), *c0 = xmalloc(c_len * ces);
  float *af = xmalloc(a_len * 4), *bf = xmalloc(b_len * 4), *cf = xmalloc(c_len * 4);
  for (size_t i = 0; i < a_len; i++)
    a[i] = ab == ACCEL_F16 ? be_f32_to_f16(rnd_float(-1, 1)) : be_f32_to_bf16(rnd_float(-1, 1));
  for (size_t i = 0; i < b_len; i++)
    b[i] = ab == ACCEL_F16 ? be_f32_to_f16(rnd_float(-1, 1)) : be_f32_to_bf16(rnd_float(-1, 1));
  for (size_t i = 0; i < a_len; i++)
    af[i] = ab == ACCEL_F16 ? be_f16_to_f32(a[i]) : be_bf16_to_f32(a[i]);
  for (size_t i = 0; i < b_len; i++)
    bf[i] = ab == ACCEL_F16 ? be_f16_to_f32(b[i]) : be_bf16_to_f32(b[i]);
  for (size_t i = 0; i < c_len; i++) {
    float v = beta == 0 ? NAN : rnd_float(-1, 1);
    if (ct == ACCEL_F32)
      memcpy(c + 4 * i, &v, 4);
    else {
      uint16_t h = ct == ACCEL_F16 ? be_f32_to_f16(v) : be_f32_to_bf16(v);
      memcpy(c + 2 * i, &h, 2);
    }
    cf[i] = ct == ACCEL_F32   ? v
            : ct == ACCEL_F16 ? be_f16_to_f32(((uint16_t *)(void *)c)[i])
                              : be_bf16_to_f32(((uint16_t *)(void *)c)[i]);
  }
  memcpy(c0, c, c_len * ces);
  CHECK(be_cpu_gemm(&g, a, a_len, b, b_len, c, c_len) == 0, "gemm %u -> %u", ab, ct);
  be_sgemm_args s = {.trans_a = g.trans_a,
                     .trans_b = g.trans_b,
                     .m = g.m,
                     .n = g.n,
                     .k = g.k,
                     .alpha = (float)g.alpha,
                     .beta = beta,
                     .lda = ar,
                     .ldb = br,
                     .ldc = g.m};
  float *pa = xmalloc((size_t)(ar * ac) * 4), *pb = xmalloc((size_t)(br * bc) * 4);
  float *pc = xmalloc((size_t)(g.m * g.n) * 4);
  for (int64_t bi = 0; bi < 3; bi++) {
    for (int64_t j = 0; j < ac; j++)
      for (int64_t i = 0; i < ar; i++)
        pa[i + j * ar] = af[bi * g.stride_a + i + j * g.lda];
    for (int64_t j = 0; j < bc; j++)
      for (int64_t i = 0; i < br; i++)
        pb[i + j * br] = bf[i + j * g.ldb];
    for (int64_t j = 0; j < g.n; j++)
      for (int64_t i = 0; i < g.m; i++)
        pc[i + j * g.m] = beta == 0 ? 0 : cf[bi * g.stride_c + i + j * g.ldc];
    be_cpu_sgemm(&s, pa, (size_t)(ar * ac), pb, (size_t)(br * bc), pc, (size_t)(g.m * g.n));
    for (int64_t j = 0; j < g.n && !FAILED_TOO_OFTEN(); j++)
      for (int64_t i = 0; i < g.m; i++) {
        size_t at = (size_t)(bi * g.stride_c + i + j * g.ldc);
        float w = pc[i + j * g.m];
        uint16_t h = ct == ACCEL_F16 ? be_f32_to_f16(w) : be_f32_to_bf16(w);
        bool same = ct == ACCEL_F32 ? memcmp(c + 4 * at, &w, 4) == 0
                                    : memcmp(c + 2 * at, &h, 2) == 0;
        CHECK(same, "gemm %u -> %u, batch %" PRId64 " C(%" PRId64 ", %" PRId64 ")", ab, ct, bi, i,
              j);
        memcpy(c0 + at * ces, c + at * ces, ces);
      }
  }
  CHECK(memcmp(c0, c, c_len * ces) == 0, "gemm %u -> %u wrote outside the C matrices", ab, ct);
  free(a), free(b), free(c), free(c0), free(af), free(bf), free(cf), free(pa), free(pb), free(pc);
}

static void test_gemm_dtypes_exact(void) {
  static const uint32_t combos[4][2] = {{ACCEL_F16, ACCEL_F16},
                                        {ACCEL_F16, ACCEL_F32},
                                        {ACCEL_BF16, ACCEL_BF16},
                                        {ACCEL_BF16, ACCEL_F32}};
  for (int c = 0; c < 4; c++)
    for (int t = 0; t < 4; t++) {
      check_gemm16_exact(combos[c][0], combos[c][1], t, rnd_float(0.5f, 2));
      check_gemm16_exact(combos[c][0], combos[c][1], t, 0);
    }
  be_gemm_args g = {.m = 2,
                    .n = 2,
                    .k = 2,
                    .alpha = 1,
                    .lda = 2,
                    .ldb = 2,
                    .ldc = 2,
                    .ab_type = ACCEL_F32,
                    .c_type = ACCEL_F32,
                    .math = BE_GEMM_MATH_TF32,
                    .batch = 1};
  float m[8] = {0};
  CHECK(be_cpu_gemm(&g, m, 4, m, 4, m + 4, 4) == ACCEL_ENOTSUP, "TF32 on the cpu");
  g.math = BE_GEMM_MATH_DEVICE, g.c_type = ACCEL_F64;
  CHECK(be_cpu_gemm(&g, m, 4, m, 4, m + 4, 4) == ACCEL_EINVAL, "F32 -> F64 is no gemm");
}

/* F64 normals near the zeros of sin(pi v) and cos(pi v) (v = 1 - 2^-53, 1/2 - 2^-53): the
 * reduction keeps them to a few ulp, where sin(M_PI * v) would be wrong in the first digit. */
static void test_philox_f64_edges(void) {
  CHECK(be_cpu_philox_uniform_f64(0, 0) == 0x1p-54, "smallest uniform");
  CHECK(be_cpu_philox_uniform_f64(0xffffffffu, 0xffffffffu) < 1.0, "below 1");
  static const uint32_t w23[2][2] = {{(1u << 21) - 1, (1u << 31) - 1},
                                     {(1u << 21) - 1, (1u << 30) - 1}};
  for (int c = 0; c < 2; c++) {
    uint32_t w[4] = {(uint32_t)rnd64(), (uint32_t)rnd64(), w23[c][0], w23[c][1]};
    double z[2], u = be_cpu_philox_uniform_f64(w[0], w[1]);
    be_cpu_philox_box_muller_f64(w, z);
    long double s = sqrtl(-2 * logl(u));
    long double want = s * sinl(3.141592653589793238462643383279503L * 0x1p-53L);
    double got = c == 0 ? z[0] : z[1];
    CHECK(fabsl(got - want) <= 4 * DBL_EPSILON * fabsl(want), "zero %d: %.17g, want %.17Lg", c, got,
          want);
  }
}

/* The dtype-generic kernels refuse what they do not fill or compute. */
static void test_dtype_errors(void) {
  uint32_t buf[8] = {0};
  CHECK(be_cpu_philox_fill_uniform_as(ACCEL_U32, buf, 2, 1, 0) == ACCEL_ENOTSUP, "u32 uniform");
  CHECK(be_cpu_philox_fill_normal_as(ACCEL_F64, buf, 2, 1, 1, 0, 1) == ACCEL_EINVAL, "odd");
  CHECK(be_cpu_philox_fill_normal_as(ACCEL_F16, NULL, 2, 1, 0, 0, 1) == ACCEL_EINVAL, "NULL");
  CHECK(be_cpu_unary(ACCEL_I32, BE_RELU, buf, buf, 2) == ACCEL_ENOTSUP, "i32 relu");
  CHECK(be_cpu_unary(ACCEL_F64, (be_unary_op)9, buf, buf, 2) == ACCEL_EINVAL, "bad op");
  CHECK(be_cpu_softmax(ACCEL_U32, buf, buf, 1, 2) == ACCEL_ENOTSUP, "u32 softmax");
  CHECK(be_cpu_softmax(ACCEL_F16, NULL, buf, 1, 2) == ACCEL_EINVAL, "NULL softmax");
  CHECK(memcmp(buf, (uint32_t[8]){0}, sizeof buf) == 0, "nothing written");
}

/* ---- main ------------------------------------------------------------------------------- */

static uint64_t pick_seed(void) {
  const char *env = getenv("ACCEL_TEST_SEED");
  if (env != NULL && *env != '\0')
    return strtoull(env, NULL, 0);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
}

int main(void) {
  uint64_t seed = pick_seed();
  printf("seed %" PRIu64 " (rerun with ACCEL_TEST_SEED=%" PRIu64 ")\n", seed, seed);
  rng_state = seed;
  struct {
    const char *name;
    void (*fn)(void);
  } tests[] = {
      {"philox_kat", test_philox_kat},
      {"philox_stream_definition", test_philox_stream_definition},
      {"philox_curand_golden", test_philox_curand_golden},
      {"philox_slices", test_philox_slices},
      {"philox_uniform_exact", test_philox_uniform_exact},
      {"philox_normal_formula", test_philox_normal_formula},
      {"philox_box_muller_edges", test_philox_box_muller_edges},
      {"philox_moments", test_philox_moments},
      {"philox_errors", test_philox_errors},
      {"blas_args", test_blas_args},
      {"sgemm_random", test_sgemm_random},
      {"sgemm_edges", test_sgemm_edges},
      {"sgemm_errors", test_sgemm_errors},
      {"saxpy_sdot", test_saxpy_sdot},
      {"fill_copy", test_fill_copy},
      {"unary", test_unary},
      {"softmax", test_softmax},
      {"gemm_dtypes_exact", test_gemm_dtypes_exact},
      {"philox_f64_edges", test_philox_f64_edges},
      {"dtype_errors", test_dtype_errors},
  };
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
    int before = failures;
    tests[i].fn();
    printf("%-28s %s\n", tests[i].name, failures == before ? "ok" : "FAILED");
  }
  printf("%d checks, %d failed (seed %" PRIu64 ")\n", checks, failures, seed);
  return failures == 0 ? 0 : 1;
}
