/* Envelopes kept for reuse by a client context (op.h: dev_op_pool). */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "actors/op.h"
#include "runtime/alloc.h"

#define POOL_MAX 64       /* envelopes one pool keeps */
#define SMALL_PAYLOAD 128 /* bytes of `u` every kind but launch and collective fits in */
#define SMALL_BUFS 3      /* buffers every kind but launch and collective fits in */

_Static_assert(sizeof(be_gemm_args) <= SMALL_PAYLOAD, "gemm's payload is zeroed whole");
_Static_assert(sizeof(be_rng_args) <= SMALL_PAYLOAD, "rng's payload is zeroed whole");
_Static_assert(sizeof(((dev_op *)0)->u.module) <= SMALL_PAYLOAD, "module's payload too");
_Static_assert(sizeof(((dev_op *)0)->u.softmax) <= SMALL_PAYLOAD, "softmax's payload too");

void dev_op_pool_init(dev_op_pool *pool) {
  pthread_mutex_init(&pool->mu, NULL);
  pool->head = NULL;
  pool->len = 0;
}

void dev_op_pool_drain(dev_op_pool *pool) {
  while (pool->head) {
    dev_op *op = pool->head;
    pool->head = op->pool_next;
    rt_free(op);
  }
  pool->len = 0;
  pthread_mutex_destroy(&pool->mu);
}

/* A reused envelope is zeroed only where the new op may read before writing: every cache
 * line written here crosses from the core that freed it. */
static void clear(dev_op *op, uint32_t kind) {
  bool wide = kind == DEV_OP_LAUNCH || kind == DEV_OP_COLLECTIVE;
  memset(op, 0,
         offsetof(dev_op, bufs) + (wide ? DEV_OP_MAX_BUFS : SMALL_BUFS) * sizeof op->bufs[0]);
  memset(&op->u, 0, wide ? sizeof op->u : SMALL_PAYLOAD);
  memset(&op->result, 0, sizeof *op - offsetof(dev_op, result));
}

static dev_op *take(dev_op_pool *pool) {
  pthread_mutex_lock(&pool->mu);
  dev_op *op = pool->head;
  if (op) {
    pool->head = op->pool_next;
    pool->len--;
  }
  pthread_mutex_unlock(&pool->mu);
  return op;
}

dev_op *dev_op_alloc(dev_op_pool *pool, uint32_t kind) {
  dev_op *op = pool ? take(pool) : NULL;
  if (op)
    clear(op, kind);
  else if ((op = rt_calloc(1, sizeof *op)) == NULL)
    return NULL;
  op->h.kind = kind;
  op->pool = pool;
  return op;
}

void dev_op_free(dev_op *op) {
  dev_op_pool *pool = op ? op->pool : NULL;
  if (pool) {
    pthread_mutex_lock(&pool->mu);
    bool kept = pool->len < POOL_MAX;
    if (kept) {
      op->pool_next = pool->head;
      pool->head = op;
      pool->len++;
    }
    pthread_mutex_unlock(&pool->mu);
    if (kept)
      return;
  }
  rt_free(op);
}
