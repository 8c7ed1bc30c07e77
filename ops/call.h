/* An op on its way: the op (op.h) and what its completion needs, which never goes on the
 * wire: who is told (a future, or a callback that replies on the wire), the submitter's
 * owner, the session's accounting, and what the session resolved for it. A call is built
 * on a client's thread (or by acceld's decoder) and finished on the loop thread. */
#ifndef OPS_CALL_H
#define OPS_CALL_H

#include <pthread.h>
#include <stdint.h>

#include "accel/accel.h"
#include "ops/op.h"

struct dev_module;
struct dev_session_acct;
struct be_kernel;

typedef struct dev_call {
  dev_op op;
  /* What the op made besides its status, for the caller (malloc'd, NUL-terminated): a
   * module load's build log. Whoever finishes the call hands it on or frees it. */
  char *result;
  accel_future *future; /* completed with the op's status; NULL for fire-and-forget */
  /* If set, called instead of completing `future` (the daemon replies on the wire); it owns
   * and frees the call. `owner` is the submitter's (e.g. the frame holding a write's bytes). */
  void (*done)(struct dev_call *call, int status);
  /* If set, also called once with the op's status on the thread that learns its device work
   * is done (a backend's callback, a worker's wait), before the loop finishes the op: quick
   * and thread-safe, reading only what the call held at submission. Never during or after
   * `done`; not at all for an op that ends without device work, or whose completion the loop
   * sees first. acceld writes a status reply here (server_ops.c). */
  void (*early)(struct dev_call *call, int status);
  void *owner;
  struct dev_session_acct *acct; /* set by the session */
  /* A launch's module and kernel, set by the session when it places the launch. */
  struct dev_module *mod;     /* held until the op finishes */
  struct be_kernel *kernel;   /* owned by the module's build */
  uint64_t t_issued_ns;       /* uv_hrtime() when the session took it (metrics) */
  uint64_t trace_id;          /* its number in the trace being recorded; 0: not traced */
  uint32_t ran_on;            /* 1 + the node it was planned on; 0: never placed (metrics) */
  struct dev_call_pool *pool; /* where dev_call_free puts it back (NULL: it is freed) */
  struct dev_call *pool_next; /* in the pool */
} dev_call;

/* Calls kept for reuse by one client context (op_pool.c). A call is built on a client's
 * thread and freed on the loop's: a fresh allocation each time pulled the allocator's state
 * and the block's cache lines across cores, about 4 us of a 17 us tiny op on a 16-core host.
 * A pool must outlive every call taken from it (an embedded context drains it once its world
 * has ended). */
typedef struct dev_call_pool {
  pthread_mutex_t mu;
  dev_call *head;
  uint32_t len;
} dev_call_pool;

void dev_call_pool_init(dev_call_pool *pool);
/* Frees what it keeps. No call of the pool may be in use any more. */
void dev_call_pool_drain(dev_call_pool *pool);
/* A new call of an op of that kind, zeroed as calloc would for what the op may read (the
 * header, the buffers the op will not add itself, the payload, the tail); from the pool if
 * given. NULL when out of memory. */
dev_call *dev_call_alloc(dev_call_pool *pool, uint32_t kind);
/* Back to its pool, or freed. A call's `result` is its owner's to free first. */
void dev_call_free(dev_call *call);

#endif
