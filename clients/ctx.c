/* libaccel's context, whatever the transport: opening by URL, the handle table, buffers,
 * op submission, completion accounting and accel_finish. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clients/chunk.h"
#include "clients/ctx.h"
#include "ops/check.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"
#include "runtime/error_detail.h"
#include "runtime/loop.h"

static _Thread_local accel_completion thread_completion;
static _Thread_local accel_math thread_math;
static atomic_uint next_tag = 1; /* handle tags of the process's contexts */

/* ---- open and close ---- */

int client_ctx_init(accel_ctx *ctx, uint32_t max_buffers) {
  ctx->handles = rt_calloc(max_buffers, sizeof *ctx->handles);
  if (ctx->handles == NULL)
    return ACCEL_ENOMEM;
  if (rt_cond_init_monotonic(&ctx->done_cv) != 0) { /* accel_finish's deadline is monotonic */
    rt_free(ctx->handles);
    return ACCEL_ENOMEM;
  }
  ctx->max_buffers = max_buffers;
  for (uint32_t i = 1; i < max_buffers; i++) {
    ctx->handles[i].gen = 1;
    ctx->handles[i].next_free = i + 1 < max_buffers ? i + 1 : 0;
  }
  ctx->free_head = 1;
  unsigned tag = atomic_fetch_add(&next_tag, 1) & 0xffffu;
  ctx->tag = tag ? tag : atomic_fetch_add(&next_tag, 1) & 0xffffu;
  pthread_mutex_init(&ctx->mu, NULL);
  pthread_mutex_init(&ctx->done_mu, NULL);
  return 0;
}

void client_ctx_free(accel_ctx *ctx) {
  for (uint32_t i = 1; i < ctx->max_buffers; i++) {
    rt_free(ctx->handles[i].kernels); /* modules and kernels never unloaded */
    rt_free(ctx->handles[i].name);
  }
  pthread_mutex_destroy(&ctx->mu);
  pthread_mutex_destroy(&ctx->done_mu);
  pthread_cond_destroy(&ctx->done_cv);
  rt_free(ctx->handles);
  rt_free(ctx);
}

int accel_open(accel_ctx **out, const char *url) {
  rt_error_detail_clear(); /* what accel_last_error_detail says is this call's */
  if (out == NULL)
    return ACCEL_EINVAL;
  accel_ctx *ctx = rt_calloc(1, sizeof *ctx);
  if (ctx == NULL)
    return ACCEL_ENOMEM;
  int rc;
  if (url == NULL || strncmp(url, "embedded:", 9) == 0)
    rc = client_embedded_open(ctx, url ? url + 9 : "");
  else if (strncmp(url, "ipc://", 6) == 0 || strncmp(url, "unix://", 7) == 0 ||
           strncmp(url, "tcp://", 6) == 0 || strncmp(url, "tls+tcp://", 10) == 0)
    rc = client_remote_open(ctx, url);
  else
    rc = strstr(url, "://") ? ACCEL_ENOTSUP : ACCEL_EINVAL;
  if (rc != 0) {
    rt_free(ctx); /* the transport's open cleaned up what it made */
    return rc;
  }
  *out = ctx;
  return 0;
}

void accel_close(accel_ctx *ctx) {
  if (ctx == NULL)
    return;
  accel_finish(ctx, -1);
  ctx->tp->close(ctx);
  client_ctx_free(ctx);
}

/* ---- host memory for transfers ---- */

int client_host_alloc_plain(size_t bytes, void **out) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0)
    return ACCEL_ENOMEM;
  *out = p;
  return 0;
}

int accel_host_alloc(accel_ctx *ctx, size_t bytes, void **out) {
  if (ctx == NULL || out == NULL)
    return ACCEL_EINVAL;
  return ctx->tp->host_alloc ? ctx->tp->host_alloc(ctx, bytes, out)
                             : client_host_alloc_plain(bytes, out);
}

int accel_host_free(accel_ctx *ctx, void *p) {
  if (ctx == NULL)
    return ACCEL_EINVAL;
  if (p == NULL)
    return 0;
  if (ctx->tp->host_free)
    return ctx->tp->host_free(ctx, p);
  free(p); /* posix_memalign's: buffer data, outside the allocator hook */
  return 0;
}

