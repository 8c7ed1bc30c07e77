/* The opencl backend's device, queue and event (internal to backends/opencl/).
 *
 * Incarnation: a device runs in an OpenCL context of its own with the built-in program
 * (kernels.cl, program.c) built for it; reset() makes a fresh context and program (from the
 * disk cache: no recompilation). `gen` counts incarnations: a queue or event of an older one
 * is lost and reports ACCEL_EDEVLOST.
 *
 * Faults: `lost` is sticky until reset. It is set by inject_fault, by a command whose event
 * reports an error status, and by an enqueue that answers CL_OUT_OF_RESOURCES or a lost
 * context (be_ocl_check). OpenCL cannot abort work in flight: after a fault the queued work
 * still runs, and every host function still pending is called with ACCEL_EDEVLOST once the
 * work before it is done (queue.c), never earlier, so no command writes host memory after its
 * owner has heard of the loss.
 *
 * Host functions: each queue that has any gets a thread (queue.c) that waits for each
 * function's marker in submission order and calls it; host_callback's functions also hold the
 * queue (a barrier on a user event that the thread completes after the function returns).
 *
 * Locks: dev->lock (the lists of queues and buffers) and dev->klock (kernel arguments: a
 * cl_kernel is not safe to set from two threads) are never held together.
 *
 * Lifetime: the device struct is reference counted: the opener holds one reference, each
 * event one (event_destroy may come after close).
 */
#ifndef BE_OPENCL_DEVICE_H
#define BE_OPENCL_DEVICE_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "backends/backend.h"
#include "runtime/attr.h"
#include "runtime/list.h"

/* The built-in kernels by index. A row of four per float type, F32, F64, F16, BF16 (be_ocl_slot);
 * a kernel a device lacks (F64 without cl_khr_fp64) is NULL. */
typedef enum be_ocl_fn {
  BE_OCL_RNG_BITS = 0,
  BE_OCL_RNG_UNIFORM, /* F32, F64, F16, BF16 */
  BE_OCL_RNG_NORMAL = BE_OCL_RNG_UNIFORM + 4,
  BE_OCL_AXPY = BE_OCL_RNG_NORMAL + 4, /* F32, F64 only, as every row below up to SIGMOID */
  BE_OCL_SCAL = BE_OCL_AXPY + 4,
  BE_OCL_DOT = BE_OCL_SCAL + 4,
  BE_OCL_SIGMOID = BE_OCL_DOT + 4,
  BE_OCL_RELU = BE_OCL_SIGMOID + 4,
  BE_OCL_TANH = BE_OCL_RELU + 4,
  BE_OCL_SOFTMAX = BE_OCL_TANH + 4,
  BE_OCL_SCALE = BE_OCL_SOFTMAX + 4, /* F32, F64, F16 */
  BE_OCL_BINARY = BE_OCL_SCALE + 4,
  BE_OCL_EXP = BE_OCL_BINARY + 4, /* then LOG, SQRT, ABS: be_unary_op's order */
  BE_OCL_LOG = BE_OCL_EXP + 4,
  BE_OCL_SQRT = BE_OCL_LOG + 4,
  BE_OCL_ABS = BE_OCL_SQRT + 4,
  BE_OCL_REDUCE = BE_OCL_ABS + 4,
  BE_OCL_BINARY_INT = BE_OCL_REDUCE + 4,   /* I32, U32 */
  BE_OCL_COMPARE = BE_OCL_BINARY_INT + 2,  /* F32, F64, F16, BF16, I32, U32 */
  BE_OCL_WHERE = BE_OCL_COMPARE + 6,       /* elements of 1, 2, 4 and 8 bytes */
  BE_OCL_CONVERT = BE_OCL_WHERE + 4,       /* every pair of dtypes */
  BE_OCL_BINARY_BOOL = BE_OCL_CONVERT + 1, /* the logical ops on BOOL */
  BE_OCL_NULL,
  BE_OCL_FN_COUNT
} be_ocl_fn;

