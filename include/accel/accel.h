/* accel — the client API (libaccel, pkg-config name `accel`).
 *
 * Open a context, create buffers, issue ops; every op returns at once with a future. Ops on the
 * same buffer run in the order you issued them (read-after-write, write-after-read,
 * write-after-write), on any device; independent ops run concurrently. Buffers live on
 * several memory nodes at once (the host and each device that used them); data moves only when
 * an op needs it somewhere it is not valid.
 *
 * Threads: every function is safe from any thread. Futures are the runtime's (runtime.h):
 * `then` callbacks run on the context's loop thread and must not block. In an embedded context
 * whose devices may be driven from any thread (CPU, OpenCL), an op call made while the loop is
 * idle may do the loop's work on the calling thread (a small op is then done when the call
 * returns); accel_ctx_runtime() turns that off, so your own actors keep the loop thread.
 *
 * Errors: 0 or a negative code (accel/error.h). An argument error (bad shape, a buffer too small
 * for the shape and leading dimensions, a stale handle) is reported by the call itself and no
 * future is made. Errors met while the op runs (device lost, data lost) come in the future.
 *
 * Futures: if `f` is NULL the op is fire-and-forget (accel_finish() reports its errors);
 * otherwise *f receives a future that you must release with accel_future_release().
 */
#ifndef ACCEL_ACCEL_H
#define ACCEL_ACCEL_H

#include <stddef.h>
#include <stdint.h>

#include "accel/dtype.h"
#include "accel/error.h"
#include "accel/export.h"
#include "accel/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct accel_ctx accel_ctx;
typedef uint64_t accel_buffer; /* a handle; 0 is never valid */
typedef int32_t accel_device;
#define ACCEL_DEVICE_ANY ((accel_device)-1)

typedef enum accel_trans { ACCEL_NO_TRANS = 0, ACCEL_TRANS = 1 } accel_trans;
typedef enum accel_dist {
  ACCEL_DIST_BITS = 0,    /* u32 words of the Philox4x32-10 stream */
  ACCEL_DIST_UNIFORM = 1, /* f32 in (0, 1]: u * 2^-32 + 2^-33 */
  ACCEL_DIST_NORMAL = 2   /* f32, Box-Muller over word pairs (offset must be even) */
} accel_dist;

/* Random fills (accel_rng_fill): Philox4x32-10 in cuRAND's stream convention (word i of the
 * stream is what the (i+1)-th curand() returns after curand_init(seed, 0, 0, &state)); the
 * same (seed, offset, count) gives the same bits on every device, whatever the split into
 * ops. The output's type is the buffer's:
 *   BITS     into U32: word i of the stream.
 *   UNIFORM  into F32: u * 2^-32 + 2^-33 of word i (cuRAND's curand_uniform), in (0, 1];
 *            into F16 / BF16: that f32 rounded to nearest even (tiny values may become 0 in
 *            F16); into F64: cuRAND's double convention from words 2i and 2i + 1,
 *            ((w0 ^ (w1 << 21)) * 2^-53 + 2^-54), in (0, 1).
 *   NORMAL   Box-Muller over pairs (the offset must be even): F32 as curand_normal, scaled as
 *            z * stddev + mean in float; F16 / BF16: that f32 rounded; F64 as
 *            curand_normal2_double from words 4j .. 4j + 3 per pair, in double. Normals agree
 *            across devices to a few ulp (libm differs), bits and uniforms exactly. */
typedef struct accel_rng {
  accel_dist dist;
  uint64_t seed;
  uint64_t offset; /* position in the stream, in elements */
  double mean, stddev;
} accel_rng;

/* gemm arithmetic. DEFAULT is the device's for the input type: FP64 for F64, FP32 for F32
 * unless the context asked tf32=1, and FP32 accumulation for F16/BF16 inputs (tensor cores on
 * GPUs that have them). TF32 (F32 inputs rounded to a 10-bit mantissa: about 1e-3 relative
 * error) is ACCEL_ENOTSUP on devices without tensor cores. */
typedef enum accel_math {
  ACCEL_MATH_DEFAULT = 0,
  ACCEL_MATH_FP32,
  ACCEL_MATH_TF32,
  ACCEL_MATH_FP64
} accel_math;

/* Op packages a device may provide (accel_device_info.packages). */
#define ACCEL_PKG_BLAS 0x1u        /* gemm, axpy, dot, scal */
#define ACCEL_PKG_RNG 0x2u         /* accel_rng_fill */
#define ACCEL_PKG_NN 0x4u          /* sigmoid, relu, tanh, softmax */
#define ACCEL_PKG_MODULE 0x8u      /* user kernels: accel_module_load, accel_launch */
#define ACCEL_PKG_COLLECTIVE 0x10u /* accel_all_reduce, accel_broadcast, accel_all_gather */

typedef enum accel_completion {
  ACCEL_COMPLETION_DEFAULT = 0, /* the device's configured strategy */
  ACCEL_COMPLETION_CALLBACK,    /* the driver calls back; the loop is woken */
  ACCEL_COMPLETION_SYNC,        /* a worker blocks on the device event */
  ACCEL_COMPLETION_POLL         /* the loop polls the device event */
} accel_completion;