const char *accel_version(void) {
  return ACCEL_VERSION_STRING;
}

/* The caller's own actors may expect the loop thread: client threads stop running turns. */
accel_runtime *accel_ctx_runtime(accel_ctx *ctx) {
  if (ctx == NULL)
    return NULL;
  rt_borrow_disable(ctx->rt);
  return ctx->rt;
}

/* ---- devices, faults, statistics: the transport's ---- */

int accel_device_count(accel_ctx *ctx) {
  return ctx ? ctx->tp->device_count(ctx) : ACCEL_EINVAL;
}

int accel_device_info(accel_ctx *ctx, accel_device dev, struct accel_device_info *out) {
  if (ctx == NULL || out == NULL || dev < 0 || dev >= ctx->tp->device_count(ctx))
    return ACCEL_EINVAL;
  return ctx->tp->device_info(ctx, dev, out);
}

int accel_inject_fault(accel_ctx *ctx, accel_device dev) {
  if (ctx == NULL || dev < 0 || dev >= ctx->tp->device_count(ctx))
    return ACCEL_EINVAL;
  return ctx->tp->inject_fault(ctx, dev);
}

int accel_transfer_stats_get(accel_ctx *ctx, accel_transfer_stats *out) {
  if (ctx == NULL || out == NULL)
    return ACCEL_EINVAL;
  return ctx->tp->transfer_stats(ctx, out);
}

/* ---- the handle table ---- */

/* A handle: bits 0-31 the slot, 32-47 the slot's generation, 48-63 the context's tag, so
 * that a handle of another context is stale here. */
static uint64_t make_handle(const accel_ctx *ctx, uint32_t slot, uint32_t gen) {
  return (uint64_t)ctx->tag << 48 | (uint64_t)(gen & 0xffffu) << 32 | slot;
}

client_handle *client_handle_entry(accel_ctx *ctx, uint64_t h, client_handle_kind kind) {
  uint32_t slot = (uint32_t)h, gen = (uint32_t)(h >> 32) & 0xffffu, tag = (uint32_t)(h >> 48);
  if (slot == 0 || slot >= ctx->max_buffers || tag != ctx->tag)
    return NULL;
  client_handle *e = &ctx->handles[slot];
  return e->live && (e->gen & 0xffffu) == gen && e->kind == kind ? e : NULL;
}

int client_handle_get(accel_ctx *ctx, accel_buffer h, accel_dtype *dtype, size_t *count) {
  int rc = ACCEL_ESTALE;
  pthread_mutex_lock(&ctx->mu);
  client_handle *e = client_handle_entry(ctx, h, CLIENT_H_BUFFER);
  if (e) {
    *dtype = e->dtype;
    *count = e->count;
    rc = 0; /* a failed create's handle too: its ops get the create's error as they finish */
  }
  pthread_mutex_unlock(&ctx->mu);
  return rc;
}

int client_op_settle(accel_ctx *ctx, const dev_op *op, int status) {
  if (status != ACCEL_ESTALE && !(op->h.kind == DEV_OP_BUFFER_CREATE && status < 0))
    return status;
  pthread_mutex_lock(&ctx->mu);
  for (uint32_t i = 0; i < op->nbufs; i++) {
    client_handle *e = client_handle_entry(ctx, op->bufs[i].handle, CLIENT_H_BUFFER);
    if (e && op->h.kind == DEV_OP_BUFFER_CREATE)
      e->failed = status;
    else if (e && e->failed != 0)
      status = e->failed;
  }
  pthread_mutex_unlock(&ctx->mu);
  return status;
}

/* A handle whose create failed: freed here alone (the daemon or session holds nothing for
 * it that a later create on the slot would not replace). */
static bool free_if_failed(accel_ctx *ctx, accel_buffer buf) {
  pthread_mutex_lock(&ctx->mu);
  client_handle *e = client_handle_entry(ctx, buf, CLIENT_H_BUFFER);
  bool failed = e && e->failed != 0;
  if (failed)
    client_handle_free_locked(ctx, (uint32_t)buf);
  pthread_mutex_unlock(&ctx->mu);
  return failed;
}

