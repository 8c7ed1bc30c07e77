/* Launches of the built-in kernels (kernels.cl): rng, the blas vector ops, nn, and gemm's
 * C = beta C. Every entry checks the dtype first (ACCEL_ENOTSUP), then its ranges
 * (ACCEL_EINVAL), then the device (ACCEL_EDEVLOST), and queues nothing on failure. */
#include <math.h>
#include <stdint.h>

#include "accel/error.h"
#include "backends/opencl/device.h"

/* clang-format off */
#define ARG(x) {sizeof(x), &(x)}
/* clang-format on */

/* The built-in kernels' work-group shape when the caller gives none: 64 work items (8 x 8
 * for 2-D and 3-D launches, the third dimension 1), fewer where the device allows fewer.
 * Leaving it to the driver lets it pick a shape from each global size, and PoCL compiles (and
 * caches on disk) one work-group function per shape: every new size of a small op cost a
 * compile, and the cache grew without bound. The global size is rounded up to a multiple;
 * every built-in kernel checks its range. False when rounding up would overflow. */
static bool fixed_shape(size_t wg_max, cl_uint dims, const size_t *global, size_t *g, size_t *l) {
  size_t side = wg_max >= 64 ? 8 : 1;
  for (cl_uint i = 0; i < dims; i++) {
    l[i] = dims == 1 ? (wg_max >= 64 ? 64 : 1) : (i < 2 ? side : 1);
    if (global[i] > SIZE_MAX - l[i])
      return false;
    g[i] = (global[i] + l[i] - 1) / l[i] * l[i];
  }
  return true;
}

int be_ocl_launch(be_queue *q, be_ocl_fn fn, cl_uint dims, const size_t *global,
                  const size_t *local, const be_ocl_arg *args, cl_uint nargs) {
  be_device *dev = q->dev;
  cl_kernel k = dev->fn[fn];
  if (k == NULL)
    return ACCEL_ENOTSUP;
  for (cl_uint i = 0; i < dims; i++)
    if (global[i] == 0)
      return 0;
  size_t g[3], l[3];
  if (local == NULL) {
    if (dims > 3 || !fixed_shape(dev->wg_max, dims, global, g, l))
      return ACCEL_EINVAL;
    global = g;
    local = l;
  }
  cl_int err = CL_SUCCESS;
  pthread_mutex_lock(&dev->klock);
  for (cl_uint i = 0; i < nargs && err == CL_SUCCESS; i++)
    err = clSetKernelArg(k, i, args[i].size, args[i].p);
  if (err == CL_SUCCESS)
    err = clEnqueueNDRangeKernel(q->cq, k, dims, NULL, global, local, 0, NULL, NULL);
  pthread_mutex_unlock(&dev->klock);
  return be_ocl_check(dev, err);
}

/* The kernel of a row of four for dtype, or ENOTSUP when the device has none. */
static int kernel_for(be_device *dev, be_ocl_fn row, uint32_t dtype, be_ocl_fn *out) {
  int slot = be_ocl_slot(dtype);
  if (dev == NULL || slot < 0 || dev->fn[row + slot] == NULL)
    return ACCEL_ENOTSUP;
  *out = (be_ocl_fn)(row + slot);
  return 0;
}

/* ---- rng ------------------------------------------------------------------------------------ */

static int rng_kernel(be_device *dev, uint32_t dtype, be_rng_dist dist, be_ocl_fn *out) {
  switch (dist) {
  case BE_RNG_BITS:
    *out = BE_OCL_RNG_BITS;
    return dtype == ACCEL_U32 ? 0 : ACCEL_ENOTSUP;
  case BE_RNG_UNIFORM:
    return kernel_for(dev, BE_OCL_RNG_UNIFORM, dtype, out);
  case BE_RNG_NORMAL:
    return kernel_for(dev, BE_OCL_RNG_NORMAL, dtype, out);
  default:
    return ACCEL_EINVAL;
  }
}

