/* The embedded transport: a runtime in this process running the device tree and one
 * session; ops go to the session as messages. */
#include <errno.h> /* program_invocation_short_name */
#include <stdlib.h>
#include <string.h>

#include "actors/device.h"
#include "actors/session.h"
#include "actors/trace.h"
#include "actors/world_init.h"
#include "backends/backend.h"
#include "clients/ctx.h"
#include "runtime/alloc.h"
#include "runtime/error_detail.h"
#include "runtime/loop.h"

typedef struct embedded {
  dev_call_pool calls; /* the context's calls, drained once the world has ended */
  dev_world world;
  dev_session_args session_args;
  accel_ref devices, session;
  bool borrow; /* the client's thread may run the loop's turns (embedded_send) */
} embedded;

static embedded *impl_of(accel_ctx *ctx) {
  return ctx->impl;
}

/* ---- "embedded:?key=value&..." ---- */

static int parse_param(const char *key, const char *value, dev_world_opts *o,
                       uint32_t *max_buffers) {
  char *end;
  unsigned long v = strtoul(value, &end, 10);
  bool numeric = *value && *end == '\0';
  if (strcmp(key, "fault_injection") == 0 && numeric)
    o->fault_injection = v != 0;
  else if (strcmp(key, "tf32") == 0 && numeric)
    o->tf32 = v != 0;
  else if (strcmp(key, "cuda_context") == 0 && strcmp(value, "primary") == 0)
    o->cuda_primary = 1;
  else if (strcmp(key, "cuda_context") == 0 && strcmp(value, "own") == 0)
    o->cuda_primary = 0;
  else if (strcmp(key, "pinned_max") == 0 && numeric && v < UINT64_MAX)
    o->pinned_max = v == 0 ? BE_PINNED_OFF : v;
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
  else if (strcmp(key, "backends") == 0 && strlen(value) < sizeof o->backends &&
           dev_backends_check(value, NULL, 0) == 0)
    strcpy(o->backends, value);
  else
    return ACCEL_EINVAL;
  return 0;
}