/* A struct without a typedef: its tag lives apart from the function accel_device_info(). */
struct accel_device_info {
  char name[96];
  char backend[16]; /* "cpu", "cuda", "opencl" */
  uint64_t mem_bytes;
  uint32_t compute_units;
  int state; /* 0 serving, 1 restarting, 2 quarantined */
  uint32_t restarts;
  uint32_t kind;     /* 0 CPU, 1 GPU, 2 accelerator. ACCEL_DEVICE_ANY prefers GPUs and
                      * accelerators (CUDA's before OpenCL's by default), then the CPU
                      * backend's devices; a CPU seen through OpenCL only when named */
  uint32_t packages; /* ACCEL_PKG_* */
  /* Sets of ACCEL_DTYPE_BIT(t): gemm's A/B types, axpy/dot/scal, RNG uniform/normal outputs
   * (BITS fills U32 wherever there is an rng package), the element-wise ops and softmax. */
  uint32_t gemm_dtypes, vector_dtypes, rng_dtypes, nn_dtypes;
  uint32_t sources; /* user kernels: the accel_source kinds it builds, 1u << ACCEL_SOURCE_* */
  uint32_t collective_dtypes; /* the dtypes of accel_all_reduce & co. on this device */
};

/* Bytes moved between memory nodes and to or from the caller, per direction. */
typedef struct accel_transfer_stats {
  uint64_t host_to_device, device_to_host, device_to_device;
  uint64_t written, read; /* caller memory -> buffer, buffer -> caller memory */
} accel_transfer_stats;

/* ---- contexts ---------------------------------------------------------------------------
 * url: NULL or "embedded:" starts an in-process runtime with every backend it finds.
 * Query parameters (after '?', joined with '&'): fault_injection=1 (allows accel_inject_fault),
 * cpu_devices=N (N CPU devices, each its own memory node; default 1),
 * backends=LIST (the backends to open, in order, comma-separated, from cpu, cuda, opencl:
 * devices are numbered in that order and placement prefers earlier ones among devices of one
 * kind; unlisted backends are not opened; default cpu,cuda,opencl),
 * completion=callback|sync|poll (default callback), max_restarts=N (per device, in 10 s),
 * max_buffers=N, tf32=1 (sgemm on TF32 tensor cores by default where devices have them),
 * cuda_context=own|primary (CUDA devices in a context of their own, the default, or in the
 * GPU's primary context, where collectives through NCCL work), pinned_max=BYTES (caller
 * memory that CUDA devices see copied again and again is registered for DMA, up to this many
 * bytes for the process; default a quarter of the host's memory; 0: never).
 * "ipc://PATH" (or "unix://PATH"), "tls+tcp://HOST:PORT" or "tcp://HOST:PORT" connects to
 * acceld: the same API and semantics; buffers belong to this connection and die with it.
 * One parameter: name=NAME (1 to 64 bytes), the client's name in `accelctl clients` and the
 * daemon's log (default: the program's, program_invocation_short_name); any other is
 * ACCEL_EINVAL. ACCEL_ECLOSED if no daemon answers there (accel_last_error_detail says why:
 * no socket file, or nobody behind it), and for every pending and later op once the
 * connection is lost. Other schemes: ACCEL_ENOTSUP.
 * tls+tcp:// always verifies the daemon's certificate; the settings come from the environment:
 *   ACCEL_TLS_CA           PEM file of the CA(s) that signed the daemon's certificate (required)
 *   ACCEL_TLS_SERVER_NAME  the name that certificate must carry (default: the URL's HOST).
 *                          nng's mbed TLS compares it with the certificate's DNS names (or
 *                          its CN), never its IP addresses: for a numeric HOST set this, or
 *                          give the certificate the address as a DNS name too
 *   ACCEL_TLS_CERT, ACCEL_TLS_KEY  this client's certificate and unencrypted key (PEM), for a
 *                          daemon with tls_verify_clients
 * A handshake refused either way (or no ACCEL_TLS_CA) is ACCEL_EPERM; unusable settings
 * ACCEL_EINVAL; no handshake within 10 s ACCEL_ECLOSED. Plain tcp:// (tcp4://, tcp6://,
 * tcp://[IPV6]:PORT) has neither encryption nor authentication, and acceld serves it only
 * with allow_plain_tcp; a connect not answered within 10 s is ACCEL_ECLOSED.
 * Writes and reads of any size work: through ipc:// large ones travel in shared memory, over
 * tcp:// and tls+tcp:// in chunks of at most the daemon's max_message, with a window of
 * chunks in flight. */
ACCEL_API int accel_open(accel_ctx **ctx, const char *url);
/* Waits for the context's ops, frees every buffer, stops the runtime. */
ACCEL_API void accel_close(accel_ctx *ctx);
/* The runtime under an embedded context, to run your own actors beside the devices. */
ACCEL_API accel_runtime *accel_ctx_runtime(accel_ctx *ctx);
/* libaccel's version, "MAJOR.MINOR.PATCH" (the same as `acceld --version` of the same build).
 * A static string: never free it; safe from any thread, without a context. */
