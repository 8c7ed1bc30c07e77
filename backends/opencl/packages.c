/* The op packages of the opencl backend (backend.h): blas (CLBlast for gemm, kernels.cl for
 * the vector ops), rng and nn (kernels.cl). What each runs, per device:
 *   gemm          F32 -> F32 (FP32); F64 -> F64 with cl_khr_fp64; F16 -> F16 with cl_khr_fp16
 *                 (blas.c); strided-batched in one CLBlast call. TF32, F16 -> F32 and BF16:
 *                 ACCEL_ENOTSUP.
 *   axpy, dot, scal   F32, and F64 with cl_khr_fp64.
 *   rng           bits into U32; uniform and normal into F32, F16, BF16, and F64 with
 *                 cl_khr_fp64 (16-bit types are storage only: computed in f32, rounded to
 *                 nearest even; no cl_khr_fp16 needed).
 *   nn            sigmoid, relu, tanh, row-wise softmax and the reductions in the same types
 *                 as rng (the `dtypes` entry); the broadcasting binary ops and comparisons in
 *                 those, I32 and U32 (no DIV of integers), the logical ops in I32, U32 and BOOL;
 *                 where in all of them and BOOL; convert
 * between any two of those (F64 as rng). The `supports`/`dtypes` entries say the same. */
#include "accel/error.h"
#include "backends/opencl/device.h"

#define BIT(t) ACCEL_DTYPE_BIT(t)

uint32_t be_ocl_vector_dtypes(be_device *dev) {
  if (dev == NULL)
    return 0;
  return BIT(ACCEL_F32) | (dev->fp64 ? BIT(ACCEL_F64) : 0);
}

uint32_t be_ocl_float_dtypes(be_device *dev) {
  if (dev == NULL)
    return 0;
  return BIT(ACCEL_F32) | BIT(ACCEL_F16) | BIT(ACCEL_BF16) | (dev->fp64 ? BIT(ACCEL_F64) : 0);
}

const be_blas_pkg be_opencl_blas = {
    .version = BE_BLAS_VERSION,
    .gemm_supports = be_ocl_gemm_supports,
    .vector_dtypes = be_ocl_vector_dtypes,
    .gemm = be_ocl_gemm,
    .axpy = be_ocl_axpy,
    .dot = be_ocl_dot,
    .scal = be_ocl_scal,
};

const be_rng_pkg be_opencl_rng = {
    .version = BE_RNG_VERSION,
    .dtypes = be_ocl_float_dtypes,
    .fill = be_ocl_rng_fill,
};

const be_nn_pkg be_opencl_nn = {
    .version = BE_NN_VERSION,
    .dtypes = be_ocl_float_dtypes,
    .unary = be_ocl_unary,
    .binary = be_ocl_binary,
    .reduce = be_ocl_reduce,
    .where = be_ocl_where,
    .convert = be_ocl_convert,
    .softmax = be_ocl_softmax,
};
