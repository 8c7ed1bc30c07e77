/* Device memory without blocking the loop (mem_cache.h). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "actors/device.h"
#include "runtime/alloc.h"
#include "runtime/loop.h"

#define SMALL_STEP 512u
#define LARGE_STEP (2u << 20)
#define SMALL_MAX (1u << 20)
#define CACHE_SHARE 8          /* a node caches at most 1/8 of its memory... */
#define CACHE_MAX (1ull << 30) /* ...and at most 1 GiB */

size_t dev_mem_class(size_t bytes) {
  size_t step = bytes <= SMALL_MAX ? SMALL_STEP : LARGE_STEP;
  if (bytes == 0)
    return step;
  return bytes > SIZE_MAX - step ? bytes : (bytes + step - 1) / step * step;
}

static uint64_t cache_limit(const dev_node *node) {
  uint64_t share = node->info.mem_bytes / CACHE_SHARE;
  return share < CACHE_MAX ? share : CACHE_MAX;
}

bool dev_mem_cache_take(dev_node *node, size_t cls, be_mem *out) {
  dev_mem_cache *c = &node->cache;
  for (uint32_t i = c->len; i-- > 0;) { /* the newest first: likely still warm */
    if (c->blocks[i].bytes != cls)
      continue;
    *out = c->blocks[i];
    memmove(&c->blocks[i], &c->blocks[i + 1], (c->len - i - 1) * sizeof *c->blocks);
    c->len--;
    c->bytes -= cls;
    c->hits++;
    return true;
  }
  c->misses++;
  return false;
}

/* ---- freeing on a worker ---- */

typedef struct free_job {
  uv_work_t req;
  dev_node *node;
  uint32_t gen;
  uint32_t n;
  be_mem mems[]; /* n */
} free_job;

/* Takes the device for a worker: false if the incarnation `gen` is gone (its memory went with
 * its context). The device actor waits for `builds` to drop to 0 before it closes. */
bool dev_node_enter(dev_node *node, uint32_t gen) {
  pthread_mutex_lock(&node->build_mu);
  bool ok = node->dev != NULL && node->generation == gen;
  node->builds += ok;
  pthread_mutex_unlock(&node->build_mu);
  return ok;
}

void dev_node_leave(dev_node *node) {
  pthread_mutex_lock(&node->build_mu);
  node->builds--;
  pthread_cond_broadcast(&node->build_cv);
  pthread_mutex_unlock(&node->build_mu);
}

static void free_work(uv_work_t *req) {
  free_job *j = req->data;
  if (!dev_node_enter(j->node, j->gen))
    return;
  for (uint32_t i = 0; i < j->n; i++)
    dev_mem_free(j->node, &j->mems[i]);
  dev_node_leave(j->node);
}

static void free_done(uv_work_t *req, int status) {
  rt_free(req->data);
}

/* The n blocks are freed on a worker; on the loop only when no job can be made (out of
 * memory: freeing is what gives memory back). */
static void free_blocks(dev_node *node, const be_mem *mems, uint32_t n) {
  if (n == 0)
    return;
  free_job *j = rt_malloc(sizeof *j + n * sizeof *mems);
  if (j != NULL) {
    *j = (free_job){.node = node, .gen = node->generation, .n = n};
    memcpy(j->mems, mems, n * sizeof *mems);
    j->req.data = j;
    if (uv_queue_work(rt_uv_loop(node->world->rt), &j->req, free_work, free_done) == 0)
      return;
    rt_free(j);
  }
  dev_blocking_begin(); /* out of memory: giving memory back comes first */
  for (uint32_t i = 0; i < n; i++) {
    be_mem m = mems[i];
    dev_mem_free(node, &m);
  }
  dev_blocking_end();
}

/* Frees the oldest blocks until the cache holds at most `keep` bytes. */
static void trim(dev_node *node, uint64_t keep) {
  dev_mem_cache *c = &node->cache;
  uint32_t n = 0;
  uint64_t bytes = c->bytes;
  while (n < c->len && bytes > keep)
    bytes -= c->blocks[n++].bytes;
  if (n == 0)
    return; /* (blocks may be NULL then: memmove must not see it) */
  free_blocks(node, c->blocks, n);
  memmove(c->blocks, c->blocks + n, (c->len - n) * sizeof *c->blocks);
  c->len -= n;
  c->bytes = bytes;
  c->trimmed += n;
}

void dev_mem_cache_put(dev_node *node, be_mem mem) {
  dev_mem_cache *c = &node->cache;
  if (c->len == c->cap) {
    uint32_t cap = c->cap ? c->cap * 2 : 64;
    be_mem *p = rt_realloc(c->blocks, cap * sizeof *p);
    if (p == NULL) {
      free_blocks(node, &mem, 1); /* no room to keep it */
      return;
    }
    c->blocks = p;
    c->cap = cap;
  }
  c->blocks[c->len++] = mem;
  c->bytes += mem.bytes;
  if (c->bytes > cache_limit(node))
    trim(node, cache_limit(node));
}

void dev_mem_cache_flush(dev_node *node) {
  if (node->dev != NULL)
    trim(node, 0);
}

void dev_mem_cache_close(dev_node *node) {
  dev_mem_cache *c = &node->cache;
  for (uint32_t i = 0; node->dev != NULL && i < c->len; i++)
    dev_mem_free(node, &c->blocks[i]);
  c->len = 0;
  c->bytes = 0;
}

void dev_mem_cache_fini(dev_mem_cache *c) {
  rt_free(c->blocks);
  *c = (dev_mem_cache){0};
}

/* ---- allocating on a worker ---- */

