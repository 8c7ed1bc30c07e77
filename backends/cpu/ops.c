/* Copies, kernels and host callbacks of the cpu backend: check everything the worker will
 * rely on (ranges within the buffers in elements of the op's dtype, the kernels' own argument
 * rules), then queue an item. A check that fails queues nothing. Whether the device runs a
 * dtype at all is the package's check (packages.c), made before these. */
#include <cblas.h>
#include <limits.h>

#include "accel/error.h"
#include "backends/cpu/backend_cpu.h"
#include "backends/cpu/queue.h"
#include "ops/dtype_conv.h"

/* `count` elements of `size` bytes from element `off` of m. A handle of 0 is "no buffer",
 * valid only with 0 bytes (an empty range, a NULL address). */
static int span(be_mem m, size_t off, size_t count, size_t size, void **out) {
  size_t len = m.bytes / size;
  if ((m.handle == 0 && m.bytes > 0) || off > len || count > len - off)
    return ACCEL_EINVAL;
  *out = m.handle == 0 ? NULL : (char *)(uintptr_t)m.handle + off * size;
  return 0;
}

/* Everything from element `off` to the end of m (BLAS checks shapes against lengths). */
static int tail(be_mem m, size_t off, size_t size, void **out, size_t *len) {
  *len = off <= m.bytes / size ? m.bytes / size - off : 0;
  return span(m, off, *len, size, out);
}

/* What OpenBLAS's int interface takes (cpu_kernels.h: ACCEL_ELIMIT beyond). */
static bool fits_blas(int64_t v) {
  return sizeof(blasint) >= sizeof(int64_t) || v <= INT_MAX;
}

static int submit(be_queue *q, const be_cpu_item *it, int err) {
  if (err != 0)
    return err;
  return q == NULL ? ACCEL_EINVAL : be_cpu_queue_submit(q, it);
}

/* ---- copies -------------------------------------------------------------------------- */

static int host_range(const void *p, size_t bytes) {
  return p == NULL && bytes > 0 ? ACCEL_EINVAL : 0;
}

int be_cpu_submit_h2d(be_queue *q, be_mem dst, size_t dst_off, const void *src, size_t bytes) {
  be_cpu_item it = {.kind = BE_CPU_COPY, .u.copy = {.src = src, .bytes = bytes}};
  int err = host_range(src, bytes);
  if (err == 0)
    err = span(dst, dst_off, bytes, 1, &it.u.copy.dst);
  return submit(q, &it, err);
}

int be_cpu_submit_d2h(be_queue *q, void *dst, be_mem src, size_t src_off, size_t bytes) {
  be_cpu_item it = {.kind = BE_CPU_COPY, .u.copy = {.dst = dst, .bytes = bytes}};
  void *from = NULL;
  int err = host_range(dst, bytes);
  if (err == 0)
    err = span(src, src_off, bytes, 1, &from);
  it.u.copy.src = from;
  return submit(q, &it, err);
}

/* Overlapping ranges of one buffer are copied as memmove would. */
int be_cpu_submit_d2d(be_queue *q, be_mem dst, size_t dst_off, be_mem src, size_t src_off,
                      size_t bytes) {
  be_cpu_item it = {.kind = BE_CPU_COPY, .u.copy = {.bytes = bytes}};
  void *from = NULL;
  int err = span(dst, dst_off, bytes, 1, &it.u.copy.dst);
  if (err == 0)
    err = span(src, src_off, bytes, 1, &from);
  it.u.copy.src = from;
  return submit(q, &it, err);
}

bool be_cpu_can_peer(be_device *dst, be_device *src) {
  (void)dst;
  (void)src;
  return true;
}

int be_cpu_submit_peer(be_queue *q, be_mem dst, size_t dst_off, be_device *src_dev, be_mem src,
                       size_t src_off, size_t bytes) {
  return src_dev == NULL ? ACCEL_EINVAL : be_cpu_submit_d2d(q, dst, dst_off, src, src_off, bytes);
}