ACCEL_API const char *accel_version(void);

ACCEL_API int accel_device_count(accel_ctx *ctx);
ACCEL_API int accel_device_info(accel_ctx *ctx, accel_device dev, struct accel_device_info *out);

/* ---- buffers -----------------------------------------------------------------------------
 * A create does not wait for the memory: it returns the handle at once and the buffer is made
 * in order with the ops that follow. One that fails there (out of memory, or past the
 * session's max_memory or max_buffers through acceld) makes every op on the handle complete
 * with that error (ACCEL_ENOMEM) until it is destroyed; accel_finish() reports it too.
 * A count of 0 is ACCEL_EINVAL (a buffer holds at least one element). */
ACCEL_API int accel_buffer_create(accel_ctx *ctx, accel_dtype dtype, size_t count,
                                  accel_buffer *out);
/* Frees the buffer once the ops issued on it before have completed. Its handle is stale at
 * once. */
ACCEL_API int accel_buffer_destroy(accel_ctx *ctx, accel_buffer buf);

/* ---- sharing memory with other libraries in this process (DLPack, CUDA array interface) ----
 * Embedded contexts only: through acceld a buffer's memory lives in the daemon's process, and
 * these calls are ACCEL_ENOTSUP (accel_last_error_detail says so). Devices whose memory can be
 * shared: the CPU backend's (host memory) and CUDA devices in their GPU's primary context
 * (cuda_context=primary, where PyTorch and CuPy allocate: a context of accel's own has an
 * address space of its own, so its pointers mean nothing elsewhere); others ACCEL_ENOTSUP. */
typedef struct accel_export_info {
  uint64_t address;    /* element 0: a host pointer, or a CUdeviceptr of the primary context */
  uint64_t bytes;      /* the buffer's: count x the dtype's size */
  int32_t device_type; /* DLPack's DLDeviceType: 1 (kDLCPU) or 2 (kDLCUDA) */
  int32_t device_id;   /* 0 for the CPU, the CUDA ordinal for a GPU */
} accel_export_info;

/* Makes `buf`'s latest data valid on device `dev` (waiting for the ops issued on it before:
 * when the call returns they have completed, so any stream of the importer may use the
 * memory at once), fills *out, and pins that copy: until accel_buffer_export_release, it is
 * the buffer's only copy, never moved or freed, and every op naming the buffer runs on `dev`
 * (ACCEL_DEVICE_ANY is placed there; another device is ACCEL_EBUSY, detail saying why), so
 * that what the importer writes there is what accel's ops read. Exports nest on one device
 * (each ends with a release); on another device while pinned: ACCEL_EBUSY. Destroying the
 * buffer ends its exports: the memory goes once the ops issued before have completed, so the
 * importer must be done with it first. Blocks the calling thread; 0, or ACCEL_EINVAL (dev not
 * a device, out NULL), ACCEL_ESTALE, ACCEL_ENOTSUP, ACCEL_EBUSY, an error of the ops before
 * (ACCEL_EDEVLOST, ACCEL_EDATALOST): then nothing is pinned. */
ACCEL_API int accel_buffer_export(accel_ctx *ctx, accel_buffer buf, accel_device dev,
                                  accel_export_info *out);
/* Ends one export of `buf`: its copy may move and be freed again as ops need. ACCEL_EINVAL if
 * the buffer is not exported. In order with the ops issued before; blocks until done. */
ACCEL_API int accel_buffer_export_release(accel_ctx *ctx, accel_buffer buf);
/* A new buffer over foreign memory [address, address + bytes) of device `dev` (a host pointer
 * for a CPU device, a CUdeviceptr of the primary context for a CUDA one), of `dtype`, with
 * bytes / its size elements; no copy is made. The memory must stay valid until `release`
 * runs, and hold its data already: on CUDA, work writing it must have completed or be queued
 * on the legacy default stream (the import waits for that stream once, as DLPack's stream 1
 * asks). The buffer is pinned to `dev` for its life, as an export pins (its ops run there, so
 * that both sides see each other's writes; ordering between the importer's work and accel's
 * is the caller's). `release(arg)` (may be NULL) is called exactly once, on the context's
 * loop thread, when the buffer is freed (after accel_buffer_destroy and the ops issued
 * before, at the latest in accel_close) or its device is lost; it must not block nor call
 * accel on this context. 0 with *out; else ACCEL_EINVAL (address 0 or not aligned to the
 * dtype, bytes 0 or not a multiple of its size, a bad dtype or device), ACCEL_ENOTSUP,
 * ACCEL_ELIMIT, and `release` is never called. Blocks the calling thread. */
ACCEL_API int accel_buffer_import(accel_ctx *ctx, accel_device dev, uint64_t address, size_t bytes,
                                  accel_dtype dtype, void (*release)(void *arg), void *arg,
                                  accel_buffer *out);

/* dst[offset .. offset+count) = src[0 .. count). Offset and count in elements. `src` must stay
 * valid until the future completes. */
