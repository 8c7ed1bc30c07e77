/* Device memory without blocking the loop (mem_cache.c). The backends' mem_alloc and mem_free
 * may block (cuMemAlloc and cuMemFree synchronise the device), so the loop never calls them
 * for ops: freed replicas go to a per-node cache of blocks by size class, from which later
 * replicas take theirs; a miss is allocated on a worker while the session holds the op (and
 * the ones after it), and blocks past the cache's bound are freed on a worker. Sizes are
 * rounded to a class first (512 B steps below 1 MiB, 2 MiB steps above, as PyTorch's
 * allocator does), so a block serves any request of its class.
 *
 * Loop thread only, except the jobs' work functions (on workers), which take the node's
 * build_mu to use the device (as module builds do: the device actor waits for them before it
 * closes the device). */
#ifndef DEV_MEM_CACHE_H
#define DEV_MEM_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/runtime.h"
#include "backends/backend.h"

struct dev_node;
struct dev_buffer;
struct dev_op;

typedef struct dev_mem_cache {
  be_mem *blocks; /* free blocks of the current incarnation, oldest first */
  uint32_t len, cap;
  uint64_t bytes;                 /* their sum */
  uint64_t limit;                 /* past it, the oldest are freed (on a worker) */
  uint64_t hits, misses, trimmed; /* counters for the tests and reports */
} dev_mem_cache;

/* The size a replica of `bytes` really takes. */
size_t dev_mem_class(size_t bytes);
/* A cached block of exactly `cls` bytes for the node's current incarnation, or false. */
bool dev_mem_cache_take(struct dev_node *node, size_t cls, be_mem *out);
/* A block of the node's current incarnation is free again: cached, or freed on a worker
 * past the bound (or on the loop only if no job can be made: out of memory). */
void dev_mem_cache_put(struct dev_node *node, be_mem mem);
/* Every cached block is freed (on a worker): before the device closes, and when an
 * allocation failed for lack of device memory. */
void dev_mem_cache_flush(struct dev_node *node);
/* The device closes (its actor's stop, where the loop waits for the device anyway): every
 * cached block is freed now, before the context goes. */
void dev_mem_cache_close(struct dev_node *node);
void dev_mem_cache_fini(dev_mem_cache *c);

/* ---- allocations on a worker ---- */

/* One replica an op needs memory for (the cache had none). */
typedef struct dev_mem_need {
  struct dev_buffer *buf;
  struct dev_node *node;
  uint32_t node_gen;
  size_t cls;
  be_mem mem; /* filled by the worker */
  int status; /* its mem_alloc's result */
} dev_mem_need;

typedef struct dev_mem_job dev_mem_job;

/* The op's replicas on `node` (and the host, for a copy between devices) that have no
 * memory and find none in the cache; at most DEV_OP_MAX_BUFS * 2. */
uint32_t dev_mem_needs(struct dev_node *node, const struct dev_op *op, struct dev_buffer *bufs[],
                       dev_mem_need *needs);
/* Allocates them on a worker; the actor `self` gets a message of type `msg_type` whose data
 * is the job (give it to dev_mem_job_done). The buffers are held (users) until then. */
int dev_mem_job_submit(accel_actor *self, dev_mem_need *needs, uint32_t n, uint32_t msg_type);
/* On the loop: attaches what was allocated to its replicas (if they still want it); 0, or
 * the first failure. Frees the job. */
int dev_mem_job_done(accel_msg *msg);

/* ---- the backend's blocking entries, checked ---- */

/* Every call of the backend's mem_alloc and mem_free from the device layer goes through these.
 * Debug check: with ACCEL_CHECK_LOOP_BLOCKING=1 in the environment (meson sets it for the
 * tests), one made on a runtime's loop thread logs and aborts, unless the thread is inside
 * dev_blocking_begin/end: a device's start and stop (open, close, reset: the loop waits for
 * the device there by design) and the last-resort free when no job can be made. */
int dev_mem_alloc(struct dev_node *node, size_t bytes, be_mem *out);
void dev_mem_free(struct dev_node *node, be_mem *mem);
void dev_blocking_begin(void);
void dev_blocking_end(void);

#endif