struct dev_mem_job {
  uint32_t n;
  dev_mem_need needs[]; /* n */
};

static bool wants_memory(const dev_buffer *b, const dev_node *node) {
  const dev_replica *r = &b->rep[node->index];
  return !(r->allocated && r->node_gen == node->generation);
}

/* Adds (b, node) unless the cache serves it now or it is listed already. */
static void need(dev_mem_need *needs, uint32_t *n, dev_buffer *b, dev_node *node) {
  if (!wants_memory(b, node))
    return;
  for (uint32_t i = 0; i < *n; i++)
    if (needs[i].buf == b && needs[i].node == node)
      return;
  needs[(*n)++] = (dev_mem_need){
      .buf = b, .node = node, .node_gen = node->generation, .cls = dev_mem_class(b->bytes)};
}

uint32_t dev_mem_needs(dev_node *node, const dev_op *op, dev_buffer *bufs[], dev_mem_need *needs) {
  dev_world *w = node->world;
  dev_node *host = &w->nodes[DEV_HOST_NODE];
  uint32_t n = 0;
  for (uint32_t i = 0; i < op->nbufs; i++) {
    dev_node *at = dev_op_buf_node(w, op, i, node);
    if (dev_replica_ensure_alloc(bufs[i], at) == DEV_ALLOC_MISS)
      need(needs, &n, bufs[i], at);
    /* Valid only on a device that `at` cannot copy from: the copy goes through the host. */
    if (dev_copy_via_host(w, bufs[i], at) &&
        dev_replica_ensure_alloc(bufs[i], host) == DEV_ALLOC_MISS)
      need(needs, &n, bufs[i], host);
  }
  return n;
}

static int alloc_work(void *data) {
  dev_mem_job *j = data;
  for (uint32_t i = 0; i < j->n; i++) {
    dev_mem_need *d = &j->needs[i];
    d->status = ACCEL_EDEVLOST;
    if (!dev_node_enter(d->node, d->node_gen))
      continue;
    d->status = dev_mem_alloc(d->node, d->cls, &d->mem);
    dev_node_leave(d->node);
  }
  return 0;
}

/* A block allocated for a replica that no longer wants it (a fault came between): kept for
 * later if its incarnation lives on. */
static void give_back(dev_mem_need *d) {
  if (d->status == 0 && d->node->dev != NULL && d->node->generation == d->node_gen)
    dev_mem_cache_put(d->node, d->mem);
}

static void job_finish(dev_mem_job *j, bool attach, int *first_error) {
  for (uint32_t i = 0; i < j->n; i++) {
    dev_mem_need *d = &j->needs[i];
    dev_replica *r = &d->buf->rep[d->node->index];
    bool current = d->node->generation == d->node_gen && d->node->state == DEV_NODE_SERVING;
    if (attach && d->status == 0 && current && wants_memory(d->buf, d->node)) {
      *r = (dev_replica){.allocated = true, .node_gen = d->node_gen, .mem = d->mem};
    } else {
      give_back(d);
      /* A device that restarted meanwhile is no error: the op, not issued yet, is planned
       * again for the new incarnation (or fails there if it is not serving). */
      if (first_error && *first_error == 0 && d->status != 0 && d->status != ACCEL_EDEVLOST)
        *first_error = d->status;
    }
    dev_buffer_unuse(d->buf);
  }
  rt_free(j);
}

static void job_drop(void *data) {
  job_finish(data, false, NULL); /* the actor went away first */
}

int dev_mem_job_submit(accel_actor *self, dev_mem_need *needs, uint32_t n, uint32_t type) {
  dev_mem_job *j = rt_malloc(sizeof *j + n * sizeof *needs);
  if (j == NULL)
    return ACCEL_ENOMEM;
  j->n = n;
  memcpy(j->needs, needs, n * sizeof *needs);
  int rc = accel_work_submit(self, alloc_work, j, job_drop, type);
  if (rc != 0) {
    rt_free(j);
    return rc;
  }
  for (uint32_t i = 0; i < n; i++)
    needs[i].buf->users++; /* alive until the job is done */
  return 0;
}

int dev_mem_job_done(accel_msg *msg) {
  dev_mem_job *j = msg->data;
  msg->data = NULL;
  int rc = 0;
  job_finish(j, true, &rc);
  return rc;
}

/* ---- the check ---- */

static _Thread_local int blocking_allowed;

void dev_blocking_begin(void) {
  blocking_allowed++;
}

void dev_blocking_end(void) {
  blocking_allowed--;
}

static void check_not_on_loop(const dev_node *node, const char *what) {
  static atomic_int enabled = -1; /* read first by several work threads at once */
  int on = atomic_load_explicit(&enabled, memory_order_relaxed);
  if (on < 0) {
    const char *e = getenv("ACCEL_CHECK_LOOP_BLOCKING");
    on = e != NULL && strcmp(e, "1") == 0;
    atomic_store_explicit(&enabled, on, memory_order_relaxed);
  }
  if (!on || blocking_allowed > 0 || !rt_on_a_loop())
    return;
  accel_log(ACCEL_LOG_ERROR, "device",
            "%s on the loop thread (device %d): it may block "
            "every client (ACCEL_CHECK_LOOP_BLOCKING)",
            what, node->device);
  abort();
}

int dev_mem_alloc(dev_node *node, size_t bytes, be_mem *out) {
  check_not_on_loop(node, "mem_alloc");
  return node->be->mem_alloc(node->dev, bytes, out);
}

void dev_mem_free(dev_node *node, be_mem *mem) {
  check_not_on_loop(node, "mem_free");
  node->be->mem_free(node->dev, mem);
}
