/* libaccel in embedded mode: the context, its handle table, op submission and completion. */
#include <stdlib.h>
#include <string.h>

#include "actors/check.h"
#include "actors/device.h"
#include "actors/session.h"
#include "actors/world_init.h"
#include "clients/ctx.h"

static _Thread_local accel_completion thread_completion;
static atomic_uint next_tag = 1; /* handle tags of the process's contexts */

/* ---- URL: "embedded:" with optional ?key=value&... ---- */

static int parse_param(const char *key, const char *value, dev_world_opts *o,
                       uint32_t *max_buffers) {
  char *end;
  unsigned long v = strtoul(value, &end, 10);
  bool numeric = *value && *end == '\0';
  if (strcmp(key, "fault_injection") == 0 && numeric)
    o->fault_injection = v != 0;
  else if (strcmp(key, "cpu_devices") == 0 && numeric && v <= 8)
    o->cpu_devices = (uint32_t)v;
  else if (strcmp(key, "max_buffers") == 0 && numeric && v >= 2 && v <= (1u << 24))
    *max_buffers = (uint32_t)v;
  else if (strcmp(key, "max_restarts") == 0 && numeric && v >= 1 && v <= 1000)
    o->max_restarts = (uint32_t)v;
  else if (strcmp(key, "completion") == 0 && strcmp(value, "callback") == 0)
    o->completion = ACCEL_COMPLETION_CALLBACK;
  else if (strcmp(key, "completion") == 0 && strcmp(value, "sync") == 0)
    o->completion = ACCEL_COMPLETION_SYNC;
  else if (strcmp(key, "completion") == 0 && strcmp(value, "poll") == 0)
    o->completion = ACCEL_COMPLETION_POLL;
  else
    return ACCEL_EINVAL;
  return 0;
}

