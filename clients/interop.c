/* Sharing buffers' memory with other libraries of the process (accel.h: accel_buffer_export,
 * accel_buffer_import): ops of kinds EXPORT, EXPORT_END and IMPORT to the session, which pins
 * the buffer's copy on one device (actors/session.c). Embedded contexts only: through acceld
 * the memory is in the daemon's process, so the calls say so and send nothing. Each call waits
 * for its op: an export's answer is the pinned copy's address, an import's the new buffer. */
#include "clients/ctx.h"
#include "runtime/error_detail.h"

static int in_process(accel_ctx *ctx, const char *what) {
  if (ctx->tp == &client_embedded_transport)
    return 0;
  return rt_error_detail(ACCEL_ENOTSUP,
                         "%s: this context talks to acceld, whose buffers live in the daemon's "
                         "process; memory is shared only by an embedded context (accel_open "
                         "with NULL or \"embedded:\")",
                         what);
}

/* Sends the call and waits for its op; its status. */
static int run(accel_ctx *ctx, dev_call *call, accel_device dev) {
  accel_future *f;
  int rc = client_submit(ctx, call, dev, &f);
  if (rc != 0)
    return rc;
  rc = accel_future_wait(f, -1);
  accel_future_release(f);
  return rc;
}

static dev_call *one_buffer_call(accel_ctx *ctx, uint32_t kind, accel_buffer buf) {
  dev_call *call = dev_call_alloc(ctx->call_pool, kind);
  if (call != NULL) {
    call->op.nbufs = 1;
    call->op.bufs[0] = (dev_op_buf){.handle = buf};
  }
  return call;
}

/* The handle's count of exports moved by delta: ACCEL_ESTALE for no live buffer,
 * ACCEL_EINVAL for a release of a buffer not exported. */
static int count_export(accel_ctx *ctx, accel_buffer buf, int delta) {
  int rc = 0;
  pthread_mutex_lock(&ctx->mu);
  client_handle *e = client_handle_entry(ctx, buf, CLIENT_H_BUFFER);
  if (e == NULL)
    rc = ACCEL_ESTALE;
  else if (delta < 0 && e->exports == 0)
    rc = ACCEL_EINVAL;
  else
    e->exports += (uint32_t)delta;
  pthread_mutex_unlock(&ctx->mu);
  if (rc == ACCEL_EINVAL)
    rt_error_detail(rc, "accel_buffer_export_release: the buffer is not exported");
  return rc;
}

int accel_buffer_export(accel_ctx *ctx, accel_buffer buf, accel_device dev,
                        accel_export_info *out) {
  if (ctx == NULL || out == NULL)
    return ACCEL_EINVAL;
  int rc = in_process(ctx, "accel_buffer_export");
  if (rc == 0)
    rc = client_embedded_share_check(ctx, dev);
  if (rc != 0)
    return rc;
  dev_call *call = one_buffer_call(ctx, DEV_OP_EXPORT, buf);
  if (call == NULL)
    return ACCEL_ENOMEM;
  call->op.u.xport.out = out;
  rc = run(ctx, call, dev);
  if (rc == 0)
    count_export(ctx, buf, 1);
  return rc;
}

int accel_buffer_export_release(accel_ctx *ctx, accel_buffer buf) {
  if (ctx == NULL)
    return ACCEL_EINVAL;
  int rc = in_process(ctx, "accel_buffer_export_release");
  if (rc == 0)
    rc = count_export(ctx, buf, -1);
  if (rc != 0)
    return rc;
  dev_call *call = one_buffer_call(ctx, DEV_OP_EXPORT_END, buf);
  rc = call == NULL ? ACCEL_ENOMEM : run(ctx, call, ACCEL_DEVICE_ANY);
  if (rc != 0)
    count_export(ctx, buf, 1); /* still exported */
  return rc;
}

int accel_buffer_import(accel_ctx *ctx, accel_device dev, uint64_t address, size_t bytes,
                        accel_dtype dtype, void (*release)(void *arg), void *arg,
                        accel_buffer *out) {
  size_t size = dev_dtype_size(dtype);
  if (ctx == NULL || out == NULL)
    return ACCEL_EINVAL;
  int rc = in_process(ctx, "accel_buffer_import");
  if (rc == 0)
    rc = client_embedded_share_check(ctx, dev);
  if (rc != 0)
    return rc;
  if (size == 0 || bytes == 0 || bytes % size != 0)
    return rt_error_detail(ACCEL_EINVAL,
                           "accel_buffer_import: %zu bytes are not a whole number of elements "
                           "of dtype %d (at least one)",
                           bytes, (int)dtype);
  accel_buffer h;
  pthread_mutex_lock(&ctx->mu);
  rc = client_handle_alloc_locked(ctx, CLIENT_H_BUFFER, dtype, bytes / size, &h);
  pthread_mutex_unlock(&ctx->mu);
  if (rc != 0)
    return rc;
  dev_call *call = one_buffer_call(ctx, DEV_OP_IMPORT, h);
  if (call == NULL) {
    rc = ACCEL_ENOMEM;
  } else {
    call->op.bufs[0].count = bytes / size;
    call->op.u.import.address = address;
    call->op.u.import.bytes = bytes;
    call->op.u.import.dtype = (uint32_t)dtype;
    call->op.u.import.release = release;
    call->op.u.import.arg = arg;
    rc = run(ctx, call, dev);
  }
  if (rc != 0) {
    pthread_mutex_lock(&ctx->mu);
    client_handle_free_locked(ctx, (uint32_t)h);
    pthread_mutex_unlock(&ctx->mu);
    return rc;
  }
  *out = h;
  return 0;
}
