/* Device telemetry: what NVIDIA's management library says of the host's GPUs (utilization,
 * memory, temperature, power, clocks, ECC and XID errors), read by a thread of its own every
 * interval, so that a slow or hung driver call never stalls the loop; reports read the latest
 * snapshot. A GPU is matched to accel's devices on it by PCI address. */
#ifndef DEV_TELEMETRY_H
#define DEV_TELEMETRY_H

#include "actors/world.h"
#include "backends/nvml/nvml.h"

#define DEV_TELEMETRY_MAX_GPUS 16

typedef struct dev_telemetry dev_telemetry;

typedef struct dev_gpu_report {
  unsigned index; /* NVML's index (nvidia-smi's) */
  be_gpu_identity id;
  be_gpu_sample s;
  bool lost;         /* NVML says the GPU fell off the bus */
  uint64_t xids;     /* XID errors reported since telemetry started */
  uint64_t last_xid; /* the latest XID number; 0: none */
  int devices[4];    /* accel devices on this GPU (CUDA, NVIDIA's OpenCL), in index order */
  int ndevices;
} dev_gpu_report;

/* Starts the thread (loop thread, once per world). 0, or ACCEL_ENOMEM/ACCEL_ESYS; a host with
 * no NVML is not an error: reports say why there is no telemetry. */
RT_MUST_USE int dev_telemetry_start(dev_world *w, uint32_t interval_ms);
/* Ends the thread; idempotent (dev_world_fini calls it). */
void dev_telemetry_stop(dev_world *w);
/* The latest snapshot: how many GPUs were stored in out (at most max), the devices of this
 * world matched to each. -1 when telemetry is off or has none, with `why` ("off", "no NVML:
 * ...", "waiting for the first sample"). Loop thread. */
int dev_telemetry_read(const dev_world *w, dev_gpu_report out[], int max, char *why,
                       size_t why_len);

#endif