/* `query` is what follows "embedded:": empty, or "?key=value&...". */
static int parse_query(const char *query, dev_world_opts *o, uint32_t *max_buffers) {
  *o = (dev_world_opts){.cpu_devices = 1, .completion = ACCEL_COMPLETION_CALLBACK};
  *max_buffers = CLIENT_DEFAULT_MAX_BUFFERS;
  if (*query == '\0')
    return 0;
  if (*query != '?')
    return ACCEL_EINVAL;
  char buf[256];
  if (strlen(query + 1) >= sizeof buf)
    return ACCEL_EINVAL;
  strcpy(buf, query + 1);
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

/* ---- the transport ---- */

static void on_op_done(void *arg, int status) {
  client_op_done(arg, status);
}

static void on_transfer(void *arg, int delta) {
  if (delta > 0)
    client_work_begin(arg);
  else
    client_op_done(arg, 0);
}

static bool all_devices_any_thread(const dev_world *w) {
  for (int i = 1; i < w->nnodes; i++)
    if (!w->nodes[i].be->any_thread)
      return false;
  return true;
}

static int start_tree(accel_ctx *ctx, embedded *e) {
  int rc = dev_world_spawn(&e->world, NULL, &e->devices);
  if (rc != 0)
    return rc;
  e->session_args = (dev_session_args){
      .world = &e->world, .max_buffers = ctx->max_buffers, .name = program_invocation_short_name};
  accel_spawn_opts o = {.name = "session", .mailbox_capacity = 1 << 14};
  return accel_spawn(ctx->rt, NULL, &dev_session_behavior, &e->session_args, &o, &e->session);
}

static int open_here(accel_ctx *ctx, const char *query) {
  dev_world_opts wo;
  uint32_t max_buffers;
  int rc = parse_query(query, &wo, &max_buffers);
  if (rc != 0)
    return rc;
  embedded *e = rt_calloc(1, sizeof *e);
  if (e == NULL)
    return ACCEL_ENOMEM;
  rc = client_ctx_init(ctx, max_buffers);
  if (rc != 0) {
    rt_free(e);
    return rc;
  }
  dev_call_pool_init(&e->calls);
  ctx->call_pool = &e->calls;
  ctx->tp = &client_embedded_transport;
  ctx->impl = e;
  /* One loop: the device world's actors share libuv handles and a loop-thread-only state
   * (docs/ARCHITECTURE.md "Threads"), whatever ACCEL_LOOPS says for user runtimes. */
  rc = accel_runtime_create(&ctx->rt, &(accel_runtime_opts){.loops = 1});
  if (rc == 0)
    rc = dev_world_init(&e->world, ctx->rt, &wo);
  e->world.on_op_done = on_op_done;
  e->world.on_op_done_arg = ctx;
  e->world.on_transfer = on_transfer;
  e->borrow = rc == 0 && all_devices_any_thread(&e->world);
  if (rc == 0)
    rc = start_tree(ctx, e);
  if (rc == 0)                     /* before the loop runs: it reads w->trace */
    dev_trace_from_env(&e->world); /* ACCEL_TRACE=FILE: written at accel_close */
  if (rc == 0)
    rc = accel_runtime_start(ctx->rt);
  if (rc != 0) {
    accel_runtime_destroy(ctx->rt);
    dev_trace_finish(&e->world);
    dev_call_pool_drain(&e->calls);
    rt_free(e);
    pthread_mutex_destroy(&ctx->mu);
    pthread_mutex_destroy(&ctx->done_mu);
    pthread_cond_destroy(&ctx->done_cv);
    rt_free(ctx->handles);
  }
  return rc;
}

/* The devices open on this thread (the tree is spawned before the loop runs): the thread is
 * given back as the backends found it (CUDA: the caller's current context). */
int client_embedded_open(accel_ctx *ctx, const char *query) {
  be_thread_marks marks;
  be_thread_marks_take(&marks);
  int rc = open_here(ctx, query);
  be_thread_marks_give_back(&marks);
  return rc;
}

/* Where every device's backend may be called from any thread, the client's thread runs the
 * op's turns itself while the loop sleeps (runtime/loop.h): no wake-up either way. */
static int embedded_send(accel_ctx *ctx, dev_call *call) {
  accel_msg m;
  dev_session_op_msg(&m, call);
  embedded *e = impl_of(ctx);
  return e->borrow ? rt_tell_and_run(ctx->rt, e->session, &m) : accel_tell(ctx->rt, e->session, &m);
}

static int embedded_device_count(accel_ctx *ctx) {
  return impl_of(ctx)->world.nnodes - 1;
}

static int embedded_device_info(accel_ctx *ctx, accel_device dev, struct accel_device_info *out) {
  dev_node_describe(&impl_of(ctx)->world.nodes[dev + 1], out);
  return 0;
}

static int embedded_inject_fault(accel_ctx *ctx, accel_device dev) {
  embedded *e = impl_of(ctx);
  if (!e->world.fault_injection)
    return ACCEL_EPERM;
  accel_msg m = {.type = DEV_MSG_INJECT_FAULT, .arg = (uint64_t)dev};
  accel_future *f;
  int rc = accel_ask(ctx->rt, e->session, &m, &f);
  if (rc != 0)
    return rc;
  rc = accel_future_wait(f, -1);
  accel_future_release(f);
  return rc;
}

static int embedded_transfer_stats(accel_ctx *ctx, accel_transfer_stats *out) {
  dev_world *w = &impl_of(ctx)->world;
  out->host_to_device = atomic_load(&w->h2d);
  out->device_to_host = atomic_load(&w->d2h);
  out->device_to_device = atomic_load(&w->d2d);
  out->written = atomic_load(&w->written);
  out->read = atomic_load(&w->read);
  return 0;
}

static void embedded_close(accel_ctx *ctx) {
  be_thread_marks marks; /* what the loop did not close is closed here */
  be_thread_marks_take(&marks);
  accel_runtime_stop(ctx->rt);
  accel_runtime_join(ctx->rt);
  accel_runtime_destroy(ctx->rt);
  dev_world_fini(&impl_of(ctx)->world);
  dev_call_pool_drain(&impl_of(ctx)->calls); /* every call has ended with the world */
  rt_free(ctx->impl);
  be_thread_marks_give_back(&marks);
}

/* Whether dev's memory can be shared with other libraries (the session checks again). A
 * device between incarnations passes here: the op then meets its state there. */
int client_embedded_share_check(accel_ctx *ctx, accel_device dev) {
  dev_world *w = &impl_of(ctx)->world;
  if (dev < 0 || dev >= w->nnodes - 1)
    return rt_error_detail(ACCEL_EINVAL, "device %d is not one of this context's %d", dev,
                           w->nnodes - 1);
  const dev_node *node = &w->nodes[dev + 1];
  char why[160] = "";
  if (node->be->mem_share == NULL)
    return rt_error_detail(ACCEL_ENOTSUP,
                           "device %d (%s): the %s backend's memory cannot be shared with other "
                           "libraries",
                           dev, node->info.name, node->be->name);
  be_device *d = node->dev;
  int rc = d != NULL ? node->be->mem_share(d, why, sizeof why) : 0;
  return rc == 0 ? 0 : rt_error_detail(rc, "device %d (%s): %s", dev, node->info.name, why);
}

const client_transport client_embedded_transport = {
    .send_op = embedded_send,
    .device_count = embedded_device_count,
    .device_info = embedded_device_info,
    .inject_fault = embedded_inject_fault,
    .transfer_stats = embedded_transfer_stats,
    .close = embedded_close,
};
