/* cuda-dtypes: every op of the op packages in every dtype the cuda backend runs, on a real GPU,
 * against a float64 reference computed here on fresh random inputs (ACCEL_TEST_SEED replays):
 *   - gemm, every combination (F64, F32 FP32/TF32, F16 -> F16|F32, BF16 -> BF16|F32), random
 *     shapes and transposes, k = 0 and alpha = 0 (A and B hold NaN: never read), beta = 0 over
 *     a C of NaN, leading dimensions and strides larger than needed (the gaps must stay as they
 *     were), batches; tolerance per combination relative to |alpha| sum |a b| + |beta c|:
 *     F64 1e-12, F32 1e-5, TF32 4e-3, F16 -> F32 1e-4, F16 -> F16 2e-3, BF16 -> F32 1e-4,
 *     BF16 -> BF16 8e-3 (the output's rounding dominates the 16-bit ones);
 *   - the core fill of 1, 2, 4 and 8-byte elements, neighbours untouched;
 *   - axpy, dot, scal in F32 (1e-5 relative to the sum of magnitudes) and F64 (1e-12);
 *     F16/BF16 are ACCEL_ENOTSUP;
 *   - sigmoid, relu, tanh and softmax in F64 (1e-12 relative), F32 (2e-6), F16 (2^-10) and
 *     BF16 (2^-7) plus the 16-bit types' subnormal spacing;
 *   - RNG: uniform F64/F16/BF16 bit for bit against the convention computed here (Philox of
 *     backends/cpu/philox.h, rounding of ops/dtype_conv.h); normals within 16 ulp of
 *     |x| + |mean| + 8 stddev (z stddev + mean cancels near 0), F16/BF16 also within one unit
 *     of their last place.
 * Without a CUDA device it exits 77 (meson's SKIP). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/philox.h"
#include "backends/cuda/backend_cuda.h"
#include "cuda_fx.h"
#include "ops/dtype_conv.h"

static const be_ops *B = &be_cuda_ops;

#define PI 3.14159265358979323846

static void finish(fx *f) {
  be_event *ev = NULL;
  CHECK_OK(B->event_create(f->d, &ev));
  CHECK_OK(B->event_record(ev, f->q));
  CHECK_OK(B->event_sync(ev));
  B->event_destroy(ev);
}

/* A device buffer holding `bytes` of host memory. */
static be_mem upload(fx *f, const void *host, size_t bytes) {
  be_mem m = {0};
  CHECK_OK(B->mem_alloc(f->d, bytes > 0 ? bytes : 1, &m));
  if (bytes > 0)
    CHECK_OK(B->copy_h2d(f->q, m, 0, host, bytes));
  return m;
}

static void download(fx *f, void *host, be_mem m, size_t bytes) {
  if (bytes > 0)
    CHECK_OK(B->copy_d2h(f->q, host, m, 0, bytes));
  finish(f);
  B->mem_free(f->d, &m);
}

static const char *type_name(uint32_t t) {
  static const char *const names[] = {"?", "F32", "U32", "F64", "F16", "BF16", "I32"};
  return t <= ACCEL_DTYPE_MAX_ ? names[t] : "?";
}

/* Element i of a buffer of dtype t, as a double, and the value v rounded into it. */
static double get(uint32_t t, const void *p, size_t i) {
  switch (t) {
  case ACCEL_F64:
    return ((const double *)p)[i];
  case ACCEL_F16:
    return be_f16_to_f32(((const uint16_t *)p)[i]);
  case ACCEL_BF16:
    return be_bf16_to_f32(((const uint16_t *)p)[i]);
  default:
    return ((const float *)p)[i];
  }
}

static void put(uint32_t t, void *p, size_t i, double v) {
  switch (t) {
  case ACCEL_F64:
    ((double *)p)[i] = v;
    break;
  case ACCEL_F16:
    ((uint16_t *)p)[i] = be_f32_to_f16((float)v);
    break;
  case ACCEL_BF16:
    ((uint16_t *)p)[i] = be_f32_to_bf16((float)v);
    break;
  default:
    ((float *)p)[i] = (float)v;
  }
}

/* Uniform in [-1, 1). */
static double rnd_unit(void) {
  return (double)(cuda_rnd64() >> 11) * 0x1p-52 - 1.0;
}

/* ---- gemm ----------------------------------------------------------------------------- */

typedef struct combo {
  uint32_t ab, c, math;
  double tol;
} combo;

static const combo combos[] = {
    {ACCEL_F64, ACCEL_F64, BE_GEMM_MATH_DEVICE, 1e-12},
    {ACCEL_F64, ACCEL_F64, BE_GEMM_MATH_FP64, 1e-12},
    {ACCEL_F32, ACCEL_F32, BE_GEMM_MATH_FP32, 1e-5},
    {ACCEL_F32, ACCEL_F32, BE_GEMM_MATH_TF32, 4e-3},
    {ACCEL_F16, ACCEL_F32, BE_GEMM_MATH_DEVICE, 1e-4},
    {ACCEL_F16, ACCEL_F16, BE_GEMM_MATH_FP32, 2e-3},
    {ACCEL_BF16, ACCEL_F32, BE_GEMM_MATH_DEVICE, 1e-4},
    {ACCEL_BF16, ACCEL_BF16, BE_GEMM_MATH_FP32, 8e-3},
};

/* Elements a batch of `batch` matrices of `one` elements, `stride` apart, spans. */
static size_t span_of(int64_t batch, int64_t stride, size_t one) {
  return one == 0 ? 0 : (size_t)((batch - 1) * stride) + one;
}

