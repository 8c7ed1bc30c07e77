/* The cpu backend's device and the state its queues, events and memory share (internal to
 * backends/cpu/).
 *
 * Faults and generations: a device has a sticky fault flag and a generation that reset()
 * bumps. Queues and events remember the generation they were made (or recorded) in; an object
 * is "lost" while the device is faulted or when its generation is older than the device's.
 * reset() bumps the generation before it clears the flag, so an object of the old generation
 * never looks alive in between.
 *
 * Lock order: the device's lock, then a queue's lock. An event's lock is taken alone.
 *
 * Lifetime: the device is reference counted (see `refs`): a thread may still be in
 * event_sync while another closes the device (a worker of the actors' "sync" completion).
 */
#ifndef BE_CPU_DEVICE_H
#define BE_CPU_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "backends/backend.h"
#include "runtime/list.h"

struct be_device {
  /* close() drops the opener's reference; each queue and event holds one, so an event (and
   * the queue it points at) stays safe to query, sync and destroy after close. */
  atomic_int refs;
  atomic_bool fault;
  atomic_uint gen;
  bool fault_injection;
  /* How long an idle queue worker polls for more work before it sleeps: a submission within
   * it skips the wake-up. 0 on a single core, where the poll would only delay the submitter. */
  uint64_t spin_ns;
  be_device_info info;
  /* What close() frees if its users left it behind: queues and memory. (Events may be
   * destroyed after close, so they are their own.) */
  pthread_mutex_t lock;
  rt_list queues, blocks;
};

/* Adds or removes `node` from one of the device's lists under its lock. */
static inline void be_cpu_dev_track(be_device *dev, rt_list *head, rt_list *node) {
  pthread_mutex_lock(&dev->lock);
  rt_list_push_front(head, node);
  pthread_mutex_unlock(&dev->lock);
}

static inline void be_cpu_dev_untrack(be_device *dev, rt_list *node) {
  pthread_mutex_lock(&dev->lock);
  rt_list_remove(node);
  pthread_mutex_unlock(&dev->lock);
}

/* Whether objects of generation `gen` are lost (a fault, or a reset since). */
static inline bool be_cpu_lost(be_device *dev, unsigned gen) {
  return atomic_load(&dev->fault) || gen != atomic_load(&dev->gen);
}

/* backend_cpu.c */
void be_cpu_dev_ref(be_device *dev);
void be_cpu_dev_unref(be_device *dev);

/* memory.c: frees every block still allocated (close). */
void be_cpu_mem_free_all(be_device *dev);

#endif