int be_cpu_submit_callback(be_queue *q, be_host_fn fn, void *arg) {
  be_cpu_item it = {.kind = BE_CPU_CALLBACK, .u.cb = {.fn = fn, .arg = arg}};
  return submit(q, &it, fn == NULL ? ACCEL_EINVAL : 0);
}

/* A host_callback may hold the queue as long as it likes; a notification is quick by
 * contract (backend.h), so on an idle queue it runs at once, on the submitting thread. */
int be_cpu_submit_notify(be_queue *q, be_host_fn fn, void *arg) {
  be_cpu_item it = {.kind = BE_CPU_CALLBACK, .u.cb = {.fn = fn, .arg = arg, .quick = true}};
  return submit(q, &it, fn == NULL ? ACCEL_EINVAL : 0);
}

/* ---- BLAS ---------------------------------------------------------------------------- */

static int gemm_limits(const be_gemm_args *g) {
  bool fits = fits_blas(g->m) && fits_blas(g->n) && fits_blas(g->k) && fits_blas(g->lda) &&
              fits_blas(g->ldb) && fits_blas(g->ldc);
  return fits ? 0 : ACCEL_ELIMIT;
}

/* The whole batch is one item: its scratch (16-bit types) is allocated once, on the worker. */
int be_cpu_submit_gemm(be_queue *q, const be_gemm_args *g, be_mem a, size_t a_off, be_mem b,
                       size_t b_off, be_mem c, size_t c_off) {
  if (g == NULL || !be_gemm_combo_ok(g->ab_type, g->c_type, g->math))
    return ACCEL_EINVAL;
  if (g->math == BE_GEMM_MATH_TF32)
    return ACCEL_ENOTSUP; /* no tensor cores here: FP32 only */
  be_cpu_item it = {.kind = BE_CPU_GEMM, .u.gemm.g = *g};
  size_t ab = be_dtype_size(g->ab_type), cb = be_dtype_size(g->c_type);
  void *pa = NULL, *pb = NULL, *pc = NULL;
  int err = tail(a, a_off, ab, &pa, &it.u.gemm.a_len);
  if (err == 0)
    err = tail(b, b_off, ab, &pb, &it.u.gemm.b_len);
  if (err == 0)
    err = tail(c, c_off, cb, &pc, &it.u.gemm.c_len);
  if (err == 0)
    err = be_blas_check_gemm(g, it.u.gemm.a_len, it.u.gemm.b_len, it.u.gemm.c_len);
  if (err == 0)
    err = gemm_limits(g);
  it.u.gemm.a = pa;
  it.u.gemm.b = pb;
  it.u.gemm.c = pc;
  return submit(q, &it, err);
}

/* n contiguous elements of x (and y, when y is not NULL) for axpy, dot and scal. */
static int vec_spans(be_cpu_item *it, size_t esize, be_mem x, size_t x_off, const be_mem *y,
                     size_t y_off) {
  void *px = NULL, *py = NULL;
  int err = esize == 0 ? ACCEL_EINVAL : span(x, x_off, it->u.vec.n, esize, &px);
  if (err == 0 && y != NULL)
    err = span(*y, y_off, it->u.vec.n, esize, &py);
  if (err == 0 && (it->u.vec.n > INT64_MAX || !fits_blas((int64_t)it->u.vec.n)))
    err = ACCEL_ELIMIT;
  it->u.vec.x = px;
  it->u.vec.y = y != NULL ? py : px;
  return err;
}

int be_cpu_submit_axpy(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off,
                       be_mem y, size_t y_off) {
  be_cpu_item it = {.kind = BE_CPU_AXPY, .u.vec = {.dtype = dtype, .n = n, .alpha = alpha}};
  return submit(q, &it, vec_spans(&it, be_dtype_size(dtype), x, x_off, &y, y_off));
}

int be_cpu_submit_dot(be_queue *q, uint32_t dtype, size_t n, be_mem x, size_t x_off, be_mem y,
                      size_t y_off, be_mem result, size_t result_off) {
  be_cpu_item it = {.kind = BE_CPU_DOT, .u.vec = {.dtype = dtype, .n = n}};
  size_t esize = be_dtype_size(dtype);
  int err = vec_spans(&it, esize, x, x_off, &y, y_off);
  if (err == 0)
    err = span(result, result_off, 1, esize, &it.u.vec.result);
  return submit(q, &it, err);
}