static size_t matrix_len(int64_t rows, int64_t cols, int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (size_t)((cols - 1) * ld + rows);
}

/* Whether element e of a C buffer (after its offset) lies in some matrix of the batch. */
static bool in_c(const be_gemm_args *g, size_t e) {
  for (int64_t b = 0; b < g->batch; b++) {
    int64_t r = (int64_t)e - b * g->stride_c;
    if (r >= 0 && r % g->ldc < g->m && r / g->ldc < g->n)
      return true;
  }
  return false;
}

/* A gemm's operands on the host: random A, B and C (NaN where they must not be read) with
 * `off` elements before the matrices, and room for the result. */
typedef struct gemm_host {
  void *a, *b, *c, *got;
  size_t na, nb, nc; /* elements */
} gemm_host;

static gemm_host host_operands(const combo *cb, const be_gemm_args *g, size_t off) {
  size_t ea = be_dtype_size(cb->ab), ec = be_dtype_size(cb->c);
  int64_t ar, ac, br, bc;
  be_blas_stored_shape(g->trans_a, g->m, g->k, &ar, &ac);
  be_blas_stored_shape(g->trans_b, g->k, g->n, &br, &bc);
  gemm_host h = {.na = off + span_of(g->batch, g->stride_a, matrix_len(ar, ac, g->lda)),
                 .nb = off + span_of(g->batch, g->stride_b, matrix_len(br, bc, g->ldb)),
                 .nc = off + span_of(g->batch, g->stride_c, matrix_len(g->m, g->n, g->ldc))};
  h.a = cuda_xmalloc(h.na * ea);
  h.b = cuda_xmalloc(h.nb * ea);
  h.c = cuda_xmalloc(h.nc * ec);
  h.got = cuda_xmalloc(h.nc * ec);
  bool reads = be_blas_gemm_reads_ab(g);
  for (size_t i = 0; i < h.na; i++)
    put(cb->ab, h.a, i, reads ? rnd_unit() : NAN);
  for (size_t i = 0; i < h.nb; i++)
    put(cb->ab, h.b, i, reads ? rnd_unit() : NAN);
  for (size_t i = 0; i < h.nc; i++)
    put(cb->c, h.c, i, g->beta == 0 ? NAN : rnd_unit());
  return h;
}

/* h.got against float64 from h's operands; frees h. */
static void check_gemm(const combo *cb, const be_gemm_args *g, gemm_host *h, size_t off) {
  size_t ec = be_dtype_size(cb->c);
  bool reads = be_blas_gemm_reads_ab(g);
  for (int64_t bt = 0; bt < g->batch; bt++)
    for (int64_t j = 0; j < g->n; j++)
      for (int64_t i = 0; i < g->m; i++) {
        double s = 0, mag = 0;
        for (int64_t l = 0; reads && l < g->k; l++) {
          int64_t ia = g->trans_a ? l + i * g->lda : i + l * g->lda;
          int64_t ib = g->trans_b ? j + l * g->ldb : l + j * g->ldb;
          double x = get(cb->ab, h->a, off + (size_t)(bt * g->stride_a + ia));
          double y = get(cb->ab, h->b, off + (size_t)(bt * g->stride_b + ib));
          s += x * y;
          mag += fabs(x * y);
        }
        size_t ic = off + (size_t)(bt * g->stride_c + i + j * g->ldc);
        double want = g->alpha * s, cv = g->beta == 0 ? 0 : get(cb->c, h->c, ic);
        want += g->beta * cv;
        mag = fabs(g->alpha) * mag + fabs(g->beta * cv) + DBL_MIN;
        double v = get(cb->c, h->got, ic);
        /* plus one step of the output's subnormals: f16's are 2^-24 apart (beta * C near 0) */
        double tiny = cb->c == ACCEL_F16 ? ldexp(1, -24) : 0;
        if (!(fabs(v - want) <= cb->tol * mag + tiny))
          TEST_FAIL("gemm %s->%s math %u m %" PRId64 " n %" PRId64 " k %" PRId64
                    " trans %d%d batch %" PRId64 " alpha %g beta %g: C%" PRId64 "[%" PRId64
                    ",%" PRId64 "] = %.17g, want %.17g (tolerance %.3g)",
                    type_name(cb->ab), type_name(cb->c), cb->math, g->m, g->n, g->k, g->trans_a,
                    g->trans_b, g->batch, g->alpha, g->beta, bt, i, j, v, want, cb->tol * mag);
      }
  for (size_t e = 0; e < h->nc; e++) /* outside the matrices: untouched, bit for bit */
    if ((e < off || !in_c(g, e - off)) &&
        memcmp((char *)h->got + e * ec, (char *)h->c + e * ec, ec))
      TEST_FAIL("gemm %s->%s wrote element %zu outside C", type_name(cb->ab), type_name(cb->c), e);
  free(h->a);
  free(h->b);
  free(h->c);
  free(h->got);
}

/* One gemm with A, B and C at `off` elements into fresh buffers, checked against float64. */
static void gemm_case_at(fx *f, const combo *cb, const be_gemm_args *g, size_t off) {
  size_t ea = be_dtype_size(cb->ab), ec = be_dtype_size(cb->c);
  gemm_host h = host_operands(cb, g, off);
  be_mem ma = upload(f, h.a, h.na * ea), mb = upload(f, h.b, h.nb * ea);
  be_mem mc = upload(f, h.c, h.nc * ec);
  CHECK_OK(B->blas->gemm(f->q, g, ma, off, mb, off, mc, off));
  B->mem_free(f->d, &ma);
  B->mem_free(f->d, &mb);
  download(f, h.got, mc, h.nc * ec);
  check_gemm(cb, g, &h, off);
}

