/* Op envelopes reused by a client context (actors/op_pool.c): a reused envelope reads as
 * calloc'd wherever an op may read before writing (the header, the first buffers, the
 * payload, the tail; all buffers and the whole payload for launches and collectives); an op
 * goes back to its own pool; a pool keeps at most 64 and frees the rest; ops with no pool are
 * freed; draining frees what it keeps (LeakSanitizer checks under ASan). */
#include <stddef.h>
#include <string.h>

#include "actors/op.h"
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
static void dirty(dev_op *op) {
  dev_op_pool *pool = op->pool;
  memset(op, 0xab, sizeof *op);
  op->pool = pool;
}

static void check_clean(const dev_op *op, uint32_t kind, bool wide, dev_op_pool *pool) {
  CHECK_EQ(op->h.kind, kind);
  dev_op_header h = op->h;
  h.kind = 0;
  CHECK(all_zero(&h, sizeof h));
  CHECK_EQ(op->nbufs, 0);
  CHECK(all_zero(op->bufs, (wide ? DEV_OP_MAX_BUFS : SMALL_BUFS) * sizeof op->bufs[0]));
  CHECK(all_zero(&op->u, wide ? sizeof op->u : SMALL_PAYLOAD));
  CHECK(op->result == NULL && op->future == NULL && op->done == NULL && op->owner == NULL);
  CHECK(op->acct == NULL && op->t_issued_ns == 0 && op->ran_on == 0);
  CHECK_PTR_EQ(op->pool, pool);
}

TEST(a_reused_envelope_reads_as_new_where_an_op_reads) {
  dev_op_pool pool;
  dev_op_pool_init(&pool);
  dev_op *op = dev_op_alloc(&pool, DEV_OP_FILL);
  CHECK(op != NULL);
  check_clean(op, DEV_OP_FILL, false, &pool);
  dirty(op);
  dev_op_free(op);
  dev_op *again = dev_op_alloc(&pool, DEV_OP_GEMM);
  CHECK_PTR_EQ(again, op); /* the pool's */
  check_clean(again, DEV_OP_GEMM, false, &pool);
  dirty(again);
  dev_op_free(again);
  dev_op *wide = dev_op_alloc(&pool, DEV_OP_LAUNCH);
  CHECK_PTR_EQ(wide, op);
  check_clean(wide, DEV_OP_LAUNCH, true, &pool);
  dirty(wide);
  dev_op_free(wide);
  dev_op *coll = dev_op_alloc(&pool, DEV_OP_COLLECTIVE);
  check_clean(coll, DEV_OP_COLLECTIVE, true, &pool);
  dev_op_free(coll);
  dev_op_pool_drain(&pool);
}

TEST(a_pool_keeps_at_most_64_and_frees_the_rest) {
  dev_op_pool pool;
  dev_op_pool_init(&pool);
  dev_op *ops[POOL_MAX + 1];
  for (int i = 0; i <= POOL_MAX; i++) {
    ops[i] = dev_op_alloc(&pool, DEV_OP_COPY);
    CHECK(ops[i] != NULL);
  }
  for (int i = 0; i <= POOL_MAX; i++)
    dev_op_free(ops[i]);
  CHECK_EQ(pool.len, POOL_MAX);        /* the 65th was freed (ASan sees a leak or a double free) */
  for (int i = 0; i < POOL_MAX; i++) { /* every kept one comes back, none twice */
    dev_op *op = dev_op_alloc(&pool, DEV_OP_COPY);
    for (int j = 0; j < i; j++)
      CHECK(ops[j] != op);
    ops[i] = op;
  }
  CHECK_EQ(pool.len, 0);
  for (int i = 0; i < POOL_MAX; i++)
    dev_op_free(ops[i]);
  dev_op_pool_drain(&pool);
}

TEST(ops_without_a_pool_are_freed) {
  dev_op *op = dev_op_alloc(NULL, DEV_OP_READ);
  CHECK(op != NULL);
  check_clean(op, DEV_OP_READ, true, NULL); /* calloc'd: all of it */
  dev_op_free(op);                          /* ASan: a leak if not freed */
  dev_op_free(NULL);
}

static const test_case tests[] = {
    TEST_CASE(a_reused_envelope_reads_as_new_where_an_op_reads),
    TEST_CASE(a_pool_keeps_at_most_64_and_frees_the_rest),
    TEST_CASE(ops_without_a_pool_are_freed),
};

TEST_MAIN(tests)
