/* bench-cuda-gemm: gemm of every dtype through the cuda backend's blas package against the
 * same cuBLAS call made directly, on the same data, stream and GPU, in one run:
 *   BF16 and F16 (-> same type, FP32 accumulation on tensor cores), n = 4096 and 8192: the
 *     target is >= 0.95x the direct cublasGemmEx;
 *   F64, n = 4096: >= 0.97x cublasDgemm;
 *   strided-batched, batch 64 of n = 256, F32 and BF16: >= 0.9x the direct
 *     cublasGemmStridedBatchedEx.
 * Each side runs `iters` gemms between two CUDA events after a warm-up; the two sides
 * alternate, REPS times, and each reports its median. Inputs are uniform random in the
 * dtype (the backend's RNG), never zeros. Printed per row: both times, TFLOP/s and the ratio
 * (direct time / accel time: 1.0 is parity, higher is faster). Without a CUDA device it
 * exits 77. --quick: fewer repetitions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/cublas_lib.h"
#include "backends/cuda/driver.h"

#define BENCH_NAME "bench-cuda-gemm"
#include "bench_cuda_util.h"

static int REPS = 9;
static const be_ops *B = &be_cuda_ops;

typedef struct bench {
  be_device *dev;
  be_queue *q;
  CUstream stream;
  CUevent e0, e1;
  const be_cublas_api *api;
  cublasHandle_t h; /* the direct calls' own handle, on the queue's stream */
} bench;

typedef struct row {
  const char *what;
  uint32_t type;
  int n, batch, iters;
  double target;
} row;

static cudaDataType_t cuda_type(uint32_t t) {
  return t == ACCEL_F64    ? CUDA_R_64F
         : t == ACCEL_F16  ? CUDA_R_16F
         : t == ACCEL_BF16 ? CUDA_R_16BF
                           : CUDA_R_32F;
}

static size_t esize(uint32_t t) {
  return t == ACCEL_F64 ? 8 : t == ACCEL_F32 ? 4 : 2;
}

