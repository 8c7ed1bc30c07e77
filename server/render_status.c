/* Reports on the worlds and the supervision tree (render.h), read through the worlds'
 * answers (actors/query.h, render_worlds.c). They run on a loop thread with every other
 * loop whose world they read parked, so plain reads see a consistent picture. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/render.h"

#include "actors/busy.h"
#include "actors/device.h"
#include "actors/query.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"
#include "server/render_telemetry.h"
#include "server/sbuf.h"

/* Why a backend has no device here: "not built", or its probe's own words. */
static const char *backend_absence(const be_entry *e, char *why, size_t len) {
  if (e->ops == NULL)
    return "not built";
  int count = 0;
  why[0] = '\0';
  if (e->ops->probe(&count, why, len) == 0 && why[0] == '\0')
    snprintf(why, len, "no device");
  return why;
}

static const char *kind_name(be_device_kind kind) {
  return kind == BE_KIND_GPU ? "gpu" : kind == BE_KIND_ACCELERATOR ? "accelerator" : "cpu";
}

/* ---- packages and dtypes ---- */

static const char *const dtype_names[ACCEL_DTYPE_MAX_ + 1] = {
    [ACCEL_F32] = "f32",   [ACCEL_U32] = "u32", [ACCEL_F64] = "f64",  [ACCEL_F16] = "f16",
    [ACCEL_BF16] = "bf16", [ACCEL_I32] = "i32", [ACCEL_BOOL] = "bool"};

/* The dtypes of a set, space-separated (text) or as a JSON array. */
static void dtype_list(sbuf *b, uint32_t set, bool json) {
  const char *sep = "";
  sb_printf(b, json ? "[" : "");
  for (int t = 1; t <= ACCEL_DTYPE_MAX_; t++)
    if (set & ACCEL_DTYPE_BIT(t)) {
      sb_printf(b, json ? "%s\"%s\"" : "%s%s", sep, dtype_names[t]);
      sep = json ? "," : " ";
    }
  sb_printf(b, json ? "]" : "");
}

/* The user-kernel source kinds of a set (1u << accel_source), as names. */
static void source_list(sbuf *b, uint32_t set, bool json) {
  static const char *const names[] = {NULL, "cuda", "ptx", "opencl", "spirv"};
  const char *sep = "";
  sb_printf(b, json ? "[" : "");
  for (uint32_t s = ACCEL_SOURCE_CUDA; s <= ACCEL_SOURCE_SPIRV; s++)
    if (set & (1u << s)) {
      sb_printf(b, json ? "%s\"%s\"" : "%s%s", sep, names[s]);
      sep = json ? "," : " ";
    }
  sb_printf(b, json ? "]" : "");
}

static void json_packages(sbuf *b, const dev_node *node) {
  const dev_caps *c = &node->caps;
  sb_printf(b, ",\"packages\":{");
  const char *sep = "";
  if (c->packages & ACCEL_PKG_BLAS) {
    sb_printf(b, "\"blas\":{\"gemm\":");
    dtype_list(b, dev_caps_gemm_dtypes(c), true);
    sb_printf(b, ",\"vector\":");
    dtype_list(b, c->vector_dtypes, true);
    sb_printf(b, "}");
    sep = ",";
  }
  if (c->packages & ACCEL_PKG_RNG) {
    sb_printf(b, "%s\"rng\":", sep);
    dtype_list(b, c->rng_dtypes | ACCEL_DTYPE_BIT(ACCEL_U32), true);
    sep = ",";
  }
  if (c->packages & ACCEL_PKG_NN) {
    sb_printf(b, "%s\"nn\":", sep);
    dtype_list(b, c->nn_dtypes, true);
    sep = ",";
  }
  if (c->packages & ACCEL_PKG_MODULE) {
    sb_printf(b, "%s\"module\":", sep);
    source_list(b, c->sources, true);
    sep = ",";
  }
  if (c->packages & ACCEL_PKG_COLLECTIVE) {
    sb_printf(b, "%s\"collective\":", sep);
    dtype_list(b, c->coll_dtypes, true);
  }
  sb_printf(b, "}");
}

