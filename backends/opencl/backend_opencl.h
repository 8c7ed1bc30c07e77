/* The opencl backend beyond backend.h: what its tests and benchmarks look at (internal). */
#ifndef BE_OPENCL_BACKEND_OPENCL_H
#define BE_OPENCL_BACKEND_OPENCL_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"

#ifdef BE_HAVE_OPENCL
extern const be_ops be_opencl_ops;
#endif

/* How many times this process compiled kernels.cl from source, and loaded it from the disk
 * cache instead (program.c; every open and reset does one or the other). */
uint64_t be_opencl_source_builds(void);
uint64_t be_opencl_cache_loads(void);

/* The path of dev's program cache file (whether or not it exists yet): 0, or ACCEL_ENOENT
 * when no cache directory can be named (no $ACCEL_CACHE_DIR, $XDG_CACHE_HOME or $HOME). */
int be_opencl_cache_file(be_device *dev, char *buf, size_t len);

/* The OpenCL handles under a device and a queue (cl_context, cl_device_id, cl_command_queue
 * as void *), for benchmarks that compare with raw OpenCL on the same device. */
void *be_opencl_context(be_device *dev);
void *be_opencl_device_id(be_device *dev);
void *be_opencl_queue(be_queue *q);

#endif
