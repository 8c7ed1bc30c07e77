/* The cuda backend's device, queue and shared state (internal to backends/cuda/).
 *
 * Context: a device runs in a context of its own, or in its CUDA device's primary context
 * (context.c says why and when); every thread that calls in makes it current first
 * (be_cuda_enter). The module of built-in kernels, an internal stream
 * and an event pool live with the context; reset() and close() tear them down together (an
 * "incarnation"), and the generation `gen` counts incarnations: a queue, event or memory
 * block of an older generation is lost, and its CUDA handles are never touched again.
 *
 * Faults: `fault` goes OK -> FAULTING -> LOST once per incarnation (fault.c). While FAULTING
 * the faulting thread waits out the host-side copies in progress (copy_lock, taken for
 * reading around every memcpy into or out of a caller's memory), so that once anyone sees
 * LOST no backend thread still touches memory a caller may free on hearing of the loss. Then
 * every host callback still pending is called with ACCEL_EDEVLOST (callback.c), from a thread
 * of its own (be_cuda_fault): CUDA never calls a host function after a sticky error.
 *
 * Abort (a user kernel past its deadline): the device is marked lost as by a fault, and
 * `aborted` says that work may still be running and never end, so teardown makes no call that
 * waits for the device (stream or context synchronisation, frees that synchronise). Ending the
 * context would wait too (cuCtxDestroy, cuDevicePrimaryCtxReset: measured), so the aborted
 * incarnation's context is handed to a thread that ends it if its work ever ends (context.c,
 * "burial"), and the device goes on without it.
 *
 * Lock order: dev->lock, then cb_lock. copy_lock is never taken with either held.
 *
 * Lifetime: the device is reference counted: the opener holds one reference, each event one
 * (event_destroy may come after close).
 */
#ifndef BE_CUDA_DEVICE_H
#define BE_CUDA_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "backends/backend.h"
#include "backends/cuda/driver.h"
#include "backends/pin_cache.h"
#include "runtime/attr.h"
#include "runtime/list.h"

/* The built-in kernels of the embedded module (kernels.cu), by index. A kernel made for every
 * float type comes as four in a row, F32 first, then F64, F16, BF16 (be_cuda_slot). */
typedef enum be_cuda_fn {
  BE_FN_FILL = 0,
  BE_FN_FILL_U64,
  BE_FN_RNG_BITS,
  BE_FN_RNG_UNIFORM, /* F32; then F64, F16, BF16 */
  BE_FN_RNG_UNIFORM_F64,
  BE_FN_RNG_UNIFORM_F16,
  BE_FN_RNG_UNIFORM_BF16,
  BE_FN_RNG_NORMAL,
  BE_FN_RNG_NORMAL_F64,
  BE_FN_RNG_NORMAL_F16,
  BE_FN_RNG_NORMAL_BF16,
  BE_FN_SAXPY,
  BE_FN_DAXPY,
  BE_FN_SSCAL,
  BE_FN_DSCAL,
  BE_FN_DOT_PARTIAL,
  BE_FN_DOT_PARTIAL_F64,
  BE_FN_DOT_FINAL,
  BE_FN_DOT_FINAL_F64,
  BE_FN_SIGMOID, /* F32; then F64, F16, BF16, and so on for each below */
  BE_FN_RELU = BE_FN_SIGMOID + 4,
  BE_FN_TANH = BE_FN_RELU + 4,
  BE_FN_SOFTMAX = BE_FN_TANH + 4,
  BE_FN_SCALE = BE_FN_SOFTMAX + 4,
  BE_FN_BINARY = BE_FN_SCALE + 4,
  BE_FN_EXP = BE_FN_BINARY + 4, /* then LOG, SQRT, ABS: be_unary_op's order */
  BE_FN_LOG = BE_FN_EXP + 4,
  BE_FN_SQRT = BE_FN_LOG + 4,
  BE_FN_ABS = BE_FN_SQRT + 4,
  BE_FN_REDUCE_BLOCKS = BE_FN_ABS + 4,
  BE_FN_REDUCE_FINAL = BE_FN_REDUCE_BLOCKS + 4,
  BE_FN_REDUCE_THREADS = BE_FN_REDUCE_FINAL + 4,
  BE_FN_BINARY_INT = BE_FN_REDUCE_THREADS + 4, /* I32, U32 */
  BE_FN_COMPARE = BE_FN_BINARY_INT + 2,        /* F32, F64, F16, BF16, I32, U32 */
  BE_FN_WHERE = BE_FN_COMPARE + 6,             /* elements of 1, 2, 4 and 8 bytes */
  BE_FN_CONVERT = BE_FN_WHERE + 4,             /* every pair of dtypes */
  BE_FN_BINARY_BOOL = BE_FN_CONVERT + 1,       /* the logical ops on BOOL */
  BE_FN_NULL,
  BE_FN_FAULT,
  BE_FN_COUNT
} be_cuda_fn;