static void text_packages(sbuf *b, const dev_node *node) {
  const dev_caps *c = &node->caps;
  sb_printf(b, "  packages:");
  if (c->packages == 0)
    sb_printf(b, " none");
  if (c->packages & ACCEL_PKG_BLAS) {
    sb_printf(b, " blas (gemm ");
    dtype_list(b, dev_caps_gemm_dtypes(c), false);
    sb_printf(b, "; axpy/dot/scal ");
    dtype_list(b, c->vector_dtypes, false);
    sb_printf(b, ")");
  }
  if (c->packages & ACCEL_PKG_RNG) {
    sb_printf(b, " rng (");
    dtype_list(b, c->rng_dtypes | ACCEL_DTYPE_BIT(ACCEL_U32), false);
    sb_printf(b, ")");
  }
  if (c->packages & ACCEL_PKG_NN) {
    sb_printf(b, " nn (");
    dtype_list(b, c->nn_dtypes, false);
    sb_printf(b, ")");
  }
  if (c->packages & ACCEL_PKG_MODULE) {
    sb_printf(b, " module (");
    source_list(b, c->sources, false);
    sb_printf(b, ")");
  }
  if (c->packages & ACCEL_PKG_COLLECTIVE) {
    sb_printf(b, " collective (");
    dtype_list(b, c->coll_dtypes, false);
    sb_printf(b, ")");
  }
  sb_printf(b, "\n");
}

/* ---- long work in progress (accelctl top) ---- */

#define LONG_WORK_NS 1000000000ull /* work shown once it has been on a queue this long */
#define LONG_WORK_MAX 32

static void json_in_progress(sbuf *b, const srv_worlds *ws) {
  const dev_world *w = ws->w[0];
  dev_work_report r[LONG_WORK_MAX];
  int n = srv_worlds_in_progress(ws, rt_mono_ns(), LONG_WORK_NS, r, LONG_WORK_MAX);
  sb_printf(b, "\"in_progress\":[");
  for (int i = 0; i < n; i++) {
    sb_printf(b, "%s{\"device\":%d,\"queue\":\"%s\",\"what\":", i ? "," : "", r[i].device,
              r[i].queue);
    sb_json_str(b, r[i].what);
    sb_printf(b, ",\"bytes\":%llu,\"seconds\":%.3f,\"client\":", (unsigned long long)r[i].bytes,
              r[i].seconds);
    sb_json_str(b, r[i].client);
    sb_printf(b, "}");
  }
  for (int k = 1; k < w->nnodes; k++) {
    double s;
    uint32_t builds = srv_worlds_builds(ws, k, &s);
    if (builds)
      sb_printf(b,
                "%s{\"device\":%d,\"queue\":\"build\",\"what\":\"module build\","
                "\"count\":%u,\"seconds\":%.3f}",
                n++ ? "," : "", w->nodes[k].device, builds, s);
  }
  sb_printf(b, "]");
}

static void text_in_progress(sbuf *b, const srv_worlds *ws) {
  const dev_world *w = ws->w[0];
  dev_work_report r[LONG_WORK_MAX];
  int n = srv_worlds_in_progress(ws, rt_mono_ns(), LONG_WORK_NS, r, LONG_WORK_MAX);
  for (int i = 0; i < n; i++) {
    sb_printf(b, "in progress: device %d %s queue: %s", r[i].device, r[i].queue, r[i].what);
    if (r[i].bytes) {
      char size[32];
      sb_human_bytes(r[i].bytes, size, sizeof size);
      sb_printf(b, " of %s", size);
    }
    sb_printf(b, " for %.1f s (client %s)\n", r[i].seconds, r[i].client);
  }
  for (int k = 1; k < w->nnodes; k++) {
    double s;
    uint32_t builds = srv_worlds_builds(ws, k, &s);
    if (builds)
      sb_printf(b, "in progress: device %d: %u module build%s, the first for %.1f s\n",
                w->nodes[k].device, builds, builds > 1 ? "s" : "", s);
  }
}

/* ---- JSON ---- */