int be_ocl_rng_fill(be_queue *q, uint32_t dtype, be_mem dst, size_t off, size_t count,
                    const be_rng_args *r) {
  if (q == NULL || r == NULL)
    return ACCEL_EINVAL;
  be_ocl_fn fn;
  int rc = rng_kernel(q->dev, dtype, r->dist, &fn);
  if (rc == 0)
    rc = be_ocl_span(dst, off, count, be_ocl_esize(dtype));
  if (rc == 0 && r->dist == BE_RNG_NORMAL && r->offset % 2 != 0)
    rc = ACCEL_EINVAL;
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || count == 0)
    return rc;
  /* Elements per Philox block: two for F64 (two words each, or one block per normal pair). */
  uint64_t epb = dtype == ACCEL_F64 ? 2 : 4, offset = r->offset, n = count, o = off;
  size_t blocks = (size_t)((offset + n - 1) / epb - offset / epb + 1);
  cl_uint k0 = (cl_uint)r->seed, k1 = (cl_uint)(r->seed >> 32);
  cl_float mean = (cl_float)r->mean, sd = (cl_float)r->stddev;
  cl_double mean64 = r->mean, sd64 = r->stddev;
  be_ocl_arg args[8] = {{sizeof(cl_mem), &dst.handle},
                        ARG(o),
                        ARG(offset),
                        ARG(n),
                        ARG(k0),
                        ARG(k1),
                        ARG(mean),
                        ARG(sd)};
  if (dtype == ACCEL_F64) {
    args[6] = (be_ocl_arg)ARG(mean64);
    args[7] = (be_ocl_arg)ARG(sd64);
  }
  return be_ocl_launch(q, fn, 1, &blocks, NULL, args, r->dist == BE_RNG_NORMAL ? 8 : 6);
}

/* ---- blas vector ops ------------------------------------------------------------------------ */

/* The kernel of a vector op (F32, F64 only) and the element size. */
static int vector_kernel(be_queue *q, be_ocl_fn row, uint32_t dtype, be_ocl_fn *fn) {
  if (q == NULL)
    return ACCEL_EINVAL;
  if (dtype != ACCEL_F32 && dtype != ACCEL_F64)
    return ACCEL_ENOTSUP;
  return kernel_for(q->dev, row, dtype, fn);
}

/* The scalar as the kernel's type: 4 or 8 bytes in *buf. */
static be_ocl_arg scalar(uint32_t dtype, double v, cl_float *f, cl_double *d) {
  *f = (cl_float)v;
  *d = v;
  return dtype == ACCEL_F64 ? (be_ocl_arg)ARG(*d) : (be_ocl_arg)ARG(*f);
}

int be_ocl_axpy(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off,
                be_mem y, size_t y_off) {
  be_ocl_fn fn;
  int rc = vector_kernel(q, BE_OCL_AXPY, dtype, &fn);
  size_t es = be_ocl_esize(dtype);
  if (rc == 0)
    rc = be_ocl_span(x, x_off, n, es);
  if (rc == 0)
    rc = be_ocl_span(y, y_off, n, es);
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || n == 0)
    return rc;
  cl_ulong nn = n, xo = x_off, yo = y_off;
  cl_float f;
  cl_double d;
  be_ocl_arg args[] = {ARG(nn), scalar(dtype, alpha, &f, &d), {sizeof(cl_mem), &x.handle},
                       ARG(xo), {sizeof(cl_mem), &y.handle},  ARG(yo)};
  return be_ocl_launch(q, fn, 1, &n, NULL, args, 6);
}

