/* Reports on a running world for `accelctl status|devices|tree` (status.c): built on the loop
 * thread (they read the world and walk the supervision tree without locks), returned as one
 * malloc'd NUL-terminated string that the caller frees, or NULL when out of memory. */
#ifndef DEV_STATUS_H
#define DEV_STATUS_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/world.h"
#include "runtime/attr.h"

/* meson passes the project version; a build without it says so. */
#ifndef ACCEL_VERSION_STRING
#define ACCEL_VERSION_STRING "unknown"
#endif

/* What the world does not know: the server's own counters. */
typedef struct dev_status_counts {
  uint32_t connections;   /* client pipes open */
  uint32_t sessions;      /* SessionActors alive */
  uint64_t ops_completed; /* ops finished (any status) */
  uint64_t ops_failed;    /* of which with an error */
  uint64_t ops_in_flight; /* sent to a session, not finished */
  uint64_t frames_bad;    /* malformed frames answered or dropped */
  uint64_t uptime_ms;
  bool draining; /* SIGTERM: finishing the ops in flight, refusing new ones */
} dev_status_counts;

/* One JSON object: devices (index, name, backend, state, restarts, mem_used, mem_total,
 * compute_units, packages), backends, pin_caches (per backend that keeps one: pinned_bytes,
 * ranges, hits, pins, pin_failed, refused, invalidated, evicted), host_mem_used, sessions, buffers,
 * ops_*, dead_letters,
 * ... `accelctl devices --json` prints its "devices" and "backends" members as they are. */
RT_MUST_USE char *dev_status_json(dev_world *w, const dev_status_counts *c);
/* The same, as a few lines of text for people. */
RT_MUST_USE char *dev_status_text(dev_world *w, const dev_status_counts *c);
/* Per device a line, then one with its op packages and their dtypes; then one line per
 * backend that is not built or has no device, saying why. */
RT_MUST_USE char *dev_status_devices(dev_world *w);
/* The supervision tree, one actor per line, indented by depth, then every device with its
 * state and restarts (a quarantined device has no actors left to show). On the loop only. */
RT_MUST_USE char *dev_status_tree(accel_runtime *rt, const dev_world *w);
/* The same as JSON: {"actors":[{name, state, depth, restarts_total, restarts_in_window,
 * mailbox}] in tree order, "devices":[{index, name, backend, state, restarts}]}. */
RT_MUST_USE char *dev_status_tree_json(accel_runtime *rt, const dev_world *w);

/* Bytes of buffer replicas allocated on node `n` (host: 0) by its current incarnation. */
uint64_t dev_status_node_mem(const dev_world *w, int n);

/* The pin caches of the backends that keep one (be_ops.pin_stats) and have devices here, at
 * most `max`: their names and counters; returns how many. */
#define DEV_PIN_CACHES_MAX 8
int dev_status_pin_caches(const dev_world *w, const char *names[], pin_cache_stats st[], int max);

#endif
