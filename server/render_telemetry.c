#include "server/render_telemetry.h"
/* The GPUs' telemetry (actors/telemetry.h) in acceld's reports: the status JSON's "telemetry"
 * member, a line under each device in the text reports, and /metrics under the names
 * dcgm-exporter uses (DCGM_FI_DEV_*, same units: MiB, watts, MHz, percent), so that its
 * dashboards and alerts work unchanged. A reading the GPU does not give is left out (JSON:
 * null), never shown as 0. */
#include <stdio.h>
#include <string.h>

#include "actors/telemetry.h"
#include "server/render.h"

void srv_gpus_read(const dev_world *w, srv_gpus *g) {
  g->n = dev_telemetry_read(w, g->r, DEV_TELEMETRY_MAX_GPUS, g->why, sizeof g->why);
}

static void json_num(sbuf *b, const char *key, int64_t v) {
  if (v < 0)
    sb_printf(b, ",\"%s\":null", key);
  else
    sb_printf(b, ",\"%s\":%lld", key, (long long)v);
}

static void json_gpu(sbuf *b, const dev_gpu_report *r) {
  sb_printf(b, "{\"index\":%u,\"name\":", r->index);
  sb_json_str(b, r->id.name);
  sb_printf(b, ",\"uuid\":");
  sb_json_str(b, r->id.uuid);
  sb_printf(b, ",\"pci_bus_id\":");
  sb_json_str(b, r->id.pci_bus_id);
  sb_printf(b, ",\"devices\":[");
  for (int i = 0; i < r->ndevices; i++)
    sb_printf(b, "%s%d", i ? "," : "", r->devices[i]);
  sb_printf(b, "],\"lost\":%s", r->lost ? "true" : "false");
  const be_gpu_sample *s = &r->s;
  json_num(b, "utilization_gpu_pct", s->util_gpu_pct);
  json_num(b, "utilization_memory_pct", s->util_mem_pct);
  json_num(b, "memory_used", s->mem_used);
  json_num(b, "memory_total", s->mem_total);
  json_num(b, "temperature_c", s->temp_c);
  if (s->power_mw < 0)
    sb_printf(b, ",\"power_w\":null");
  else
    sb_printf(b, ",\"power_w\":%.3f", (double)s->power_mw / 1000.0);
  json_num(b, "sm_clock_mhz", s->sm_clock_mhz);
  json_num(b, "memory_clock_mhz", s->mem_clock_mhz);
  json_num(b, "ecc_corrected", s->ecc_corrected);
  json_num(b, "ecc_uncorrected", s->ecc_uncorrected);
  sb_printf(b, ",\"xid_errors\":%llu,\"last_xid\":%llu}", (unsigned long long)r->xids,
            (unsigned long long)r->last_xid);
}

void srv_telemetry_json(sbuf *b, const dev_world *w) {
  srv_gpus g;
  srv_gpus_read(w, &g);
  sb_printf(b, "\"telemetry\":{\"source\":\"nvml\",\"why\":");
  if (g.n < 0)
    sb_json_str(b, g.why);
  else
    sb_printf(b, "null");
  sb_printf(b, ",\"gpus\":[");
  for (int i = 0; i < g.n; i++) {
    if (i)
      sb_printf(b, ",");
    json_gpu(b, &g.r[i]);
  }
  sb_printf(b, "]}");
}

/* "gpu 0: 37% busy, 12% memory busy, 1.00 GiB of 80.0 GiB, 41 C, 123.5 W, SM 1980 MHz, memory
 * 2619 MHz, ECC 3 corrected 0 uncorrected, XID 1 (last 79)" */
static void text_gpu(sbuf *b, const char *indent, const dev_gpu_report *r) {
  const be_gpu_sample *s = &r->s;
  sb_printf(b, "%sgpu %u: %s", indent, r->index, r->lost ? "LOST, " : "");
  if (s->util_gpu_pct >= 0)
    sb_printf(b, "%d%% busy, %d%% memory busy", s->util_gpu_pct, s->util_mem_pct);
  else
    sb_printf(b, "utilization n/a");
  if (s->mem_used >= 0 && s->mem_total >= 0) {
    char used[32], total[32];
    sb_human_bytes((uint64_t)s->mem_used, used, sizeof used);
    sb_human_bytes((uint64_t)s->mem_total, total, sizeof total);
    sb_printf(b, ", %s of %s", used, total);
  }
  if (s->temp_c >= 0)
    sb_printf(b, ", %d C", s->temp_c);
  if (s->power_mw >= 0)
    sb_printf(b, ", %.1f W", (double)s->power_mw / 1000.0);
  if (s->sm_clock_mhz >= 0)
    sb_printf(b, ", SM %d MHz", s->sm_clock_mhz);
  if (s->mem_clock_mhz >= 0)
    sb_printf(b, ", memory %d MHz", s->mem_clock_mhz);
  if (s->ecc_corrected >= 0)
    sb_printf(b, ", ECC %lld corrected %lld uncorrected", (long long)s->ecc_corrected,
              (long long)(s->ecc_uncorrected < 0 ? 0 : s->ecc_uncorrected));
  sb_printf(b, ", XID %llu", (unsigned long long)r->xids);
  if (r->xids)
    sb_printf(b, " (last %llu)", (unsigned long long)r->last_xid);
  sb_printf(b, "\n");
}

