/* Host functions of the cuda backend: the callers' host callbacks, and the host side of small
 * copies of pageable memory (copy.c).
 *
 * They go through cuStreamAddCallback, whose function learns how the work before it ended: a
 * device error there reaches the callback as ACCEL_EDEVLOST (and marks the device lost: in
 * callback mode that is how a fault is noticed at once). cuLaunchHostFunc (ACCEL_CUDA_HOSTFN=1)
 * says nothing, and a function it runs around a fault cannot tell success from failure.
 *
 * A host function blocks later work in its stream until it returns (CUDA's promise): copies
 * stay ahead of the callbacks that report them, and a callback that blocks holds its queue as
 * on the cpu. (Submitting, though, blocks in the driver once a held stream has a few hundred
 * operations waiting behind it; callbacks must not block, backend.h says.)
 *
 * Holding the queue costs the GPU a host round trip per callback, though: the next kernel
 * starts only once the host function has returned. host_notify's callbacks go on the queue's
 * side stream instead, behind an event of the queue's stream (recorded on it, waited for on
 * the side stream: cuStreamWaitEvent takes the event's point at the call, so one event per
 * queue serves every notification). They run after the work before them (the host side of a
 * copy included: it is a host function of the queue's stream, or the stager's wait, which the
 * event comes after), in order among themselves (one side stream per queue), and the queue's
 * stream never waits for them. Their records are the same as host_callback's.
 *
 * Neither function is promised to run after a sticky error, and backend.h promises every
 * callback exactly once. So each callback has a record in the device's list from submission
 * until its host function has run: whoever claims the record first calls the callback, CUDA's
 * thread or the fault path (ACCEL_EDEVLOST, be_cuda_callbacks_fail). A record is freed by
 * its host function, or at teardown once CUDA can no longer call it (the context was
 * destroyed, or every stream drained): be_cuda_callbacks_drain. The submitting thread holds
 * a reference too until it is done with the record, which the host function may already have
 * run by then.
 *
 * A record is armed once CUDA has accepted it: the fault path only claims armed records, so
 * that a submission that fails never calls its callback (STYLE.md, "Errors").
 *
 * After abort() the context lives on with a kernel that may end one day (context.c, burial):
 * its records go with it (be_cuda_callbacks_hand_off) and are freed once it is destroyed
 * (be_cuda_callbacks_free). A host function of an older generation that runs meanwhile hears
 * ACCEL_EDEVLOST whatever the device does now, and copies nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "accel/error.h"
#include "backends/cuda/device.h"
#include "runtime/alloc.h"

typedef struct cb_rec {
  rt_list link; /* first: the device's list points here */
  be_device *dev;
  unsigned gen;  /* the queue's */
  be_host_fn fn; /* a callback; NULL for a copy */
  void *arg;
  void *dst; /* a copy's host side */
  const void *src;
  size_t bytes;
  atomic_int claimed, refs;
  bool armed, entered; /* under cb_lock */
} cb_rec;

typedef struct cb_call {
  be_host_fn fn;
  void *arg;
} cb_call;

static bool claim(cb_rec *r) {
  int free_ = 0;
  return atomic_compare_exchange_strong(&r->claimed, &free_, 1);
}

static void unref(cb_rec *r) {
  if (atomic_fetch_sub(&r->refs, 1) == 1)
    rt_free(r);
}

static void hostfn_leave_locked(be_device *dev) {
  if (--dev->cb_running == 0)
    pthread_cond_broadcast(&dev->cb_idle);
}

void be_cuda_hostfn_wait(be_device *dev) {
  pthread_mutex_lock(&dev->cb_lock);
  while (dev->cb_running > 0)
    pthread_cond_wait(&dev->cb_idle, &dev->cb_lock);
  pthread_mutex_unlock(&dev->cb_lock);
}

static void run_copy(cb_rec *r) {
  if (!be_cuda_copy_begin(r->dev))
    return; /* lost: the caller's memory may be gone already */
  memcpy(r->dst, r->src, r->bytes);
  be_cuda_copy_end(r->dev);
}

