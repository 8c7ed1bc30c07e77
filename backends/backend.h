/* The backend interface: what the device actors need from a compute API (the host CPU, CUDA's
 * Driver API, OpenCL). Backends know nothing about actors; actors know nothing about drivers.
 *
 * Model (CUDA's, which OpenCL and the CPU map onto):
 *   device   an opened device: a CUDA primary context, an OpenCL context, a CPU worker set.
 *   queue    an in-order stream of work: a CUstream, an in-order cl_command_queue, a CPU worker
 *            thread. Work on one queue runs in submission order; different queues of a device
 *            may run concurrently.
 *   event    a point in a queue: complete when everything submitted to that queue before the
 *            record has completed (cuEventRecord, clEnqueueMarker, a CPU sequence number).
 *   memory   device memory is a handle + a byte size (a CUdeviceptr, a cl_mem, a host pointer);
 *            offsets travel separately, so OpenCL's buffers-without-pointers fit.
 *
 * Every entry point returns 0 or a negative accel error. Submitting (copy_*, kernels,
 * event_record, queue_wait, host_callback, host_notify) never blocks for the work itself; the
 * work runs later, in order. Errors found while submitting (bad arguments) fail the call and
 * nothing is queued. Errors found while running are reported by the queue's later events and
 * host callbacks (status < 0). A device fault (a CUDA sticky error, a lost OpenCL context, an
 * injected fault) is sticky: from then on every call on that device and every event of it
 * reports ACCEL_EDEVLOST until reset(). Threads: unless an entry says otherwise it may be
 * called from any thread, but one queue is used by one thread at a time (its kernel actor).
 */
#ifndef BE_BACKEND_H
#define BE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/error.h"
#include "backends/pin_cache.h"
#include "ops/args.h"
#include "ops/blas_args.h"
#include "runtime/status.h" /* RT_PENDING: event_query */

#define BE_ABI_VERSION 5u

typedef struct be_device be_device;
typedef struct be_queue be_queue;
typedef struct be_event be_event;

typedef struct be_mem {
  uint64_t handle; /* backend's own: host pointer, CUdeviceptr, cl_mem */
  size_t bytes;
} be_mem;

/* What a device is, for placement (most potent first: GPUs and accelerators before CPUs). */
typedef enum be_device_kind { BE_KIND_CPU = 0, BE_KIND_GPU, BE_KIND_ACCELERATOR } be_device_kind;

typedef struct be_device_info {
  char name[96];
  uint64_t mem_bytes;     /* device memory (for the CPU: physical memory) */
  uint32_t compute_units; /* cores, SMs, compute units */
  be_device_kind kind;    /* 0 (CPU) unless the backend says otherwise */
  /* The device's PCI address as be_pci_bus_id_normalize writes it ("0000:3b:00.0"), where the
   * backend knows it (CUDA, NVIDIA's OpenCL); empty otherwise. Telemetry matches on it. */
  char pci_bus_id[32];
} be_device_info;

typedef struct be_open_opts {
  int fault_injection; /* allow inject_fault (tests only) */
  int tf32;            /* sgemm on TF32 tensor cores unless an op asks for FP32 (CUDA only) */
  uint32_t threads;    /* CPU: worker threads for kernels (0: all cores) */
  int primary_context; /* CUDA: run in the GPU's primary context (NCCL's collectives need it) */
  /* CUDA: bytes of caller memory the pin cache may keep registered for DMA (0: a quarter of
   * the host's memory; BE_PINNED_OFF: no pin cache). Process-wide: the latest open sets it. */
  uint64_t pinned_max;
  /* Device workers (backends/worker/): which link of the device's worker process carries this
   * open's calls. acceld gives each of its worlds (a loop's devices) a link of its own, read
   * and submitted by a thread of its own in the worker. Ignored elsewhere. */
  uint32_t worker_link;
} be_open_opts;

#define BE_PINNED_OFF UINT64_MAX