/* Buffers that one gemm runs on again and again (gemm_case_in), made on its first run. */
typedef struct gemm_bufs {
  bool made;
  be_mem a, b, c;
} gemm_bufs;

/* One gemm on m's buffers with fresh random operands, checked against float64. */
static void gemm_case_in(fx *f, const combo *cb, const be_gemm_args *g, gemm_bufs *m) {
  size_t ea = be_dtype_size(cb->ab), ec = be_dtype_size(cb->c);
  gemm_host h = host_operands(cb, g, 0);
  if (!m->made) {
    CHECK_OK(B->mem_alloc(f->d, h.na * ea, &m->a));
    CHECK_OK(B->mem_alloc(f->d, h.nb * ea, &m->b));
    CHECK_OK(B->mem_alloc(f->d, h.nc * ec, &m->c));
    m->made = true;
  }
  CHECK_OK(B->copy_h2d(f->q, m->a, 0, h.a, h.na * ea));
  CHECK_OK(B->copy_h2d(f->q, m->b, 0, h.b, h.nb * ea));
  CHECK_OK(B->copy_h2d(f->q, m->c, 0, h.c, h.nc * ec));
  CHECK_OK(B->blas->gemm(f->q, g, m->a, 0, m->b, 0, m->c, 0));
  CHECK_OK(B->copy_d2h(f->q, h.got, m->c, 0, h.nc * ec));
  finish(f);
  check_gemm(cb, g, &h, 0);
}

static void gemm_bufs_free(fx *f, gemm_bufs *m) {
  B->mem_free(f->d, &m->a);
  B->mem_free(f->d, &m->b);
  B->mem_free(f->d, &m->c);
  m->made = false;
}

static void gemm_case(fx *f, const combo *cb, const be_gemm_args *g) {
  gemm_case_at(f, cb, g, cuda_rnd_range(0, 3));
}

/* A random gemm: shapes up to 70 (k = 0 one time in 8), alpha = 0 one in 8, beta = 0 one in
 * 4, leading dimensions up to 4 more than needed, batches of 1 to 3 (A shared, stride 0, one
 * in 4), strides up to 5 more than a matrix. */
static be_gemm_args random_gemm(const combo *cb, int64_t big) {
  be_gemm_args g = {.ab_type = cb->ab, .c_type = cb->c, .math = cb->math, .batch = 1};
  g.trans_a = (be_blas_trans)(cuda_rnd64() & 1);
  g.trans_b = (be_blas_trans)(cuda_rnd64() & 1);
  g.m = big ? big : (int64_t)cuda_rnd_range(1, 70);
  g.n = big ? big : (int64_t)cuda_rnd_range(1, 70);
  g.k = big ? big : cuda_rnd_range(0, 7) == 0 ? 0 : (int64_t)cuda_rnd_range(1, 70);
  g.alpha = cuda_rnd_range(0, 7) == 0 ? 0 : rnd_unit() * 2;
  g.beta = cuda_rnd_range(0, 3) == 0 ? 0 : rnd_unit() * 2;
  if (cb->ab != ACCEL_F64) { /* scalars of f32 gemms are floats */
    g.alpha = (float)g.alpha;
    g.beta = (float)g.beta;
  }
  int64_t ar, ac, br, bc;
  be_blas_stored_shape(g.trans_a, g.m, g.k, &ar, &ac);
  be_blas_stored_shape(g.trans_b, g.k, g.n, &br, &bc);
  g.lda = (ar > 1 ? ar : 1) + (int64_t)cuda_rnd_range(0, 4);
  g.ldb = (br > 1 ? br : 1) + (int64_t)cuda_rnd_range(0, 4);
  g.ldc = g.m + (int64_t)cuda_rnd_range(0, 4);
  if (!big && cuda_rnd_range(0, 1)) {
    g.batch = (int64_t)cuda_rnd_range(2, 3);
    g.stride_a = cuda_rnd_range(0, 3) == 0 ? 0 : (int64_t)(ac * g.lda + cuda_rnd_range(0, 5));
    g.stride_b = (int64_t)(bc * g.ldb + cuda_rnd_range(0, 5));
    g.stride_c = (int64_t)(g.n * g.ldc + cuda_rnd_range(0, 5));
  }
  return g;
}

TEST(gemm_every_combination) {
  fx f = fx_open_with(0);
  for (size_t i = 0; i < sizeof combos / sizeof combos[0]; i++) {
    const combo *cb = &combos[i];
    if (B->blas->gemm_supports(f.d, cb->ab, cb->c, cb->math) != 0) {
      printf("    gemm %s->%s math %u: not supported on this device\n", type_name(cb->ab),
             type_name(cb->c), cb->math);
      continue;
    }
    for (int r = 0; r < 24; r++) {
      be_gemm_args g = random_gemm(cb, 0);
      gemm_case(&f, cb, &g);
    }
    be_gemm_args g = random_gemm(cb, 192); /* tensor-core tiles */
    gemm_case(&f, cb, &g);
  }
  /* What accel does not define is ENOTSUP, from supports and from the call. */
  CHECK_ERR(B->blas->gemm_supports(f.d, ACCEL_F32, ACCEL_F16, BE_GEMM_MATH_DEVICE), ACCEL_ENOTSUP);
  CHECK_ERR(B->blas->gemm_supports(f.d, ACCEL_F16, ACCEL_F16, BE_GEMM_MATH_TF32), ACCEL_ENOTSUP);
  CHECK_ERR(B->blas->gemm_supports(f.d, ACCEL_U32, ACCEL_U32, BE_GEMM_MATH_DEVICE), ACCEL_ENOTSUP);
  be_gemm_args bad = {.m = 1,
                      .n = 1,
                      .k = 1,
                      .lda = 1,
                      .ldb = 1,
                      .ldc = 1,
                      .alpha = 1,
                      .ab_type = ACCEL_F64,
                      .c_type = ACCEL_F32,
                      .batch = 1};
  be_mem m = {0};
  CHECK_OK(B->mem_alloc(f.d, 64, &m));
  CHECK_ERR(B->blas->gemm(f.q, &bad, m, 0, m, 0, m, 0), ACCEL_ENOTSUP);
  B->mem_free(f.d, &m);
  fx_close(&f);
}