/* How the work before a host function ended, as the callback hears it. */
static int status_of(cb_rec *rec, CUresult r) {
  be_device *dev = rec->dev;
  bool old = rec->gen != atomic_load(&dev->gen); /* never faults the incarnation of now */
  if (r != CUDA_SUCCESS && be_cuda_sticky(r) && !old)
    be_cuda_fault(dev);
  if (r != CUDA_SUCCESS)
    return be_cuda_err(r);
  return old || be_cuda_lost(dev) ? ACCEL_EDEVLOST : 0;
}

/* On CUDA's host-function thread: the copy or the callback, unless the fault path claimed
 * it first; then the record goes. */
static void run(cb_rec *r, CUresult result) {
  be_device *dev = r->dev;
  pthread_mutex_lock(&dev->cb_lock);
  r->entered = true;
  dev->cb_running++;
  pthread_mutex_unlock(&dev->cb_lock);
  int status = status_of(r, result);
  if (r->fn == NULL) {
    if (status == 0)
      run_copy(r);
  } else if (claim(r)) {
    r->fn(r->arg, status);
  }
  pthread_mutex_lock(&dev->cb_lock);
  rt_list_remove(&r->link);
  hostfn_leave_locked(dev);
  pthread_mutex_unlock(&dev->cb_lock);
  unref(r);
}

static void CUDA_CB stream_cb(CUstream s, CUresult result, void *p) {
  (void)s;
  run(p, result);
}

static void CUDA_CB host_fn(void *p) {
  run(p, CUDA_SUCCESS);
}

/* cuStreamAddCallback unless ACCEL_CUDA_HOSTFN=1 asks for cuLaunchHostFunc. */
static CUresult enqueue(CUstream stream, cb_rec *r) {
  static atomic_int use_hostfn = -1;
  if (atomic_load(&use_hostfn) < 0) {
    const char *v = getenv("ACCEL_CUDA_HOSTFN");
    atomic_store(&use_hostfn, v != NULL && strcmp(v, "1") == 0);
  }
  if (atomic_load(&use_hostfn) > 0)
    return be_cu.cuLaunchHostFunc(stream, host_fn, r);
  return be_cu.cuStreamAddCallback(stream, stream_cb, r, 0);
}

/* Unlinks and frees a record CUDA never accepted. */
static void unarm(be_device *dev, cb_rec *r) {
  pthread_mutex_lock(&dev->cb_lock);
  rt_list_remove(&r->link);
  pthread_mutex_unlock(&dev->cb_lock);
  rt_free(r);
}

/* Links r, queues its host function on `stream` (q's own or its side stream) and arms it.
 * After a fault that came between the launch and the arming (the fault path skipped r), the
 * callback is called here. */
static int launch(be_queue *q, CUstream stream, cb_rec *r) {
  be_device *dev = q->dev;
  r->gen = q->gen;
  pthread_mutex_lock(&dev->cb_lock);
  if (atomic_load(&dev->fault) != BE_CUDA_OK) {
    pthread_mutex_unlock(&dev->cb_lock);
    rt_free(r);
    return ACCEL_EDEVLOST;
  }
  rt_list_push_front(&dev->cbs, &r->link);
  pthread_mutex_unlock(&dev->cb_lock);
  int rc = be_cuda_enter(dev);
  if (rc == 0)
    rc = be_cuda_check(dev, enqueue(stream, r));
  if (rc != 0) {
    unarm(dev, r);
    return rc;
  }
  pthread_mutex_lock(&dev->cb_lock);
  r->armed = true;
  bool late = atomic_load(&dev->fault) != BE_CUDA_OK && r->fn != NULL && claim(r);
  pthread_mutex_unlock(&dev->cb_lock);
  if (late)
    r->fn(r->arg, ACCEL_EDEVLOST);
  unref(r);
  return 0;
}

static cb_rec *rec_new(be_device *dev) {
  cb_rec *r = rt_calloc(1, sizeof *r);
  if (r == NULL)
    return NULL;
  rt_list_init(&r->link);
  r->dev = dev;
  atomic_init(&r->claimed, 0);
  atomic_init(&r->refs, 2); /* the host function's and the submitter's */
  return r;
}

int be_cuda_callback(be_queue *q, be_host_fn fn, void *arg) {
  if (fn == NULL)
    return ACCEL_EINVAL;
  int rc = be_cuda_queue_ok(q);
  if (rc != 0)
    return rc;
  cb_rec *r = rec_new(q->dev);
  if (r == NULL)
    return ACCEL_ENOMEM;
  r->fn = fn;
  r->arg = arg;
  return launch(q, q->stream, r);
}

