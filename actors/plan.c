/* Planning: turns one op into tasks, in issue order. For each buffer the op reads (or writes
 * only in part) on a node where it has no valid copy, a transfer task brings one: from a
 * device that the node copies from directly (a peer: another device of the same backend),
 * else from the host, else from another device through the host; then the op's own task.
 * Replica states change here, at issue time, so the next op is planned against the state
 * this one leaves; the task graph makes the bytes follow in that order. */
#include "actors/device.h"

static bool needs_valid_copy(const dev_op_buf *ob, const dev_buffer *b) {
  if (ob->access & DEV_READ)
    return true;
  return !(ob->access == DEV_WRITE_ALL && ob->offset == 0 && ob->count == b->count);
}

dev_node *dev_op_buf_node(dev_world *w, const dev_op *op, uint32_t i, dev_node *node) {
  if (op->h.kind != DEV_OP_COLLECTIVE)
    return node;
  uint32_t n = op->u.coll.ndev; /* checked: 1 .. BE_COLL_MAX_DEVICES, devices valid */
  return &w->nodes[op->u.coll.devices[i % n] + 1];
}

/* dst's queues copy straight from src's memory: two serving devices of one backend that
 * says so (backend.h, can_peer). */
bool dev_nodes_peer(const dev_node *dst, const dev_node *src) {
  return dst != src && dst->index != DEV_HOST_NODE && src->index != DEV_HOST_NODE &&
         dst->be == src->be && dst->be->copy_peer != NULL && dst->be->can_peer != NULL &&
         dst->dev != NULL && src->dev != NULL && dst->state == DEV_NODE_SERVING &&
         src->state == DEV_NODE_SERVING && dst->be->can_peer(dst->dev, src->dev);
}

int dev_copy_source(dev_world *w, const dev_buffer *b, const dev_node *dst, bool *via_host) {
  *via_host = false;
  for (int n = 1; n < w->nnodes; n++)
    if (b->rep[n].state != DEV_INVALID && dev_nodes_peer(dst, &w->nodes[n]))
      return n;
  int src = dev_buffer_valid_node(b, -1); /* the host if valid there */
  *via_host = src > DEV_HOST_NODE && dst->index != DEV_HOST_NODE;
  return src;
}

bool dev_copy_via_host(dev_world *w, const dev_buffer *b, const dev_node *dst) {
  bool via_host = false;
  if (b->rep[dst->index].state == DEV_INVALID)
    (void)dev_copy_source(w, b, dst, &via_host);
  return via_host;
}

/* One transfer task to `dst` from `src` (-1: zero-fill a never-written buffer). */
static int add_transfer(dev_world *w, dev_buffer *b, int src, int dst, dev_call *call) {
  /* A copy out of a device to the host runs on that device; the others (from the host, from
   * a peer) where they land. */
  dev_node *runs_on = &w->nodes[dst == DEV_HOST_NODE && src > DEV_HOST_NODE ? src : dst];
  dev_task *t = dev_task_create(w, DEV_TASK_TRANSFER, runs_on, DEV_Q_MEM);
  if (t == NULL)
    return ACCEL_ENOMEM;
  t->src_node = src;
  t->src_gen = src >= 0 ? w->nodes[src].generation : 0;
  t->completion = (accel_completion)call->op.h.completion;
  dev_task_count_for(t, call);
  if (w->on_transfer) {
    w->on_transfer(w->on_op_done_arg, 1);
    t->counted = true;
  }
  /* It rewrites a replica: ordered like a writer, so readers of that replica wait for it. */
  int rc = dev_task_use(t, b, DEV_RW);
  if (src >= 0)
    b->rep[src].state = DEV_SHARED;
  b->rep[dst].state = DEV_SHARED;
  dev_task_ready_check(t);
  return rc;
}

/* Makes b valid on node n, logically now and physically in issue order. */
static int bring_valid(dev_world *w, dev_buffer *b, dev_node *n, dev_call *call) {
  if (b->rep[n->index].state != DEV_INVALID)
    return 0;
  bool via_host;
  int src = dev_copy_source(w, b, n, &via_host);
  if (!via_host)
    return add_transfer(w, b, src, n->index, call);
  int rc = add_transfer(w, b, src, DEV_HOST_NODE, call); /* device -> host -> device */
  return rc != 0 ? rc : add_transfer(w, b, DEV_HOST_NODE, n->index, call);
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
    dev_node *at = dev_op_buf_node(w, op, i, node);
    bool needs_valid = needs_valid_copy(&op->bufs[i], b);
    if (b->lost && needs_valid)
      return ACCEL_EDATALOST;
    if (at->state != DEV_NODE_SERVING)
      return ACCEL_EDEVLOST;
    int rc = dev_replica_ensure_alloc(b, at);
    if (rc == 0 && needs_valid && dev_copy_via_host(w, b, at)) /* through a host replica */
      rc = dev_replica_ensure_alloc(b, &w->nodes[DEV_HOST_NODE]);
    if (rc == DEV_ALLOC_MISS) /* the caller allocates first (dev_mem_needs): a bug */
      return ACCEL_EINVAL;
    if (rc != 0)
      return rc;
  }
  return 0;
}

int dev_plan_op(dev_world *w, dev_call *call, dev_buffer *bufs[DEV_OP_MAX_BUFS], dev_node *node) {
  dev_op *op = &call->op;
  int rc = check_and_allocate(w, op, bufs, node);
  if (rc != 0)
    return rc;
  dev_task *t = dev_task_create(w, DEV_TASK_OP, node, dev_op_queue(op->h.kind));
  if (t == NULL)
    return ACCEL_ENOMEM;
  t->call = call;
  call->ran_on = (uint32_t)node->index + 1;
  for (uint32_t i = 0; op->h.kind == DEV_OP_COLLECTIVE && i < op->u.coll.ndev; i++)
    t->member_gen[i] = dev_op_buf_node(w, op, i, node)->generation;
  t->completion = (accel_completion)op->h.completion;
  dev_task_count_for(t, call);
  for (uint32_t i = 0; i < op->nbufs && rc == 0; i++)
    if (needs_valid_copy(&op->bufs[i], bufs[i]))
      rc = bring_valid(w, bufs[i], dev_op_buf_node(w, op, i, node), call);
  for (uint32_t i = 0; i < op->nbufs && rc == 0; i++) {
    rc = dev_task_use(t, bufs[i], op->bufs[i].access);
    if (op->bufs[i].access & DEV_WRITE)
      mark_written(bufs[i], dev_op_buf_node(w, op, i, node)->index, w->nnodes);
  }
  if (rc != 0)
    t->status = rc; /* out of memory while planning: the op fails, in order */
  dev_task_ready_check(t);
  return 0;
}
