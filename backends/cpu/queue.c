/* The cpu backend's queues: one worker thread per queue running its items in order (queue.h). */
#include "backends/cpu/queue.h"

#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "accel/error.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"
#include "runtime/status.h"

/* Nodes a queue keeps for reuse; a burst beyond this gives its nodes back to malloc. */
#define BE_CPU_FREE_MAX 1024

/* Polls between two yields of a spinning thread (a pause each: about 1-5 us in all). */
#define BE_CPU_SPIN_POLLS 32

/* ---- the worker ---------------------------------------------------------------------- */

static void finish_item(be_queue *q, uint64_t count, int status) {
  if (status < 0 && atomic_load_explicit(&q->err_count, memory_order_relaxed) == UINT64_MAX) {
    atomic_store(&q->err, status);
    atomic_store(&q->err_count, count);
  }
  /* Both sequentially consistent, against the waiter's increment of `waiters` and load of
   * `done`: either it sees this count or we see it waiting and wake it under the lock. */
  atomic_store(&q->done, count);
  if (atomic_load(&q->waiters) > 0) {
    pthread_mutex_lock(&q->lock);
    pthread_cond_broadcast(&q->done_cv);
    pthread_mutex_unlock(&q->lock);
  }
}

/* A lost queue skips its work but still calls its callbacks and releases its waits. */
static void run_item(be_queue *q, const be_cpu_item *it, uint64_t count) {
  bool lost = be_cpu_lost(q->dev, q->gen);
  int status = 0;
  switch (it->kind) {
  case BE_CPU_CALLBACK:
    it->u.cb.fn(it->u.cb.arg, lost ? ACCEL_EDEVLOST : atomic_load(&q->err));
    break;
  case BE_CPU_WAIT:
    if (!lost)
      status = be_cpu_queue_wait(it->u.wait.q, it->u.wait.count, it->u.wait.gen);
    be_cpu_queue_unref(it->u.wait.q);
    break;
  default:
    if (!lost)
      status = be_cpu_item_run(it);
    break;
  }
  /* A fault is the device's state, not this queue's error. */
  finish_item(q, count, status == ACCEL_EDEVLOST ? 0 : status);
}