int client_handle_alloc_locked(accel_ctx *ctx, client_handle_kind kind, accel_dtype dtype,
                               size_t count, uint64_t *out) {
  uint32_t slot = ctx->free_head;
  if (slot == 0)
    return ACCEL_ELIMIT;
  client_handle *e = &ctx->handles[slot];
  ctx->free_head = e->next_free;
  e->live = true;
  e->kind = (uint8_t)kind;
  e->dtype = dtype;
  e->count = count;
  *out = make_handle(ctx, slot, e->gen);
  return 0;
}

static int handle_alloc(accel_ctx *ctx, accel_dtype dtype, size_t count, accel_buffer *out) {
  pthread_mutex_lock(&ctx->mu);
  int rc = client_handle_alloc_locked(ctx, CLIENT_H_BUFFER, dtype, count, out);
  pthread_mutex_unlock(&ctx->mu);
  return rc;
}

/* A slot whose 16-bit generation would wrap is never used again, so that a destroyed handle
 * can never name a live buffer later (the table shrinks by one slot per 65535 reuses). */
void client_handle_free_locked(accel_ctx *ctx, uint32_t slot) {
  client_handle *e = &ctx->handles[slot];
  e->live = false;
  e->gen++;
  rt_free(e->kernels);
  rt_free(e->name);
  e->kernels = NULL;
  e->nkernels = 0;
  e->name = NULL;
  e->module = 0;
  e->failed = 0;
  e->exports = 0;
  if ((e->gen & 0xffffu) != 0) {
    e->next_free = ctx->free_head;
    ctx->free_head = slot;
  }
}

static void handle_free(accel_ctx *ctx, uint32_t slot) {
  pthread_mutex_lock(&ctx->mu);
  client_handle_free_locked(ctx, slot);
  pthread_mutex_unlock(&ctx->mu);
}

/* ---- in-flight accounting ---- */

static void in_flight_add(accel_ctx *ctx) {
  pthread_mutex_lock(&ctx->done_mu);
  ctx->in_flight++;
  pthread_mutex_unlock(&ctx->done_mu);
}

static void in_flight_remove(accel_ctx *ctx, int status) {
  pthread_mutex_lock(&ctx->done_mu);
  if (status < 0 && ctx->first_error == 0)
    ctx->first_error = status;
  if (--ctx->in_flight == 0)
    pthread_cond_broadcast(&ctx->done_cv);
  pthread_mutex_unlock(&ctx->done_mu);
}

void client_op_done(accel_ctx *ctx, int status) {
  in_flight_remove(ctx, status);
}

void client_work_begin(accel_ctx *ctx) {
  in_flight_add(ctx);
}

/* ---- sending ops ---- */

/* Sends an op as it is (checked or not), counting it in flight: through chunk_send, which
 * splits a WRITE or READ too large for one op of the transport and keeps later ops behind
 * its chunks (clients/chunk.c); the caller gets one future and one in-flight count either way. */
static int send_op(accel_ctx *ctx, dev_call *call, accel_future **f) {
  call->op.h.completion = thread_completion;
  accel_future *fut = NULL;
  if (f) {
    int rc = accel_future_create(ctx->rt, &fut);
    if (rc != 0) {
      dev_call_free(call);
      return rc;
    }
    accel_future_retain(fut); /* one for the caller, one for the op */
  }
  call->future = fut;
  in_flight_add(ctx);
  int rc = chunk_send(ctx, call);
  if (rc != 0) {
    pthread_mutex_lock(&ctx->done_mu);
    if (--ctx->in_flight == 0)
      pthread_cond_broadcast(&ctx->done_cv);
    pthread_mutex_unlock(&ctx->done_mu);
    if (fut) {
      accel_future_release(fut);
      accel_future_release(fut);
    }
    dev_call_free(call);
    return rc;
  }
  if (f)
    *f = fut;
  return 0;
}

int client_send(accel_ctx *ctx, dev_call *call, accel_future **f) {
  return send_op(ctx, call, f);
}

