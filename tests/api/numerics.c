/* api-numerics: every compute op of the public API against a naive float64 reference, on fresh
 * random inputs each run (the seed is printed; ACCEL_TEST_SEED=<seed> replays a run).
 *
 * Tolerances (stated once, used at every check; FLT_EPSILON = 2^-23):
 *   sgemm   |got - ref| <= 2 (k + 2) eps (|alpha| sum_l |a_il b_lj| + |beta c_ij|)
 *           (the classical bound gamma_k for a dot product of length k, doubled for the
 *           alpha/beta steps); exactly 0 when that magnitude is 0.
 *   saxpy   |got - ref| <= 2 eps (|y| + |alpha x|)              (two roundings at most)
 *   sdot    |got - ref| <= 4 sqrt(n + 1) eps sum |x y|          (blocked float accumulation)
 *   sigmoid, tanh   |got - ref| <= 8 eps |ref| + 1e-37          (a few ulp of libm, subnormals)
 *   relu, fill, copy, write/read   exact (bit for bit)
 *   softmax |got - ref| <= 2e-5 ref + 1e-7, and each row sums to 1 within cols * 2 eps + 1e-6
 *   exp, log        |got - ref| <= 8 eps |ref| + 1e-37; sqrt eps/2 |ref|; abs exact
 *   binary  add, subtract, multiply, divide: |got - ref| <= eps/2 |ref| (one rounding);
 *           maximum, minimum exact
 *   reduction  sum: |got - ref| <= len eps sum|x| + eps |ref| (any order of f32 accumulation,
 *           then the output's rounding); mean that over len; max, min exact; NaN in, NaN out
 *   int32/uint32 arithmetic, comparisons (IEEE: NaN only not-equal), where: exact (bit for bit)
 * Elements an op must not touch (padding rows of C, the tail of a longer buffer, the rest of a
 * buffer around a partial write) are compared bit for bit with what was there before. */
#include <float.h>
#include <math.h>

#include "api_util.h"

#define EPS ((double)FLT_EPSILON)

static void check_close(const char *what, size_t i, double got, double want, double tol) {
  if (!(fabs(got - want) <= tol))
    TEST_FAIL("%s[%zu]: got %.9g, want %.9g (|diff| %.3g > tolerance %.3g)", what, i, got, want,
              fabs(got - want), tol);
}

static void check_bits_equal(const char *what, const void *got, const void *want, size_t count) {
  const uint32_t *g = got, *w = want;
  for (size_t i = 0; i < count; i++)
    if (g[i] != w[i])
      TEST_FAIL("%s[%zu]: got 0x%08" PRIx32 ", want 0x%08" PRIx32, what, i, g[i], w[i]);
}

/* ---- sgemm ---------------------------------------------------------------------------- */

typedef struct gemm_case {
  accel_trans ta, tb;
  size_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  accel_device dev;
} gemm_case;

/* Elements a rows x cols column-major matrix with leading dimension ld spans (at least 1, so
 * that an empty operand still has a buffer). */
static size_t span_of(size_t rows, size_t cols, size_t ld) {
  return rows == 0 || cols == 0 ? 1 : (cols - 1) * ld + rows;
}

static double op_a(const gemm_case *g, const float *a, size_t i, size_t l) {
  return g->ta == ACCEL_TRANS ? a[l + i * g->lda] : a[i + l * g->lda];
}

static double op_b(const gemm_case *g, const float *b, size_t l, size_t j) {
  return g->tb == ACCEL_TRANS ? b[j + l * g->ldb] : b[l + j * g->ldb];
}

/* Checks C (as read back) against the reference from a, b and the C that went in. */
static void gemm_check(const gemm_case *g, const float *a, const float *b, const float *c_in,
                       const float *c_out, size_t c_len) {
  char what[160];
  snprintf(what, sizeof what,
           "sgemm %c%c m=%zu n=%zu k=%zu lda=%zu ldb=%zu ldc=%zu "
           "alpha=%g beta=%g: C",
           g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->m, g->n, g->k, g->lda, g->ldb, g->ldc,
           (double)g->alpha, (double)g->beta);
  for (size_t idx = 0; idx < c_len; idx++) {
    size_t i = idx % g->ldc, j = idx / g->ldc;
    if (i >= g->m || j >= g->n) { /* outside the m x n block: untouched */
      check_bits_equal(what, &c_out[idx], &c_in[idx], 1);
      continue;
    }
    double s = 0, mag = 0;
    for (size_t l = 0; l < g->k; l++) {
      double p = op_a(g, a, i, l) * op_b(g, b, l, j);
      s += p;
      mag += fabs(p);
    }
    /* BLAS: with beta = 0, C is not read (NaN in it vanishes). */
    double cterm = g->beta == 0.0f ? 0.0 : (double)g->beta * c_in[idx];
    double want = (double)g->alpha * s + cterm;
    double tol = 2.0 * (double)(g->k + 2) * EPS * (fabs((double)g->alpha) * mag + fabs(cterm));
    check_close(what, idx, c_out[idx], want, tol);
  }
}

/* Runs one sgemm through the API on fresh random operands of exactly the size the shape
 * needs, and checks it. With beta = 0 the m x n block of C goes in as NaN. */
static void gemm_run(accel_ctx *ctx, const gemm_case *g) {
  size_t ra = g->ta ? g->k : g->m, ca = g->ta ? g->m : g->k;
  size_t rb = g->tb ? g->n : g->k, cb = g->tb ? g->k : g->n;
  size_t a_len = span_of(ra, ca, g->lda), b_len = span_of(rb, cb, g->ldb);
  size_t c_len = span_of(g->m, g->n, g->ldc);
  float *a = rnd_floats(a_len, -1, 1), *b = rnd_floats(b_len, -1, 1);
  float *c_in = rnd_floats(c_len, -1, 1), *c_out = xmalloc(c_len * sizeof *c_out);
  for (size_t idx = 0; idx < c_len && g->beta == 0.0f; idx++)
    if (idx % g->ldc < g->m)
      c_in[idx] = NAN;
  accel_buffer A = buf_from(ctx, ACCEL_F32, a, a_len), B = buf_from(ctx, ACCEL_F32, b, b_len);
  accel_buffer C = buf_from(ctx, ACCEL_F32, c_in, c_len);
  accel_future *f = NULL;
  CHECK_OK(accel_sgemm(ctx, g->dev, g->ta, g->tb, g->m, g->n, g->k, g->alpha, A, g->lda, B, g->ldb,
                       g->beta, C, g->ldc, &f));
  WAIT_OK(f);
  read_sync(ctx, C, 0, c_out, c_len);
  gemm_check(g, a, b, c_in, c_out, c_len);
  CHECK_OK(accel_buffer_destroy(ctx, A));
  CHECK_OK(accel_buffer_destroy(ctx, B));
  CHECK_OK(accel_buffer_destroy(ctx, C));
  free(a);
  free(b);
  free(c_in);
  free(c_out);
}

/* ld = rows, or rows plus some padding (never below 1). */
static size_t rnd_ld(size_t rows) {
  size_t ld = rows + (rnd64() % 3 == 0 ? 0 : rnd_range(1, 7));
  return ld ? ld : 1;
}

static float rnd_alpha(void) {
  static const float fixed[] = {1.0f, -1.0f, 0.5f};
  size_t i = rnd_range(0, 3);
  return i < 3 ? fixed[i] : rnd_nonzero(-2.0f, 2.0f);
}

static float rnd_beta(void) {
  static const float fixed[] = {0.0f, 1.0f, -0.75f};
  size_t i = rnd_range(0, 3);
  return i < 3 ? fixed[i] : rnd_nonzero(-2.0f, 2.0f);
}

static void gemm_fill_lds(gemm_case *g) {
  g->lda = rnd_ld(g->ta ? g->k : g->m);
  g->ldb = rnd_ld(g->tb ? g->n : g->k);
  g->ldc = rnd_ld(g->m);
}

TEST(sgemm_random_shapes) {
  static const size_t sizes[] = {1, 2, 3, 5, 8, 16, 17, 31, 64, 65, 100, 129};
  const size_t nsizes = sizeof sizes / sizeof sizes[0];
  accel_ctx *ctx = ctx_open(NULL);
  long iters = test_scaled(48, 12);
  for (long it = 0; it < iters; it++) {
    gemm_case g = {.ta = (accel_trans)(it & 1), .tb = (accel_trans)((it >> 1) & 1)};
    g.m = sizes[rnd_range(0, nsizes - 1)];
    g.n = sizes[rnd_range(0, nsizes - 1)];
    g.k = sizes[rnd_range(0, nsizes - 1)];
    gemm_fill_lds(&g);
    g.alpha = rnd_alpha();
    g.beta = rnd_beta();
    g.dev = it % 3 == 2 ? ACCEL_DEVICE_ANY : 0;
    gemm_run(ctx, &g);
  }
  accel_close(ctx);
}