ACCEL_API int accel_write(accel_ctx *ctx, accel_buffer dst, size_t offset, const void *src,
                          size_t count, accel_future **f);
/* dst[0 .. count) = src[offset .. offset+count). `dst` must stay valid until completion. */
ACCEL_API int accel_read(accel_ctx *ctx, accel_buffer src, size_t offset, void *dst, size_t count,
                         accel_future **f);
/* dst[dst_off ..] = src[src_off ..], count elements; same dtype; overlapping is EINVAL when
 * src == dst. */
ACCEL_API int accel_copy(accel_ctx *ctx, accel_device dev, accel_buffer dst, size_t dst_off,
                         accel_buffer src, size_t src_off, size_t count, accel_future **f);
/* Every element of the buffer = value, converted to the buffer's dtype: F32 rounded to
 * nearest even; F16 and BF16 from that f32, rounded to nearest even again (as a C cast through
 * float does: a value within 2^-30 of a tie may round the other way than from the double);
 * U32 and I32 take integral values in their range, BOOL 0 and 1, else ACCEL_EINVAL. */
ACCEL_API int accel_fill(accel_ctx *ctx, accel_device dev, accel_buffer dst, double value,
                         accel_future **f);
/* Shorthands: the u32 pattern for 4-byte buffers (F32, U32, I32); an F32 buffer's value. */
ACCEL_API int accel_fill_u32(accel_ctx *ctx, accel_device dev, accel_buffer dst, uint32_t value,
                             accel_future **f);
ACCEL_API int accel_fill_f32(accel_ctx *ctx, accel_device dev, accel_buffer dst, float value,
                             accel_future **f);

/* ---- BLAS (column-major, as BLAS) ---------------------------------------------------------
 * C = alpha * op(A) * op(B) + beta * C; op(A) is m x k, op(B) k x n, C m x n. The types are
 * the buffers': A and B F64, F32, F16 or BF16 (the same); C the same type, or F32 for F16
 * and BF16 inputs. With k = 0 or alpha = 0, A and B are not read; beta = 0 overwrites C.
 * A combination the device does not run is ACCEL_ENOTSUP ("not supported on this backend"),
 * and an op on ACCEL_DEVICE_ANY is placed only on devices that run it. */
ACCEL_API int accel_gemm(accel_ctx *ctx, accel_device dev, accel_trans ta, accel_trans tb, size_t m,
                         size_t n, size_t k, double alpha, accel_buffer a, size_t lda,
                         accel_buffer b, size_t ldb, double beta, accel_buffer c, size_t ldc,
                         accel_math math, accel_future **f);
/* `batch` gemms of one shape: matrix i of A starts stride_a elements after matrix i - 1 (0
 * reuses one A; likewise B), C's matrices must not overlap. */
ACCEL_API int accel_gemm_strided_batched(accel_ctx *ctx, accel_device dev, accel_trans ta,
                                         accel_trans tb, size_t m, size_t n, size_t k, double alpha,
                                         accel_buffer a, size_t lda, size_t stride_a,
                                         accel_buffer b, size_t ldb, size_t stride_b, double beta,
                                         accel_buffer c, size_t ldc, size_t stride_c, size_t batch,
                                         accel_math math, accel_future **f);
/* accel_gemm on F32 buffers with the math set by accel_set_math. */
ACCEL_API int accel_sgemm(accel_ctx *ctx, accel_device dev, accel_trans ta, accel_trans tb,
                          size_t m, size_t n, size_t k, float alpha, accel_buffer a, size_t lda,
                          accel_buffer b, size_t ldb, float beta, accel_buffer c, size_t ldc,
                          accel_future **f);
/* y = alpha * x + y; result[0] = x . y; x = alpha * x: over n elements of float buffers of
 * one dtype (F32 and F64 on every backend; F16/BF16 where a device has them). */
ACCEL_API int accel_axpy(accel_ctx *ctx, accel_device dev, size_t n, double alpha, accel_buffer x,
                         accel_buffer y, accel_future **f);
ACCEL_API int accel_dot(accel_ctx *ctx, accel_device dev, size_t n, accel_buffer x, accel_buffer y,
                        accel_buffer result, accel_future **f);
ACCEL_API int accel_scal(accel_ctx *ctx, accel_device dev, size_t n, double alpha, accel_buffer x,
                         accel_future **f);
/* The F32 shorthands. */
ACCEL_API int accel_saxpy(accel_ctx *ctx, accel_device dev, size_t n, float alpha, accel_buffer x,
                          accel_buffer y, accel_future **f);
/* result[0] = x . y over n elements (result: an f32 buffer of at least 1 element). */
ACCEL_API int accel_sdot(accel_ctx *ctx, accel_device dev, size_t n, accel_buffer x, accel_buffer y,
                         accel_buffer result, accel_future **f);

/* ---- RNG: fills the whole buffer (U32 for BITS; F32, F64, F16 or BF16 otherwise) --------- */
ACCEL_API int accel_rng_fill(accel_ctx *ctx, accel_device dev, accel_buffer dst,
                             const accel_rng *spec, accel_future **f);