/* Runs on a backend thread (a driver thread, a CPU worker) once the work before it in the
 * queue has completed; status is 0, or < 0 if that work failed (ACCEL_EDEVLOST after a
 * fault). Must not block or call back into the queue. A CUDA driver callback may never come
 * after a device error, so callers also keep a deadline of their own. */
typedef void (*be_host_fn)(void *arg, int status);

typedef struct be_ops {
  uint32_t abi_version; /* BE_ABI_VERSION: checked when the backend is registered */
  const char *name;     /* "cpu", "cuda", "opencl" */

  /* ---- discovery and devices (control thread; may block on driver initialisation) ---- */
  /* Devices present: *count >= 0. ACCEL_ENOTSUP if the driver or runtime library is missing
   * (why says so, e.g. "no driver"); never fails the process. */
  int (*probe)(int *count, char *why, size_t why_len);
  int (*open)(int index, const be_open_opts *opts, be_device **out);
  /* Waits for all queued work, frees everything. */
  void (*close)(be_device *dev);
  int (*info)(be_device *dev, be_device_info *out);
  /* 0, or ACCEL_EDEVLOST after a fault (sticky). */
  int (*status)(be_device *dev);
  /* After a fault: make the device usable again with a fresh context. Queues and events of
   * the old context must be destroyed before; memory of the old context should be freed
   * before too (mem_free must work on a faulted device, freeing what can still be freed). */
  int (*reset)(be_device *dev);
  /* Tests only (ACCEL_EPERM unless opened with fault_injection): makes the device fault as a
   * real sticky error would, while work may be in flight. */
  int (*inject_fault)(be_device *dev);
  /* Optional (NULL: the backend's work always ends). Work on the device ran past its deadline
   * (a user kernel that never ends): the device becomes lost (sticky ACCEL_EDEVLOST, as a
   * fault), and queue_destroy, close and reset stop waiting for the work in flight: it is
   * abandoned. Neither CUDA nor OpenCL can stop a running kernel inside the process (CUDA's
   * context destruction waits for it): it runs on, sharing the device, until it ends or the
   * process exits; the device's next incarnation is a fresh context. Any thread. */
  void (*abort)(be_device *dev);

  /* ---- queues ---- */
  int (*queue_create)(be_device *dev, be_queue **out);
  /* Waits for the queue's work, then frees it. */
  void (*queue_destroy)(be_queue *q);

  /* ---- memory: alloc/free may block (not on the loop thread) ---- */
  int (*mem_alloc)(be_device *dev, size_t bytes, be_mem *out);
  void (*mem_free)(be_device *dev, be_mem *mem);
  /* Asynchronous copies; host memory must stay valid until the work completes. */
  int (*copy_h2d)(be_queue *q, be_mem dst, size_t dst_off, const void *src, size_t bytes);
  int (*copy_d2h)(be_queue *q, void *dst, be_mem src, size_t src_off, size_t bytes);
  int (*copy_d2d)(be_queue *q, be_mem dst, size_t dst_off, be_mem src, size_t src_off,
                  size_t bytes);
  /* Optional (NULL: between two devices of this backend data goes through the host). Whether
   * q's device (dst) can copy from memory of device src with copy_peer: a direct path
   * (CUDA peer access, one address space), or one the driver stages itself at near its
   * speed. Any thread; never blocks (decided when the devices opened). */
  bool (*can_peer)(be_device *dst, be_device *src);
  /* Asynchronous copy on q into memory of q's device from memory of another device of this
   * backend (src_dev, open, can_peer true), ordered on q like copy_d2d. The caller keeps
   * src's memory allocated, and src_dev open, until the work has completed. */
  int (*copy_peer)(be_queue *q, be_mem dst, size_t dst_off, be_device *src_dev, be_mem src,
                   size_t src_off, size_t bytes);
  /* Optional (NULL: the backend copies any host memory at full speed). Makes host memory
   * [p, p + bytes) directly usable for DMA by the device (page-locked, as cuMemHostRegister),
   * or undoes it; copy_h2d/copy_d2h from such memory then run at pinned speed. May block for
   * long (it touches every page): worker threads only. unregister after every copy using
   * the memory has completed, and before the memory goes. */
  int (*host_register)(be_device *dev, void *p, size_t bytes);
  void (*host_unregister)(be_device *dev, void *p);
  /* Optional (NULL: host_register only). As host_register, for memory that is a shared
   * mapping of all of fd (a memfd): a backend whose devices live in another process (the
   * device workers, backends/worker/worker.h) maps it there too, so copies to and from it
   * need no staging. fd stays the caller's. host_unregister undoes it; dev may be closed by
   * then (an unregister must not need it). */
  int (*host_register_shared)(be_device *dev, void *p, size_t bytes, int fd);
  /* Optional (NULL: the backend keeps none): the counters of its pin cache of caller memory
   * (backends/pin_cache.h), one for the process; zeros while there is none. Any thread. */
  void (*pin_stats)(pin_cache_stats *out);

  /* ---- memory shared with other libraries of the process (DLPack): optional, all four NULL
   * where the device's memory cannot be (OpenCL's cl_mem, devices in worker processes) ---- */
  /* 0 if mem_address and mem_wrap work on dev, else ACCEL_ENOTSUP with why (a CUDA device in
   * a context of its own: other libraries use the primary context). Never blocks; any
   * thread. */
  int (*mem_share)(be_device *dev, char *why, size_t why_len);
  /* The address of mem's first byte in the process: a host pointer, or a CUdeviceptr valid in
   * the primary context. Never blocks (the loop calls it). */
  int (*mem_address)(be_device *dev, be_mem mem, uint64_t *out);
  /* Foreign memory [addr, addr + bytes) of dev as a be_mem every entry takes; the backend
   * never frees it: mem_unwrap (never mem_free) drops the be_mem alone. CUDA waits for the
   * legacy default stream (where a DLPack producer orders its work for stream 1) before it
   * returns. Called on the loop. mem_unwrap works on any incarnation's be_mem, dev even
   * NULL (between incarnations). */
  int (*mem_wrap)(be_device *dev, uint64_t addr, size_t bytes, be_mem *out);
  void (*mem_unwrap)(be_device *dev, be_mem *mem);

  /* ---- events and completion ---- */
  int (*event_create)(be_device *dev, be_event **out);
  /* May be called while the work it marks is still pending, and after the device was reset
   * or closed (then it only frees the event's own memory). */
  void (*event_destroy)(be_event *ev);
  int (*event_record)(be_event *ev, be_queue *q);
  /* 0 complete, RT_PENDING pending (runtime/status.h: never a public code), < 0 the work
   * failed. Never blocks. */
  int (*event_query)(be_event *ev);
  /* Blocks until complete (never on the loop: a worker, or a client thread waiting on an op's
   * future). Same results as query, never RT_PENDING. */
  int (*event_sync)(be_event *ev);
  /* Later work on q waits for ev (an event of the same device). Like cuStreamWaitEvent it
   * captures ev's current point at the call: ev may then be destroyed or recorded again, and
   * the queue that recorded it may be destroyed, without harm to q. */
  int (*queue_wait)(be_queue *q, be_event *ev);
  /* fn is called exactly once: after the work before it, or with ACCEL_EDEVLOST (fault) or
   * ACCEL_ECANCELED (queue destroyed first) at the latest in queue_destroy, reset or close. */
  int (*host_callback)(be_queue *q, be_host_fn fn, void *arg);
  /* A failure on a queue is sticky for its device (CUDA's context errors, OpenCL's faults):
   * one host function queued behind several ops may stand for all of them (its status is
   * theirs), so completions of a burst share one (host functions cost microseconds there).
   * False where an op's error is its own (the cpu backend's queues). */
  bool sticky_errors;
  /* Host functions reach the host well after the work (CUDA's and OpenCL's come through a
   * driver thread, tens of microseconds later): a client already waiting on an op's future is
   * offered an event to sync on instead (actors/wait_help.h). False where a host function is
   * as quick as a wait (the cpu backend calls it from the queue's worker). */
  bool late_callbacks;
  /* Every entry may be called from any thread (one at a time, as the loop calls them), with no
   * state of the calling thread involved: a client thread may then run the loop's turns
   * (runtime/loop.h: rt_tell_and_run). False where a thread needs setting up first (CUDA's
   * current context is per thread, and the caller's own would be replaced). */
  bool any_thread;
  /* Called on a client's thread before it runs backend entries itself (an embedded context's
   * open and close, a waiter's own event sync), and thread_leave after, with what
   * thread_enter returned: CUDA puts back the context that was current there, the caller's
   * own, which its entries would otherwise leave replaced. NULL where nothing changes. */
  void *(*thread_enter)(void);
  void (*thread_leave)(void *saved);
  /* Like host_callback, but the queue does not wait for fn: later work on q may start before
   * fn has run (fn still runs once, after the work before it, with the same exactly-once and
   * error rules as host_callback). The functions of one queue's host_notify calls run in
   * submission order; nothing orders them against its host_callback functions. A backend
   * whose host functions never hold its queue long may point this at host_callback. fn must
   * be quick: where the work before it is already done, fn may run at once, on the calling
   * thread, before host_notify returns (the cpu backend's idle queues do). */
  int (*host_notify)(be_queue *q, be_host_fn fn, void *arg);

  /* Every element of dst[off .. off + count) = the low `esize` bytes of value (esize 1, 2, 4
   * or 8; offsets and count in elements of esize bytes). */
  int (*fill)(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t esize, uint64_t value);

  /* ---- op packages: NULL where the backend has none (its ops are then ACCEL_ENOTSUP,
   * "not supported on this backend"); each table's version is checked at registration ---- */
  const struct be_blas_pkg *blas;
  const struct be_rng_pkg *rng;
  const struct be_nn_pkg *nn;
  const struct be_module_pkg *module;
  const struct be_coll_pkg *collective;
} be_ops;

