/* SessionActor: one per client. Owns the client's buffers (handle -> buffer), checks every op
 * again against its own table (the daemon trusts no client), enforces the session's limits,
 * places the op on a device and plans it. A handle is {slot, generation} chosen by the client
 * in its own table; a destroyed or foreign one resolves to nothing and the op fails with
 * ACCEL_ESTALE. When the session ends, every buffer it owns is destroyed (freed once its last
 * task is done); ops still in flight finish normally. */
#include <stdlib.h>
#include <string.h>

#include "actors/check.h"
#include "actors/device.h"
#include "actors/session.h"

typedef struct session_entry {
  uint32_t gen;
  dev_buffer *buf;
} session_entry;

typedef struct session_state {
  dev_session_args *args;
  accel_actor *self;
  session_entry *table;
  dev_session_acct *acct;
} session_state;

static uint32_t handle_slot(uint64_t h) {
  return (uint32_t)(h & 0xffffffffu);
}

static uint32_t handle_gen(uint64_t h) {
  return (uint32_t)(h >> 32);
}

static dev_buffer *resolve(session_state *s, uint64_t handle) {
  uint32_t slot = handle_slot(handle);
  if (slot == 0 || slot >= s->args->max_buffers)
    return NULL;
  session_entry *e = &s->table[slot];
  return e->buf && e->gen == handle_gen(handle) ? e->buf : NULL;
}

void dev_session_acct_release(dev_session_acct *a) {
  if (--a->refs == 0)
    free(a);
}

void dev_op_finished(dev_world *w, dev_op *op, int status) {
  dev_session_acct *acct = op->acct;
  if (acct) {
    acct->in_flight--;
    dev_session_acct_release(acct);
  }
  if (w->on_op_done)
    w->on_op_done(w->on_op_done_arg, status);
  if (op->done) {
    op->done(op, status);
    return;
  }
  if (op->future) {
    accel_future_complete(op->future, status, NULL, NULL);
    accel_future_release(op->future);
  }
  free(op);
}

/* ---- placement ---- */

/* How eager placement is to pick a device on its own (lower first): GPUs and accelerators,
 * then the native CPU backend's devices; a CPU seen through another backend (PoCL's OpenCL
 * device) only when an op names it (-1). Parenchyma's "most potent device first". */
static int potency(const dev_node *node) {
  if (node->info.kind == BE_KIND_GPU || node->info.kind == BE_KIND_ACCELERATOR)
    return 0;
  return strcmp(node->be->name, "cpu") == 0 ? 1 : -1;
}

/* The most potent device serving that runs the op; among equals, the earlier backend of the
 * world's list (CUDA before OpenCL by default), then the lower index. */
static dev_node *default_device(dev_world *w, const dev_op *op, dev_buffer *bufs[]) {
  dev_node *best = NULL;
  for (int n = 1; n < w->nnodes; n++) {
    dev_node *node = &w->nodes[n];
    if (node->state != DEV_NODE_SERVING || potency(node) < 0 ||
        dev_node_supports(node, op, bufs) != 0)
      continue;
    if (best == NULL || potency(node) < potency(best) ||
        (potency(node) == potency(best) && node->backend_pref < best->backend_pref))
      best = node;
  }
  return best;
}

/* Whether any device (serving or not) runs the op: if none does, the op is not supported
 * here at all, rather than waiting for a device to come back. */
static bool any_runs(dev_world *w, const dev_op *op, dev_buffer *bufs[]) {
  for (int n = 1; n < w->nnodes; n++)
    if (potency(&w->nodes[n]) >= 0 &&
        dev_node_supports(&w->nodes[n], op, bufs) != ACCEL_ENOTSUP) /* runs, or may */
      return true;
  return false;
}

/* Where an op runs: writes land on the host; reads run where a valid copy is; compute runs
 * on the named device, or for ANY where an input already is on a device that runs it, else
 * on the most potent device that does (default_device). */