/* ---- NN element-wise (F32, F64, F16, BF16; dst and src of one dtype; dst may equal src).
 * F16 and BF16 compute in f32 and round the result to nearest even. */
ACCEL_API int accel_sigmoid(accel_ctx *ctx, accel_device dev, accel_buffer dst, accel_buffer src,
                            accel_future **f);
ACCEL_API int accel_relu(accel_ctx *ctx, accel_device dev, accel_buffer dst, accel_buffer src,
                         accel_future **f);
ACCEL_API int accel_tanh(accel_ctx *ctx, accel_device dev, accel_buffer dst, accel_buffer src,
                         accel_future **f);
/* Any of them, and more, by name: dst = op(src) element-wise (the dtypes above). LOG is NaN
 * below 0 and -inf at 0, SQRT NaN below 0 (IEEE); SQRT and ABS are correctly rounded. */
typedef enum accel_unary_op {
  ACCEL_UNARY_SIGMOID = 0,
  ACCEL_UNARY_RELU,
  ACCEL_UNARY_TANH,
  ACCEL_UNARY_EXP,
  ACCEL_UNARY_LOG,
  ACCEL_UNARY_SQRT,
  ACCEL_UNARY_ABS
} accel_unary_op;
ACCEL_API int accel_unary(accel_ctx *ctx, accel_device dev, accel_unary_op op, accel_buffer dst,
                          accel_buffer src, accel_future **f);
/* Row-wise softmax of a rows x cols row-major matrix, numerically stable. */
ACCEL_API int accel_softmax(accel_ctx *ctx, accel_device dev, accel_buffer dst, accel_buffer src,
                            size_t rows, size_t cols, accel_future **f);

/* ---- element-wise of two inputs, broadcast as numpy does (the nn package's dtypes) -------- */
typedef enum accel_binary_op {
  ACCEL_ADD = 0,
  ACCEL_SUBTRACT,
  ACCEL_MULTIPLY,
  ACCEL_DIVIDE,
  ACCEL_MAXIMUM, /* NaN if either is NaN, as numpy's maximum */
  ACCEL_MINIMUM, /* NaN if either is NaN */
  /* The logical ops (numpy's &, |, ^): on ACCEL_BOOL the truth of each input (any byte but 0
   * is true), 0 or 1 out; bitwise on I32 and U32; refused for the float dtypes. (6 .. 11 are
   * accel_compare's.) */
  ACCEL_BITWISE_AND = 12,
  ACCEL_BITWISE_OR = 13,
  ACCEL_BITWISE_XOR = 14
} accel_binary_op;

/* How accel_binary reads an input: its element (r, c) lies r * row + c * col elements from the
 * buffer's start. {cols, 1}: a rows x cols matrix as dst is laid out; {0, 0}: one element for
 * all; {0, 1}: one row of cols, for every row; {1, 0}: one column of rows, for every column;
 * {1, rows}: the transpose of a cols x rows matrix. */
typedef struct accel_strides {
  size_t row, col;
} accel_strides;

/* dst[r * cols + c] = a(r, c) op b(r, c) for the rows x cols elements at dst's start. dst, a
 * and b have one dtype: F32, F64, F16, BF16 (F16 and BF16 compute in f32 and round once), I32
 * or U32 (wrapping as two's complement does, as numpy's; ACCEL_DIVIDE is refused for them:
 * numpy's `/` of integers gives floats, so convert first), BOOL for the logical ops only
 * (numpy's ~x is x ^ True for BOOL, x ^ all ones for the integers). dst may be a or b only where
 * that input is read with strides {cols, 1}. ACCEL_EINVAL, with accel_last_error_detail saying why,
 * if dst has fewer than rows x cols elements, an input's strides reach past its end or the dtypes
 * do not fit. */
ACCEL_API int accel_binary(accel_ctx *ctx, accel_device dev, accel_binary_op op, accel_buffer dst,
                           size_t rows, size_t cols, accel_buffer a, accel_strides a_strides,
                           accel_buffer b, accel_strides b_strides, accel_future **f);

/* ---- comparisons and selection (ACCEL_BOOL results and conditions) ------------------------ */
typedef enum accel_compare_op {
  ACCEL_EQUAL = 0,
  ACCEL_NOT_EQUAL, /* the only one true where a NaN is compared (IEEE) */
  ACCEL_LESS,
  ACCEL_LESS_EQUAL,
  ACCEL_GREATER,
  ACCEL_GREATER_EQUAL
} accel_compare_op;

/* dst[r * cols + c] = a(r, c) op b(r, c) ? 1 : 0, dst ACCEL_BOOL, a and b of one dtype (F32,
 * F64, F16, BF16, I32, U32), read as accel_binary reads them. ACCEL_EINVAL (with the detail)
 * for another dst dtype, inputs of different dtypes, or sizes as accel_binary's. */
ACCEL_API int accel_compare(accel_ctx *ctx, accel_device dev, accel_compare_op op, accel_buffer dst,
                            size_t rows, size_t cols, accel_buffer a, accel_strides a_strides,
                            accel_buffer b, accel_strides b_strides, accel_future **f);

