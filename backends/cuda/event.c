/* Events of the cuda backend: a CUevent (no timing) from the device's pool. An event never
 * recorded is complete, as in CUDA; since pooled CUevents keep their last record, the event
 * remembers whether it was recorded itself. An event of an older generation is lost, and its
 * CUevent is never touched again (the incarnation that made it is gone). */
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"
#include "runtime/status.h"

/* Idle CUevents kept per device; beyond, event_destroy destroys them. */
#define BE_CUDA_POOL_MAX 4096

/* How event_sync waits: it polls without pause for SPIN_NS (a tiny op is done by then, and
 * polling costs less than any wait), then yields between polls until YIELD_NS (what the
 * driver's own wait does under its default scheduling), then sleeps between polls for a 64th
 * of the time waited so far, at most NAP_MAX_NS: a long op's end is heard within 1.6 % of its
 * time or 2 ms, and an op past 128 ms costs 500 wake-ups a second. It never blocks in
 * cuEventSynchronize: a kernel that never ends (abort()) would hold the thread there for ever,
 * and the context may not be destroyed under a thread inside a call on it. */
#define BE_CUDA_SYNC_SPIN_NS 20000
#define BE_CUDA_SYNC_YIELD_NS 1000000
#define BE_CUDA_SYNC_NAP_MAX_NS 2000000

struct be_event {
  be_device *dev; /* a reference */
  CUevent ev;
  unsigned gen;
  atomic_bool recorded;
};

static CUevent pool_take(be_device *dev) {
  CUevent ev = NULL;
  pthread_mutex_lock(&dev->lock);
  if (dev->npool > 0)
    ev = dev->pool[--dev->npool];
  pthread_mutex_unlock(&dev->lock);
  return ev;
}

/* Under dev->lock: keeps ev for reuse; false if the pool is full. */
static bool pool_put(be_device *dev, CUevent ev) {
  if (dev->npool == dev->pool_cap) {
    size_t cap = dev->pool_cap ? 2 * dev->pool_cap : 64;
    CUevent *p = cap <= BE_CUDA_POOL_MAX ? rt_realloc(dev->pool, cap * sizeof *p) : NULL;
    if (p == NULL)
      return false;
    dev->pool = p;
    dev->pool_cap = cap;
  }
  dev->pool[dev->npool++] = ev;
  return true;
}

void be_cuda_event_pool_clear(be_device *dev, bool destroy) {
  pthread_mutex_lock(&dev->lock);
  size_t n = dev->npool;
  dev->npool = 0;
  pthread_mutex_unlock(&dev->lock);
  for (size_t i = 0; destroy && i < n; i++)
    be_cu.cuEventDestroy(dev->pool[i]);
}

int be_cuda_event_create(be_device *dev, be_event **out) {
  if (dev == NULL || out == NULL)
    return ACCEL_EINVAL;
  if (be_cuda_lost(dev) || dev->ctx == NULL)
    return ACCEL_EDEVLOST;
  be_event *e = rt_calloc(1, sizeof *e);
  if (e == NULL)
    return ACCEL_ENOMEM;
  e->gen = atomic_load(&dev->gen);
  e->ev = pool_take(dev);
  if (e->ev == NULL) {
    int rc = be_cuda_enter(dev);
    if (rc == 0)
      rc = be_cuda_check(dev, be_cu.cuEventCreate(&e->ev, CU_EVENT_DISABLE_TIMING));
    if (rc != 0) {
      rt_free(e);
      return rc;
    }
  }
  atomic_init(&e->recorded, false);
  be_cuda_dev_ref(dev);
  e->dev = dev;
  *out = e;
  return 0;
}

void be_cuda_event_destroy(be_event *e) {
  if (e == NULL)
    return;
  be_device *dev = e->dev;
  pthread_mutex_lock(&dev->lock);
  bool current = e->gen == atomic_load(&dev->gen) && !dev->closed;
  bool kept = current && pool_put(dev, e->ev);
  pthread_mutex_unlock(&dev->lock);
  if (current && !kept && be_cuda_enter(dev) == 0)
    be_cu.cuEventDestroy(e->ev);
  be_cuda_dev_unref(dev);
  rt_free(e);
}

int be_cuda_event_record(be_event *e, be_queue *q) {
  if (e == NULL || q == NULL || e->dev != q->dev)
    return ACCEL_EINVAL;
  int rc = be_cuda_queue_ok(q);
  if (rc == 0 && e->gen != q->gen)
    rc = ACCEL_EDEVLOST;
  if (rc == 0)
    rc = be_cuda_enter(q->dev);
  if (rc == 0)
    rc = be_cuda_check(q->dev, be_cu.cuEventRecord(e->ev, q->stream));
  if (rc == 0)
    atomic_store(&e->recorded, true);
  return rc;
}

/* 1 if the event's state must come from the driver, else 0 (complete) or the error. */
static int ask_driver(be_event *e) {
  if (be_cuda_gen_lost(e->dev, e->gen))
    return ACCEL_EDEVLOST;
  if (!atomic_load(&e->recorded))
    return 0;
  int rc = be_cuda_enter(e->dev);
  return rc == 0 ? 1 : rc;
}

int be_cuda_event_query(be_event *e) {
  if (e == NULL)
    return ACCEL_EINVAL;
  int rc = ask_driver(e);
  if (rc <= 0)
    return rc;
  CUresult r = be_cu.cuEventQuery(e->ev);
  return r == CUDA_ERROR_NOT_READY ? RT_PENDING : be_cuda_check(e->dev, r);
}

static void nap(uint64_t ns) {
  struct timespec ts = {0, (long)ns};
  nanosleep(&ts, NULL);
}

/* Until ev completes (0 or its error) or the device is lost (ACCEL_EDEVLOST). */
static int wait_event(be_device *dev, CUevent ev) {
  uint64_t t0 = rt_mono_ns();
  CUresult r;
  while ((r = be_cu.cuEventQuery(ev)) == CUDA_ERROR_NOT_READY) {
    uint64_t waited = rt_mono_ns() - t0;
    if (waited < BE_CUDA_SYNC_SPIN_NS)
      continue;
    if (atomic_load(&dev->fault) != BE_CUDA_OK)
      return ACCEL_EDEVLOST;
    if (waited < BE_CUDA_SYNC_YIELD_NS)
      sched_yield();
    else
      nap(waited / 64 < BE_CUDA_SYNC_NAP_MAX_NS ? waited / 64 : BE_CUDA_SYNC_NAP_MAX_NS);
  }
  return be_cuda_check(dev, r);
}

/* Counted in `syncing` before the generation is checked: close bumps the generation, then
 * waits for the count, so either this sees the new generation or close waits for it. */
int be_cuda_event_sync(be_event *e) {
  if (e == NULL)
    return ACCEL_EINVAL;
  be_device *dev = e->dev;
  atomic_fetch_add(&dev->syncing, 1);
  int rc = ask_driver(e);
  if (rc > 0)
    rc = wait_event(dev, e->ev);
  atomic_fetch_sub(&dev->syncing, 1);
  return rc;
}

int be_cuda_queue_wait(be_queue *q, be_event *e) {
  if (q == NULL || e == NULL || e->dev != q->dev)
    return ACCEL_EINVAL;
  int rc = be_cuda_queue_ok(q);
  if (rc == 0 && e->gen != q->gen)
    rc = ACCEL_EDEVLOST;
  if (rc != 0 || !atomic_load(&e->recorded))
    return rc;
  rc = be_cuda_enter(q->dev);
  return rc != 0 ? rc : be_cuda_check(q->dev, be_cu.cuStreamWaitEvent(q->stream, e->ev, 0));
}
