/* Events: the marker of the last record (clEnqueueMarkerWithWaitList). A queue_wait is a
 * barrier on the marker of the moment, which the barrier retains: the event may then be
 * recorded again or destroyed without harm to the waiting queue (backend.h). */
#include <stdlib.h>

#include "accel/error.h"
#include "backends/opencl/device.h"
#include "runtime/alloc.h"
#include "runtime/status.h"

int be_ocl_event_create(be_device *dev, be_event **out) {
  if (dev == NULL || out == NULL)
    return ACCEL_EINVAL;
  unsigned gen = atomic_load(&dev->gen);
  if (be_ocl_gen_lost(dev, gen) || dev->ctx == NULL)
    return ACCEL_EDEVLOST;
  be_event *e = rt_calloc(1, sizeof *e);
  if (e == NULL)
    return ACCEL_ENOMEM;
  pthread_mutex_init(&e->lock, NULL);
  e->dev = dev;
  e->gen = gen;
  be_ocl_dev_ref(dev);
  *out = e;
  return 0;
}

void be_ocl_event_destroy(be_event *e) {
  if (e == NULL)
    return;
  if (e->ev != NULL)
    clReleaseEvent(e->ev);
  pthread_mutex_destroy(&e->lock);
  be_ocl_dev_unref(e->dev);
  rt_free(e);
}

int be_ocl_event_record(be_event *e, be_queue *q) {
  if (e == NULL || q == NULL || e->dev != q->dev)
    return ACCEL_EINVAL;
  int rc = be_ocl_queue_ok(q);
  if (rc != 0)
    return rc;
  cl_event ev = NULL;
  cl_int err = clEnqueueMarkerWithWaitList(q->cq, 0, NULL, &ev);
  if (err != CL_SUCCESS)
    return be_ocl_check(q->dev, err);
  clFlush(q->cq); /* other queues and host threads may wait for it */
  pthread_mutex_lock(&e->lock);
  cl_event old = e->ev;
  e->ev = ev;
  e->gen = q->gen;
  pthread_mutex_unlock(&e->lock);
  if (old != NULL)
    clReleaseEvent(old);
  return 0;
}

/* The current marker, retained (NULL if never recorded), and its generation. */
static cl_event current(be_event *e, unsigned *gen) {
  pthread_mutex_lock(&e->lock);
  cl_event ev = e->ev;
  if (ev != NULL)
    clRetainEvent(ev);
  *gen = e->gen;
  pthread_mutex_unlock(&e->lock);
  return ev;
}

int be_ocl_event_query(be_event *e) {
  if (e == NULL)
    return ACCEL_EINVAL;
  unsigned gen;
  cl_event ev = current(e, &gen);
  int rc = be_ocl_gen_lost(e->dev, gen) ? ACCEL_EDEVLOST : 0;
  if (rc == 0 && ev != NULL) {
    cl_int st = CL_COMPLETE;
    cl_int err = clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
    if (err != CL_SUCCESS || st < 0) {
      be_ocl_fault(e->dev);
      rc = ACCEL_EDEVLOST;
    } else if (st != CL_COMPLETE)
      rc = RT_PENDING;
  }
  if (ev != NULL)
    clReleaseEvent(ev);
  return rc;
}

int be_ocl_event_sync(be_event *e) {
  if (e == NULL)
    return ACCEL_EINVAL;
  unsigned gen;
  cl_event ev = current(e, &gen);
  int rc = be_ocl_gen_lost(e->dev, gen) ? ACCEL_EDEVLOST : 0;
  if (rc == 0 && ev != NULL)
    rc = be_ocl_wait(e->dev, ev);
  if (rc == 0 && be_ocl_gen_lost(e->dev, gen))
    rc = ACCEL_EDEVLOST;
  if (ev != NULL)
    clReleaseEvent(ev);
  return rc;
}

int be_ocl_queue_wait(be_queue *q, be_event *e) {
  if (q == NULL || e == NULL || e->dev != q->dev)
    return ACCEL_EINVAL;
  int rc = be_ocl_queue_ok(q);
  if (rc != 0)
    return rc;
  unsigned gen;
  cl_event ev = current(e, &gen);
  if (ev == NULL)
    return 0;
  rc = be_ocl_gen_lost(q->dev, gen)
           ? ACCEL_EDEVLOST
           : be_ocl_check(q->dev, clEnqueueBarrierWithWaitList(q->cq, 1, &ev, NULL));
  clReleaseEvent(ev);
  return rc;
}