/* ---- op packages ----------------------------------------------------------------------------
 * A package is a versioned table of ops a backend provides or not (parenchyma's extension
 * packages); each is served by its own kernel actor of the device. Kernels: offsets and counts
 * in elements of the buffers' dtype (accel_dtype values); arguments were checked by the caller
 * against the buffers (ops/blas_args.h, ops/check.c); backends check again what they rely on.
 * A dtype or combination the device does not run is ACCEL_ENOTSUP, from the submit call, and
 * the `supports`/`dtypes` entries say so beforehand (any thread, never block), so that
 * placement and `accelctl devices` need not try. */

#define BE_BLAS_VERSION 1u
#define BE_RNG_VERSION 1u
#define BE_NN_VERSION 6u
#define BE_MODULE_VERSION 1u
#define BE_COLL_VERSION 1u

typedef struct be_blas_pkg {
  uint32_t version; /* BE_BLAS_VERSION */
  /* 0 if the device runs gemm with these (ab_type, c_type, math), else ACCEL_ENOTSUP. */
  int (*gemm_supports)(be_device *dev, uint32_t ab_type, uint32_t c_type, uint32_t math);
  /* The dtypes axpy, dot and scal take on this device (ACCEL_DTYPE_BIT set). */
  uint32_t (*vector_dtypes)(be_device *dev);
  /* C = alpha * op(A) * op(B) + beta * C, column-major, batched when g->batch > 1. */
  int (*gemm)(be_queue *q, const be_gemm_args *g, be_mem a, size_t a_off, be_mem b, size_t b_off,
              be_mem c, size_t c_off);
  /* y = alpha * x + y over n elements. */
  int (*axpy)(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off, be_mem y,
              size_t y_off);
  /* result[0] (one element of dtype in device memory) = x . y over n elements. */
  int (*dot)(be_queue *q, uint32_t dtype, size_t n, be_mem x, size_t x_off, be_mem y, size_t y_off,
             be_mem result, size_t result_off);
  /* x = alpha * x over n elements. */
  int (*scal)(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off);
} be_blas_pkg;

