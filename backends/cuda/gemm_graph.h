/* Repeated gemms replayed from captured CUDA graphs (gemm_graph.c), and the one call they
 * capture (blas.c). On the queue's thread. */
#ifndef BE_CUDA_GEMM_GRAPH_H
#define BE_CUDA_GEMM_GRAPH_H

#include "backends/cuda/cublas_lib.h"
#include "backends/cuda/device.h"

/* A gemm as blas.c issues it: checked arguments, device pointers, the compute type and the
 * scalars as that type reads them. */
typedef struct be_cuda_gemm_call {
  be_queue *q;
  const be_gemm_args *g;
  cublasComputeType_t compute;
  const void *alpha, *beta;
  CUdeviceptr a, b, c;
} be_cuda_gemm_call;

/* Queues the call on the queue's stream: a cached cuBLASLt plan for a small one, else
 * cuBLAS (blas.c). 0, or the error; while the queue captures, RT_NOT_HANDLED where cuBLAS
 * would allocate in the capture (the call then runs uncaptured). */
int be_cuda_gemm_issue(const be_cuda_gemm_call *call);

/* Queues the call as a replay of its graph: 0 when queued (captured now, or earlier);
 * RT_NOT_HANDLED when the caller is to issue it itself (seen for the first time, too large,
 * refused, replays off); another error (the device lost) if the launch failed. */
int be_cuda_gemm_graph(be_queue *q, const be_cuda_gemm_call *call);

/* Destroys the queue's graphs (before the workspaces and the handle they use), or, with the
 * context gone, frees only the table. */
void be_cuda_gemm_graph_release(be_queue *q, bool context_alive);

#endif