/* A float type's place in a row of four kernels (F32 0, F64 1, F16 2, BF16 3), or -1. */
static inline int be_ocl_slot(uint32_t dtype) {
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

/* Bytes per element of a dtype the kernels take (0 for others). */
static inline size_t be_ocl_esize(uint32_t dtype) {
  return dtype == ACCEL_F64                                               ? 8
         : dtype == ACCEL_F32 || dtype == ACCEL_U32 || dtype == ACCEL_I32 ? 4
         : dtype == ACCEL_F16 || dtype == ACCEL_BF16                      ? 2
         : dtype == ACCEL_BOOL                                            ? 1
                                                                          : 0;
}

struct be_device {
  atomic_int refs;
  int index;
  cl_platform_id platform;
  cl_device_id id;
  be_device_info info;
  bool fp64, fp16;
  bool div_exact; /* f32 division and sqrt can be built correctly rounded */
  size_t wg_max;  /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
  bool fault_injection;
  atomic_bool lost;
  atomic_bool aborted; /* abort(): queues and context are abandoned, not waited for */
  atomic_uint gen;
  /* The incarnation: NULL ctx once closed. */
  cl_context ctx;
  cl_program program;
  cl_kernel fn[BE_OCL_FN_COUNT];
  pthread_mutex_t klock;
  pthread_mutex_t lock;
  rt_list queues; /* under lock */
  cl_mem *mems;   /* under lock: buffers not yet freed (close frees them) */
  size_t nmems, cap_mems;
};

typedef struct be_ocl_hostfn be_ocl_hostfn;

struct be_queue {
  rt_list link; /* first: the device's list of queues points here */
  be_device *dev;
  unsigned gen;
  cl_command_queue cq;
  /* The host-function thread and its FIFO (queue.c), made on first use. */
  pthread_mutex_t hlock;
  pthread_cond_t hcond;
  be_ocl_hostfn *head, *tail;
  bool stop, thread_started;
  pthread_t thread;
};

struct be_event {
  be_device *dev;
  pthread_mutex_t lock;
  cl_event ev; /* the marker of the last record; NULL: never recorded */
  unsigned gen;
};

/* ---- backend_opencl.c ---------------------------------------------------------------------- */

/* accel's code for an OpenCL error; CL_OUT_OF_RESOURCES and a lost context or queue mark the
 * device lost first (ACCEL_EDEVLOST). */
RT_MUST_USE int be_ocl_check(be_device *dev, cl_int err);
/* Marks the device lost (sticky until reset). */
void be_ocl_fault(be_device *dev);
/* Whether the device is lost, or objects of generation gen belong to an older incarnation. */
bool be_ocl_gen_lost(be_device *dev, unsigned gen);
void be_ocl_dev_ref(be_device *dev);
void be_ocl_dev_unref(be_device *dev);
/* Checks common to every submission on q: 0, ACCEL_EINVAL (NULL) or ACCEL_EDEVLOST. */
RT_MUST_USE int be_ocl_queue_ok(be_queue *q);
/* Waits for an event; 0 or < 0 if its command failed (the device is then marked lost). */
RT_MUST_USE int be_ocl_wait(be_device *dev, cl_event ev);

/* ---- program.c ------------------------------------------------------------------------------ */

/* Builds (or loads from the disk cache) the built-in program for dev->ctx and makes its
 * kernels. 0 or an accel error. */
RT_MUST_USE int be_ocl_program_load(be_device *dev);
void be_ocl_program_free(be_device *dev);

/* ---- memory.c ------------------------------------------------------------------------------- */

/* m's cl_mem when [off, off + count) elements of `size` bytes lie inside it (a handle of 0 is
 * valid only for an empty range): 0 or ACCEL_EINVAL. */
RT_MUST_USE int be_ocl_span(be_mem m, size_t off, size_t count, size_t size);
/* Elements of `size` bytes from off to m's end: 0 or ACCEL_EINVAL (off past the end). */
RT_MUST_USE int be_ocl_tail(be_mem m, size_t off, size_t size, size_t *len);
void be_ocl_mem_free_all(be_device *dev);

/* ---- kernels.c ------------------------------------------------------------------------------ */

/* A launch of fn over `dims` (at most 3) dimensions of global size `global` with nargs
 * arguments (sizes and pointers), under klock. Local size `local`, or NULL for a fixed shape
 * (global rounded up to it: the kernel checks its range). */
typedef struct be_ocl_arg {
  size_t size;
  const void *p;
} be_ocl_arg;
int be_ocl_launch(be_queue *q, be_ocl_fn fn, cl_uint dims, const size_t *global,
                  const size_t *local, const be_ocl_arg *args, cl_uint nargs);
/* C_b = beta C_b for gemm's batch (k = 0 or alpha = 0, or beta = 0 before CLBlast). */
int be_ocl_scale(be_queue *q, const be_gemm_args *g, be_mem c, size_t c_off, double beta);

/* ---- the entry points of the ops table (backend.h has their contracts) --------------------- */

int be_ocl_queue_create(be_device *dev, be_queue **out);
void be_ocl_queue_destroy(be_queue *q);
int be_ocl_callback(be_queue *q, be_host_fn fn, void *arg);
int be_ocl_notify(be_queue *q, be_host_fn fn, void *arg);
int be_ocl_mem_alloc(be_device *dev, size_t bytes, be_mem *out);
void be_ocl_mem_free(be_device *dev, be_mem *mem);
int be_ocl_copy_h2d(be_queue *q, be_mem dst, size_t dst_off, const void *src, size_t bytes);
int be_ocl_copy_d2h(be_queue *q, void *dst, be_mem src, size_t src_off, size_t bytes);
int be_ocl_copy_d2d(be_queue *q, be_mem dst, size_t dst_off, be_mem src, size_t src_off,
                    size_t bytes);
int be_ocl_fill(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t esize, uint64_t value);
int be_ocl_event_create(be_device *dev, be_event **out);
void be_ocl_event_destroy(be_event *e);
int be_ocl_event_record(be_event *e, be_queue *q);
int be_ocl_event_query(be_event *e);
int be_ocl_event_sync(be_event *e);
int be_ocl_queue_wait(be_queue *q, be_event *e);
int be_ocl_gemm_supports(be_device *dev, uint32_t ab_type, uint32_t c_type, uint32_t math);
int be_ocl_gemm(be_queue *q, const be_gemm_args *g, be_mem a, size_t a_off, be_mem b, size_t b_off,
                be_mem c, size_t c_off);
int be_ocl_axpy(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off,
                be_mem y, size_t y_off);
int be_ocl_scal(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off);
int be_ocl_dot(be_queue *q, uint32_t dtype, size_t n, be_mem x, size_t x_off, be_mem y,
               size_t y_off, be_mem result, size_t result_off);
int be_ocl_rng_fill(be_queue *q, uint32_t dtype, be_mem dst, size_t off, size_t count,
                    const be_rng_args *r);
int be_ocl_convert(be_queue *q, uint32_t dst_dtype, uint32_t src_dtype, const be_convert_args *g,
                   be_mem dst, size_t dst_off, be_mem src, size_t src_off);
int be_ocl_where(be_queue *q, uint32_t dtype, const be_where_args *g, be_mem dst, size_t dst_off,
                 be_mem cond, size_t c_off, be_mem a, size_t a_off, be_mem b, size_t b_off);
int be_ocl_binary(be_queue *q, uint32_t dtype, const be_binary_args *g, be_mem dst, size_t dst_off,
                  be_mem a, size_t a_off, be_mem b, size_t b_off);
int be_ocl_reduce(be_queue *q, uint32_t dtype, const be_reduction_args *g, be_mem dst,
                  size_t dst_off, be_mem src, size_t src_off);
int be_ocl_unary(be_queue *q, uint32_t dtype, be_unary_op op, be_mem dst, size_t dst_off,
                 be_mem src, size_t src_off, size_t count);
int be_ocl_softmax(be_queue *q, uint32_t dtype, be_mem dst, size_t dst_off, be_mem src,
                   size_t src_off, size_t rows, size_t cols);
/* The dtypes of the vector ops, of rng and of nn on dev (packages.c). */
uint32_t be_ocl_vector_dtypes(be_device *dev);
uint32_t be_ocl_float_dtypes(be_device *dev);
extern const be_blas_pkg be_opencl_blas;
extern const be_rng_pkg be_opencl_rng;
extern const be_nn_pkg be_opencl_nn;
extern const be_module_pkg be_opencl_module;

/* The embedded kernels.cl (kernels_cl.c, generated). */
extern const char be_opencl_source[];
extern const size_t be_opencl_source_size;

#endif