typedef struct be_rng_pkg {
  uint32_t version; /* BE_RNG_VERSION */
  /* The dtypes UNIFORM and NORMAL fill on this device (BITS fills U32 everywhere). */
  uint32_t (*dtypes)(be_device *dev);
  /* count elements of dtype from the Philox stream position r->offset (backends/cpu/philox.h). */
  int (*fill)(be_queue *q, uint32_t dtype, be_mem dst, size_t off, size_t count,
              const be_rng_args *r);
} be_rng_pkg;

typedef struct be_nn_pkg {
  uint32_t version; /* BE_NN_VERSION */
  /* The float dtypes of the nn ops on this device (unary, softmax, reduce, binary). Besides
   * them every nn package of this version runs binary on I32 and U32 (be_binary_dtype_ok),
   * the logical ops (BITAND .. BITXOR) on BOOL too,
   * and where on every dtype (BOOL included), and convert between any two dtypes (F64 only
   * where `dtypes` has it): placement counts on it (actors/support.c). */
  uint32_t (*dtypes)(be_device *dev);
  int (*unary)(be_queue *q, uint32_t dtype, be_unary_op op, be_mem dst, size_t dst_off, be_mem src,
               size_t src_off, size_t count);
  /* Row-wise softmax of a rows x cols row-major matrix. */
  int (*softmax)(be_queue *q, uint32_t dtype, be_mem dst, size_t dst_off, be_mem src,
                 size_t src_off, size_t rows, size_t cols);
  /* dst = a op b element-wise over g->rows x g->cols, the inputs broadcast by their strides
   * (ops/args.h); dtype is the inputs'. Arithmetic writes dtype, computed in it (F32 for F16
   * and BF16, rounded once; I32 and U32 wrap); comparisons write BOOL (0 or 1). dst may be
   * an input only where that input is read in step (strides (cols, 1)). ACCEL_EINVAL for an
   * op the dtype does not take (be_binary_dtype_ok: DIV of integers). */
  int (*binary)(be_queue *q, uint32_t dtype, const be_binary_args *g, be_mem dst, size_t dst_off,
                be_mem a, size_t a_off, be_mem b, size_t b_off);
  /* dst[0 .. be_reduction_outputs) = g->op folded over src's view (ops/args.h), accumulated
   * in f32 for F16 and BF16 (in f32 or wider for F32, f64 for F64) and rounded once; max and
   * min propagate NaN. dst is never src. ACCEL_EINVAL for max or min of no elements. */
  int (*reduce)(be_queue *q, uint32_t dtype, const be_reduction_args *g, be_mem dst, size_t dst_off,
                be_mem src, size_t src_off);
  /* dst = cond ? a : b element-wise over g->rows x g->cols (ops/args.h be_where_args): cond
   * BOOL (nonzero true), dst, a and b of dtype, moved as bits. dst may be an input only where
   * it is read in step. */
  int (*where)(be_queue *q, uint32_t dtype, const be_where_args *g, be_mem dst, size_t dst_off,
               be_mem cond, size_t c_off, be_mem a, size_t a_off, be_mem b, size_t b_off);
  /* dst (dst_dtype, contiguous) = src's view (src_dtype, ops/args.h be_convert_args)
   * converted as astype does; any two of be_convert_dtype_ok's (F64 only where the device
   * has it: ACCEL_ENOTSUP otherwise). dst is never src. */
  int (*convert)(be_queue *q, uint32_t dst_dtype, uint32_t src_dtype, const be_convert_args *g,
                 be_mem dst, size_t dst_off, be_mem src, size_t src_off);
} be_nn_pkg;