int be_ocl_scal(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off) {
  be_ocl_fn fn;
  int rc = vector_kernel(q, BE_OCL_SCAL, dtype, &fn);
  if (rc == 0)
    rc = be_ocl_span(x, x_off, n, be_ocl_esize(dtype));
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || n == 0)
    return rc;
  cl_ulong nn = n, xo = x_off;
  cl_float f;
  cl_double d;
  be_ocl_arg args[] = {ARG(nn), scalar(dtype, alpha, &f, &d), {sizeof(cl_mem), &x.handle}, ARG(xo)};
  return be_ocl_launch(q, fn, 1, &n, NULL, args, 4);
}

/* One work-group of the largest power of two up to 256 the device allows. */
int be_ocl_dot(be_queue *q, uint32_t dtype, size_t n, be_mem x, size_t x_off, be_mem y,
               size_t y_off, be_mem result, size_t result_off) {
  be_ocl_fn fn;
  int rc = vector_kernel(q, BE_OCL_DOT, dtype, &fn);
  size_t es = be_ocl_esize(dtype);
  if (rc == 0)
    rc = be_ocl_span(x, x_off, n, es);
  if (rc == 0)
    rc = be_ocl_span(y, y_off, n, es);
  if (rc == 0)
    rc = be_ocl_span(result, result_off, 1, es);
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0)
    return rc;
  size_t wg = 1;
  while (wg * 2 <= 256 && wg * 2 <= q->dev->wg_max)
    wg *= 2;
  cl_ulong nn = n, xo = x_off, yo = y_off, ro = result_off;
  be_ocl_arg args[] = {ARG(nn), {sizeof(cl_mem), &x.handle},
                       ARG(xo), {sizeof(cl_mem), &y.handle},
                       ARG(yo), {sizeof(cl_mem), &result.handle},
                       ARG(ro)};
  return be_ocl_launch(q, fn, 1, &wg, &wg, args, 7);
}

/* ---- nn ---------------------------------------------------------------------------------------
 */

int be_ocl_unary(be_queue *q, uint32_t dtype, be_unary_op op, be_mem dst, size_t dst_off,
                 be_mem src, size_t src_off, size_t count) {
  if (q == NULL)
    return ACCEL_EINVAL;
  be_ocl_fn fn;
  int rc = kernel_for(q->dev, BE_OCL_SIGMOID, dtype, &fn);
  if (rc != 0)
    return rc;
  static const be_ocl_fn rows[BE_UNARY_OP_LAST + 1] = {
      [BE_SIGMOID] = BE_OCL_SIGMOID, [BE_RELU] = BE_OCL_RELU, [BE_TANH] = BE_OCL_TANH,
      [BE_EXP] = BE_OCL_EXP,         [BE_LOG] = BE_OCL_LOG,   [BE_SQRT] = BE_OCL_SQRT,
      [BE_ABS] = BE_OCL_ABS};
  if (op > BE_UNARY_OP_LAST)
    return ACCEL_EINVAL;
  fn = (be_ocl_fn)(rows[op] + (fn - BE_OCL_SIGMOID)); /* the op's row, the dtype's column */
  size_t es = be_ocl_esize(dtype);
  rc = be_ocl_span(dst, dst_off, count, es);
  if (rc == 0)
    rc = be_ocl_span(src, src_off, count, es);
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || count == 0)
    return rc;
  cl_ulong dso = dst_off, so = src_off, n = count;
  be_ocl_arg args[] = {
      {sizeof(cl_mem), &dst.handle}, ARG(dso), {sizeof(cl_mem), &src.handle}, ARG(so), ARG(n)};
  return be_ocl_launch(q, fn, 1, &count, NULL, args, 5);
}

/* The kernel of a binary op on dtype: a row of four floats (the op an argument), I32 and U32
 * for the integer arithmetic and bitwise ops, BOOL's logical ops, a comparison per input type.
 * ACCEL_ENOTSUP for a dtype the device lacks, ACCEL_EINVAL for an op the dtype does not take
 * (DIV of integers, logic of floats). */
