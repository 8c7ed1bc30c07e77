/* Queues (in-order cl_command_queues) and their host functions.
 *
 * A host function is a marker in the queue and a record in the queue's FIFO; the queue's
 * host thread takes the records in order, waits for each marker and calls the function
 * (ACCEL_EDEVLOST once the device is lost). host_callback also holds the queue: a barrier on a
 * user event follows its marker, and the thread completes the user event when the function
 * has returned. Waiting on the marker in a thread of our own, rather than running the function
 * in a clSetEventCallback, keeps functions that block (a kernel actor's may) off the driver's
 * callback thread, and gives submission order for free. */
#include <stdlib.h>

#include "accel/error.h"
#include "backends/opencl/device.h"
#include "runtime/alloc.h"

struct be_ocl_hostfn {
  be_ocl_hostfn *next;
  be_host_fn fn;
  void *arg;
  cl_event marker;
  cl_event gate; /* host_callback: the user event later work waits for; else NULL */
};

int be_ocl_queue_create(be_device *dev, be_queue **out) {
  if (dev == NULL || out == NULL)
    return ACCEL_EINVAL;
  unsigned gen = atomic_load(&dev->gen);
  if (be_ocl_gen_lost(dev, gen) || dev->ctx == NULL)
    return ACCEL_EDEVLOST;
  be_queue *q = rt_calloc(1, sizeof *q);
  if (q == NULL)
    return ACCEL_ENOMEM;
  cl_int err = CL_SUCCESS;
  q->cq = clCreateCommandQueue(dev->ctx, dev->id, 0, &err);
  if (q->cq == NULL) {
    rt_free(q);
    return be_ocl_check(dev, err != CL_SUCCESS ? err : CL_OUT_OF_RESOURCES);
  }
  q->dev = dev;
  q->gen = gen;
  pthread_mutex_init(&q->hlock, NULL);
  pthread_cond_init(&q->hcond, NULL);
  pthread_mutex_lock(&dev->lock);
  rt_list_push_front(&dev->queues, &q->link);
  pthread_mutex_unlock(&dev->lock);
  *out = q;
  return 0;
}

static void hostfn_run(be_queue *q, be_ocl_hostfn *h) {
  int st = be_ocl_wait(q->dev, h->marker);
  if (be_ocl_gen_lost(q->dev, q->gen))
    st = ACCEL_EDEVLOST;
  h->fn(h->arg, st);
  if (h->gate != NULL) {
    clSetUserEventStatus(h->gate, CL_COMPLETE);
    clReleaseEvent(h->gate);
  }
  clReleaseEvent(h->marker);
  rt_free(h);
}

/* Runs the FIFO until stopped and empty. */
static void *host_main(void *arg) {
  pthread_setname_np(pthread_self(), "accel-ocl-queue"); /* seen in top -H, gdb */
  be_queue *q = arg;
  for (;;) {
    pthread_mutex_lock(&q->hlock);
    while (q->head == NULL && !q->stop)
      pthread_cond_wait(&q->hcond, &q->hlock);
    be_ocl_hostfn *h = q->head;
    if (h != NULL) {
      q->head = h->next;
      if (q->head == NULL)
        q->tail = NULL;
    }
    pthread_mutex_unlock(&q->hlock);
    if (h == NULL)
      return NULL;
    hostfn_run(q, h);
  }
}

static int host_thread(be_queue *q) {
  if (q->thread_started)
    return 0;
  if (pthread_create(&q->thread, NULL, host_main, q) != 0)
    return ACCEL_ESYS;
  q->thread_started = true;
  return 0;
}

/* The marker, and for a callback the barrier on its gate. Nothing is queued on failure
 * (a marker alone changes nothing). */
static int enqueue_hostfn(be_queue *q, be_ocl_hostfn *h, bool hold) {
  cl_int err = clEnqueueMarkerWithWaitList(q->cq, 0, NULL, &h->marker);
  if (err != CL_SUCCESS)
    return be_ocl_check(q->dev, err);
  if (hold) {
    h->gate = clCreateUserEvent(q->dev->ctx, &err);
    if (h->gate != NULL)
      err = clEnqueueBarrierWithWaitList(q->cq, 1, &h->gate, NULL);
    if (err != CL_SUCCESS) {
      if (h->gate != NULL) {
        clSetUserEventStatus(h->gate, CL_COMPLETE);
        clReleaseEvent(h->gate);
      }
      clReleaseEvent(h->marker);
      return be_ocl_check(q->dev, err);
    }
  }
  return 0;
}

static int submit(be_queue *q, be_host_fn fn, void *arg, bool hold) {
  if (fn == NULL)
    return ACCEL_EINVAL;
  int rc = be_ocl_queue_ok(q);
  if (rc == 0)
    rc = host_thread(q);
  if (rc != 0)
    return rc;
  be_ocl_hostfn *h = rt_calloc(1, sizeof *h);
  if (h == NULL)
    return ACCEL_ENOMEM;
  h->fn = fn;
  h->arg = arg;
  rc = enqueue_hostfn(q, h, hold);
  if (rc != 0) {
    rt_free(h);
    return rc;
  }
  pthread_mutex_lock(&q->hlock);
  if (q->tail != NULL)
    q->tail->next = h;
  else
    q->head = h;
  q->tail = h;
  pthread_cond_signal(&q->hcond);
  pthread_mutex_unlock(&q->hlock);
  clFlush(q->cq);
  return 0;
}

int be_ocl_callback(be_queue *q, be_host_fn fn, void *arg) {
  return submit(q, fn, arg, true);
}

/* The same thread runs both kinds, so notifications keep submission order; only the gate
 * is left out, and the queue runs on while fn runs. */
int be_ocl_notify(be_queue *q, be_host_fn fn, void *arg) {
  return submit(q, fn, arg, false);
}

/* Every host function is called by the time this returns: the thread drains its FIFO (each
 * after its work: a queue of a lost device still runs its work, device.h). */
/* After abort(): a kernel that never ends holds the queue, and the host-function thread waits
 * behind it; neither can be waited for. The thread is told to stop and left to end on its own
 * (it frees nothing); the queue's memory and command queue are left to it (a leak per
 * runaway kernel, the price of not hanging). */
static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_list abandoned = {&abandoned, &abandoned}; /* kept reachable, never freed */

static void abandon(be_queue *q) {
  be_ocl_dev_ref(q->dev); /* never released: the thread may look at the device later */
  pthread_mutex_lock(&abandoned_lock);
  rt_list_push_front(&abandoned, &q->link);
  pthread_mutex_unlock(&abandoned_lock);
  if (q->thread_started) {
    pthread_mutex_lock(&q->hlock);
    q->stop = true;
    pthread_cond_signal(&q->hcond);
    pthread_mutex_unlock(&q->hlock);
    pthread_detach(q->thread);
  }
}

void be_ocl_queue_destroy(be_queue *q) {
  if (q == NULL)
    return;
  be_device *dev = q->dev;
  pthread_mutex_lock(&dev->lock);
  rt_list_remove(&q->link);
  pthread_mutex_unlock(&dev->lock);
  if (atomic_load(&dev->aborted)) {
    abandon(q);
    return;
  }
  if (q->thread_started) {
    pthread_mutex_lock(&q->hlock);
    q->stop = true;
    pthread_cond_signal(&q->hcond);
    pthread_mutex_unlock(&q->hlock);
    pthread_join(q->thread, NULL);
  }
  clFinish(q->cq);
  clReleaseCommandQueue(q->cq);
  pthread_cond_destroy(&q->hcond);
  pthread_mutex_destroy(&q->hlock);
  rt_free(q);
}