/* Bytes per element of a dtype the kernels take (0 for others). */
static inline size_t be_cuda_esize(uint32_t dtype) {
  return dtype == ACCEL_F64                                               ? 8
         : dtype == ACCEL_F32 || dtype == ACCEL_U32 || dtype == ACCEL_I32 ? 4
         : dtype == ACCEL_F16 || dtype == ACCEL_BF16                      ? 2
         : dtype == ACCEL_BOOL                                            ? 1
                                                                          : 0;
}

/* A float type's place in a row of four kernels (F32 0, F64 1, F16 2, BF16 3), or -1. */
static inline int be_cuda_slot(uint32_t dtype) {
  switch (dtype) {
  case ACCEL_F32:
    return 0;
  case ACCEL_F64:
    return 1;
  case ACCEL_F16:
    return 2;
  case ACCEL_BF16:
    return 3;
  default:
    return -1;
  }
}

enum { BE_CUDA_OK = 0, BE_CUDA_FAULTING = 1, BE_CUDA_LOST = 2 };

typedef struct be_cuda_stage be_cuda_stage;

struct be_device {
  atomic_int refs;
  int index;
  CUdevice cu;
  CUcontext ctx;        /* the incarnation's context; NULL once closed (context.c) */
  bool primary;         /* ctx is the primary context (retained), not our own */
  unsigned epoch;       /* primary: its resets in this process when it was retained */
  uint64_t incarnation; /* unique in the process */
  be_device_info info;
  int sms;
  bool fault_injection;
  bool primary_wanted;     /* be_open_opts.primary_context (or ACCEL_CUDA_CONTEXT=primary) */
  atomic_bool memops;      /* streams can wait on host memory (stage.c); else bounce copies */
  unsigned copy_threads;   /* threads per large host-side copy (stage.c) */
  atomic_bool tf32;        /* sgemm on TF32 tensor cores (blas.c) */
  atomic_bool gemm_graphs; /* repeated small gemms replayed from graphs (gemm_graph.c) */
  int cc;                  /* compute capability, major * 10 + minor (gemm_supports) */
  atomic_int fault;        /* BE_CUDA_OK, FAULTING, LOST */
  atomic_bool aborted;     /* lost by abort(): work may run for ever (above) */
  atomic_uint gen;
  atomic_int syncing; /* threads inside event_sync: close waits for them */
  bool closed;
  pthread_rwlock_t copy_lock;
  pthread_mutex_t lock;
  /* Under lock: what close frees if its users left it; the pool of idle events. */
  rt_list queues, blocks, modules;
  CUevent *pool;
  size_t npool, pool_cap;
  /* The incarnation's module and internal stream (context.c). */
  CUmodule module;
  CUfunction fn[BE_FN_COUNT];
  CUstream aux;
  be_launch_limits limits; /* user kernels' geometry (module.c), read at open */
  /* The thread that calls the pending callbacks after a fault (fault.c). */
  pthread_mutex_t reap_lock;
  pthread_t reaper;
  bool reaper_started;
  /* Host functions: pending user callbacks, and how many host functions are running. */
  pthread_mutex_t cb_lock;
  pthread_cond_t cb_idle;
  rt_list cbs;
  rt_list orphans; /* records of a buried context that found no burial (context.c) */
  int cb_running;
  /* Peer copies (peer.c): whether the incarnation is in the registry of open devices, and
   * the CUDA ordinals (bit i: device i) its context reaches directly (peer access). */
  atomic_bool peer_open;
  atomic_uint_fast64_t peer_direct;
};

struct be_queue {
  rt_list link; /* first: the device's list of queues points here */
  be_device *dev;
  unsigned gen;
  CUstream stream;
  void *blas;                    /* a cublasHandle_t bound to the stream, made on first sgemm */
  CUdeviceptr blas_work;         /* its workspace (blas.c); 0: cuBLAS's own */
  struct be_cuda_lt *lt;         /* small gemms' cuBLASLt plans (gemm_lt.c), made on first use */
  struct be_cuda_graphs *graphs; /* repeated gemms' graphs (gemm_graph.c), made on first use */
  bool capturing;                /* a gemm is being captured on `stream` (gemm_graph.c) */
  CUdeviceptr scratch;           /* dot's partial sums (BE_CUDA_DOT_PARTS doubles) */
  void *bounce;                  /* pinned, for small pageable copies (copy.c), made on first use */
  be_cuda_stage *stage;          /* large pageable copies, made on first use */
  /* host_notify's side stream and the event that marks q's point for it, made on first use
   * (callback.c): the callbacks wait there, so that they never hold `stream`. */
  CUstream side;
  CUevent side_ev;
};