int be_cpu_submit_scal(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x,
                       size_t x_off) {
  be_cpu_item it = {.kind = BE_CPU_SCAL, .u.vec = {.dtype = dtype, .n = n, .alpha = alpha}};
  return submit(q, &it, vec_spans(&it, be_dtype_size(dtype), x, x_off, NULL, 0));
}

/* ---- element-wise -------------------------------------------------------------------- */

int be_cpu_submit_fill(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t esize,
                       uint64_t value) {
  be_cpu_item it = {.kind = BE_CPU_FILL,
                    .u.fill = {.count = count, .esize = esize, .value = value}};
  void *to = NULL;
  int err = esize == 1 || esize == 2 || esize == 4 || esize == 8 ? 0 : ACCEL_EINVAL;
  if (err == 0)
    err = span(dst, off, count, esize, &to);
  it.u.fill.dst = to;
  return submit(q, &it, err);
}

/* Normals come in Box-Muller pairs: an odd offset would split one (philox.h). */
static int rng_check(const be_rng_args *r) {
  if (r == NULL ||
      (r->dist != BE_RNG_BITS && r->dist != BE_RNG_UNIFORM && r->dist != BE_RNG_NORMAL))
    return ACCEL_EINVAL;
  return r->dist == BE_RNG_NORMAL && r->offset % 2 != 0 ? ACCEL_EINVAL : 0;
}

int be_cpu_submit_rng(be_queue *q, uint32_t dtype, be_mem dst, size_t off, size_t count,
                      const be_rng_args *r) {
  be_cpu_item it = {.kind = BE_CPU_RNG, .u.rng = {.count = count, .dtype = dtype}};
  size_t esize = be_dtype_size(dtype);
  int err = esize == 0 ? ACCEL_EINVAL : rng_check(r);
  if (err == 0) {
    it.u.rng.r = *r;
    err = span(dst, off, count, esize, &it.u.rng.dst);
  }
  return submit(q, &it, err);
}

int be_cpu_submit_unary(be_queue *q, uint32_t dtype, be_unary_op op, be_mem dst, size_t dst_off,
                        be_mem src, size_t src_off, size_t count) {
  be_cpu_item it = {.kind = BE_CPU_UNARY, .u.unary = {.op = op, .count = count, .dtype = dtype}};
  void *to = NULL, *from = NULL;
  size_t esize = be_dtype_size(dtype);
  bool op_ok = op <= BE_UNARY_OP_LAST;
  int err = op_ok && esize > 0 ? 0 : ACCEL_EINVAL;
  if (err == 0)
    err = span(dst, dst_off, count, esize, &to);
  if (err == 0)
    err = span(src, src_off, count, esize, &from);
  it.u.unary.dst = to;
  it.u.unary.src = from;
  return submit(q, &it, err);
}

int be_cpu_submit_binary(be_queue *q, uint32_t dtype, const be_binary_args *g, be_mem dst,
                         size_t dst_off, be_mem a, size_t a_off, be_mem b, size_t b_off) {
  be_cpu_item it = {.kind = BE_CPU_BINARY, .u.binary = {.dtype = dtype, .g = *g}};
  size_t esize = be_dtype_size(dtype), dsize = be_binary_compares(g->op) ? 1 : esize;
  if (!be_binary_dtype_ok(g->op, dtype) || (g->cols > 0 && g->rows > SIZE_MAX / g->cols))
    return ACCEL_EINVAL;
  void *to = NULL, *x = NULL, *y = NULL;
  int err = span(dst, dst_off, g->rows * g->cols, dsize, &to);
  if (err == 0)
    err = span(a, a_off, be_binary_span_size(g, g->a_rs, g->a_cs), esize, &x);
  if (err == 0)
    err = span(b, b_off, be_binary_span_size(g, g->b_rs, g->b_cs), esize, &y);
  it.u.binary.dst = to;
  it.u.binary.a = x;
  it.u.binary.b = y;
  return submit(q, &it, err);
}

