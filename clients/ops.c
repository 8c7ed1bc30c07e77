/* The op entry points of the C API: check every argument against the handle table, build the
 * envelope, submit. An argument error returns at once and makes no future. */
#include <stdlib.h>

#include "clients/ctx.h"

typedef struct arg_buf {
  accel_dtype dtype;
  size_t count;
} arg_buf;

static int check_device(accel_ctx *ctx, accel_device dev) {
  return dev == ACCEL_DEVICE_ANY || (dev >= 0 && dev < accel_device_count(ctx)) ? 0
                                                                                  : ACCEL_EINVAL;
}

/* Resolves a handle and checks its dtype (0: any). */
static int get_buf(accel_ctx *ctx, accel_buffer h, accel_dtype want, arg_buf *out) {
  int rc = client_handle_get(ctx, h, &out->dtype, &out->count);
  if (rc != 0)
    return rc;
  return want && out->dtype != want ? ACCEL_EINVAL : 0;
}

static dev_op *new_op(uint32_t kind) {
  dev_op *op = calloc(1, sizeof *op);
  if (op)
    op->h.kind = kind;
  return op;
}

static void set_buf(dev_op *op, accel_buffer h, uint32_t access, size_t offset, size_t count) {
  op->bufs[op->nbufs++] = (dev_op_buf){h, access, offset, count};
}

static bool range_ok(size_t offset, size_t count, size_t len) {
  return offset <= len && count <= len - offset;
}

int accel_write(accel_ctx *ctx, accel_buffer dst, size_t offset, const void *src, size_t count,
                accel_future **f) {
  arg_buf b;
  int rc = ctx ? get_buf(ctx, dst, 0, &b) : ACCEL_EINVAL;
  if (rc != 0)
    return rc;
  if (!range_ok(offset, count, b.count) || (src == NULL && count > 0))
    return ACCEL_EINVAL;
  dev_op *op = new_op(DEV_OP_WRITE);
  if (op == NULL)
    return ACCEL_ENOMEM;
  set_buf(op, dst, DEV_WRITE_ALL, offset, count);
  op->u.write.src = src;
  return client_submit(ctx, op, ACCEL_DEVICE_ANY, f);
}

int accel_read(accel_ctx *ctx, accel_buffer src, size_t offset, void *dst, size_t count,
               accel_future **f) {
  arg_buf b;
  int rc = ctx ? get_buf(ctx, src, 0, &b) : ACCEL_EINVAL;
  if (rc != 0)
    return rc;
  if (!range_ok(offset, count, b.count) || (dst == NULL && count > 0))
    return ACCEL_EINVAL;
  dev_op *op = new_op(DEV_OP_READ);
  if (op == NULL)
    return ACCEL_ENOMEM;
  set_buf(op, src, DEV_READ, offset, count);
  op->u.read.dst = dst;
  return client_submit(ctx, op, ACCEL_DEVICE_ANY, f);
}

int accel_copy(accel_ctx *ctx, accel_device dev, accel_buffer dst, size_t dst_off,
               accel_buffer src, size_t src_off, size_t count, accel_future **f) {
  arg_buf d, s;
  int rc = ctx ? check_device(ctx, dev) : ACCEL_EINVAL;
  if (rc == 0)
    rc = get_buf(ctx, dst, 0, &d);
  if (rc == 0)
    rc = get_buf(ctx, src, d.dtype, &s);
  if (rc != 0)
    return rc;
  if (!range_ok(dst_off, count, d.count) || !range_ok(src_off, count, s.count))
    return ACCEL_EINVAL;
  if (dst == src && count > 0 && dst_off < src_off + count && src_off < dst_off + count)
    return ACCEL_EINVAL; /* overlapping ranges of one buffer */
  dev_op *op = new_op(DEV_OP_COPY);
  if (op == NULL)
    return ACCEL_ENOMEM;
  set_buf(op, dst, DEV_WRITE_ALL, dst_off, count);
  set_buf(op, src, DEV_READ, src_off, count);
  return client_submit(ctx, op, dev, f);
}

