/* The op packages of the cuda backend (backend.h): blas (cuBLAS for gemm, kernels.cu for
 * the vector ops), rng and nn (kernels.cu), over the calls of blas.c and kernels.c. What each
 * runs:
 *   gemm          F64 -> F64, F32 -> F32 (FP32 or TF32), F16 -> F16|F32, BF16 -> BF16|F32
 *                 (FP32 accumulation on tensor cores; BF16 and TF32 need compute capability
 *                 8.0), batched in one cuBLAS call (blas.c);
 *   axpy, dot, scal   F32 and F64 (F16 and BF16: ACCEL_ENOTSUP: no accumulation type is
 *                 defined for them yet);
 *   rng           bits into U32; uniform and normal into F32, F64, F16, BF16;
 *   nn            sigmoid, relu, tanh, row-wise softmax and the reductions in F32, F64, F16,
 *                 BF16 (the `dtypes` entry); the broadcasting binary ops and comparisons in
 *                 those, I32 and U32 (no DIV of integers), the logical ops in I32, U32 and BOOL;
 *                 where in all of them and BOOL; convert
 * between any two of those. The `supports`/`dtypes` entries say the same. */
#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"

#define FLOATS                                                                                     \
  (ACCEL_DTYPE_BIT(ACCEL_F32) | ACCEL_DTYPE_BIT(ACCEL_F64) | ACCEL_DTYPE_BIT(ACCEL_F16) |          \
   ACCEL_DTYPE_BIT(ACCEL_BF16))

/* ---- blas ---- */

static uint32_t cuda_vector_dtypes(be_device *dev) {
  (void)dev;
  return ACCEL_DTYPE_BIT(ACCEL_F32) | ACCEL_DTYPE_BIT(ACCEL_F64);
}

const be_blas_pkg be_cuda_blas = {
    .version = BE_BLAS_VERSION,
    .gemm_supports = be_cuda_gemm_supports,
    .vector_dtypes = cuda_vector_dtypes,
    .gemm = be_cuda_gemm,
    .axpy = be_cuda_axpy,
    .dot = be_cuda_dot,
    .scal = be_cuda_scal,
};

/* ---- rng and nn ---- */

static uint32_t cuda_floats(be_device *dev) {
  (void)dev;
  return FLOATS;
}

const be_rng_pkg be_cuda_rng = {
    .version = BE_RNG_VERSION,
    .dtypes = cuda_floats,
    .fill = be_cuda_rng_fill,
};

const be_nn_pkg be_cuda_nn = {
    .version = BE_NN_VERSION,
    .dtypes = cuda_floats,
    .unary = be_cuda_unary,
    .binary = be_cuda_binary,
    .reduce = be_cuda_reduce,
    .softmax = be_cuda_softmax,
    .where = be_cuda_where,
    .convert = be_cuda_convert,
};

/* ---- core: fill ---- */

/* 1 and 2 bytes through the driver's memset; 4 and 8 through kernels (16-byte stores for 4;
 * cuMemsetD32 is no faster at bandwidth), but small ones through the memset too (kernels.c:
 * it costs the submitting thread less than a launch). */
static int memset_small(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t esize,
                        uint64_t value) {
  CUdeviceptr d = 0;
  int rc = q == NULL ? ACCEL_EINVAL : be_cuda_span(dst, off, count, esize, &d);
  if (rc == 0)
    rc = be_cuda_queue_ok(q);
  if (rc == 0 && count > 0)
    rc = be_cuda_enter(q->dev);
  if (rc != 0 || count == 0)
    return rc;
  CUresult r = esize == 1 ? be_cu.cuMemsetD8Async(d, (unsigned char)value, count, q->stream)
                          : be_cu.cuMemsetD16Async(d, (unsigned short)value, count, q->stream);
  return be_cuda_check(q->dev, r);
}

int be_cuda_fill(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t esize,
                 uint64_t value) {
  switch (esize) {
  case 1:
  case 2:
    return memset_small(q, dst, off, count, esize, value);
  case 4:
    return be_cuda_fill_u32(q, dst, off, count, (uint32_t)value);
  case 8:
    return be_cuda_fill_u64(q, dst, off, count, value);
  default:
    return ACCEL_EINVAL;
  }
}