/* ---- core fill ------------------------------------------------------------------------- */

/* Small gemms go through the queue's cached cuBLASLt plans (gemm_lt.c), 16 shapes at most,
 * least recently used out; large ones and batches through cuBLAS. The results are checked
 * by gemm_case either way (gemm_every_combination runs many shapes through the plans). */
TEST(small_gemms_run_through_cached_plans) {
  fx f = fx_open_with(0);
  const combo *cb = &combos[2]; /* F32, FP32 math */
  be_gemm_args g = random_gemm(cb, 64);
  g.batch = 1;
  g.alpha = 0.75; /* alpha = 0 (drawn one time in 8) is C = beta C: no gemm at all */
  CHECK_OK(be_cuda_set_gemm_graphs(f.d, false)); /* every call reaches the plans */
  be_cuda_gemm_lt_stats st, before;
  be_cuda_gemm_lt_stats_get(f.q, &before);
  gemm_case_at(&f, cb, &g, 0);
  gemm_case_at(&f, cb, &g, 0);
  be_cuda_gemm_lt_stats_get(f.q, &st);
  CHECK_EQ(st.runs - before.runs, 2);
  CHECK_EQ(st.made - before.made, 1); /* the second call used the plan of the first */
  /* Matrices one element into their buffers (4-byte aligned) go to cuBLAS, and the shape's
   * plan still serves aligned ones (a plan made for 256-byte alignment, run on them, was
   * refused by cublasLtMatmul and then marked unusable for the shape). */
  gemm_case_at(&f, cb, &g, 1);
  gemm_case_at(&f, cb, &g, 0);
  be_cuda_gemm_lt_stats_get(f.q, &st);
  CHECK_EQ(st.runs - before.runs, 3);
  CHECK_EQ(st.made - before.made, 1);
  for (int64_t m = 1; m <= 20; m++) { /* 20 new shapes: 16 plans stay */
    be_gemm_args h = g;
    h.m = m;
    h.ldc = m;
    gemm_case_at(&f, cb, &h, 0);
  }
  be_cuda_gemm_lt_stats_get(f.q, &st);
  CHECK_EQ(st.made - before.made, 21);
  CHECK_EQ(st.live, 16);
  gemm_case_at(&f, cb, &g, 0); /* evicted meanwhile: made again */
  be_cuda_gemm_lt_stats_get(f.q, &before);
  CHECK_EQ(before.made, st.made + 1);
  be_gemm_args big = random_gemm(cb, 576); /* 576^3 > 512^3: cuBLAS */
  big.batch = 1;
  gemm_case(&f, cb, &big);
  be_gemm_args batched = g;
  batched.batch = 2;
  batched.stride_a = batched.stride_b = batched.stride_c = 64 * 80;
  gemm_case(&f, cb, &batched);
  be_cuda_gemm_lt_stats_get(f.q, &st);
  CHECK_EQ(st.runs, before.runs);
  fx_close(&f);
}

/* A gemm repeated on the same buffers is captured into a CUDA graph on its second call and
 * replayed from then on (gemm_graph.c). Every call runs on fresh operands and is checked
 * against float64, so a replay that ran another product, or kept anything of an earlier
 * call's data, fails. Two sets of buffers alternate, so that a replay on the wrong addresses
 * fails too, and the same product with another beta must not replay the first one's graph. */
static void graph_counts(fx *f, const be_cuda_gemm_graph_stats *before, uint64_t captured,
                         uint64_t replays, const char *what) {
  be_cuda_gemm_graph_stats st;
  be_cuda_gemm_graph_stats_get(f->q, &st);
  if (st.captured - before->captured != captured || st.replays - before->replays != replays ||
      st.refused != before->refused)
    TEST_FAIL("%s: %" PRIu64 " captured, %" PRIu64 " replayed, %" PRIu64 " refused (want %" PRIu64
              ", %" PRIu64 ", 0)",
              what, st.captured - before->captured, st.replays - before->replays,
              st.refused - before->refused, captured, replays);
}

static void replayed(fx *f, const combo *cb, be_gemm_args g, int calls) {
  be_cuda_gemm_graph_stats before;
  be_cuda_gemm_graph_stats_get(f->q, &before);
  gemm_bufs m[2] = {{0}, {0}};
  for (int i = 0; i < 2 * calls; i++)
    gemm_case_in(f, cb, &g, &m[i % 2]);
  graph_counts(f, &before, 2, 2 * ((uint64_t)calls - 2), type_name(cb->ab));
  g.beta = g.beta == 0 ? 0.5 : 0; /* another key: a plain call, seen once */
  gemm_case_in(f, cb, &g, &m[0]);
  graph_counts(f, &before, 2, 2 * ((uint64_t)calls - 2), "another beta");
  gemm_bufs_free(f, &m[0]);
  gemm_bufs_free(f, &m[1]);
}