/* Under the lock: keeps the batch's n nodes for reuse, or frees them past the bound. */
static void recycle(be_queue *q, be_cpu_item *first, be_cpu_item *last, size_t n) {
  if (q->nfree + n <= BE_CPU_FREE_MAX) {
    last->next = q->free;
    q->free = first;
    q->nfree += n;
    return;
  }
  while (first != NULL) {
    be_cpu_item *next = first->next;
    rt_free(first);
    first = next;
  }
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Polls ready(q, arg) until it holds or spin_ns have passed, without the lock: what the
 * poller waits for then costs no wake-up (a futex wake and a context switch, several
 * microseconds). It yields between rounds, so on a shared core the thread it waits for still
 * gets to run. */
static bool spin_until(bool (*ready)(be_queue *q, const void *arg), be_queue *q, const void *arg) {
  uint64_t t0 = rt_mono_ns(), spin_ns = q->dev->spin_ns;
  while (spin_ns > 0) {
    for (int i = 0; i < BE_CPU_SPIN_POLLS; i++) {
      if (ready(q, arg))
        return true;
      cpu_relax();
    }
    sched_yield();
    if (rt_mono_ns() - t0 >= spin_ns)
      break;
  }
  return false;
}

static bool work_ready(be_queue *q, const void *arg) {
  (void)arg;
  return atomic_load_explicit(&q->pending, memory_order_relaxed);
}

/* With the lock held: waits for items (spinning a little, then sleeping) and takes them all;
 * NULL once stopping and drained. */
static be_cpu_item *take_batch(be_queue *q, be_cpu_item **last) {
  if (q->head == NULL && !q->stopping && q->dev->spin_ns > 0) {
    pthread_mutex_unlock(&q->lock);
    spin_until(work_ready, q, NULL);
    pthread_mutex_lock(&q->lock);
  }
  while (q->head == NULL && !q->stopping) {
    q->sleeping = true;
    pthread_cond_wait(&q->work_cv, &q->lock);
    q->sleeping = false;
  }
  be_cpu_item *first = q->head;
  *last = q->tail;
  q->head = q->tail = NULL;
  q->executing = first != NULL;
  atomic_store_explicit(&q->pending, false, memory_order_relaxed);
  return first;
}

/* Runs each batch without the lock, in order; exits once stopping and drained. */
static void *worker(void *arg) {
  be_queue *q = arg;
  be_cpu_item *first, *last;
  pthread_mutex_lock(&q->lock);
  while ((first = take_batch(q, &last)) != NULL) {
    pthread_mutex_unlock(&q->lock);
    size_t n = 0;
    for (be_cpu_item *it = first; it != NULL; it = it->next, n++)
      run_item(q, it, it->seq);
    pthread_mutex_lock(&q->lock);
    q->executing = false;
    recycle(q, first, last, n);
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

/* ---- life cycle ---------------------------------------------------------------------- */

static void queue_free(be_queue *q) {
  while (q->free != NULL) {
    be_cpu_item *next = q->free->next;
    rt_free(q->free);
    q->free = next;
  }
  pthread_cond_destroy(&q->done_cv);
  pthread_cond_destroy(&q->work_cv);
  pthread_mutex_destroy(&q->lock);
  be_cpu_dev_unref(q->dev);
  rt_free(q);
}

static int queue_init(be_queue *q, be_device *dev) {
  q->dev = dev;
  q->gen = atomic_load(&dev->gen);
  rt_list_init(&q->link);
  atomic_init(&q->refs, 1);
  atomic_init(&q->done, 0);
  atomic_init(&q->waiters, 0);
  atomic_init(&q->err, 0);
  atomic_init(&q->err_count, UINT64_MAX);
  atomic_init(&q->pending, false);
  if (pthread_mutex_init(&q->lock, NULL) != 0)
    return ACCEL_ESYS;
  if (pthread_cond_init(&q->work_cv, NULL) != 0) {
    pthread_mutex_destroy(&q->lock);
    return ACCEL_ESYS;
  }
  if (pthread_cond_init(&q->done_cv, NULL) != 0) {
    pthread_cond_destroy(&q->work_cv);
    pthread_mutex_destroy(&q->lock);
    return ACCEL_ESYS;
  }
  return 0;
}

int be_cpu_queue_create(be_device *dev, be_queue **out) {
  be_queue *q = rt_calloc(1, sizeof *q);
  if (q == NULL)
    return ACCEL_ENOMEM;
  int err = queue_init(q, dev);
  if (err != 0) {
    rt_free(q);
    return err;
  }
  be_cpu_dev_ref(dev); /* dropped by queue_free */
  if (pthread_create(&q->thread, NULL, worker, q) != 0) {
    queue_free(q);
    return ACCEL_ESYS;
  }
  pthread_setname_np(q->thread, "accel-cpu-queue");
  be_cpu_dev_track(dev, &dev->queues, &q->link);
  *out = q;
  return 0;
}

void be_cpu_queue_destroy(be_queue *q) {
  pthread_mutex_lock(&q->lock);
  q->stopping = true;
  atomic_store_explicit(&q->pending, true, memory_order_relaxed); /* ends a spin */
  pthread_cond_signal(&q->work_cv);
  pthread_mutex_unlock(&q->lock);
  pthread_join(q->thread, NULL);
  be_cpu_dev_untrack(q->dev, &q->link);
  be_cpu_queue_unref(q);
}

void be_cpu_queue_ref(be_queue *q) {
  atomic_fetch_add_explicit(&q->refs, 1, memory_order_relaxed);
}

void be_cpu_queue_unref(be_queue *q) {
  if (atomic_fetch_sub_explicit(&q->refs, 1, memory_order_acq_rel) == 1)
    queue_free(q);
}

/* ---- submission ---------------------------------------------------------------------- */

/* With the lock held: a node from the free list, or a new one (allocated with the lock
 * released, then taken again). NULL, unlocked, when out of memory. */
static be_cpu_item *take_node(be_queue *q) {
  be_cpu_item *node = q->free;
  if (node != NULL) {
    q->free = node->next;
    q->nfree--;
    return node;
  }
  pthread_mutex_unlock(&q->lock);
  node = rt_malloc(sizeof *node);
  if (node != NULL)
    pthread_mutex_lock(&q->lock);
  return node;
}

/* Under the lock, the only submitter here: nothing queued and no batch running, so every
 * earlier item is done and this one may run now, in order, on this thread. */
static bool runs_inline(const be_queue *q, const be_cpu_item *item) {
  return q->head == NULL && !q->executing && !q->stopping && be_cpu_item_tiny(item);
}

int be_cpu_queue_submit(be_queue *q, const be_cpu_item *item) {
  if (be_cpu_lost(q->dev, q->gen))
    return ACCEL_EDEVLOST;
  pthread_mutex_lock(&q->lock);
  if (runs_inline(q, item)) {
    be_cpu_item now = *item;
    now.seq = ++q->submitted;
    pthread_mutex_unlock(&q->lock);
    run_item(q, &now, now.seq);
    return 0;
  }
  be_cpu_item *node = take_node(q);
  if (node == NULL)
    return ACCEL_ENOMEM;
  *node = *item;
  node->next = NULL;
  node->seq = ++q->submitted;
  if (q->tail != NULL)
    q->tail->next = node;
  else
    q->head = node;
  q->tail = node;
  atomic_store_explicit(&q->pending, true, memory_order_relaxed);
  /* Only a sleeping worker needs the (costly) signal; one signal per sleep is enough. */
  bool wake = q->sleeping;
  q->sleeping = false;
  pthread_mutex_unlock(&q->lock);
  if (wake)
    pthread_cond_signal(&q->work_cv);
  return 0;
}

/* No lock: only the submitting thread writes `submitted` (the worker counts on its own). */
uint64_t be_cpu_queue_mark(be_queue *q) {
  return q->submitted;
}

/* ---- completion ---------------------------------------------------------------------- */

int be_cpu_queue_status(be_queue *q, uint64_t count, unsigned gen) {
  if (be_cpu_lost(q->dev, gen))
    return ACCEL_EDEVLOST;
  if (atomic_load_explicit(&q->done, memory_order_acquire) < count)
    return RT_PENDING;
  if (atomic_load(&q->err_count) <= count)
    return atomic_load(&q->err);
  return 0;
}

typedef struct wait_point {
  uint64_t count;
  unsigned gen;
} wait_point;

static bool point_ready(be_queue *q, const void *arg) {
  const wait_point *p = arg;
  return be_cpu_queue_status(q, p->count, p->gen) != RT_PENDING;
}

/* Spins first (a tiny op completes within the spin), then sleeps on done_cv. */
int be_cpu_queue_wait(be_queue *q, uint64_t count, unsigned gen) {
  int status = be_cpu_queue_status(q, count, gen);
  if (status != RT_PENDING || spin_until(point_ready, q, &(wait_point){count, gen}))
    return be_cpu_queue_status(q, count, gen);
  pthread_mutex_lock(&q->lock);
  atomic_fetch_add(&q->waiters, 1);
  while ((status = be_cpu_queue_status(q, count, gen)) == RT_PENDING)
    pthread_cond_wait(&q->done_cv, &q->lock);
  atomic_fetch_sub(&q->waiters, 1);
  pthread_mutex_unlock(&q->lock);
  return status;
}

void be_cpu_queue_wake(be_queue *q) {
  pthread_mutex_lock(&q->lock);
  pthread_cond_broadcast(&q->done_cv);
  pthread_mutex_unlock(&q->lock);
}