/* ---- context.c: the incarnation --------------------------------------------------------- */

/* Makes the device's context current on this thread (a no-op when it is). 0, or the error. */
RT_MUST_USE int be_cuda_enter(be_device *dev);
/* be_ops.thread_enter / thread_leave: a client's thread gets its current context back. */
void *be_cuda_thread_enter(void);
void be_cuda_thread_leave(void *saved);
/* Makes the context, loads the module, makes the internal stream. */
RT_MUST_USE int be_cuda_incarnate(be_device *dev);
/* Frees the incarnation and its context (a lost primary context is reset). Queues must be
 * gone. Leaves dev->ctx NULL. */
void be_cuda_dissolve(be_device *dev);

/* ---- fault.c ------------------------------------------------------------------------------ */

/* Whether the device is lost (waits out a fault in progress, see above). */
bool be_cuda_lost(be_device *dev);
/* Whether objects of generation gen are lost: a fault, or an incarnation since. */
bool be_cuda_gen_lost(be_device *dev, unsigned gen);
/* Marks the device lost (once per incarnation; later calls wait for the first), and has the
 * pending callbacks called with ACCEL_EDEVLOST on a thread of its own: the thread that
 * noticed the fault may be an event loop, which must learn of it before any callback does
 * (a kernel actor reports each failed op as a fault of its device). */
void be_cuda_fault(be_device *dev);
/* Waits until the callbacks of a fault have all been called (queue_destroy, reset, close). */
void be_cuda_reap_wait(be_device *dev);
/* accel's code for r; a sticky r marks the device lost first. */
int be_cuda_check(be_device *dev, CUresult r);
/* Brackets the host side of a copy into or out of caller memory: false (and nothing to end)
 * if the device is lost; else copy_lock is held for reading until be_cuda_copy_end. */
bool be_cuda_copy_begin(be_device *dev);
void be_cuda_copy_end(be_device *dev);

/* ---- pin.c: the process's pin cache (backends/pin_cache.h) ------------------------------ */

void be_cuda_pins_attach(const be_open_opts *opts); /* each open; its close detaches */
void be_cuda_pins_detach(void);
pin_cache *be_cuda_pins(void); /* NULL: none (turned off, or no userfaultfd) */
/* Before dev's context ends: its ranges are unregistered (unpin), or kept as orphans (never
 * trusted) until be_cuda_pins_owner_gone, once the context has been destroyed. */
void be_cuda_pins_owner_closing(be_device *dev, bool unpin);
void be_cuda_pins_owner_gone(be_device *dev);

/* ---- callback.c ------------------------------------------------------------------------- */

int be_cuda_callback(be_queue *q, be_host_fn fn, void *arg);
/* host_notify: the callback on the queue's side stream, after an event of its stream. */
int be_cuda_notify(be_queue *q, be_host_fn fn, void *arg);
/* Queues a host function that copies `bytes` from src to dst (the host side of a small
 * transfer); skipped once the device is lost. */
int be_cuda_hostfn_copy(be_queue *q, void *dst, const void *src, size_t bytes);
/* Calls every pending callback with ACCEL_EDEVLOST (the fault path). */
void be_cuda_callbacks_fail(be_device *dev);
/* Waits until no host function of the device is running (they count themselves in
 * cb_running, so that teardown can wait for them). */
void be_cuda_hostfn_wait(be_device *dev);
/* After the context is gone or idle: waits for running host functions, calls the callbacks
 * CUDA will never call (ACCEL_EDEVLOST) and frees their records. */
void be_cuda_callbacks_drain(be_device *dev);
/* Moves every record to list `to` (an aborted incarnation's, whose context lives on: CUDA
 * may still run them, under dev->cb_lock as ever); the fault path has claimed their
 * callbacks. */
void be_cuda_callbacks_hand_off(be_device *dev, rt_list *to);
/* Once that context is destroyed: frees the records of `list` CUDA never ran. */
void be_cuda_callbacks_free(be_device *dev, rt_list *list);

/* ---- module.c, module_build.c: user kernels (the `module` package) ------------------ */

/* Code the driver loads: a CUBIN, or PTX (len bytes, then a NUL either way). */
typedef struct be_cuda_image {
  void *data;
  size_t len;
} be_cuda_image;

