/* The op packages of the cpu backend (backend.h): blas, rng and nn, over the submit calls of
 * ops.c (items that run the kernels of cpu_kernels.h on a queue's worker).
 *
 * What each runs:
 *   gemm     F64 -> F64 (dgemm), F32 -> F32 (sgemm), F16 -> F16|F32 and BF16 -> BF16|F32
 *            (widened to f32, sgemm with FP32 accumulation, a 16-bit C rounded back to
 *            nearest even); strided-batched as one item. TF32 is ACCEL_ENOTSUP (no tensor
 *            cores), and so is all of it when OpenBLAS could not be bound (openblas.h).
 *   axpy, dot, scal   F32 and F64 (not F16/BF16: ACCEL_ENOTSUP), likewise only with OpenBLAS.
 *   rng      BITS into U32; UNIFORM and NORMAL into F32, F64, F16, BF16 (philox.h).
 *   nn       sigmoid, relu, tanh, row-wise softmax and the reductions (sum, max, min, mean)
 *            in F32, F64, F16, BF16 (the `dtypes` entry); the broadcasting binary ops and
 *            comparisons in those, I32 and U32 (no DIV of integers), the logical ops in I32,
 *            U32 and BOOL; where in all of them
 *            and BOOL, convert between any two of those (backend.h: what every nn package of
 *            this version runs).
 * The `supports`/`dtypes` entries say exactly this; what they exclude is ACCEL_ENOTSUP from the
 * submit call, before any argument check. Scratch memory (16-bit gemm and softmax) is
 * allocated by the worker that runs the item, never by the submitting thread; if it fails the
 * item fails with ACCEL_ENOMEM (the queue's error, as for any failing item). */
#include "accel/error.h"
#include "backends/cpu/backend_cpu.h"
#include "backends/cpu/openblas.h"

#define BIT(t) ACCEL_DTYPE_BIT(t)
#define FLOATS (BIT(ACCEL_F32) | BIT(ACCEL_F64) | BIT(ACCEL_F16) | BIT(ACCEL_BF16))
#define INTS (BIT(ACCEL_I32) | BIT(ACCEL_U32))

static bool has(uint32_t set, uint32_t dtype) {
  return dtype <= ACCEL_DTYPE_MAX_ && (set & BIT(dtype)) != 0;
}

/* ---- blas ---- */

static int cpu_gemm_supports(be_device *dev, uint32_t ab_type, uint32_t c_type, uint32_t math) {
  (void)dev;
  bool ok = be_gemm_combo_ok(ab_type, c_type, math) && math != BE_GEMM_MATH_TF32;
  return ok && be_openblas() != NULL ? 0 : ACCEL_ENOTSUP;
}

static uint32_t cpu_vector_dtypes(be_device *dev) {
  (void)dev;
  return be_openblas() != NULL ? BIT(ACCEL_F32) | BIT(ACCEL_F64) : 0;
}

static int cpu_gemm(be_queue *q, const be_gemm_args *g, be_mem a, size_t a_off, be_mem b,
                    size_t b_off, be_mem c, size_t c_off) {
  if (g == NULL)
    return ACCEL_EINVAL;
  int rc = cpu_gemm_supports(NULL, g->ab_type, g->c_type, g->math);
  return rc != 0 ? rc : be_cpu_submit_gemm(q, g, a, a_off, b, b_off, c, c_off);
}

static int cpu_axpy(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off,
                    be_mem y, size_t y_off) {
  if (!has(cpu_vector_dtypes(NULL), dtype))
    return ACCEL_ENOTSUP;
  return be_cpu_submit_axpy(q, dtype, n, alpha, x, x_off, y, y_off);
}

static int cpu_dot(be_queue *q, uint32_t dtype, size_t n, be_mem x, size_t x_off, be_mem y,
                   size_t y_off, be_mem result, size_t result_off) {
  if (!has(cpu_vector_dtypes(NULL), dtype))
    return ACCEL_ENOTSUP;
  return be_cpu_submit_dot(q, dtype, n, x, x_off, y, y_off, result, result_off);
}