/* ---- user kernels (the `module` package) ----------------------------------------------------
 * A module is code a client supplied, built for one device (accel_source kinds: 1 CUDA C,
 * 2 PTX, 3 OpenCL C, 4 SPIR-V). Modules are made and freed on worker threads (a build may take
 * seconds); the device actor frees the device's live modules before it closes the device, and
 * a module must never be used after that. */
typedef struct be_module be_module;
typedef struct be_kernel be_kernel;

/* A kernel's parameters as far as the device can tell (nparams UINT32_MAX: not even their
 * number; a launch's arguments are then taken as they come). */
typedef struct be_kernel_info {
  uint32_t nparams;
  struct be_param {
    uint8_t kind;  /* be_param_kind */
    uint32_t size; /* bytes (0 if unknown) */
  } params[BE_LAUNCH_MAX_ARGS];
} be_kernel_info;

/* The device's launch limits (CUDA's attributes; OpenCL's work-group and item sizes). */
typedef struct be_launch_limits {
  uint32_t max_block[3];          /* per dimension */
  uint32_t max_threads_per_block; /* product of block[] */
  uint64_t max_grid[3];           /* blocks per dimension */
  uint32_t max_shared_bytes;      /* dynamic shared memory per block (OpenCL: local memory) */
} be_launch_limits;