/* A gemm with every matrix read: k > 0, alpha not 0. */
static be_gemm_args read_gemm(const combo *cb, int64_t big) {
  be_gemm_args g;
  do
    g = random_gemm(cb, big);
  while (!be_blas_gemm_reads_ab(&g));
  return g;
}

/* An F32 gemm in the device's math, replayed from a graph captured on TF32 tensor cores:
 * once the device is back to FP32, the same call must not replay it (checked at FP32's
 * tolerance, which TF32's rounding misses by far). */
static void tf32_switch(fx *f) {
  combo fp32 = {ACCEL_F32, ACCEL_F32, BE_GEMM_MATH_DEVICE, 1e-5};
  combo tf32 = {ACCEL_F32, ACCEL_F32, BE_GEMM_MATH_DEVICE, 4e-3};
  be_gemm_args g = read_gemm(&fp32, 96);
  g.batch = 1;
  gemm_bufs m = {0};
  CHECK_OK(be_cuda_set_tf32(f->d, true));
  for (int i = 0; i < 3; i++)
    gemm_case_in(f, &tf32, &g, &m);
  CHECK_OK(be_cuda_set_tf32(f->d, false));
  for (int i = 0; i < 3; i++)
    gemm_case_in(f, &fp32, &g, &m);
  gemm_bufs_free(f, &m);
}

TEST(repeated_gemms_replay_their_graph) {
  fx f = fx_open_with(0);
  for (size_t i = 0; i < sizeof combos / sizeof combos[0]; i++) {
    const combo *cb = &combos[i];
    if (B->blas->gemm_supports(f.d, cb->ab, cb->c, cb->math) != 0)
      continue; /* BF16 and TF32 before Ampere: gemm_every_combination checks the refusal */
    be_gemm_args g = read_gemm(cb, 96);
    g.batch = 1;
    replayed(&f, cb, g, 4);
    replayed(&f, cb, read_gemm(cb, 0), 3); /* random shapes, batches among them */
  }
  if (B->blas->gemm_supports(f.d, ACCEL_F32, ACCEL_F32, BE_GEMM_MATH_TF32) == 0)
    tf32_switch(&f);
  /* 70 keys (alpha tells them apart) seen twice each: 70 graphs made, 64 kept; then 40 gemms
   * seen once evict none of them (the first 6 keys went: their third call is a capture). */
  const combo *cb = &combos[2];
  be_gemm_args g = read_gemm(cb, 8);
  be_cuda_gemm_graph_stats before, st;
  be_cuda_gemm_graph_stats_get(f.q, &before);
  gemm_bufs m = {0};
  for (int key = 0; key < 70; key++)
    for (int i = 0; i < 2; i++) {
      g.alpha = 1 + key / 64.0;
      gemm_case_in(&f, cb, &g, &m);
    }
  be_cuda_gemm_graph_stats_get(f.q, &st);
  CHECK_EQ(st.captured - before.captured, 70);
  CHECK_EQ(st.live, 64);
  for (int once = 0; once < 40; once++) {
    g.alpha = -1 - once / 64.0;
    gemm_case_in(&f, cb, &g, &m);
  }
  for (int key = 69; key >= 6; key--) { /* the 64 kept: every one replays */
    g.alpha = 1 + key / 64.0;
    gemm_case_in(&f, cb, &g, &m);
  }
  graph_counts(&f, &before, 70, 64, "after 40 gemms seen once");
  /* Replays off, and a product past the bound (m n k > 2^31): plain calls, however often. */
  be_cuda_gemm_graph_stats_get(f.q, &st);
  CHECK_OK(be_cuda_set_gemm_graphs(f.d, false));
  for (int i = 0; i < 3; i++)
    gemm_case_in(&f, cb, &g, &m);
  gemm_bufs_free(&f, &m);
  CHECK_OK(be_cuda_set_gemm_graphs(f.d, true));
  graph_counts(&f, &st, 0, 0, "replays off");
  be_gemm_args big = {.m = 2048,
                      .n = 2048,
                      .k = 513,
                      .lda = 2048,
                      .ldb = 513,
                      .ldc = 2048,
                      .alpha = 1,
                      .ab_type = ACCEL_F32,
                      .c_type = ACCEL_F32,
                      .math = BE_GEMM_MATH_FP32,
                      .batch = 1};
  be_mem ma = {0}, mb = {0}, mc = {0};
  CHECK_OK(B->mem_alloc(f.d, 2048 * 513 * 4, &ma));
  CHECK_OK(B->mem_alloc(f.d, 2048 * 513 * 4, &mb));
  CHECK_OK(B->mem_alloc(f.d, 2048 * 2048 * 4, &mc));
  CHECK_OK(B->fill(f.q, ma, 0, 2048 * 513, 4, 0));
  CHECK_OK(B->fill(f.q, mb, 0, 2048 * 513, 4, 0));
  for (int i = 0; i < 3; i++)
    CHECK_OK(B->blas->gemm(f.q, &big, ma, 0, mb, 0, mc, 0));
  finish(&f);
  B->mem_free(f.d, &ma);
  B->mem_free(f.d, &mb);
  B->mem_free(f.d, &mc);
  graph_counts(&f, &st, 0, 0, "past the bound");
  fx_close(&f);
}

