/* Builds the node table from the backends this build has: node 0 is the host (served by the
 * CPU backend, never exposed as a device), then `cpu_devices` CPU devices, then every device
 * the other backends find. Every open of the CPU backend's device is an instance of its own
 * (own queues, memory and fault state), so the host and each CPU device open index 0. */
#include <stdio.h>
#include <string.h>

#include "actors/device.h"
#include "actors/metrics.h"
#include "actors/telemetry.h"
#include "actors/trace.h"
#include "actors/world.h"
#include "actors/world_init.h"
#include "backends/worker/worker.h"
#include "runtime/deadline.h"

static const be_ops *cpu_backend(void) {
  for (const be_entry *e = be_registry(); e->name; e++)
    if (strcmp(e->name, "cpu") == 0)
      return e->ops;
  return NULL;
}

static int add_node(dev_world *w, const be_ops *be, int backend_index, int pref,
                    accel_completion how) {
  dev_node *node = &w->nodes[w->nnodes];
  memset(node, 0, sizeof *node);
  /* wait_for_builds (device_actor.c) waits on it with a monotonic deadline. */
  if (rt_cond_init_monotonic(&node->build_cv) != 0)
    return ACCEL_ENOMEM;
  node->world = w;
  node->index = w->nnodes;
  node->device = w->nnodes - 1;
  node->be = be;
  node->backend_index = backend_index;
  node->backend_pref = pref;
  node->completion = how;
  node->state = DEV_NODE_RESTARTING; /* until its DeviceActor starts */
  pthread_mutex_init(&node->build_mu, NULL);
  w->nnodes++;
  return 0;
}

/* Whether `name` is in the comma-separated `list`. */
static bool listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && strncmp(p, name, n) == 0)
      return true;
    p += len + (p[len] == ',');
  }
  return false;
}

static int add_backend_devices(dev_world *w, const be_entry *e, int pref, accel_completion how,
                               const char *workers) {
  int count = 0;
  char why[128] = "";
  if (e->ops == NULL || e->ops->abi_version != BE_ABI_VERSION)
    return 0;
  const be_ops *be = listed(workers, e->name) ? bw_proxy_ops(e->ops) : e->ops;
  if (be->probe(&count, why, sizeof why) != 0) {
    accel_log(ACCEL_LOG_INFO, "device", "%s: %s", e->name, why[0] ? why : "no device");
    return 0;
  }
  int rc = 0;
  for (int i = 0; rc == 0 && i < count && w->nnodes < DEV_MAX_NODES; i++)
    rc = add_node(w, be, i, pref, how);
  return rc;
}

static const be_entry *entry_named(const char *name, size_t len) {
  for (const be_entry *e = be_registry(); e->name; e++)
    if (strlen(e->name) == len && strncmp(e->name, name, len) == 0)
      return e;
  return NULL;
}

/* Calls fn for each comma-separated name of a non-empty list in order (an empty name, as in
 * "cpu," or ",cpu", is passed too: it names nothing); stops at the first non-zero result. */
static int each_name(const char *list, int (*fn)(const char *, size_t, int, void *), void *arg) {
  int pos = 0;
  for (const char *p = list; *list;) {
    size_t len = strcspn(p, ",");
    int rc = fn(p, len, pos++, arg);
    if (rc != 0 || p[len] == '\0')
      return rc;
    p += len + 1;
  }
  return 0;
}

typedef struct check_state {
  unsigned seen;
  char *why;
  size_t why_len;
} check_state;

static int check_name(const char *name, size_t len, int pos, void *arg) {
  check_state *c = arg;
  const be_entry *e = entry_named(name, len);
  unsigned bit = e ? 1u << (e - be_registry()) : 0;
  if (e == NULL || (c->seen & bit)) {
    if (c->why_len)
      snprintf(c->why, c->why_len, "%.*s: %s", (int)len, name,
               e ? "named twice" : "no such backend (cpu, cuda, opencl)");
    return ACCEL_EINVAL;
  }
  (void)pos;
  c->seen |= bit;
  return 0;
}

int dev_backends_check(const char *list, char *why, size_t why_len) {
  check_state c = {0, why, why_len};
  if (why_len)
    why[0] = '\0';
  return each_name(list, check_name, &c);
}

typedef struct open_state {
  dev_world *w;
  const dev_world_opts *o;
} open_state;

static int open_named(const char *name, size_t len, int pos, void *arg) {
  open_state *s = arg;
  const be_entry *e = entry_named(name, len);
  if (strcmp(e->name, "cpu") != 0)
    return add_backend_devices(s->w, e, pos, s->o->completion, s->o->workers);
  int rc = 0;
  for (uint32_t i = 0; rc == 0 && i < s->o->cpu_devices && s->w->nnodes < DEV_MAX_NODES; i++)
    rc = add_node(s->w, e->ops, 0, pos, s->o->completion);
  return rc;
}

int dev_world_init(dev_world *w, accel_runtime *rt, const dev_world_opts *o) {
  memset(w, 0, sizeof *w);
  rt_list_init(&w->buffers);
  rt_list_init(&w->modules);
  rt_list_init(&w->foreign);
  rt_list_init(&w->foreign_left);
  w->rt = rt;
  w->fault_injection = o->fault_injection;
  w->tf32 = o->tf32;
  w->cuda_primary = o->cuda_primary;
  w->pinned_max = o->pinned_max;
  w->loop = o->loop;
  w->worker_link = o->worker_link;
  w->max_restarts = o->max_restarts ? o->max_restarts : 3;
  w->restart_window_ms = o->restart_window_ms ? o->restart_window_ms : 10000;
  const be_ops *cpu = cpu_backend();
  if (cpu == NULL)
    return ACCEL_ENOTSUP;
  char why[96];
  const char *list = o->backends[0] ? o->backends : "cpu,cuda,opencl";
  if (dev_backends_check(list, why, sizeof why) != 0) {
    accel_log(ACCEL_LOG_ERROR, "device", "backends: %s", why);
    return ACCEL_EINVAL;
  }
  int rc = add_node(w, cpu, 0, 0, o->completion); /* the host memory node */
  if (rc != 0)
    return rc;
  w->nodes[DEV_HOST_NODE].device = -1;
  open_state st = {w, o};
  return each_name(list, open_named, &st);
}

void dev_world_post(dev_world *w, accel_task *task, void (*fn)(accel_task *task)) {
  if (w->loop != 0)
    accel_post_to(w->rt, w->loop - 1, task, fn);
  else
    accel_post(w->rt, task, fn);
}

void dev_world_fini(dev_world *w) {
  dev_telemetry_stop(w);
  dev_trace_finish(w);
  dev_foreign_left_sweep(w, true);
  for (int n = 0; n < w->nnodes; n++) {
    pthread_mutex_destroy(&w->nodes[n].build_mu);
    pthread_cond_destroy(&w->nodes[n].build_cv);
    dev_mem_cache_fini(&w->nodes[n].cache);
  }
  dev_task_pool_free(w);
  dev_inflight_pool_free(w);
  dev_metrics_free(w);
}
