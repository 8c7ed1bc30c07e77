/* What the device world answers about itself (query.c), for reports rendered elsewhere
 * (server/render.h: status JSON and text, the Prometheus text). On the loop thread only: they
 * read the world without locks. */
#ifndef DEV_QUERY_H
#define DEV_QUERY_H

#include <stdint.h>

#include "actors/world.h"

/* "serving", "restarting" or "quarantined". */
const char *dev_node_state_name(dev_node_state s);
/* Bytes of buffer replicas allocated on node `n` (host: 0) by its current incarnation. */
uint64_t dev_node_mem_used(const dev_world *w, int n);
/* Buffers whose handle is still live (destroyed ones linger until their last task ends). */
uint64_t dev_live_buffers(const dev_world *w);
/* Devices of the backend `name`, in this process or in worker processes. */
int dev_backend_devices(const dev_world *w, const char *name);

/* The pin caches of the backends that keep one (be_ops.pin_stats) and have devices here, at
 * most `max`: their names and counters; returns how many. */
#define DEV_PIN_CACHES_MAX 8
int dev_pin_caches(const dev_world *w, const char *names[], pin_cache_stats st[], int max);

#endif
