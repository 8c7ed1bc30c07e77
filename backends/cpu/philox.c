/* Philox4x32-10 stream fills (see philox.h for the convention). Written from the Philox paper
 * (Salmon et al., SC'11) and cuRAND's documented conventions; checked against Random123's
 * known-answer vectors and against cuRAND itself (tests/backends). */
#include "backends/cpu/philox.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "accel/error.h"
#include "ops/dtype_conv.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */
#define PHILOX_ROUNDS 10

/* cuRAND's constants, as float expressions exactly as curand_globals.h spells them: 2^-32
 * (the decimal literal rounds to exactly 2^-32) and 2^-32 * 2pi rounded to float. */
#define INV_2POW32 0x1p-32f
#define INV_2POW32_2PI (INV_2POW32 * 6.2831855f)

/* Blocks per batch. The rounds run lane-wise over plain arrays so the compiler can vectorise
 * them (each round is two 32x32->64 multiplies per lane); 32 lanes measured best (16: -10%). */
#define LANES 32
#define BATCH_WORDS (4 * LANES)

static void philox_round(uint32_t c[4], uint32_t k0, uint32_t k1) {
  uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
  uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
  uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0;
  uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
  c[0] = n0;
  c[1] = (uint32_t)p1;
  c[2] = n2;
  c[3] = (uint32_t)p0;
}

void be_cpu_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < PHILOX_ROUNDS; r++) {
    philox_round(c, k0, k1);
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  memcpy(out, c, sizeof c);
}

/* The same ten rounds on LANES consecutive blocks at once (structure of arrays). */
typedef struct lanes {
  uint32_t c0[LANES], c1[LANES], c2[LANES], c3[LANES];
} lanes;

static void lanes_round(lanes *s, uint32_t k0, uint32_t k1) {
  for (int l = 0; l < LANES; l++) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * s->c0[l];
    uint64_t p1 = (uint64_t)PHILOX_M1 * s->c2[l];
    s->c0[l] = (uint32_t)(p1 >> 32) ^ s->c1[l] ^ k0;
    s->c2[l] = (uint32_t)(p0 >> 32) ^ s->c3[l] ^ k1;
    s->c1[l] = (uint32_t)p1;
    s->c3[l] = (uint32_t)p0;
  }
}

/* Words of blocks q .. q+LANES-1, in stream order. Block indices stay below 2^64 (q < 2^63 +
 * 2^62 for any 64-bit offset and count, two words per element included), so the counter's
 * high words are always 0, as in cuRAND for every stream position below 2^66. */
static void philox_batch(uint32_t out[BATCH_WORDS], uint64_t q, uint64_t seed) {
  lanes s;
  for (int l = 0; l < LANES; l++) {
    s.c0[l] = (uint32_t)(q + (uint64_t)l);
    s.c1[l] = (uint32_t)((q + (uint64_t)l) >> 32);
    s.c2[l] = 0;
    s.c3[l] = 0;
  }
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < PHILOX_ROUNDS; r++) {
    lanes_round(&s, k0, k1);
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  for (int l = 0; l < LANES; l++) {
    out[4 * l + 0] = s.c0[l];
    out[4 * l + 1] = s.c1[l];
    out[4 * l + 2] = s.c2[l];
    out[4 * l + 3] = s.c3[l];
  }
}

/* Converts n words of a batch into dst: `done` words of the walk came before them. */
typedef void emit_fn(void *dst, size_t done, const uint32_t *words, size_t n, const void *ctx);

/* Walks `count` words of the stream from word `skip` (< 4) of block q, one batch at a time,
 * and hands each batch to `emit` (one indirect call per BATCH_WORDS words: negligible next
 * to the rounds). Batches start on a block, so the words of a batch's last block are all in
 * buf even when n ends inside it. */
static void philox_walk(void *dst, size_t count, uint64_t seed, uint64_t q, size_t skip,
                        emit_fn *emit, const void *ctx) {
  uint32_t buf[BATCH_WORDS];
  for (size_t done = 0; done < count; q += LANES, skip = 0) {
    philox_batch(buf, q, seed);
    size_t n = BATCH_WORDS - skip;
    if (n > count - done)
      n = count - done;
    emit(dst, done, buf + skip, n, ctx);
    done += n;
  }
}

static void emit_u32(void *dst, size_t done, const uint32_t *w, size_t n, const void *ctx) {
  (void)ctx;
  memcpy((uint32_t *)dst + done, w, n * sizeof *w);
}

