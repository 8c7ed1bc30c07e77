/* The op entry points of the C API: each builds an envelope and hands it to client_submit(),
 * which checks it against the handle table (the same checker the session runs again) and
 * sends it. An argument error returns at once and makes no future. */
#include <stdlib.h>
#include <string.h>

#include "clients/ctx.h"
#include "ops/dtype_conv.h"
#include "runtime/alloc.h"
#include "runtime/error_detail.h"

static dev_call *new_call(accel_ctx *ctx, uint32_t kind) {
  return dev_call_alloc(ctx->call_pool, kind);
}

static void add_buf(dev_op *op, accel_buffer h, uint64_t offset, uint64_t count) {
  op->bufs[op->nbufs++] = (dev_op_buf){.handle = h, .offset = offset, .count = count};
}

int accel_write(accel_ctx *ctx, accel_buffer dst, size_t offset, const void *src, size_t count,
                accel_future **f) {
  accel_dtype dtype;
  size_t len;
  int rc = ctx ? client_handle_get(ctx, dst, &dtype, &len) : ACCEL_EINVAL;
  if (rc != 0)
    return rc;
  if ((src == NULL && count > 0) || count > SIZE_MAX / 8)
    return ACCEL_EINVAL;
  dev_call *call = new_call(ctx, DEV_OP_WRITE);
  if (call == NULL)
    return ACCEL_ENOMEM;
  dev_op *op = &call->op;
  add_buf(op, dst, offset, count);
  op->u.write.src = src;
  op->u.write.bytes = count * dev_dtype_size(dtype);
  return client_submit(ctx, call, ACCEL_DEVICE_ANY, f);
}

int accel_read(accel_ctx *ctx, accel_buffer src, size_t offset, void *dst, size_t count,
               accel_future **f) {
  accel_dtype dtype;
  size_t len;
  int rc = ctx ? client_handle_get(ctx, src, &dtype, &len) : ACCEL_EINVAL;
  if (rc != 0)
    return rc;
  if ((dst == NULL && count > 0) || count > SIZE_MAX / 8)
    return ACCEL_EINVAL;
  dev_call *call = new_call(ctx, DEV_OP_READ);
  if (call == NULL)
    return ACCEL_ENOMEM;
  dev_op *op = &call->op;
  add_buf(op, src, offset, count);
  op->u.read.dst = dst;
  op->u.read.bytes = count * dev_dtype_size(dtype);
  return client_submit(ctx, call, ACCEL_DEVICE_ANY, f);
}

