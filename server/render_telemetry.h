/* The GPUs' telemetry in the reports (render_telemetry.c), for render_status.c and
 * render_metrics.c. Loop thread. */
#ifndef SRV_RENDER_TELEMETRY_H
#define SRV_RENDER_TELEMETRY_H

#include "actors/telemetry.h"
#include "server/sbuf.h"

/* The telemetry snapshot, read once per report. */
typedef struct srv_gpus {
  dev_gpu_report r[DEV_TELEMETRY_MAX_GPUS];
  int n; /* -1: none, `why` says why */
  char why[192];
} srv_gpus;

void srv_gpus_read(const dev_world *w, srv_gpus *g);

/* "telemetry":{"source":"nvml","why":null or why there is none,"gpus":[...]} */
void srv_telemetry_json(sbuf *b, const dev_world *w);
/* A line for each GPU that accel device `device` runs on (indented under the device's). */
void srv_telemetry_text_device(sbuf *b, const srv_gpus *g, int device);
/* Why there is no telemetry, or the GPUs no accel device runs on. */
void srv_telemetry_text(sbuf *b, const srv_gpus *g);
/* accel_gpu_telemetry_up and the DCGM_FI_DEV_* series. */
void srv_telemetry_metrics(sbuf *b, const dev_world *w);

#endif
