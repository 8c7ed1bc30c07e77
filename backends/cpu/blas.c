/* BLAS on the cpu backend: OpenBLAS through its CBLAS interface, behind the shared argument
 * checks (ops/blas_args.h). Every call goes through be_openblas() (openblas.h), never
 * through the global cblas_* names, which another BLAS in the process may own. */
#include <limits.h>

#include "accel/error.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/openblas.h"

/* OpenBLAS's LP64 interface takes int; an ILP64 build (blasint 64-bit) takes anything. */
static bool fits_blasint(int64_t v) {
  return sizeof(blasint) >= sizeof(int64_t) || v <= INT_MAX;
}

static bool sgemm_fits(const be_sgemm_args *g) {
  return fits_blasint(g->m) && fits_blasint(g->n) && fits_blasint(g->k) && fits_blasint(g->lda) &&
         fits_blasint(g->ldb) && fits_blasint(g->ldc);
}

static enum CBLAS_TRANSPOSE cblas_trans(be_blas_trans t) {
  return t == BE_BLAS_TRANS ? CblasTrans : CblasNoTrans;
}

/* C = beta * C, done here rather than by OpenBLAS so that the BLAS rules hold on every
 * OpenBLAS version: beta = 0 writes zeros (NaN in C vanishes), A and B are not read. */
static void scale_c(const be_sgemm_args *g, float *c) {
  for (int64_t j = 0; j < g->n; j++) {
    float *col = c + j * g->ldc;
    for (int64_t i = 0; i < g->m; i++)
      col[i] = g->beta == 0.0f ? 0.0f : g->beta * col[i];
  }
}

int be_cpu_sgemm(const be_sgemm_args *g, const float *a, size_t a_len, const float *b, size_t b_len,
                 float *c, size_t c_len) {
  int err = be_blas_check_sgemm(g, a_len, b_len, c_len);
  if (err != 0)
    return err;
  if (g->m == 0 || g->n == 0)
    return 0;
  bool reads_ab = be_blas_sgemm_reads_ab(g);
  if (c == NULL || (reads_ab && (a == NULL || b == NULL)))
    return ACCEL_EINVAL;
  if (!reads_ab) {
    scale_c(g, c);
    return 0;
  }
  if (!sgemm_fits(g))
    return ACCEL_ELIMIT;
  const be_openblas_api *ob = be_openblas();
  if (ob == NULL)
    return ACCEL_ENOTSUP;
  ob->cblas_sgemm(CblasColMajor, cblas_trans(g->trans_a), cblas_trans(g->trans_b), (blasint)g->m,
                  (blasint)g->n, (blasint)g->k, g->alpha, a, (blasint)g->lda, b, (blasint)g->ldb,
                  g->beta, c, (blasint)g->ldc);
  return 0;
}

/* The checks the vector ops share (scal passes x twice). With n = 0 the buffers may be NULL. */
static int check_vectors(int64_t n, const void *x, int64_t incx, size_t x_len, const void *y,
                         int64_t incy, size_t y_len) {
  int err = be_blas_check_vector(n, incx, x_len);
  if (err == 0)
    err = be_blas_check_vector(n, incy, y_len);
  if (err != 0 || n == 0)
    return err;
  if (x == NULL || y == NULL)
    return ACCEL_EINVAL;
  return fits_blasint(n) && fits_blasint(incx) && fits_blasint(incy) ? 0 : ACCEL_ELIMIT;
}

int be_cpu_saxpy(int64_t n, float alpha, const float *x, int64_t incx, size_t x_len, float *y,
                 int64_t incy, size_t y_len) {
  int err = check_vectors(n, x, incx, x_len, y, incy, y_len);
  if (err != 0 || n == 0)
    return err;
  const be_openblas_api *ob = be_openblas();
  if (ob == NULL)
    return ACCEL_ENOTSUP;
  ob->cblas_saxpy((blasint)n, alpha, x, (blasint)incx, y, (blasint)incy);
  return 0;
}

int be_cpu_sdot(int64_t n, const float *x, int64_t incx, size_t x_len, const float *y, int64_t incy,
                size_t y_len, float *result) {
  if (result == NULL)
    return ACCEL_EINVAL;
  int err = check_vectors(n, x, incx, x_len, y, incy, y_len);
  if (err != 0)
    return err;
  if (n == 0) {
    *result = 0.0f;
    return 0;
  }
  const be_openblas_api *ob = be_openblas();
  if (ob == NULL)
    return ACCEL_ENOTSUP;
  *result = ob->cblas_sdot((blasint)n, x, (blasint)incx, y, (blasint)incy);
  return 0;
}

int be_cpu_daxpy(int64_t n, double alpha, const double *x, int64_t incx, size_t x_len, double *y,
                 int64_t incy, size_t y_len) {
  int err = check_vectors(n, x, incx, x_len, y, incy, y_len);
  if (err != 0 || n == 0)
    return err;
  const be_openblas_api *ob = be_openblas();
  if (ob == NULL)
    return ACCEL_ENOTSUP;
  ob->cblas_daxpy((blasint)n, alpha, x, (blasint)incx, y, (blasint)incy);
  return 0;
}

int be_cpu_ddot(int64_t n, const double *x, int64_t incx, size_t x_len, const double *y,
                int64_t incy, size_t y_len, double *result) {
  if (result == NULL)
    return ACCEL_EINVAL;
  int err = check_vectors(n, x, incx, x_len, y, incy, y_len);
  if (err != 0)
    return err;
  if (n == 0) {
    *result = 0.0;
    return 0;
  }
  const be_openblas_api *ob = be_openblas();
  if (ob == NULL)
    return ACCEL_ENOTSUP;
  *result = ob->cblas_ddot((blasint)n, x, (blasint)incx, y, (blasint)incy);
  return 0;
}

int be_cpu_sscal(int64_t n, float alpha, float *x, int64_t incx, size_t x_len) {
  int err = check_vectors(n, x, incx, x_len, x, incx, x_len);
  if (err != 0 || n == 0)
    return err;
  const be_openblas_api *ob = be_openblas();
  if (ob == NULL)
    return ACCEL_ENOTSUP;
  ob->cblas_sscal((blasint)n, alpha, x, (blasint)incx);
  return 0;
}

int be_cpu_dscal(int64_t n, double alpha, double *x, int64_t incx, size_t x_len) {
  int err = check_vectors(n, x, incx, x_len, x, incx, x_len);
  if (err != 0 || n == 0)
    return err;
  const be_openblas_api *ob = be_openblas();
  if (ob == NULL)
    return ACCEL_ENOTSUP;
  ob->cblas_dscal((blasint)n, alpha, x, (blasint)incx);
  return 0;
}