TEST(fill_every_size) {
  fx f = fx_open_with(0);
  for (uint32_t es = 1; es <= 8; es *= 2)
    for (int r = 0; r < 6; r++) {
      size_t n = cuda_rnd_range(1, r == 5 ? 3000000 : 5000), off = cuda_rnd_range(0, 9);
      size_t total = n + off + cuda_rnd_range(0, 9);
      uint64_t value = cuda_rnd64();
      uint8_t *h = cuda_xmalloc(total * es), *got = cuda_xmalloc(total * es);
      for (size_t i = 0; i < total * es; i++)
        h[i] = (uint8_t)cuda_rnd64();
      be_mem m = upload(&f, h, total * es);
      CHECK_OK(B->fill(f.q, m, off, n, es, value));
      download(&f, got, m, total * es);
      for (size_t i = 0; i < total; i++) {
        const uint8_t *want = i >= off && i < off + n ? (const uint8_t *)&value : h + i * es;
        if (memcmp(got + i * es, want, es) != 0) /* little-endian: the low bytes first */
          TEST_FAIL("fill of %u-byte elements [%zu, %zu): element %zu wrong", es, off, off + n, i);
      }
      free(h);
      free(got);
    }
  be_mem m = {0};
  CHECK_OK(B->mem_alloc(f.d, 64, &m));
  CHECK_ERR(B->fill(f.q, m, 0, 1, 3, 0), ACCEL_EINVAL);
  CHECK_ERR(B->fill(f.q, m, 0, 9, 8, 0), ACCEL_EINVAL);
  B->mem_free(f.d, &m);
  fx_close(&f);
}

/* ---- axpy, dot, scal ------------------------------------------------------------------- */

static void vector_case(fx *f, uint32_t t, size_t n, double tol) {
  size_t es = be_dtype_size(t), off = cuda_rnd_range(0, 3);
  void *x = cuda_xmalloc((n + off) * es), *y = cuda_xmalloc((n + off) * es);
  void *got = cuda_xmalloc((n + off) * es);
  for (size_t i = 0; i < n + off; i++) {
    put(t, x, i, rnd_unit());
    put(t, y, i, rnd_unit());
  }
  double alpha = rnd_unit() * 3, dot = 0, mag = 0;
  if (t == ACCEL_F32)
    alpha = (float)alpha;
  for (size_t i = off; i < n + off; i++) {
    dot += get(t, x, i) * get(t, y, i);
    mag += fabs(get(t, x, i) * get(t, y, i));
  }
  be_mem mx = upload(f, x, (n + off) * es), my = upload(f, y, (n + off) * es), mr = {0};
  CHECK_OK(B->mem_alloc(f->d, 8, &mr));
  CHECK_OK(B->blas->dot(f->q, t, n, mx, off, my, off, mr, 0));
  CHECK_OK(B->blas->axpy(f->q, t, n, alpha, mx, off, my, off));
  CHECK_OK(B->blas->scal(f->q, t, n, -alpha, mx, off));
  double r[1];
  download(f, r, mr, es);
  if (!(fabs(get(t, r, 0) - dot) <= tol * (mag + DBL_MIN)))
    TEST_FAIL("dot %s n %zu: %.17g, want %.17g", type_name(t), n, get(t, r, 0), dot);
  download(f, got, my, (n + off) * es);
  for (size_t i = off; i < n + off; i++) {
    double want = alpha * get(t, x, i) + get(t, y, i);
    if (!(fabs(get(t, got, i) - want) <= tol * (fabs(alpha * get(t, x, i)) + fabs(get(t, y, i)))))
      TEST_FAIL("axpy %s [%zu]: %.17g, want %.17g", type_name(t), i, get(t, got, i), want);
  }
  download(f, got, mx, (n + off) * es);
  for (size_t i = off; i < n + off; i++) {
    double want = -alpha * get(t, x, i);
    if (!(fabs(get(t, got, i) - want) <= tol * fabs(want)))
      TEST_FAIL("scal %s [%zu]: %.17g, want %.17g", type_name(t), i, get(t, got, i), want);
  }
  free(x);
  free(y);
  free(got);
}

TEST(vector_ops_f32_f64) {
  fx f = fx_open_with(0);
  CHECK_EQ(B->blas->vector_dtypes(f.d), ACCEL_DTYPE_BIT(ACCEL_F32) | ACCEL_DTYPE_BIT(ACCEL_F64));
  for (int r = 0; r < 8; r++) {
    size_t n = r == 0 ? 0 : cuda_rnd_range(1, r == 7 ? 5000000 : 20000);
    vector_case(&f, ACCEL_F32, n, 1e-5);
    vector_case(&f, ACCEL_F64, n, 1e-12);
  }
  be_mem m = {0};
  CHECK_OK(B->mem_alloc(f.d, 64, &m));
  CHECK_ERR(B->blas->axpy(f.q, ACCEL_F16, 4, 1, m, 0, m, 8), ACCEL_ENOTSUP);
  CHECK_ERR(B->blas->dot(f.q, ACCEL_BF16, 4, m, 0, m, 8, m, 16), ACCEL_ENOTSUP);
  CHECK_ERR(B->blas->scal(f.q, ACCEL_F16, 4, 1, m, 0), ACCEL_ENOTSUP);
  B->mem_free(f.d, &m);
  fx_close(&f);
}

/* ---- nn ------------------------------------------------------------------------------- */

static const uint32_t floats[] = {ACCEL_F64, ACCEL_F32, ACCEL_F16, ACCEL_BF16};

