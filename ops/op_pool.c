/* Calls kept for reuse by a client context (call.h: dev_call_pool). */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "ops/call.h"
#include "runtime/alloc.h"

#define POOL_MAX 64       /* calls one pool keeps */
#define SMALL_PAYLOAD 128 /* bytes of `u` every kind but launch and collective fits in */
#define SMALL_BUFS 3      /* buffers every kind but launch and collective fits in */

_Static_assert(sizeof(be_gemm_args) <= SMALL_PAYLOAD, "gemm's payload is zeroed whole");
_Static_assert(sizeof(be_rng_args) <= SMALL_PAYLOAD, "rng's payload is zeroed whole");
_Static_assert(sizeof(((dev_op *)0)->u.module) <= SMALL_PAYLOAD, "module's payload too");
_Static_assert(sizeof(((dev_op *)0)->u.softmax) <= SMALL_PAYLOAD, "softmax's payload too");
_Static_assert(offsetof(dev_call, op) == 0, "the op comes first: the tail is cleared whole");

void dev_call_pool_init(dev_call_pool *pool) {
  pthread_mutex_init(&pool->mu, NULL);
  pool->head = NULL;
  pool->len = 0;
}

void dev_call_pool_drain(dev_call_pool *pool) {
  while (pool->head) {
    dev_call *call = pool->head;
    pool->head = call->pool_next;
    rt_free(call);
  }
  pool->len = 0;
  pthread_mutex_destroy(&pool->mu);
}

/* A reused call is zeroed only where the new op may read before writing: every cache line
 * written here crosses from the core that freed it. */
static void clear(dev_call *call, uint32_t kind) {
  bool wide = kind == DEV_OP_LAUNCH || kind == DEV_OP_COLLECTIVE;
  dev_op *op = &call->op;
  memset(op, 0,
         offsetof(dev_op, bufs) + (wide ? DEV_OP_MAX_BUFS : SMALL_BUFS) * sizeof op->bufs[0]);
  memset(&op->u, 0, wide ? sizeof op->u : SMALL_PAYLOAD);
  memset(&call->result, 0, sizeof *call - offsetof(dev_call, result));
}

static dev_call *take(dev_call_pool *pool) {
  pthread_mutex_lock(&pool->mu);
  dev_call *call = pool->head;
  if (call) {
    pool->head = call->pool_next;
    pool->len--;
  }
  pthread_mutex_unlock(&pool->mu);
  return call;
}

dev_call *dev_call_alloc(dev_call_pool *pool, uint32_t kind) {
  dev_call *call = pool ? take(pool) : NULL;
  if (call)
    clear(call, kind);
  else if ((call = rt_calloc(1, sizeof *call)) == NULL)
    return NULL;
  call->op.h.kind = kind;
  call->pool = pool;
  return call;
}

void dev_call_free(dev_call *call) {
  dev_call_pool *pool = call ? call->pool : NULL;
  if (pool) {
    pthread_mutex_lock(&pool->mu);
    bool kept = pool->len < POOL_MAX;
    if (kept) {
      call->pool_next = pool->head;
      pool->head = call;
      pool->len++;
    }
    pthread_mutex_unlock(&pool->mu);
    if (kept)
      return;
  }
  rt_free(call);
}
