/* Buffers: a typed array with a replica per memory node. Replica states are the *logical*
 * state after every op issued so far (the planner updates them when it plans an op, and the
 * task graph makes the data catch up in that order). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "actors/world.h"
#include "runtime/alloc.h"

dev_buffer *dev_buffer_create(dev_world *w, accel_dtype dtype, size_t count) {
  dev_buffer *b = rt_calloc(1, sizeof *b);
  if (b == NULL)
    return NULL;
  b->world = w;
  b->dtype = dtype;
  b->count = count;
  b->bytes = count * dev_dtype_size(dtype);
  b->pin_node = -1;
  b->foreign_node = -1;
  rt_list_push_front(&w->buffers, &b->link);
  return b;
}

dev_buffer *dev_buffer_import(dev_world *w, accel_dtype dtype, size_t count, dev_node *node,
                              be_mem mem, void (*release)(void *), void *arg) {
  dev_buffer *b = dev_buffer_create(w, dtype, count);
  if (b == NULL)
    return NULL;
  b->rep[node->index] = (dev_replica){
      .state = DEV_OWNER, .allocated = true, .node_gen = node->generation, .mem = mem};
  b->foreign_node = node->index;
  b->pin_node = node->index;
  b->release = release;
  b->release_arg = arg;
  return b;
}

/* The importer's memory is never accel's to free: the backend drops its record of it
 * (mem_unwrap needs no live device) and the importer learns that accel is done with it. */
static void foreign_free(dev_world *w, dev_buffer *b, int n) {
  dev_replica *r = &b->rep[n];
  dev_node *node = &w->nodes[n];
  if (r->allocated)
    node->be->mem_unwrap(node->dev, &r->mem);
  r->allocated = false;
  r->state = DEV_INVALID;
  b->foreign_node = -1;
  void (*release)(void *) = b->release;
  b->release = NULL;
  if (release)
    release(b->release_arg);
}

/* The replica's memory goes back to its node's cache (mem_cache.h), or, when the device is
 * closing (`closing`: the device actor's stop, where the loop already waits for the device),
 * straight to the backend. Memory of an earlier incarnation went with its context. */
static void replica_free(dev_world *w, dev_buffer *b, int n, bool closing) {
  if (n == b->foreign_node) {
    foreign_free(w, b, n);
    return;
  }
  dev_replica *r = &b->rep[n];
  dev_node *node = &w->nodes[n];
  if (r->allocated && node->dev && r->node_gen == node->generation) {
    if (closing)
      dev_mem_free(node, &r->mem);
    else
      dev_mem_cache_put(node, r->mem);
  }
  r->allocated = false;
  r->state = DEV_INVALID;
}

static void buffer_free(dev_buffer *b) {
  dev_world *w = b->world;
  for (int n = 0; n < w->nnodes; n++)
    replica_free(w, b, n, false);
  rt_list_remove(&b->link);
  rt_free(b->readers);
  rt_free(b);
}

void dev_buffer_destroy(dev_buffer *b) {
  b->destroyed = true;
  if (b->users == 0)
    buffer_free(b);
}

void dev_buffer_unuse(dev_buffer *b) {
  if (--b->users == 0 && b->destroyed)
    buffer_free(b);
}

int dev_replica_ensure_alloc(dev_buffer *b, dev_node *node) {
  dev_replica *r = &b->rep[node->index];
  if (r->allocated && r->node_gen == node->generation)
    return 0;
  if (node->dev == NULL || node->state != DEV_NODE_SERVING)
    return ACCEL_EDEVLOST;
  /* a zero-length buffer still gets a block of the smallest class */
  if (!dev_mem_cache_take(node, dev_mem_class(b->bytes), &r->mem))
    return DEV_ALLOC_MISS; /* the caller allocates on a worker (dev_mem_job_submit) */
  r->allocated = true;
  r->node_gen = node->generation;
  r->state = DEV_INVALID;
  return 0;
}

/* A valid node for reading, preferring `prefer`, then the host, then any. -1 if none. */
int dev_buffer_valid_node(const dev_buffer *b, int prefer) {
  const dev_world *w = b->world;
  if (prefer >= 0 && b->rep[prefer].state != DEV_INVALID)
    return prefer;
  if (b->rep[DEV_HOST_NODE].state != DEV_INVALID)
    return DEV_HOST_NODE;
  for (int n = 1; n < w->nnodes; n++)
    if (b->rep[n].state != DEV_INVALID)
      return n;
  return -1;
}

/* The device behind `node` was lost: its replicas are gone. A buffer that had no other valid
 * replica is lost (reported as ACCEL_EDATALOST on its next use). */
void dev_buffer_drop_node(dev_world *w, dev_node *node) {
  RT_LIST_FOR_EACH(dev_buffer, b, &w->buffers, link) {
    bool was_valid = b->rep[node->index].state != DEV_INVALID;
    /* Called before the reset: mem_free still reaches the old context (which may refuse
     * after a fault; the memory then goes with the context). */
    replica_free(w, b, node->index, true);
    if (was_valid && dev_buffer_valid_node(b, -1) < 0)
      b->lost = true;
  }
}