float be_cpu_philox_uniform(uint32_t x) {
  /* Two float roundings, as in cuRAND: x to float, then the sum (the product is exact). */
  return (float)x * INV_2POW32 + INV_2POW32 / 2.0f;
}

static void emit_uniform(void *dst, size_t done, const uint32_t *w, size_t n, const void *ctx) {
  (void)ctx;
  float *out = (float *)dst + done;
  for (size_t i = 0; i < n; i++)
    out[i] = (float)w[i] * INV_2POW32 + INV_2POW32 / 2.0f;
}

void be_cpu_philox_box_muller(uint32_t x, uint32_t y, float out[2]) {
  float u = (float)x * INV_2POW32 + INV_2POW32 / 2.0f;
  float v = (float)y * INV_2POW32_2PI + INV_2POW32_2PI / 2.0f;
  float r = sqrtf(-2.0f * logf(u));
  out[0] = sinf(v) * r;
  out[1] = cosf(v) * r;
}

typedef struct normal_ctx {
  float mean, stddev;
} normal_ctx;

/* Words come in whole pairs (the offset is even and batches hold an even number of words),
 * except that n may be odd at the very end: the pair's second word is still in the batch. */
static void emit_normal(void *dst, size_t done, const uint32_t *w, size_t n, const void *ctx) {
  const normal_ctx *nc = ctx;
  float *out = (float *)dst + done;
  float z[2];
  for (size_t i = 0; i < n; i += 2) {
    be_cpu_philox_box_muller(w[i], w[i + 1], z);
    out[i] = z[0] * nc->stddev + nc->mean;
    if (i + 1 < n)
      out[i + 1] = z[1] * nc->stddev + nc->mean;
  }
}

int be_cpu_philox_fill_u32(uint32_t *dst, size_t count, uint64_t seed, uint64_t offset) {
  if (dst == NULL && count > 0)
    return ACCEL_EINVAL;
  philox_walk(dst, count, seed, offset / 4, (size_t)(offset % 4), emit_u32, NULL);
  return 0;
}

int be_cpu_philox_fill_uniform(float *dst, size_t count, uint64_t seed, uint64_t offset) {
  if (dst == NULL && count > 0)
    return ACCEL_EINVAL;
  philox_walk(dst, count, seed, offset / 4, (size_t)(offset % 4), emit_uniform, NULL);
  return 0;
}

int be_cpu_philox_fill_normal(float *dst, size_t count, uint64_t seed, uint64_t offset, float mean,
                              float stddev) {
  if ((dst == NULL && count > 0) || offset % 2 != 0)
    return ACCEL_EINVAL;
  normal_ctx nc = {mean, stddev};
  philox_walk(dst, count, seed, offset / 4, (size_t)(offset % 4), emit_normal, &nc);
  return 0;
}

/* ---- other output types (philox.h: "Other dtypes") ---------------------------------- */

static uint16_t round16(uint32_t dtype, float f) {
  return dtype == ACCEL_F16 ? be_f32_to_f16(f) : be_f32_to_bf16(f);
}

static void emit_uniform16(void *dst, size_t done, const uint32_t *w, size_t n, const void *ctx) {
  uint32_t dtype = *(const uint32_t *)ctx;
  uint16_t *out = (uint16_t *)dst + done;
  for (size_t i = 0; i < n; i++)
    out[i] = round16(dtype, (float)w[i] * INV_2POW32 + INV_2POW32 / 2.0f);
}

typedef struct normal16_ctx {
  uint32_t dtype;
  float mean, stddev;
} normal16_ctx;

/* As emit_normal, rounded to 16 bits. */
static void emit_normal16(void *dst, size_t done, const uint32_t *w, size_t n, const void *ctx) {
  const normal16_ctx *nc = ctx;
  uint16_t *out = (uint16_t *)dst + done;
  float z[2];
  for (size_t i = 0; i < n; i += 2) {
    be_cpu_philox_box_muller(w[i], w[i + 1], z);
    out[i] = round16(nc->dtype, z[0] * nc->stddev + nc->mean);
    if (i + 1 < n)
      out[i + 1] = round16(nc->dtype, z[1] * nc->stddev + nc->mean);
  }
}

/* cuRAND's _curand_uniform_double_hq: 53 bits from two words (the shift is 53 - 32). */
static double uniform53(uint32_t w0, uint32_t w1, double scale) {
  uint64_t z = (uint64_t)w0 ^ ((uint64_t)w1 << 21);
  return (double)z * scale + scale / 2.0;
}

double be_cpu_philox_uniform_f64(uint32_t w0, uint32_t w1) {
  return uniform53(w0, w1, 0x1p-53);
}