/* CUDA C built for dev by NVRTC, or found in the caches (module_build.c): 0, ACCEL_EBUILD,
 * ACCEL_ENOTSUP (no NVRTC), ACCEL_ENOMEM. The compiler's output is appended to *log. With c,
 * NVRTC runs in c's place (be_compiler, backend.h), whose errors it also returns. */
int be_cuda_build(be_device *dev, const be_compiler *c, const void *code, size_t len,
                  const char *options, be_cuda_image *img, char **log);
/* be_module_pkg.compile: NVRTC for the compute capability `target` ("90"), in the helper. */
int be_cuda_compile(const char *target, uint32_t source, const void *code, size_t len,
                    const char *options, void **image, size_t *image_len, char **log);
/* Appends a line of text to a malloc'd log (*log NULL: none yet). */
void be_cuda_log_append(char **log, const char *text);
/* Frees a log that holds nothing but blanks (it becomes NULL). */
void be_cuda_log_finish(char **log);
/* Reads the device's launch limits into dev->limits (open). */
void be_cuda_limits_read(be_device *dev);
/* The incarnation's modules are gone (dissolve; the context is current): unloaded unless the
 * device is lost, never touched again. Their records stay until unload or close. */
void be_cuda_modules_dissolve(be_device *dev, bool lost);
/* Frees the records of the modules left (close, after dissolve). */
void be_cuda_modules_free_all(be_device *dev);

/* ---- peer.c: peer copies between devices of the backend -------------------------------- */

/* The incarnation joins the registry of open devices (after be_cuda_incarnate): peer access
 * is enabled both ways with every other open device whose GPU allows it. */
void be_cuda_peer_join(be_device *dev);
/* It leaves it (before its context goes: dissolve). */
void be_cuda_peer_leave(be_device *dev);
bool be_cuda_can_peer(be_device *dst, be_device *src);
int be_cuda_copy_peer(be_queue *q, be_mem dst, size_t dst_off, be_device *src_dev, be_mem src,
                      size_t src_off, size_t bytes);

/* ---- collective.c: the `collective` package (NCCL) ---------------------------------------- */

extern const be_coll_pkg be_cuda_coll;
/* Destroys the communicators the device is a member of (dissolve, before its context goes). */
void be_cuda_coll_forget(be_device *dev);

/* ---- device references (backend_cuda.c) ------------------------------------------------- */

void be_cuda_dev_ref(be_device *dev);
void be_cuda_dev_unref(be_device *dev);

/* ---- memory.c, event.c, copy.c, stage.c ------------------------------------------------- */

/* The device address of element `off` of `count` elements of `size` bytes in m, checked
 * against m's size (a handle of 0 is "no buffer": valid only for an empty range). */
RT_MUST_USE int be_cuda_span(be_mem m, size_t off, size_t count, size_t size, CUdeviceptr *out);
/* Everything from element off to the end of m, and how many elements that is. */
RT_MUST_USE int be_cuda_tail(be_mem m, size_t off, size_t size, CUdeviceptr *out, size_t *len);
/* Frees every block left (close); their device memory goes with the context. */
void be_cuda_mem_free_all(be_device *dev);
/* Destroys the idle events of the pool (the context is still usable) or forgets them. */
void be_cuda_event_pool_clear(be_device *dev, bool destroy);
/* Stops and frees a queue's stager (its stream is idle or the device lost). */
void be_cuda_stage_free(be_queue *q);
/* Queues a staged copy of pageable host memory (stage.c): h2d when to_device. */
int be_cuda_stage_copy(be_queue *q, bool to_device, CUdeviceptr dev_ptr, void *host, size_t bytes);

/* Checks common to every submission on q: q valid and its generation alive. */
RT_MUST_USE int be_cuda_queue_ok(be_queue *q);
/* Makes q's side stream and its event unless they exist (the context is current). */
int be_cuda_queue_side(be_queue *q);

/* ---- the entry points of the ops table (backend.h has their contracts) ------------------ */

/* sdot's partial sums per queue (kernels.c): the most blocks its first kernel uses. */
#define BE_CUDA_DOT_PARTS 1024