/* Every transpose pair on a small non-square shape with padded leading dimensions, and 1x1. */
TEST(sgemm_transposes_and_1x1) {
  accel_ctx *ctx = ctx_open(NULL);
  for (int t = 0; t < 4; t++) {
    gemm_case g = {.ta = (accel_trans)(t & 1),
                   .tb = (accel_trans)(t >> 1),
                   .m = 7,
                   .n = 5,
                   .k = 3,
                   .alpha = rnd_alpha(),
                   .beta = 1.0f};
    g.lda = (g.ta ? g.k : g.m) + 2;
    g.ldb = (g.tb ? g.n : g.k) + 3;
    g.ldc = g.m + 1;
    gemm_run(ctx, &g);
    g.beta = 0.0f; /* and C as pure output (NaN going in) */
    gemm_run(ctx, &g);
  }
  gemm_case one = {
      .m = 1, .n = 1, .k = 1, .lda = 1, .ldb = 1, .ldc = 1, .alpha = 2.0f, .beta = -3.0f};
  gemm_run(ctx, &one);
  one.ta = one.tb = ACCEL_TRANS;
  one.beta = 0.0f;
  gemm_run(ctx, &one);
  accel_close(ctx);
}

/* k = 0: C = beta * C for every transpose pair (A and B are not read: they hold NaN); with
 * beta = 0 a NaN C becomes zeros. */
TEST(sgemm_k_zero) {
  accel_ctx *ctx = ctx_open(NULL);
  const size_t m = 4, n = 3, ldc = 6, c_len = (n - 1) * ldc + m;
  float nan1 = NAN;
  accel_buffer A = buf_from(ctx, ACCEL_F32, &nan1, 1), B = buf_from(ctx, ACCEL_F32, &nan1, 1);
  static const float betas[] = {0.0f, 1.0f, 0.5f, -2.0f};
  for (int t = 0; t < 4; t++) {
    for (size_t bi = 0; bi < 4; bi++) {
      accel_trans ta = (accel_trans)(t & 1), tb = (accel_trans)(t >> 1);
      size_t lda = ta ? 1 : m, ldb = tb ? n : 1; /* ld >= max(1, stored rows) */
      float beta = betas[bi], *c = rnd_floats(c_len, -1, 1), out[32];
      if (beta == 0.0f)
        for (size_t i = 0; i < c_len; i++)
          c[i] = i % ldc < m ? NAN : c[i];
      accel_buffer C = buf_from(ctx, ACCEL_F32, c, c_len);
      accel_future *f = NULL;
      CHECK_OK(accel_sgemm(ctx, 0, ta, tb, m, n, 0, rnd_alpha(), A, lda, B, ldb, beta, C, ldc, &f));
      WAIT_OK(f);
      read_sync(ctx, C, 0, out, c_len);
      for (size_t i = 0; i < c_len; i++) {
        if (i % ldc >= m)
          check_bits_equal("sgemm k=0: C padding", &out[i], &c[i], 1);
        else
          check_close("sgemm k=0: C", i, out[i], beta == 0.0f ? 0.0 : (double)beta * c[i],
                      beta == 0.0f ? 0.0 : EPS * fabs((double)beta * c[i]));
      }
      CHECK_OK(accel_buffer_destroy(ctx, C));
      free(c);
    }
  }
  accel_close(ctx);
}

/* m = 0 or n = 0: nothing to compute, C is left exactly as it was (even with beta = 0). */
TEST(sgemm_m_or_n_zero) {
  accel_ctx *ctx = ctx_open(NULL);
  float *a = rnd_floats(64, -1, 1), *b = rnd_floats(64, -1, 1), *c = rnd_floats(64, -1, 1);
  float out[64];
  accel_buffer A = buf_from(ctx, ACCEL_F32, a, 64), B = buf_from(ctx, ACCEL_F32, b, 64);
  accel_buffer C = buf_from(ctx, ACCEL_F32, c, 64);
  struct {
    size_t m, n, k, lda, ldb, ldc;
    float beta;
  } cases[] = {
      {0, 3, 4, 1, 4, 1, 0.0f},                            /* m = 0 */
      {0, 3, 4, 1, 4, 1, 2.0f},  {3, 0, 4, 3, 4, 3, 0.0f}, /* n = 0 */
      {3, 0, 4, 3, 4, 8, -1.0f}, {0, 0, 0, 1, 1, 1, 0.0f},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    accel_future *f = NULL;
    CHECK_OK(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, cases[i].m, cases[i].n, cases[i].k,
                         1.5f, A, cases[i].lda, B, cases[i].ldb, cases[i].beta, C, cases[i].ldc,
                         &f));
    WAIT_OK(f);
    read_sync(ctx, C, 0, out, 64);
    check_bits_equal("sgemm with m or n = 0: C", out, c, 64);
  }
  accel_close(ctx);
  free(a);
  free(b);
  free(c);
}

/* alpha = 0: A and B are not read (NaN there must not reach C); C = beta * C. */
TEST(sgemm_alpha_zero_ignores_ab) {
  accel_ctx *ctx = ctx_open(NULL);
  const size_t m = 5, n = 4, k = 3;
  float nan[20], *c = rnd_floats(m * n, -1, 1), out[20];
  for (size_t i = 0; i < 20; i++)
    nan[i] = NAN;
  accel_buffer A = buf_from(ctx, ACCEL_F32, nan, m * k), B = buf_from(ctx, ACCEL_F32, nan, k * n);
  accel_buffer C = buf_from(ctx, ACCEL_F32, c, m * n);
  accel_future *f = NULL;
  CHECK_OK(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, m, n, k, 0.0f, A, m, B, k, 0.5f, C,
                       m, &f));
  WAIT_OK(f);
  read_sync(ctx, C, 0, out, m * n);
  for (size_t i = 0; i < m * n; i++)
    check_close("sgemm alpha=0: C", i, out[i], 0.5 * c[i], EPS * fabs(0.5 * c[i]));
  accel_close(ctx);
  free(c);
}

/* ---- BLAS-1 --------------------------------------------------------------------------- */

TEST(saxpy_random) {
  accel_ctx *ctx = ctx_open(NULL);
  long iters = test_scaled(20, 6);
  for (long it = 0; it < iters; it++) {
    size_t n = it == 0 ? 1 : rnd_range(1, 5000);
    size_t xn = n + rnd_range(0, 3), yn = n + rnd_range(0, 3);
    float alpha = it == 1 ? 0.0f : rnd_nonzero(-3.0f, 3.0f);
    float *x = rnd_floats(xn, -1, 1), *y = rnd_floats(yn, -1, 1);
    float *xo = xmalloc(xn * sizeof *xo), *yo = xmalloc(yn * sizeof *yo);
    accel_buffer X = buf_from(ctx, ACCEL_F32, x, xn), Y = buf_from(ctx, ACCEL_F32, y, yn);
    accel_future *f = NULL;
    CHECK_OK(accel_saxpy(ctx, it % 2 ? ACCEL_DEVICE_ANY : 0, n, alpha, X, Y, &f));
    WAIT_OK(f);
    read_sync(ctx, Y, 0, yo, yn);
    read_sync(ctx, X, 0, xo, xn);
    for (size_t i = 0; i < n; i++) {
      double ax = (double)alpha * x[i];
      check_close("saxpy y", i, yo[i], y[i] + ax, 2 * EPS * (fabs(y[i]) + fabs(ax)));
    }
    check_bits_equal("saxpy: y beyond n", yo + n, y + n, yn - n);
    check_bits_equal("saxpy: x", xo, x, xn);
    CHECK_OK(accel_buffer_destroy(ctx, X));
    CHECK_OK(accel_buffer_destroy(ctx, Y));
    free(x);
    free(y);
    free(xo);
    free(yo);
  }
  accel_close(ctx);
}

TEST(sdot_random) {
  accel_ctx *ctx = ctx_open(NULL);
  long iters = test_scaled(20, 6);
  for (long it = 0; it < iters; it++) {
    size_t n = it == 0 ? 1 : rnd_range(1, 4096);
    size_t rn = it % 2 ? 3 : 1; /* a longer result buffer: only element 0 changes */
    float *x = rnd_floats(n, -1, 1), *y = rnd_floats(n, -1, 1), *r0 = rnd_floats(rn, 5, 6);
    float r[3];
    accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), Y = buf_from(ctx, ACCEL_F32, y, n);
    accel_buffer R = buf_from(ctx, ACCEL_F32, r0, rn);
    accel_future *f = NULL;
    CHECK_OK(accel_sdot(ctx, 0, n, X, Y, R, &f));
    WAIT_OK(f);
    read_sync(ctx, R, 0, r, rn);
    double s = 0, mag = 0;
    for (size_t i = 0; i < n; i++) {
      s += (double)x[i] * y[i];
      mag += fabs((double)x[i] * y[i]);
    }
    check_close("sdot", n, r[0], s, 4 * sqrt((double)n + 1) * EPS * mag);
    check_bits_equal("sdot: result beyond element 0", r + 1, r0 + 1, rn - 1);
    CHECK_OK(accel_buffer_destroy(ctx, X));
    CHECK_OK(accel_buffer_destroy(ctx, Y));
    CHECK_OK(accel_buffer_destroy(ctx, R));
    free(x);
    free(y);
    free(r0);
  }
  accel_close(ctx);
}

/* n = 0: saxpy leaves y alone, sdot gives 0. */
TEST(blas1_n_zero) {
  accel_ctx *ctx = ctx_open(NULL);
  float *x = rnd_floats(8, -1, 1), *y = rnd_floats(8, -1, 1), r = 7.0f, out[8];
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, 8), Y = buf_from(ctx, ACCEL_F32, y, 8);
  accel_buffer R = buf_from(ctx, ACCEL_F32, &r, 1);
  accel_future *f = NULL;
  CHECK_OK(accel_saxpy(ctx, 0, 0, 2.0f, X, Y, &f));
  WAIT_OK(f);
  read_sync(ctx, Y, 0, out, 8);
  check_bits_equal("saxpy n=0: y", out, y, 8);
  CHECK_OK(accel_sdot(ctx, 0, 0, X, Y, R, &f));
  WAIT_OK(f);
  read_sync(ctx, R, 0, &r, 1);
  CHECK(r == 0.0f);
  accel_close(ctx);
  free(x);
  free(y);
}

