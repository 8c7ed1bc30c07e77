/* The op packages of the cuda backend (backend.h): blas (cuBLAS), rng and nn (kernels.cu),
 * over the calls of blas.c and kernels.c. What each runs today: gemm F32 -> F32 (FP32 or
 * TF32; batched as one cuBLAS call per matrix on the queue's stream), axpy and dot in F32, RNG
 * bits into U32 and uniform/normal into F32, the element-wise ops and softmax in F32. Other
 * dtypes are ACCEL_ENOTSUP, and the `supports`/`dtypes` entries say so. */
#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"

/* ---- blas ---- */

static int cuda_gemm_supports(be_device *dev, uint32_t ab_type, uint32_t c_type, uint32_t math)
{
  (void)dev;
  bool f32 = ab_type == ACCEL_F32 && c_type == ACCEL_F32 && math <= BE_GEMM_MATH_TF32;
  return f32 ? 0 : ACCEL_ENOTSUP;
}

static uint32_t cuda_f32_only(be_device *dev)
{
  (void)dev;
  return ACCEL_DTYPE_BIT(ACCEL_F32);
}

static be_sgemm_args sgemm_of(const be_gemm_args *g)
{
  static const be_sgemm_math math[] = {[BE_GEMM_MATH_DEVICE] = BE_SGEMM_MATH_DEVICE,
                                       [BE_GEMM_MATH_FP32] = BE_SGEMM_MATH_FP32,
                                       [BE_GEMM_MATH_TF32] = BE_SGEMM_MATH_TF32};
  return (be_sgemm_args){.trans_a = g->trans_a, .trans_b = g->trans_b, .m = g->m, .n = g->n,
                         .k = g->k, .alpha = (float)g->alpha, .beta = (float)g->beta,
                         .lda = g->lda, .ldb = g->ldb, .ldc = g->ldc, .math = math[g->math]};
}

static int cuda_gemm(be_queue *q, const be_gemm_args *g, be_mem a, size_t a_off, be_mem b,
                     size_t b_off, be_mem c, size_t c_off)
{
  if (g == NULL || g->batch < 1)
    return ACCEL_EINVAL;
  int rc = cuda_gemm_supports(NULL, g->ab_type, g->c_type, g->math);
  if (rc != 0)
    return rc;
  be_sgemm_args s = sgemm_of(g);
  for (int64_t i = 0; rc == 0 && i < g->batch; i++)
    rc = be_cuda_sgemm(q, &s, a, a_off + (size_t)(i * g->stride_a), b,
                       b_off + (size_t)(i * g->stride_b), c, c_off + (size_t)(i * g->stride_c));
  return rc;
}

static int cuda_axpy(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x,
                     size_t x_off, be_mem y, size_t y_off)
{
  if (dtype != ACCEL_F32)
    return ACCEL_ENOTSUP;
  return be_cuda_saxpy(q, n, (float)alpha, x, x_off, y, y_off);
}

static int cuda_dot(be_queue *q, uint32_t dtype, size_t n, be_mem x, size_t x_off, be_mem y,
                    size_t y_off, be_mem result, size_t result_off)
{
  if (dtype != ACCEL_F32)
    return ACCEL_ENOTSUP;
  return be_cuda_sdot(q, n, x, x_off, y, y_off, result, result_off);
}

static int cuda_scal(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x,
                     size_t x_off)
{
  (void)q, (void)dtype, (void)n, (void)alpha, (void)x, (void)x_off;
  return ACCEL_ENOTSUP;
}

const be_blas_pkg be_cuda_blas = {
    .version = BE_BLAS_VERSION,
    .gemm_supports = cuda_gemm_supports,
    .vector_dtypes = cuda_f32_only,
    .gemm = cuda_gemm,
    .axpy = cuda_axpy,
    .dot = cuda_dot,
    .scal = cuda_scal,
};

/* ---- rng ---- */

static int cuda_rng_fill(be_queue *q, uint32_t dtype, be_mem dst, size_t off, size_t count,
                         const be_rng_args *r)
{
  if (r == NULL)
    return ACCEL_EINVAL;
  if (dtype != (r->dist == BE_RNG_BITS ? ACCEL_U32 : ACCEL_F32))
    return ACCEL_ENOTSUP;
  return be_cuda_rng_fill(q, dst, off, count, r);
}

const be_rng_pkg be_cuda_rng = {
    .version = BE_RNG_VERSION,
    .dtypes = cuda_f32_only,
    .fill = cuda_rng_fill,
};

/* ---- nn ---- */

static int cuda_unary(be_queue *q, uint32_t dtype, be_unary_op op, be_mem dst, size_t dst_off,
                      be_mem src, size_t src_off, size_t count)
{
  if (dtype != ACCEL_F32)
    return ACCEL_ENOTSUP;
  return be_cuda_unary(q, op, dst, dst_off, src, src_off, count);
}

static int cuda_softmax(be_queue *q, uint32_t dtype, be_mem dst, size_t dst_off, be_mem src,
                        size_t src_off, size_t rows, size_t cols)
{
  if (dtype != ACCEL_F32)
    return ACCEL_ENOTSUP;
  return be_cuda_softmax(q, dst, dst_off, src, src_off, rows, cols);
}

const be_nn_pkg be_cuda_nn = {
    .version = BE_NN_VERSION,
    .dtypes = cuda_f32_only,
    .unary = cuda_unary,
    .softmax = cuda_softmax,
};

/* ---- core: fill ---- */

/* 4-byte elements through the fill kernel; other sizes are not built yet. */
int be_cuda_fill(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t esize,
                 uint64_t value)
{
  if (esize != 4)
    return esize == 1 || esize == 2 || esize == 8 ? ACCEL_ENOTSUP : ACCEL_EINVAL;
  return be_cuda_fill_u32(q, dst, off, count, (uint32_t)value);
}
