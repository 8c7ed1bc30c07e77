/* Queues of the cuda backend: one non-blocking CUstream each, plus what its ops need on the
 * side (a cuBLAS handle, sdot's partial sums, pinned memory for pageable copies, a side stream
 * for host_notify). */
#include <stdlib.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "backends/cuda/gemm_graph.h"
#include "backends/cuda/gemm_lt.h"
#include "runtime/alloc.h"

int be_cuda_queue_ok(be_queue *q) {
  if (q == NULL)
    return ACCEL_EINVAL;
  return be_cuda_gen_lost(q->dev, q->gen) ? ACCEL_EDEVLOST : 0;
}

static int queue_init(be_device *dev, be_queue *q) {
  int rc = be_cuda_enter(dev);
  if (rc == 0)
    rc = be_cuda_check(dev, be_cu.cuStreamCreate(&q->stream, CU_STREAM_NON_BLOCKING));
  if (rc == 0)
    rc = be_cuda_check(dev, be_cu.cuMemAlloc(&q->scratch, BE_CUDA_DOT_PARTS * sizeof(double)));
  if (rc != 0 && q->stream != NULL)
    be_cu.cuStreamDestroy(q->stream);
  return rc;
}

int be_cuda_queue_create(be_device *dev, be_queue **out) {
  if (dev == NULL || out == NULL)
    return ACCEL_EINVAL;
  if (be_cuda_lost(dev) || dev->ctx == NULL)
    return ACCEL_EDEVLOST;
  be_queue *q = rt_calloc(1, sizeof *q);
  if (q == NULL)
    return ACCEL_ENOMEM;
  q->dev = dev;
  q->gen = atomic_load(&dev->gen);
  rt_list_init(&q->link);
  int rc = queue_init(dev, q);
  if (rc != 0) {
    rt_free(q);
    return rc;
  }
  pthread_mutex_lock(&dev->lock);
  rt_list_push_front(&dev->queues, &q->link);
  pthread_mutex_unlock(&dev->lock);
  *out = q;
  return 0;
}

int be_cuda_queue_side(be_queue *q) {
  if (q->side != NULL)
    return 0;
  be_device *dev = q->dev;
  CUstream s = NULL;
  CUevent ev = NULL;
  int rc = be_cuda_check(dev, be_cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  if (rc == 0)
    rc = be_cuda_check(dev, be_cu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  if (rc != 0) {
    if (s != NULL)
      be_cu.cuStreamDestroy(s);
    return rc;
  }
  q->side = s;
  q->side_ev = ev;
  return 0;
}

/* The queue's CUDA objects, while its incarnation lives (after a reset they are gone). After
 * abort() they are left to the context's end: freeing device memory waits for the device. */
static void queue_release(be_queue *q) {
  be_device *dev = q->dev;
  if (q->gen != atomic_load(&dev->gen) || atomic_load(&dev->aborted) || be_cuda_enter(dev) != 0)
    return;
  bool alive = !be_cuda_lost(dev);
  be_cuda_blas_release(q);
  be_cu.cuMemFree(q->scratch);
  if (q->bounce != NULL && alive)
    be_cu.cuMemFreeHost(q->bounce); /* a lost context's reset frees it */
  be_cu.cuStreamDestroy(q->stream);
  if (q->side != NULL) {
    be_cu.cuEventDestroy(q->side_ev);
    be_cu.cuStreamDestroy(q->side);
  }
}

/* Waits for the stream, then the side stream (their host functions included: every callback
 * has been called), or, on a lost device, for nothing: its callbacks were called by the
 * fault. */
void be_cuda_queue_destroy(be_queue *q) {
  if (q == NULL)
    return;
  be_device *dev = q->dev;
  if (!be_cuda_gen_lost(dev, q->gen) && be_cuda_enter(dev) == 0) {
    be_cuda_check(dev, be_cu.cuStreamSynchronize(q->stream));
    if (q->side != NULL)
      be_cuda_check(dev, be_cu.cuStreamSynchronize(q->side));
  }
  be_cuda_reap_wait(dev); /* after a fault: every callback has been called */
  be_cuda_stage_free(q);
  queue_release(q);
  be_cuda_gemm_graph_release(q, false); /* a context gone: the tables' host side still goes */
  be_cuda_gemm_lt_release(q, false);
  pthread_mutex_lock(&dev->lock);
  rt_list_remove(&q->link);
  pthread_mutex_unlock(&dev->lock);
  rt_free(q);
}

uint64_t be_cuda_stream(be_queue *q) {
  return q == NULL ? 0 : (uint64_t)(uintptr_t)q->stream;
}