int be_cpu_submit_where(be_queue *q, uint32_t dtype, const be_where_args *g, be_mem dst,
                        size_t dst_off, be_mem cond, size_t c_off, be_mem a, size_t a_off, be_mem b,
                        size_t b_off) {
  be_cpu_item it = {.kind = BE_CPU_WHERE, .u.where = {.dtype = dtype, .g = *g}};
  size_t esize = be_dtype_size(dtype);
  if (esize == 0 || (g->cols > 0 && g->rows > SIZE_MAX / g->cols))
    return ACCEL_EINVAL;
  void *to = NULL, *c = NULL, *x = NULL, *y = NULL;
  int err = span(dst, dst_off, g->rows * g->cols, esize, &to);
  if (err == 0)
    err = span(cond, c_off, be_where_span_size(g, g->c_rs, g->c_cs), 1, &c);
  if (err == 0)
    err = span(a, a_off, be_where_span_size(g, g->a_rs, g->a_cs), esize, &x);
  if (err == 0)
    err = span(b, b_off, be_where_span_size(g, g->b_rs, g->b_cs), esize, &y);
  it.u.where.dst = to;
  it.u.where.cond = c;
  it.u.where.a = x;
  it.u.where.b = y;
  return submit(q, &it, err);
}

int be_cpu_submit_convert(be_queue *q, uint32_t dst_dtype, uint32_t src_dtype,
                          const be_convert_args *g, be_mem dst, size_t dst_off, be_mem src,
                          size_t src_off) {
  be_cpu_item it = {.kind = BE_CPU_CONVERT,
                    .u.convert = {.dst_dtype = dst_dtype, .src_dtype = src_dtype, .g = *g}};
  if (g->cols > 0 && g->rows > SIZE_MAX / g->cols)
    return ACCEL_EINVAL;
  void *to = NULL, *from = NULL;
  int err = span(dst, dst_off, g->rows * g->cols, be_dtype_size(dst_dtype), &to);
  if (err == 0)
    err = span(src, src_off, be_convert_span_size(g), be_dtype_size(src_dtype), &from);
  it.u.convert.dst = to;
  it.u.convert.src = from;
  return submit(q, &it, err);
}

int be_cpu_submit_reduce(be_queue *q, uint32_t dtype, const be_reduction_args *g, be_mem dst,
                         size_t dst_off, be_mem src, size_t src_off) {
  be_cpu_item it = {.kind = BE_CPU_REDUCE, .u.reduce = {.dtype = dtype, .g = *g}};
  size_t esize = be_dtype_size(dtype);
  if (esize == 0 || !be_reduction_ok(g))
    return ACCEL_EINVAL;
  void *to = NULL, *from = NULL;
  int err = span(dst, dst_off, (size_t)be_reduction_outputs(g), esize, &to);
  if (err == 0)
    err = span(src, src_off, be_reduction_span_size(g), esize, &from);
  it.u.reduce.dst = to;
  it.u.reduce.src = from;
  return submit(q, &it, err);
}

int be_cpu_submit_softmax(be_queue *q, uint32_t dtype, be_mem dst, size_t dst_off, be_mem src,
                          size_t src_off, size_t rows, size_t cols) {
  be_cpu_item it = {.kind = BE_CPU_SOFTMAX,
                    .u.softmax = {.rows = rows, .cols = cols, .dtype = dtype}};
  void *to = NULL, *from = NULL;
  size_t esize = be_dtype_size(dtype);
  if (esize == 0 || (cols > 0 && rows > SIZE_MAX / cols))
    return ACCEL_EINVAL;
  int err = span(dst, dst_off, rows * cols, esize, &to);
  if (err == 0)
    err = span(src, src_off, rows * cols, esize, &from);
  it.u.softmax.dst = to;
  it.u.softmax.src = from;
  return submit(q, &it, err);
}
