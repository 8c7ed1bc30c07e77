/* sgemm on the cuda backend: cuBLAS (loaded at run time, cublas_lib.h) on the queue's stream,
 * behind the shared argument checks (backends/blas_args.h). FP32 by default; TF32 tensor-core
 * mode when the device asks for it (be_cuda_set_tf32, ACCEL_CUDA_TF32=1).
 *
 * Each queue gets its own cuBLAS handle, bound to its stream, on its first sgemm: no lock
 * between queues, and a device that never multiplies never pays for cuBLAS's start-up (which
 * would lengthen every restart after a fault). */
#include <limits.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/cublas_lib.h"
#include "backends/cuda/device.h"

/* cuBLAS's int interface. */
static bool fits(int64_t v)
{
  return v <= INT_MAX;
}

static int sgemm_limits(const be_sgemm_args *g)
{
  return fits(g->m) && fits(g->n) && fits(g->k) && fits(g->lda) && fits(g->ldb) &&
                 fits(g->ldc)
             ? 0
             : ACCEL_ELIMIT;
}

static int handle_of(be_queue *q, const be_cublas_api *api, cublasHandle_t *out)
{
  if (q->blas == NULL) {
    cublasHandle_t h = NULL;
    int rc = be_cublas_err(api->cublasCreate_v2(&h));
    if (rc == 0)
      rc = be_cublas_err(api->cublasSetStream_v2(h, q->stream));
    if (rc != 0) {
      if (h != NULL)
        api->cublasDestroy_v2(h);
      return rc;
    }
    q->blas = h;
  }
  *out = q->blas;
  return 0;
}

void be_cuda_blas_release(be_queue *q)
{
  const be_cublas_api *api = be_cublas();
  if (q->blas != NULL && api != NULL)
    api->cublasDestroy_v2(q->blas);
  q->blas = NULL;
}

static cublasOperation_t op_of(be_blas_trans t)
{
  return t == BE_BLAS_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
}

static cublasStatus_t gemm(const be_cublas_api *api, cublasHandle_t h, bool tf32,
                           const be_sgemm_args *g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c)
{
  const float *pa = (const float *)(uintptr_t)a, *pb = (const float *)(uintptr_t)b;
  float *pc = (float *)(uintptr_t)c;
  int m = (int)g->m, n = (int)g->n, k = (int)g->k;
  if (!tf32)
    return api->cublasSgemm_v2(h, op_of(g->trans_a), op_of(g->trans_b), m, n, k, &g->alpha,
                               pa, (int)g->lda, pb, (int)g->ldb, &g->beta, pc, (int)g->ldc);
  return api->cublasGemmEx(h, op_of(g->trans_a), op_of(g->trans_b), m, n, k, &g->alpha, pa,
                           CUDA_R_32F, (int)g->lda, pb, CUDA_R_32F, (int)g->ldb, &g->beta, pc,
                           CUDA_R_32F, (int)g->ldc, CUBLAS_COMPUTE_32F_FAST_TF32,
                           CUBLAS_GEMM_DEFAULT);
}

/* A cuBLAS failure may be the context breaking under it: the stream says. */
static int gemm_error(be_queue *q, cublasStatus_t s)
{
  int rc = be_cublas_err(s);
  if (rc != ACCEL_EIO)
    return rc;
  CUresult r = be_cu.cuStreamQuery(q->stream);
  return be_cuda_sticky(r) ? be_cuda_check(q->dev, r) : rc;
}

static int run(be_queue *q, const be_sgemm_args *g, CUdeviceptr a, CUdeviceptr b,
               CUdeviceptr c)
{
  if (!be_blas_sgemm_reads_ab(g)) /* BLAS: C = beta C, A and B unread (NaN there is fine) */
    return be_cuda_scale(q, c, g->m, g->n, g->ldc, g->beta);
  const be_cublas_api *api = be_cublas();
  if (api == NULL)
    return ACCEL_ENOTSUP;
  cublasHandle_t h;
  int rc = handle_of(q, api, &h);
  if (rc != 0)
    return rc;
  bool tf32 = g->math == BE_SGEMM_MATH_DEVICE ? atomic_load(&q->dev->tf32)
                                              : g->math == BE_SGEMM_MATH_TF32;
  cublasStatus_t s = gemm(api, h, tf32, g, a, b, c);
  return s == CUBLAS_STATUS_SUCCESS ? 0 : gemm_error(q, s);
}

int be_cuda_sgemm(be_queue *q, const be_sgemm_args *g, be_mem a, size_t a_off, be_mem b,
                  size_t b_off, be_mem c, size_t c_off)
{
  if (q == NULL || g == NULL)
    return ACCEL_EINVAL;
  CUdeviceptr pa = 0, pb = 0, pc = 0;
  size_t a_len, b_len, c_len;
  int rc = be_cuda_tail(a, a_off, 4, &pa, &a_len);
  if (rc == 0)
    rc = be_cuda_tail(b, b_off, 4, &pb, &b_len);
  if (rc == 0)
    rc = be_cuda_tail(c, c_off, 4, &pc, &c_len);
  if (rc == 0)
    rc = be_blas_check_sgemm(g, a_len, b_len, c_len);
  if (rc == 0)
    rc = sgemm_limits(g);
  if (rc == 0)
    rc = be_cuda_queue_ok(q);
  if (rc != 0 || g->m == 0 || g->n == 0)
    return rc;
  rc = be_cuda_enter(q->dev);
  return rc != 0 ? rc : run(q, g, pa, pb, pc);
}

int be_cuda_set_tf32(be_device *dev, bool on)
{
  if (dev == NULL)
    return ACCEL_EINVAL;
  atomic_store(&dev->tf32, on);
  return 0;
}