typedef struct be_kernel_arg {
  uint32_t kind; /* BE_PARAM_BUFFER, BE_PARAM_SCALAR or BE_PARAM_LOCAL */
  uint32_t size; /* SCALAR: 1, 2, 4 or 8 bytes; LOCAL: bytes */
  be_mem mem;    /* BUFFER */
  size_t offset; /* BUFFER: bytes from mem's start */
  uint64_t bits; /* SCALAR: the value, little-endian in the low `size` bytes */
} be_kernel_arg;

typedef struct be_launch {
  uint32_t grid[3], block[3];
  uint32_t shared_bytes;
  uint32_t nargs;
  const be_kernel_arg *args;
} be_launch;

/* The compile step of a load done elsewhere (load_with): accel's daemon runs the backend's
 * `compile` in a helper process with a memory cap and a deadline (backends/build_child.h).
 * `compile` gets what the backend's own compile entry would, and returns the same results,
 * plus ACCEL_ETIMEDOUT (past its deadline) and ACCEL_ECANCELED (the build was cancelled).
 * *image (malloc'd) is what the backend loads; *log as load's. Blocks. */
typedef struct be_compiler {
  int (*compile)(const struct be_compiler *c, const char *target, uint32_t source, const void *code,
                 size_t len, const char *options, void **image, size_t *image_len, char **log);
} be_compiler;

typedef struct be_module_pkg {
  uint32_t version; /* BE_MODULE_VERSION */
  /* The source kinds the device builds: bits 1u << accel_source (any thread, never blocks). */
  uint32_t (*sources)(be_device *dev);
  void (*limits)(be_device *dev, be_launch_limits *out);
  /* Builds `len` bytes of `source` code with `options` (NULL or a string) for dev, or finds
   * it built in the backend's cache (in memory, then on disk). *log receives the compiler's
   * output (malloc'd, NUL-terminated; NULL if empty) on success and failure alike: the caller
   * frees it. 0, ACCEL_EBUILD (did not build), ACCEL_ENOTSUP (source kind), ACCEL_EDEVLOST,
   * ACCEL_ENOMEM. Blocks: worker threads only. */
  int (*load)(be_device *dev, uint32_t source, const void *code, size_t len, const char *options,
              be_module **out, char **log);
  /* Frees the module and its kernels (worker threads or the loop; before close). */
  void (*unload)(be_module *m);
  /* The kernel of that name (owned by the module, the same pointer for the same name) and its
   * parameters: 0, ACCEL_ENOENT, or ACCEL_EDEVLOST (a module of an earlier incarnation). Quick (the
   * loop calls it); one thread at a time per module. */
  int (*kernel)(be_module *m, const char *name, be_kernel **out, be_kernel_info *info);
  /* Enqueues a launch on q (q of the module's device). The caller checked the geometry
   * against limits() and the arguments against kernel()'s info; backends check again what
   * they rely on (ACCEL_EINVAL). */
  int (*launch)(be_queue *q, be_kernel *k, const be_launch *l);
  /* ---- the compile step out of the process (optional: both NULL where the backend builds
   * in-process only; the caller then uses load) ---- */
  /* As load, but the compiler's work on the client's code (the OpenCL C or SPIR-V front end,
   * NVRTC) is c's: the backend looks in its caches first and, on a miss, calls c->compile
   * with a `target` text naming what to compile for, then loads the image that comes back
   * (clCreateProgramWithBinary, cuModuleLoadData) and caches it. Source kinds that need no
   * compiler (PTX: the driver's JIT) load as in load. Worker threads only. */
  int (*load_with)(be_device *dev, uint32_t source, const void *code, size_t len,
                   const char *options, const be_compiler *c, be_module **out, char **log);
  /* In the helper process (no device open, nothing else of the backend used): compiles as
   * load would for the device that `target` (as load_with gave it) names, into *image
   * (malloc'd) and *log. 0, ACCEL_EBUILD, ACCEL_ENOTSUP, ACCEL_ENOMEM, ACCEL_ENOENT (no such
   * device here). */
  int (*compile)(const char *target, uint32_t source, const void *code, size_t len,
                 const char *options, void **image, size_t *image_len, char **log);
} be_module_pkg;