/* The side stream waits for the queue's point, then the callback goes there. */
int be_cuda_notify(be_queue *q, be_host_fn fn, void *arg) {
  if (fn == NULL)
    return ACCEL_EINVAL;
  int rc = be_cuda_queue_ok(q);
  if (rc != 0)
    return rc;
  be_device *dev = q->dev;
  cb_rec *r = rec_new(dev);
  if (r == NULL)
    return ACCEL_ENOMEM;
  r->fn = fn;
  r->arg = arg;
  rc = be_cuda_enter(dev);
  if (rc == 0)
    rc = be_cuda_queue_side(q);
  if (rc == 0)
    rc = be_cuda_check(dev, be_cu.cuEventRecord(q->side_ev, q->stream));
  if (rc == 0)
    rc = be_cuda_check(dev, be_cu.cuStreamWaitEvent(q->side, q->side_ev, 0));
  if (rc != 0) {
    rt_free(r); /* never linked */
    return rc;
  }
  return launch(q, q->side, r);
}

int be_cuda_hostfn_copy(be_queue *q, void *dst, const void *src, size_t bytes) {
  cb_rec *r = rec_new(q->dev);
  if (r == NULL)
    return ACCEL_ENOMEM;
  r->dst = dst;
  r->src = src;
  r->bytes = bytes;
  return launch(q, q->stream, r);
}

/* The armed, unclaimed callbacks of the list, claimed, in a new array (NULL: none, or no
 * memory: then they are called under the lock, which they may not notice). */
static cb_call *claim_all(be_device *dev, size_t *n) {
  size_t cap = 0;
  for (rt_list *l = dev->cbs.next; l != &dev->cbs; l = l->next)
    cap++;
  cb_call *calls = cap > 0 ? rt_malloc(cap * sizeof *calls) : NULL;
  *n = 0;
  for (rt_list *l = dev->cbs.next; l != &dev->cbs; l = l->next) {
    cb_rec *r = (cb_rec *)l;
    if (r->fn == NULL || !r->armed || !claim(r))
      continue;
    if (calls != NULL)
      calls[(*n)++] = (cb_call){r->fn, r->arg};
    else
      r->fn(r->arg, ACCEL_EDEVLOST);
  }
  return calls;
}

static void call_all(cb_call *calls, size_t n) {
  for (size_t i = 0; i < n; i++)
    calls[i].fn(calls[i].arg, ACCEL_EDEVLOST);
  rt_free(calls);
}

/* Records stay linked: CUDA may still be about to run one, and then frees it itself. */
void be_cuda_callbacks_fail(be_device *dev) {
  size_t n;
  pthread_mutex_lock(&dev->cb_lock);
  cb_call *calls = claim_all(dev, &n);
  pthread_mutex_unlock(&dev->cb_lock);
  call_all(calls, n);
}

void be_cuda_callbacks_drain(be_device *dev) {
  size_t n;
  pthread_mutex_lock(&dev->cb_lock);
  while (dev->cb_running > 0)
    pthread_cond_wait(&dev->cb_idle, &dev->cb_lock);
  cb_call *calls = claim_all(dev, &n);
  while (!rt_list_empty(&dev->cbs)) {
    rt_list *l = dev->cbs.next;
    rt_list_remove(l);
    rt_free(l);
  }
  pthread_mutex_unlock(&dev->cb_lock);
  call_all(calls, n);
}

void be_cuda_callbacks_hand_off(be_device *dev, rt_list *to) {
  pthread_mutex_lock(&dev->cb_lock);
  while (!rt_list_empty(&dev->cbs)) {
    rt_list *l = dev->cbs.next;
    rt_list_remove(l);
    rt_list_push_front(to, l);
  }
  pthread_mutex_unlock(&dev->cb_lock);
}

void be_cuda_callbacks_free(be_device *dev, rt_list *list) {
  pthread_mutex_lock(&dev->cb_lock);
  while (dev->cb_running > 0)
    pthread_cond_wait(&dev->cb_idle, &dev->cb_lock);
  while (!rt_list_empty(list)) {
    rt_list *l = list->next;
    rt_list_remove(l);
    rt_free(l);
  }
  pthread_mutex_unlock(&dev->cb_lock);
}
