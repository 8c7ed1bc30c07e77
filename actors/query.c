/* What the device world answers about itself (query.h), for the server's reports. On the loop
 * thread, the only thread that changes buffers and nodes, so plain reads see a consistent
 * picture. */
#include <string.h>

#include "actors/query.h"

const char *dev_node_state_name(dev_node_state s) {
  switch (s) {
  case DEV_NODE_SERVING:
    return "serving";
  case DEV_NODE_RESTARTING:
    return "restarting";
  default:
    return "quarantined";
  }
}

uint64_t dev_node_mem_used(const dev_world *w, int n) {
  const dev_node *node = &w->nodes[n];
  uint64_t sum = 0;
  RT_LIST_FOR_EACH(const dev_buffer, b, &w->buffers, link) {
    const dev_replica *r = &b->rep[n];
    if (r->allocated && r->node_gen == node->generation)
      sum += r->mem.bytes;
  }
  return sum;
}

/* Buffers whose handle is still live (destroyed ones linger until their last task ends). */
uint64_t dev_live_buffers(const dev_world *w) {
  uint64_t n = 0;
  RT_LIST_FOR_EACH(const dev_buffer, b, &w->buffers, link)
  n += !b->destroyed;
  return n;
}

/* Devices of the backend `name`, in this process or in worker processes. */
int dev_backend_devices(const dev_world *w, const char *name) {
  int n = 0;
  for (int i = 1; i < w->nnodes; i++)
    n += strcmp(w->nodes[i].be->name, name) == 0;
  return n;
}

/* Devices `be` serves in this process (not through a worker's proxy). */
static int devices_here(const dev_world *w, const be_ops *be) {
  int n = 0;
  for (int i = 1; i < w->nnodes; i++)
    n += w->nodes[i].be == be;
  return n;
}

int dev_pin_caches(const dev_world *w, const char *names[], pin_cache_stats st[], int max) {
  int n = 0;
  for (const be_entry *e = be_registry(); e->name && n < max; e++) {
    if (e->ops == NULL || e->ops->pin_stats == NULL || devices_here(w, e->ops) == 0)
      continue;
    e->ops->pin_stats(&st[n]);
    names[n++] = e->name;
  }
  return n;
}
