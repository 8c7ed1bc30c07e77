/* The cpu backend's queue: one worker thread running a FIFO of items in order (internal to
 * backends/cpu/).
 *
 * Items are counted from 1 in submission order; `done` is how many have completed. An event
 * is a (queue, count) pair: it is complete once done >= count, so recording one queues
 * nothing. Items are copied into nodes kept on a free list per queue,
 * so a steady stream of submissions allocates nothing. The worker spins briefly after its
 * work before it sleeps (device.h: spin_ns), and is signalled only when it sleeps.
 *
 * Errors while running: the first failing item's status becomes the queue's error, reported by
 * every later host callback and by every event that covers it (sticky for the queue, like a
 * CUDA stream's error). After a fault, or once the queue's generation is old, items are
 * skipped; host callbacks still run, with ACCEL_EDEVLOST.
 *
 * Lifetime: queues are reference counted. The creator's reference is dropped by destroy; an
 * event recorded on the queue and a queued wait on it hold one each, so their (queue, count)
 * stays readable after destroy (and reads complete: destroy drains the queue).
 */
#ifndef BE_CPU_QUEUE_H
#define BE_CPU_QUEUE_H

#include <stdint.h>

#include "backends/cpu/device.h"
#include "runtime/attr.h"

typedef enum be_cpu_item_kind {
  BE_CPU_COPY = 0,
  BE_CPU_CALLBACK,
  BE_CPU_WAIT,
  BE_CPU_GEMM,
  BE_CPU_AXPY,
  BE_CPU_DOT,
  BE_CPU_SCAL,
  BE_CPU_FILL,
  BE_CPU_RNG,
  BE_CPU_UNARY,
  BE_CPU_SOFTMAX,
  BE_CPU_BINARY,
  BE_CPU_REDUCE,
  BE_CPU_WHERE,
  BE_CPU_CONVERT,
  BE_CPU_COLLECTIVE,
} be_cpu_item_kind;

/* One unit of work; pointers are the host addresses the submitter checked; dtypes are
 * accel_dtype values the package checked (packages.c). */
typedef struct be_cpu_item {
  struct be_cpu_item *next;
  uint64_t seq; /* its number in the queue's order, from 1 (set by submit) */
  be_cpu_item_kind kind;
  union {
    struct {
      void *dst;
      const void *src;
      size_t bytes;
    } copy;
    struct {
      be_host_fn fn;
      void *arg;
      bool quick; /* host_notify's: may run inline (be_cpu_item_tiny) */
    } cb;
    struct {
      be_queue *q; /* a reference, dropped once the wait is over */
      uint64_t count;
      unsigned gen;
    } wait;
    struct {
      be_gemm_args g; /* the whole batch: one item */
      const void *a, *b;
      void *c;
      size_t a_len, b_len, c_len; /* elements from a, b, c to their buffers' ends */
    } gemm;
    struct { /* axpy, dot (result set) and scal (y only) */
      uint32_t dtype;
      const void *x;
      void *y, *result;
      size_t n;
      double alpha;
    } vec;
    struct {
      void *dst;
      size_t count;
      uint32_t esize; /* 1, 2, 4 or 8 bytes per element */
      uint64_t value;
    } fill;
    struct {
      void *dst;
      size_t count;
      uint32_t dtype;
      be_rng_args r;
    } rng;
    struct {
      void *dst;
      const void *src;
      size_t count;
      uint32_t dtype;
      be_unary_op op;
    } unary;
    struct {
      void *dst;
      const void *src;
      size_t rows, cols;
      uint32_t dtype;
    } softmax;
    struct {
      void *dst;
      const void *a, *b;
      uint32_t dtype;
      be_binary_args g;
    } binary;
    struct {
      void *dst;
      const void *src;
      uint32_t dtype;
      be_reduction_args g;
    } reduce;
    struct {
      void *dst;
      const void *cond, *a, *b;
      uint32_t dtype;
      be_where_args g;
    } where;
    struct {
      void *dst;
      const void *src;
      uint32_t dst_dtype, src_dtype;
      be_convert_args g;
    } convert;
    struct { /* every device's memory is host memory: one item does the whole collective */
      uint32_t kind, dtype, reduce, root, ndev;
      size_t count;
      void *buf[BE_COLL_MAX_DEVICES], *recv[BE_COLL_MAX_DEVICES];
    } coll;
  } u;
} be_cpu_item;

struct be_queue {
  rt_list link; /* first: the device's list of queues points here (close casts it) */
  be_device *dev;
  unsigned gen;
  atomic_int refs;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t work_cv; /* the worker sleeps here */
  pthread_cond_t done_cv; /* event syncs and waits on this queue sleep here */
  /* Under lock: */
  be_cpu_item *head, *tail, *free;
  size_t nfree;
  bool sleeping, stopping;
  bool executing; /* the worker runs a batch (the lock released): nothing runs inline */
  uint64_t submitted;
  atomic_bool pending; /* items queued (also written under lock): what a spinning worker polls */
  /* Written by the worker, read by anyone: */
  atomic_uint_fast64_t done;
  atomic_uint waiters; /* threads waiting on done_cv: the worker broadcasts only for them */
  atomic_int err;
  atomic_uint_fast64_t err_count; /* the first failed item, UINT64_MAX if none */
};

RT_MUST_USE int be_cpu_queue_create(be_device *dev, be_queue **out);
/* Drains the queue (every item runs or is skipped, every callback is called), joins the
 * worker, drops the creator's reference. */
void be_cpu_queue_destroy(be_queue *q);
void be_cpu_queue_ref(be_queue *q);
void be_cpu_queue_unref(be_queue *q);

/* Queues a copy of *item. ACCEL_EDEVLOST if the queue is lost, ACCEL_ENOMEM; on failure
 * nothing is queued (and a wait item's reference is still the caller's). A tiny item
 * (be_cpu_item_tiny) submitted to an idle queue (nothing queued, the worker not running a
 * batch) runs at once on the submitting thread instead: handing it to the worker and hearing
 * back costs two thread wake-ups, many times the work itself. */
RT_MUST_USE int be_cpu_queue_submit(be_queue *q, const be_cpu_item *item);

/* How many items have been submitted: an event recorded now covers them. Submitting thread. */
uint64_t be_cpu_queue_mark(be_queue *q);

/* The state of "the first `count` items of q", for objects of generation gen: 0 done,
 * RT_PENDING pending, ACCEL_EDEVLOST lost, or the queue's error. Never blocks. */
int be_cpu_queue_status(be_queue *q, uint64_t count, unsigned gen);

/* Blocks until that state is not RT_PENDING, and returns it. */
RT_MUST_USE int be_cpu_queue_wait(be_queue *q, uint64_t count, unsigned gen);

/* Wakes everything waiting on q (a fault or a reset changed what they wait for). */
void be_cpu_queue_wake(be_queue *q);

/* item.c: runs a kernel or copy item; 0 or the kernel's error. */
int be_cpu_item_run(const be_cpu_item *item);
/* item.c: true for an item of about a microsecond of work or less (a notification, a copy or
 * fill of a few KiB, a kernel over a few thousand elements); never a wait or a collective. */
bool be_cpu_item_tiny(const be_cpu_item *item);
/* collective.c: runs a BE_CPU_COLLECTIVE item. */
int be_cpu_collective_run(const be_cpu_item *item);

#endif
