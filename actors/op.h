/* Op envelopes: the typed structs every hop carries (client library -> session -> device ->
 * kernel actor). Only the client<->daemon hop will encode them; in-process they travel as
 * pointers in message payloads. Buffers are named by the client's handles here; the session
 * resolves them. */
#ifndef DEV_OP_H
#define DEV_OP_H

#include <pthread.h>
#include <stdint.h>

#include "accel/accel.h"
#include "backends/backend.h"

typedef enum dev_op_kind {
  DEV_OP_WRITE = 1, /* caller memory -> buffer */
  DEV_OP_READ,      /* buffer -> caller memory */
  DEV_OP_COPY,
  DEV_OP_FILL,
  DEV_OP_GEMM, /* any dtypes (the buffers'), strided-batched too */
  DEV_OP_AXPY,
  DEV_OP_DOT,
  DEV_OP_RNG,
  DEV_OP_UNARY,
  DEV_OP_SOFTMAX,
  DEV_OP_BUFFER_CREATE,  /* bufs[0]: the new handle (chosen by the client), count */
  DEV_OP_BUFFER_DESTROY, /* bufs[0] */
  DEV_OP_SCAL,
  DEV_OP_MODULE_LOAD,   /* bufs[0]: the module's handle (chosen by the client), count 0 */
  DEV_OP_MODULE_UNLOAD, /* bufs[0] */
  DEV_OP_LAUNCH,        /* bufs: the buffers among its arguments, in argument order */
  DEV_OP_COLLECTIVE,    /* bufs: one per device (all-gather: the sends, then the receives) */
  DEV_OP_KIND_COUNT_
} dev_op_kind;

/* How an op uses a buffer. WRITE_ALL overwrites every element it names without reading them,
 * so no valid copy has to be brought in first when it covers the whole buffer. */
enum dev_access { DEV_READ = 1, DEV_WRITE = 2, DEV_RW = 3, DEV_WRITE_ALL = 6 };

#define DEV_OP_MAX_BUFS 16 /* a launch's buffers (ACCEL_LAUNCH_MAX_BUFFERS); others take 3 */

#define DEV_MODULE_MAX_OPTIONS 4096u     /* bytes of compiler options */
#define DEV_MODULE_MAX_CODE (256u << 20) /* bytes of code (acceld: also one frame) */

/* One argument of a launch: BE_PARAM_BUFFER (bits: its index in the op's bufs[]),
 * BE_PARAM_SCALAR (size bytes of bits) or BE_PARAM_LOCAL (size bytes). */
typedef struct dev_kernel_arg {
  uint32_t kind, size;
  uint64_t bits;
} dev_kernel_arg;

typedef struct dev_launch {
  uint64_t module; /* the module's handle */
  uint32_t grid[3], block[3];
  uint32_t shared_bytes;
  uint32_t nargs;
  dev_kernel_arg args[BE_LAUNCH_MAX_ARGS];
  char name[BE_KERNEL_NAME_MAX + 1]; /* NUL-terminated, not empty */
  /* Set by the session when it places the launch (never on the wire). */
  struct dev_module *mod; /* held until the op finishes */
  be_kernel *kernel;      /* owned by the module's build */
} dev_launch;

typedef struct dev_op_header {
  uint32_t kind; /* dev_op_kind */
  uint32_t flags;
  uint64_t request_id;
  uint64_t session;
  int32_t device;      /* ACCEL_DEVICE_ANY or an index */
  uint32_t completion; /* accel_completion */
  int64_t deadline_ms; /* 0: the device's default */
} dev_op_header;

typedef struct dev_op_buf {
  uint64_t handle;
  uint32_t access;        /* enum dev_access */
  uint64_t offset, count; /* the elements the op touches, for validation and WRITE_ALL */
} dev_op_buf;

