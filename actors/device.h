/* The device actors: a device supervisor, one DeviceActor per device (and one for the host
 * memory node), and under each DeviceActor the KernelActors `mem`, `blas`, `rng`, `nn`, each
 * owning one backend queue. */
#ifndef DEV_DEVICE_H
#define DEV_DEVICE_H

#include "actors/world.h"

/* Message types of the device layer. */
enum {
  DEV_MSG_RUN = ACCEL_MSG_USER + 100, /* kernel actor: data = dev_task to put on its queue */
  DEV_MSG_POLL,                       /* kernel actor: query events of polled work */
  DEV_MSG_SYNCED,                     /* kernel actor: a worker's event_sync returned */
  DEV_MSG_WATCHDOG,                   /* kernel actor: look for work past its deadline */
  DEV_MSG_FAULT_RETRY,                /* kernel actor: send a refused fault report again */
  DEV_MSG_ARM_BATCH,                  /* kernel actor: one host function for the burst's tasks */
  DEV_MSG_FAULT,                      /* device actor: the device reported a sticky fault */
  DEV_MSG_INJECT_FAULT,               /* device actor: tests only */
  DEV_MSG_OP,                         /* session: data = dev_call */
  DEV_MSG_BUILT,                      /* session: a module build finished (module.c) */
  DEV_MSG_ALLOCATED,                  /* session: a memory job finished (mem_cache.c) */
};

extern const accel_behavior dev_kernel_behavior;
extern const accel_behavior dev_device_behavior;
extern const accel_behavior dev_supervisor_behavior;

/* Sends a ready task to the kernel actor that runs it (or fails it if that device is not
 * serving). */
void dev_kernel_dispatch(dev_task *t);

void dev_inflight_pool_free(dev_world *w);

/* Fails the node's tasks still waiting for room in a kernel mailbox (the node stopped). */
void dev_overflow_fail(dev_node *node);

/* Enqueues the task's work on queue q (no waiting, no completion handling). */
int dev_exec(dev_task *t, be_queue *q);
/* What accel_buffer_export answers for b's replica on node (exec.c). */
int dev_export_info(dev_node *node, dev_buffer *b, struct accel_export_info *out);

/* support.c: the kernel actor (package) of an op kind; what a device runs (read at its first
 * open, on the loop; a device that never opened may run anything); 0 if the node runs op (on
 * its buffers), ACCEL_ENOTSUP if not, ACCEL_EDEVLOST if it never opened; gemm's A/B dtypes. */
dev_queue_class dev_op_queue(uint32_t kind);
void dev_caps_read(dev_node *node);
int dev_node_supports(const dev_node *node, const dev_op *op, dev_buffer *const bufs[]);
uint32_t dev_caps_gemm_dtypes(const dev_caps *c);
/* The device as the C API describes it (any thread). */
void dev_node_describe(const dev_node *node, struct accel_device_info *d);

/* A client op finished with `status` (implemented by the session layer). */
void dev_op_finished(dev_world *w, dev_call *call, int status);

/* The device supervisor's arg: the world. Spawns a DeviceActor per node. */
int dev_world_spawn(dev_world *w, accel_actor *parent, accel_ref *supervisor);

#endif
