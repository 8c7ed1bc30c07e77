/* What the proxy checks before it sends a submission (proxy.h): the arguments every backend
 * refuses on submission (ranges of memory, dtypes the device does not run, shapes), so that
 * a bad call fails the call, as the contract says, and not the queue's next completion. The
 * worker's backend checks again what it relies on. */
#include "backends/worker/proxy.h"
#include "ops/dtype_conv.h"

int bw_check_span(be_mem m, size_t off, size_t count, size_t size) {
  if (size == 0)
    return ACCEL_EINVAL;
  size_t len = m.bytes / size;
  return off > len || count > len - off ? ACCEL_EINVAL : 0;
}

int bw_check_host(const void *p, size_t bytes) {
  return p == NULL && bytes > 0 ? ACCEL_EINVAL : 0;
}

static int has_dtype(uint32_t set, uint32_t dtype) {
  return dtype < 32 && (set & ACCEL_DTYPE_BIT(dtype)) ? 0 : ACCEL_ENOTSUP;
}

/* Elements of m from `off` to its end. */
static uint64_t tail(be_mem m, size_t off, size_t size) {
  return off <= m.bytes / size ? m.bytes / size - off : 0;
}

int bw_check_gemm(const bw_pdev *d, const be_gemm_args *g, be_mem a, size_t a_off, be_mem b,
                  size_t b_off, be_mem c, size_t c_off) {
  if (g == NULL)
    return ACCEL_EINVAL;
  if (g->ab_type >= 16 || g->c_type >= 16 || g->math >= 4 ||
      !d->caps.gemm[g->ab_type][g->c_type][g->math])
    return ACCEL_ENOTSUP; /* what gemm_supports says, for any combination */
  size_t ab = be_dtype_size(g->ab_type), cb = be_dtype_size(g->c_type);
  if (ab == 0 || cb == 0 || a_off > a.bytes / ab || b_off > b.bytes / ab || c_off > c.bytes / cb)
    return ACCEL_EINVAL;
  return be_blas_check_gemm(g, tail(a, a_off, ab), tail(b, b_off, ab), tail(c, c_off, cb));
}

int bw_check_vec(const bw_pdev *d, uint32_t dtype, size_t n, be_mem x, size_t x_off,
                 const be_mem *y, size_t y_off) {
  int rc = has_dtype(d->caps.blas_vector, dtype);
  size_t esize = be_dtype_size(dtype);
  if (rc == 0)
    rc = bw_check_span(x, x_off, n, esize);
  if (rc == 0 && y != NULL)
    rc = bw_check_span(*y, y_off, n, esize);
  return rc;
}

int bw_check_rng(const bw_pdev *d, uint32_t dtype, be_mem dst, size_t off, size_t count,
                 const be_rng_args *r) {
  if (r == NULL)
    return ACCEL_EINVAL;
  if (r->dist == BE_RNG_BITS ? dtype != ACCEL_U32 : has_dtype(d->caps.rng, dtype) != 0)
    return ACCEL_ENOTSUP;
  if (r->dist != BE_RNG_BITS && r->dist != BE_RNG_UNIFORM && r->dist != BE_RNG_NORMAL)
    return ACCEL_EINVAL;
  if (r->dist == BE_RNG_NORMAL && r->offset % 2 != 0)
    return ACCEL_EINVAL; /* normals come in Box-Muller pairs */
  return bw_check_span(dst, off, count, be_dtype_size(dtype));
}

/* dst's rows x cols elements (bytes for a comparison) and each input's span at its strides
 * (ops/args.h). */
int bw_check_binary(const bw_pdev *d, uint32_t dtype, const be_binary_args *g, be_mem dst,
                    size_t dst_off, be_mem a, size_t a_off, be_mem b, size_t b_off) {
  size_t esize = be_dtype_size(dtype), dsize = be_binary_compares(g->op) ? 1 : esize;
  size_t sa = be_binary_span_size(g, g->a_rs, g->a_cs);
  size_t sb = be_binary_span_size(g, g->b_rs, g->b_cs);
  int rc = dtype == ACCEL_I32 || dtype == ACCEL_U32 || dtype == ACCEL_BOOL
               ? 0
               : has_dtype(d->caps.nn, dtype);
  if (rc == 0 &&
      (!be_binary_dtype_ok(g->op, dtype) || (g->cols != 0 && g->rows > SIZE_MAX / g->cols)))
    rc = ACCEL_EINVAL;
  if (rc == 0)
    rc = bw_check_span(dst, dst_off, g->rows * g->cols, dsize);
  if (rc == 0)
    rc = bw_check_span(a, a_off, sa, esize);
  if (rc == 0)
    rc = bw_check_span(b, b_off, sb, esize);
  return rc;
}