/* Relative tolerance of a result of type t, and the absolute one near zero (the spacing of
 * the type's subnormals: a tiny sigmoid rounds there). */
static double rel_tol(uint32_t t) {
  return t == ACCEL_F64 ? 1e-12 : t == ACCEL_F32 ? 2e-6 : t == ACCEL_F16 ? 0x1p-10 : 0x1p-7;
}

static double abs_tol(uint32_t t) {
  return t == ACCEL_F16 ? 0x1p-24 : t == ACCEL_F32 ? 1e-37 : 1e-300;
}

static double unary_ref(be_unary_op op, double x) {
  return op == BE_SIGMOID ? 1 / (1 + exp(-x)) : op == BE_RELU ? (x < 0 ? 0 : x) : tanh(x);
}

static void check_close(uint32_t t, double got, double want, const char *what, size_t i) {
  if (!(fabs(got - want) <= rel_tol(t) * fabs(want) + abs_tol(t)))
    TEST_FAIL("%s %s [%zu]: %.17g, want %.17g", what, type_name(t), i, got, want);
}

TEST(nn_every_float_type) {
  fx f = fx_open_with(0);
  uint32_t all = ACCEL_DTYPE_BIT(ACCEL_F32) | ACCEL_DTYPE_BIT(ACCEL_F64) |
                 ACCEL_DTYPE_BIT(ACCEL_F16) | ACCEL_DTYPE_BIT(ACCEL_BF16);
  CHECK_EQ(B->nn->dtypes(f.d), all);
  for (size_t ti = 0; ti < 4; ti++) {
    uint32_t t = floats[ti];
    size_t es = be_dtype_size(t), n = cuda_rnd_range(1, 300000);
    void *x = cuda_xmalloc(n * es), *y = cuda_xmalloc(n * es);
    for (size_t i = 0; i < n; i++)
      put(t, x, i, rnd_unit() * 12);
    for (be_unary_op op = BE_SIGMOID; op <= BE_TANH; op++) {
      be_mem ms = upload(&f, x, n * es), md = {0};
      CHECK_OK(B->mem_alloc(f.d, n * es, &md));
      CHECK_OK(B->nn->unary(f.q, t, op, md, 0, ms, 0, n));
      B->mem_free(f.d, &ms);
      download(&f, y, md, n * es);
      for (size_t i = 0; i < n; i++)
        check_close(t, get(t, y, i), unary_ref(op, get(t, x, i)), "unary", i);
    }
    size_t rows = cuda_rnd_range(1, 200), cols = cuda_rnd_range(1, 1500);
    free(x);
    free(y);
    x = cuda_xmalloc(rows * cols * es);
    y = cuda_xmalloc(rows * cols * es);
    for (size_t i = 0; i < rows * cols; i++)
      put(t, x, i, rnd_unit() * 10);
    be_mem ms = upload(&f, x, rows * cols * es), md = {0};
    CHECK_OK(B->mem_alloc(f.d, rows * cols * es, &md));
    CHECK_OK(B->nn->softmax(f.q, t, md, 0, ms, 0, rows, cols));
    B->mem_free(f.d, &ms);
    download(&f, y, md, rows * cols * es);
    for (size_t r = 0; r < rows; r++) {
      double mx = -INFINITY, sum = 0;
      for (size_t j = 0; j < cols; j++)
        mx = fmax(mx, get(t, x, r * cols + j));
      for (size_t j = 0; j < cols; j++)
        sum += exp(get(t, x, r * cols + j) - mx);
      for (size_t j = 0; j < cols; j++) {
        double want = exp(get(t, x, r * cols + j) - mx) / sum;
        double slack = t == ACCEL_F32 ? 4 : 1; /* f32: the row's sum in float */
        if (!(fabs(get(t, y, r * cols + j) - want) <= slack * rel_tol(t) * want + abs_tol(t)))
          TEST_FAIL("softmax %s %zux%zu [%zu,%zu]: %.17g, want %.17g", type_name(t), rows, cols, r,
                    j, get(t, y, r * cols + j), want);
      }
    }
    free(x);
    free(y);
  }
  fx_close(&f);
}

/* ---- RNG ------------------------------------------------------------------------------- */

/* Word j of the Philox stream of seed. */
static uint32_t word(uint64_t seed, uint64_t j) {
  uint32_t ctr[4] = {(uint32_t)(j / 4), (uint32_t)(j / 4 >> 32), 0, 0}, out[4];
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  be_cpu_philox4x32_10(ctr, key, out);
  return out[j % 4];
}

/* cuRAND's double from two words: (w0 ^ (w1 << 21)) * scale + scale / 2. */
static double hq(uint32_t w0, uint32_t w1, double scale) {
  return (double)((uint64_t)w0 ^ ((uint64_t)w1 << 21)) * scale + scale / 2;
}

/* Element e (of the stream) of a fill of type t: the convention, bit for bit for uniforms. */
static void want_uniform(uint32_t t, uint64_t seed, uint64_t e, void *out, size_t i) {
  if (t == ACCEL_F64) {
    ((double *)out)[i] = hq(word(seed, 2 * e), word(seed, 2 * e + 1), 0x1p-53);
    return;
  }
  float u = be_cpu_philox_uniform(word(seed, e));
  ((uint16_t *)out)[i] = t == ACCEL_F16 ? be_f32_to_f16(u) : be_f32_to_bf16(u);
}

