/* A report's numbers across the device worlds of a daemon's shards (render.h): world 0 gives
 * the devices, every world its counts. On the thread that may read them all (shard 0's loop
 * with the others parked, or the only loop). */
#include <stddef.h>
#include <string.h>

#include "server/render.h"

#include "actors/query.h"

uint64_t srv_worlds_mem_used(const srv_worlds *ws, int n) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < ws->n; i++)
    v += dev_node_mem_used(ws->w[i], n);
  return v;
}

dev_mem_cache srv_worlds_cache(const srv_worlds *ws, int n) {
  dev_mem_cache c = {0};
  for (uint32_t i = 0; i < ws->n; i++) {
    const dev_mem_cache *one = &ws->w[i]->nodes[n].cache;
    c.len += one->len;
    c.bytes += one->bytes;
    c.limit += one->limit;
    c.hits += one->hits;
    c.misses += one->misses;
    c.trimmed += one->trimmed;
  }
  return c;
}

uint64_t srv_worlds_queued(const srv_worlds *ws, int n) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < ws->n; i++)
    v += ws->w[i]->nodes[n].queued;
  return v;
}

uint64_t srv_worlds_busy_ns(const srv_worlds *ws, int n, uint64_t now_ns) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < ws->n; i++)
    v += dev_node_busy_total_ns(&ws->w[i]->nodes[n], now_ns);
  return v;
}

double srv_worlds_busy_share(const srv_worlds *ws, int n) {
  double v = 0;
  for (uint32_t i = 0; i < ws->n; i++)
    v += ws->w[i]->nodes[n].busy_share;
  return v < 1 ? v : 1;
}

/* The states are ordered from serving to quarantined; each is written atomically by its
 * device actor (so /healthz reads them without parking the shards). */
dev_node_state srv_worlds_state(const srv_worlds *ws, int n) {
  dev_node_state v = DEV_NODE_SERVING;
  for (uint32_t i = 0; i < ws->n; i++) {
    dev_node_state one = __atomic_load_n(&ws->w[i]->nodes[n].state, __ATOMIC_RELAXED);
    v = one > v ? one : v;
  }
  return v;
}

uint32_t srv_worlds_restarts(const srv_worlds *ws, int n) {
  uint32_t v = 0;
  for (uint32_t i = 0; i < ws->n; i++)
    if (ws->w[i]->nodes[n].restarts > v)
      v = ws->w[i]->nodes[n].restarts;
  return v;
}

uint32_t srv_worlds_builds(const srv_worlds *ws, int n, double *seconds) {
  uint32_t v = 0;
  *seconds = 0;
  for (uint32_t i = 0; i < ws->n; i++) {
    double s = 0;
    v += dev_node_builds_running(&ws->w[i]->nodes[n], &s);
    *seconds = s > *seconds ? s : *seconds;
  }
  return v;
}

uint64_t srv_worlds_buffers(const srv_worlds *ws) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < ws->n; i++)
    v += dev_live_buffers(ws->w[i]);
  return v;
}

uint64_t srv_worlds_bytes(const srv_worlds *ws, size_t field) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < ws->n; i++)
    v += atomic_load((atomic_ullong *)((char *)ws->w[i] + field));
  return v;
}

int srv_worlds_in_progress(const srv_worlds *ws, uint64_t now_ns, uint64_t min_ns,
                           dev_work_report out[], int max) {
  int n = 0;
  for (uint32_t i = 0; i < ws->n && n < max; i++)
    n += dev_work_in_progress(ws->w[i], now_ns, min_ns, out + n, max - n);
  return n;
}

void srv_worlds_busy_roll(const srv_worlds *ws, uint64_t now_ns) {
  for (uint32_t i = 0; i < ws->n; i++)
    dev_busy_roll(ws->w[i], now_ns);
}

bool srv_worlds_metrics(const srv_worlds *ws, dev_metrics *out) {
  bool any = false;
  memset(out, 0, sizeof *out);
  for (uint32_t i = 0; i < ws->n; i++) {
    const dev_metrics *m = ws->w[i]->metrics;
    if (m == NULL)
      continue;
    any = true;
    const uint64_t *a = &m->ops[0][0][0], *h = &m->hist[0][0][0];
    uint64_t *oa = &out->ops[0][0][0], *oh = &out->hist[0][0][0];
    for (size_t k = 0; k < sizeof m->ops / sizeof *a; k++)
      oa[k] += a[k];
    for (size_t k = 0; k < sizeof m->hist / sizeof *h; k++)
      oh[k] += h[k];
    const double *s = &m->sum_s[0][0];
    double *os = &out->sum_s[0][0];
    for (size_t k = 0; k < sizeof m->sum_s / sizeof *s; k++)
      os[k] += s[k];
  }
  return any;
}
