/* Calls reused by a client context (ops/op_pool.c): a reused envelope reads as
 * calloc'd wherever an op may read before writing (the header, the first buffers, the
 * payload, the tail; all buffers and the whole payload for launches and collectives); an op
 * goes back to its own pool; a pool keeps at most 64 and frees the rest; ops with no pool are
 * freed; draining frees what it keeps (LeakSanitizer checks under ASan). */
#include <stddef.h>
#include <string.h>

#include "ops/call.h"
#include "test.h"

enum { POOL_MAX = 64, SMALL_BUFS = 3, SMALL_PAYLOAD = 128 };

static bool all_zero(const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != 0)
      return false;
  return true;
}

/* An envelope written all over, as a finished op leaves it (but for its pool link). */
static void dirty(dev_call *call) {
  dev_call_pool *pool = call->pool;
  memset(call, 0xab, sizeof *call);
  call->pool = pool;
}

static void check_clean(const dev_call *call, uint32_t kind, bool wide, dev_call_pool *pool) {
  const dev_op *op = &call->op;
  CHECK_EQ(op->h.kind, kind);
  dev_op_header h = op->h;
  h.kind = 0;
  CHECK(all_zero(&h, sizeof h));
  CHECK_EQ(op->nbufs, 0);
  CHECK(all_zero(op->bufs, (wide ? DEV_OP_MAX_BUFS : SMALL_BUFS) * sizeof op->bufs[0]));
  CHECK(all_zero(&op->u, wide ? sizeof op->u : SMALL_PAYLOAD));
  CHECK(call->result == NULL && call->future == NULL && call->done == NULL && call->owner == NULL);
  CHECK(call->acct == NULL && call->mod == NULL && call->kernel == NULL);
  CHECK(call->t_issued_ns == 0 && call->ran_on == 0);
  CHECK_PTR_EQ(call->pool, pool);
}

TEST(a_reused_envelope_reads_as_new_where_an_op_reads) {
  dev_call_pool pool;
  dev_call_pool_init(&pool);
  dev_call *op = dev_call_alloc(&pool, DEV_OP_FILL);
  CHECK(op != NULL);
  check_clean(op, DEV_OP_FILL, false, &pool);
  dirty(op);
  dev_call_free(op);
  dev_call *again = dev_call_alloc(&pool, DEV_OP_GEMM);
  CHECK_PTR_EQ(again, op); /* the pool's */
  check_clean(again, DEV_OP_GEMM, false, &pool);
  dirty(again);
  dev_call_free(again);
  dev_call *wide = dev_call_alloc(&pool, DEV_OP_LAUNCH);
  CHECK_PTR_EQ(wide, op);
  check_clean(wide, DEV_OP_LAUNCH, true, &pool);
  dirty(wide);
  dev_call_free(wide);
  dev_call *coll = dev_call_alloc(&pool, DEV_OP_COLLECTIVE);
  check_clean(coll, DEV_OP_COLLECTIVE, true, &pool);
  dev_call_free(coll);
  dev_call_pool_drain(&pool);
}

TEST(a_pool_keeps_at_most_64_and_frees_the_rest) {
  dev_call_pool pool;
  dev_call_pool_init(&pool);
  dev_call *ops[POOL_MAX + 1];
  for (int i = 0; i <= POOL_MAX; i++) {
    ops[i] = dev_call_alloc(&pool, DEV_OP_COPY);
    CHECK(ops[i] != NULL);
  }
  for (int i = 0; i <= POOL_MAX; i++)
    dev_call_free(ops[i]);
  CHECK_EQ(pool.len, POOL_MAX);        /* the 65th was freed (ASan sees a leak or a double free) */
  for (int i = 0; i < POOL_MAX; i++) { /* every kept one comes back, none twice */
    dev_call *op = dev_call_alloc(&pool, DEV_OP_COPY);
    for (int j = 0; j < i; j++)
      CHECK(ops[j] != op);
    ops[i] = op;
  }
  CHECK_EQ(pool.len, 0);
  for (int i = 0; i < POOL_MAX; i++)
    dev_call_free(ops[i]);
  dev_call_pool_drain(&pool);
}

TEST(ops_without_a_pool_are_freed) {
  dev_call *op = dev_call_alloc(NULL, DEV_OP_READ);
  CHECK(op != NULL);
  check_clean(op, DEV_OP_READ, true, NULL); /* calloc'd: all of it */
  dev_call_free(op);                        /* ASan: a leak if not freed */
  dev_call_free(NULL);
}

static const test_case tests[] = {
    TEST_CASE(a_reused_envelope_reads_as_new_where_an_op_reads),
    TEST_CASE(a_pool_keeps_at_most_64_and_frees_the_rest),
    TEST_CASE(ops_without_a_pool_are_freed),
};

TEST_MAIN(tests)