static int fill(accel_ctx *ctx, accel_device dev, accel_buffer dst, accel_dtype want,
                uint32_t bits, accel_future **f) {
  arg_buf b;
  int rc = ctx ? check_device(ctx, dev) : ACCEL_EINVAL;
  if (rc == 0)
    rc = get_buf(ctx, dst, want, &b);
  if (rc != 0)
    return rc;
  dev_op *op = new_op(DEV_OP_FILL);
  if (op == NULL)
    return ACCEL_ENOMEM;
  set_buf(op, dst, DEV_WRITE_ALL, 0, b.count);
  op->u.fill.value = bits;
  return client_submit(ctx, op, dev, f);
}

int accel_fill_u32(accel_ctx *ctx, accel_device dev, accel_buffer dst, uint32_t value,
                   accel_future **f) {
  return fill(ctx, dev, dst, 0, value, f);
}

int accel_fill_f32(accel_ctx *ctx, accel_device dev, accel_buffer dst, float value,
                   accel_future **f) {
  union {
    float f;
    uint32_t u;
  } bits = {.f = value};
  return fill(ctx, dev, dst, ACCEL_F32, bits.u, f);
}

/* ---- BLAS ---- */

static bool fits_i64(size_t v) {
  return v <= (size_t)INT64_MAX;
}

int accel_sgemm(accel_ctx *ctx, accel_device dev, accel_trans ta, accel_trans tb, size_t m,
                size_t n, size_t k, float alpha, accel_buffer a, size_t lda, accel_buffer b,
                size_t ldb, float beta, accel_buffer c, size_t ldc, accel_future **f) {
  arg_buf A, B, C;
  int rc = ctx ? check_device(ctx, dev) : ACCEL_EINVAL;
  if (rc == 0)
    rc = get_buf(ctx, a, ACCEL_F32, &A);
  if (rc == 0)
    rc = get_buf(ctx, b, ACCEL_F32, &B);
  if (rc == 0)
    rc = get_buf(ctx, c, ACCEL_F32, &C);
  if (rc != 0)
    return rc;
  if ((ta != ACCEL_NO_TRANS && ta != ACCEL_TRANS) || (tb != ACCEL_NO_TRANS && tb != ACCEL_TRANS) ||
      !fits_i64(m) || !fits_i64(n) || !fits_i64(k) || !fits_i64(lda) || !fits_i64(ldb) ||
      !fits_i64(ldc) || c == a || c == b)
    return ACCEL_EINVAL;
  be_sgemm_args g = {(be_blas_trans)ta, (be_blas_trans)tb, (int64_t)m, (int64_t)n, (int64_t)k,
                     alpha, beta, (int64_t)lda, (int64_t)ldb, (int64_t)ldc};
  rc = be_blas_check_sgemm(&g, A.count, B.count, C.count);
  if (rc != 0)
    return rc;
  dev_op *op = new_op(DEV_OP_SGEMM);
  if (op == NULL)
    return ACCEL_ENOMEM;
  op->u.sgemm = g;
  set_buf(op, a, DEV_READ, 0, A.count);
  set_buf(op, b, DEV_READ, 0, B.count);
  /* beta = 0 over all of C (ldc = m) overwrites it: no need to bring its old contents. */
  bool whole = beta == 0.0f && ldc == m && m * n == C.count;
  set_buf(op, c, whole ? DEV_WRITE_ALL : DEV_RW, 0, C.count);
  return client_submit(ctx, op, dev, f);
}

int accel_saxpy(accel_ctx *ctx, accel_device dev, size_t n, float alpha, accel_buffer x,
                accel_buffer y, accel_future **f) {
  arg_buf X, Y;
  int rc = ctx ? check_device(ctx, dev) : ACCEL_EINVAL;
  if (rc == 0)
    rc = get_buf(ctx, x, ACCEL_F32, &X);
  if (rc == 0)
    rc = get_buf(ctx, y, ACCEL_F32, &Y);
  if (rc != 0)
    return rc;
  if (n > X.count || n > Y.count)
    return ACCEL_EINVAL;
  dev_op *op = new_op(DEV_OP_SAXPY);
  if (op == NULL)
    return ACCEL_ENOMEM;
  op->u.saxpy.n = n;
  op->u.saxpy.alpha = alpha;
  set_buf(op, x, DEV_READ, 0, n);
  set_buf(op, y, DEV_RW, 0, n);
  return client_submit(ctx, op, dev, f);
}

