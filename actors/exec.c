/* Puts a task's work on a backend queue: the one place that maps op envelopes to backend
 * calls. Offsets in envelopes are elements; copies take bytes. */
#include <string.h>

#include "actors/device.h"
#include "actors/session.h"

/* The i-th buffer's memory where the op uses it (a collective's buffers: each on its own
 * device). */
static be_mem mem_on(dev_task *t, int i) {
  int n = t->call ? dev_op_buf_node(t->world, &t->call->op, (uint32_t)i, t->node)->index
                  : t->node->index;
  return t->buf[i]->rep[n].mem;
}

/* The session's own counters (accel_transfer_stats_get through acceld is per session). */
static accel_transfer_stats *moved(dev_task *t) {
  static accel_transfer_stats nobody; /* tasks of no session (none today) count here */
  return t->acct ? &t->acct->moved : &nobody;
}

/* Whether node n still holds b's replica in the incarnation `gen` the task was planned for (a
 * node that restarted since may hold new memory there, allocated for a later op: not the
 * data). */
static bool replica_live(const dev_world *w, const dev_buffer *b, int n, uint32_t gen) {
  const dev_node *node = &w->nodes[n];
  const dev_replica *r = &b->rep[n];
  return node->dev != NULL && node->state == DEV_NODE_SERVING && r->allocated &&
         node->generation == gen && r->node_gen == gen;
}

/* t's queue is about to use memory of the nodes in `mask`: an event after the work tells a
 * node that stops when that memory may go (device_actor.c). Undone at the task's end. */
static int foreign_begin(dev_task *t, uint32_t mask) {
  be_event *ev;
  int rc = t->node->be->event_create(t->node->dev, &ev);
  if (rc != 0)
    return rc;
  t->foreign_ev = ev;
  t->foreign_mask = mask;
  rt_list_push_back(&t->world->foreign, &t->foreign_link);
  return 0;
}

/* `rc`: whether the work was queued; then the event is recorded behind it. */
static int foreign_armed(dev_task *t, be_queue *q, int rc) {
  if (rc == 0)
    rc = t->node->be->event_record(t->foreign_ev, q);
  if (rc != 0)
    dev_task_foreign_end(t);
  return rc;
}

/* From a peer device straight into this one. A source lost since planning (its device
 * restarted) fails the copy with ACCEL_EDATALOST: this device is not at fault. */
static int exec_peer(dev_task *t, be_queue *q) {
  dev_buffer *b = t->buf[0];
  dev_world *w = t->world;
  dev_node *src = &w->nodes[t->src_node];
  if (!replica_live(w, b, t->src_node, t->src_gen))
    return ACCEL_EDATALOST;
  int rc = foreign_begin(t, 1u << t->src_node);
  if (rc != 0)
    return rc;
  rc = t->node->be->copy_peer(q, mem_on(t, 0), 0, src->dev, b->rep[t->src_node].mem, 0, b->bytes);
  rc = foreign_armed(t, q, rc);
  if (rc == 0) {
    atomic_fetch_add(&w->d2d, b->bytes);
    moved(t)->device_to_device += b->bytes;
  }
  return rc;
}

static void *host_ptr(dev_buffer *b) {
  return (void *)(uintptr_t)b->rep[DEV_HOST_NODE].mem.handle;
}

static int exec_transfer(dev_task *t, be_queue *q) {
  dev_buffer *b = t->buf[0];
  const be_ops *be = t->node->be;
  dev_world *w = t->world;
  if (t->src_node < 0) /* never written anywhere: the first valid copy is zeros */
    return be->fill(q, mem_on(t, 0), 0, b->count, (uint32_t)dev_dtype_size(b->dtype), 0);
  if (t->src_node == DEV_HOST_NODE) {
    atomic_fetch_add(&w->h2d, b->bytes);
    moved(t)->host_to_device += b->bytes;
    return be->copy_h2d(q, mem_on(t, 0), 0, host_ptr(b), b->bytes);
  }
  if (t->node->index != t->src_node)
    return exec_peer(t, q);
  /* From this device to the host. */
  atomic_fetch_add(&w->d2h, b->bytes);
  moved(t)->device_to_host += b->bytes;
  return be->copy_d2h(q, host_ptr(b), mem_on(t, 0), 0, b->bytes);
}

static int exec_io(dev_task *t, be_queue *q) {
  const dev_op *op = &t->call->op;
  const be_ops *be = t->node->be;
  size_t esize = dev_dtype_size(t->buf[0]->dtype);
  size_t off = op->bufs[0].offset * esize, bytes = op->bufs[0].count * esize;
  if (op->h.kind == DEV_OP_WRITE) {
    atomic_fetch_add(&t->world->written, bytes);
    moved(t)->written += bytes;
    return be->copy_h2d(q, mem_on(t, 0), off, op->u.write.src, bytes);
  }
  atomic_fetch_add(&t->world->read, bytes);
  moved(t)->read += bytes;
  return be->copy_d2h(q, op->u.read.dst, mem_on(t, 0), off, bytes);
}

