/* The GPUs' telemetry in the reports (render_telemetry.c), for render_status.c and
 * render_metrics.c. Loop thread. */
#ifndef SRV_RENDER_TELEMETRY_H
#define SRV_RENDER_TELEMETRY_H

#include "actors/world.h"
#include "server/sbuf.h"

/* "telemetry":{"source":"nvml","why":null or why there is none,"gpus":[...]} */
void srv_telemetry_json(sbuf *b, const dev_world *w);
/* A line for each GPU that accel device `device` runs on (indented under the device's). */
void srv_telemetry_text_device(sbuf *b, const dev_world *w, int device);
/* Why there is no telemetry, or the GPUs no accel device runs on. */
void srv_telemetry_text(sbuf *b, const dev_world *w);
/* accel_gpu_telemetry_up and the DCGM_FI_DEV_* series. */
void srv_telemetry_metrics(sbuf *b, const dev_world *w);

#endif
