/* BLAS argument checks shared by every backend (see blas_args.h). */
#include "ops/blas_args.h"

#include <math.h>
#include <stddef.h>

#include "accel/error.h"

int be_blas_check_matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t len) {
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

int be_blas_check_vector(int64_t n, int64_t inc, uint64_t len) {
  if (n < 0 || inc < 1)
    return ACCEL_EINVAL;
  /* The same as a 1 x n matrix with leading dimension inc. */
  return be_blas_check_matrix(n > 0 ? 1 : 0, n, inc, len);
}

void be_blas_stored_shape(be_blas_trans t, int64_t rows, int64_t cols, int64_t *srows,
                          int64_t *scols) {
  *srows = t == BE_BLAS_TRANS ? cols : rows;
  *scols = t == BE_BLAS_TRANS ? rows : cols;
}

static bool trans_valid(be_blas_trans t) {
  return t == BE_BLAS_NO_TRANS || t == BE_BLAS_TRANS;
}

int be_blas_check_sgemm(const be_sgemm_args *g, uint64_t a_len, uint64_t b_len, uint64_t c_len) {
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

bool be_blas_sgemm_reads_ab(const be_sgemm_args *g) {
  return g->k > 0 && g->alpha != 0.0f && g->m > 0 && g->n > 0;
}

bool be_gemm_combo_ok(uint32_t ab_type, uint32_t c_type, uint32_t math) {
  switch (ab_type) {
  case ACCEL_F64:
    return c_type == ACCEL_F64 && (math == BE_GEMM_MATH_DEVICE || math == BE_GEMM_MATH_FP64);
  case ACCEL_F32:
    return c_type == ACCEL_F32 && math <= BE_GEMM_MATH_TF32;
  case ACCEL_F16:
  case ACCEL_BF16:
    return (c_type == ab_type || c_type == ACCEL_F32) &&
           (math == BE_GEMM_MATH_DEVICE || math == BE_GEMM_MATH_FP32);
  default:
    return false;
  }
}

/* Matrix `count` of a batch (0-based) starts at count * stride; the last one must fit:
 * the check is the matrix's own against the length left before that start. */
static int check_batched(int64_t rows, int64_t cols, int64_t ld, uint64_t len, int64_t batch,
                         int64_t stride) {
  int err = be_blas_check_matrix(rows, cols, ld, len);
  if (err != 0 || batch == 1 || rows == 0 || cols == 0)
    return err;
  uint64_t last = (uint64_t)(batch - 1);
  if (stride > 0 && last > UINT64_MAX / (uint64_t)stride)
    return ACCEL_EINVAL;
  uint64_t start = last * (uint64_t)stride;
  return start <= len ? be_blas_check_matrix(rows, cols, ld, len - start) : ACCEL_EINVAL;
}

/* The C matrices of a batch must not overlap: each spans (n - 1) * ldc + m elements. */
static bool c_apart(const be_gemm_args *g) {
  if (g->batch == 1 || g->m == 0 || g->n == 0)
    return true;
  uint64_t span = (uint64_t)(g->n - 1) * (uint64_t)g->ldc + (uint64_t)g->m;
  return (uint64_t)g->stride_c >= span;
}

/* A batch may reuse A or B (stride 0) but must not do more work than its buffers could hold
 * without reuse: batch * m * n * k <= sqrt(|A| |B| |C|). Every unbatched gemm meets it (m k <=
 * |A|, k n <= |B|, m n <= |C|), and so does a batch whose matrices are distinct or which shares
 * one of A and B; sharing both would let a small op pin a device's queue for hours (a batch of
 * L 1 x 1 products of length L over buffers of L elements). In long double: no overflow. */
static bool work_fits(const be_gemm_args *g, uint64_t a_len, uint64_t b_len, uint64_t c_len) {
  long double work = (long double)g->batch * (long double)g->m * (long double)g->n *
                     (long double)g->k;
  long double room = sqrtl((long double)a_len * (long double)b_len * (long double)c_len);
  return work <= room * (1.0L + 1e-12L);
}

int be_blas_check_gemm(const be_gemm_args *g, uint64_t a_len, uint64_t b_len, uint64_t c_len) {
  if (g == NULL || !trans_valid(g->trans_a) || !trans_valid(g->trans_b))
    return ACCEL_EINVAL;
  if (!be_gemm_combo_ok(g->ab_type, g->c_type, g->math))
    return ACCEL_EINVAL;
  if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 1)
    return ACCEL_EINVAL;
  if (g->batch > 1 && (g->stride_a < 0 || g->stride_b < 0 || g->stride_c < 0 || !c_apart(g)))
    return ACCEL_EINVAL;
  int64_t r, c;
  be_blas_stored_shape(g->trans_a, g->m, g->k, &r, &c);
  int err = check_batched(r, c, g->lda, a_len, g->batch, g->stride_a);
  if (err == 0) {
    be_blas_stored_shape(g->trans_b, g->k, g->n, &r, &c);
    err = check_batched(r, c, g->ldb, b_len, g->batch, g->stride_b);
  }
  if (err == 0)
    err = check_batched(g->m, g->n, g->ldc, c_len, g->batch, g->stride_c);
  return err != 0 || work_fits(g, a_len, b_len, c_len) ? err : ACCEL_ELIMIT;
}

bool be_blas_gemm_reads_ab(const be_gemm_args *g) {
  return g->k > 0 && g->alpha != 0.0 && g->m > 0 && g->n > 0;
}