static dev_node *place(dev_world *w, dev_op *op, dev_buffer *bufs[]) {
  if (op->h.kind == DEV_OP_WRITE) {
    /* A buffer that lives on a device only is written there, straight from the caller's
     * memory (one copy; at pinned speed from memory registered for DMA), not on the host
     * and then again across. */
    int n = dev_buffer_valid_node(bufs[0], DEV_HOST_NODE);
    bool there = n > DEV_HOST_NODE && w->nodes[n].state == DEV_NODE_SERVING;
    return &w->nodes[there ? n : DEV_HOST_NODE];
  }
  if (op->h.kind == DEV_OP_READ) {
    int n = dev_buffer_valid_node(bufs[0], DEV_HOST_NODE);
    return &w->nodes[n < 0 ? DEV_HOST_NODE : n];
  }
  if (op->h.device != ACCEL_DEVICE_ANY) /* compared before adding: no overflow */
    return op->h.device >= 0 && op->h.device < w->nnodes - 1 ? &w->nodes[op->h.device + 1]
                                                             : NULL;
  for (uint32_t i = 0; i < op->nbufs; i++) {
    int n = dev_buffer_valid_node(bufs[i], -1);
    if (n > DEV_HOST_NODE && w->nodes[n].state == DEV_NODE_SERVING &&
        dev_node_supports(&w->nodes[n], op, bufs) == 0)
      return &w->nodes[n];
  }
  return default_device(w, op, bufs);
}

/* ---- buffers ---- */

static int create_buffer(session_state *s, const dev_op *op) {
  uint64_t handle = op->bufs[0].handle, count = op->bufs[0].count;
  uint32_t slot = handle_slot(handle);
  uint64_t bytes = count * dev_dtype_size((accel_dtype)op->u.create.dtype);
  if (slot == 0 || slot >= s->args->max_buffers || handle_gen(handle) == 0 ||
      s->table[slot].buf || count > (UINT64_MAX >> 4))
    return ACCEL_EINVAL;
  if (s->args->max_memory && s->acct->memory + bytes > s->args->max_memory)
    return ACCEL_ENOMEM;
  dev_buffer *b = dev_buffer_create(s->args->world, (accel_dtype)op->u.create.dtype, count);
  if (b == NULL)
    return ACCEL_ENOMEM;
  s->table[slot] = (session_entry){handle_gen(handle), b};
  s->acct->memory += bytes;
  s->acct->buffers++;
  return 0;
}

static void forget_buffer(session_state *s, uint32_t slot) {
  dev_buffer *b = s->table[slot].buf;
  s->table[slot].buf = NULL;
  s->acct->memory -= b->bytes;
  s->acct->buffers--;
  dev_buffer_destroy(b);
}

static int destroy_buffer(session_state *s, uint64_t handle) {
  if (resolve(s, handle) == NULL)
    return ACCEL_ESTALE;
  forget_buffer(s, handle_slot(handle));
  return 0;
}

/* ---- ops ---- */

static int resolve_all(session_state *s, dev_op *op, dev_buffer *bufs[]) {
  dev_buf_info info[DEV_OP_MAX_BUFS];
  for (uint32_t i = 0; i < op->nbufs; i++) {
    bufs[i] = resolve(s, op->bufs[i].handle);
    if (bufs[i] == NULL)
      return ACCEL_ESTALE;
    info[i] = (dev_buf_info){bufs[i]->dtype, bufs[i]->count};
  }
  return dev_op_check(op, info);
}

static int run_op(session_state *s, dev_op *op) {
  dev_world *w = s->args->world;
  int rc = dev_op_check_shape(op);
  if (rc != 0)
    return rc;
  if (op->h.kind == DEV_OP_BUFFER_CREATE)
    return create_buffer(s, op);
  if (op->h.kind == DEV_OP_BUFFER_DESTROY)
    return destroy_buffer(s, op->bufs[0].handle);
  dev_buffer *bufs[DEV_OP_MAX_BUFS] = {0};
  rc = resolve_all(s, op, bufs);
  if (rc != 0)
    return rc;
  dev_node *node = place(w, op, bufs);
  if (node == NULL) /* no device serving that runs the op */
    return any_runs(w, op, bufs) ? ACCEL_EDEVLOST : ACCEL_ENOTSUP;
  rc = dev_node_supports(node, op, bufs); /* a named device */
  return rc != 0 ? rc : dev_plan_op(w, op, bufs, node);
}