RT_MUST_USE int be_cuda_queue_create(be_device *dev, be_queue **out);
void be_cuda_queue_destroy(be_queue *q);
RT_MUST_USE int be_cuda_mem_alloc(be_device *dev, size_t bytes, be_mem *out);
int be_cuda_host_register(be_device *dev, void *p, size_t bytes);
void be_cuda_host_unregister(be_device *dev, void *p);
void be_cuda_mem_free(be_device *dev, be_mem *mem);
/* Memory shared with other libraries of the process (backend.h mem_share .. mem_unwrap). */
int be_cuda_mem_share(be_device *dev, char *why, size_t why_len);
int be_cuda_mem_address(be_device *dev, be_mem mem, uint64_t *out);
int be_cuda_mem_wrap(be_device *dev, uint64_t addr, size_t bytes, be_mem *out);
void be_cuda_mem_unwrap(be_device *dev, be_mem *mem);
int be_cuda_copy_h2d(be_queue *q, be_mem dst, size_t dst_off, const void *src, size_t bytes);
int be_cuda_copy_d2h(be_queue *q, void *dst, be_mem src, size_t src_off, size_t bytes);
int be_cuda_copy_d2d(be_queue *q, be_mem dst, size_t dst_off, be_mem src, size_t src_off,
                     size_t bytes);
RT_MUST_USE int be_cuda_event_create(be_device *dev, be_event **out);
void be_cuda_event_destroy(be_event *e);
int be_cuda_event_record(be_event *e, be_queue *q);
int be_cuda_event_query(be_event *e);
int be_cuda_event_sync(be_event *e);
int be_cuda_queue_wait(be_queue *q, be_event *e);
/* gemm of any combination cuBLAS runs (blas.c): backend.h's blas gemm. */
int be_cuda_gemm(be_queue *q, const be_gemm_args *g, be_mem a, size_t a_off, be_mem b, size_t b_off,
                 be_mem c, size_t c_off);
/* 0 if the device runs this gemm (blas.c), else ACCEL_ENOTSUP. */
int be_cuda_gemm_supports(be_device *dev, uint32_t ab_type, uint32_t c_type, uint32_t math);
/* Destroys the queue's cuBLAS handle and small-gemm plans, if any (blas.c). */
void be_cuda_blas_release(be_queue *q);
/* axpy, scal and dot in F32 or F64 (kernels.c; ACCEL_ENOTSUP for other dtypes). */
int be_cuda_axpy(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off,
                 be_mem y, size_t y_off);
int be_cuda_scal(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off);
int be_cuda_dot(be_queue *q, uint32_t dtype, size_t n, be_mem x, size_t x_off, be_mem y,
                size_t y_off, be_mem result, size_t result_off);
int be_cuda_fill_u32(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t value);
int be_cuda_fill_u64(be_queue *q, be_mem dst, size_t off, size_t count, uint64_t value);
/* The core fill of backend.h (packages.c), and the op packages. */
int be_cuda_fill(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t esize, uint64_t value);
extern const be_blas_pkg be_cuda_blas;
extern const be_rng_pkg be_cuda_rng;
extern const be_nn_pkg be_cuda_nn;
extern const be_module_pkg be_cuda_module;
/* RNG into U32 (bits), F32, F64, F16, BF16 (kernels.c). */
int be_cuda_rng_fill(be_queue *q, uint32_t dtype, be_mem dst, size_t off, size_t count,
                     const be_rng_args *r);
/* Element-wise ops and softmax in F32, F64, F16, BF16 (kernels.c). */
int be_cuda_unary(be_queue *q, uint32_t dtype, be_unary_op op, be_mem dst, size_t dst_off,
                  be_mem src, size_t src_off, size_t count);
int be_cuda_softmax(be_queue *q, uint32_t dtype, be_mem dst, size_t dst_off, be_mem src,
                    size_t src_off, size_t rows, size_t cols);
int be_cuda_binary(be_queue *q, uint32_t dtype, const be_binary_args *g, be_mem dst, size_t dst_off,
                   be_mem a, size_t a_off, be_mem b, size_t b_off);
int be_cuda_convert(be_queue *q, uint32_t dst_dtype, uint32_t src_dtype, const be_convert_args *g,
                    be_mem dst, size_t dst_off, be_mem src, size_t src_off);
int be_cuda_where(be_queue *q, uint32_t dtype, const be_where_args *g, be_mem dst, size_t dst_off,
                  be_mem cond, size_t c_off, be_mem a, size_t a_off, be_mem b, size_t b_off);
int be_cuda_reduce(be_queue *q, uint32_t dtype, const be_reduction_args *g, be_mem dst,
                   size_t dst_off, be_mem src, size_t src_off);
/* C_b = beta C_b for gemm's batch of m x n matrices of c_type (kernels.c), when A and B are
 * not read. */
int be_cuda_scale(be_queue *q, uint32_t c_type, CUdeviceptr c, const be_gemm_args *g);

#endif