static int binary_fn(be_device *dev, uint32_t dtype, be_binary_op op, be_ocl_fn *out) {
  if (dtype == ACCEL_BOOL) {
    *out = BE_OCL_BINARY_BOOL;
    return be_binary_dtype_ok(op, dtype) ? 0 : ACCEL_EINVAL;
  }
  int slot = be_ocl_slot(dtype);
  if (slot < 0)
    slot = dtype == ACCEL_I32 ? 4 : dtype == ACCEL_U32 ? 5 : -1;
  if (slot < 0)
    return ACCEL_ENOTSUP;
  if (!be_binary_dtype_ok(op, dtype))
    return ACCEL_EINVAL;
  be_ocl_fn fn = be_binary_compares(op) ? (be_ocl_fn)(BE_OCL_COMPARE + slot)
                 : slot < 4             ? (be_ocl_fn)(BE_OCL_BINARY + slot)
                                        : (be_ocl_fn)(BE_OCL_BINARY_INT + slot - 4);
  if (dev->fn[fn] == NULL)
    return ACCEL_ENOTSUP; /* F64 without cl_khr_fp64 */
  *out = fn;
  return 0;
}

int be_ocl_binary(be_queue *q, uint32_t dtype, const be_binary_args *g, be_mem dst, size_t dst_off,
                  be_mem a, size_t a_off, be_mem b, size_t b_off) {
  if (q == NULL || g->op > BE_BINARY_OP_LAST || (g->cols != 0 && g->rows > SIZE_MAX / g->cols))
    return ACCEL_EINVAL;
  be_ocl_fn fn;
  int rc = binary_fn(q->dev, dtype, g->op, &fn);
  if (rc != 0)
    return rc;
  size_t es = be_ocl_esize(dtype), n = g->rows * g->cols;
  rc = be_ocl_span(dst, dst_off, n, be_binary_compares(g->op) ? 1 : es);
  if (rc == 0)
    rc = be_ocl_span(a, a_off, be_binary_span_size(g, g->a_rs, g->a_cs), es);
  if (rc == 0)
    rc = be_ocl_span(b, b_off, be_binary_span_size(g, g->b_rs, g->b_cs), es);
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || n == 0)
    return rc;
  cl_ulong dso = dst_off, ao = a_off, bo = b_off, rows = g->rows, cols = g->cols;
  cl_ulong ars = g->a_rs, acs = g->a_cs, brs = g->b_rs, bcs = g->b_cs;
  cl_int op = (cl_int)g->op;
  be_ocl_arg args[] = {{sizeof(cl_mem), &dst.handle},
                       ARG(dso),
                       {sizeof(cl_mem), &a.handle},
                       ARG(ao),
                       {sizeof(cl_mem), &b.handle},
                       ARG(bo),
                       ARG(op),
                       ARG(rows),
                       ARG(cols),
                       ARG(ars),
                       ARG(acs),
                       ARG(brs),
                       ARG(bcs)};
  return be_ocl_launch(q, fn, 1, &n, NULL, args, 13);
}