int accel_sdot(accel_ctx *ctx, accel_device dev, size_t n, accel_buffer x, accel_buffer y,
               accel_buffer result, accel_future **f) {
  arg_buf X, Y, R;
  int rc = ctx ? check_device(ctx, dev) : ACCEL_EINVAL;
  if (rc == 0)
    rc = get_buf(ctx, x, ACCEL_F32, &X);
  if (rc == 0)
    rc = get_buf(ctx, y, ACCEL_F32, &Y);
  if (rc == 0)
    rc = get_buf(ctx, result, ACCEL_F32, &R);
  if (rc != 0)
    return rc;
  if (n > X.count || n > Y.count || R.count < 1 || result == x || result == y)
    return ACCEL_EINVAL;
  dev_op *op = new_op(DEV_OP_SDOT);
  if (op == NULL)
    return ACCEL_ENOMEM;
  op->u.sdot.n = n;
  set_buf(op, x, DEV_READ, 0, n);
  set_buf(op, y, DEV_READ, 0, n);
  set_buf(op, result, R.count == 1 ? DEV_WRITE_ALL : DEV_RW, 0, 1);
  return client_submit(ctx, op, dev, f);
}

/* ---- RNG ---- */

int accel_rng_fill(accel_ctx *ctx, accel_device dev, accel_buffer dst, const accel_rng *spec,
                   accel_future **f) {
  arg_buf b;
  int rc = ctx && spec ? check_device(ctx, dev) : ACCEL_EINVAL;
  if (rc != 0)
    return rc;
  if (spec->dist != ACCEL_DIST_BITS && spec->dist != ACCEL_DIST_UNIFORM &&
      spec->dist != ACCEL_DIST_NORMAL)
    return ACCEL_EINVAL;
  rc = get_buf(ctx, dst, spec->dist == ACCEL_DIST_BITS ? ACCEL_U32 : ACCEL_F32, &b);
  if (rc != 0)
    return rc;
  if (spec->dist == ACCEL_DIST_NORMAL && (spec->offset % 2 != 0 || !(spec->stddev >= 0.0f)))
    return ACCEL_EINVAL;
  dev_op *op = new_op(DEV_OP_RNG);
  if (op == NULL)
    return ACCEL_ENOMEM;
  op->u.rng = (be_rng_args){(be_rng_dist)spec->dist, spec->seed, spec->offset, spec->mean,
                            spec->stddev};
  set_buf(op, dst, DEV_WRITE_ALL, 0, b.count);
  return client_submit(ctx, op, dev, f);
}

/* ---- NN element-wise ---- */

static int elementwise(accel_ctx *ctx, accel_device dev, uint32_t kind, be_unary_op uop,
                       accel_buffer dst, accel_buffer src, size_t rows, size_t cols,
                       accel_future **f) {
  arg_buf D, S;
  int rc = ctx ? check_device(ctx, dev) : ACCEL_EINVAL;
  if (rc == 0)
    rc = get_buf(ctx, dst, ACCEL_F32, &D);
  if (rc == 0)
    rc = get_buf(ctx, src, ACCEL_F32, &S);
  if (rc != 0)
    return rc;
  if (kind == DEV_OP_UNARY && D.count != S.count)
    return ACCEL_EINVAL;
  if (kind == DEV_OP_SOFTMAX && cols != 0 && rows > SIZE_MAX / cols)
    return ACCEL_EINVAL;
  if (kind == DEV_OP_SOFTMAX && (rows * cols > D.count || rows * cols > S.count))
    return ACCEL_EINVAL;
  dev_op *op = new_op(kind);
  if (op == NULL)
    return ACCEL_ENOMEM;
  op->u.unary.op = uop;
  if (kind == DEV_OP_SOFTMAX) {
    op->u.softmax.rows = rows;
    op->u.softmax.cols = cols;
  }
  bool whole = kind == DEV_OP_UNARY || rows * cols == D.count;
  set_buf(op, dst, whole && dst != src ? DEV_WRITE_ALL : DEV_RW, 0, D.count);
  set_buf(op, src, DEV_READ, 0, S.count);
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