typedef struct dev_op {
  dev_op_header h;
  uint32_t nbufs;
  dev_op_buf bufs[DEV_OP_MAX_BUFS];
  union {
    struct {
      const void *src;
      uint64_t bytes;
    } write; /* bufs[0]: dst; bytes = count * size */
    struct {
      void *dst;
      uint64_t bytes;
    } read; /* bufs[0]: src; bytes = count * size */
    struct {
      int unused;
    } copy; /* bufs[0]: dst, bufs[1]: src */
    struct {
      uint64_t value;
    } fill;            /* bufs[0]; the element's bits (low bytes) */
    be_gemm_args gemm; /* bufs: a, b, c; types set by the checker */
    struct {
      uint64_t n;
      double alpha;
    } axpy; /* bufs: x, y; scal: x */
    struct {
      uint64_t n;
    } dot;           /* bufs: x, y, result */
    be_rng_args rng; /* bufs[0] */
    struct {
      be_unary_op op;
    } unary; /* bufs: dst, src */
    struct {
      uint64_t rows, cols;
    } softmax; /* bufs: dst, src */
    struct {
      uint32_t dtype;
    } create;           /* bufs[0]: handle, count */
    struct {            /* bufs[0]: the module's handle */
      uint32_t source;  /* accel_source */
      const void *code; /* borrowed as a write's bytes are */
      uint64_t len;
      const char *options; /* NUL-terminated, or NULL */
    } module;
    dev_launch launch;
    struct {
      uint32_t kind;                        /* be_coll_kind */
      uint32_t reduce;                      /* be_reduce_op (all-reduce) */
      uint32_t root;                        /* broadcast: an index into devices */
      uint32_t ndev;                        /* 1 .. BE_COLL_MAX_DEVICES */
      int32_t devices[BE_COLL_MAX_DEVICES]; /* distinct; bufs[i] (and bufs[ndev + i]) there */
    } coll; /* h.device: devices[0], the leader (where the op's task runs) */
  } u;
  /* What the op made besides its status, for the caller (malloc'd, NUL-terminated): a
   * module load's build log. Whoever finishes the op hands it on or frees it. */
  char *result;
  accel_future *future; /* completed with the op's status; NULL for fire-and-forget */
  /* If set, called instead of completing `future` (the daemon replies on the wire); it owns
   * and frees the op. `owner` is the submitter's (e.g. the frame holding a write's bytes). */
  void (*done)(struct dev_op *op, int status);
  void *owner;
  struct dev_session_acct *acct; /* set by the session */
  uint64_t t_issued_ns;          /* uv_hrtime() when the session took it (metrics) */
  uint32_t ran_on;               /* 1 + the node it was planned on; 0: never placed (metrics) */
  struct dev_op_pool *pool;      /* where dev_op_free puts it back (NULL: it is freed) */
  struct dev_op *pool_next;      /* in the pool */
} dev_op;

/* Envelopes kept for reuse by one client context (op_pool.c). An op is built on a client's
 * thread and freed on the loop's: a fresh allocation each time pulled the allocator's state
 * and the block's cache lines across cores, about 4 us of a 17 us tiny op on a 16-core host.
 * A pool must outlive every op taken from it (an embedded context drains it once its world
 * has ended). */
typedef struct dev_op_pool {
  pthread_mutex_t mu;
  dev_op *head;
  uint32_t len;
} dev_op_pool;

void dev_op_pool_init(dev_op_pool *pool);
/* Frees what it keeps. No op of the pool may be in use any more. */
void dev_op_pool_drain(dev_op_pool *pool);
/* A new op of that kind, zeroed as calloc would for what the op may read (the header, the
 * buffers the op will not add itself, the payload, the tail); from the pool if given. NULL
 * when out of memory. */
dev_op *dev_op_alloc(dev_op_pool *pool, uint32_t kind);
/* Back to its pool, or freed. An op's `result` is its owner's to free first. */
void dev_op_free(dev_op *op);

#endif