/* A select of bits: one kernel per element size. */
int be_ocl_where(be_queue *q, uint32_t dtype, const be_where_args *g, be_mem dst, size_t dst_off,
                 be_mem cond, size_t c_off, be_mem a, size_t a_off, be_mem b, size_t b_off) {
  size_t es = be_ocl_esize(dtype);
  if (q == NULL || (g->cols != 0 && g->rows > SIZE_MAX / g->cols))
    return ACCEL_EINVAL;
  if (es == 0)
    return ACCEL_ENOTSUP;
  be_ocl_fn fn = (be_ocl_fn)(BE_OCL_WHERE + (es == 1 ? 0 : es == 2 ? 1 : es == 4 ? 2 : 3));
  size_t n = g->rows * g->cols;
  int rc = be_ocl_span(dst, dst_off, n, es);
  if (rc == 0)
    rc = be_ocl_span(cond, c_off, be_where_span_size(g, g->c_rs, g->c_cs), 1);
  if (rc == 0)
    rc = be_ocl_span(a, a_off, be_where_span_size(g, g->a_rs, g->a_cs), es);
  if (rc == 0)
    rc = be_ocl_span(b, b_off, be_where_span_size(g, g->b_rs, g->b_cs), es);
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || n == 0)
    return rc;
  cl_ulong dso = dst_off, co = c_off, ao = a_off, bo = b_off, rows = g->rows, cols = g->cols;
  cl_ulong crs = g->c_rs, ccs = g->c_cs, ars = g->a_rs, acs = g->a_cs, brs = g->b_rs, bcs = g->b_cs;
  be_ocl_arg args[] = {{sizeof(cl_mem), &dst.handle},
                       ARG(dso),
                       {sizeof(cl_mem), &cond.handle},
                       ARG(co),
                       {sizeof(cl_mem), &a.handle},
                       ARG(ao),
                       {sizeof(cl_mem), &b.handle},
                       ARG(bo),
                       ARG(rows),
                       ARG(cols),
                       ARG(crs),
                       ARG(ccs),
                       ARG(ars),
                       ARG(acs),
                       ARG(brs),
                       ARG(bcs)};
  return be_ocl_launch(q, fn, 1, &n, NULL, args, 16);
}

/* One kernel for every pair of dtypes (kernels.cl be_convert); F64 only with cl_khr_fp64. */
int be_ocl_convert(be_queue *q, uint32_t dst_dtype, uint32_t src_dtype, const be_convert_args *g,
                   be_mem dst, size_t dst_off, be_mem src, size_t src_off) {
  size_t ds = be_ocl_esize(dst_dtype), ss = be_ocl_esize(src_dtype);
  if (q == NULL || (g->cols != 0 && g->rows > SIZE_MAX / g->cols))
    return ACCEL_EINVAL;
  bool f64 = dst_dtype == ACCEL_F64 || src_dtype == ACCEL_F64;
  if (!be_convert_dtype_ok(dst_dtype) || !be_convert_dtype_ok(src_dtype) || ds == 0 || ss == 0 ||
      (f64 && !q->dev->fp64))
    return ACCEL_ENOTSUP;
  size_t n = g->rows * g->cols;
  int rc = be_ocl_span(dst, dst_off, n, ds);
  if (rc == 0)
    rc = be_ocl_span(src, src_off, be_convert_span_size(g), ss);
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || n == 0)
    return rc;
  cl_ulong dso = dst_off * ds, so = src_off * ss, rows = g->rows, cols = g->cols, rs = g->rs,
           cs = g->cs;
  cl_int ddt = (cl_int)dst_dtype, sdt = (cl_int)src_dtype;
  cl_int same = dst_dtype == src_dtype ? (cl_int)ds : 0;
  be_ocl_arg args[] = {{sizeof(cl_mem), &dst.handle},
                       ARG(dso),
                       {sizeof(cl_mem), &src.handle},
                       ARG(so),
                       ARG(ddt),
                       ARG(sdt),
                       ARG(same),
                       ARG(rows),
                       ARG(cols),
                       ARG(rs),
                       ARG(cs)};
  return be_ocl_launch(q, BE_OCL_CONVERT, 1, &n, NULL, args, 11);
}

/* One work-group per output (kernels.cl): element k of output o at o * os + (k / n2) * s1 +
 * (k % n2) * s2, so a strided view needs no copy. Few outputs use few work-groups (the whole
 * view: one, as dot's). */