/* ---- NN element-wise ------------------------------------------------------------------ */

typedef enum { OP_SIGMOID, OP_RELU, OP_TANH } unary_kind;

static const char *const unary_names[] = {"sigmoid", "relu", "tanh"};

static int unary_call(accel_ctx *ctx, unary_kind k, accel_buffer dst, accel_buffer src,
                      accel_future **f) {
  switch (k) {
  case OP_SIGMOID:
    return accel_sigmoid(ctx, 0, dst, src, f);
  case OP_RELU:
    return accel_relu(ctx, 0, dst, src, f);
  default:
    return accel_tanh(ctx, 0, dst, src, f);
  }
}

static double unary_ref(unary_kind k, double x) {
  switch (k) {
  case OP_SIGMOID:
    return 1.0 / (1.0 + exp(-x));
  case OP_RELU:
    return x > 0 ? x : 0.0;
  default:
    return tanh(x);
  }
}

static void unary_check(unary_kind k, bool in_place, const float *x, const float *y, size_t n) {
  char what[64];
  snprintf(what, sizeof what, "%s (%s)", unary_names[k], in_place ? "in place" : "out of place");
  for (size_t i = 0; i < n; i++) {
    double want = unary_ref(k, x[i]);
    check_close(what, i, y[i], want, k == OP_RELU ? 0.0 : 8 * EPS * fabs(want) + 1e-37);
  }
}

/* Inputs over [-12, 12] plus values where naive formulas overflow or lose everything. */
static float *unary_inputs(size_t n) {
  static const float special[] = {1e-30f,  -1e-30f, 88.0f,    -88.0f, 100.0f,
                                  -100.0f, 1000.0f, -1000.0f, 0.5f,   -3.0f};
  float *x = rnd_floats(n, -12.0f, 12.0f);
  for (size_t i = 0; i < n && i < sizeof special / sizeof special[0]; i++)
    x[rnd_range(0, n - 1)] = special[i];
  return x;
}

TEST(unary_ops) {
  accel_ctx *ctx = ctx_open(NULL);
  for (int k = OP_SIGMOID; k <= OP_TANH; k++) {
    for (int in_place = 0; in_place < 2; in_place++) {
      size_t n = rnd_range(1, 5000);
      float *x = unary_inputs(n), *y = xmalloc(n * sizeof *y), *xo = xmalloc(n * sizeof *xo);
      float *garbage = rnd_floats(n, 50, 60);
      accel_buffer X = buf_from(ctx, ACCEL_F32, x, n);
      accel_buffer Y = in_place ? X : buf_from(ctx, ACCEL_F32, garbage, n);
      accel_future *f = NULL;
      CHECK_OK(unary_call(ctx, (unary_kind)k, Y, X, &f));
      WAIT_OK(f);
      read_sync(ctx, Y, 0, y, n);
      unary_check((unary_kind)k, in_place, x, y, n);
      if (!in_place) { /* the source is left alone */
        read_sync(ctx, X, 0, xo, n);
        check_bits_equal("unary: source", xo, x, n);
        CHECK_OK(accel_buffer_destroy(ctx, Y));
      }
      CHECK_OK(accel_buffer_destroy(ctx, X));
      free(x);
      free(y);
      free(xo);
      free(garbage);
    }
  }
  accel_close(ctx);
}

/* ---- accel_unary: exp, log, sqrt, abs (the others are the shorthands above) ---- */

TEST(unary_math_ops) {
  accel_ctx *ctx = ctx_open(NULL);
  static const accel_unary_op ops[] = {ACCEL_UNARY_EXP, ACCEL_UNARY_LOG, ACCEL_UNARY_SQRT,
                                       ACCEL_UNARY_ABS};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    accel_unary_op op = ops[k];
    size_t n = rnd_range(1, 5000);
    float *x = rnd_floats(n, 0.05f, 8), *y = xmalloc(n * sizeof *y);
    if (op == ACCEL_UNARY_ABS)
      for (size_t i = 0; i < n; i += 2)
        x[i] = -x[i];
    accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), Y = buf_new(ctx, ACCEL_F32, n);
    accel_future *f = NULL;
    CHECK_OK(accel_unary(ctx, 0, op, Y, X, &f));
    WAIT_OK(f);
    read_sync(ctx, Y, 0, y, n);
    for (size_t i = 0; i < n; i++) {
      double want = op == ACCEL_UNARY_EXP    ? exp(x[i])
                    : op == ACCEL_UNARY_LOG  ? log(x[i])
                    : op == ACCEL_UNARY_SQRT ? sqrt(x[i])
                                             : fabs(x[i]);
      double tol = op == ACCEL_UNARY_ABS    ? 0
                   : op == ACCEL_UNARY_SQRT ? EPS / 2 * fabs(want)
                                            : 8 * EPS * fabs(want) + 1e-37;
      check_close("unary math", i, y[i], want, tol);
    }
    CHECK_OK(accel_buffer_destroy(ctx, X));
    CHECK_OK(accel_buffer_destroy(ctx, Y));
    free(x);
    free(y);
  }
  accel_buffer B = buf_new(ctx, ACCEL_F32, 4);
  CHECK_ERR(accel_unary(ctx, 0, (accel_unary_op)(ACCEL_UNARY_ABS + 1), B, B, NULL), ACCEL_EINVAL);
  CHECK_OK(accel_buffer_destroy(ctx, B));
  accel_close(ctx);
}

/* ---- binary ops, broadcast as numpy does ---- */

static const char *const binary_names[] = {"add",    "subtract", "multiply",
                                           "divide", "maximum",  "minimum"};

static double binary_ref(accel_binary_op op, double x, double y) {
  switch (op) {
  case ACCEL_ADD:
    return x + y;
  case ACCEL_SUBTRACT:
    return x - y;
  case ACCEL_MULTIPLY:
    return x * y;
  case ACCEL_DIVIDE:
    return x / y;
  case ACCEL_MAXIMUM:
    return isnan(x) || isnan(y) ? NAN : x > y ? x : y;
  default:
    return isnan(x) || isnan(y) ? NAN : x < y ? x : y;
  }
}

/* dst = a op b, a a rows x cols matrix, b one of: the same, a scalar, a row, a column, the
 * transpose of a cols x rows matrix. Each element against float64. */
static void binary_case(accel_ctx *ctx, accel_binary_op op, int how) {
  size_t rows = rnd_range(1, 40), cols = rnd_range(1, 60), n = rows * cols;
  accel_strides sa = {cols, 1}, sb[] = {{cols, 1}, {0, 0}, {0, 1}, {1, 0}, {1, rows}};
  size_t lb[] = {n, 1, cols, rows, n};
  float *a = rnd_floats(n, 0.5, 4), *b = rnd_floats(lb[how], 0.5, 4), *y = xmalloc(n * 4);
  accel_buffer A = buf_from(ctx, ACCEL_F32, a, n), Bb = buf_from(ctx, ACCEL_F32, b, lb[how]);
  accel_buffer D = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  CHECK_OK(accel_binary(ctx, 0, op, D, rows, cols, A, sa, Bb, sb[how], &f));
  WAIT_OK(f);
  read_sync(ctx, D, 0, y, n);
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      double want = binary_ref(op, a[r * cols + c], b[r * sb[how].row + c * sb[how].col]);
      double tol = op >= ACCEL_MAXIMUM ? 0 : EPS / 2 * fabs(want);
      check_close(binary_names[op], r * cols + c, y[r * cols + c], want, tol);
    }
  CHECK_OK(accel_buffer_destroy(ctx, A));
  CHECK_OK(accel_buffer_destroy(ctx, Bb));
  CHECK_OK(accel_buffer_destroy(ctx, D));
  free(a);
  free(b);
  free(y);
}

TEST(binary_ops_broadcast) {
  accel_ctx *ctx = ctx_open(NULL);
  for (int op = ACCEL_ADD; op <= ACCEL_MINIMUM; op++)
    for (int how = 0; how < 5; how++)
      binary_case(ctx, (accel_binary_op)op, how);
  accel_close(ctx);
}

/* In place where the input is read in step; maximum and minimum give NaN for a NaN either
 * side; refused: dst read out of step, rows x cols past dst, strides past an input's end (one
 * element past, after one at the limit), an unknown op, mixed dtypes. */
