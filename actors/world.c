/* Builds the node table from the backends this build has: node 0 is the host (served by the
 * CPU backend, never exposed as a device), then `cpu_devices` CPU devices, then every device
 * the other backends find. Every open of the CPU backend's device is an instance of its own
 * (own queues, memory and fault state), so the host and each CPU device open index 0. */
#include <string.h>

#include "actors/device.h"
#include "actors/world.h"
#include "actors/world_init.h"

static const be_ops *cpu_backend(void) {
  for (const be_entry *e = be_registry(); e->name; e++)
    if (strcmp(e->name, "cpu") == 0)
      return e->ops;
  return NULL;
}

static void add_node(dev_world *w, const be_ops *be, int backend_index, accel_completion how) {
  dev_node *node = &w->nodes[w->nnodes];
  memset(node, 0, sizeof *node);
  node->world = w;
  node->index = w->nnodes;
  node->device = w->nnodes - 1;
  node->be = be;
  node->backend_index = backend_index;
  node->completion = how;
  node->state = DEV_NODE_RESTARTING; /* until its DeviceActor starts */
  w->nnodes++;
}

static void add_backend_devices(dev_world *w, const be_entry *e, accel_completion how) {
  int count = 0;
  char why[128] = "";
  if (e->ops == NULL || e->ops->abi_version != BE_ABI_VERSION)
    return;
  if (e->ops->probe(&count, why, sizeof why) != 0) {
    accel_log(ACCEL_LOG_INFO, "device", "%s: %s", e->name, why[0] ? why : "no device");
    return;
  }
  for (int i = 0; i < count && w->nnodes < DEV_MAX_NODES; i++)
    add_node(w, e->ops, i, how);
}

int dev_world_init(dev_world *w, accel_runtime *rt, const dev_world_opts *o) {
  memset(w, 0, sizeof *w);
  w->rt = rt;
  w->fault_injection = o->fault_injection;
  w->tf32 = o->tf32;
  w->max_restarts = o->max_restarts ? o->max_restarts : 3;
  w->restart_window_ms = o->restart_window_ms ? o->restart_window_ms : 10000;
  const be_ops *cpu = cpu_backend();
  if (cpu == NULL)
    return ACCEL_ENOTSUP;
  add_node(w, cpu, 0, o->completion); /* the host memory node */
  w->nodes[DEV_HOST_NODE].device = -1;
  for (uint32_t i = 0; i < o->cpu_devices && w->nnodes < DEV_MAX_NODES; i++)
    add_node(w, cpu, 0, o->completion);
  for (const be_entry *e = be_registry(); e->name; e++)
    if (strcmp(e->name, "cpu") != 0)
      add_backend_devices(w, e, o->completion);
  return 0;
}

void dev_world_fini(dev_world *w) {
  dev_task_pool_free(w);
  dev_inflight_pool_free(w);
}