/* ---- collectives (the `collective` package) -------------------------------------------------
 * One op over a set of devices of one backend, each with its buffer (NCCL's model). The caller
 * names the devices in order; device 0 of the call is the leader: the call is made from the
 * leader's collective queue, and work queued on queue[0] after the call waits for the
 * collective to have completed on every device (the other queues are only ordered behind it
 * on their own device). The caller made sure that every buffer's data is valid on its device
 * and that nothing else touches the buffers until queue[0] passes the call. */
typedef struct be_coll_call {
  be_coll_kind kind;
  uint32_t dtype;      /* accel_dtype */
  be_reduce_op reduce; /* ALL_REDUCE */
  uint32_t root;       /* BROADCAST: index into the devices */
  uint32_t ndev;       /* 1 .. BE_COLL_MAX_DEVICES */
  size_t count;        /* elements of each buf, or of each send (a recv holds ndev * count) */
  be_device *dev[BE_COLL_MAX_DEVICES];
  be_queue *queue[BE_COLL_MAX_DEVICES]; /* each device's collective queue */
  be_mem buf[BE_COLL_MAX_DEVICES];      /* ALL_REDUCE, BROADCAST; ALL_GATHER: send */
  be_mem recv[BE_COLL_MAX_DEVICES];     /* ALL_GATHER */
} be_coll_call;

typedef struct be_coll_pkg {
  uint32_t version; /* BE_COLL_VERSION */
  /* The dtypes the collectives take on this device (ACCEL_DTYPE_BIT set; any thread). */
  uint32_t (*dtypes)(be_device *dev);
  /* Whether these devices (distinct, all of this backend, open) can run one collective
   * together: 0, or ACCEL_ENOTSUP (say, a library missing). Quick; the loop calls it. */
  int (*supports)(be_device *const dev[], uint32_t ndev);
  /* Enqueues the collective (see above). Arguments were checked by the caller; the backend
   * checks again what it relies on (ACCEL_EINVAL). Called on the loop: must not block for
   * long (a first call may set up communicators: a few ms on NCCL). */
  int (*run)(const be_coll_call *c);
} be_coll_pkg;

/* The backends this build knows, whether or not they were built: the description is always
 * compiled, so `devices` can say "cuda: not built". */
typedef struct be_entry {
  const char *name;
  const be_ops *ops; /* NULL when not built */
} be_entry;

/* NULL-terminated list, CPU first. */
const be_entry *be_registry(void);

/* The calling thread as every built backend with thread_enter found it (thread_marks.c):
 * taken before a client's thread runs backend entries, given back after. */
#define BE_THREAD_MARKS 4
typedef struct be_thread_marks {
  const be_ops *be[BE_THREAD_MARKS];
  void *saved[BE_THREAD_MARKS];
  int n;
} be_thread_marks;

void be_thread_marks_take(be_thread_marks *t);
void be_thread_marks_give_back(const be_thread_marks *t);

#endif
