/* gemm on the cuda backend: cuBLAS (loaded at run time, cublas_lib.h) on the queue's stream,
 * behind the shared argument checks (ops/blas_args.h). One cublasGemmEx, or one
 * cublasGemmStridedBatchedEx for a batch, per op:
 *   F64 -> F64             CUBLAS_COMPUTE_64F, double scalars
 *   F32 -> F32             CUBLAS_COMPUTE_32F, or _32F_FAST_TF32 for TF32 math (and for the
 *                          device's default once be_cuda_set_tf32 / ACCEL_CUDA_TF32=1 said so)
 *   F16 -> F16 or F32      CUBLAS_COMPUTE_32F: tensor cores, FP32 accumulation, float scalars
 *   BF16 -> BF16 or F32    the same; compute capability 8.0 or later
 * BLAS rules for every type: with k = 0 or alpha = 0, C = beta C and A, B are never read
 * (a kernel, kernels.c); beta = 0 overwrites C, NaN included (cuBLAS does not read C then).
 *
 * Each queue gets its own cuBLAS handle, bound to its stream, on its first gemm: no lock
 * between queues, and a device that never multiplies never pays for cuBLAS's start-up (which
 * would lengthen every restart after a fault). */
#include <limits.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/cublas_lib.h"
#include "backends/cuda/device.h"
#include "backends/cuda/gemm_graph.h"
#include "backends/cuda/gemm_lt.h"
#include "runtime/status.h"

/* cuBLAS's int interface (strides are 64-bit there). */
static bool fits(int64_t v) {
  return v <= INT_MAX;
}

static int gemm_limits(const be_gemm_args *g) {
  return fits(g->m) && fits(g->n) && fits(g->k) && fits(g->lda) && fits(g->ldb) && fits(g->ldc) &&
                 fits(g->batch)
             ? 0
             : ACCEL_ELIMIT;
}

/* The handle's workspace: what cuBLAS's guide recommends (32 MiB on Hopper and later, 4 MiB
 * before), the size it would take itself. Given to the handle, so that cuBLAS allocates none
 * of its own while a gemm is captured into a graph (gemm_graph.c), which would then hold
 * memory of its own; from the device's stream-ordered pool, which does not wait for the device
 * as cuMemAlloc would. Without one (no pool, no memory), cuBLAS keeps its own and gemms are
 * not captured (be_cuda_gemm_issue). */
static void give_workspace(be_queue *q, const be_cublas_api *api, cublasHandle_t h) {
  size_t bytes = (size_t)(q->dev->cc >= 90 ? 32 : 4) << 20;
  CUdeviceptr w = 0;
  if (be_cu.cuMemAllocAsync == NULL || be_cu.cuMemFreeAsync == NULL ||
      be_cuda_trace("cuBLAS workspace", be_cu.cuMemAllocAsync(&w, bytes, q->stream)) != 0)
    return;
  if (api->cublasSetWorkspace_v2(h, (void *)(uintptr_t)w, bytes) != CUBLAS_STATUS_SUCCESS) {
    be_cu.cuMemFreeAsync(w, q->stream);
    return;
  }
  q->blas_work = w;
}

static int handle_of(be_queue *q, const be_cublas_api *api, cublasHandle_t *out) {
  if (q->blas == NULL) {
    cublasHandle_t h = NULL;
    int rc = be_cublas_err(api->cublasCreate_v2(&h));
    if (rc == 0) /* the stream first: setting it resets the workspace to cuBLAS's own */
      rc = be_cublas_err(api->cublasSetStream_v2(h, q->stream));
    if (rc != 0) {
      if (h != NULL)
        api->cublasDestroy_v2(h);
      return rc;
    }
    give_workspace(q, api, h);
    q->blas = h;
  }
  *out = q->blas;
  return 0;
}

