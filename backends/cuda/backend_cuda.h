/* The cuda backend: its ops table (for the registry) and what its tests and benchmarks reach
 * beyond backend.h. One file per idea: backend_cuda.c (probe, devices, faults, the table),
 * context.c, fault.c, callback.c, queue.c, event.c, memory.c, copy.c and stage.c (host
 * transfers), kernels.c and kernels.cu (built-in kernels), blas.c (cuBLAS), gemm_lt.c (small
 * gemms' cuBLASLt plans), gemm_graph.c (repeated gemms replayed from graphs), module.c and
 * module_build.c (user kernels, NVRTC), peer.c (copies between devices), collective.c (NCCL's
 * collectives), driver.c, cublas_lib.c, nvrtc_lib.c and nccl_lib.c (the libraries, loaded at
 * run time). Contracts: backends/backend.h; how the pieces fit: device.h.
 *
 * Environment (read when the thing it governs starts):
 *   ACCEL_CUDA_DRIVER=<file>      the driver library instead of libcuda.so.1 (tests)
 *   ACCEL_CUDA_CUBLAS=<file>      cuBLAS instead of libcublas.so.13 (or .12)
 *   ACCEL_NVRTC=<file>            NVRTC instead of libnvrtc.so.13 (or .12, or libnvrtc.so)
 *   ACCEL_NCCL_LIBRARY=<file>     NCCL instead of libnccl.so.2 (the `collective` package)
 *   ACCEL_CACHE_DIR=<dir>         built user kernels' disk cache (backends/disk_cache.h)
 *   ACCEL_CUDA_TF32=1             sgemm on TF32 tensor cores for devices opened from then on
 *   ACCEL_CUDA_GEMM_GRAPHS=0      no replays of repeated small gemms from CUDA graphs, for
 *                                 devices opened from then on (gemm_graph.c)
 *   ACCEL_CUDA_COPY_THREADS=<n>   threads per large pageable copy (default 3/4 of the cores,
 *                                 at most 16)
 *   ACCEL_CUDA_STAGER=0           no stager: large pageable copies go through the bounce buffer
 *   ACCEL_CUDA_STREAM_COPY=0      the stager's device-to-host copies with plain stores (stage.c)
 *   ACCEL_CUDA_CONTEXT=primary    the CUDA device's primary context instead of one's own
 *   ACCEL_CUDA_FAULT=trap|oob     inject_fault breaks the context for real (default: soft)
 *   ACCEL_CUDA_HOSTFN=1           host functions through cuLaunchHostFunc, not
 *                                 cuStreamAddCallback
 *   ACCEL_CUDA_TRACE=1            faults, resets and context changes on stderr */
#ifndef BE_CUDA_BACKEND_CUDA_H
#define BE_CUDA_BACKEND_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/pin_cache.h"

extern const be_ops be_cuda_ops;

/* ---- beyond backend.h (tests, benchmarks; proposals for the interface) ---- */

/* sgemm on TF32 tensor cores for this device (on) or plain FP32 (off, the default). The
 * environment variable ACCEL_CUDA_TF32=1 turns it on at open. 0 or ACCEL_EINVAL. */
int be_cuda_set_tf32(be_device *dev, bool on);

/* The CUdeviceptr of a block, the CUstream of a queue and the CUcontext of a device, as
 * integers (so that this header needs no cuda.h). */
uint64_t be_cuda_devptr(be_mem m);
uint64_t be_cuda_stream(be_queue *q);
uint64_t be_cuda_context(be_device *dev);
/* A kernel of the embedded module by name ("be_null", "be_fill_u32"...): its CUfunction, or 0.
 * The device must be open. */
uint64_t be_cuda_function(be_device *dev, const char *name);

/* Whether dst's context reaches src's memory directly (peer access enabled: copy_peer then
 * goes GPU to GPU; else the driver stages it through the host): 1, 0, or ACCEL_EINVAL. */
int be_cuda_peer_direct(be_device *dst, be_device *src);

/* Threads that copy a large pageable transfer to or from pinned memory (at least 1); set
 * before the queue's first large copy. From ACCEL_CUDA_COPY_THREADS at open by default. */
int be_cuda_set_copy_threads(be_device *dev, unsigned n);

/* The pin cache of caller memory (pin.c): its counters (zero without one), and a wait until
 * its pinner has done what was asked of it. Tests and benchmarks. */
void be_cuda_pin_stats(pin_cache_stats *out);
void be_cuda_pin_flush(void);

/* User kernels' build caches (module_build.c), counted since the process began: NVRTC
 * compilations run, and loads served from the table in memory or from the disk cache. */
typedef struct be_cuda_module_stats {
  uint64_t compiles, memory_hits, disk_hits;
} be_cuda_module_stats;
void be_cuda_module_cache_stats(be_cuda_module_stats *out);
/* Empties the table in memory (the disk cache stays): the next load of a source built before
 * reads the disk. Tests and benchmarks. */
void be_cuda_module_cache_drop(void);

/* A queue's small-gemm plans (gemm_lt.c): gemms run through one, plans made (a shape seen
 * again after its plan was evicted counts again), plans live now. Tests. */
typedef struct be_cuda_gemm_lt_stats {
  uint64_t runs, made;
  unsigned live;
} be_cuda_gemm_lt_stats;
void be_cuda_gemm_lt_stats_get(be_queue *q, be_cuda_gemm_lt_stats *out);

/* A queue's replays of repeated gemms (gemm_graph.c): calls captured into a graph (and run by
 * it), later calls run by replaying one, keys whose capture failed, graphs live now. Tests. */
typedef struct be_cuda_gemm_graph_stats {
  uint64_t captured, replays, refused;
  unsigned live;
} be_cuda_gemm_graph_stats;
void be_cuda_gemm_graph_stats_get(be_queue *q, be_cuda_gemm_graph_stats *out);
/* Replays on (the default; ACCEL_CUDA_GEMM_GRAPHS=0 turns them off at open) or off for this
 * device's queues. 0 or ACCEL_EINVAL. */
int be_cuda_set_gemm_graphs(be_device *dev, bool on);

/* The embedded fatbin (kernels.cu, compiled by nvcc at build time). */
extern const unsigned char be_cuda_fatbin[];
extern const size_t be_cuda_fatbin_size;

#endif