/* The direct call accel's gemm makes (blas.c), or cublasDgemm for F64. */
static void direct(bench *b, const row *r, be_mem ma, be_mem mb, be_mem mc) {
  const void *pa = (const void *)(uintptr_t)be_cuda_devptr(ma);
  const void *pb = (const void *)(uintptr_t)be_cuda_devptr(mb);
  void *pc = (void *)(uintptr_t)be_cuda_devptr(mc);
  float one = 1, zero = 0;
  double one64 = 1, zero64 = 0;
  int n = r->n;
  long long s = (long long)n * n;
  cublasStatus_t st;
  cudaDataType_t t = cuda_type(r->type);
  if (r->type == ACCEL_F64)
    st = b->api->cublasDgemm_v2(b->h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one64, pa, n, pb, n,
                                &zero64, pc, n);
  else if (r->batch == 1)
    st = b->api->cublasGemmEx(b->h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, pa, t, n, pb, t, n,
                              &zero, pc, t, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  else
    st = b->api->cublasGemmStridedBatchedEx(b->h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, pa, t, n,
                                            s, pb, t, n, s, &zero, pc, t, n, s, r->batch,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    DIE("direct cuBLAS call: status %d", (int)st);
}

static void through_accel(bench *b, const row *r, be_mem ma, be_mem mb, be_mem mc) {
  int64_t n = r->n, s = n * n;
  be_gemm_args g = {.m = n,
                    .n = n,
                    .k = n,
                    .alpha = 1,
                    .beta = 0,
                    .lda = n,
                    .ldb = n,
                    .ldc = n,
                    .ab_type = r->type,
                    .c_type = r->type,
                    .math = r->type == ACCEL_F32 ? BE_GEMM_MATH_FP32 : BE_GEMM_MATH_DEVICE,
                    .batch = r->batch,
                    .stride_a = s,
                    .stride_b = s,
                    .stride_c = s};
  OK(B->blas->gemm(b->q, &g, ma, 0, mb, 0, mc, 0));
}

/* Milliseconds per gemm: `iters` of them between two events. */
static double timed(bench *b, const row *r, bool accel, be_mem ma, be_mem mb, be_mem mc) {
  float ms = 0;
  CU(be_cu.cuEventRecord(b->e0, b->stream));
  for (int i = 0; i < r->iters; i++)
    (accel ? through_accel : direct)(b, r, ma, mb, mc);
  CU(be_cu.cuEventRecord(b->e1, b->stream));
  CU(be_cu.cuEventSynchronize(b->e1));
  CU(be_cu.cuEventElapsedTime(&ms, b->e0, b->e1));
  return ms / r->iters;
}

static be_mem random_matrices(bench *b, const row *r, uint64_t seed) {
  size_t count = (size_t)r->n * (size_t)r->n * (size_t)r->batch;
  be_mem m = {0};
  OK(B->mem_alloc(b->dev, count * esize(r->type), &m));
  be_rng_args u = {.dist = BE_RNG_UNIFORM, .seed = seed};
  OK(B->rng->fill(b->q, r->type, m, 0, count, &u));
  return m;
}

static void run_row(bench *b, const row *r) {
  if (B->blas->gemm_supports(b->dev, r->type, r->type, BE_GEMM_MATH_DEVICE) != 0) {
    printf("%-34s not supported on this device\n", r->what);
    return;
  }
  be_mem ma = random_matrices(b, r, 1), mb = random_matrices(b, r, 2), mc = {0};
  OK(B->mem_alloc(b->dev, (size_t)r->n * r->n * r->batch * esize(r->type), &mc));
  for (int w = 0; w < 3; w++) { /* warm-up: handles, heuristics, clocks */
    timed(b, r, true, ma, mb, mc);
    timed(b, r, false, ma, mb, mc);
  }
  double ta[64], td[64];
  for (int i = 0; i < REPS; i++) {
    ta[i] = timed(b, r, true, ma, mb, mc);
    td[i] = timed(b, r, false, ma, mb, mc);
  }
  double a = median(ta, REPS), d = median(td, REPS);
  double flops = 2.0 * r->n * (double)r->n * r->n * r->batch;
  double ratio = d / a;
  printf("%-34s accel %8.3f ms %7.1f TFLOP/s | cuBLAS %8.3f ms %7.1f TFLOP/s | ratio %.3f "
         "(target >= %.2f) %s\n",
         r->what, a, flops / a * 1e-9, d, flops / d * 1e-9, ratio, r->target,
         ratio >= r->target ? "ok" : "BELOW");
  B->mem_free(b->dev, &ma);
  B->mem_free(b->dev, &mb);
  B->mem_free(b->dev, &mc);
}

int main(int argc, char **argv) {
  char why[128] = "";
  int count = 0;
  if (argc > 1 && strcmp(argv[1], "--quick") == 0)
    REPS = 5;
  if (B->probe(&count, why, sizeof why) != 0 || count == 0) {
    printf("SKIP: no CUDA device (%s)\n", why);
    return 77;
  }
  bench b = {0};
  be_open_opts o = {0};
  OK(B->open(0, &o, &b.dev));
  OK(B->queue_create(b.dev, &b.q));
  b.api = be_cublas();
  if (b.api == NULL)
    DIE("cuBLAS not found");
  CU(be_cu.cuCtxSetCurrent((CUcontext)(uintptr_t)be_cuda_context(b.dev)));
  b.stream = (CUstream)(uintptr_t)be_cuda_stream(b.q);
  CU(be_cu.cuEventCreate(&b.e0, CU_EVENT_DEFAULT));
  CU(be_cu.cuEventCreate(&b.e1, CU_EVENT_DEFAULT));
  if (b.api->cublasCreate_v2(&b.h) != CUBLAS_STATUS_SUCCESS ||
      b.api->cublasSetStream_v2(b.h, b.stream) != CUBLAS_STATUS_SUCCESS)
    DIE("cublasCreate");
  be_device_info info;
  OK(B->info(b.dev, &info));
  printf("== gemm through the cuda backend vs direct cuBLAS (%s), median of %d ==\n", info.name,
         REPS);
  static const row rows[] = {
      {"gemm BF16 n=4096", ACCEL_BF16, 4096, 1, 50, 0.95},
      {"gemm BF16 n=8192", ACCEL_BF16, 8192, 1, 10, 0.95},
      {"gemm F16 n=4096", ACCEL_F16, 4096, 1, 50, 0.95},
      {"gemm F16 n=8192", ACCEL_F16, 8192, 1, 10, 0.95},
      {"gemm F64 n=4096", ACCEL_F64, 4096, 1, 10, 0.97},
      {"gemm F32 batched 64 x n=256", ACCEL_F32, 256, 64, 200, 0.90},
      {"gemm BF16 batched 64 x n=256", ACCEL_BF16, 256, 64, 200, 0.90},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    run_row(&b, &rows[i]);
  b.api->cublasDestroy_v2(b.h);
  be_cu.cuEventDestroy(b.e0);
  be_cu.cuEventDestroy(b.e1);
  B->queue_destroy(b.q);
  B->close(b.dev);
  return 0;
}
