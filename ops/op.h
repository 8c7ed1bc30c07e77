/* The op as a client asks for it and the wire carries it: a header, the buffers it names (by
 * the client's handles; the session resolves them) and a payload fixed per kind. Nothing here
 * says who waits for it or where it runs: that is its carrier's (call.h), and the device
 * world's. The kinds themselves are the rows of op_table.h. */
#ifndef OPS_OP_H
#define OPS_OP_H

#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"
#include "ops/args.h"
#include "ops/blas_args.h"
#include "ops/dtype_conv.h"
#include "ops/op_table.h"

/* DEV_OP_WRITE = 1, DEV_OP_READ, ...: the rows of op_table.h, in order. */
#define DEV_OP_KIND_ROW(K, name, label, nbufs, dtypes, package, queue, runs) DEV_OP_##K,
typedef enum dev_op_kind {
  DEV_OP_NONE_ = 0, /* no kind: a decoder's zeroed op */
  DEV_OP_TABLE(DEV_OP_KIND_ROW) DEV_OP_KIND_COUNT_
} dev_op_kind;
#undef DEV_OP_KIND_ROW

/* A kind's row, for code that asks at run time (op_info.c). */
typedef enum dev_dtype_rule { DEV_DT_ANY = 0, DEV_DT_SAME, DEV_DT_FLOAT } dev_dtype_rule;
typedef enum dev_op_runs { DEV_RUNS_TASK = 0, DEV_RUNS_SESSION } dev_op_runs;
#define DEV_NBUFS_OWN UINT32_MAX

typedef struct dev_op_info {
  const char *label;
  uint32_t nbufs; /* DEV_NBUFS_OWN: the payload says */
  dev_dtype_rule dtypes;
  uint32_t package; /* ACCEL_PKG_* bit; 0: every backend */
  dev_op_runs runs;
} dev_op_info;

/* The row of a kind; NULL for a value that is no kind (0, or past the table). */
const dev_op_info *dev_op_info_of(uint32_t kind);
/* "f32", "u32", "f64", "f16", "bf16", "i32"; "?" for a value that is no dtype. */
const char *dev_dtype_name(uint32_t dtype);

/* How an op uses a buffer. WRITE_ALL overwrites every element it names without reading them,
 * so no valid copy has to be brought in first when it covers the whole buffer. */
enum dev_access { DEV_READ = 1, DEV_WRITE = 2, DEV_RW = 3, DEV_WRITE_ALL = 6 };

#define DEV_OP_MAX_BUFS                                                                            \
  16 /* a launch's buffers (ACCEL_LAUNCH_MAX_BUFFERS); others take 4 at most */

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
    } softmax;                /* bufs: dst, src */
    be_binary_args binary;    /* bufs: dst, a, b */
    be_where_args where;      /* bufs: dst, cond, a, b */
    be_convert_args convert;  /* bufs: dst, src */
    be_reduction_args reduce; /* bufs: dst, src */
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
    struct {
      struct accel_export_info *out; /* the caller's, filled by the task before it completes */
      void *pinned; /* the session's dev_buffer while the op holds a pin on it, or NULL */
      bool now;     /* answered by the session without a task (session.c export_now) */
    } xport;        /* bufs[0]; h.device: where */
    struct {
      uint64_t address, bytes; /* the foreign memory */
      uint32_t dtype;
      void (*release)(void *arg); /* called once when the buffer's memory goes */
      void *arg;
    } import; /* bufs[0]: the new handle, count = bytes / the dtype's size; h.device: where */
  } u;
} dev_op;

/* The bytes of one element of a dtype; 0 for a value that is no dtype. */
static inline size_t dev_dtype_size(accel_dtype t) {
  return be_dtype_size(t);
}

#endif
