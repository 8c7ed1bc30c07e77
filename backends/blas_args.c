/* BLAS argument checks shared by every backend (see blas_args.h). */
#include "backends/blas_args.h"

#include <stddef.h>

#include "accel/error.h"

int be_blas_check_matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t len)
{
  if (rows < 0 || cols < 0 || ld < 1 || ld < rows)
    return ACCEL_EINVAL;
  if (rows == 0 || cols == 0)
    return 0;
  /* The last element touched is (cols - 1) * ld + rows - 1; the product may overflow. */
  uint64_t span = (uint64_t)(cols - 1);
  if (span > 0 && (uint64_t)ld > (UINT64_MAX - (uint64_t)rows) / span)
    return ACCEL_EINVAL;
  return span * (uint64_t)ld + (uint64_t)rows <= len ? 0 : ACCEL_EINVAL;
}

int be_blas_check_vector(int64_t n, int64_t inc, uint64_t len)
{
  if (n < 0 || inc < 1)
    return ACCEL_EINVAL;
  /* The same as a 1 x n matrix with leading dimension inc. */
  return be_blas_check_matrix(n > 0 ? 1 : 0, n, inc, len);
}

void be_blas_stored_shape(be_blas_trans t, int64_t rows, int64_t cols, int64_t *srows,
                          int64_t *scols)
{
  *srows = t == BE_BLAS_TRANS ? cols : rows;
  *scols = t == BE_BLAS_TRANS ? rows : cols;
}

static bool trans_valid(be_blas_trans t)
{
  return t == BE_BLAS_NO_TRANS || t == BE_BLAS_TRANS;
}

int be_blas_check_sgemm(const be_sgemm_args *g, uint64_t a_len, uint64_t b_len, uint64_t c_len)
{
  if (g == NULL || !trans_valid(g->trans_a) || !trans_valid(g->trans_b))
    return ACCEL_EINVAL;
  if (g->m < 0 || g->n < 0 || g->k < 0)
    return ACCEL_EINVAL;
  int64_t r, c;
  be_blas_stored_shape(g->trans_a, g->m, g->k, &r, &c);
  int err = be_blas_check_matrix(r, c, g->lda, a_len);
  if (err == 0) {
    be_blas_stored_shape(g->trans_b, g->k, g->n, &r, &c);
    err = be_blas_check_matrix(r, c, g->ldb, b_len);
  }
  return err != 0 ? err : be_blas_check_matrix(g->m, g->n, g->ldc, c_len);
}

bool be_blas_sgemm_reads_ab(const be_sgemm_args *g)
{
  return g->k > 0 && g->alpha != 0.0f && g->m > 0 && g->n > 0;
}
