/* The CUDA Driver API, loaded at run time (internal to backends/cuda/).
 *
 * Nothing links libcuda: the first probe dlopen()s "libcuda.so.1" (ACCEL_CUDA_DRIVER names
 * another file, for tests) and looks every entry point up by name, so the library and every
 * binary start on machines without a driver. cuda.h is only read for its types and for the
 * versioned names it maps the API onto (cuMemAlloc is cuMemAlloc_v2): the table's field for
 * cuMemAlloc is looked up as "cuMemAlloc_v2", whatever this toolkit's header says.
 *
 * Errors: be_cuda_err() maps a CUresult onto accel's codes. Sticky errors (the context is
 * broken until it is reset: illegal address, launch failure, trap...) map to ACCEL_EDEVLOST;
 * callers that get one mark their device faulted (fault.c).
 */
#ifndef BE_CUDA_DRIVER_H
#define BE_CUDA_DRIVER_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>

/* Every driver entry point the backend, its tests and its benchmarks call. */
/* clang-format off */
#define BE_CU_FUNCS(X)                                                                     \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuDeviceGetCount) X(cuDeviceGet)     \
  X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDeviceGetAttribute)                           \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxReset)      \
  X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuCtxCreate) X(cuCtxDestroy)  \
  X(cuCtxPopCurrent)                                                                       \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel)           \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery)             \
  X(cuStreamWaitEvent) X(cuLaunchHostFunc) X(cuStreamAddCallback)                          \
  X(cuStreamWaitValue32) X(cuStreamWriteValue32)                                           \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery)                      \
  X(cuEventSynchronize) X(cuEventElapsedTime)                                              \
  X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemHostAlloc) X(cuMemFreeHost)            \
  X(cuMemHostGetDevicePointer) X(cuDevicePrimaryCtxGetState)                               \
  X(cuPointerGetAttributes) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)                      \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuMemsetD16Async) X(cuMemsetD32Async)          \
  X(cuMemHostRegister) X(cuMemHostUnregister)                                            \
  X(cuModuleLoadDataEx) X(cuFuncSetAttribute)                                             \
  X(cuDeviceCanAccessPeer) X(cuCtxEnablePeerAccess) X(cuMemcpyPeerAsync)
/* clang-format on */

/* Entry points of newer drivers that the backend does without: NULL in the table when the
 * driver lacks them (cuFuncGetParamInfo: 12.4; cuGraphInstantiate is cuda.h's name of
 * cuGraphInstantiateWithFlags: 11.4). */
/* clang-format off */
#define BE_CU_OPTIONAL_FUNCS(X)                                                            \
  X(cuFuncGetParamInfo) X(cuMemAllocAsync) X(cuMemFreeAsync)                               \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch)     \
  X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuDeviceGetPCIBusId)
/* clang-format on */

#define BE_CU_FIELD_(fn) __typeof__(&fn) fn;

typedef struct be_cu_api {
  BE_CU_FUNCS(BE_CU_FIELD_)
  BE_CU_OPTIONAL_FUNCS(BE_CU_FIELD_)
} be_cu_api;

/* The loaded table; valid once be_cuda_driver_load() returned 0. Optional entries may be
 * NULL. */
extern be_cu_api be_cu;

/* Loads the driver once per process (thread-safe) and initialises it (cuInit). 0, or
 * ACCEL_ENOTSUP with `why` saying what is missing ("no driver", "no device", ...). */
int be_cuda_driver_load(char *why, size_t why_len);

/* One attempt at loading `path` into a private table and initialising it, closed again
 * afterwards: what be_cuda_driver_load() would answer for that file. For host-side tests. */
int be_cuda_driver_try(const char *path, char *why, size_t why_len);

/* A library loaded at run time (cuBLAS, NVRTC): the file the environment variable `env` names
 * if it is set (and nothing else), else the first of `names` (NULL-terminated) that dlopen()
 * finds, loaded RTLD_LOCAL; NULL if none. */
void *be_cuda_dlopen_first(const char *env, const char *const *names);

/* accel's code for a CUresult: 0, ACCEL_EAGAIN (not ready), ACCEL_ENOMEM, ACCEL_EINVAL,
 * ACCEL_EDEVLOST (sticky), ACCEL_ENOTSUP (no device or driver), else ACCEL_EIO. */
int be_cuda_err(CUresult r);

/* Whether r leaves the context unusable until it is reset. */
bool be_cuda_sticky(CUresult r);

/* "CUDA_ERROR_..." (or "CUDA_ERROR_<number>" if the driver is not loaded). Static storage. */
const char *be_cuda_err_name(CUresult r);

/* With ACCEL_CUDA_TRACE=1 in the environment: "accel-cuda: <what>: <r's name>" on stderr (for
 * the rare paths: faults, resets, start-up). Returns r. */
CUresult be_cuda_trace(const char *what, CUresult r);

/* Whether ACCEL_CUDA_TRACE=1 (read once), for traces of other libraries' statuses. */
bool be_cuda_tracing(void);

#endif