void be_cuda_blas_release(be_queue *q) {
  be_cuda_gemm_graph_release(q, true); /* first: the graphs use the workspaces below */
  be_cuda_gemm_lt_release(q, true);
  const be_cublas_api *api = be_cublas();
  if (q->blas != NULL && api != NULL)
    api->cublasDestroy_v2(q->blas);
  if (q->blas_work != 0)
    be_cu.cuMemFreeAsync(q->blas_work, q->stream); /* after the work queued before */
  q->blas = NULL;
  q->blas_work = 0;
}

/* Compute capability (major * 10 + minor) a combination needs: BF16 and TF32 run on Ampere
 * and later, F16 from 5.3 (half arithmetic), FP32 and FP64 everywhere. */
static int cc_needed(uint32_t ab_type, uint32_t math) {
  if (ab_type == ACCEL_BF16 || math == BE_GEMM_MATH_TF32)
    return 80;
  return ab_type == ACCEL_F16 ? 53 : 0;
}

int be_cuda_gemm_supports(be_device *dev, uint32_t ab_type, uint32_t c_type, uint32_t math) {
  if (dev == NULL || !be_gemm_combo_ok(ab_type, c_type, math))
    return ACCEL_ENOTSUP;
  return dev->cc >= cc_needed(ab_type, math) ? 0 : ACCEL_ENOTSUP;
}

cudaDataType_t be_cuda_data_type(uint32_t dtype) {
  switch (dtype) {
  case ACCEL_F64:
    return CUDA_R_64F;
  case ACCEL_F16:
    return CUDA_R_16F;
  case ACCEL_BF16:
    return CUDA_R_16BF;
  default:
    return CUDA_R_32F;
  }
}