/* dst[r * cols + c] = cond(r, c) ? a(r, c) : b(r, c), cond ACCEL_BOOL (any byte but 0 is
 * true), dst, a and b of one dtype (any, ACCEL_BOOL included; the elements are copied as
 * they are), each input read at its strides as accel_binary's. dst may be an input only
 * where it is read with strides {cols, 1}. ACCEL_EINVAL (with the detail) otherwise, or if a
 * buffer is too small for its strides. */
ACCEL_API int accel_where(accel_ctx *ctx, accel_device dev, accel_buffer dst, size_t rows,
                          size_t cols, accel_buffer cond, accel_strides c_strides, accel_buffer a,
                          accel_strides a_strides, accel_buffer b, accel_strides b_strides,
                          accel_future **f);

/* dst[r * cols + c] = src(r, c) converted to dst's dtype, src(r, c) lying r * src_strides.row
 * + c * src_strides.col elements from src's start (as accel_binary's inputs: {1, rows} reads
 * the transpose of a cols x rows matrix). Any two of F32, F64, F16, BF16, I32, U32, BOOL (F64
 * on devices that have it), as numpy's astype: the same dtype copies the bits (so this also
 * makes a contiguous copy of a strided view); I32 <-> U32 wraps modulo 2^32; to BOOL is != 0
 * (NaN true); a float to I32 or U32 truncates toward zero and saturates at the type's limits,
 * NaN giving 0 (numpy leaves those undefined); to a float rounds once to nearest even (F64,
 * I32 and U32 to F16 or BF16 too). dst is a buffer other than src. ACCEL_EINVAL (with the
 * detail) for another dtype, a dst shorter than rows x cols, a view past src's end, or dst
 * being src. */
ACCEL_API int accel_convert(accel_ctx *ctx, accel_device dev, accel_buffer dst, size_t rows,
                            size_t cols, accel_buffer src, accel_strides src_strides,
                            accel_future **f);

/* ---- reductions of a strided 2-D view (the nn package's dtypes) ----------------------------- */
typedef enum accel_reduction_op {
  ACCEL_SUM = 0, /* of no elements: 0 */
  ACCEL_MAX,     /* NaN if any element is NaN, as numpy's max; of no elements: refused */
  ACCEL_MIN,     /* NaN if any is NaN; of no elements: refused */
  ACCEL_MEAN     /* the sum over the count; of no elements: NaN */
} accel_reduction_op;

typedef enum accel_axis {
  ACCEL_AXIS_ALL = 0, /* every element into dst[0] */
  ACCEL_AXIS_ROWS,    /* numpy's axis 0: dst[c] folds column c (cols outputs) */
  ACCEL_AXIS_COLS     /* numpy's axis 1: dst[r] folds row r (rows outputs) */
} accel_axis;

/* dst[0 ..) = op folded over the rows x cols view of src whose element (r, c) lies
 * r * src_strides.row + c * src_strides.col elements from src's start (accel_strides: {cols, 1}
 * a row-major matrix, {1, rows} the transpose of a cols x rows one), along `axis`; dst is
 * contiguous and a buffer other than src, of src's dtype. F16 and BF16 accumulate in f32, F32
 * in f32 (the cpu backend: within blocks of 4096, in f64 across) or f64, F64 in f64; the
 * result rounds once. ACCEL_EINVAL
 * (accel_last_error_detail says which) if dst has fewer elements than the outputs, the view
 * reaches past src's end, dst is src, or ACCEL_MAX/ACCEL_MIN would fold no elements into an
 * output (numpy raises there too). */
ACCEL_API int accel_reduction(accel_ctx *ctx, accel_device dev, accel_reduction_op op,
                              accel_buffer dst, size_t rows, size_t cols, accel_buffer src,
                              accel_strides src_strides, accel_axis axis, accel_future **f);

/* ---- collectives ---------------------------------------------------------------------------
 * One op over n devices (1 .. ACCEL_COLLECTIVE_MAX_DEVICES, distinct, of one backend with the
 * collective package: NCCL between CUDA GPUs, the CPU backend's own devices): bufs[i] is used
 * on devices[i] (its data is brought there first where it is not valid, as for any op, and is
 * valid there afterwards). Buffers distinct, of one float dtype the devices take
 * (accel_device_info.collective_dtypes), and of one length (all-gather: each recv n times
 * each send). Ordered like any op on its buffers. ACCEL_ENOTSUP if the devices cannot run it
 * together (other backends, NCCL missing), ACCEL_EDEVLOST if one of them is not serving. */
#define ACCEL_COLLECTIVE_MAX_DEVICES 8

typedef enum accel_reduce {
  ACCEL_REDUCE_SUM = 0,
  ACCEL_REDUCE_PROD,
  ACCEL_REDUCE_MIN,
  ACCEL_REDUCE_MAX
} accel_reduce;

/* Every bufs[i] = op(bufs[0], ..., bufs[n-1]) element-wise (the order of combination is the
 * backend's: sums may differ in the last bits between backends). */
