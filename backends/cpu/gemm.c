/* gemm of every dtype combination the cpu runs (cpu_kernels.h): F64 through dgemm, F32
 * through be_cpu_sgemm, F16 and BF16 by widening A and B to f32 scratch and one sgemm with
 * FP32 accumulation (OpenBLAS 0.3.21 has no half gemm; sbgemm exists only in builds with
 * BUILD_BFLOAT16, and using it for BF16 alone would give the two 16-bit types different
 * arithmetic). A 16-bit C is widened too (when beta reads it) and rounded back to nearest
 * even. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "accel/error.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/openblas.h"
#include "ops/dtype_conv.h"
#include "runtime/alloc.h"

static bool fits_blasint(int64_t v) {
  return sizeof(blasint) >= sizeof(int64_t) || v <= INT_MAX;
}

static bool gemm_fits(const be_gemm_args *g) {
  return fits_blasint(g->m) && fits_blasint(g->n) && fits_blasint(g->k) && fits_blasint(g->lda) &&
         fits_blasint(g->ldb) && fits_blasint(g->ldc);
}

static enum CBLAS_TRANSPOSE cblas_trans(be_blas_trans t) {
  return t == BE_BLAS_TRANS ? CblasTrans : CblasNoTrans;
}

static bool is16(uint32_t dtype) {
  return dtype == ACCEL_F16 || dtype == ACCEL_BF16;
}

static float to_f32(uint32_t dtype, uint16_t h) {
  return dtype == ACCEL_F16 ? be_f16_to_f32(h) : be_bf16_to_f32(h);
}

static uint16_t of_f32(uint32_t dtype, float f) {
  return dtype == ACCEL_F16 ? be_f32_to_f16(f) : be_f32_to_bf16(f);
}

/* A rows x cols matrix with leading dimension ld, widened into a packed one (ld = rows). */
static void widen(uint32_t dtype, float *dst, const uint16_t *src, int64_t rows, int64_t cols,
                  int64_t ld) {
  for (int64_t j = 0; j < cols; j++)
    for (int64_t i = 0; i < rows; i++)
      dst[i + j * rows] = to_f32(dtype, src[i + j * ld]);
}

/* C = beta * C in C's own type: beta = 0 writes zeros (NaN in C vanishes). 16-bit elements:
 * in float, rounded back. */
static void scale_c(const be_gemm_args *g, void *c) {
  for (int64_t j = 0; j < g->n; j++)
    for (int64_t i = 0; i < g->m; i++) {
      size_t at = (size_t)(i + j * g->ldc);
      if (g->c_type == ACCEL_F64) {
        double *p = (double *)c + at;
        *p = g->beta == 0.0 ? 0.0 : g->beta * *p;
      } else if (g->c_type == ACCEL_F32) {
        float *p = (float *)c + at;
        *p = g->beta == 0.0 ? 0.0f : (float)g->beta * *p;
      } else {
        uint16_t *p = (uint16_t *)c + at;
        float v = g->beta == 0.0 ? 0.0f : (float)g->beta * to_f32(g->c_type, *p);
        *p = of_f32(g->c_type, v);
      }
    }
}

/* Packed f32 copies of one matrix each of A and B, and of C when it is 16-bit. */
typedef struct scratch {
  float *a, *b, *c;
} scratch;

static void scratch_free(scratch *s) {
  rt_free(s->a);
  rt_free(s->b);
  rt_free(s->c);
}

static int scratch_alloc(const be_gemm_args *g, scratch *s) {
  *s = (scratch){0};
  if (!is16(g->ab_type))
    return 0;
  s->a = rt_malloc((size_t)(g->m * g->k) * sizeof(float));
  s->b = rt_malloc((size_t)(g->k * g->n) * sizeof(float));
  if (is16(g->c_type))
    s->c = rt_malloc((size_t)(g->m * g->n) * sizeof(float));
  if (s->a == NULL || s->b == NULL || (is16(g->c_type) && s->c == NULL)) {
    scratch_free(s);
    return ACCEL_ENOMEM;
  }
  return 0;
}

static void dgemm_one(const be_openblas_api *ob, const be_gemm_args *g, const double *a,
                      const double *b, double *c) {
  ob->cblas_dgemm(CblasColMajor, cblas_trans(g->trans_a), cblas_trans(g->trans_b), (blasint)g->m,
                  (blasint)g->n, (blasint)g->k, g->alpha, a, (blasint)g->lda, b, (blasint)g->ldb,
                  g->beta, c, (blasint)g->ldc);
}

/* Matrix `i` of a batch, 16-bit A and B. A batch that shares A or B (stride 0) widens it
 * once. */
