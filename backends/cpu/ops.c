/* Copies, kernels and host callbacks of the cpu backend: check everything the worker will
 * rely on (ranges within the buffers, 4-byte elements, the kernels' own argument rules), then
 * queue an item. A check that fails queues nothing. */
#include <cblas.h>
#include <limits.h>

#include "accel/error.h"
#include "backends/cpu/backend_cpu.h"
#include "backends/cpu/queue.h"

/* `count` elements of `size` bytes from element `off` of m. A handle of 0 is "no buffer",
 * valid only with 0 bytes (an empty range, a NULL address). */
static int span(be_mem m, size_t off, size_t count, size_t size, void **out)
{
  size_t len = m.bytes / size;
  if ((m.handle == 0 && m.bytes > 0) || off > len || count > len - off)
    return ACCEL_EINVAL;
  *out = m.handle == 0 ? NULL : (char *)(uintptr_t)m.handle + off * size;
  return 0;
}

/* Everything from element `off` to the end of m (BLAS checks shapes against lengths). */
static int tail(be_mem m, size_t off, size_t size, void **out, size_t *len)
{
  *len = off <= m.bytes / size ? m.bytes / size - off : 0;
  return span(m, off, *len, size, out);
}

/* What OpenBLAS's int interface takes (cpu_kernels.h: ACCEL_ELIMIT beyond). */
static bool fits_blas(int64_t v)
{
  return sizeof(blasint) >= sizeof(int64_t) || v <= INT_MAX;
}

static int submit(be_queue *q, const be_cpu_item *it, int err)
{
  if (err != 0)
    return err;
  return q == NULL ? ACCEL_EINVAL : be_cpu_queue_submit(q, it);
}

/* ---- copies -------------------------------------------------------------------------- */

static int host_range(const void *p, size_t bytes)
{
  return p == NULL && bytes > 0 ? ACCEL_EINVAL : 0;
}

int be_cpu_submit_h2d(be_queue *q, be_mem dst, size_t dst_off, const void *src, size_t bytes)
{
  be_cpu_item it = {.kind = BE_CPU_COPY, .u.copy = {.src = src, .bytes = bytes}};
  int err = host_range(src, bytes);
  if (err == 0)
    err = span(dst, dst_off, bytes, 1, &it.u.copy.dst);
  return submit(q, &it, err);
}

int be_cpu_submit_d2h(be_queue *q, void *dst, be_mem src, size_t src_off, size_t bytes)
{
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
                      size_t bytes)
{
  be_cpu_item it = {.kind = BE_CPU_COPY, .u.copy = {.bytes = bytes}};
  void *from = NULL;
  int err = span(dst, dst_off, bytes, 1, &it.u.copy.dst);
  if (err == 0)
    err = span(src, src_off, bytes, 1, &from);
  it.u.copy.src = from;
  return submit(q, &it, err);
}

int be_cpu_submit_callback(be_queue *q, be_host_fn fn, void *arg)
{
  be_cpu_item it = {.kind = BE_CPU_CALLBACK, .u.cb = {.fn = fn, .arg = arg}};
  return submit(q, &it, fn == NULL ? ACCEL_EINVAL : 0);
}

/* ---- BLAS ---------------------------------------------------------------------------- */

static int sgemm_limits(const be_sgemm_args *g)
{
  bool fits = fits_blas(g->m) && fits_blas(g->n) && fits_blas(g->k) && fits_blas(g->lda) &&
              fits_blas(g->ldb) && fits_blas(g->ldc);
  return fits ? 0 : ACCEL_ELIMIT;
}

int be_cpu_submit_sgemm(be_queue *q, const be_sgemm_args *g, be_mem a, size_t a_off, be_mem b,
                        size_t b_off, be_mem c, size_t c_off)
{
  if (g == NULL)
    return ACCEL_EINVAL;
  if (g->math == BE_SGEMM_MATH_TF32)
    return ACCEL_ENOTSUP; /* no tensor cores here: FP32 only */
  be_cpu_item it = {.kind = BE_CPU_SGEMM, .u.sgemm.g = *g};
  void *pa = NULL, *pb = NULL, *pc = NULL;
  int err = tail(a, a_off, 4, &pa, &it.u.sgemm.a_len);
  if (err == 0)
    err = tail(b, b_off, 4, &pb, &it.u.sgemm.b_len);
  if (err == 0)
    err = tail(c, c_off, 4, &pc, &it.u.sgemm.c_len);
  if (err == 0)
    err = be_blas_check_sgemm(g, it.u.sgemm.a_len, it.u.sgemm.b_len, it.u.sgemm.c_len);
  if (err == 0)
    err = sgemm_limits(g);
  it.u.sgemm.a = pa;
  it.u.sgemm.b = pb;
  it.u.sgemm.c = pc;
  return submit(q, &it, err);
}

