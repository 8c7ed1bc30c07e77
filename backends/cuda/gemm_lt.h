/* Small gemms through cached cuBLASLt plans (gemm_lt.c), and the gemm error mapping they
 * share with blas.c. On the queue's thread. */
#ifndef BE_CUDA_GEMM_LT_H
#define BE_CUDA_GEMM_LT_H

#include "backends/cuda/cublas_lib.h"
#include "backends/cuda/device.h"

/* Runs g (checked already; device pointers a, b, c) through the queue's plan for its shape,
 * with the scalars as the compute type reads them. 0 when queued; RT_NOT_HANDLED when not taken
 * (too large, batched, no library, memory or algorithm for it: the caller uses cuBLAS);
 * another error if cuBLASLt failed after taking it. */
int be_cuda_gemm_lt(be_queue *q, cublasComputeType_t ct, const be_gemm_args *g, const void *alpha,
                    const void *beta, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c);

/* Frees the queue's plans (none: nothing), and their workspace where the queue's context
 * still lives (else it went with the context). */
void be_cuda_gemm_lt_release(be_queue *q, bool context_alive);

/* The CUDA data type of an accel dtype of gemm: F64, F16, BF16, else F32 (blas.c). */
cudaDataType_t be_cuda_data_type(uint32_t dtype);

/* A cuBLAS status as accel's code (blas.c); an execution failure asks the stream whether the
 * context broke under it (then the device is lost). */
int be_cuda_gemm_error(be_queue *q, cublasStatus_t s);

#endif