static void json_device(sbuf *b, const srv_worlds *ws, int n) {
  const dev_node *node = &ws->w[0]->nodes[n];
  dev_mem_cache cache = srv_worlds_cache(ws, n);
  sb_printf(b, "{\"index\":%d,\"name\":", node->device);
  sb_json_str(b, node->info.name);
  sb_printf(b, ",\"backend\":");
  sb_json_str(b, node->be->name);
  sb_printf(b, ",\"kind\":\"%s\"", kind_name(node->info.kind));
  sb_printf(b,
            ",\"state\":\"%s\",\"restarts\":%u,\"mem_used\":%llu,\"mem_total\":%llu,"
            "\"compute_units\":%u,\"mem_cached\":%llu,\"alloc_cache_hits\":%llu,"
            "\"alloc_cache_misses\":%llu,\"tasks_queued\":%u",
            dev_node_state_name(srv_worlds_state(ws, n)), srv_worlds_restarts(ws, n),
            (unsigned long long)srv_worlds_mem_used(ws, n),
            (unsigned long long)node->info.mem_bytes, node->info.compute_units,
            (unsigned long long)cache.bytes, (unsigned long long)cache.hits,
            (unsigned long long)cache.misses, (unsigned)srv_worlds_queued(ws, n));
  sb_printf(b, ",\"busy_s\":%.6f,\"busy_share\":%.4f",
            (double)srv_worlds_busy_ns(ws, n, rt_mono_ns()) * 1e-9, srv_worlds_busy_share(ws, n));
  json_packages(b, node);
  sb_printf(b, "}");
}

static void json_backends(sbuf *b, const dev_world *w) {
  sb_printf(b, "\"backends\":[");
  const char *sep = "";
  for (const be_entry *e = be_registry(); e->name; e++) {
    char why[128];
    int n = e->ops ? dev_backend_devices(w, e->name) : 0;
    sb_printf(b, "%s{\"name\":", sep);
    sb_json_str(b, e->name);
    sb_printf(b, ",\"built\":%s,\"devices\":%d", e->ops ? "true" : "false", n);
    if (n == 0) {
      sb_printf(b, ",\"why\":");
      sb_json_str(b, backend_absence(e, why, sizeof why));
    }
    sb_printf(b, "}");
    sep = ",";
  }
  sb_printf(b, "]");
}

/* The pin caches of backends that keep one and have devices here (process-wide counters). */
static void json_pin_caches(sbuf *b, const dev_world *w) {
  const char *names[DEV_PIN_CACHES_MAX];
  pin_cache_stats st[DEV_PIN_CACHES_MAX];
  int n = dev_pin_caches(w, names, st, DEV_PIN_CACHES_MAX);
  sb_printf(b, "\"pin_caches\":[");
  for (int i = 0; i < n; i++) {
    sb_printf(b, "%s{\"backend\":", i > 0 ? "," : "");
    sb_json_str(b, names[i]);
    sb_printf(b,
              ",\"pinned_bytes\":%llu,\"ranges\":%llu,\"hits\":%llu,\"pins\":%llu,"
              "\"pin_failed\":%llu,\"refused\":%llu,\"invalidated\":%llu,\"evicted\":%llu}",
              (unsigned long long)st[i].pinned_bytes, (unsigned long long)st[i].ranges,
              (unsigned long long)st[i].hits, (unsigned long long)st[i].pins,
              (unsigned long long)st[i].pin_failed, (unsigned long long)st[i].refused,
              (unsigned long long)st[i].invalidated, (unsigned long long)st[i].evicted);
  }
  sb_printf(b, "]");
}