/* A collective from the leader's queue: the other devices' queues of the same class take
 * their parts (the backend orders the leader's queue behind them). */
static int exec_collective(dev_task *t, be_queue *q) {
  const dev_op *op = &t->call->op;
  dev_world *w = t->world;
  uint32_t n = op->u.coll.ndev, mask = 0;
  bool gather = op->u.coll.kind == BE_COLL_ALL_GATHER;
  be_coll_call c = {.kind = (be_coll_kind)op->u.coll.kind,
                    .dtype = t->buf[0]->dtype,
                    .reduce = (be_reduce_op)op->u.coll.reduce,
                    .root = op->u.coll.root,
                    .ndev = n,
                    .count = t->buf[0]->count};
  for (uint32_t i = 0; i < n; i++) {
    dev_node *at = dev_op_buf_node(w, op, i, t->node);
    uint32_t gen = t->member_gen[i];
    if (!replica_live(w, t->buf[i], at->index, gen) ||
        (gather && !replica_live(w, t->buf[n + i], at->index, gen)))
      return ACCEL_EDATALOST;
    c.dev[i] = at->dev;
    c.queue[i] = i == 0 ? q : at->queue[DEV_Q_COLL];
    if (c.queue[i] == NULL)
      return ACCEL_EDATALOST; /* that device is restarting */
    c.buf[i] = mem_on(t, (int)i);
    if (gather)
      c.recv[i] = mem_on(t, (int)(n + i));
    if (at != t->node)
      mask |= 1u << at->index;
  }
  int rc = foreign_begin(t, mask);
  if (rc != 0)
    return rc;
  rc = foreign_armed(t, q, t->node->be->collective->run(&c));
  /* Lost on another member, not here: the leader is not at fault (its kernel actor reports
   * ACCEL_EDEVLOST as its own device's fault). */
  if (rc == ACCEL_EDEVLOST && t->node->be->status(t->node->dev) == 0)
    rc = ACCEL_EDATALOST;
  return rc;
}

/* A user kernel: buffers become their memory on this device at the range's start. */
static int exec_launch(dev_task *t, be_queue *q) {
  const dev_launch *l = &t->call->op.u.launch;
  be_kernel_arg args[BE_LAUNCH_MAX_ARGS];
  for (uint32_t i = 0; i < l->nargs; i++) {
    const dev_kernel_arg *a = &l->args[i];
    args[i] = (be_kernel_arg){.kind = a->kind, .size = a->size, .bits = a->bits};
    if (a->kind != BE_PARAM_BUFFER)
      continue;
    uint32_t b = (uint32_t)a->bits; /* checked: < nbufs */
    args[i].mem = mem_on(t, (int)b);
    args[i].offset = t->call->op.bufs[b].offset * dev_dtype_size(t->buf[b]->dtype);
    args[i].bits = 0;
  }
  be_launch launch = {.shared_bytes = l->shared_bytes, .nargs = l->nargs, .args = args};
  for (int i = 0; i < 3; i++) {
    launch.grid[i] = l->grid[i];
    launch.block[i] = l->block[i];
  }
  return t->node->be->module->launch(q, t->call->kernel, &launch);
}

#define exec_write exec_io
#define exec_read exec_io

static int exec_copy(dev_task *t, be_queue *q) {
  const dev_op *op = &t->call->op;
  size_t esize = dev_dtype_size(t->buf[0]->dtype);
  atomic_fetch_add(&t->world->d2d, op->bufs[0].count * esize);
  moved(t)->device_to_device += op->bufs[0].count * esize;
  return t->node->be->copy_d2d(q, mem_on(t, 0), op->bufs[0].offset * esize, mem_on(t, 1),
                               op->bufs[1].offset * esize, op->bufs[0].count * esize);
}

static int exec_fill(dev_task *t, be_queue *q) {
  return t->node->be->fill(q, mem_on(t, 0), 0, t->buf[0]->count,
                           (uint32_t)dev_dtype_size(t->buf[0]->dtype), t->call->op.u.fill.value);
}

/* The ops of the packages: the session made sure the device has the package. */

static int exec_gemm(dev_task *t, be_queue *q) {
  return t->node->be->blas->gemm(q, &t->call->op.u.gemm, mem_on(t, 0), 0, mem_on(t, 1), 0,
                                 mem_on(t, 2), 0);
}