TEST(binary_in_place_nan_and_limits) {
  accel_ctx *ctx = ctx_open(NULL);
  float x[6] = {1, NAN, 3, -4, 5, 6}, y[6] = {2, 2, NAN, -5, 4, 7}, got[6];
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, 6), Y = buf_from(ctx, ACCEL_F32, y, 6);
  accel_strides full = {3, 1}, row = {0, 1};
  accel_future *f = NULL;
  CHECK_OK(accel_binary(ctx, 0, ACCEL_MAXIMUM, X, 2, 3, X, full, Y, full, &f));
  WAIT_OK(f);
  read_sync(ctx, X, 0, got, 6);
  for (size_t i = 0; i < 6; i++)
    if (i != 1 && i != 2)
      check_close("maximum in place", i, got[i], binary_ref(ACCEL_MAXIMUM, x[i], y[i]), 0);
  CHECK(isnan(got[1]) && isnan(got[2])); /* NaN on either side */
  CHECK_ERR(accel_binary(ctx, 0, ACCEL_ADD, X, 2, 3, Y, full, X, row, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_binary(ctx, 0, ACCEL_ADD, Y, 2, 4, X, full, X, full, NULL), ACCEL_EINVAL);
  accel_strides last = {2, 1}; /* spans 1 * 2 + 2 + 1 = 5 of 6 */
  CHECK_OK(accel_binary(ctx, 0, ACCEL_ADD, Y, 2, 3, X, (accel_strides){3, 1}, X, last, &f));
  WAIT_OK(f);
  CHECK_ERR(accel_binary(ctx, 0, ACCEL_ADD, Y, 2, 3, X, full, X, (accel_strides){4, 1}, NULL),
            ACCEL_EINVAL);
  CHECK_ERR(accel_binary(ctx, 0, (accel_binary_op)(ACCEL_MINIMUM + 1), Y, 2, 3, X, full, X, full,
                         NULL),
            ACCEL_EINVAL);
  accel_buffer Z = buf_new(ctx, ACCEL_F64, 6);
  CHECK_ERR(accel_binary(ctx, 0, ACCEL_ADD, Z, 2, 3, X, full, X, full, NULL), ACCEL_EINVAL);
  CHECK_OK(accel_buffer_destroy(ctx, Z));
  CHECK_OK(accel_buffer_destroy(ctx, X));
  CHECK_OK(accel_buffer_destroy(ctx, Y));
  accel_close(ctx);
}

/* ---- integers, comparisons and where: exact answers ---- */

static const accel_strides how_strides[5] = {{0, 0}, {0, 0}, {0, 1}, {1, 0}, {1, 0}};

/* An input read as `how` for a rows x cols result: 0 the same shape, 1 a scalar, 2 a row, 3 a
 * column, 4 the transpose of a cols x rows matrix; its strides and element count. */
static accel_strides strides_for(int how, size_t rows, size_t cols, size_t *len) {
  size_t lens[5] = {rows * cols, 1, cols, rows, rows * cols};
  *len = lens[how];
  return how == 0   ? (accel_strides){cols, 1}
         : how == 4 ? (accel_strides){1, rows}
                    : how_strides[how];
}

static uint32_t *rnd_bits(size_t n) {
  uint32_t *x = xmalloc(n * 4 + 4);
  for (size_t i = 0; i < n; i++)
    x[i] = (uint32_t)(rnd64() >> 17);
  return x;
}

static int64_t int_value(accel_dtype t, uint32_t bits) {
  return t == ACCEL_I32 ? (int64_t)(int32_t)bits : (int64_t)bits;
}

static uint32_t int_ref(accel_binary_op op, int64_t x, int64_t y) {
  switch (op) {
  case ACCEL_ADD:
    return (uint32_t)(uint64_t)(x + y);
  case ACCEL_SUBTRACT:
    return (uint32_t)(uint64_t)(x - y);
  case ACCEL_MULTIPLY:
    return (uint32_t)((uint64_t)x * (uint64_t)y); /* mod 2^32, as numpy's int32 wraps */
  case ACCEL_MAXIMUM:
    return (uint32_t)(x > y ? x : y);
  default:
    return (uint32_t)(x < y ? x : y);
  }
}

/* I32 and U32: every op but divide, a the matrix and b each way, random bits (overflow
 * everywhere), exact. */
TEST(int_binary_ops_wrap) {
  accel_ctx *ctx = ctx_open(NULL);
  static const accel_dtype ts[] = {ACCEL_I32, ACCEL_U32};
  for (int k = 0; k < 2; k++)
    for (int op = ACCEL_ADD; op <= ACCEL_MINIMUM; op++)
      for (int how = 0; how < 5; how++) {
        if (op == ACCEL_DIVIDE)
          continue;
        size_t rows = rnd_range(1, 40), cols = rnd_range(1, 60), n = rows * cols, lb;
        accel_strides sb = strides_for(how, rows, cols, &lb);
        uint32_t *a = rnd_bits(n), *b = rnd_bits(lb), *y = xmalloc(n * 4);
        accel_buffer A = buf_from(ctx, ts[k], a, n), Bb = buf_from(ctx, ts[k], b, lb);
        accel_buffer D = buf_new(ctx, ts[k], n);
        accel_future *f = NULL;
        CHECK_OK(accel_binary(ctx, 0, (accel_binary_op)op, D, rows, cols, A,
                              (accel_strides){cols, 1}, Bb, sb, &f));
        WAIT_OK(f);
        read_sync(ctx, D, 0, y, n);
        for (size_t r = 0; r < rows; r++)
          for (size_t c = 0; c < cols; c++) {
            uint32_t want = int_ref((accel_binary_op)op, int_value(ts[k], a[r * cols + c]),
                                    int_value(ts[k], b[r * sb.row + c * sb.col]));
            if (y[r * cols + c] != want)
              TEST_FAIL("%s %s [%zu, %zu]: got %u, want %u", ts[k] == ACCEL_I32 ? "i32" : "u32",
                        binary_names[op], r, c, y[r * cols + c], want);
          }
        CHECK_OK(accel_buffer_destroy(ctx, A));
        CHECK_OK(accel_buffer_destroy(ctx, Bb));
        CHECK_OK(accel_buffer_destroy(ctx, D));
        free(a), free(b), free(y);
      }
  accel_close(ctx);
}

static const char *const compare_names[] = {"equal",      "not_equal", "less",
                                            "less_equal", "greater",   "greater_equal"};

static bool compare_ref(accel_compare_op op, double x, double y) {
  switch (op) {
  case ACCEL_EQUAL:
    return x == y;
  case ACCEL_NOT_EQUAL:
    return x != y;
  case ACCEL_LESS:
    return x < y;
  case ACCEL_LESS_EQUAL:
    return x <= y;
  case ACCEL_GREATER:
    return x > y;
  default:
    return x >= y;
  }
}

/* Values from a handful, so that pairs tie; NaN planted in floats; raw bits in out. */
static double tie_value(accel_dtype t, void *out, size_t i) {
  uint64_t r = rnd64();
  double v = (double)(int)(r % 7) - 3.0;
  switch (t) {
  case ACCEL_F32: {
    float x = r % 9 == 0 ? NAN : (float)(v + (r % 5 == 0 ? 0.5 : 0));
    memcpy((char *)out + 4 * i, &x, 4);
    return x;
  }
  case ACCEL_F64: {
    double x = r % 9 == 0 ? NAN : v + (r % 5 == 0 ? 1e-300 : 0);
    memcpy((char *)out + 8 * i, &x, 8);
    return x;
  }
  case ACCEL_I32: {
    int32_t x = r % 4 == 0 ? (int32_t)(r >> 32) : (int32_t)v;
    memcpy((char *)out + 4 * i, &x, 4);
    return x;
  }
  default: {
    uint32_t x = r % 4 == 0 ? (uint32_t)(r >> 32) : (uint32_t)(r % 7);
    memcpy((char *)out + 4 * i, &x, 4);
    return x;
  }
  }
}

/* Every comparison in F32, F64, I32, U32, b each way, against the C comparisons in float64
 * (exact for every value of these types); the byte past dst untouched. */
TEST(compare_ops_broadcast_and_nan) {
  accel_ctx *ctx = ctx_open(NULL);
  static const accel_dtype ts[] = {ACCEL_F32, ACCEL_F64, ACCEL_I32, ACCEL_U32};
  for (int k = 0; k < 4; k++)
    for (int op = ACCEL_EQUAL; op <= ACCEL_GREATER_EQUAL; op++)
      for (int how = 0; how < 5; how++) {
        size_t rows = rnd_range(1, 40), cols = rnd_range(1, 60), n = rows * cols, lb;
        size_t es = ts[k] == ACCEL_F64 ? 8 : 4;
        accel_strides sb = strides_for(how, rows, cols, &lb);
        uint8_t *a = xmalloc(n * es), *b = xmalloc(lb * es), *y = xmalloc(n + 1);
        double *av = xmalloc(n * 8), *bv = xmalloc(lb * 8);
        for (size_t i = 0; i < n; i++)
          av[i] = tie_value(ts[k], a, i);
        for (size_t i = 0; i < lb; i++)
          bv[i] = tie_value(ts[k], b, i);
        accel_buffer A = buf_from(ctx, ts[k], a, n), Bb = buf_from(ctx, ts[k], b, lb);
        accel_buffer D = buf_new(ctx, ACCEL_BOOL, n + 1);
        accel_future *f = NULL;
        CHECK_OK(accel_fill(ctx, 0, D, 1.0, NULL));
        CHECK_OK(accel_compare(ctx, 0, (accel_compare_op)op, D, rows, cols, A,
                               (accel_strides){cols, 1}, Bb, sb, &f));
        WAIT_OK(f);
        read_sync(ctx, D, 0, y, n + 1);
        for (size_t r = 0; r < rows; r++)
          for (size_t c = 0; c < cols; c++) {
            double x = av[r * cols + c], z = bv[r * sb.row + c * sb.col];
            if (y[r * cols + c] != compare_ref((accel_compare_op)op, x, z))
              TEST_FAIL("%s(%g, %g) [dtype %d, %zu, %zu] gave %u", compare_names[op], x, z, ts[k],
                        r, c, y[r * cols + c]);
          }
        CHECK_EQ(y[n], 1); /* past dst's rows x cols */
        CHECK_OK(accel_buffer_destroy(ctx, A));
        CHECK_OK(accel_buffer_destroy(ctx, Bb));
        CHECK_OK(accel_buffer_destroy(ctx, D));
        free(a), free(b), free(y), free(av), free(bv);
      }
  accel_close(ctx);
}