int accel_copy(accel_ctx *ctx, accel_device dev, accel_buffer dst, size_t dst_off, accel_buffer src,
               size_t src_off, size_t count, accel_future **f) {
  dev_call *call = ctx ? new_call(ctx, DEV_OP_COPY) : NULL;
  if (call == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  dev_op *op = &call->op;
  add_buf(op, dst, dst_off, count);
  add_buf(op, src, src_off, count);
  return client_submit(ctx, call, dev, f);
}

static int fill(accel_ctx *ctx, accel_device dev, accel_buffer dst, uint64_t bits,
                accel_future **f) {
  dev_call *call = ctx ? new_call(ctx, DEV_OP_FILL) : NULL;
  if (call == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  dev_op *op = &call->op;
  add_buf(op, dst, 0, 0);
  op->u.fill.value = bits;
  return client_submit(ctx, call, dev, f);
}

/* The bits of `value` as an element of `dtype`, or ACCEL_EINVAL. */
static int element_bits(accel_dtype dtype, double value, uint64_t *bits) {
  switch (dtype) {
  case ACCEL_F64:
    memcpy(bits, &value, sizeof value);
    return 0;
  case ACCEL_F32:
    *bits = be_f32_bits((float)value);
    return 0;
  case ACCEL_F16:
    *bits = be_f32_to_f16((float)value); /* the double's nearest f32 first, as a cast does */
    return 0;
  case ACCEL_BF16:
    *bits = be_f32_to_bf16((float)value);
    return 0;
  case ACCEL_U32:
    if (!(value >= 0.0 && value <= 4294967295.0) || value != (double)(uint32_t)value)
      return ACCEL_EINVAL;
    *bits = (uint32_t)value;
    return 0;
  case ACCEL_I32:
    if (!(value >= -2147483648.0 && value <= 2147483647.0) || value != (double)(int32_t)value)
      return ACCEL_EINVAL;
    *bits = (uint32_t)(int32_t)value;
    return 0;
  case ACCEL_BOOL:
    if (value != 0.0 && value != 1.0)
      return rt_error_detail(ACCEL_EINVAL, "fill: a bool is 0 or 1, not %g", value);
    *bits = value == 1.0;
    return 0;
  }
  return ACCEL_EINVAL;
}

int accel_fill(accel_ctx *ctx, accel_device dev, accel_buffer dst, double value, accel_future **f) {
  accel_dtype dtype;
  size_t count;
  uint64_t bits = 0;
  int rc = ctx ? client_handle_get(ctx, dst, &dtype, &count) : ACCEL_EINVAL;
  if (rc == 0)
    rc = element_bits(dtype, value, &bits);
  return rc != 0 ? rc : fill(ctx, dev, dst, bits, f);
}

int accel_fill_u32(accel_ctx *ctx, accel_device dev, accel_buffer dst, uint32_t value,
                   accel_future **f) {
  accel_dtype dtype;
  size_t count;
  int rc = ctx ? client_handle_get(ctx, dst, &dtype, &count) : ACCEL_EINVAL;
  if (rc != 0)
    return rc;
  return dev_dtype_size(dtype) == 4 ? fill(ctx, dev, dst, value, f) : ACCEL_EINVAL;
}

int accel_fill_f32(accel_ctx *ctx, accel_device dev, accel_buffer dst, float value,
                   accel_future **f) {
  accel_dtype dtype;
  size_t count;
  int rc = ctx ? client_handle_get(ctx, dst, &dtype, &count) : ACCEL_EINVAL;
  if (rc != 0)
    return rc;
  if (dtype != ACCEL_F32)
    return ACCEL_EINVAL;
  return fill(ctx, dev, dst, be_f32_bits(value), f);
}

/* ---- BLAS ---- */

static bool sizes_fit(size_t a, size_t b, size_t c, size_t d, size_t e, size_t g) {
  return a <= INT64_MAX && b <= INT64_MAX && c <= INT64_MAX && d <= INT64_MAX && e <= INT64_MAX &&
         g <= INT64_MAX;
}

static int gemm(accel_ctx *ctx, accel_device dev, const be_gemm_args *g, accel_buffer a,
                accel_buffer b, accel_buffer c, accel_future **f) {
  dev_call *call = new_call(ctx, DEV_OP_GEMM);
  if (call == NULL)
    return ACCEL_ENOMEM;
  dev_op *op = &call->op;
  op->u.gemm = *g;
  add_buf(op, a, 0, 0);
  add_buf(op, b, 0, 0);
  add_buf(op, c, 0, 0);
  return client_submit(ctx, call, dev, f);
}

int accel_gemm_strided_batched(accel_ctx *ctx, accel_device dev, accel_trans ta, accel_trans tb,
                               size_t m, size_t n, size_t k, double alpha, accel_buffer a,
                               size_t lda, size_t stride_a, accel_buffer b, size_t ldb,
                               size_t stride_b, double beta, accel_buffer c, size_t ldc,
                               size_t stride_c, size_t batch, accel_math math, accel_future **f) {
  if (ctx == NULL || !sizes_fit(m, n, k, lda, ldb, ldc) ||
      !sizes_fit(stride_a, stride_b, stride_c, batch, 0, 0) || batch == 0)
    return ACCEL_EINVAL;
  be_gemm_args g = {.trans_a = (be_blas_trans)ta,
                    .trans_b = (be_blas_trans)tb,
                    .m = (int64_t)m,
                    .n = (int64_t)n,
                    .k = (int64_t)k,
                    .alpha = alpha,
                    .beta = beta,
                    .lda = (int64_t)lda,
                    .ldb = (int64_t)ldb,
                    .ldc = (int64_t)ldc,
                    .math = (be_gemm_math)math,
                    .batch = (int64_t)batch,
                    .stride_a = (int64_t)stride_a,
                    .stride_b = (int64_t)stride_b,
                    .stride_c = (int64_t)stride_c};
  return gemm(ctx, dev, &g, a, b, c, f);
}

int accel_gemm(accel_ctx *ctx, accel_device dev, accel_trans ta, accel_trans tb, size_t m, size_t n,
               size_t k, double alpha, accel_buffer a, size_t lda, accel_buffer b, size_t ldb,
               double beta, accel_buffer c, size_t ldc, accel_math math, accel_future **f) {
  return accel_gemm_strided_batched(ctx, dev, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c,
                                    ldc, 0, 1, math, f);
}

int accel_sgemm(accel_ctx *ctx, accel_device dev, accel_trans ta, accel_trans tb, size_t m,
                size_t n, size_t k, float alpha, accel_buffer a, size_t lda, accel_buffer b,
                size_t ldb, float beta, accel_buffer c, size_t ldc, accel_future **f) {
  accel_dtype dtype;
  size_t len;
  int rc = ctx ? client_handle_get(ctx, c, &dtype, &len) : ACCEL_EINVAL;
  if (rc != 0)
    return rc;
  if (dtype != ACCEL_F32)
    return ACCEL_EINVAL;
  return accel_gemm(ctx, dev, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                    client_thread_math(), f);
}

static int blas1(accel_ctx *ctx, accel_device dev, uint32_t kind, size_t n, double alpha,
                 accel_buffer x, accel_buffer y, accel_buffer result, accel_future **f) {
  dev_call *call = ctx ? new_call(ctx, kind) : NULL;
  if (call == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  dev_op *op = &call->op;
  op->u.axpy.n = n; /* dot's n is at the same place */
  op->u.axpy.alpha = alpha;
  if (kind == DEV_OP_DOT)
    op->u.dot.n = n;
  add_buf(op, x, 0, 0);
  if (kind != DEV_OP_SCAL)
    add_buf(op, y, 0, 0);
  if (kind == DEV_OP_DOT)
    add_buf(op, result, 0, 0);
  return client_submit(ctx, call, dev, f);
}

int accel_axpy(accel_ctx *ctx, accel_device dev, size_t n, double alpha, accel_buffer x,
               accel_buffer y, accel_future **f) {
  return blas1(ctx, dev, DEV_OP_AXPY, n, alpha, x, y, 0, f);
}

int accel_dot(accel_ctx *ctx, accel_device dev, size_t n, accel_buffer x, accel_buffer y,
              accel_buffer result, accel_future **f) {
  return blas1(ctx, dev, DEV_OP_DOT, n, 0.0, x, y, result, f);
}

int accel_scal(accel_ctx *ctx, accel_device dev, size_t n, double alpha, accel_buffer x,
               accel_future **f) {
  return blas1(ctx, dev, DEV_OP_SCAL, n, alpha, x, 0, 0, f);
}

/* The F32 shorthands refuse other dtypes (their float arguments say F32). */
static int f32_only(accel_ctx *ctx, accel_buffer x) {
  accel_dtype dtype;
  size_t len;
  int rc = ctx ? client_handle_get(ctx, x, &dtype, &len) : ACCEL_EINVAL;
  return rc != 0 ? rc : dtype == ACCEL_F32 ? 0 : ACCEL_EINVAL;
}

int accel_saxpy(accel_ctx *ctx, accel_device dev, size_t n, float alpha, accel_buffer x,
                accel_buffer y, accel_future **f) {
  int rc = f32_only(ctx, x);
  return rc != 0 ? rc : accel_axpy(ctx, dev, n, alpha, x, y, f);
}

int accel_sdot(accel_ctx *ctx, accel_device dev, size_t n, accel_buffer x, accel_buffer y,
               accel_buffer result, accel_future **f) {
  int rc = f32_only(ctx, x);
  return rc != 0 ? rc : accel_dot(ctx, dev, n, x, y, result, f);
}

/* ---- RNG ---- */

int accel_rng_fill(accel_ctx *ctx, accel_device dev, accel_buffer dst, const accel_rng *spec,
                   accel_future **f) {
  if (ctx == NULL || spec == NULL || (unsigned)spec->dist > ACCEL_DIST_NORMAL)
    return ACCEL_EINVAL;
  dev_call *call = new_call(ctx, DEV_OP_RNG);
  if (call == NULL)
    return ACCEL_ENOMEM;
  dev_op *op = &call->op;
  op->u.rng = (be_rng_args){(be_rng_dist)spec->dist, spec->seed, spec->offset, spec->mean,
                            spec->stddev};
  add_buf(op, dst, 0, 0);
  return client_submit(ctx, call, dev, f);
}

/* ---- NN element-wise ---- */

static int elementwise(accel_ctx *ctx, accel_device dev, uint32_t kind, be_unary_op uop,
                       accel_buffer dst, accel_buffer src, size_t rows, size_t cols,
                       accel_future **f) {
  dev_call *call = ctx ? new_call(ctx, kind) : NULL;
  if (call == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  dev_op *op = &call->op;
  if (kind == DEV_OP_SOFTMAX) {
    op->u.softmax.rows = rows;
    op->u.softmax.cols = cols;
  } else {
    op->u.unary.op = uop;
  }
  add_buf(op, dst, 0, 0);
  add_buf(op, src, 0, 0);
  return client_submit(ctx, call, dev, f);
}

_Static_assert((int)ACCEL_ADD == (int)BE_ADD && (int)ACCEL_MINIMUM == (int)BE_MINIMUM &&
                   (int)ACCEL_BITWISE_AND == (int)BE_BITAND &&
                   (int)ACCEL_BITWISE_XOR == (int)BE_BITXOR,
               "accel_binary_op is be_binary_op");

static int binary(accel_ctx *ctx, accel_device dev, be_binary_op bop, accel_buffer dst, size_t rows,
                  size_t cols, accel_buffer a, accel_strides a_strides, accel_buffer b,
                  accel_strides b_strides, accel_future **f) {
  dev_call *call = ctx ? new_call(ctx, DEV_OP_BINARY) : NULL;
  if (call == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  dev_op *op = &call->op;
  op->u.binary = (be_binary_args){.op = bop,
                                  .rows = rows,
                                  .cols = cols,
                                  .a_rs = a_strides.row,
                                  .a_cs = a_strides.col,
                                  .b_rs = b_strides.row,
                                  .b_cs = b_strides.col};
  add_buf(op, dst, 0, 0);
  add_buf(op, a, 0, 0);
  add_buf(op, b, 0, 0);
  return client_submit(ctx, call, dev, f);
}

int accel_binary(accel_ctx *ctx, accel_device dev, accel_binary_op bop, accel_buffer dst,
                 size_t rows, size_t cols, accel_buffer a, accel_strides a_strides, accel_buffer b,
                 accel_strides b_strides, accel_future **f) {
  if ((unsigned)bop > BE_BINARY_OP_LAST || be_binary_compares((be_binary_op)bop))
    return rt_error_detail(ACCEL_EINVAL,
                           "accel_binary: no op %u (add .. minimum, bitwise_and .. bitwise_xor)",
                           (unsigned)bop);
  return binary(ctx, dev, (be_binary_op)bop, dst, rows, cols, a, a_strides, b, b_strides, f);
}

_Static_assert((int)BE_EQUAL + (int)ACCEL_GREATER_EQUAL == (int)BE_GREATER_EQUAL &&
                   (int)ACCEL_EQUAL == 0,
               "accel_compare_op is be_binary_op's comparisons, from BE_EQUAL");

int accel_compare(accel_ctx *ctx, accel_device dev, accel_compare_op cop, accel_buffer dst,
                  size_t rows, size_t cols, accel_buffer a, accel_strides a_strides, accel_buffer b,
                  accel_strides b_strides, accel_future **f) {
  if ((unsigned)cop > ACCEL_GREATER_EQUAL)
    return rt_error_detail(ACCEL_EINVAL, "accel_compare: no op %u (equal .. greater_equal)",
                           (unsigned)cop);
  return binary(ctx, dev, (be_binary_op)(BE_EQUAL + (int)cop), dst, rows, cols, a, a_strides, b,
                b_strides, f);
}

int accel_where(accel_ctx *ctx, accel_device dev, accel_buffer dst, size_t rows, size_t cols,
                accel_buffer cond, accel_strides c_strides, accel_buffer a, accel_strides a_strides,
                accel_buffer b, accel_strides b_strides, accel_future **f) {
  dev_call *call = ctx ? new_call(ctx, DEV_OP_WHERE) : NULL;
  if (call == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  dev_op *op = &call->op;
  op->u.where = (be_where_args){.rows = rows,
                                .cols = cols,
                                .c_rs = c_strides.row,
                                .c_cs = c_strides.col,
                                .a_rs = a_strides.row,
                                .a_cs = a_strides.col,
                                .b_rs = b_strides.row,
                                .b_cs = b_strides.col};
  add_buf(op, dst, 0, 0);
  add_buf(op, cond, 0, 0);
  add_buf(op, a, 0, 0);
  add_buf(op, b, 0, 0);
  return client_submit(ctx, call, dev, f);
}

int accel_convert(accel_ctx *ctx, accel_device dev, accel_buffer dst, size_t rows, size_t cols,
                  accel_buffer src, accel_strides src_strides, accel_future **f) {
  dev_call *call = ctx ? new_call(ctx, DEV_OP_CONVERT) : NULL;
  if (call == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  call->op.u.convert =
      (be_convert_args){.rows = rows, .cols = cols, .rs = src_strides.row, .cs = src_strides.col};
  add_buf(&call->op, dst, 0, 0);
  add_buf(&call->op, src, 0, 0);
  return client_submit(ctx, call, dev, f);
}

_Static_assert((int)ACCEL_UNARY_SIGMOID == (int)BE_SIGMOID &&
                   (int)ACCEL_UNARY_ABS == (int)BE_UNARY_OP_LAST,
               "accel_unary_op is be_unary_op");

int accel_unary(accel_ctx *ctx, accel_device dev, accel_unary_op op, accel_buffer dst,
                accel_buffer src, accel_future **f) {
  if ((unsigned)op > BE_UNARY_OP_LAST)
    return ACCEL_EINVAL;
  return elementwise(ctx, dev, DEV_OP_UNARY, (be_unary_op)op, dst, src, 0, 0, f);
}

_Static_assert((int)ACCEL_SUM == (int)BE_RED_SUM && (int)ACCEL_MEAN == (int)BE_RED_MEAN &&
                   (int)ACCEL_AXIS_ROWS == (int)BE_AXIS_ROWS &&
                   (int)ACCEL_AXIS_COLS == (int)BE_AXIS_COLS,
               "accel_reduction_op is be_reduction_op, accel_axis be_reduction_axis");

int accel_reduction(accel_ctx *ctx, accel_device dev, accel_reduction_op op, accel_buffer dst,
                    size_t rows, size_t cols, accel_buffer src, accel_strides src_strides,
                    accel_axis axis, accel_future **f) {
  if ((unsigned)op > BE_REDUCTION_OP_LAST || (unsigned)axis > BE_REDUCTION_AXIS_LAST)
    return ACCEL_EINVAL;
  dev_call *call = ctx ? new_call(ctx, DEV_OP_REDUCE) : NULL;
  if (call == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  call->op.u.reduce = (be_reduction_args){.op = (be_reduction_op)op,
                                          .axis = (be_reduction_axis)axis,
                                          .rows = rows,
                                          .cols = cols,
                                          .rs = src_strides.row,
                                          .cs = src_strides.col};
  add_buf(&call->op, dst, 0, 0);
  add_buf(&call->op, src, 0, 0);
  return client_submit(ctx, call, dev, f);
}

int accel_sigmoid(accel_ctx *ctx, accel_device dev, accel_buffer dst, accel_buffer src,
                  accel_future **f) {
  return elementwise(ctx, dev, DEV_OP_UNARY, BE_SIGMOID, dst, src, 0, 0, f);
}

int accel_relu(accel_ctx *ctx, accel_device dev, accel_buffer dst, accel_buffer src,
               accel_future **f) {
  return elementwise(ctx, dev, DEV_OP_UNARY, BE_RELU, dst, src, 0, 0, f);
}

int accel_tanh(accel_ctx *ctx, accel_device dev, accel_buffer dst, accel_buffer src,
               accel_future **f) {
  return elementwise(ctx, dev, DEV_OP_UNARY, BE_TANH, dst, src, 0, 0, f);
}

int accel_softmax(accel_ctx *ctx, accel_device dev, accel_buffer dst, accel_buffer src, size_t rows,
                  size_t cols, accel_future **f) {
  return elementwise(ctx, dev, DEV_OP_SOFTMAX, BE_SIGMOID, dst, src, rows, cols, f);
}

/* ---- collectives ---- */

static int collective(accel_ctx *ctx, uint32_t kind, const accel_device *devices,
                      const accel_buffer *bufs, const accel_buffer *recv, uint32_t n,
                      uint32_t reduce, uint32_t root, accel_future **f) {
  if (ctx == NULL || devices == NULL || bufs == NULL || n < 1 || n > ACCEL_COLLECTIVE_MAX_DEVICES ||
      (kind == BE_COLL_ALL_GATHER && recv == NULL))
    return ACCEL_EINVAL;
  for (uint32_t i = 0; i < n; i++)
    if (devices[i] < 0 || devices[i] >= ctx->tp->device_count(ctx))
      return ACCEL_EINVAL; /* a collective names its devices (ACCEL_DEVICE_ANY is -1) */
  dev_call *call = new_call(ctx, DEV_OP_COLLECTIVE);
  if (call == NULL)
    return ACCEL_ENOMEM;
  dev_op *op = &call->op;
  op->u.coll.kind = kind;
  op->u.coll.reduce = reduce;
  op->u.coll.root = root;
  op->u.coll.ndev = n;
  for (uint32_t i = 0; i < n; i++) {
    op->u.coll.devices[i] = devices[i];
    add_buf(op, bufs[i], 0, 0);
  }
  for (uint32_t i = 0; kind == BE_COLL_ALL_GATHER && i < n; i++)
    add_buf(op, recv[i], 0, 0);
  return client_submit(ctx, call, devices[0], f);
}

int accel_all_reduce(accel_ctx *ctx, const accel_device *devices, const accel_buffer *bufs,
                     uint32_t n, accel_reduce op, accel_future **f) {
  if ((unsigned)op > ACCEL_REDUCE_MAX)
    return ACCEL_EINVAL;
  return collective(ctx, BE_COLL_ALL_REDUCE, devices, bufs, NULL, n, (uint32_t)op, 0, f);
}

int accel_broadcast(accel_ctx *ctx, const accel_device *devices, const accel_buffer *bufs,
                    uint32_t n, uint32_t root, accel_future **f) {
  if (root >= n)
    return ACCEL_EINVAL;
  return collective(ctx, BE_COLL_BROADCAST, devices, bufs, NULL, n, 0, root, f);
}

int accel_all_gather(accel_ctx *ctx, const accel_device *devices, const accel_buffer *send,
                     const accel_buffer *recv, uint32_t n, accel_future **f) {
  return collective(ctx, BE_COLL_ALL_GATHER, devices, send, recv, n, 0, 0, f);
}