static void gemm16_one(const be_openblas_api *ob, const be_gemm_args *g, const scratch *s,
                       int64_t i, const uint16_t *a, const uint16_t *b, void *c) {
  int64_t ar, ac, br, bc;
  be_blas_stored_shape(g->trans_a, g->m, g->k, &ar, &ac);
  be_blas_stored_shape(g->trans_b, g->k, g->n, &br, &bc);
  if (i == 0 || g->stride_a != 0)
    widen(g->ab_type, s->a, a, ar, ac, g->lda);
  if (i == 0 || g->stride_b != 0)
    widen(g->ab_type, s->b, b, br, bc, g->ldb);
  float *cf = is16(g->c_type) ? s->c : c;
  int64_t ldc = is16(g->c_type) ? g->m : g->ldc;
  if (is16(g->c_type) && g->beta != 0.0)
    widen(g->c_type, cf, c, g->m, g->n, g->ldc);
  else if (is16(g->c_type))
    memset(cf, 0, (size_t)(g->m * g->n) * sizeof(float));
  ob->cblas_sgemm(CblasColMajor, cblas_trans(g->trans_a), cblas_trans(g->trans_b), (blasint)g->m,
                  (blasint)g->n, (blasint)g->k, (float)g->alpha, s->a, (blasint)(ar > 0 ? ar : 1),
                  s->b, (blasint)(br > 0 ? br : 1), (float)g->beta, cf, (blasint)ldc);
  if (!is16(g->c_type))
    return;
  for (int64_t j = 0; j < g->n; j++)
    for (int64_t r = 0; r < g->m; r++)
      ((uint16_t *)c)[r + j * g->ldc] = of_f32(g->c_type, cf[r + j * g->m]);
}

static be_sgemm_args sgemm_of(const be_gemm_args *g) {
  return (be_sgemm_args){.trans_a = g->trans_a,
                         .trans_b = g->trans_b,
                         .m = g->m,
                         .n = g->n,
                         .k = g->k,
                         .alpha = (float)g->alpha,
                         .beta = (float)g->beta,
                         .lda = g->lda,
                         .ldb = g->ldb,
                         .ldc = g->ldc,
                         .math = BE_SGEMM_MATH_FP32};
}

/* Every matrix of the batch; A, B and C were checked, OpenBLAS is bound, scratch is ready. */
static int gemm_batch(const be_openblas_api *ob, const be_gemm_args *g, const scratch *s,
                      const char *a, size_t a_len, const char *b, size_t b_len, char *c,
                      size_t c_len) {
  int err = 0;
  size_t ab = be_dtype_size(g->ab_type), cb = be_dtype_size(g->c_type);
  be_sgemm_args sg = sgemm_of(g);
  for (int64_t i = 0; err == 0 && i < g->batch; i++) {
    size_t ao = (size_t)(i * g->stride_a), bo = (size_t)(i * g->stride_b);
    size_t co = (size_t)(i * g->stride_c);
    /* Through void *: the element pointers are aligned (buffers are, offsets are elements). */
    const void *ai = a + ao * ab, *bi = b + bo * ab;
    void *ci = c + co * cb;
    if (g->ab_type == ACCEL_F64)
      dgemm_one(ob, g, (const double *)ai, (const double *)bi, (double *)ci);
    else if (g->ab_type == ACCEL_F32)
      err = be_cpu_sgemm(&sg, (const float *)ai, a_len - ao, (const float *)bi, b_len - bo,
                         (float *)ci, c_len - co);
    else
      gemm16_one(ob, g, s, i, (const uint16_t *)ai, (const uint16_t *)bi, ci);
  }
  return err;
}

/* Everything that can fail before anything is written. */
static int gemm_check(const be_gemm_args *g, const void *a, size_t a_len, const void *b,
                      size_t b_len, const void *c, size_t c_len) {
  int err = be_blas_check_gemm(g, a_len, b_len, c_len);
  if (err != 0)
    return err;
  if (g->math == BE_GEMM_MATH_TF32)
    return ACCEL_ENOTSUP; /* no tensor cores here */
  if (g->m == 0 || g->n == 0)
    return 0;
  bool reads_ab = be_blas_gemm_reads_ab(g);
  if (c == NULL || (reads_ab && (a == NULL || b == NULL)))
    return ACCEL_EINVAL;
  return !reads_ab || gemm_fits(g) ? 0 : ACCEL_ELIMIT;
}

int be_cpu_gemm(const be_gemm_args *g, const void *a, size_t a_len, const void *b, size_t b_len,
                void *c, size_t c_len) {
  int err = gemm_check(g, a, a_len, b, b_len, c, c_len);
  if (err != 0 || g->m == 0 || g->n == 0)
    return err;
  size_t cb = be_dtype_size(g->c_type);
  if (!be_blas_gemm_reads_ab(g)) {
    for (int64_t i = 0; i < g->batch; i++)
      scale_c(g, (char *)c + (size_t)(i * g->stride_c) * cb);
    return 0;
  }
  const be_openblas_api *ob = be_openblas();
  if (ob == NULL)
    return ACCEL_ENOTSUP;
  scratch s;
  if ((err = scratch_alloc(g, &s)) != 0)
    return err;
  err = gemm_batch(ob, g, &s, a, a_len, b, b_len, c, c_len);
  scratch_free(&s);
  return err;
}
