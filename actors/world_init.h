/* Setting up a world: the node table (world.c). */
#ifndef DEV_WORLD_INIT_H
#define DEV_WORLD_INIT_H

#include "actors/world.h"
#include "runtime/attr.h"

typedef struct dev_world_opts {
  uint32_t cpu_devices; /* CPU devices, each its own memory node */
  int fault_injection;
  accel_completion completion;
  uint32_t max_restarts, restart_window_ms;
  int tf32;            /* sgemm on TF32 tensor cores by default, where devices have them */
  int cuda_primary;    /* CUDA devices in their GPU's primary context (collectives through NCCL) */
  uint64_t pinned_max; /* be_open_opts.pinned_max: 0 the default, BE_PINNED_OFF none */
  /* The backends to open, in order, comma-separated ("cpu,cuda,opencl"); devices are
   * numbered in that order (the `cpu_devices` CPU devices where "cpu" is) and, among devices
   * of one kind, placement prefers earlier backends. Backends not listed are not opened (the
   * host node is always served by the CPU backend). Empty: every backend of the build, CPU
   * first. */
  char backends[64];
  /* The backends whose devices run in worker processes (backends/worker/worker.h), comma-
   * separated; empty: every device in this process (bw_configure must have named the worker
   * executable before). The cpu backend's CPU devices and the host stay in the process. */
  char workers[64];
  /* Several worlds of one process (acceld's device loops): the loop its actors live on (1 +
   * its index; 0: placed as usual) and the link of each device worker its devices open
   * through (be_open_opts.worker_link). */
  uint32_t loop, worker_link;
} dev_world_opts;

/* 0 if `list` names backends this build knows, each at most once; ACCEL_EINVAL otherwise
 * (`why` says which name). */
int dev_backends_check(const char *list, char *why, size_t why_len);

RT_MUST_USE int dev_world_init(dev_world *w, accel_runtime *rt, const dev_world_opts *o);

#endif
