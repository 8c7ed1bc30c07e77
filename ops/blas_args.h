/* BLAS argument checks shared by every backend (cpu, cuda, opencl), so that one bad op fails the
 * same way everywhere, before anything touches memory.
 *
 * Matrices are column-major as in BLAS: element (i, j) of a rows x cols matrix with leading
 * dimension ld is at i + j * ld. Buffer lengths are counted in elements, not bytes. A shape that
 * touches no element (rows or cols 0) needs no buffer, but its leading dimension must still be
 * valid (ld >= max(1, rows)), as reference BLAS checks it.
 *
 * Pure functions: thread-safe, never block. Each returns 0 or ACCEL_EINVAL.
 */
#ifndef BE_BLAS_ARGS_H
#define BE_BLAS_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "accel/dtype.h"

typedef enum be_blas_trans {
  BE_BLAS_NO_TRANS = 0, /* op(X) = X */
  BE_BLAS_TRANS = 1     /* op(X) = X^T */
} be_blas_trans;

/* The arithmetic of an sgemm: the device's default (FP32 unless opened with tf32), or forced. */
typedef enum be_sgemm_math {
  BE_SGEMM_MATH_DEVICE = 0,
  BE_SGEMM_MATH_FP32,
  BE_SGEMM_MATH_TF32 /* tensor cores, 10-bit mantissa inputs; ACCEL_ENOTSUP where absent */
} be_sgemm_math;

/* C = alpha * op(A) * op(B) + beta * C, with op(A) m x k, op(B) k x n, C m x n. The shape and
 * the scalars; buffers travel separately because each backend names them its own way. */
typedef struct be_sgemm_args {
  be_blas_trans trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
  int64_t lda, ldb, ldc;
  be_sgemm_math math;
} be_sgemm_args;

/* The arithmetic of a gemm (accel_math's values). DEVICE: the device's default for the
 * input type (FP64 for F64 inputs; FP32 for F32 unless the device was opened with tf32; FP32
 * accumulation for F16 and BF16 inputs, on tensor cores where the device has them). */
typedef enum be_gemm_math {
  BE_GEMM_MATH_DEVICE = 0,
  BE_GEMM_MATH_FP32,
  BE_GEMM_MATH_TF32, /* F32 inputs only */
  BE_GEMM_MATH_FP64  /* F64 inputs only */
} be_gemm_math;

/* A gemm of any element types, possibly strided-batched: for b < batch,
 * C_b = alpha * op(A_b) * op(B_b) + beta * C_b with X_b starting stride_x elements after
 * X_(b-1). A and B share ab_type; C has c_type (accel_dtype values). Scalars travel as
 * doubles (every f32 scalar is exactly one). Which combinations exist is be_gemm_combo_ok;
 * which a device runs, its blas package's gemm_supports. */
typedef struct be_gemm_args {
  be_blas_trans trans_a, trans_b;
  int64_t m, n, k;
  double alpha, beta;
  int64_t lda, ldb, ldc;
  uint32_t ab_type, c_type;
  be_gemm_math math;
  int64_t batch;                        /* >= 1 */
  int64_t stride_a, stride_b, stride_c; /* elements; ignored when batch = 1 */
} be_gemm_args;

/* Whether (ab_type, c_type, math) is a gemm accel defines at all: F64 -> F64 (FP64),
 * F32 -> F32 (FP32, TF32), F16 -> F16 or F32, BF16 -> BF16 or F32 (FP32 accumulation). */
bool be_gemm_combo_ok(uint32_t ab_type, uint32_t c_type, uint32_t math);

/* All of a gemm: the combination, transposes, shapes and leading dimensions, batch >= 1 and
 * strides >= 0, every matrix of the batch within its buffer (lengths in elements): else
 * ACCEL_EINVAL. Batches may share A or B (stride 0) but not C (stride_c must keep the C
 * matrices apart), and not do more work than their buffers could hold without reuse
 * (batch m n k <= sqrt(|A| |B| |C|): sharing both A and B): ACCEL_ELIMIT. */
int be_blas_check_gemm(const be_gemm_args *g, uint64_t a_len, uint64_t b_len, uint64_t c_len);

/* Whether a gemm reads A and B at all (as be_blas_sgemm_reads_ab). */
bool be_blas_gemm_reads_ab(const be_gemm_args *g);

/* A rows x cols matrix with leading dimension ld in a buffer of len elements: rows, cols >= 0,
 * ld >= max(1, rows), and, when it touches anything, (cols - 1) * ld + rows <= len (computed
 * without overflow). */
int be_blas_check_matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t len);

/* n elements with stride inc (>= 1; negative strides are not supported) in len elements:
 * n >= 0 and, when n > 0, (n - 1) * inc + 1 <= len. */
int be_blas_check_vector(int64_t n, int64_t inc, uint64_t len);

/* All of sgemm: valid transposes, then A (m x k, stored k x m when transposed), B (k x n, stored
 * n x k when transposed) and C (m x n) against their buffer lengths. */
int be_blas_check_sgemm(const be_sgemm_args *g, uint64_t a_len, uint64_t b_len, uint64_t c_len);

/* Rows and columns of op(X) as stored: a transposed op(X) of r x c is stored c x r. */
void be_blas_stored_shape(be_blas_trans t, int64_t rows, int64_t cols, int64_t *srows,
                          int64_t *scols);

/* Whether sgemm reads A and B at all: not when k = 0 or alpha = 0 (BLAS semantics: C = beta*C,
 * and then A and B may hold anything, NaN included). */
bool be_blas_sgemm_reads_ab(const be_sgemm_args *g);

#endif
