/* acceld's reports, rendered from the device world's answers (actors/query.h) and the
 * server's own counters: `accelctl status|devices|tree` (render_status.c) and the Prometheus
 * text of /metrics (render_metrics.c). Built on the loop thread; each returns one malloc'd
 * NUL-terminated string that the caller frees, or NULL when out of memory. */
#ifndef SRV_RENDER_H
#define SRV_RENDER_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/busy.h"
#include "actors/metrics.h"
#include "actors/world.h"
#include "runtime/attr.h"

/* meson passes the project version; a build without it says so. */
#ifndef ACCEL_VERSION_STRING
#define ACCEL_VERSION_STRING "unknown"
#endif

/* The device worlds a report covers: one per shard of the daemon (server_shards.h), each
 * with the same devices opened for its own loop. A report shows world 0's devices (names,
 * kinds, packages, states) with what every world counts added up (render_worlds.c). Each
 * world is read on its own loop, or with that loop parked (srv_shards_park_others); the
 * devices' states, atomics, from anywhere. */
#define SRV_WORLDS_MAX 16
typedef struct srv_worlds {
  dev_world *w[SRV_WORLDS_MAX];
  uint32_t n;
} srv_worlds;

/* render_worlds.c: node n's numbers across the worlds. Sums: memory used, cached bytes,
 * cache hits and misses, tasks queued, busy time (work of several shards on one device at
 * once counts for each), builds running; the busy share summed up to 1; the worst state and
 * the most restarts (a worker's fault restarts the device in every world). */
uint64_t srv_worlds_mem_used(const srv_worlds *ws, int n);
dev_mem_cache srv_worlds_cache(const srv_worlds *ws, int n);
uint64_t srv_worlds_queued(const srv_worlds *ws, int n);
uint64_t srv_worlds_busy_ns(const srv_worlds *ws, int n, uint64_t now_ns);
double srv_worlds_busy_share(const srv_worlds *ws, int n);
dev_node_state srv_worlds_state(const srv_worlds *ws, int n);
uint32_t srv_worlds_restarts(const srv_worlds *ws, int n);
uint32_t srv_worlds_builds(const srv_worlds *ws, int n, double *seconds);
/* Live buffers, bytes moved in one direction (offsetof a dev_world atomic_ullong), and the
 * long work in progress of every world (at most max reports). */
uint64_t srv_worlds_buffers(const srv_worlds *ws);
uint64_t srv_worlds_bytes(const srv_worlds *ws, size_t field);
int srv_worlds_in_progress(const srv_worlds *ws, uint64_t now_ns, uint64_t min_ns,
                           dev_work_report out[], int max);
void srv_worlds_busy_roll(const srv_worlds *ws, uint64_t now_ns);
/* The op metrics of every world added up (actors/metrics.h), into *out; false if no world
 * keeps them. */
bool srv_worlds_metrics(const srv_worlds *ws, dev_metrics *out);

/* What the world does not know: the server's own counters. */
typedef struct srv_status_counts {
  uint32_t connections;   /* client pipes open */
  uint32_t sessions;      /* SessionActors alive */
  uint64_t ops_completed; /* ops finished (any status) */
  uint64_t ops_failed;    /* of which with an error */
  uint64_t ops_in_flight; /* sent to a session, not finished */
  uint64_t replies_early; /* status replies written by the thread that saw the work done */
  uint32_t light_clients; /* connections waiting for the reply to their only op */
  uint64_t frames_bad;    /* malformed frames answered or dropped */
  uint64_t uptime_ms;
  bool draining; /* SIGTERM: finishing the ops in flight, refusing new ones */
} srv_status_counts;

/* One JSON object: devices (index, name, backend, state, restarts, mem_used, mem_total,
 * compute_units, packages), backends, pin_caches (per backend that keeps one: pinned_bytes,
 * ranges, hits, pins, pin_failed, refused, invalidated, evicted), host_mem_used, sessions,
 * buffers, ops_*, dead_letters, ... `accelctl devices --json` prints its "devices" and
 * "backends" members as they are. */
RT_MUST_USE char *srv_status_json(const srv_worlds *ws, const srv_status_counts *c);
/* The same, as a few lines of text for people. */
RT_MUST_USE char *srv_status_text(const srv_worlds *ws, const srv_status_counts *c);
/* Per device a line, then one with its op packages and their dtypes; then one line per
 * backend that is not built or has no device, saying why. */
RT_MUST_USE char *srv_status_devices(const srv_worlds *ws);
/* The supervision tree, one actor per line, indented by depth, then every device with its
 * state and restarts (a quarantined device has no actors left to show). */
RT_MUST_USE char *srv_status_tree(accel_runtime *rt, const srv_worlds *ws);
/* The same as JSON: {"actors":[{name, state, depth, restarts_total, restarts_in_window,
 * mailbox}] in tree order, "devices":[{index, name, backend, state, restarts}]}. */
RT_MUST_USE char *srv_status_tree_json(accel_runtime *rt, const srv_worlds *ws);

/* The whole /metrics exposition: the world's op counters and histograms (actors/metrics.h),
 * its gauges (device memory, states, restarts) and the server's counters `c`. */
RT_MUST_USE char *srv_metrics_render(const srv_worlds *ws, const srv_status_counts *c);
/* 1 while serving: not draining and some device not quarantined; else 0 (for /healthz). */
int srv_metrics_healthy(const srv_worlds *ws, const srv_status_counts *c);

#endif