static int parse_url(const char *url, dev_world_opts *o, uint32_t *max_buffers) {
  *o = (dev_world_opts){.cpu_devices = 1, .completion = ACCEL_COMPLETION_CALLBACK};
  *max_buffers = 65536;
  if (url == NULL)
    return 0;
  if (strncmp(url, "embedded:", 9) != 0)
    return strstr(url, "://") ? ACCEL_ENOTSUP : ACCEL_EINVAL; /* remote: not yet */
  const char *q = url + 9;
  if (*q == '\0')
    return 0;
  if (*q != '?')
    return ACCEL_EINVAL;
  char buf[256];
  if (strlen(q + 1) >= sizeof buf)
    return ACCEL_EINVAL;
  strcpy(buf, q + 1);
  char *save = NULL;
  for (char *kv = strtok_r(buf, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
    char *eq = strchr(kv, '=');
    if (eq == NULL)
      return ACCEL_EINVAL;
    *eq = '\0';
    int rc = parse_param(kv, eq + 1, o, max_buffers);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* ---- in-flight accounting (accel_finish) ---- */

static void op_done(void *arg, int status) {
  accel_ctx *ctx = arg;
  pthread_mutex_lock(&ctx->done_mu);
  if (status < 0 && ctx->first_error == 0)
    ctx->first_error = status;
  if (--ctx->in_flight == 0)
    pthread_cond_broadcast(&ctx->done_cv);
  pthread_mutex_unlock(&ctx->done_mu);
}

static void op_undo(accel_ctx *ctx) {
  pthread_mutex_lock(&ctx->done_mu);
  if (--ctx->in_flight == 0)
    pthread_cond_broadcast(&ctx->done_cv);
  pthread_mutex_unlock(&ctx->done_mu);
}

/* ---- open and close ---- */

static int handles_init(accel_ctx *ctx, uint32_t max_buffers) {
  ctx->handles = calloc(max_buffers, sizeof *ctx->handles);
  if (ctx->handles == NULL)
    return ACCEL_ENOMEM;
  ctx->max_buffers = max_buffers;
  for (uint32_t i = 1; i < max_buffers; i++) {
    ctx->handles[i].gen = 1;
    ctx->handles[i].next_free = i + 1 < max_buffers ? i + 1 : 0;
  }
  ctx->free_head = 1;
  return 0;
}

static void ctx_free(accel_ctx *ctx) {
  pthread_mutex_destroy(&ctx->mu);
  pthread_mutex_destroy(&ctx->done_mu);
  pthread_cond_destroy(&ctx->done_cv);
  free(ctx->handles);
  free(ctx);
}

static int start_tree(accel_ctx *ctx, dev_session_args *sargs) {
  int rc = dev_world_spawn(&ctx->world, NULL, &ctx->devices);
  if (rc != 0)
    return rc;
  *sargs = (dev_session_args){.world = &ctx->world, .max_buffers = ctx->max_buffers};
  accel_spawn_opts o = {.name = "session", .mailbox_capacity = 1 << 14};
  return accel_spawn(ctx->rt, NULL, &dev_session_behavior, sargs, &o, &ctx->session);
}

int accel_open(accel_ctx **out, const char *url) {
  if (out == NULL)
    return ACCEL_EINVAL;
  dev_world_opts wo;
  uint32_t max_buffers;
  int rc = parse_url(url, &wo, &max_buffers);
  if (rc != 0)
    return rc;
  accel_ctx *ctx = calloc(1, sizeof *ctx + sizeof(dev_session_args));
  if (ctx == NULL)
    return ACCEL_ENOMEM;
  pthread_mutex_init(&ctx->mu, NULL);
  pthread_mutex_init(&ctx->done_mu, NULL);
  pthread_cond_init(&ctx->done_cv, NULL);
  unsigned tag = atomic_fetch_add(&next_tag, 1) & 0xffffu;
  ctx->tag = tag ? tag : atomic_fetch_add(&next_tag, 1) & 0xffffu;
  rc = handles_init(ctx, max_buffers);
  if (rc == 0)
    rc = accel_runtime_create(&ctx->rt, NULL);
  if (rc != 0) {
    ctx_free(ctx);
    return rc;
  }
  rc = dev_world_init(&ctx->world, ctx->rt, &wo);
  ctx->world.on_op_done = op_done;
  ctx->world.on_op_done_arg = ctx;
  if (rc == 0)
    rc = start_tree(ctx, (dev_session_args *)(ctx + 1));
  if (rc == 0)
    rc = accel_runtime_start(ctx->rt);
  if (rc != 0) {
    accel_runtime_destroy(ctx->rt);
    ctx_free(ctx);
    return rc;
  }
  *out = ctx;
  return 0;
}

void accel_close(accel_ctx *ctx) {
  if (ctx == NULL)
    return;
  accel_finish(ctx, -1);
  accel_runtime_stop(ctx->rt);
  accel_runtime_join(ctx->rt);
  accel_runtime_destroy(ctx->rt);
  ctx_free(ctx);
}

accel_runtime *accel_ctx_runtime(accel_ctx *ctx) {
  return ctx ? ctx->rt : NULL;
}

/* ---- devices ---- */

int accel_device_count(accel_ctx *ctx) {
  return ctx ? ctx->world.nnodes - 1 : ACCEL_EINVAL;
}

int accel_device_info(accel_ctx *ctx, accel_device dev, struct accel_device_info *out) {
  if (ctx == NULL || out == NULL || dev < 0 || dev >= ctx->world.nnodes - 1)
    return ACCEL_EINVAL;
  const dev_node *node = &ctx->world.nodes[dev + 1];
  memset(out, 0, sizeof *out);
  /* name and sizes are set when the device first opened (before accel_open returned). */
  memcpy(out->name, node->info.name, sizeof out->name - 1);
  strncpy(out->backend, node->be->name, sizeof out->backend - 1);
  out->mem_bytes = node->info.mem_bytes;
  out->compute_units = node->info.compute_units;
  out->state = (int)__atomic_load_n(&node->state, __ATOMIC_RELAXED);
  out->restarts = __atomic_load_n(&node->restarts, __ATOMIC_RELAXED);
  return 0;
}

/* ---- the handle table ---- */

/* A handle: bits 0-31 the slot, 32-47 the slot's generation, 48-63 the context's tag (taken
 * from a process-wide counter), so that a handle of another context is stale here. */
static uint64_t make_handle(const accel_ctx *ctx, uint32_t slot, uint32_t gen) {
  return (uint64_t)ctx->tag << 48 | (uint64_t)(gen & 0xffffu) << 32 | slot;
}

int client_handle_get(accel_ctx *ctx, accel_buffer h, accel_dtype *dtype, size_t *count) {
  uint32_t slot = (uint32_t)h, gen = (uint32_t)(h >> 32) & 0xffffu, tag = (uint32_t)(h >> 48);
  int rc = ACCEL_ESTALE;
  pthread_mutex_lock(&ctx->mu);
  if (slot != 0 && slot < ctx->max_buffers && ctx->handles[slot].live &&
      (ctx->handles[slot].gen & 0xffffu) == gen && tag == ctx->tag) {
    *dtype = ctx->handles[slot].dtype;
    *count = ctx->handles[slot].count;
    rc = 0;
  }
  pthread_mutex_unlock(&ctx->mu);
  return rc;
}

static int handle_alloc(accel_ctx *ctx, accel_dtype dtype, size_t count, accel_buffer *out) {
  pthread_mutex_lock(&ctx->mu);
  uint32_t slot = ctx->free_head;
  if (slot == 0) {
    pthread_mutex_unlock(&ctx->mu);
    return ACCEL_ELIMIT;
  }
  client_handle *e = &ctx->handles[slot];
  ctx->free_head = e->next_free;
  e->live = true;
  e->dtype = dtype;
  e->count = count;
  *out = make_handle(ctx, slot, e->gen);
  pthread_mutex_unlock(&ctx->mu);
  return 0;
}

static void handle_free(accel_ctx *ctx, uint32_t slot) {
  pthread_mutex_lock(&ctx->mu);
  client_handle *e = &ctx->handles[slot];
  e->live = false;
  e->gen = (e->gen + 1) & 0xffffu ? e->gen + 1 : e->gen + 2; /* never 0 in 16 bits */
  e->next_free = ctx->free_head;
  ctx->free_head = slot;
  pthread_mutex_unlock(&ctx->mu);
}

/* Sends an op as is (no check against the handle table), counting it in flight. */
static int send_op(accel_ctx *ctx, dev_op *op, accel_future **f) {
  op->h.completion = thread_completion;
  accel_future *fut = NULL;
  if (f) {
    int rc = accel_future_create(ctx->rt, &fut);
    if (rc != 0) {
      free(op);
      return rc;
    }
    accel_future_retain(fut); /* one for the caller, one for the op */
  }
  op->future = fut;
  pthread_mutex_lock(&ctx->done_mu);
  ctx->in_flight++;
  pthread_mutex_unlock(&ctx->done_mu);
  accel_msg m;
  dev_session_op_msg(&m, op);
  int rc = accel_tell(ctx->rt, ctx->session, &m);
  if (rc != 0) {
    op_undo(ctx);
    if (fut) {
      accel_future_release(fut);
      accel_future_release(fut);
    }
    free(op);
    return rc;
  }
  if (f)
    *f = fut;
  return 0;
}

static int buffer_op(accel_ctx *ctx, uint32_t kind, accel_buffer h, accel_dtype dtype,
                     size_t count) {
  dev_op *op = calloc(1, sizeof *op);
  if (op == NULL)
    return ACCEL_ENOMEM;
  op->h.kind = kind;
  op->nbufs = 1;
  op->bufs[0] = (dev_op_buf){.handle = h, .count = count};
  op->u.create.dtype = dtype;
  return send_op(ctx, op, NULL);
}

int accel_buffer_create(accel_ctx *ctx, accel_dtype dtype, size_t count, accel_buffer *out) {
  if (ctx == NULL || out == NULL || dev_dtype_size(dtype) == 0 || count > (SIZE_MAX >> 4))
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
  accel_dtype dtype;
  size_t count;
  int rc = client_handle_get(ctx, buf, &dtype, &count);
  if (rc == 0)
    rc = buffer_op(ctx, DEV_OP_BUFFER_DESTROY, buf, dtype, count);
  if (rc == 0)
    handle_free(ctx, (uint32_t)buf);
  return rc;
}

/* ---- submitting ops ---- */

static int check_op(accel_ctx *ctx, dev_op *op, accel_device dev) {
  if (dev != ACCEL_DEVICE_ANY && (dev < 0 || dev >= ctx->world.nnodes - 1))
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

int client_submit(accel_ctx *ctx, dev_op *op, accel_device dev, accel_future **f) {
  op->h.device = dev;
  int rc = check_op(ctx, op, dev);
  if (rc != 0) {
    free(op);
    return rc;
  }
  return send_op(ctx, op, f);
}

int accel_set_completion(accel_ctx *ctx, accel_completion how) {
  if (ctx == NULL || how < ACCEL_COMPLETION_DEFAULT || how > ACCEL_COMPLETION_POLL)
    return ACCEL_EINVAL;
  thread_completion = how;
  return 0;
}

int accel_finish(accel_ctx *ctx, int64_t timeout_ms) {
  if (ctx == NULL)
    return ACCEL_EINVAL;
  if (accel_runtime_on_loop(ctx->rt))
    return ACCEL_EDEADLK;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_ms / 1000;
  deadline.tv_nsec += (timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
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

int accel_inject_fault(accel_ctx *ctx, accel_device dev) {
  if (ctx == NULL || dev < 0 || dev >= ctx->world.nnodes - 1)
    return ACCEL_EINVAL;
  if (!ctx->world.fault_injection)
    return ACCEL_EPERM;
  accel_msg m = {.type = DEV_MSG_INJECT_FAULT, .arg = (uint64_t)dev};
  accel_future *f;
  int rc = accel_ask(ctx->rt, ctx->session, &m, &f);
  if (rc != 0)
    return rc;
  rc = accel_future_wait(f, -1);
  accel_future_release(f);
  return rc;
}

int accel_transfer_stats_get(accel_ctx *ctx, accel_transfer_stats *out) {
  if (ctx == NULL || out == NULL)
    return ACCEL_EINVAL;
  out->host_to_device = atomic_load(&ctx->world.h2d);
  out->device_to_host = atomic_load(&ctx->world.d2h);
  out->device_to_device = atomic_load(&ctx->world.d2d);
  out->written = atomic_load(&ctx->world.written);
  out->read = atomic_load(&ctx->world.read);
  return 0;
}