static double want_normal64(uint64_t seed, uint64_t e, double mean, double stddev) {
  uint64_t p = e / 2;
  double u = hq(word(seed, 4 * p), word(seed, 4 * p + 1), 0x1p-53);
  double v = hq(word(seed, 4 * p + 2), word(seed, 4 * p + 3), 0x1p-52);
  double r = sqrt(-2 * log(u)), z = e % 2 == 0 ? sin(PI * v) * r : cos(PI * v) * r;
  return z * stddev + mean;
}

static void rng_case(fx *f, uint32_t t, be_rng_dist dist, size_t count) {
  uint64_t seed = cuda_rnd64(), offset = cuda_rnd64() >> cuda_rnd_range(2, 63);
  if (dist == BE_RNG_NORMAL)
    offset &= ~1ull;
  size_t es = be_dtype_size(t), buf_off = cuda_rnd_range(0, 7);
  double mean = rnd_unit() * 3, stddev = 0.5 + fabs(rnd_unit()) * 2;
  uint8_t *got = cuda_xmalloc(count * es), *want = cuda_xmalloc(count * es);
  be_mem m = {0};
  CHECK_OK(B->mem_alloc(f->d, (buf_off + count) * es, &m));
  be_rng_args r = {.dist = dist, .seed = seed, .offset = offset, .mean = mean, .stddev = stddev};
  CHECK_OK(B->rng->fill(f->q, t, m, buf_off, count, &r));
  CHECK_OK(B->copy_d2h(f->q, got, m, buf_off * es, count * es));
  finish(f);
  B->mem_free(f->d, &m);
  if (dist == BE_RNG_UNIFORM) {
    for (size_t i = 0; i < count; i++)
      want_uniform(t, seed, offset + i, want, i);
    for (size_t i = 0; i < count; i++)
      if (memcmp(got + i * es, want + i * es, es) != 0)
        TEST_FAIL("uniform %s seed %#" PRIx64 " offset %" PRIu64 " (+%zu, %zu): element %zu "
                  "is %.17g, want %.17g",
                  type_name(t), seed, offset, buf_off, count, i, get(t, got, i), get(t, want, i));
  } else if (t == ACCEL_F64) {
    for (size_t i = 0; i < count; i++) {
      double w = want_normal64(seed, offset + i, mean, stddev), g = get(t, got, i);
      if (!(fabs(g - w) <= 16 * DBL_EPSILON * (fabs(w) + fabs(mean) + 8 * stddev)))
        TEST_FAIL("normal F64 [%zu]: %.17g, want %.17g", i, g, w);
    }
  } else { /* the f32 normal of the same element, rounded: within one 16-bit ulp */
    float *n32 = cuda_xmalloc(count * 4);
    CHECK_OK(be_cpu_philox_fill_normal(n32, count, seed, offset, (float)mean, (float)stddev));
    double ulp = t == ACCEL_F16 ? 0x1p-10 : 0x1p-7;
    for (size_t i = 0; i < count; i++)
      if (!(fabs(get(t, got, i) - n32[i]) <=
            ulp * fabs(n32[i]) + 16 * FLT_EPSILON * (fabs(n32[i]) + fabs(mean) + 8 * stddev)))
        TEST_FAIL("normal %s [%zu]: %.9g, want %.9g", type_name(t), i, get(t, got, i),
                  (double)n32[i]);
    free(n32);
  }
  free(got);
  free(want);
}

TEST(rng_every_float_type) {
  fx f = fx_open_with(0);
  uint32_t all = ACCEL_DTYPE_BIT(ACCEL_F32) | ACCEL_DTYPE_BIT(ACCEL_F64) |
                 ACCEL_DTYPE_BIT(ACCEL_F16) | ACCEL_DTYPE_BIT(ACCEL_BF16);
  CHECK_EQ(B->rng->dtypes(f.d), all);
  for (size_t ti = 0; ti < 4; ti++) {
    uint32_t t = floats[ti];
    if (t == ACCEL_F32)
      continue; /* test_cuda_backend's rng tests */
    for (int r = 0; r < 12; r++)
      rng_case(&f, t, r % 2 ? BE_RNG_NORMAL : BE_RNG_UNIFORM, cuda_rnd_range(1, 200000));
    rng_case(&f, t, BE_RNG_UNIFORM, ((size_t)1 << 22) + 3); /* many grid strides */
  }
  be_mem m = {0};
  CHECK_OK(B->mem_alloc(f.d, 64, &m));
  be_rng_args bits = {.dist = BE_RNG_BITS}, odd = {.dist = BE_RNG_NORMAL, .offset = 3};
  CHECK_ERR(B->rng->fill(f.q, ACCEL_F32, m, 0, 4, &bits), ACCEL_ENOTSUP);
  CHECK_ERR(B->rng->fill(f.q, ACCEL_F64, m, 0, 4, &odd), ACCEL_EINVAL);
  B->mem_free(f.d, &m);
  fx_close(&f);
}

static const test_case tests[] = {
    TEST_CASE(gemm_every_combination),
    TEST_CASE(small_gemms_run_through_cached_plans),
    TEST_CASE(fill_every_size),
    TEST_CASE(vector_ops_f32_f64),
    TEST_CASE(nn_every_float_type),
    TEST_CASE(rng_every_float_type),
    TEST_CASE(repeated_gemms_replay_their_graph),
};

int main(int argc, char **argv) {
  char why[128] = "";
  int count = 0;
  if (B->probe(&count, why, sizeof why) != 0 || count == 0)
    return cuda_test_skip(why[0] ? why : "no device");
  cuda_test_seed();
  return test_main_(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