char *srv_status_json(const srv_worlds *ws, const srv_status_counts *c) {
  sbuf b = {0};
  dev_world *w = ws->w[0];
  srv_worlds_busy_roll(ws, rt_mono_ns());
  accel_runtime_stats rs;
  accel_runtime_get_stats(w->rt, &rs);
  sb_printf(&b, "{\"version\":\"%s\",\"uptime_ms\":%llu,\"state\":\"%s\",\"devices\":[",
            ACCEL_VERSION_STRING, (unsigned long long)c->uptime_ms,
            c->draining ? "draining" : "serving");
  for (int n = 1; n < w->nnodes; n++) {
    if (n > 1)
      sb_printf(&b, ",");
    json_device(&b, ws, n);
  }
  sb_printf(&b, "],");
  json_backends(&b, w);
  sb_printf(&b, ",");
  json_pin_caches(&b, w);
  sb_printf(&b, ",");
  srv_telemetry_json(&b, w);
  sb_printf(&b, ",");
  json_in_progress(&b, ws);
  sb_printf(&b,
            ",\"host_mem_used\":%llu,\"connections\":%u,\"sessions\":%u,\"buffers\":%llu,"
            "\"ops_completed\":%llu,\"ops_failed\":%llu,\"ops_in_flight\":%llu,"
            "\"replies_early\":%llu,\"light_clients\":%u,\"frames_bad\":%llu,\"fault_injection\":%"
            "s,\"actors\":%llu,"
            "\"dead_letters\":%llu,\"busy_refusals\":%llu,\"actor_restarts\":%llu}",
            (unsigned long long)srv_worlds_mem_used(ws, DEV_HOST_NODE), c->connections, c->sessions,
            (unsigned long long)srv_worlds_buffers(ws), (unsigned long long)c->ops_completed,
            (unsigned long long)c->ops_failed, (unsigned long long)c->ops_in_flight,
            (unsigned long long)c->replies_early, c->light_clients,
            (unsigned long long)c->frames_bad, w->fault_injection ? "true" : "false",
            (unsigned long long)rs.actors_live, (unsigned long long)rs.dead_letters,
            (unsigned long long)rs.busy_refusals, (unsigned long long)rs.restarts);
  return sb_finish(&b);
}

/* ---- text ---- */

static void text_device(sbuf *b, const srv_worlds *ws, int n, const srv_gpus *g) {
  const dev_node *node = &ws->w[0]->nodes[n];
  char used[32], total[32];
  sb_human_bytes(srv_worlds_mem_used(ws, n), used, sizeof used);
  sb_human_bytes(node->info.mem_bytes, total, sizeof total);
  sb_printf(b,
            "device %d: %s (%s) %s, restarts %u, memory %s used of %s, %u units, kind %s, "
            "%.0f%% busy\n",
            node->device, node->info.name, node->be->name,
            dev_node_state_name(srv_worlds_state(ws, n)), srv_worlds_restarts(ws, n), used, total,
            node->info.compute_units, kind_name(node->info.kind),
            srv_worlds_busy_share(ws, n) * 100.0);
  text_packages(b, node);
  srv_telemetry_text_device(b, g, node->device);
}

char *srv_status_devices(const srv_worlds *ws) {
  sbuf b = {0};
  dev_world *w = ws->w[0];
  srv_worlds_busy_roll(ws, rt_mono_ns());
  srv_gpus gpus; /* one snapshot for every device's line */
  srv_gpus_read(w, &gpus);
  const srv_gpus *g = &gpus;
  for (int n = 1; n < w->nnodes; n++)
    text_device(&b, ws, n, g);
  for (const be_entry *e = be_registry(); e->name; e++) {
    char why[128];
    if (e->ops == NULL || dev_backend_devices(w, e->name) == 0)
      sb_printf(&b, "%s: %s\n", e->name, backend_absence(e, why, sizeof why));
  }
  srv_telemetry_text(&b, g);
  return sb_finish(&b);
}

char *srv_status_text(const srv_worlds *ws, const srv_status_counts *c) {
  sbuf b = {0};
  dev_world *w = ws->w[0];
  srv_worlds_busy_roll(ws, rt_mono_ns());
  srv_gpus gpus; /* one snapshot for every device's line */
  srv_gpus_read(w, &gpus);
  const srv_gpus *g = &gpus;
  accel_runtime_stats rs;
  accel_runtime_get_stats(w->rt, &rs);
  sb_printf(&b, "acceld %s: %s, up %llu.%03llu s\n", ACCEL_VERSION_STRING,
            c->draining ? "draining" : "serving", (unsigned long long)(c->uptime_ms / 1000),
            (unsigned long long)(c->uptime_ms % 1000));
  sb_printf(&b, "clients: %u connections, %u sessions, %llu buffers\n", c->connections, c->sessions,
            (unsigned long long)srv_worlds_buffers(ws));
  sb_printf(&b, "ops: %llu completed (%llu failed), %llu in flight\n",
            (unsigned long long)c->ops_completed, (unsigned long long)c->ops_failed,
            (unsigned long long)c->ops_in_flight);
  sb_printf(&b, "runtime: %llu actors, %llu dead letters, %llu restarts\n",
            (unsigned long long)rs.actors_live, (unsigned long long)rs.dead_letters,
            (unsigned long long)rs.restarts);
  for (int n = 1; n < w->nnodes; n++)
    text_device(&b, ws, n, g);
  srv_telemetry_text(&b, g);
  text_in_progress(&b, ws);
  const char *names[DEV_PIN_CACHES_MAX];
  pin_cache_stats st[DEV_PIN_CACHES_MAX];
  int npin = dev_pin_caches(w, names, st, DEV_PIN_CACHES_MAX);
  for (int i = 0; i < npin; i++) {
    char pinned[32];
    sb_human_bytes(st[i].pinned_bytes, pinned, sizeof pinned);
    sb_printf(&b, "pin cache (%s): %s registered in %llu ranges, %llu DMA hits, %llu invalidated\n",
              names[i], pinned, (unsigned long long)st[i].ranges, (unsigned long long)st[i].hits,
              (unsigned long long)st[i].invalidated);
  }
  return sb_finish(&b);
}

