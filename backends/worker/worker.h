/* Device workers: a backend's devices served from a process of their own, so that whatever
 * faults there (a client's kernel writing out of bounds on a CPU OpenCL device, a CUDA kernel
 * that breaks its context for good) costs that process, not acceld.
 *
 * acceld sees such a backend through a proxy: a be_ops table (the real backend's packages and
 * flags) whose entries send each call to the worker (wire.h) and whose completions come back
 * through a reader thread. The worker process (accel-device, daemon/accel_device.c) runs the
 * real backend. Devices that work together (a backend with peer copies or collectives: CUDA)
 * share one worker per backend, so NCCL and peer copies keep running inside one process;
 * devices of other backends (OpenCL) get one worker each.
 *
 * A worker that dies, or a device of it that reports a sticky fault, is a device fault: every
 * pending completion reports ACCEL_EDEVLOST at once, and the device actor restarts the device
 * (close, open). Closing a faulted device kills its worker (SIGKILL: a kernel that never ends
 * ends with it); the next open starts a fresh one. abort kills the worker at once. */
#ifndef BW_WORKER_H
#define BW_WORKER_H

#include <stdint.h>

#include "backends/backend.h"

typedef struct bw_options {
  const char *helper;   /* the accel-device executable */
  uint64_t stage_bytes; /* each worker's staging region (0: BW_STAGE_DEFAULT) */
} bw_options;

#define BW_STAGE_DEFAULT ((uint64_t)64 << 20)

/* Process-wide, before any device opens (acceld at start-up, tests). */
void bw_configure(const bw_options *o);

/* The proxy for `real` (a registered backend): a table of the process's, the same pointer for
 * the same backend; NULL if `real` is NULL. */
const be_ops *bw_proxy_ops(const be_ops *real);

/* What the thread serving one link of a live worker has spent on its calls: submitting them
 * to the device (the driver's calls), not waiting for them. */
typedef struct bw_link_busy {
  const char *backend; /* "cuda", "opencl", ... */
  int pid;             /* the worker process */
  uint32_t link;       /* 0: the link it was started with */
  uint64_t busy_ns;    /* since the link began: its time less what the worker says it waited */
  /* Completions the worker sent on the link and the events it recorded for them (its word,
   * never reported lower than before): completions per event say how well they group. */
  uint64_t completions, events;
} bw_link_busy;

/* Fills out[0..max) with the live worker links (those through shared rings), returns how many
 * there are (more than max: the rest left out). Any thread. */
size_t bw_links_busy(bw_link_busy *out, size_t max);

/* The worker's main(): accel-device BACKEND, its channels on fds 3..6 (wire.h). Returns the
 * process's exit status. */
int bw_worker_main(int argc, char **argv);

#endif
