/* gemm on the opencl backend: CLBlast on the queue's cl_command_queue, behind the shared
 * argument checks (ops/blas_args.h). One CLBlast call per op:
 *   F64 -> F64   CLBlastDgemm / DgemmStridedBatched (devices with cl_khr_fp64)
 *   F32 -> F32   CLBlastSgemm / SgemmStridedBatched (FP32 math; TF32 is ACCEL_ENOTSUP)
 *   F16 -> F16   CLBlastHgemm / HgemmStridedBatched (devices with cl_khr_fp16)
 * F16 -> F32 and BF16 are ACCEL_ENOTSUP: CLBlast has no mixed-type or bfloat16 gemm.
 * BLAS rules: with k = 0 or alpha = 0, C = beta C and A, B are never read (a kernel,
 * kernels.c); beta = 0 overwrites C, NaN included: CLBlast computes beta * C even for
 * beta = 0 (a NaN stays), so C is zeroed by the same kernel first and CLBlast then adds to
 * zeros. CLBlast compiles its own kernels on the first call per routine, precision and
 * context, and keeps them for the process: one program per routine, about 15 s each on PoCL
 * with a cold cache (PoCL then caches it on disk). So a batch of up to BATCH_LOOP matrices
 * runs as single gemms (the program every gemm of that precision needs anyway), and only
 * larger ones through *gemmStridedBatched: that keeps a cold start of a CPU device within
 * its tests' time limits, and costs nothing at such sizes. */
#include "backends/opencl/device.h" /* first: it picks the OpenCL version of the headers */

#include <clblast_c.h>

#include "accel/error.h"
#include "ops/dtype_conv.h"

int be_ocl_gemm_supports(be_device *dev, uint32_t ab_type, uint32_t c_type, uint32_t math) {
  if (dev == NULL || !be_gemm_combo_ok(ab_type, c_type, math) || math == BE_GEMM_MATH_TF32 ||
      ab_type != c_type)
    return ACCEL_ENOTSUP;
  switch (ab_type) {
  case ACCEL_F32:
    return 0;
  case ACCEL_F64:
    return dev->fp64 ? 0 : ACCEL_ENOTSUP;
  case ACCEL_F16:
    return dev->fp16 ? 0 : ACCEL_ENOTSUP;
  default:
    return ACCEL_ENOTSUP;
  }
}

static int clblast_err(be_device *dev, CLBlastStatusCode s) {
  if (s == CLBlastSuccess)
    return 0;
  if (s < 0 && s > -1024) /* an OpenCL error, passed through */
    return be_ocl_check(dev, (cl_int)s);
  return s == CLBlastNotImplemented || s == CLBlastNoDoublePrecision || s == CLBlastNoHalfPrecision
             ? ACCEL_ENOTSUP
             : ACCEL_EIO;
}

static CLBlastTranspose op_of(be_blas_trans t) {
  return t == BE_BLAS_TRANS ? CLBlastTransposeYes : CLBlastTransposeNo;
}

/* The one CLBlast call (column-major), single or strided-batched. */
#define BATCH_LOOP 16

static CLBlastStatusCode call(be_queue *q, const be_gemm_args *g, cl_mem a, size_t ao, cl_mem b,
                              size_t bo, cl_mem c, size_t co) {
  CLBlastTranspose ta = op_of(g->trans_a), tb = op_of(g->trans_b);
  size_t m = (size_t)g->m, n = (size_t)g->n, k = (size_t)g->k, lda = (size_t)g->lda;
  size_t ldb = (size_t)g->ldb, ldc = (size_t)g->ldc, bat = (size_t)g->batch;
  size_t sa = (size_t)g->stride_a, sb = (size_t)g->stride_b, sc = (size_t)g->stride_c;
  cl_command_queue *cq = &q->cq;
  const CLBlastLayout L = CLBlastLayoutColMajor;
  double beta = g->beta == 0 ? 1.0 : g->beta; /* beta = 0: C was zeroed (above) */
  switch (g->ab_type) {
  case ACCEL_F64:
    return bat == 1 ? CLBlastDgemm(L, ta, tb, m, n, k, g->alpha, a, ao, lda, b, bo, ldb, beta, c,
                                   co, ldc, cq, NULL)
                    : CLBlastDgemmStridedBatched(L, ta, tb, m, n, k, g->alpha, a, ao, lda, sa, b,
                                                 bo, ldb, sb, beta, c, co, ldc, sc, bat, cq, NULL);
  case ACCEL_F16: {
    cl_half al = be_f32_to_f16((float)g->alpha), be = be_f32_to_f16((float)beta);
    return bat == 1 ? CLBlastHgemm(L, ta, tb, m, n, k, al, a, ao, lda, b, bo, ldb, be, c, co, ldc,
                                   cq, NULL)
                    : CLBlastHgemmStridedBatched(L, ta, tb, m, n, k, al, a, ao, lda, sa, b, bo, ldb,
                                                 sb, be, c, co, ldc, sc, bat, cq, NULL);
  }
  default: {
    float al = (float)g->alpha, be = (float)beta;
    return bat == 1 ? CLBlastSgemm(L, ta, tb, m, n, k, al, a, ao, lda, b, bo, ldb, be, c, co, ldc,
                                   cq, NULL)
                    : CLBlastSgemmStridedBatched(L, ta, tb, m, n, k, al, a, ao, lda, sa, b, bo, ldb,
                                                 sb, be, c, co, ldc, sc, bat, cq, NULL);
  }
  }
}

static cl_mem mem_of(be_mem m) {
  return (cl_mem)(uintptr_t)m.handle;
}

int be_ocl_gemm(be_queue *q, const be_gemm_args *g, be_mem a, size_t a_off, be_mem b, size_t b_off,
                be_mem c, size_t c_off) {
  if (q == NULL || g == NULL)
    return ACCEL_EINVAL;
  int rc = be_ocl_gemm_supports(q->dev, g->ab_type, g->c_type, g->math);
  if (rc != 0)
    return rc;
  size_t a_len, b_len, c_len, es = be_ocl_esize(g->ab_type);
  rc = be_ocl_tail(a, a_off, es, &a_len);
  if (rc == 0)
    rc = be_ocl_tail(b, b_off, es, &b_len);
  if (rc == 0)
    rc = be_ocl_tail(c, c_off, es, &c_len);
  if (rc == 0)
    rc = be_blas_check_gemm(g, a_len, b_len, c_len);
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || g->m == 0 || g->n == 0)
    return rc;
  if (!be_blas_gemm_reads_ab(g))
    return be_ocl_scale(q, g, c, c_off, g->beta);
  if (g->beta == 0 && (rc = be_ocl_scale(q, g, c, c_off, 0)) != 0)
    return rc;
  if (g->batch > BATCH_LOOP)
    return clblast_err(q->dev, call(q, g, mem_of(a), a_off, mem_of(b), b_off, mem_of(c), c_off));
  be_gemm_args one = *g;
  one.batch = 1;
  for (int64_t i = 0; i < g->batch && rc == 0; i++)
    rc = clblast_err(q->dev, call(q, &one, mem_of(a), a_off + (size_t)(i * g->stride_a), mem_of(b),
                                  b_off + (size_t)(i * g->stride_b), mem_of(c),
                                  c_off + (size_t)(i * g->stride_c)));
  return rc;
}
