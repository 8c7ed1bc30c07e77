/* acceld's metrics in the Prometheus text exposition format 0.0.4 (render.h): names in
 * snake_case with the accel_ prefix, base units (seconds, bytes), counters ending in _total,
 * histograms as cumulative _bucket{le} series with _sum and _count. On the loop thread. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "server/render.h"

#include "actors/busy.h"
#include "actors/device.h"
#include "actors/metrics.h"
#include "actors/query.h"
#include "backends/worker/worker.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"
#include "server/render_telemetry.h"
#include "server/sbuf.h"

#define NODE_SLOTS DEV_METRICS_NODE_SLOTS
#define STATUS_SLOTS DEV_METRICS_STATUS_SLOTS
#define bucket_le dev_metrics_bucket_le

static void header(sbuf *b, const char *name, const char *type, const char *help) {
  sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The device label of node slot `slot`: "host", the device index, or "none". */
static void device_label(sbuf *b, const dev_world *w, unsigned slot) {
  if (slot == 0)
    sb_printf(b, "device=\"none\"");
  else if (slot == 1)
    sb_printf(b, "device=\"host\"");
  else
    sb_printf(b, "device=\"%d\"", w->nodes[slot - 1].device);
}

static void render_ops(sbuf *b, const dev_world *w, const dev_metrics *m) {
  header(b, "accel_ops_total", "counter",
         "Client ops finished, by device (host: transfers to and from callers; none: refused "
         "before placement), kind and status (OK or the error's name).");
  for (unsigned n = 0; n < NODE_SLOTS; n++)
    for (unsigned k = 1; k < DEV_OP_KIND_COUNT_; k++)
      for (unsigned st = 0; st < STATUS_SLOTS; st++) {
        if (m->ops[n][k][st] == 0)
          continue;
        sb_printf(b, "accel_ops_total{");
        device_label(b, w, n);
        sb_printf(b, ",kind=\"%s\",status=\"%s\"} %llu\n", dev_op_info_of(k)->label,
                  st == STATUS_SLOTS - 1 ? "UNKNOWN" : accel_err_name(-(int)st),
                  (unsigned long long)m->ops[n][k][st]);
      }
}

static void render_histogram(sbuf *b, const dev_world *w, const dev_metrics *m) {
  header(b, "accel_op_duration_seconds", "histogram",
         "Time from an op's arrival at its session to its end, by device and kind.");
  for (unsigned n = 0; n < NODE_SLOTS; n++)
    for (unsigned k = 1; k < DEV_OP_KIND_COUNT_; k++) {
      uint64_t cum = 0;
      for (unsigned i = 0; i <= DEV_METRICS_BUCKETS; i++)
        cum += m->hist[n][k][i];
      if (cum == 0)
        continue;
      cum = 0;
      for (unsigned i = 0; i <= DEV_METRICS_BUCKETS; i++) {
        cum += m->hist[n][k][i];
        sb_printf(b, "accel_op_duration_seconds_bucket{");
        device_label(b, w, n);
        if (i < DEV_METRICS_BUCKETS)
          sb_printf(b, ",kind=\"%s\",le=\"%g\"} %llu\n", dev_op_info_of(k)->label, bucket_le[i],
                    (unsigned long long)cum);
        else
          sb_printf(b, ",kind=\"%s\",le=\"+Inf\"} %llu\n", dev_op_info_of(k)->label,
                    (unsigned long long)cum);
      }
      sb_printf(b, "accel_op_duration_seconds_sum{");
      device_label(b, w, n);
      sb_printf(b, ",kind=\"%s\"} %.9f\naccel_op_duration_seconds_count{", dev_op_info_of(k)->label,
                m->sum_s[n][k]);
      device_label(b, w, n);
      sb_printf(b, ",kind=\"%s\"} %llu\n", dev_op_info_of(k)->label, (unsigned long long)cum);
    }
}

/* One gauge or counter with a value per device. */
static void per_device(sbuf *b, const srv_worlds *ws, const char *name, const char *type,
                       const char *help, uint64_t (*value)(const srv_worlds *, int)) {
  const dev_world *w = ws->w[0];
  header(b, name, type, help);
  for (int n = 1; n < w->nnodes; n++)
    sb_printf(b, "%s{device=\"%d\"} %llu\n", name, w->nodes[n].device,
              (unsigned long long)value(ws, n));
}

static uint64_t mem_total(const srv_worlds *ws, int n) {
  return ws->w[0]->nodes[n].info.mem_bytes;
}
static uint64_t mem_cached(const srv_worlds *ws, int n) {
  return srv_worlds_cache(ws, n).bytes;
}
static uint64_t restarts(const srv_worlds *ws, int n) {
  return srv_worlds_restarts(ws, n);
}
static uint64_t quarantined(const srv_worlds *ws, int n) {
  return srv_worlds_state(ws, n) == DEV_NODE_QUARANTINED;
}