ACCEL_API int accel_all_reduce(accel_ctx *ctx, const accel_device *devices,
                               const accel_buffer *bufs, uint32_t n, accel_reduce op,
                               accel_future **f);
/* Every bufs[i] = bufs[root]. */
ACCEL_API int accel_broadcast(accel_ctx *ctx, const accel_device *devices, const accel_buffer *bufs,
                              uint32_t n, uint32_t root, accel_future **f);
/* Every recv[i] = send[0] ++ send[1] ++ ... ++ send[n-1]. */
ACCEL_API int accel_all_gather(accel_ctx *ctx, const accel_device *devices,
                               const accel_buffer *send, const accel_buffer *recv, uint32_t n,
                               accel_future **f);

/* ---- user kernels ------------------------------------------------------------------------
 * Load your own kernels from source and launch them like any other op: a launch names its
 * buffers with access modes, so it is ordered with every other op on them (on any device)
 * and the buffers' latest copy is brought to the device first. */
typedef uint64_t accel_module; /* handles from the buffers' table (max_buffers counts them) */
typedef uint64_t accel_kernel;

typedef enum accel_source {
  ACCEL_SOURCE_CUDA = 1,   /* CUDA C++, compiled by NVRTC (loaded at run time) for the device's
                            * architecture; kernels are found by their extern "C" names */
  ACCEL_SOURCE_PTX = 2,    /* PTX text, JIT-compiled by the CUDA driver */
  ACCEL_SOURCE_OPENCL = 3, /* OpenCL C, built by the device's OpenCL platform */
  ACCEL_SOURCE_SPIRV = 4   /* a SPIR-V module, for OpenCL devices that take IL */
} accel_source;

/* Builds `len` bytes of code for device `dev`, or with ACCEL_DEVICE_ANY for every device that
 * builds that kind of source (ACCEL_ENOTSUP if none does). `options` (NULL or a string) go to
 * the compiler as they are (NVRTC: "-default-device --use_fast_math"; OpenCL: "-DN=4"). The
 * code is copied: it may be freed once the call returns. The handle is usable at once: ops of
 * this context issued after the load run after its build. The future completes when the
 * build is done: 0, ACCEL_EBUILD if the source did not build, ACCEL_ENOTSUP if the device
 * cannot take the source, ACCEL_EPERM if the daemon does not allow user kernels on this
 * connection. Its value (accel_future_value) is the compiler's log, a NUL-terminated string
 * owned by the future (NULL if the compiler said nothing): errors, and warnings on success.
 * Built code is cached by source, options and device (in memory and on disk, in
 * $ACCEL_CACHE_DIR or $XDG_CACHE_HOME/accel), so a second load of the same source is quick.
 * Through acceld the module is built in the daemon and belongs to this connection.
 * A module whose device restarted (a fault) must be loaded again: its launches there fail with
 * ACCEL_EDATALOST. */
ACCEL_API int accel_module_load(accel_ctx *ctx, accel_device dev, accel_source source,
                                const void *code, size_t len, const char *options,
                                accel_module *out, accel_future **f);
/* Frees the module once the launches issued before have run; its handle (and its kernels')
 * are stale at once. */
ACCEL_API int accel_module_unload(accel_ctx *ctx, accel_module m);
/* A kernel of the module by its name (at most 127 bytes). The name is looked up when a launch
 * runs: an unknown name fails that launch with ACCEL_ENOENT. Kernel handles need no freeing:
 * they go with the module. */
ACCEL_API int accel_kernel_get(accel_ctx *ctx, accel_module m, const char *name, accel_kernel *out);

typedef enum accel_access {
  ACCEL_ACCESS_READ = 1,
  ACCEL_ACCESS_WRITE = 2, /* the kernel writes every element of the range, reads none */
  ACCEL_ACCESS_READ_WRITE = 3
} accel_access;

typedef enum accel_arg_kind {
  ACCEL_ARG_BUFFER = 1, /* a pointer (CUDA) or __global / __constant buffer (OpenCL) */
  ACCEL_ARG_SCALAR = 2, /* a value passed by copy: `size` bytes of `bits` */
  ACCEL_ARG_LOCAL = 3   /* OpenCL: a __local pointer of `size` bytes (CUDA: use shared_bytes) */
} accel_arg_kind;

/* One kernel argument; make them with the helpers below. */
typedef struct accel_arg {
  accel_arg_kind kind;
  accel_access access;    /* BUFFER */
  accel_buffer buffer;    /* BUFFER: the kernel gets the address of element `offset` */
  uint64_t offset, count; /* BUFFER: the elements the kernel may touch (checked against the
                           * buffer: a launch past its end is ACCEL_EINVAL) */
  uint32_t size;          /* SCALAR: 1, 2, 4 or 8 bytes; LOCAL: bytes */
  uint64_t bits;          /* SCALAR: the value's bytes (little-endian, low `size` bytes) */
} accel_arg;