int be_cpu_submit_saxpy(be_queue *q, size_t n, float alpha, be_mem x, size_t x_off, be_mem y,
                        size_t y_off)
{
  be_cpu_item it = {.kind = BE_CPU_SAXPY, .u.saxpy = {.n = n, .alpha = alpha}};
  void *px = NULL, *py = NULL;
  int err = span(x, x_off, n, 4, &px);
  if (err == 0)
    err = span(y, y_off, n, 4, &py);
  if (err == 0 && (n > INT64_MAX || !fits_blas((int64_t)n)))
    err = ACCEL_ELIMIT;
  it.u.saxpy.x = px;
  it.u.saxpy.y = py;
  return submit(q, &it, err);
}

int be_cpu_submit_sdot(be_queue *q, size_t n, be_mem x, size_t x_off, be_mem y, size_t y_off,
                       be_mem result, size_t result_off)
{
  be_cpu_item it = {.kind = BE_CPU_SDOT, .u.sdot = {.n = n}};
  void *px = NULL, *py = NULL, *pr = NULL;
  int err = span(x, x_off, n, 4, &px);
  if (err == 0)
    err = span(y, y_off, n, 4, &py);
  if (err == 0)
    err = span(result, result_off, 1, 4, &pr);
  if (err == 0 && (n > INT64_MAX || !fits_blas((int64_t)n)))
    err = ACCEL_ELIMIT;
  it.u.sdot.x = px;
  it.u.sdot.y = py;
  it.u.sdot.result = pr;
  return submit(q, &it, err);
}

/* ---- element-wise -------------------------------------------------------------------- */

int be_cpu_submit_fill(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t esize,
                       uint64_t value)
{
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
static int rng_check(const be_rng_args *r)
{
  if (r == NULL || (r->dist != BE_RNG_BITS && r->dist != BE_RNG_UNIFORM &&
                    r->dist != BE_RNG_NORMAL))
    return ACCEL_EINVAL;
  return r->dist == BE_RNG_NORMAL && r->offset % 2 != 0 ? ACCEL_EINVAL : 0;
}

int be_cpu_submit_rng(be_queue *q, be_mem dst, size_t off, size_t count, const be_rng_args *r)
{
  be_cpu_item it = {.kind = BE_CPU_RNG, .u.rng = {.count = count}};
  int err = rng_check(r);
  if (err == 0) {
    it.u.rng.r = *r;
    err = span(dst, off, count, 4, &it.u.rng.dst);
  }
  return submit(q, &it, err);
}

int be_cpu_submit_unary(be_queue *q, be_unary_op op, be_mem dst, size_t dst_off, be_mem src,
                        size_t src_off, size_t count)
{
  be_cpu_item it = {.kind = BE_CPU_UNARY, .u.unary = {.op = op, .count = count}};
  void *to = NULL, *from = NULL;
  int err = op == BE_SIGMOID || op == BE_RELU || op == BE_TANH ? 0 : ACCEL_EINVAL;
  if (err == 0)
    err = span(dst, dst_off, count, 4, &to);
  if (err == 0)
    err = span(src, src_off, count, 4, &from);
  it.u.unary.dst = to;
  it.u.unary.src = from;
  return submit(q, &it, err);
}

int be_cpu_submit_softmax(be_queue *q, be_mem dst, size_t dst_off, be_mem src, size_t src_off,
                          size_t rows, size_t cols)
{
  be_cpu_item it = {.kind = BE_CPU_SOFTMAX, .u.softmax = {.rows = rows, .cols = cols}};
  void *to = NULL, *from = NULL;
  if (cols > 0 && rows > SIZE_MAX / cols)
    return ACCEL_EINVAL;
  int err = span(dst, dst_off, rows * cols, 4, &to);
  if (err == 0)
    err = span(src, src_off, rows * cols, 4, &from);
  it.u.softmax.dst = to;
  it.u.softmax.src = from;
  return submit(q, &it, err);
}
