/* Events of the cpu backend: a point in a queue, the pair (queue, items submitted before the
 * record), compared with the queue's count of completed items. Recording queues nothing.
 *
 * An event never recorded is complete (as in CUDA). An event remembers the device generation
 * it was created or last recorded in: after a reset, events of the old generation report
 * ACCEL_EDEVLOST until recorded again. The lock makes a record and a query from different
 * threads see a consistent pair.
 *
 * The device does not track its events: event_destroy may come after close (backend.h). An
 * event holds references on its device and on the queue it was recorded on, so it stays
 * valid after close (their memory outlives close while it lives). */
#include <stdlib.h>

#include "accel/error.h"
#include "backends/cpu/backend_cpu.h"
#include "backends/cpu/queue.h"
#include "runtime/alloc.h"
#include "runtime/status.h"

struct be_event {
  be_device *dev; /* a reference */
  pthread_mutex_t lock;
  be_queue *q; /* a reference; NULL: never recorded */
  uint64_t count;
  unsigned gen;
};

/* A consistent copy of where the event points, with a reference on its queue. */
typedef struct point {
  be_queue *q;
  uint64_t count;
  unsigned gen;
} point;

static point event_point(be_event *ev) {
  pthread_mutex_lock(&ev->lock);
  point p = {ev->q, ev->count, ev->gen};
  if (p.q != NULL)
    be_cpu_queue_ref(p.q);
  pthread_mutex_unlock(&ev->lock);
  return p;
}

int be_cpu_event_create(be_device *dev, be_event **out) {
  if (atomic_load(&dev->fault))
    return ACCEL_EDEVLOST;
  be_event *ev = rt_calloc(1, sizeof *ev);
  if (ev == NULL)
    return ACCEL_ENOMEM;
  if (pthread_mutex_init(&ev->lock, NULL) != 0) {
    rt_free(ev);
    return ACCEL_ESYS;
  }
  be_cpu_dev_ref(dev);
  ev->dev = dev;
  ev->gen = atomic_load(&dev->gen);
  *out = ev;
  return 0;
}

void be_cpu_event_destroy(be_event *ev) {
  if (ev == NULL)
    return;
  if (ev->q != NULL)
    be_cpu_queue_unref(ev->q);
  be_cpu_dev_unref(ev->dev);
  pthread_mutex_destroy(&ev->lock);
  rt_free(ev);
}

int be_cpu_event_record(be_event *ev, be_queue *q) {
  if (ev == NULL || q == NULL || ev->dev != q->dev)
    return ACCEL_EINVAL;
  if (be_cpu_lost(q->dev, q->gen))
    return ACCEL_EDEVLOST;
  be_cpu_queue_ref(q);
  pthread_mutex_lock(&ev->lock);
  be_queue *old = ev->q;
  ev->q = q;
  ev->count = be_cpu_queue_mark(q);
  ev->gen = q->gen;
  pthread_mutex_unlock(&ev->lock);
  if (old != NULL)
    be_cpu_queue_unref(old);
  return 0;
}

static int point_status(be_device *dev, point p, bool block) {
  if (p.q == NULL)
    return be_cpu_lost(dev, p.gen) ? ACCEL_EDEVLOST : 0;
  int status = block ? be_cpu_queue_wait(p.q, p.count, p.gen)
                     : be_cpu_queue_status(p.q, p.count, p.gen);
  be_cpu_queue_unref(p.q);
  return status;
}

int be_cpu_event_query(be_event *ev) {
  return ev == NULL ? ACCEL_EINVAL : point_status(ev->dev, event_point(ev), false);
}

int be_cpu_event_sync(be_event *ev) {
  return ev == NULL ? ACCEL_EINVAL : point_status(ev->dev, event_point(ev), true);
}

/* The wait item keeps the reference event_point took. An event already complete needs no
 * item; one that can never complete properly (lost) fails the call. */
int be_cpu_queue_wait_event(be_queue *q, be_event *ev) {
  if (q == NULL || ev == NULL || ev->dev != q->dev)
    return ACCEL_EINVAL;
  if (be_cpu_lost(q->dev, q->gen))
    return ACCEL_EDEVLOST;
  point p = event_point(ev);
  if (p.q == NULL)
    return be_cpu_lost(q->dev, p.gen) ? ACCEL_EDEVLOST : 0;
  int err = be_cpu_queue_status(p.q, p.count, p.gen);
  if (err == RT_PENDING || (err < 0 && err != ACCEL_EDEVLOST)) {
    be_cpu_item it = {.kind = BE_CPU_WAIT, .u.wait = {.q = p.q, .count = p.count, .gen = p.gen}};
    err = be_cpu_queue_submit(q, &it);
    if (err == 0)
      return 0;
  }
  be_cpu_queue_unref(p.q);
  return err;
}