/* dst = cond ? a : b in F32, F64 and BOOL with cond, a and b each read their own way (cond
 * bytes above 1 are true); bit for bit. */
TEST(where_broadcast) {
  accel_ctx *ctx = ctx_open(NULL);
  static const accel_dtype ts[] = {ACCEL_F32, ACCEL_F64, ACCEL_BOOL};
  for (int k = 0; k < 3; k++)
    for (int how = 0; how < 5; how++) {
      size_t rows = rnd_range(1, 40), cols = rnd_range(1, 60), n = rows * cols, lc, la, lb;
      size_t es = ts[k] == ACCEL_F64 ? 8 : ts[k] == ACCEL_BOOL ? 1 : 4;
      accel_strides sc = strides_for(how, rows, cols, &lc);
      accel_strides sa = strides_for((how + 1) % 5, rows, cols, &la);
      accel_strides sb = strides_for((how + 3) % 5, rows, cols, &lb);
      uint8_t *c = xmalloc(lc), *a = xmalloc(la * es), *b = xmalloc(lb * es), *y = xmalloc(n * es);
      for (size_t i = 0; i < lc; i++)
        c[i] = (uint8_t)(rnd64() % 3 == 0 ? 0 : rnd_range(1, 255));
      for (size_t i = 0; i < la * es; i++)
        a[i] = ts[k] == ACCEL_BOOL ? (uint8_t)(rnd64() & 1) : (uint8_t)rnd64();
      for (size_t i = 0; i < lb * es; i++)
        b[i] = ts[k] == ACCEL_BOOL ? (uint8_t)(rnd64() & 1) : (uint8_t)rnd64();
      accel_buffer C = buf_from(ctx, ACCEL_BOOL, c, lc), A = buf_from(ctx, ts[k], a, la);
      accel_buffer Bb = buf_from(ctx, ts[k], b, lb), D = buf_new(ctx, ts[k], n);
      accel_future *f = NULL;
      CHECK_OK(accel_where(ctx, 0, D, rows, cols, C, sc, A, sa, Bb, sb, &f));
      WAIT_OK(f);
      read_sync(ctx, D, 0, y, n);
      for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) {
          bool pick = c[r * sc.row + j * sc.col] != 0;
          const uint8_t *want = pick ? a + (r * sa.row + j * sa.col) * es
                                     : b + (r * sb.row + j * sb.col) * es;
          if (memcmp(y + (r * cols + j) * es, want, es) != 0)
            TEST_FAIL("where dtype %d [%zu, %zu]: not %s's element", ts[k], r, j, pick ? "a" : "b");
        }
      CHECK_OK(accel_buffer_destroy(ctx, C));
      CHECK_OK(accel_buffer_destroy(ctx, A));
      CHECK_OK(accel_buffer_destroy(ctx, Bb));
      CHECK_OK(accel_buffer_destroy(ctx, D));
      free(c), free(a), free(b), free(y);
    }
  accel_close(ctx);
}

/* ---- convert ---- */

/* f32 values that meet the rules: truncation, NaN, infinities, the integer limits. */
static float conv_value(void) {
  static const float special[] = {0.5f,          -0.5f,         -0.99f,        2.5f,
                                  -1.0f,         NAN,           INFINITY,      -INFINITY,
                                  2147483648.0f, -2147483904.f, 4294967296.0f, 3e9f};
  uint64_t r = rnd64();
  if (r % 4 == 0)
    return special[(r >> 8) % (sizeof special / sizeof special[0])];
  return (float)(((double)(r >> 11) * 0x1p-53 - 0.5) * 1e4);
}

/* f32 through the transpose (and the matrix itself) into i32, u32, bool and f64: every
 * element exact against a reference in double (saturating truncation, NaN 0; != 0). */
TEST(convert_f32_views) {
  accel_ctx *ctx = ctx_open(NULL);
  static const accel_dtype to[] = {ACCEL_I32, ACCEL_U32, ACCEL_BOOL, ACCEL_F64};
  for (int k = 0; k < 4; k++)
    for (int t = 0; t < 2; t++) {
      size_t rows = rnd_range(1, 40), cols = rnd_range(1, 60), n = rows * cols;
      float *x = xmalloc(n * sizeof *x);
      for (size_t i = 0; i < n; i++)
        x[i] = conv_value();
      /* t: the view is the transpose of a cols x rows matrix */
      accel_strides s = t ? (accel_strides){1, rows} : (accel_strides){cols, 1};
      size_t es = to[k] == ACCEL_F64 ? 8 : to[k] == ACCEL_BOOL ? 1 : 4;
      uint8_t *y = xmalloc(n * es);
      accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), Y = buf_new(ctx, to[k], n);
      accel_future *f = NULL;
      CHECK_OK(accel_convert(ctx, 0, Y, rows, cols, X, s, &f));
      WAIT_OK(f);
      read_sync(ctx, Y, 0, y, n);
      for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
          double v = x[r * s.row + c * s.col], want, got;
          size_t i = r * cols + c;
          double lo = to[k] == ACCEL_I32 ? -2147483648.0 : 0.0;
          double hi = to[k] == ACCEL_I32 ? 2147483647.0 : 4294967295.0;
          if (to[k] == ACCEL_BOOL) {
            want = v != 0.0;
            got = y[i];
          } else if (to[k] == ACCEL_F64) {
            want = v;
            memcpy(&got, y + 8 * i, 8);
          } else {
            want = v != v ? 0.0 : v < lo ? lo : v > hi ? hi : trunc(v);
            uint32_t u;
            memcpy(&u, y + 4 * i, 4);
            got = to[k] == ACCEL_I32 ? (double)(int32_t)u : (double)u;
          }
          if (!(got == want || (want != want && got != got)))
            TEST_FAIL("convert f32 -> dtype %d [%zu, %zu]: %.9g gave %.17g", to[k], r, c, v, got);
        }
      CHECK_OK(accel_buffer_destroy(ctx, X));
      CHECK_OK(accel_buffer_destroy(ctx, Y));
      free(x), free(y);
    }
  accel_close(ctx);
}

/* i32 -> u32 wraps, u32 -> i32 wraps, i32 -> f16 rounds once (65519 and 65520 meet the top). */
TEST(convert_ints) {
  accel_ctx *ctx = ctx_open(NULL);
  enum { N = 6 };
  int32_t a[N] = {-1, INT32_MIN, INT32_MAX, 65519, 65520, -2049};
  uint32_t b[N];
  accel_buffer A = buf_from(ctx, ACCEL_I32, a, N), U = buf_new(ctx, ACCEL_U32, N);
  accel_buffer H = buf_new(ctx, ACCEL_F16, N), Back = buf_new(ctx, ACCEL_I32, N);
  accel_strides row = {N, 1};
  CHECK_OK(accel_convert(ctx, 0, U, 1, N, A, row, NULL));
  CHECK_OK(accel_convert(ctx, 0, Back, 1, N, U, row, NULL));
  CHECK_OK(accel_convert(ctx, 0, H, 1, N, A, row, NULL));
  read_sync(ctx, U, 0, b, N);
  for (int i = 0; i < N; i++)
    CHECK_EQ(b[i], (uint32_t)a[i]);
  int32_t back[N];
  read_sync(ctx, Back, 0, back, N);
  for (int i = 0; i < N; i++)
    CHECK_EQ(back[i], a[i]);
  uint16_t h[N];
  read_sync(ctx, H, 0, h, N);
  /* -1, -inf, +inf, 65504 (65519 rounds down), +inf (65520 is the tie past the top), -2048
   * (-2049 is a tie between -2048 and -2050: to even) */
  static const uint16_t want[N] = {0xbc00, 0xfc00, 0x7c00, 0x7bff, 0x7c00, 0xe800};
  for (int i = 0; i < N; i++)
    if (h[i] != want[i])
      TEST_FAIL("i32 %d -> f16 gave 0x%04x, not 0x%04x", a[i], h[i], want[i]);
  CHECK_OK(accel_buffer_destroy(ctx, A));
  CHECK_OK(accel_buffer_destroy(ctx, U));
  CHECK_OK(accel_buffer_destroy(ctx, H));
  CHECK_OK(accel_buffer_destroy(ctx, Back));
  accel_close(ctx);
}

/* Refused, saying why: dst one element short (after one at the limit), the view one past
 * src's end, dst being src. */