static inline accel_arg accel_arg_buffer(accel_buffer b, accel_access access, uint64_t offset,
                                         uint64_t count) {
  accel_arg a = {ACCEL_ARG_BUFFER, access, b, offset, count, 0, 0};
  return a;
}
static inline accel_arg accel_arg_bits(uint32_t size, uint64_t bits) {
  accel_arg a = {ACCEL_ARG_SCALAR, (accel_access)0, 0, 0, 0, size, bits};
  return a;
}
static inline accel_arg accel_arg_f32(float v) {
  union {
    float f;
    uint32_t u;
  } c;
  c.f = v;
  return accel_arg_bits(4, c.u);
}
static inline accel_arg accel_arg_f64(double v) {
  union {
    double f;
    uint64_t u;
  } c;
  c.f = v;
  return accel_arg_bits(8, c.u);
}
static inline accel_arg accel_arg_i32(int32_t v) {
  return accel_arg_bits(4, (uint32_t)v);
}
static inline accel_arg accel_arg_u32(uint32_t v) {
  return accel_arg_bits(4, v);
}
static inline accel_arg accel_arg_i64(int64_t v) {
  return accel_arg_bits(8, (uint64_t)v);
}
static inline accel_arg accel_arg_u64(uint64_t v) {
  return accel_arg_bits(8, v);
}
static inline accel_arg accel_arg_local(uint32_t bytes) {
  accel_arg a = {ACCEL_ARG_LOCAL, (accel_access)0, 0, 0, 0, bytes, 0};
  return a;
}

/* CUDA's launch geometry on every backend: grid[i] blocks of block[i] threads (OpenCL: a
 * global size of grid[i] * block[i] work items in work-groups of block[i]). Zeros, or more
 * than the device takes, are ACCEL_EINVAL. */
typedef struct accel_launch_dims {
  uint32_t grid[3], block[3];
  uint32_t shared_bytes; /* CUDA: dynamic shared memory; must be 0 on OpenCL (ACCEL_ARG_LOCAL) */
  uint32_t timeout_ms;   /* 0: the device's default deadline (60 s). A kernel still running
                          * then fails with ACCEL_ETIMEDOUT and the device is reset (the
                          * fault treatment: other ops in flight there fail with
                          * ACCEL_EDEVLOST) and serves again in a fresh context. Neither CUDA
                          * nor OpenCL can stop the kernel itself inside the process: it runs
                          * on, sharing the device, until it ends or the process exits (for
                          * acceld: a restart of the service) */
} accel_launch_dims;

#define ACCEL_LAUNCH_MAX_ARGS 32u    /* arguments per launch */
#define ACCEL_LAUNCH_MAX_BUFFERS 16u /* of them buffers */

/* Launches a kernel on `dev` (ACCEL_DEVICE_ANY: a device its module was built for, where the
 * buffers already are if possible). The arguments must match the kernel's parameters in
 * number, and in kind and size where the device can tell (ACCEL_EINVAL in the future if not);
 * an unknown kernel name is ACCEL_ENOENT. */
ACCEL_API int accel_launch(accel_ctx *ctx, accel_device dev, accel_kernel k,
                           const accel_launch_dims *dims, const accel_arg *args, size_t nargs,
                           accel_future **f);

/* ---- completion, faults, statistics -------------------------------------------------------- */
/* Per-op completion strategy for the ops this thread issues next (ACCEL_COMPLETION_DEFAULT
 * restores the device's). */
ACCEL_API int accel_set_completion(accel_ctx *ctx, accel_completion how);
/* The arithmetic of the accel_sgemm calls this thread issues next (ACCEL_MATH_DEFAULT
 * restores the device's); accel_gemm takes its own. */
ACCEL_API int accel_set_math(accel_ctx *ctx, accel_math math);
/* Waits for every op issued so far; returns the first error since the last accel_finish (0 if
 * none) or ACCEL_ETIMEDOUT. */
ACCEL_API int accel_finish(accel_ctx *ctx, int64_t timeout_ms);
/* Tests only: the device faults as a sticky driver error would. ACCEL_EPERM unless the context
 * was opened with fault_injection=1. */
ACCEL_API int accel_inject_fault(accel_ctx *ctx, accel_device dev);
ACCEL_API int accel_transfer_stats_get(accel_ctx *ctx, accel_transfer_stats *out);

/* Host memory for accel_write/accel_read sources and destinations that moves at memory speed.
 * Through acceld's local transport (ipc://, unix://) it is shared with the daemon: a transfer
 * from or into it copies nothing in this process and nothing crosses the socket. Elsewhere
 * (embedded, tcp://) it is ordinary page-aligned memory (pinned registration with CUDA is not
 * done yet). Free it with accel_host_free on the same context, after every op using it has
 * finished, and before accel_close. 0 or ACCEL_EINVAL / ACCEL_ENOMEM / ACCEL_ECLOSED; any
 * thread, but not from a future's callback. */
ACCEL_API int accel_host_alloc(accel_ctx *ctx, size_t bytes, void **out);
ACCEL_API int accel_host_free(accel_ctx *ctx, void *p);

#ifdef __cplusplus
}
#endif
#endif