/* Two words per element: n is even (the walk starts on an even word, batches are even). */
static void emit_uniform64(void *dst, size_t done, const uint32_t *w, size_t n, const void *ctx) {
  (void)ctx;
  double *out = (double *)dst + done / 2;
  for (size_t i = 0; i + 1 < n; i += 2)
    out[i / 2] = uniform53(w[i], w[i + 1], 0x1p-53);
}

/* sin(pi v) and cos(pi v) for v in (0, 2), reduced to pi * r with r in [0, 1/4] by exact
 * steps (v - 1, 1 - v, 1/2 - v are exact in double there), so that both stay accurate to an
 * ulp or two near their zeros, as CUDA's sincospi is; sin(PI * v) would not be. */
#define PI 3.14159265358979323846
static void sincospi(double v, double *s, double *c) {
  double ss = 1, cs = 1;
  if (v >= 1) {
    v -= 1;
    ss = -1;
    cs = -1;
  }
  if (v > 0.5) {
    v = 1 - v;
    cs = -cs;
  }
  bool swap = v > 0.25;
  if (swap)
    v = 0.5 - v;
  double a = sin(PI * v), b = cos(PI * v);
  *s = ss * (swap ? b : a);
  *c = cs * (swap ? a : b);
}

void be_cpu_philox_box_muller_f64(const uint32_t w[4], double out[2]) {
  double u = uniform53(w[0], w[1], 0x1p-53), v = uniform53(w[2], w[3], 0x1p-52);
  double r = sqrt(-2.0 * log(u)), s, c;
  sincospi(v, &s, &c);
  out[0] = r * s;
  out[1] = r * c;
}

typedef struct normal64_ctx {
  double mean, stddev;
} normal64_ctx;

/* One block (four words) per pair of elements; n may end halfway through the last block,
 * whose words are all in the batch (philox_walk). */
static void emit_normal64(void *dst, size_t done, const uint32_t *w, size_t n, const void *ctx) {
  const normal64_ctx *nc = ctx;
  double *out = (double *)dst + done / 2, z[2];
  for (size_t i = 0; i < n; i += 4) {
    be_cpu_philox_box_muller_f64(w + i, z);
    out[i / 2] = z[0] * nc->stddev + nc->mean;
    if (i + 2 < n)
      out[i / 2 + 1] = z[1] * nc->stddev + nc->mean;
  }
}

static int fill_check(uint32_t dtype, const void *dst, size_t count) {
  if (dtype != ACCEL_F32 && dtype != ACCEL_F64 && dtype != ACCEL_F16 && dtype != ACCEL_BF16)
    return ACCEL_ENOTSUP;
  if ((dst == NULL && count > 0) || (dtype == ACCEL_F64 && count > SIZE_MAX / 2))
    return ACCEL_EINVAL;
  return 0;
}

int be_cpu_philox_fill_uniform_as(uint32_t dtype, void *dst, size_t count, uint64_t seed,
                                  uint64_t offset) {
  int err = fill_check(dtype, dst, count);
  if (err != 0)
    return err;
  switch (dtype) {
  case ACCEL_F32:
    return be_cpu_philox_fill_uniform(dst, count, seed, offset);
  case ACCEL_F64: /* words 2(o + e), 2(o + e) + 1: block o / 2, word 2 (o mod 2) */
    philox_walk(dst, 2 * count, seed, offset / 2, (size_t)(offset % 2) * 2, emit_uniform64, NULL);
    return 0;
  default:
    philox_walk(dst, count, seed, offset / 4, (size_t)(offset % 4), emit_uniform16, &dtype);
    return 0;
  }
}

int be_cpu_philox_fill_normal_as(uint32_t dtype, void *dst, size_t count, uint64_t seed,
                                 uint64_t offset, double mean, double stddev) {
  int err = fill_check(dtype, dst, count);
  if (err != 0)
    return err;
  if (offset % 2 != 0)
    return ACCEL_EINVAL;
  if (dtype == ACCEL_F32)
    return be_cpu_philox_fill_normal(dst, count, seed, offset, (float)mean, (float)stddev);
  if (dtype == ACCEL_F64) { /* pair j = element 2j, 2j + 1 from block j */
    normal64_ctx nc = {mean, stddev};
    philox_walk(dst, 2 * count, seed, offset / 2, 0, emit_normal64, &nc);
    return 0;
  }
  normal16_ctx nc = {dtype, (float)mean, (float)stddev};
  philox_walk(dst, count, seed, offset / 4, (size_t)(offset % 4), emit_normal16, &nc);
  return 0;
}
