/* Planning: turns one op into tasks, in issue order. For each buffer the op reads (or writes
 * only in part) on a node where it has no valid copy, a transfer task brings one (through the
 * host between two devices); then the op's own task. Replica states change here, at issue
 * time, so the next op is planned against the state this one leaves; the task graph makes the
 * bytes follow in that order. */
#include "actors/device.h"

static bool needs_valid_copy(const dev_op_buf *ob, const dev_buffer *b) {
  if (ob->access & DEV_READ)
    return true;
  return !(ob->access == DEV_WRITE_ALL && ob->offset == 0 && ob->count == b->count);
}

/* One transfer task to `dst` from `src` (-1: zero-fill a never-written buffer). */
static int add_transfer(dev_world *w, dev_buffer *b, int src, int dst, dev_op *op) {
  /* A copy out of a device runs on that device; the others where they land. */
  dev_node *runs_on = &w->nodes[dst == DEV_HOST_NODE && src > DEV_HOST_NODE ? src : dst];
  dev_task *t = dev_task_create(w, DEV_TASK_TRANSFER, runs_on, DEV_Q_MEM);
  if (t == NULL)
    return ACCEL_ENOMEM;
  t->src_node = src;
  t->completion = (accel_completion)op->h.completion;
  dev_task_count_for(t, op);
  /* It rewrites a replica: ordered like a writer, so readers of that replica wait for it. */
  int rc = dev_task_use(t, b, DEV_RW);
  if (src >= 0)
    b->rep[src].state = DEV_SHARED;
  b->rep[dst].state = DEV_SHARED;
  dev_task_ready_check(t);
  return rc;
}

/* Makes b valid on node n, logically now and physically in issue order. */
static int bring_valid(dev_world *w, dev_buffer *b, int n, dev_op *op) {
  if (b->rep[n].state != DEV_INVALID)
    return 0;
  int src = dev_buffer_valid_node(b, -1);
  if (src < 0 || src == DEV_HOST_NODE || n == DEV_HOST_NODE)
    return add_transfer(w, b, src, n, op);
  int rc = add_transfer(w, b, src, DEV_HOST_NODE, op); /* device -> host -> device */
  return rc != 0 ? rc : add_transfer(w, b, DEV_HOST_NODE, n, op);
}

static void mark_written(dev_buffer *b, int n, int nnodes) {
  for (int i = 0; i < nnodes; i++)
    b->rep[i].state = DEV_INVALID;
  b->rep[n].state = DEV_OWNER;
  b->lost = false;
}

/* First pass: everything that can fail before any task exists. */
static int check_and_allocate(dev_world *w, dev_op *op, dev_buffer *bufs[], dev_node *node) {
  if (node->state != DEV_NODE_SERVING)
    return ACCEL_EDEVLOST;
  for (uint32_t i = 0; i < op->nbufs; i++) {
    dev_buffer *b = bufs[i];
    bool needs_valid = needs_valid_copy(&op->bufs[i], b);
    if (b->lost && needs_valid)
      return ACCEL_EDATALOST;
    int rc = dev_replica_ensure_alloc(b, node);
    /* Valid only on another device: the copy goes through a host replica. */
    if (rc == 0 && needs_valid && b->rep[node->index].state == DEV_INVALID &&
        dev_buffer_valid_node(b, -1) > DEV_HOST_NODE)
      rc = dev_replica_ensure_alloc(b, &w->nodes[DEV_HOST_NODE]);
    if (rc == DEV_ALLOC_MISS) /* the caller allocates first (dev_mem_needs): a bug */
      return ACCEL_EINVAL;
    if (rc != 0)
      return rc;
  }
  return 0;
}

int dev_plan_op(dev_world *w, dev_op *op, dev_buffer *bufs[DEV_OP_MAX_BUFS], dev_node *node) {
  int rc = check_and_allocate(w, op, bufs, node);
  if (rc != 0)
    return rc;
  dev_task *t = dev_task_create(w, DEV_TASK_OP, node, dev_op_queue(op->h.kind));
  if (t == NULL)
    return ACCEL_ENOMEM;
  t->op = op;
  op->ran_on = (uint32_t)node->index + 1;
  t->completion = (accel_completion)op->h.completion;
  dev_task_count_for(t, op);
  for (uint32_t i = 0; i < op->nbufs && rc == 0; i++)
    if (needs_valid_copy(&op->bufs[i], bufs[i]))
      rc = bring_valid(w, bufs[i], node->index, op);
  for (uint32_t i = 0; i < op->nbufs && rc == 0; i++) {
    rc = dev_task_use(t, bufs[i], op->bufs[i].access);
    if (op->bufs[i].access & DEV_WRITE)
      mark_written(bufs[i], node->index, w->nnodes);
  }
  if (rc != 0)
    t->status = rc; /* out of memory while planning: the op fails, in order */
  dev_task_ready_check(t);
  return 0;
}