static int buffer_op(accel_ctx *ctx, uint32_t kind, accel_buffer h, accel_dtype dtype,
                     size_t count) {
  dev_call *call = dev_call_alloc(ctx->call_pool, kind);
  if (call == NULL)
    return ACCEL_ENOMEM;
  dev_op *op = &call->op;
  op->h.device = ACCEL_DEVICE_ANY; /* buffers live on no device until an op puts them there */
  op->nbufs = 1;
  op->bufs[0] = (dev_op_buf){.handle = h, .count = count};
  op->u.create.dtype = dtype;
  return send_op(ctx, call, NULL);
}

int accel_buffer_create(accel_ctx *ctx, accel_dtype dtype, size_t count, accel_buffer *out) {
  if (ctx == NULL || out == NULL || dev_dtype_size(dtype) == 0 || count == 0 ||
      count > (SIZE_MAX >> 4))
    return ACCEL_EINVAL;
  accel_buffer h;
  int rc = handle_alloc(ctx, dtype, count, &h);
  if (rc != 0)
    return rc;
  rc = buffer_op(ctx, DEV_OP_BUFFER_CREATE, h, dtype, count);
  if (rc != 0) {
    handle_free(ctx, (uint32_t)h);
    return rc;
  }
  *out = h;
  return 0;
}

int accel_buffer_destroy(accel_ctx *ctx, accel_buffer buf) {
  if (ctx == NULL)
    return ACCEL_EINVAL;
  if (free_if_failed(ctx, buf))
    return 0;
  accel_dtype dtype;
  size_t count;
  int rc = client_handle_get(ctx, buf, &dtype, &count);
  if (rc == 0)
    rc = buffer_op(ctx, DEV_OP_BUFFER_DESTROY, buf, dtype, count);
  if (rc == 0)
    handle_free(ctx, (uint32_t)buf);
  return rc;
}

static int check_op(accel_ctx *ctx, dev_op *op, accel_device dev) {
  if (dev != ACCEL_DEVICE_ANY && (dev < 0 || dev >= ctx->tp->device_count(ctx)))
    return ACCEL_EINVAL;
  dev_buf_info info[DEV_OP_MAX_BUFS];
  for (uint32_t i = 0; i < op->nbufs; i++) {
    size_t count;
    int rc = client_handle_get(ctx, op->bufs[i].handle, &info[i].dtype, &count);
    if (rc != 0)
      return rc;
    info[i].count = count;
  }
  return dev_op_check(op, info);
}

int client_submit(accel_ctx *ctx, dev_call *call, accel_device dev, accel_future **f) {
  rt_error_detail_clear(); /* the checker says why it refuses the op, this call's own */
  call->op.h.device = dev;
  int rc = check_op(ctx, &call->op, dev);
  if (rc != 0) {
    dev_call_free(call);
    return rc;
  }
  return send_op(ctx, call, f);
}

int accel_set_math(accel_ctx *ctx, accel_math math) {
  if (ctx == NULL || math < ACCEL_MATH_DEFAULT || math > ACCEL_MATH_TF32)
    return ACCEL_EINVAL;
  thread_math = math;
  return 0;
}

accel_math client_thread_math(void) {
  return thread_math;
}

int accel_set_completion(accel_ctx *ctx, accel_completion how) {
  if (ctx == NULL || how < ACCEL_COMPLETION_DEFAULT || how > ACCEL_COMPLETION_POLL)
    return ACCEL_EINVAL;
  thread_completion = how;
  return 0;
}

/* ---- finishing ---- */

int accel_finish(accel_ctx *ctx, int64_t timeout_ms) {
  if (ctx == NULL)
    return ACCEL_EINVAL;
  if (accel_runtime_on_loop(ctx->rt))
    return ACCEL_EDEADLK;
  struct timespec deadline = rt_deadline_after(timeout_ms < 0 ? 0 : timeout_ms);
  int rc = 0;
  pthread_mutex_lock(&ctx->done_mu);
  while (ctx->in_flight > 0 && rc == 0) {
    if (timeout_ms < 0)
      pthread_cond_wait(&ctx->done_cv, &ctx->done_mu);
    else if (pthread_cond_timedwait(&ctx->done_cv, &ctx->done_mu, &deadline) != 0)
      rc = ACCEL_ETIMEDOUT;
  }
  if (rc == 0) {
    rc = ctx->first_error;
    ctx->first_error = 0;
  }
  pthread_mutex_unlock(&ctx->done_mu);
  return rc;
}
