/* api-dtypes: the typed ops of the public API on every device, embedded and through acceld:
 * gemm in every combination a device says it runs (and ACCEL_ENOTSUP for those it does not),
 * axpy/dot/scal in F64, accel_fill of every dtype, sigmoid in F64 and BF16, uniform RNG in F64,
 * F16 and BF16 identical on every device. Inputs are fresh random numbers (the seed is
 * printed). 16-bit inputs are made as bit patterns and decoded here (an implementation of the
 * decoding of our own, not the library's), so the references see exactly what the device saw.
 *
 * Tolerances: gemm |got - ref| <= (k + 2) * 2 * u_acc * mag + u_out * (|ref| + mag) (+ 2^-24
 * for F16: one subnormal step), mag = sum of the terms' magnitudes, u_acc the accumulation's
 * unit roundoff (2^-53 for F64, 2^-24 otherwise), u_out the output's (2^-53, 2^-24, 2^-11 for
 * F16, 2^-8 for BF16; a 16-bit C may be rounded twice on a GPU); sigmoid F64 1e-15 relative,
 * BF16 2^-8 relative; axpy/dot/scal F64 1e-14 relative to the magnitudes; fills bit for bit. */
#include <float.h>
#include <math.h>

#include "api_util.h"

static double f16_value(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

static double bf16_value(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static size_t dsize(accel_dtype t) {
  return t == ACCEL_F64 ? 8 : t == ACCEL_F16 || t == ACCEL_BF16 ? 2 : t == ACCEL_BOOL ? 1 : 4;
}

/* A random finite value in about [-2, 2] as an element of t: *bits gets its bytes. */
static double rnd_elem(accel_dtype t, void *at) {
  double v = (double)rnd_float(-2.0f, 2.0f);
  if (t == ACCEL_F64) {
    memcpy(at, &v, 8);
    return v;
  }
  if (t == ACCEL_F32) {
    float f = (float)v;
    memcpy(at, &f, 4);
    return f;
  }
  /* Sign, an exponent giving [2^-3, 2), any mantissa. */
  uint16_t h = (uint16_t)(rnd32() & 0x8000);
  if (t == ACCEL_F16)
    h |= (uint16_t)(((12 + rnd_range(0, 3)) << 10) | (rnd32() & 0x3ff));
  else
    h |= (uint16_t)(((124 + rnd_range(0, 3)) << 7) | (rnd32() & 0x7f));
  memcpy(at, &h, 2);
  return t == ACCEL_F16 ? f16_value(h) : bf16_value(h);
}

static double elem_value(accel_dtype t, const void *at) {
  if (t == ACCEL_F64) {
    double v;
    memcpy(&v, at, 8);
    return v;
  }
  if (t == ACCEL_F32) {
    float f;
    memcpy(&f, at, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, at, 2);
  return t == ACCEL_F16 ? f16_value(h) : bf16_value(h);
}

static double unit(accel_dtype t) {
  return t == ACCEL_F64   ? ldexp(1, -53)
         : t == ACCEL_F32 ? ldexp(1, -24)
         : t == ACCEL_F16 ? ldexp(1, -11)
                          : ldexp(1, -8);
}

/* ---- gemm ---- */

typedef struct combo {
  accel_dtype ab, c;
} combo;

static const combo combos[] = {{ACCEL_F64, ACCEL_F64},   {ACCEL_F32, ACCEL_F32},
                               {ACCEL_F16, ACCEL_F16},   {ACCEL_F16, ACCEL_F32},
                               {ACCEL_BF16, ACCEL_BF16}, {ACCEL_BF16, ACCEL_F32}};

/* C (m x n, ldc = m) = 1.5 op(A) op(B) - 0.5 C on device dev; checked against float64. */
static void gemm_one(accel_ctx *ctx, accel_device dev, combo cb, bool runs) {
  size_t m = rnd_range(1, 24), n = rnd_range(1, 24), k = rnd_range(1, 40);
  accel_trans ta = rnd32() & 1 ? ACCEL_TRANS : ACCEL_NO_TRANS;
  size_t lda = ta == ACCEL_TRANS ? k : m, ldb = k, sa = dsize(cb.ab), sc = dsize(cb.c);
  uint8_t *a = xmalloc(m * k * sa), *b = xmalloc(k * n * sa), *c = xmalloc(m * n * sc);
  double *av = xmalloc(m * k * sizeof *av), *bv = xmalloc(k * n * sizeof *bv);
  double *cv = xmalloc(m * n * sizeof *cv);
  for (size_t i = 0; i < m * k; i++)
    av[i] = rnd_elem(cb.ab, a + i * sa);
  for (size_t i = 0; i < k * n; i++)
    bv[i] = rnd_elem(cb.ab, b + i * sa);
  for (size_t i = 0; i < m * n; i++)
    cv[i] = rnd_elem(cb.c, c + i * sc);
  accel_buffer A = buf_from(ctx, cb.ab, a, m * k), B = buf_from(ctx, cb.ab, b, k * n);
  accel_buffer C = buf_from(ctx, cb.c, c, m * n);
  accel_future *f = NULL;
  int rc = accel_gemm(ctx, dev, ta, ACCEL_NO_TRANS, m, n, k, 1.5, A, lda, B, ldb, -0.5, C, m,
                      ACCEL_MATH_DEFAULT, &f);
  if (rc == 0)
    rc = fut_status(f);
  if (!runs) {
    CHECK_ERR(rc, ACCEL_ENOTSUP);
  } else {
    CHECK_OK(rc);
    read_sync(ctx, C, 0, c, m * n);
    double ua = cb.ab == ACCEL_F64 ? ldexp(1, -53) : ldexp(1, -24);
    for (size_t j = 0; j < n; j++)
      for (size_t i = 0; i < m; i++) {
        double ref = -0.5 * cv[i + j * m], mag = fabs(ref);
        for (size_t l = 0; l < k; l++) {
          double x = ta == ACCEL_TRANS ? av[l + i * lda] : av[i + l * lda];
          ref += 1.5 * x * bv[l + j * ldb];
          mag += fabs(1.5 * x * bv[l + j * ldb]);
        }
        double got = elem_value(cb.c, c + (i + j * m) * sc);
        /* A 16-bit C may be rounded twice (alpha AB, then the sum): up to u_out of each
         * term's magnitude, plus one step of f16's subnormals. */
        double tol = (double)(k + 2) * 2 * ua * mag + unit(cb.c) * (fabs(ref) + mag) +
                     (cb.c == ACCEL_F16 ? ldexp(1, -24) : 0);
        if (!(fabs(got - ref) <= tol))
          TEST_FAIL("device %d gemm %d->%d C(%zu,%zu) = %.17g, want %.17g (tol %.3g)", dev, cb.ab,
                    cb.c, i, j, got, ref, tol);
      }
  }
  for (accel_buffer *x = (accel_buffer[]){A, B, C}, *e = x + 3; x < e; x++)
    CHECK_OK(accel_buffer_destroy(ctx, *x));
  free(a), free(b), free(c), free(av), free(bv), free(cv);
}

/* Every combination on every device: computed where the device info says so, ENOTSUP where
 * it does not; the CPU runs them all but TF32. */
TEST(gemm_every_combination_on_every_device) {
  accel_ctx *ctx = ctx_open("embedded:?cpu_devices=2");
  int devices = accel_device_count(ctx);
  for (accel_device d = 0; d < devices; d++) {
    struct accel_device_info info;
    CHECK_OK(accel_device_info(ctx, d, &info));
    CHECK(info.packages & ACCEL_PKG_BLAS);
    bool cpu = strcmp(info.backend, "cpu") == 0;
    for (size_t i = 0; i < sizeof combos / sizeof combos[0]; i++) {
      bool runs = (info.gemm_dtypes & ACCEL_DTYPE_BIT(combos[i].ab)) != 0;
      if (cpu)
        CHECK(runs); /* the CPU backend runs every combination */
      for (int rep = 0; rep < 3; rep++)
        gemm_one(ctx, d, combos[i], runs);
    }
  }
  accel_close(ctx);
}

/* TF32 on a CPU device is not supported there, nor is axpy in F16 anywhere (on ANY: no device
 * to place it on); a bad combination (F64 A, F32 C) or math is an argument error. */
TEST(unsupported_gemm_is_enotsup_and_mixed_types_einval) {
  accel_ctx *ctx = ctx_open(NULL);
  accel_buffer a = buf_new(ctx, ACCEL_F32, 4), c = buf_new(ctx, ACCEL_F32, 4);
  accel_buffer d = buf_new(ctx, ACCEL_F64, 4);
  accel_future *f;
  CHECK_OK(accel_gemm(ctx, cpu_dev(ctx, 0), ACCEL_NO_TRANS, ACCEL_NO_TRANS, 2, 2, 2, 1.0, a, 2, a,
                      2, 0.0, c, 2, ACCEL_MATH_TF32, &f));
  CHECK_ERR(fut_status(f), ACCEL_ENOTSUP);
  CHECK_ERR(accel_gemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, 2, 2, 2, 1.0, d, 2, d, 2, 0.0, c, 2,
                       ACCEL_MATH_DEFAULT, NULL),
            ACCEL_EINVAL);
  CHECK_ERR(accel_gemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, 2, 2, 2, 1.0, a, 2, a, 2, 0.0, c, 2,
                       (accel_math)(ACCEL_MATH_FP64 + 1), NULL),
            ACCEL_EINVAL);
  CHECK_ERR(accel_finish(ctx, 10000), ACCEL_ENOTSUP); /* the TF32 op's, reported once */
  /* A batch of 4 sharing both A and B does 4x the work its buffers hold: refused; sharing one
   * of them is fine. (2 x 2 matrices; C holds the 4 results.) */
  accel_buffer c4 = buf_new(ctx, ACCEL_F32, 16);
  CHECK_ERR(accel_gemm_strided_batched(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, 2, 2, 2, 1.0, a, 2,
                                       0, a, 2, 0, 0.0, c4, 2, 4, 4, ACCEL_MATH_DEFAULT, NULL),
            ACCEL_ELIMIT);
  accel_buffer b16 = buf_new(ctx, ACCEL_F32, 16);
  CHECK_OK(accel_gemm_strided_batched(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, 2, 2, 2, 1.0, a, 2, 0,
                                      b16, 2, 4, 0.0, c4, 2, 4, 4, ACCEL_MATH_DEFAULT, NULL));
  CHECK_OK(accel_finish(ctx, 10000));
  /* No backend runs axpy in F16: on ANY there is no device to place it on. */
  accel_buffer h = buf_new(ctx, ACCEL_F16, 8);
  CHECK_OK(accel_axpy(ctx, ACCEL_DEVICE_ANY, 8, 1.0, h, h, &f));
  CHECK_ERR(fut_status(f), ACCEL_ENOTSUP);
  CHECK_OK(accel_axpy(ctx, 0, 8, 1.0, h, h, &f));
  CHECK_ERR(fut_status(f), ACCEL_ENOTSUP);
  CHECK_ERR(accel_finish(ctx, 10000), ACCEL_ENOTSUP);
  CHECK_STR_EQ(accel_strerror(ACCEL_ENOTSUP), "not supported on this backend");
  accel_close(ctx);
}

/* ---- BLAS 1 in F64, fills, element-wise, RNG ---- */

TEST(axpy_dot_scal_in_f64) {
  accel_ctx *ctx = ctx_open(NULL);
  size_t n = rnd_range(1, 5000);
  double *x = xmalloc(n * 8), *y = xmalloc(n * 8), *got = xmalloc(n * 8), r;
  for (size_t i = 0; i < n; i++)
    x[i] = rnd_float(-1, 1) * 3.0, y[i] = rnd_float(-1, 1) / 7.0;
  accel_buffer X = buf_from(ctx, ACCEL_F64, x, n), Y = buf_from(ctx, ACCEL_F64, y, n);
  accel_buffer R = buf_new(ctx, ACCEL_F64, 1);
  CHECK_OK(accel_dot(ctx, ACCEL_DEVICE_ANY, n, X, Y, R, NULL));
  CHECK_OK(accel_axpy(ctx, ACCEL_DEVICE_ANY, n, -2.25, X, Y, NULL));
  CHECK_OK(accel_scal(ctx, ACCEL_DEVICE_ANY, n, 0.5, X, NULL));
  read_sync(ctx, R, 0, &r, 1);
  double ref = 0, mag = 0;
  for (size_t i = 0; i < n; i++)
    ref += x[i] * y[i], mag += fabs(x[i] * y[i]);
  CHECK(fabs(r - ref) <= 1e-14 * (double)n * mag + 1e-300);
  read_sync(ctx, Y, 0, got, n);
  for (size_t i = 0; i < n; i++)
    CHECK(fabs(got[i] - (y[i] - 2.25 * x[i])) <= 1e-15 * (fabs(y[i]) + fabs(2.25 * x[i])));
  read_sync(ctx, X, 0, got, n);
  for (size_t i = 0; i < n; i++)
    CHECK(got[i] == 0.5 * x[i]); /* exact: a power of two */
  CHECK_OK(accel_finish(ctx, 10000));
  accel_close(ctx);
  free(x), free(y), free(got);
}

TEST(fill_converts_to_every_dtype) {
  accel_ctx *ctx = ctx_open(NULL);
  static const struct {
    accel_dtype t;
    double v;
    uint64_t bits;
  } cases[] = {{ACCEL_F64, -0.1, 0xbfb999999999999aull},
               {ACCEL_F32, 1.5, 0x3fc00000u},
               {ACCEL_F16, 1.0 / 3.0, 0x3555u},
               {ACCEL_BF16, 1.0 / 3.0, 0x3eabu},
               {ACCEL_F16, 65520.0, 0x7c00u},
               {ACCEL_I32, -7.0, 0xfffffff9u},
               {ACCEL_U32, 4294967295.0, 0xffffffffu},
               {ACCEL_BOOL, 1.0, 1u},
               {ACCEL_BOOL, 0.0, 0u}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t n = rnd_range(1, 100), s = dsize(cases[i].t);
    accel_buffer b = buf_new(ctx, cases[i].t, n);
    CHECK_OK(accel_fill(ctx, ACCEL_DEVICE_ANY, b, cases[i].v, NULL));
    uint8_t *got = xmalloc(n * s);
    read_sync(ctx, b, 0, got, n);
    for (size_t j = 0; j < n; j++) {
      uint64_t bits = 0;
      memcpy(&bits, got + j * s, s);
      if (bits != cases[i].bits)
        TEST_FAIL("fill %d with %g: element %zu is 0x%llx, want 0x%llx", cases[i].t, cases[i].v, j,
                  (unsigned long long)bits, (unsigned long long)cases[i].bits);
    }
    free(got);
    CHECK_OK(accel_buffer_destroy(ctx, b));
  }
  accel_buffer u = buf_new(ctx, ACCEL_U32, 4), i32 = buf_new(ctx, ACCEL_I32, 4);
  CHECK_ERR(accel_fill(ctx, ACCEL_DEVICE_ANY, u, -1.0, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_fill(ctx, ACCEL_DEVICE_ANY, u, 4294967296.0, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_fill(ctx, ACCEL_DEVICE_ANY, i32, 0.5, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_fill(ctx, ACCEL_DEVICE_ANY, i32, 2147483648.0, NULL), ACCEL_EINVAL);
  accel_buffer bo = buf_new(ctx, ACCEL_BOOL, 4); /* 0 or 1: one past each way refused */
  CHECK_ERR(accel_fill(ctx, ACCEL_DEVICE_ANY, bo, 2.0, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "bool") != NULL);
  CHECK_ERR(accel_fill(ctx, ACCEL_DEVICE_ANY, bo, -1.0, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_fill(ctx, ACCEL_DEVICE_ANY, bo, 0.5, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_fill_u32(ctx, ACCEL_DEVICE_ANY, bo, 1u, NULL), ACCEL_EINVAL); /* 1 byte */
  accel_buffer h = buf_new(ctx, ACCEL_F16, 4);
  CHECK_ERR(accel_fill_u32(ctx, ACCEL_DEVICE_ANY, h, 1u, NULL), ACCEL_EINVAL); /* 2 bytes */
  accel_buffer g = buf_new(ctx, ACCEL_F64, 4);
  CHECK_ERR(accel_fill_u32(ctx, ACCEL_DEVICE_ANY, g, 1u, NULL), ACCEL_EINVAL); /* 8 bytes */
  CHECK_OK(accel_finish(ctx, 10000));
  accel_close(ctx);
}

TEST(sigmoid_in_f64_and_bf16) {
  accel_ctx *ctx = ctx_open(NULL);
  size_t n = rnd_range(1, 3000);
  double *x = xmalloc(n * 8), *y = xmalloc(n * 8);
  uint16_t *hx = xmalloc(n * 2), *hy = xmalloc(n * 2);
  double *hv = xmalloc(n * 8);
  for (size_t i = 0; i < n; i++) {
    x[i] = rnd_float(-8, 8);
    hv[i] = rnd_elem(ACCEL_BF16, &hx[i]);
  }
  accel_buffer X = buf_from(ctx, ACCEL_F64, x, n), H = buf_from(ctx, ACCEL_BF16, hx, n);
  CHECK_OK(accel_sigmoid(ctx, ACCEL_DEVICE_ANY, X, X, NULL));
  CHECK_OK(accel_sigmoid(ctx, ACCEL_DEVICE_ANY, H, H, NULL));
  read_sync(ctx, X, 0, y, n);
  read_sync(ctx, H, 0, hy, n);
  for (size_t i = 0; i < n; i++) {
    double ref = 1.0 / (1.0 + exp(-x[i])), href = 1.0 / (1.0 + exp(-hv[i]));
    CHECK(fabs(y[i] - ref) <= 1e-15 * ref);
    CHECK(fabs(bf16_value(hy[i]) - href) <= ldexp(1, -8) * href + 1e-6);
  }
  CHECK_OK(accel_finish(ctx, 10000));
  accel_close(ctx);
  free(x), free(y), free(hx), free(hy), free(hv);
}

/* The same (seed, offset, count) gives the same bits on every device, in every float type;
 * F64 uniforms lie in (0, 1). */
TEST(uniform_rng_is_identical_on_every_device) {
  accel_ctx *ctx = ctx_open("embedded:?cpu_devices=2");
  int devices = accel_device_count(ctx);
  static const accel_dtype types[] = {ACCEL_F64, ACCEL_F16, ACCEL_BF16};
  accel_rng spec = {.dist = ACCEL_DIST_UNIFORM, .seed = rnd64(), .offset = rnd_range(0, 999)};
  for (size_t t = 0; t < 3; t++) {
    size_t n = rnd_range(1, 4000), s = dsize(types[t]);
    uint8_t *first = xmalloc(n * s), *got = xmalloc(n * s);
    for (accel_device d = 0; d < devices; d++) {
      accel_buffer b = buf_new(ctx, types[t], n);
      CHECK_OK(accel_rng_fill(ctx, d, b, &spec, NULL));
      read_sync(ctx, b, 0, d == 0 ? first : got, n);
      if (d > 0)
        CHECK(memcmp(first, got, n * s) == 0);
      CHECK_OK(accel_buffer_destroy(ctx, b));
    }
    for (size_t i = 0; i < n; i++) {
      double v = elem_value(types[t], first + i * s);
      CHECK(v >= 0.0 && v <= 1.0 && (types[t] != ACCEL_F64 || (v > 0.0 && v < 1.0)));
    }
    free(first), free(got);
  }
  CHECK_OK(accel_finish(ctx, 10000));
  accel_close(ctx);
}

static const test_case tests[] = {
    TEST_CASE(gemm_every_combination_on_every_device),
    TEST_CASE(unsupported_gemm_is_enotsup_and_mixed_types_einval),
    TEST_CASE(axpy_dot_scal_in_f64),
    TEST_CASE(fill_converts_to_every_dtype),
    TEST_CASE(sigmoid_in_f64_and_bf16),
    TEST_CASE(uniform_rng_is_identical_on_every_device),
};

TEST_MAIN(tests)