/* Busy time as accel measures it, for every backend (actors/busy.h). */
static void render_busy(sbuf *b, const srv_worlds *ws) {
  const dev_world *w = ws->w[0];
  uint64_t now = rt_mono_ns();
  header(b, "accel_device_busy_seconds_total", "counter",
         "Time work was on the device (submitted, not complete), on any of its queues (with "
         "several shards, each shard's work counted).");
  for (int n = 1; n < w->nnodes; n++)
    sb_printf(b, "accel_device_busy_seconds_total{device=\"%d\"} %.6f\n", w->nodes[n].device,
              (double)srv_worlds_busy_ns(ws, n, now) * 1e-9);
}

/* name{backend="...",pid="...",link="..."} of a worker link's series. */
static void link_labels(sbuf *b, const char *name, const bw_link_busy *l) {
  sb_printf(b, "%s{backend=\"", name);
  sb_label_value(b, l->backend);
  sb_printf(b, "\",pid=\"%d\",link=\"%u\"}", l->pid, l->link);
}

/* The threads every op crosses one by one: acceld's loops and each worker's link thread. Busy
 * near 1 s a second is a saturated one (docs/PERFORMANCE.md "Which thread saturates"). */

static void render_threads(sbuf *b, const dev_world *w) {
  header(b, "accel_loop_busy_seconds_total", "counter",
         "Time each of acceld's loops spent on work: turns that found some and what followed "
         "them before the next poll (not polling, not asleep; callbacks of sockets the loop "
         "serves itself not counted).");
  for (uint32_t i = 0; i < accel_runtime_loops(w->rt); i++)
    sb_printf(b, "accel_loop_busy_seconds_total{loop=\"%u\"} %.6f\n", i,
              (double)accel_runtime_loop_busy_ns(w->rt, i) * 1e-9);
  enum { MAX_LINKS = 64 };
  bw_link_busy links[MAX_LINKS];
  size_t n = bw_links_busy(links, MAX_LINKS);
  header(b, "accel_worker_link_busy_seconds_total", "counter",
         "Time the thread serving a link of a device worker spent on its calls (submitting "
         "them to the device), not waiting for them, since the link began: the worker's "
         "start-up included; a restarted worker starts again.");
  for (size_t i = 0; i < n && i < MAX_LINKS; i++) {
    link_labels(b, "accel_worker_link_busy_seconds_total", &links[i]);
    sb_printf(b, " %.6f\n", (double)links[i].busy_ns * 1e-9);
  }
  header(b, "accel_worker_completions_total", "counter",
         "Completions a device worker queued behind work on a link (acceld asked to hear of the "
         "work's end; counted when queued; errors answered at once not counted).");
  for (size_t i = 0; i < n && i < MAX_LINKS; i++) {
    link_labels(b, "accel_worker_completions_total", &links[i]);
    sb_printf(b, " %llu\n", (unsigned long long)links[i].completions);
  }
  header(b, "accel_worker_completion_events_total", "counter",
         "Events a device worker recorded for its completer to wait on (a driver call each on "
         "the link's thread; one covers a burst of tiny ops' completions); completions through "
         "a host function, which hold their queue or found no event, have none.");
  for (size_t i = 0; i < n && i < MAX_LINKS; i++) {
    link_labels(b, "accel_worker_completion_events_total", &links[i]);
    sb_printf(b, " %llu\n", (unsigned long long)links[i].events);
  }
}

static void render_devices(sbuf *b, const srv_worlds *ws) {
  const dev_world *w = ws->w[0];
  header(b, "accel_device_info", "gauge", "One series per device: its name, backend, state.");
  for (int n = 1; n < w->nnodes; n++) {
    const dev_node *node = &w->nodes[n];
    sb_printf(b, "accel_device_info{device=\"%d\",backend=\"", node->device);
    sb_label_value(b, node->be->name);
    sb_printf(b, "\",name=\"");
    sb_label_value(b, node->info.name);
    sb_printf(b, "\",state=\"%s\"} 1\n", dev_node_state_name(srv_worlds_state(ws, n)));
  }
  per_device(b, ws, "accel_device_memory_used_bytes", "gauge",
             "Bytes of buffer replicas on the device.", srv_worlds_mem_used);
  per_device(b, ws, "accel_device_memory_total_bytes", "gauge", "The device's memory.", mem_total);
  per_device(b, ws, "accel_device_memory_cached_bytes", "gauge",
             "Bytes of freed blocks kept for reuse (not counted as used).", mem_cached);
  per_device(b, ws, "accel_device_tasks_queued", "gauge",
             "Tasks planned on the device and not done (what placement on any device weighs).",
             srv_worlds_queued);
  per_device(b, ws, "accel_device_restarts_total", "counter",
             "Restarts of the device after faults.", restarts);
  per_device(b, ws, "accel_device_quarantined", "gauge",
             "1 while the device is quarantined (past its restart limit).", quarantined);
  render_busy(b, ws);
}