static void handle_op(session_state *s, dev_op *op) {
  dev_session_acct *a = s->acct;
  op->acct = a;
  a->refs++;
  a->in_flight++;
  int rc = s->args->max_in_flight && a->in_flight > s->args->max_in_flight ? ACCEL_EBUSY
                                                                             : run_op(s, op);
  bool finished_now = rc != 0 || op->h.kind == DEV_OP_BUFFER_CREATE ||
                      op->h.kind == DEV_OP_BUFFER_DESTROY;
  if (finished_now)
    dev_op_finished(s->args->world, op, rc);
}

/* ---- fault injection (tests) ---- */

static void forward_status(accel_future *f, int status, void *arg) {
  accel_future_complete(arg, status, NULL, NULL);
  accel_future_release(arg);
}

/* Asks the device actor to fault; the asker's future follows the device's answer. */
static int inject_fault(session_state *s, accel_msg *msg) {
  dev_world *w = s->args->world;
  int n = (int)msg->arg + 1;
  if (n < 1 || n >= w->nnodes)
    return ACCEL_EINVAL;
  accel_future *reply = accel_msg_take_reply(msg), *g;
  accel_msg m = {.type = DEV_MSG_INJECT_FAULT};
  int rc = accel_ask(w->rt, w->nodes[n].actor, &m, &g);
  if (rc != 0) {
    if (reply) {
      accel_future_complete(reply, rc, NULL, NULL);
      accel_future_release(reply);
    }
    return 0;
  }
  if (reply)
    accel_future_then(g, forward_status, reply);
  accel_future_release(g);
  return 0;
}

static int session_receive(accel_actor *self, void *state, accel_msg *msg) {
  session_state *s = state;
  switch (msg->type) {
  case DEV_MSG_OP: {
    dev_op *op = msg->data;
    msg->data = NULL;
    handle_op(s, op);
    return 0;
  }
  case DEV_MSG_INJECT_FAULT:
    return inject_fault(s, msg);
  default:
    return 0;
  }
}

static void op_drop(void *data) {
  dev_op *op = data; /* the session ended before taking it */
  if (op->done) {
    op->done(op, ACCEL_ECLOSED);
    return;
  }
  if (op->future) {
    accel_future_complete(op->future, ACCEL_ECLOSED, NULL, NULL);
    accel_future_release(op->future);
  }
  free(op);
}

void dev_session_op_msg(accel_msg *m, dev_op *op) {
  *m = (accel_msg){.type = DEV_MSG_OP, .data = op, .drop = op_drop};
}

static int session_start(accel_actor *self, void *state, void *arg) {
  session_state *s = state;
  s->args = arg;
  s->self = self;
  s->acct = calloc(1, sizeof *s->acct);
  s->table = calloc(s->args->max_buffers, sizeof *s->table);
  if (s->acct == NULL || s->table == NULL)
    return ACCEL_ENOMEM;
  s->acct->refs = 1;
  s->args->acct = s->acct;
  return 0;
}

static void session_stop(accel_actor *self, void *state) {
  session_state *s = state;
  if (s->table) {
    for (uint32_t i = 0; i < s->args->max_buffers; i++)
      if (s->table[i].buf)
        forget_buffer(s, i);
    free(s->table);
  }
  s->args->acct = NULL;
  if (s->acct)
    dev_session_acct_release(s->acct);
  if (s->args->on_stop)
    s->args->on_stop(s->args->on_stop_arg, accel_self(self));
}

const accel_behavior dev_session_behavior = {
    .name = "session",
    .state_size = sizeof(session_state),
    .start = session_start,
    .receive = session_receive,
    .stop = session_stop,
};