static int cpu_scal(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off) {
  if (!has(cpu_vector_dtypes(NULL), dtype))
    return ACCEL_ENOTSUP;
  return be_cpu_submit_scal(q, dtype, n, alpha, x, x_off);
}

const be_blas_pkg be_cpu_blas = {
    .version = BE_BLAS_VERSION,
    .gemm_supports = cpu_gemm_supports,
    .vector_dtypes = cpu_vector_dtypes,
    .gemm = cpu_gemm,
    .axpy = cpu_axpy,
    .dot = cpu_dot,
    .scal = cpu_scal,
};

/* ---- rng and nn: every float type ---- */

static uint32_t cpu_floats(be_device *dev) {
  (void)dev;
  return FLOATS;
}

static int cpu_rng_fill(be_queue *q, uint32_t dtype, be_mem dst, size_t off, size_t count,
                        const be_rng_args *r) {
  if (r == NULL)
    return ACCEL_EINVAL;
  bool ok = r->dist == BE_RNG_BITS ? dtype == ACCEL_U32 : has(FLOATS, dtype);
  return ok ? be_cpu_submit_rng(q, dtype, dst, off, count, r) : ACCEL_ENOTSUP;
}

const be_rng_pkg be_cpu_rng = {
    .version = BE_RNG_VERSION,
    .dtypes = cpu_floats,
    .fill = cpu_rng_fill,
};

static int cpu_unary(be_queue *q, uint32_t dtype, be_unary_op op, be_mem dst, size_t dst_off,
                     be_mem src, size_t src_off, size_t count) {
  if (!has(FLOATS, dtype))
    return ACCEL_ENOTSUP;
  return be_cpu_submit_unary(q, dtype, op, dst, dst_off, src, src_off, count);
}

static int cpu_softmax(be_queue *q, uint32_t dtype, be_mem dst, size_t dst_off, be_mem src,
                       size_t src_off, size_t rows, size_t cols) {
  if (!has(FLOATS, dtype))
    return ACCEL_ENOTSUP;
  return be_cpu_submit_softmax(q, dtype, dst, dst_off, src, src_off, rows, cols);
}

static int cpu_binary(be_queue *q, uint32_t dtype, const be_binary_args *g, be_mem dst,
                      size_t dst_off, be_mem a, size_t a_off, be_mem b, size_t b_off) {
  if (!has(FLOATS | INTS | BIT(ACCEL_BOOL), dtype))
    return ACCEL_ENOTSUP;
  return be_cpu_submit_binary(q, dtype, g, dst, dst_off, a, a_off, b, b_off);
}

static int cpu_where(be_queue *q, uint32_t dtype, const be_where_args *g, be_mem dst,
                     size_t dst_off, be_mem cond, size_t c_off, be_mem a, size_t a_off, be_mem b,
                     size_t b_off) {
  if (!has(FLOATS | INTS | BIT(ACCEL_BOOL), dtype))
    return ACCEL_ENOTSUP;
  return be_cpu_submit_where(q, dtype, g, dst, dst_off, cond, c_off, a, a_off, b, b_off);
}

static int cpu_reduce(be_queue *q, uint32_t dtype, const be_reduction_args *g, be_mem dst,
                      size_t dst_off, be_mem src, size_t src_off) {
  if (!has(FLOATS, dtype))
    return ACCEL_ENOTSUP;
  return be_cpu_submit_reduce(q, dtype, g, dst, dst_off, src, src_off);
}

static int cpu_convert(be_queue *q, uint32_t dst_dtype, uint32_t src_dtype,
                       const be_convert_args *g, be_mem dst, size_t dst_off, be_mem src,
                       size_t src_off) {
  if (!be_convert_dtype_ok(dst_dtype) || !be_convert_dtype_ok(src_dtype))
    return ACCEL_ENOTSUP;
  return be_cpu_submit_convert(q, dst_dtype, src_dtype, g, dst, dst_off, src, src_off);
}

const be_nn_pkg be_cpu_nn = {
    .version = BE_NN_VERSION,
    .dtypes = cpu_floats,
    .unary = cpu_unary,
    .softmax = cpu_softmax,
    .binary = cpu_binary,
    .reduce = cpu_reduce,
    .where = cpu_where,
    .convert = cpu_convert,
};