/* The pin caches of backends that keep one and have devices here: one series per backend. */
static void render_pin_caches(sbuf *b, const dev_world *w) {
  static const struct {
    const char *name, *type, *help;
    size_t off;
  } rows[] = {
      {"accel_pinned_bytes", "gauge",
       "Bytes of caller memory the backend keeps registered for DMA (not swappable).",
       offsetof(pin_cache_stats, pinned_bytes)},
      {"accel_pin_cache_ranges", "gauge", "Address ranges the pin cache holds.",
       offsetof(pin_cache_stats, ranges)},
      {"accel_pin_cache_hits_total", "counter", "Copies that went by DMA from a registered range.",
       offsetof(pin_cache_stats, hits)},
      {"accel_pin_cache_pins_total", "counter", "Ranges registered.",
       offsetof(pin_cache_stats, pins)},
      {"accel_pin_cache_invalidated_total", "counter",
       "Registered ranges ended by an unmap, madvise or mremap of their memory.",
       offsetof(pin_cache_stats, invalidated)},
      {"accel_pin_cache_evicted_total", "counter",
       "Registered ranges let go to stay within pinned_max.", offsetof(pin_cache_stats, evicted)},
  };
  pin_cache_stats st[DEV_PIN_CACHES_MAX];
  const char *names[DEV_PIN_CACHES_MAX];
  int n = dev_pin_caches(w, names, st, DEV_PIN_CACHES_MAX);
  if (n == 0)
    return;
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    header(b, rows[r].name, rows[r].type, rows[r].help);
    for (int i = 0; i < n; i++) {
      uint64_t v;
      memcpy(&v, (const char *)&st[i] + rows[r].off, sizeof v);
      sb_printf(b, "%s{backend=\"", rows[r].name);
      sb_label_value(b, names[i]);
      sb_printf(b, "\"} %llu\n", (unsigned long long)v);
    }
  }
}

static void render_bytes(sbuf *b, const srv_worlds *ws) {
  header(b, "accel_bytes_moved_total", "counter",
         "Bytes moved between memory nodes and to or from callers, by direction.");
  const struct {
    const char *dir;
    size_t field;
  } rows[] = {{"host_to_device", offsetof(dev_world, h2d)},
              {"device_to_host", offsetof(dev_world, d2h)},
              {"device_to_device", offsetof(dev_world, d2d)},
              {"written", offsetof(dev_world, written)},
              {"read", offsetof(dev_world, read)}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    sb_printf(b, "accel_bytes_moved_total{direction=\"%s\"} %llu\n", rows[i].dir,
              (unsigned long long)srv_worlds_bytes(ws, rows[i].field));
}

static void gauge(sbuf *b, const char *name, const char *type, const char *help,
                  unsigned long long v) {
  header(b, name, type, help);
  sb_printf(b, "%s %llu\n", name, v);
}

static void render_server(sbuf *b, const srv_worlds *ws, const srv_status_counts *c) {
  header(b, "accel_build_info", "gauge", "acceld's version.");
  sb_printf(b, "accel_build_info{version=\"%s\"} 1\n", ACCEL_VERSION_STRING);
  gauge(b, "accel_up", "gauge",
        "1 while serving, 0 while draining or with every device "
        "quarantined (as /healthz).",
        (unsigned long long)srv_metrics_healthy(ws, c));
  gauge(b, "accel_uptime_seconds", "gauge", "Seconds since acceld started.",
        (unsigned long long)(c->uptime_ms / 1000));
  gauge(b, "accel_connections", "gauge", "Client connections open.", c->connections);
  gauge(b, "accel_sessions", "gauge", "Client sessions.", c->sessions);
  gauge(b, "accel_buffers", "gauge", "Live buffers of every session.", srv_worlds_buffers(ws));
  gauge(b, "accel_ops_in_flight", "gauge", "Ops received and not finished.",
        (unsigned long long)c->ops_in_flight);
  gauge(b, "accel_frames_bad_total", "counter", "Malformed frames refused.",
        (unsigned long long)c->frames_bad);
}

char *srv_metrics_render(const srv_worlds *ws, const srv_status_counts *c) {
  sbuf b = {0};
  dev_world *w = ws->w[0];
  render_server(&b, ws, c);
  render_devices(&b, ws);
  render_threads(&b, w);
  render_pin_caches(&b, w);
  render_bytes(&b, ws);
  srv_telemetry_metrics(&b, w);
  dev_metrics *m = rt_malloc(sizeof *m); /* a megabyte or so: not on the stack */
  if (m == NULL) {
    rt_free(sb_finish(&b));
    return NULL;
  }
  if (srv_worlds_metrics(ws, m)) {
    render_ops(&b, w, m);
    render_histogram(&b, w, m);
  }
  rt_free(m);
  return sb_finish(&b);
}

int srv_metrics_healthy(const srv_worlds *ws, const srv_status_counts *c) {
  if (c->draining)
    return 0;
  for (int n = 1; n < ws->w[0]->nnodes; n++)
    if (srv_worlds_state(ws, n) != DEV_NODE_QUARANTINED)
      return 1;
  return 0;
}