static int exec_axpy(dev_task *t, be_queue *q) {
  const dev_op *op = &t->call->op;
  return t->node->be->blas->axpy(q, t->buf[0]->dtype, op->u.axpy.n, op->u.axpy.alpha, mem_on(t, 0),
                                 0, mem_on(t, 1), 0);
}

static int exec_dot(dev_task *t, be_queue *q) {
  return t->node->be->blas->dot(q, t->buf[0]->dtype, t->call->op.u.dot.n, mem_on(t, 0), 0,
                                mem_on(t, 1), 0, mem_on(t, 2), 0);
}

static int exec_scal(dev_task *t, be_queue *q) {
  const dev_op *op = &t->call->op;
  return t->node->be->blas->scal(q, t->buf[0]->dtype, op->u.axpy.n, op->u.axpy.alpha, mem_on(t, 0),
                                 0);
}

static int exec_rng(dev_task *t, be_queue *q) {
  return t->node->be->rng->fill(q, t->buf[0]->dtype, mem_on(t, 0), 0, t->buf[0]->count,
                                &t->call->op.u.rng);
}

static int exec_unary(dev_task *t, be_queue *q) {
  return t->node->be->nn->unary(q, t->buf[0]->dtype, t->call->op.u.unary.op, mem_on(t, 0), 0,
                                mem_on(t, 1), 0, t->buf[0]->count);
}

static int exec_softmax(dev_task *t, be_queue *q) {
  const dev_op *op = &t->call->op;
  return t->node->be->nn->softmax(q, t->buf[0]->dtype, mem_on(t, 0), 0, mem_on(t, 1), 0,
                                  op->u.softmax.rows, op->u.softmax.cols);
}

/* The inputs' dtype: a comparison's dst is BOOL. */
static int exec_binary(dev_task *t, be_queue *q) {
  return t->node->be->nn->binary(q, t->buf[1]->dtype, &t->call->op.u.binary, mem_on(t, 0), 0,
                                 mem_on(t, 1), 0, mem_on(t, 2), 0);
}

static int exec_where(dev_task *t, be_queue *q) {
  return t->node->be->nn->where(q, t->buf[0]->dtype, &t->call->op.u.where, mem_on(t, 0), 0,
                                mem_on(t, 1), 0, mem_on(t, 2), 0, mem_on(t, 3), 0);
}

static int exec_convert(dev_task *t, be_queue *q) {
  return t->node->be->nn->convert(q, t->buf[0]->dtype, t->buf[1]->dtype, &t->call->op.u.convert,
                                  mem_on(t, 0), 0, mem_on(t, 1), 0);
}

static int exec_reduce(dev_task *t, be_queue *q) {
  return t->node->be->nn->reduce(q, t->buf[0]->dtype, &t->call->op.u.reduce, mem_on(t, 0), 0,
                                 mem_on(t, 1), 0);
}

/* The exported copy is valid here now (planned as a read and write of all of it): its
 * address goes to the caller, who reads it once the task completes, after the ops before it.
 * Nothing is queued. */
int dev_export_info(dev_node *node, dev_buffer *b, accel_export_info *out) {
  uint64_t addr = 0;
  int rc = node->be->mem_address ? node->be->mem_address(node->dev, b->rep[node->index].mem, &addr)
                                 : ACCEL_ENOTSUP;
  if (rc != 0)
    return rc;
  bool cuda = strcmp(node->be->name, "cuda") == 0;
  *out = (accel_export_info){.address = addr,
                             .bytes = b->bytes,
                             .device_type = cuda ? 2 : 1,
                             .device_id = cuda ? node->backend_index : 0};
  return 0;
}

static int exec_export(dev_task *t, be_queue *q) {
  return dev_export_info(t->node, t->buf[0], t->call->op.u.xport.out);
}

/* The kinds a device task runs (op_table.h's TASK rows); the session carries out the others. */
typedef int (*exec_fn)(dev_task *t, be_queue *q);
#define EXEC_ROW(K, name, label, nbufs, dtypes, package, queue, runs) EXEC_##runs(K, name)
#define EXEC_TASK(K, name) [DEV_OP_##K] = exec_##name,
#define EXEC_SESSION(K, name)
static const exec_fn execs[DEV_OP_KIND_COUNT_] = {DEV_OP_TABLE(EXEC_ROW)};

static int exec_op(dev_task *t, be_queue *q) {
  exec_fn fn = execs[t->call->op.h.kind]; /* checked: a kind of the table */
  return fn ? fn(t, q) : ACCEL_ENOTSUP;
}

int dev_exec(dev_task *t, be_queue *q) {
  return t->kind == DEV_TASK_TRANSFER ? exec_transfer(t, q) : exec_op(t, q);
}
