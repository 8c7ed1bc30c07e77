/* The op entry points of the C API: each builds an envelope and hands it to client_submit(),
 * which checks it against the handle table (the same checker the session runs again) and
 * sends it. An argument error returns at once and makes no future. */
#include <stdlib.h>

#include "actors/world.h"
#include "clients/ctx.h"

static dev_op *new_op(uint32_t kind) {
  dev_op *op = calloc(1, sizeof *op);
  if (op)
    op->h.kind = kind;
  return op;
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
  dev_op *op = new_op(DEV_OP_WRITE);
  if (op == NULL)
    return ACCEL_ENOMEM;
  add_buf(op, dst, offset, count);
  op->u.write.src = src;
  op->u.write.bytes = count * dev_dtype_size(dtype);
  return client_submit(ctx, op, ACCEL_DEVICE_ANY, f);
}

int accel_read(accel_ctx *ctx, accel_buffer src, size_t offset, void *dst, size_t count,
               accel_future **f) {
  if (ctx == NULL || (dst == NULL && count > 0))
    return ACCEL_EINVAL;
  dev_op *op = new_op(DEV_OP_READ);
  if (op == NULL)
    return ACCEL_ENOMEM;
  add_buf(op, src, offset, count);
  op->u.read.dst = dst;
  return client_submit(ctx, op, ACCEL_DEVICE_ANY, f);
}

int accel_copy(accel_ctx *ctx, accel_device dev, accel_buffer dst, size_t dst_off,
               accel_buffer src, size_t src_off, size_t count, accel_future **f) {
  dev_op *op = ctx ? new_op(DEV_OP_COPY) : NULL;
  if (op == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  add_buf(op, dst, dst_off, count);
  add_buf(op, src, src_off, count);
  return client_submit(ctx, op, dev, f);
}

static int fill(accel_ctx *ctx, accel_device dev, accel_buffer dst, uint32_t bits,
                accel_future **f) {
  dev_op *op = ctx ? new_op(DEV_OP_FILL) : NULL;
  if (op == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  add_buf(op, dst, 0, 0);
  op->u.fill.value = bits;
  return client_submit(ctx, op, dev, f);
}

int accel_fill_u32(accel_ctx *ctx, accel_device dev, accel_buffer dst, uint32_t value,
                   accel_future **f) {
  return fill(ctx, dev, dst, value, f);
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
  union {
    float f;
    uint32_t u;
  } bits = {.f = value};
  return fill(ctx, dev, dst, bits.u, f);
}

/* ---- BLAS ---- */

int accel_sgemm(accel_ctx *ctx, accel_device dev, accel_trans ta, accel_trans tb, size_t m,
                size_t n, size_t k, float alpha, accel_buffer a, size_t lda, accel_buffer b,
                size_t ldb, float beta, accel_buffer c, size_t ldc, accel_future **f) {
  if (ctx == NULL || m > INT64_MAX || n > INT64_MAX || k > INT64_MAX || lda > INT64_MAX ||
      ldb > INT64_MAX || ldc > INT64_MAX)
    return ACCEL_EINVAL;
  dev_op *op = new_op(DEV_OP_SGEMM);
  if (op == NULL)
    return ACCEL_ENOMEM;
  op->u.sgemm = (be_sgemm_args){(be_blas_trans)ta, (be_blas_trans)tb, (int64_t)m, (int64_t)n,
                                (int64_t)k, alpha, beta, (int64_t)lda, (int64_t)ldb,
                                (int64_t)ldc, BE_SGEMM_MATH_DEVICE};
  add_buf(op, a, 0, 0);
  add_buf(op, b, 0, 0);
  add_buf(op, c, 0, 0);
  return client_submit(ctx, op, dev, f);
}

int accel_saxpy(accel_ctx *ctx, accel_device dev, size_t n, float alpha, accel_buffer x,
                accel_buffer y, accel_future **f) {
  dev_op *op = ctx ? new_op(DEV_OP_SAXPY) : NULL;
  if (op == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  op->u.saxpy.n = n;
  op->u.saxpy.alpha = alpha;
  add_buf(op, x, 0, 0);
  add_buf(op, y, 0, 0);
  return client_submit(ctx, op, dev, f);
}

int accel_sdot(accel_ctx *ctx, accel_device dev, size_t n, accel_buffer x, accel_buffer y,
               accel_buffer result, accel_future **f) {
  dev_op *op = ctx ? new_op(DEV_OP_SDOT) : NULL;
  if (op == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  op->u.sdot.n = n;
  add_buf(op, x, 0, 0);
  add_buf(op, y, 0, 0);
  add_buf(op, result, 0, 0);
  return client_submit(ctx, op, dev, f);
}

/* ---- RNG ---- */

int accel_rng_fill(accel_ctx *ctx, accel_device dev, accel_buffer dst, const accel_rng *spec,
                   accel_future **f) {
  if (ctx == NULL || spec == NULL || (unsigned)spec->dist > ACCEL_DIST_NORMAL)
    return ACCEL_EINVAL;
  dev_op *op = new_op(DEV_OP_RNG);
  if (op == NULL)
    return ACCEL_ENOMEM;
  op->u.rng = (be_rng_args){(be_rng_dist)spec->dist, spec->seed, spec->offset, spec->mean,
                            spec->stddev};
  add_buf(op, dst, 0, 0);
  return client_submit(ctx, op, dev, f);
}

/* ---- NN element-wise ---- */

static int elementwise(accel_ctx *ctx, accel_device dev, uint32_t kind, be_unary_op uop,
                       accel_buffer dst, accel_buffer src, size_t rows, size_t cols,
                       accel_future **f) {
  dev_op *op = ctx ? new_op(kind) : NULL;
  if (op == NULL)
    return ctx ? ACCEL_ENOMEM : ACCEL_EINVAL;
  if (kind == DEV_OP_SOFTMAX) {
    op->u.softmax.rows = rows;
    op->u.softmax.cols = cols;
  } else {
    op->u.unary.op = uop;
  }
  add_buf(op, dst, 0, 0);
  add_buf(op, src, 0, 0);
  return client_submit(ctx, op, dev, f);
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

int accel_softmax(accel_ctx *ctx, accel_device dev, accel_buffer dst, accel_buffer src,
                  size_t rows, size_t cols, accel_future **f) {
  return elementwise(ctx, dev, DEV_OP_SOFTMAX, BE_SIGMOID, dst, src, rows, cols, f);
}