static cublasComputeType_t compute_type(be_queue *q, const be_gemm_args *g) {
  if (g->ab_type == ACCEL_F64)
    return CUBLAS_COMPUTE_64F;
  bool tf32 = g->ab_type == ACCEL_F32 &&
              (g->math == BE_GEMM_MATH_TF32 ||
               (g->math == BE_GEMM_MATH_DEVICE && atomic_load(&q->dev->tf32)));
  return tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

static cublasOperation_t op_of(be_blas_trans t) {
  return t == BE_BLAS_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
}

/* The scalars as the compute type reads them: doubles for COMPUTE_64F, floats otherwise. */
typedef struct scalars {
  float alpha32, beta32;
  const void *alpha, *beta;
} scalars;

static void scalars_of(scalars *s, cublasComputeType_t ct, const be_gemm_args *g) {
  s->alpha32 = (float)g->alpha;
  s->beta32 = (float)g->beta;
  bool f64 = ct == CUBLAS_COMPUTE_64F;
  s->alpha = f64 ? (const void *)&g->alpha : (const void *)&s->alpha32;
  s->beta = f64 ? (const void *)&g->beta : (const void *)&s->beta32;
}

/* The one cuBLAS call. */
static cublasStatus_t gemm(const be_cublas_api *api, cublasHandle_t h,
                           const be_cuda_gemm_call *call) {
  const be_gemm_args *g = call->g;
  const void *alpha = call->alpha, *beta = call->beta;
  const void *pa = (const void *)(uintptr_t)call->a, *pb = (const void *)(uintptr_t)call->b;
  void *pc = (void *)(uintptr_t)call->c;
  cublasComputeType_t ct = call->compute;
  cudaDataType_t tab = be_cuda_data_type(g->ab_type), tc = be_cuda_data_type(g->c_type);
  int m = (int)g->m, n = (int)g->n, k = (int)g->k;
  if (g->batch == 1)
    return api->cublasGemmEx(h, op_of(g->trans_a), op_of(g->trans_b), m, n, k, alpha, pa, tab,
                             (int)g->lda, pb, tab, (int)g->ldb, beta, pc, tc, (int)g->ldc, ct,
                             CUBLAS_GEMM_DEFAULT);
  return api->cublasGemmStridedBatchedEx(h, op_of(g->trans_a), op_of(g->trans_b), m, n, k, alpha,
                                         pa, tab, (int)g->lda, g->stride_a, pb, tab, (int)g->ldb,
                                         g->stride_b, beta, pc, tc, (int)g->ldc, g->stride_c,
                                         (int)g->batch, ct, CUBLAS_GEMM_DEFAULT);
}

int be_cuda_gemm_error(be_queue *q, cublasStatus_t s) {
  int rc = be_cublas_err(s);
  if (rc != ACCEL_EIO)
    return rc;
  CUresult r = be_cu.cuStreamQuery(q->stream);
  return be_cuda_sticky(r) ? be_cuda_check(q->dev, r) : rc;
}

int be_cuda_gemm_issue(const be_cuda_gemm_call *call) {
  be_queue *q = call->q;
  int rc = be_cuda_gemm_lt(q, call->compute, call->g, call->alpha, call->beta, call->a, call->b,
                           call->c); /* small ones: gemm_lt.c */
  if (rc != RT_NOT_HANDLED)
    return rc;
  const be_cublas_api *api = be_cublas();
  if (q->capturing && (q->blas == NULL || q->blas_work == 0))
    return RT_NOT_HANDLED; /* cuBLAS would allocate in the capture (gemm_graph.c) */
  cublasHandle_t h;
  rc = handle_of(q, api, &h);
  if (rc != 0)
    return rc;
  cublasStatus_t s = gemm(api, h, call);
  return s == CUBLAS_STATUS_SUCCESS ? 0 : be_cuda_gemm_error(q, s);
}

static int run(be_queue *q, const be_gemm_args *g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c) {
  if (!be_blas_gemm_reads_ab(g)) /* BLAS: C = beta C, A and B unread (NaN there is fine) */
    return be_cuda_scale(q, g->c_type, c, g);
  if (be_cublas() == NULL)
    return ACCEL_ENOTSUP;
  be_cuda_gemm_call call = {.q = q, .g = g, .compute = compute_type(q, g), .a = a, .b = b, .c = c};
  scalars sc;
  scalars_of(&sc, call.compute, g);
  call.alpha = sc.alpha;
  call.beta = sc.beta;
  int rc = be_cuda_gemm_graph(q, &call); /* repeated ones: gemm_graph.c */
  return rc != RT_NOT_HANDLED ? rc : be_cuda_gemm_issue(&call);
}

int be_cuda_gemm(be_queue *q, const be_gemm_args *g, be_mem a, size_t a_off, be_mem b, size_t b_off,
                 be_mem c, size_t c_off) {
  if (q == NULL || g == NULL)
    return ACCEL_EINVAL;
  int rc = be_cuda_gemm_supports(q->dev, g->ab_type, g->c_type, g->math);
  if (rc != 0)
    return rc;
  CUdeviceptr pa = 0, pb = 0, pc = 0;
  size_t a_len, b_len, c_len, es_ab = be_cuda_esize(g->ab_type), es_c = be_cuda_esize(g->c_type);
  rc = be_cuda_tail(a, a_off, es_ab, &pa, &a_len);
  if (rc == 0)
    rc = be_cuda_tail(b, b_off, es_ab, &pb, &b_len);
  if (rc == 0)
    rc = be_cuda_tail(c, c_off, es_c, &pc, &c_len);
  if (rc == 0)
    rc = be_blas_check_gemm(g, a_len, b_len, c_len);
  if (rc == 0)
    rc = gemm_limits(g);
  if (rc == 0)
    rc = be_cuda_queue_ok(q);
  if (rc != 0 || g->m == 0 || g->n == 0)
    return rc;
  rc = be_cuda_enter(q->dev);
  return rc != 0 ? rc : rt_status_public(run(q, g, pa, pb, pc)); /* the op's status */
}

int be_cuda_set_tf32(be_device *dev, bool on) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  atomic_store(&dev->tf32, on);
  return 0;
}