TEST(convert_refusals) {
  accel_ctx *ctx = ctx_open(NULL);
  accel_buffer S = buf_new(ctx, ACCEL_F32, 12), D = buf_new(ctx, ACCEL_BF16, 6);
  CHECK_OK(accel_fill(ctx, 0, S, 1.5, NULL));
  accel_strides t = {1, 2}; /* the transpose of a 6 x 2 matrix: 12 elements */
  CHECK_OK(accel_convert(ctx, 0, D, 3, 2, S, (accel_strides){4, 1}, NULL)); /* spans 10 */
  CHECK_ERR(accel_convert(ctx, 0, D, 7, 1, S, (accel_strides){1, 1}, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "dst") != NULL);
  accel_buffer E = buf_new(ctx, ACCEL_BF16, 12);
  CHECK_OK(accel_convert(ctx, 0, E, 2, 6, S, (accel_strides){6, 1}, NULL)); /* spans 12 */
  CHECK_ERR(accel_convert(ctx, 0, E, 2, 6, S, (accel_strides){7, 1}, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "src") != NULL);
  CHECK_OK(accel_convert(ctx, 0, E, 2, 6, S, t, NULL));
  CHECK_ERR(accel_convert(ctx, 0, S, 2, 6, S, (accel_strides){6, 1}, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "dst is src") != NULL);
  uint16_t e[12];
  read_sync(ctx, E, 0, e, 12);
  for (int i = 0; i < 12; i++)
    CHECK_EQ(e[i], 0x3fc0); /* 1.5 in bf16 */
  CHECK_OK(accel_buffer_destroy(ctx, S));
  CHECK_OK(accel_buffer_destroy(ctx, D));
  CHECK_OK(accel_buffer_destroy(ctx, E));
  accel_close(ctx);
}

/* Refused, each saying why: integer divide; a compare's dst not BOOL, its inputs of two
 * dtypes or BOOL; where's cond not BOOL, its a of another dtype than dst; dst, cond and the
 * inputs one element past their end (after one at the limit); ops one past the last. */
TEST(int_compare_where_refusals) {
  accel_ctx *ctx = ctx_open(NULL);
  accel_buffer I = buf_new(ctx, ACCEL_I32, 6), U = buf_new(ctx, ACCEL_U32, 6);
  accel_buffer F = buf_new(ctx, ACCEL_F32, 6), M = buf_new(ctx, ACCEL_BOOL, 6);
  accel_strides full = {3, 1};
  accel_future *f = NULL;
  CHECK_OK(accel_fill(ctx, 0, I, -2.0, NULL));
  CHECK_OK(accel_fill(ctx, 0, F, 0.5, NULL));
  CHECK_ERR(accel_binary(ctx, 0, ACCEL_DIVIDE, I, 2, 3, I, full, I, full, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "divide") != NULL);
  CHECK_ERR(accel_binary(ctx, 0, ACCEL_DIVIDE, U, 2, 3, U, full, U, full, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_binary(ctx, 0, ACCEL_ADD, I, 2, 3, I, full, U, full, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "different dtypes") != NULL);
  CHECK_ERR(accel_binary(ctx, 0, ACCEL_ADD, M, 2, 3, M, full, M, full, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "bool") != NULL);
  CHECK_ERR(accel_compare(ctx, 0, ACCEL_LESS, F, 2, 3, F, full, F, full, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "dst is f32") != NULL);
  CHECK_ERR(accel_compare(ctx, 0, ACCEL_LESS, M, 2, 3, I, full, F, full, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "different dtypes") != NULL);
  CHECK_ERR(accel_compare(ctx, 0, ACCEL_EQUAL, M, 2, 3, M, full, M, full, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_compare(ctx, 0, (accel_compare_op)(ACCEL_GREATER_EQUAL + 1), M, 2, 3, I, full, I,
                          full, NULL),
            ACCEL_EINVAL);
  CHECK_ERR(accel_binary(ctx, 0, (accel_binary_op)(ACCEL_MINIMUM + 1), I, 2, 3, I, full, I, full,
                         NULL),
            ACCEL_EINVAL);
  /* dst of 6 bytes: 2 x 3 at the limit, 2 x 4 past it; b spans 1 * 2 + 2 + 1 = 5 of 6, 4 apart
   * 4 + 2 + 1 = 7. */
  CHECK_OK(accel_compare(ctx, 0, ACCEL_LESS, M, 2, 3, I, full, I, (accel_strides){2, 1}, &f));
  WAIT_OK(f);
  CHECK_ERR(accel_compare(ctx, 0, ACCEL_LESS, M, 2, 4, I, (accel_strides){0, 1}, I,
                          (accel_strides){0, 0}, NULL),
            ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "dst") != NULL);
  CHECK_ERR(accel_compare(ctx, 0, ACCEL_LESS, M, 2, 3, I, full, I, (accel_strides){4, 1}, NULL),
            ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "b at its strides") != NULL);
  CHECK_ERR(accel_where(ctx, 0, F, 2, 3, I, full, F, full, F, full, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "cond is i32") != NULL);
  CHECK_ERR(accel_where(ctx, 0, F, 2, 3, M, full, I, full, F, full, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "different dtypes") != NULL);
  CHECK_OK(accel_where(ctx, 0, F, 2, 3, M, (accel_strides){2, 1}, F, full, F, full, &f));
  WAIT_OK(f);
  CHECK_ERR(accel_where(ctx, 0, F, 2, 3, M, (accel_strides){4, 1}, F, full, F, full, NULL),
            ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "cond at its strides") != NULL);
  CHECK_ERR(accel_where(ctx, 0, F, 2, 4, M, (accel_strides){0, 0}, F, (accel_strides){0, 0}, F,
                        (accel_strides){0, 0}, NULL),
            ACCEL_EINVAL);
  CHECK_ERR(accel_where(ctx, 0, F, 2, 3, M, full, F, full, F, (accel_strides){4, 1}, NULL),
            ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "b at its strides") != NULL);
  CHECK_ERR(accel_where(ctx, 0, F, 2, 3, M, full, F, (accel_strides){0, 1}, F, full, NULL),
            ACCEL_EINVAL); /* dst is a, read out of step */
  CHECK(strstr(accel_last_error_detail(), "other strides") != NULL);
  CHECK_OK(accel_buffer_destroy(ctx, I));
  CHECK_OK(accel_buffer_destroy(ctx, U));
  CHECK_OK(accel_buffer_destroy(ctx, F));
  CHECK_OK(accel_buffer_destroy(ctx, M));
  accel_close(ctx);
}

/* ---- reductions of a strided view ---- */

/* op over the elements of output o of a rows x cols view (strides s) in float64, and the sum
 * of magnitudes. */
static double reduction_ref(accel_reduction_op op, accel_axis axis, const float *x, size_t rows,
                            size_t cols, accel_strides s, size_t o, double *mag, size_t *len) {
  size_t r0 = axis == ACCEL_AXIS_COLS ? o : 0, r1 = axis == ACCEL_AXIS_COLS ? o + 1 : rows;
  size_t c0 = axis == ACCEL_AXIS_ROWS ? o : 0, c1 = axis == ACCEL_AXIS_ROWS ? o + 1 : cols;
  double acc = op == ACCEL_MAX ? -INFINITY : op == ACCEL_MIN ? INFINITY : 0;
  bool nan = false;
  *mag = 0;
  *len = (r1 - r0) * (c1 - c0);
  for (size_t r = r0; r < r1; r++)
    for (size_t c = c0; c < c1; c++) {
      double v = x[r * s.row + c * s.col];
      nan |= isnan(v);
      *mag += fabs(v);
      acc = op == ACCEL_MAX ? fmax(acc, v) : op == ACCEL_MIN ? fmin(acc, v) : acc + v;
    }
  if (nan)
    return NAN;
  return op == ACCEL_MEAN ? acc / (double)*len : acc;
}

/* One reduction of a random rows x cols f32 view, row-major or transposed, NaN planted at one
 * element when `nan`; each output against float64. */
static void reduction_case(accel_ctx *ctx, accel_reduction_op op, accel_axis axis, bool transposed,
                           bool nan) {
  size_t rows = rnd_range(1, 60), cols = rnd_range(1, 80), n = rows * cols;
  accel_strides s = transposed ? (accel_strides){1, rows} : (accel_strides){cols, 1};
  size_t nout = axis == ACCEL_AXIS_ALL ? 1 : axis == ACCEL_AXIS_ROWS ? cols : rows;
  float *x = rnd_floats(n, 0.5, 4), *y = xmalloc((nout + 1) * 4);
  if (nan)
    x[rnd_range(0, n - 1)] = NAN;
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), D = buf_new(ctx, ACCEL_F32, nout + 1);
  accel_future *f = NULL;
  CHECK_OK(accel_fill(ctx, 0, D, 7.0, NULL));
  CHECK_OK(accel_reduction(ctx, 0, op, D, rows, cols, X, s, axis, &f));
  WAIT_OK(f);
  read_sync(ctx, D, 0, y, nout + 1);
  for (size_t o = 0; o < nout; o++) {
    double mag;
    size_t len;
    double want = reduction_ref(op, axis, x, rows, cols, s, o, &mag, &len);
    if (isnan(want) || isnan(y[o])) {
      if (isnan(want) != isnan(y[o]))
        TEST_FAIL("reduction %d axis %d [%zu]: got %g, want %g", op, axis, o, y[o], want);
      continue;
    }
    double tol = op == ACCEL_MAX || op == ACCEL_MIN
                     ? 0
                     : len * EPS * mag / (op == ACCEL_MEAN ? (double)len : 1) + EPS * fabs(want);
    check_close("reduction", o, y[o], want, tol);
  }
  CHECK(y[nout] == 7.0f); /* past the outputs: untouched */
  CHECK_OK(accel_buffer_destroy(ctx, X));
  CHECK_OK(accel_buffer_destroy(ctx, D));
  free(x);
  free(y);
}