/* Both dtypes in the list (F64 only where the device's nn has it), dst's rows x cols elements
 * and src's span at its strides. */
int bw_check_convert(const bw_pdev *d, uint32_t dst_dtype, uint32_t src_dtype,
                     const be_convert_args *g, be_mem dst, size_t dst_off, be_mem src,
                     size_t src_off) {
  int rc = be_convert_dtype_ok(dst_dtype) && be_convert_dtype_ok(src_dtype) ? 0 : ACCEL_ENOTSUP;
  if (rc == 0 && (dst_dtype == ACCEL_F64 || src_dtype == ACCEL_F64))
    rc = has_dtype(d->caps.nn, ACCEL_F64);
  if (rc == 0 && g->cols != 0 && g->rows > SIZE_MAX / g->cols)
    rc = ACCEL_EINVAL;
  if (rc == 0)
    rc = bw_check_span(dst, dst_off, g->rows * g->cols, be_dtype_size(dst_dtype));
  if (rc == 0)
    rc = bw_check_span(src, src_off, be_convert_span_size(g), be_dtype_size(src_dtype));
  return rc;
}

/* dst's rows x cols elements, cond's (bytes) and each input's span at its strides. */
int bw_check_where(const bw_pdev *d, uint32_t dtype, const be_where_args *g, be_mem dst,
                   size_t dst_off, be_mem cond, size_t c_off, be_mem a, size_t a_off, be_mem b,
                   size_t b_off) {
  size_t esize = be_dtype_size(dtype);
  int rc = esize == 0 ? ACCEL_ENOTSUP : 0; /* every dtype (backend.h) */
  if (rc == 0 && g->cols != 0 && g->rows > SIZE_MAX / g->cols)
    rc = ACCEL_EINVAL;
  if (rc == 0)
    rc = bw_check_span(dst, dst_off, g->rows * g->cols, esize);
  if (rc == 0)
    rc = bw_check_span(cond, c_off, be_where_span_size(g, g->c_rs, g->c_cs), 1);
  if (rc == 0)
    rc = bw_check_span(a, a_off, be_where_span_size(g, g->a_rs, g->a_cs), esize);
  if (rc == 0)
    rc = bw_check_span(b, b_off, be_where_span_size(g, g->b_rs, g->b_cs), esize);
  return rc;
}

/* dst's outputs and src's span at its strides (ops/args.h). */
int bw_check_reduce(const bw_pdev *d, uint32_t dtype, const be_reduction_args *g, be_mem dst,
                    size_t dst_off, be_mem src, size_t src_off) {
  size_t esize = be_dtype_size(dtype);
  int rc = has_dtype(d->caps.nn, dtype);
  if (rc == 0 && (!be_reduction_ok(g) || be_reduction_span(g) > SIZE_MAX))
    rc = ACCEL_EINVAL;
  if (rc == 0)
    rc = bw_check_span(dst, dst_off, (size_t)be_reduction_outputs(g), esize);
  if (rc == 0)
    rc = bw_check_span(src, src_off, (size_t)be_reduction_span(g), esize);
  return rc;
}

int bw_check_nn(const bw_pdev *d, uint32_t dtype, be_mem dst, size_t dst_off, be_mem src,
                size_t src_off, size_t count) {
  int rc = has_dtype(d->caps.nn, dtype);
  size_t esize = be_dtype_size(dtype);
  if (rc == 0)
    rc = bw_check_span(dst, dst_off, count, esize);
  if (rc == 0)
    rc = bw_check_span(src, src_off, count, esize);
  return rc;
}
