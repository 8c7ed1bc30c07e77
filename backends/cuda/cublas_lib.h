/* cuBLAS, loaded at run time like the driver (driver.h): the first device open dlopen()s
 * libcublas (ACCEL_CUDA_CUBLAS names another file). Without it the device still works, and
 * gemm answers ACCEL_ENOTSUP. cublas_api.h is read for its types only. */
#ifndef BE_CUDA_CUBLAS_LIB_H
#define BE_CUDA_CUBLAS_LIB_H

#include <cublasLt.h>
#include <cublas_api.h>
#include <stddef.h>

/* clang-format off */
#define BE_CUBLAS_FUNCS(X)                                                                 \
  X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2) X(cublasSetMathMode)       \
  X(cublasSgemm_v2) X(cublasDgemm_v2) X(cublasGemmEx) X(cublasGemmStridedBatchedEx)         \
  X(cublasGetVersion_v2) X(cublasSetWorkspace_v2)
/* clang-format on */

#define BE_CUBLAS_FIELD_(fn) __typeof__(&fn) fn;

typedef struct be_cublas_api {
  BE_CUBLAS_FUNCS(BE_CUBLAS_FIELD_)
} be_cublas_api;

/* The loaded table, or NULL if cuBLAS is missing (loaded once, thread-safe). */
const be_cublas_api *be_cublas(void);

/* cuBLASLt, loaded the same way (ACCEL_CUDA_CUBLASLT names another file): the small gemms'
 * cached plans (gemm_lt.c). Without it those go through cuBLAS as the others do. */
/* clang-format off */
#define BE_CUBLASLT_FUNCS(X)                                                               \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic) \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                             \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                     \
  X(cublasLtMatmulPreferenceSetAttribute)
/* clang-format on */

typedef struct be_cublaslt_api {
  BE_CUBLASLT_FUNCS(BE_CUBLAS_FIELD_)
} be_cublaslt_api;

/* The loaded table, or NULL if cuBLASLt is missing (loaded once, thread-safe). */
const be_cublaslt_api *be_cublaslt(void);

/* accel's code for a cuBLAS status (ACCEL_EIO for execution failures: the caller asks the
 * driver whether the context broke). */
int be_cublas_err(cublasStatus_t s);

#endif
