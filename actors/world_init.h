/* Setting up a world: the node table (world.c). */
#ifndef DEV_WORLD_INIT_H
#define DEV_WORLD_INIT_H

#include "actors/world.h"

typedef struct dev_world_opts {
  uint32_t cpu_devices;       /* CPU devices, each its own memory node */
  int fault_injection;
  accel_completion completion;
  uint32_t max_restarts, restart_window_ms;
  int tf32; /* sgemm on TF32 tensor cores by default, where devices have them */
} dev_world_opts;

int dev_world_init(dev_world *w, accel_runtime *rt, const dev_world_opts *o);

#endif