TEST(reductions_random) {
  accel_ctx *ctx = ctx_open(NULL);
  for (int op = ACCEL_SUM; op <= ACCEL_MEAN; op++)
    for (int axis = ACCEL_AXIS_ALL; axis <= ACCEL_AXIS_COLS; axis++)
      for (int how = 0; how < 3; how++)
        reduction_case(ctx, (accel_reduction_op)op, (accel_axis)axis, how == 1, how == 2);
  accel_close(ctx);
}

/* Sum 0 and mean NaN of nothing; max of nothing refused with the reason; refused: dst one
 * element short (after one at the limit), the view one element past src (after one at the
 * limit), dst being src, mixed dtypes, an op or axis past the last. */
TEST(reduction_empty_and_limits) {
  accel_ctx *ctx = ctx_open(NULL);
  float x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, got[4];
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, 12), D = buf_new(ctx, ACCEL_F32, 4);
  accel_strides full = {4, 1};
  accel_future *f = NULL;
  CHECK_OK(accel_fill(ctx, 0, D, 7.0, NULL));
  CHECK_OK(accel_reduction(ctx, 0, ACCEL_SUM, D, 0, 4, X, full, ACCEL_AXIS_ALL, &f));
  WAIT_OK(f);
  read_sync(ctx, D, 0, got, 4);
  CHECK(got[0] == 0 && got[1] == 7);
  CHECK_OK(accel_reduction(ctx, 0, ACCEL_MEAN, D, 2, 0, X, full, ACCEL_AXIS_COLS, &f));
  WAIT_OK(f); /* two rows of nothing */
  read_sync(ctx, D, 0, got, 4);
  CHECK(isnan(got[0]) && isnan(got[1]) && got[2] == 7);
  CHECK_ERR(accel_reduction(ctx, 0, ACCEL_MAX, D, 0, 4, X, full, ACCEL_AXIS_ALL, NULL),
            ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "no elements") != NULL);
  /* Columns of a 3 x 4 matrix: 4 outputs, dst of 4 at the limit; 5 is one past. */
  CHECK_OK(accel_reduction(ctx, 0, ACCEL_MIN, D, 3, 4, X, full, ACCEL_AXIS_ROWS, &f));
  WAIT_OK(f);
  read_sync(ctx, D, 0, got, 4);
  for (size_t c = 0; c < 4; c++)
    check_close("min of a column", c, got[c], x[c], 0);
  CHECK_ERR(accel_reduction(ctx, 0, ACCEL_MIN, D, 3, 5, X, (accel_strides){5, 1}, ACCEL_AXIS_ROWS,
                            NULL),
            ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "dst") != NULL);
  /* Rows 5 apart: 2 * 5 + 1 + 1 = 12 elements of 12 at the limit; 6 apart is one past. */
  CHECK_OK(
      accel_reduction(ctx, 0, ACCEL_SUM, D, 3, 2, X, (accel_strides){5, 1}, ACCEL_AXIS_ALL, &f));
  WAIT_OK(f);
  read_sync(ctx, D, 0, got, 1);
  check_close("sum at the limit", 0, got[0], 1 + 2 + 6 + 7 + 11 + 12, 0);
  CHECK_ERR(accel_reduction(ctx, 0, ACCEL_SUM, D, 3, 2, X, (accel_strides){6, 0}, ACCEL_AXIS_ALL,
                            NULL),
            ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "src at its strides") != NULL);
  CHECK_ERR(accel_reduction(ctx, 0, ACCEL_SUM, X, 3, 4, X, full, ACCEL_AXIS_ALL, NULL),
            ACCEL_EINVAL);
  accel_buffer Z = buf_new(ctx, ACCEL_F64, 4);
  CHECK_ERR(accel_reduction(ctx, 0, ACCEL_SUM, Z, 3, 4, X, full, ACCEL_AXIS_ALL, NULL),
            ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "different dtypes") != NULL);
  CHECK_ERR(accel_reduction(ctx, 0, (accel_reduction_op)(ACCEL_MEAN + 1), D, 3, 4, X, full,
                            ACCEL_AXIS_ALL, NULL),
            ACCEL_EINVAL);
  CHECK_ERR(accel_reduction(ctx, 0, ACCEL_SUM, D, 3, 4, X, full, (accel_axis)(ACCEL_AXIS_COLS + 1),
                            NULL),
            ACCEL_EINVAL);
  CHECK_OK(accel_buffer_destroy(ctx, Z));
  CHECK_OK(accel_buffer_destroy(ctx, X));
  CHECK_OK(accel_buffer_destroy(ctx, D));
  accel_close(ctx);
}

static void softmax_ref(const float *x, double *y, size_t rows, size_t cols) {
  for (size_t r = 0; r < rows; r++) {
    const float *row = x + r * cols;
    double max = row[0], sum = 0;
    for (size_t j = 1; j < cols; j++)
      max = row[j] > max ? row[j] : max;
    for (size_t j = 0; j < cols; j++)
      sum += y[r * cols + j] = exp((double)row[j] - max);
    for (size_t j = 0; j < cols; j++)
      y[r * cols + j] /= sum;
  }
}

static void softmax_check(const float *x, const float *y, size_t rows, size_t cols) {
  double *ref = xmalloc(rows * cols * sizeof *ref);
  softmax_ref(x, ref, rows, cols);
  for (size_t r = 0; r < rows; r++) {
    double sum = 0;
    for (size_t j = 0; j < cols; j++) {
      size_t i = r * cols + j;
      if (!(y[i] >= 0.0f && y[i] <= 1.0f))
        TEST_FAIL("softmax[%zu] = %g: not in [0, 1]", i, (double)y[i]);
      check_close("softmax", i, y[i], ref[i], 2e-5 * ref[i] + 1e-7);
      sum += y[i];
    }
    check_close("softmax row sum", r, sum, 1.0, (double)cols * 2 * EPS + 1e-6);
  }
  free(ref);
}

/* Random shapes, in place and not, with rows of huge and tiny inputs mixed in; a longer
 * destination keeps its tail. */
TEST(softmax_random) {
  accel_ctx *ctx = ctx_open(NULL);
  long iters = test_scaled(12, 4);
  for (long it = 0; it < iters; it++) {
    bool in_place = it % 2;
    size_t rows = it < 2 ? 1 : rnd_range(1, 40), cols = it == 2 ? 1 : rnd_range(1, 300);
    size_t n = rows * cols, extra = in_place ? 0 : rnd_range(0, 5);
    float *x = rnd_floats(n, -10.0f, 10.0f), *y = xmalloc((n + extra) * sizeof *y);
    float *y0 = rnd_floats(n + extra, 2.0f, 3.0f);
    for (size_t j = 0; j < cols && rows > 1; j++) {
      x[j] = 1000.0f + rnd_float(-5.0f, 5.0f);         /* exp(1000) overflows a double */
      x[cols + j] = -1000.0f + rnd_float(-5.0f, 5.0f); /* and exp(-1000) underflows */
    }
    accel_buffer X = buf_from(ctx, ACCEL_F32, x, n);
    accel_buffer Y = in_place ? X : buf_from(ctx, ACCEL_F32, y0, n + extra);
    accel_future *f = NULL;
    CHECK_OK(accel_softmax(ctx, 0, Y, X, rows, cols, &f));
    WAIT_OK(f);
    read_sync(ctx, Y, 0, y, n + extra);
    softmax_check(x, y, rows, cols);
    check_bits_equal("softmax: destination beyond rows x cols", y + n, y0 + n, extra);
    CHECK_OK(accel_buffer_destroy(ctx, X));
    if (!in_place)
      CHECK_OK(accel_buffer_destroy(ctx, Y));
    free(x);
    free(y);
    free(y0);
  }
  accel_close(ctx);
}

TEST(softmax_large_inputs) {
  accel_ctx *ctx = ctx_open(NULL);
  float x[] = {1000,   1000,  1000,  1000,   /* equal: 1/4 each */
               1000,   0,     -1000, 999,    /* exp(1000) would be inf */
               88.75f, 89,    100,   -100,   /* exp(89) overflows a float */
               -1000,  -1000, -999,  -1001}; /* exp(-1000) is 0 even in double */
  float y[16];
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, 16), Y = buf_new(ctx, ACCEL_F32, 16);
  accel_future *f = NULL;
  CHECK_OK(accel_softmax(ctx, 0, Y, X, 4, 4, &f));
  WAIT_OK(f);
  read_sync(ctx, Y, 0, y, 16);
  for (size_t i = 0; i < 16; i++)
    if (!isfinite(y[i]))
      TEST_FAIL("softmax of large inputs: y[%zu] = %g", i, (double)y[i]);
  softmax_check(x, y, 4, 4);
  CHECK(y[0] == 0.25f && y[3] == 0.25f);
  accel_close(ctx);
}

/* ---- fill, copy, write/read ----------------------------------------------------------- */