/* ---- the tree ---- */

static void tree_visit(const accel_actor_view *v, void *arg) {
  sbuf *b = arg;
  sb_printf(b, "%*s%s [%s]", (int)(2 * v->depth), "", v->name, v->state);
  if (v->restarts_total || v->restarts)
    sb_printf(b, " restarts %llu (%u in window)", (unsigned long long)v->restarts_total,
              v->restarts);
  if (v->mailbox_used)
    sb_printf(b, " mailbox %u", v->mailbox_used);
  sb_printf(b, "\n");
}

/* Every device with its state and restarts: a quarantined device has no actors left in the
 * tree, so the tree alone would not show it. */
static void tree_devices(sbuf *b, const srv_worlds *ws) {
  const dev_world *w = ws->w[0];
  sb_printf(b, "devices:\n");
  for (int n = 1; n < w->nnodes; n++) {
    const dev_node *node = &w->nodes[n];
    sb_printf(b, "  device %d: %s (%s) %s, restarts %u\n", node->device, node->info.name,
              node->be->name, dev_node_state_name(srv_worlds_state(ws, n)),
              srv_worlds_restarts(ws, n));
  }
}

char *srv_status_tree(accel_runtime *rt, const srv_worlds *ws) {
  sbuf b = {0};
  if (accel_runtime_walk(rt, tree_visit, &b) != 0) {
    rt_free(b.s);
    return NULL;
  }
  tree_devices(&b, ws);
  return sb_finish(&b);
}

typedef struct tree_json {
  sbuf *b;
  const char *sep;
} tree_json;

static void tree_visit_json(const accel_actor_view *v, void *arg) {
  tree_json *t = arg;
  sb_printf(t->b, "%s{\"name\":", t->sep);
  sb_json_str(t->b, v->name);
  sb_printf(t->b, ",\"state\":");
  sb_json_str(t->b, v->state);
  sb_printf(t->b,
            ",\"depth\":%u,\"restarts_total\":%llu,\"restarts_in_window\":%u,"
            "\"mailbox\":%u}",
            (unsigned)v->depth, (unsigned long long)v->restarts_total, v->restarts,
            v->mailbox_used);
  t->sep = ",";
}

char *srv_status_tree_json(accel_runtime *rt, const srv_worlds *ws) {
  sbuf b = {0};
  const dev_world *w = ws->w[0];
  tree_json t = {&b, ""};
  sb_printf(&b, "{\"actors\":[");
  if (accel_runtime_walk(rt, tree_visit_json, &t) != 0) {
    rt_free(b.s);
    return NULL;
  }
  sb_printf(&b, "],\"devices\":[");
  for (int n = 1; n < w->nnodes; n++) {
    const dev_node *node = &w->nodes[n];
    sb_printf(&b, "%s{\"index\":%d,\"name\":", n > 1 ? "," : "", node->device);
    sb_json_str(&b, node->info.name);
    sb_printf(&b, ",\"backend\":");
    sb_json_str(&b, node->be->name);
    sb_printf(&b, ",\"state\":\"%s\",\"restarts\":%u}",
              dev_node_state_name(srv_worlds_state(ws, n)), srv_worlds_restarts(ws, n));
  }
  sb_printf(&b, "]}");
  return sb_finish(&b);
}