int be_ocl_reduce(be_queue *q, uint32_t dtype, const be_reduction_args *g, be_mem dst,
                  size_t dst_off, be_mem src, size_t src_off) {
  if (q == NULL || !be_reduction_ok(g))
    return ACCEL_EINVAL;
  be_ocl_fn fn;
  int rc = kernel_for(q->dev, BE_OCL_REDUCE, dtype, &fn);
  if (rc != 0)
    return rc;
  size_t es = be_ocl_esize(dtype), wg = 1;
  while (wg * 2 <= 256 && wg * 2 <= q->dev->wg_max)
    wg *= 2;
  cl_ulong nout = be_reduction_outputs(g), len = be_reduction_length(g), os = 0, n2 = len, s1 = 0,
           s2 = 1;
  if (g->axis == BE_AXIS_ROWS)
    os = g->cs, s2 = g->rs;
  else if (g->axis == BE_AXIS_COLS)
    os = g->rs, s2 = g->cs;
  else if (!((g->cols <= 1 || g->cs == 1) && (g->rows <= 1 || g->rs == g->cols)))
    n2 = g->cols, s1 = g->rs, s2 = g->cs; /* not one contiguous run: row by row */
  rc = nout > SIZE_MAX / wg ? ACCEL_EINVAL : be_ocl_span(dst, dst_off, (size_t)nout, es);
  if (rc == 0)
    rc = be_ocl_span(src, src_off, be_reduction_span_size(g), es);
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || nout == 0)
    return rc;
  cl_ulong dso = dst_off, so = src_off;
  cl_int op = (cl_int)g->op;
  size_t global = (size_t)nout * wg;
  be_ocl_arg args[] = {{sizeof(cl_mem), &dst.handle},
                       ARG(dso),
                       {sizeof(cl_mem), &src.handle},
                       ARG(so),
                       ARG(op),
                       ARG(nout),
                       ARG(len),
                       ARG(os),
                       ARG(n2),
                       ARG(s1),
                       ARG(s2)};
  return be_ocl_launch(q, fn, 1, &global, &wg, args, 11);
}

int be_ocl_softmax(be_queue *q, uint32_t dtype, be_mem dst, size_t dst_off, be_mem src,
                   size_t src_off, size_t rows, size_t cols) {
  if (q == NULL)
    return ACCEL_EINVAL;
  be_ocl_fn fn;
  int rc = kernel_for(q->dev, BE_OCL_SOFTMAX, dtype, &fn);
  if (rc != 0)
    return rc;
  if (cols != 0 && rows > SIZE_MAX / cols)
    return ACCEL_EINVAL;
  size_t es = be_ocl_esize(dtype);
  rc = be_ocl_span(dst, dst_off, rows * cols, es);
  if (rc == 0)
    rc = be_ocl_span(src, src_off, rows * cols, es);
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || rows == 0 || cols == 0)
    return rc;
  cl_ulong dso = dst_off, so = src_off, r = rows, c = cols;
  be_ocl_arg args[] = {{sizeof(cl_mem), &dst.handle},
                       ARG(dso),
                       {sizeof(cl_mem), &src.handle},
                       ARG(so),
                       ARG(r),
                       ARG(c)};
  return be_ocl_launch(q, fn, 1, &rows, NULL, args, 6);
}

/* ---- gemm's C = beta C ------------------------------------------------------------------------
 */

int be_ocl_scale(be_queue *q, const be_gemm_args *g, be_mem c, size_t c_off, double beta) {
  be_ocl_fn fn;
  if (g->c_type == ACCEL_BF16 || kernel_for(q->dev, BE_OCL_SCALE, g->c_type, &fn) != 0)
    return ACCEL_ENOTSUP;
  cl_ulong co = c_off, m = (cl_ulong)g->m, n = (cl_ulong)g->n, ldc = (cl_ulong)g->ldc;
  cl_ulong stride = g->batch > 1 ? (cl_ulong)g->stride_c : 0;
  cl_float f;
  cl_double d;
  be_ocl_arg args[] = {
      {sizeof(cl_mem), &c.handle},    ARG(co), ARG(m), ARG(n), ARG(ldc), ARG(stride),
      scalar(g->c_type, beta, &f, &d)};
  size_t global[3] = {(size_t)g->m, (size_t)g->n, (size_t)g->batch};
  return be_ocl_launch(q, fn, 3, global, NULL, args, 7);
}