/* fill_u32 into u32 and f32 buffers (the bits as given), fill_f32 into f32 buffers. */
TEST(fill_u32_f32) {
  accel_ctx *ctx = ctx_open(NULL);
  for (int it = 0; it < 6; it++) {
    size_t n = rnd_range(1, 10000);
    uint32_t v = rnd32() | 1, *out = xmalloc(n * sizeof *out);
    accel_device dev = it % 2 ? ACCEL_DEVICE_ANY : 0;
    accel_future *f = NULL;
    accel_buffer b;
    if (it % 3 == 2) {
      float fv = rnd_nonzero(-1e6f, 1e6f);
      memcpy(&v, &fv, sizeof v);
      b = buf_new(ctx, ACCEL_F32, n);
      CHECK_OK(accel_fill_f32(ctx, dev, b, fv, &f));
    } else {
      b = buf_new(ctx, it % 3 ? ACCEL_F32 : ACCEL_U32, n);
      CHECK_OK(accel_fill_u32(ctx, dev, b, v, &f));
    }
    WAIT_OK(f);
    read_sync(ctx, b, 0, out, n);
    for (size_t i = 0; i < n; i++)
      if (out[i] != v)
        TEST_FAIL("fill (n=%zu): [%zu] = 0x%08" PRIx32 ", want 0x%08" PRIx32, n, i, out[i], v);
    CHECK_OK(accel_buffer_destroy(ctx, b));
    free(out);
  }
  /* A zero-length buffer is refused (EINVAL: a buffer holds at least one element); one
   * element, the limit, fills. */
  accel_buffer z;
  CHECK_ERR(accel_buffer_create(ctx, ACCEL_U32, 0, &z), ACCEL_EINVAL);
  z = buf_new(ctx, ACCEL_U32, 1);
  accel_future *f = NULL;
  uint32_t one = 0;
  CHECK_OK(accel_fill_u32(ctx, 0, z, 5, &f));
  WAIT_OK(f);
  CHECK_OK(accel_read(ctx, z, 0, &one, 1, &f));
  WAIT_OK(f);
  CHECK_EQ(one, 5);
  accel_close(ctx);
}

/* Copies between ranges of two buffers and within one buffer; the rest stays. */
TEST(copy_offsets) {
  accel_ctx *ctx = ctx_open(NULL);
  for (int it = 0; it < 8; it++) {
    size_t ns = rnd_range(1, 3000), nd = rnd_range(1, 3000);
    size_t count = rnd_range(0, ns < nd ? ns : nd);
    size_t soff = rnd_range(0, ns - count), doff = rnd_range(0, nd - count);
    uint32_t *s = xmalloc(ns * 4), *d = xmalloc(nd * 4), *out = xmalloc((ns + nd) * 4);
    for (size_t i = 0; i < ns; i++)
      s[i] = rnd32() | 1;
    for (size_t i = 0; i < nd; i++)
      d[i] = rnd32() | 1;
    accel_buffer S = buf_from(ctx, ACCEL_U32, s, ns), D = buf_from(ctx, ACCEL_U32, d, nd);
    accel_future *f = NULL;
    CHECK_OK(accel_copy(ctx, it % 2 ? ACCEL_DEVICE_ANY : 0, D, doff, S, soff, count, &f));
    WAIT_OK(f);
    read_sync(ctx, D, 0, out, nd);
    memcpy(d + doff, s + soff, count * 4);
    check_bits_equal("copy: destination", out, d, nd);
    read_sync(ctx, S, 0, out, ns);
    check_bits_equal("copy: source", out, s, ns);
    CHECK_OK(accel_buffer_destroy(ctx, S));
    CHECK_OK(accel_buffer_destroy(ctx, D));
    free(s);
    free(d);
    free(out);
  }
  /* Within one buffer, ranges apart; and into a buffer that was only ever filled on the
   * device (its data lives there). */
  size_t n = 1000;
  float *x = rnd_floats(n, -1, 1), out[1000];
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), F = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  CHECK_OK(accel_copy(ctx, 0, X, 600, X, 100, 300, &f));
  WAIT_OK(f);
  read_sync(ctx, X, 0, out, n);
  memcpy(x + 600, x + 100, 300 * sizeof *x);
  check_bits_equal("copy within a buffer", out, x, n);
  CHECK_OK(accel_fill_f32(ctx, 0, F, 0.25f, NULL));
  CHECK_OK(accel_copy(ctx, 0, F, 10, X, 20, 30, &f));
  WAIT_OK(f);
  read_sync(ctx, F, 0, out, n);
  for (size_t i = 0; i < n; i++) {
    float want = i >= 10 && i < 40 ? x[i + 10] : 0.25f;
    check_bits_equal("copy into a device-filled buffer", &out[i], &want, 1);
  }
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
  free(x);
}

/* Partial writes change their range only, whether the buffer's data is on the host (written)
 * or on the device (filled there); reads at an offset return that slice. */
TEST(write_read_offsets) {
  accel_ctx *ctx = ctx_open(NULL);
  for (int it = 0; it < 8; it++) {
    size_t n = rnd_range(1, 5000), off = rnd_range(0, n), cnt = rnd_range(0, n - off);
    uint32_t *base = xmalloc(n * 4), *part = xmalloc((cnt ? cnt : 1) * 4), *out = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++)
      base[i] = rnd32() | 1;
    for (size_t i = 0; i < cnt; i++)
      part[i] = rnd32() | 1;
    accel_buffer b = buf_new(ctx, ACCEL_U32, n);
    if (it % 2) { /* the data is on the device */
      uint32_t v = rnd32() | 1;
      CHECK_OK(accel_fill_u32(ctx, 0, b, v, NULL));
      for (size_t i = 0; i < n; i++)
        base[i] = v;
    } else {
      write_sync(ctx, b, 0, base, n);
    }
    write_sync(ctx, b, off, part, cnt);
    memcpy(base + off, part, cnt * 4);
    read_sync(ctx, b, 0, out, n);
    check_bits_equal("after a partial write", out, base, n);
    size_t roff = rnd_range(0, n), rcnt = rnd_range(0, n - roff);
    memset(out, 0xEE, n * 4);
    read_sync(ctx, b, roff, out, rcnt);
    check_bits_equal("read at an offset", out, base + roff, rcnt);
    if (rcnt < n)
      CHECK_EQ(out[rcnt], 0xEEEEEEEEu); /* nothing past the slice */
    CHECK_OK(accel_buffer_destroy(ctx, b));
    free(base);
    free(part);
    free(out);
  }
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
}

/* A buffer never written reads as zeros: to a device op that reads it, to a read (whole and
 * at an offset), and around a partial write. */
TEST(never_written_reads_zeros) {
  accel_ctx *ctx = ctx_open(NULL);
  size_t n = rnd_range(2, 10000);
  uint32_t *out = xmalloc(n * 4);
  float *fy = xmalloc(n * 4);
  accel_buffer x = buf_new(ctx, ACCEL_F32, n), y = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  CHECK_OK(accel_sigmoid(ctx, 0, y, x, &f)); /* sigmoid(0) = 0.5 */
  WAIT_OK(f);
  read_sync(ctx, y, 0, fy, n);
  for (size_t i = 0; i < n; i++)
    check_close("sigmoid of a never-written buffer", i, fy[i], 0.5, 0);
  for (int dt = 0; dt < 2; dt++) {
    accel_buffer b = buf_new(ctx, dt ? ACCEL_F32 : ACCEL_U32, n);
    memset(out, 0xAB, n * 4);
    read_sync(ctx, b, 0, out, n);
    for (size_t i = 0; i < n; i++)
      if (out[i] != 0)
        TEST_FAIL("never-written buffer: [%zu] = 0x%08" PRIx32, i, out[i]);
    memset(out, 0xAB, n * 4);
    read_sync(ctx, b, n / 2, out, n - n / 2);
    for (size_t i = 0; i < n - n / 2; i++)
      CHECK_EQ(out[i], 0);
  }
  accel_buffer p = buf_new(ctx, ACCEL_U32, n);
  uint32_t one = 0x01020304;
  write_sync(ctx, p, n / 2, &one, 1);
  read_sync(ctx, p, 0, out, n);
  for (size_t i = 0; i < n; i++)
    if (out[i] != (i == n / 2 ? one : 0))
      TEST_FAIL("partial write into a never-written buffer: [%zu] = 0x%08" PRIx32, i, out[i]);
  accel_close(ctx);
  free(out);
  free(fy);
}

static const test_case tests[] = {
    TEST_CASE(sgemm_random_shapes),
    TEST_CASE(sgemm_transposes_and_1x1),
    TEST_CASE(sgemm_k_zero),
    TEST_CASE(sgemm_m_or_n_zero),
    TEST_CASE(sgemm_alpha_zero_ignores_ab),
    TEST_CASE(saxpy_random),
    TEST_CASE(sdot_random),
    TEST_CASE(blas1_n_zero),
    TEST_CASE(unary_ops),
    TEST_CASE(softmax_random),
    TEST_CASE(unary_math_ops),
    TEST_CASE(binary_ops_broadcast),
    TEST_CASE(binary_in_place_nan_and_limits),
    TEST_CASE(int_binary_ops_wrap),
    TEST_CASE(compare_ops_broadcast_and_nan),
    TEST_CASE(where_broadcast),
    TEST_CASE(int_compare_where_refusals),
    TEST_CASE(convert_f32_views),
    TEST_CASE(convert_ints),
    TEST_CASE(convert_refusals),
    TEST_CASE(reductions_random),
    TEST_CASE(reduction_empty_and_limits),
    TEST_CASE(softmax_large_inputs),
    TEST_CASE(fill_u32_f32),
    TEST_CASE(copy_offsets),
    TEST_CASE(write_read_offsets),
    TEST_CASE(never_written_reads_zeros),
};

TEST_MAIN(tests)