static bool gpu_has(const dev_gpu_report *r, int device) {
  for (int i = 0; i < r->ndevices; i++)
    if (r->devices[i] == device)
      return true;
  return false;
}

void srv_telemetry_text_device(sbuf *b, const srv_gpus *g, int device) {
  for (int i = 0; i < g->n; i++)
    if (gpu_has(&g->r[i], device))
      text_gpu(b, "  ", &g->r[i]);
}

void srv_telemetry_text(sbuf *b, const srv_gpus *g) {
  if (g->n < 0) {
    sb_printf(b, "gpu telemetry: %s\n", g->why);
    return;
  }
  for (int i = 0; i < g->n; i++)
    if (g->r[i].ndevices == 0) { /* the others are shown under their devices */
      sb_printf(b, "%s (%s, not served by accel):\n", g->r[i].id.name, g->r[i].id.pci_bus_id);
      text_gpu(b, "  ", &g->r[i]);
    }
}

/* ---- /metrics ---- */

static void labels(sbuf *b, const dev_gpu_report *r) {
  sb_printf(b, "{gpu=\"%u\",UUID=\"", r->index);
  sb_label_value(b, r->id.uuid);
  sb_printf(b, "\",pci_bus_id=\"");
  sb_label_value(b, r->id.pci_bus_id);
  sb_printf(b, "\",modelName=\"");
  sb_label_value(b, r->id.name);
  sb_printf(b, "\",accel_device=\"");
  if (r->ndevices > 0)
    sb_printf(b, "%d", r->devices[0]);
  sb_printf(b, "\"}");
}

typedef struct metric {
  const char *name, *type, *help;
  double scale;                              /* the sample's unit to the metric's */
  int64_t (*value)(const dev_gpu_report *r); /* < 0: not reported */
} metric;

static int64_t util_gpu(const dev_gpu_report *r) {
  return r->s.util_gpu_pct;
}
static int64_t util_mem(const dev_gpu_report *r) {
  return r->s.util_mem_pct;
}
static int64_t fb_used(const dev_gpu_report *r) {
  return r->s.mem_used;
}
static int64_t fb_free(const dev_gpu_report *r) {
  return r->s.mem_used < 0 || r->s.mem_total < 0 ? -1 : r->s.mem_total - r->s.mem_used;
}
static int64_t fb_total(const dev_gpu_report *r) {
  return r->s.mem_total;
}
static int64_t temp(const dev_gpu_report *r) {
  return r->s.temp_c;
}
static int64_t power(const dev_gpu_report *r) {
  return r->s.power_mw;
}
static int64_t sm_clock(const dev_gpu_report *r) {
  return r->s.sm_clock_mhz;
}
static int64_t mem_clock(const dev_gpu_report *r) {
  return r->s.mem_clock_mhz;
}
static int64_t ecc_sbe(const dev_gpu_report *r) {
  return r->s.ecc_corrected;
}
static int64_t ecc_dbe(const dev_gpu_report *r) {
  return r->s.ecc_uncorrected;
}
static int64_t last_xid(const dev_gpu_report *r) {
  return (int64_t)r->last_xid;
}
static int64_t xids(const dev_gpu_report *r) {
  return (int64_t)r->xids;
}

#define MIB (1.0 / 1048576.0)
static const metric metrics[] = {
    {"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", 1, util_gpu},
    {"DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", 1, util_mem},
    {"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", MIB, fb_used},
    {"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", MIB, fb_free},
    {"DCGM_FI_DEV_FB_TOTAL", "gauge", "Framebuffer memory total (in MiB).", MIB, fb_total},
    {"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", 1, temp},
    {"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", 1e-3, power},
    {"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", 1, sm_clock},
    {"DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", 1, mem_clock},
    {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors.",
     1, ecc_sbe},
    {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors.",
     1, ecc_dbe},
    {"DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", 1, last_xid},
    {"accel_gpu_xid_errors_total", "counter", "XID errors reported since acceld started.", 1, xids},
};

void srv_telemetry_metrics(sbuf *b, const dev_world *w) {
  srv_gpus g;
  srv_gpus_read(w, &g);
  sb_printf(b,
            "# HELP accel_gpu_telemetry_up 1 while NVML answers, else 0 (status JSON's "
            "telemetry.why says why).\n# TYPE accel_gpu_telemetry_up gauge\n"
            "accel_gpu_telemetry_up %d\n",
            g.n >= 0);
  for (size_t m = 0; g.n > 0 && m < sizeof metrics / sizeof metrics[0]; m++) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", metrics[m].name, metrics[m].help, metrics[m].name,
              metrics[m].type);
    for (int i = 0; i < g.n; i++) {
      int64_t v = metrics[m].value(&g.r[i]);
      if (v < 0)
        continue;
      sb_printf(b, "%s", metrics[m].name);
      labels(b, &g.r[i]);
      if (metrics[m].scale == 1)
        sb_printf(b, " %lld\n", (long long)v);
      else
        sb_printf(b, " %.3f\n", (double)v * metrics[m].scale);
    }
  }
}
