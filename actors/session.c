/* SessionActor: one per client. Owns the client's buffers (handle -> buffer), resolves the
 * handles of each op, places it on a device and plans it. A handle is {slot, generation}: a
 * destroyed or foreign one resolves to nothing and the op fails with ACCEL_ESTALE. When the
 * session ends, every buffer it owns is destroyed (freed once its last task is done). */
#include <stdlib.h>

#include "actors/device.h"
#include "actors/session.h"

typedef struct session_entry {
  uint32_t gen;
  dev_buffer *buf;
} session_entry;

typedef struct session_state {
  dev_session_args *args;
  session_entry *table;
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

void dev_op_finished(dev_world *w, dev_op *op, int status) {
  if (op->future) {
    accel_future_complete(op->future, status, NULL, NULL);
    accel_future_release(op->future);
  }
  if (w->on_op_done)
    w->on_op_done(w->on_op_done_arg, status);
  free(op);
}

/* ---- placement ---- */

static dev_node *first_serving_device(dev_world *w) {
  for (int n = 1; n < w->nnodes; n++)
    if (w->nodes[n].state == DEV_NODE_SERVING)
      return &w->nodes[n];
  return NULL;
}

/* Where an op runs: writes land on the host; reads run where a valid copy is; compute runs
 * on the named device, or for ANY where its first input already is, else the first device. */
static dev_node *place(dev_world *w, dev_op *op, dev_buffer *bufs[]) {
  if (op->h.kind == DEV_OP_WRITE)
    return &w->nodes[DEV_HOST_NODE];
  if (op->h.kind == DEV_OP_READ) {
    int n = dev_buffer_valid_node(bufs[0], DEV_HOST_NODE);
    return &w->nodes[n < 0 ? DEV_HOST_NODE : n];
  }
  if (op->h.device != ACCEL_DEVICE_ANY) {
    int n = op->h.device + 1;
    return n >= 1 && n < w->nnodes ? &w->nodes[n] : NULL;
  }
  for (uint32_t i = 0; i < op->nbufs; i++) {
    int n = dev_buffer_valid_node(bufs[i], -1);
    if (n > DEV_HOST_NODE && w->nodes[n].state == DEV_NODE_SERVING)
      return &w->nodes[n];
  }
  return first_serving_device(w);
}

static void handle_op(session_state *s, dev_op *op) {
  dev_world *w = s->args->world;
  dev_buffer *bufs[DEV_OP_MAX_BUFS] = {0};
  for (uint32_t i = 0; i < op->nbufs; i++) {
    bufs[i] = resolve(s, op->bufs[i].handle);
    if (bufs[i] == NULL) {
      dev_op_finished(w, op, ACCEL_ESTALE);
      return;
    }
  }
  dev_node *node = place(w, op, bufs);
  int rc = node ? dev_plan_op(w, op, bufs, node) : ACCEL_EDEVLOST;
  if (rc != 0)
    dev_op_finished(w, op, rc);
}

/* ---- buffers ---- */

static int create_buffer(session_state *s, uint64_t handle, const dev_buffer_spec *spec) {
  uint32_t slot = handle_slot(handle);
  if (slot == 0 || slot >= s->args->max_buffers || s->table[slot].buf)
    return ACCEL_EINVAL;
  dev_buffer *b = dev_buffer_create(s->args->world, spec->dtype, spec->count);
  if (b == NULL)
    return ACCEL_ENOMEM;
  s->table[slot] = (session_entry){handle_gen(handle), b};
  return 0;
}

static int destroy_buffer(session_state *s, uint64_t handle) {
  dev_buffer *b = resolve(s, handle);
  if (b == NULL)
    return ACCEL_ESTALE;
  s->table[handle_slot(handle)].buf = NULL;
  dev_buffer_destroy(b);
  return 0;
}

static void forward_status(accel_future *f, int status, void *arg) {
  accel_future_complete(arg, status, NULL, NULL);
  accel_future_release(arg);
}

/* Asks the device actor to fault; the client's future follows the device's answer. */
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
  case DEV_MSG_OP:
    handle_op(s, msg->data);
    msg->data = NULL;
    return 0;
  case DEV_MSG_BUFFER_CREATE: {
    int rc = create_buffer(s, msg->arg, msg->data);
    if (rc != 0) /* the handle stays unresolvable: its ops fail with ACCEL_ESTALE */
      accel_log(ACCEL_LOG_ERROR, "session", "buffer create failed: %s", accel_strerror(rc));
    return 0;
  }
  case DEV_MSG_BUFFER_DESTROY:
    destroy_buffer(s, msg->arg);
    return 0;
  case DEV_MSG_INJECT_FAULT:
    return inject_fault(s, msg);
  default:
    return 0;
  }
}

static int session_start(accel_actor *self, void *state, void *arg) {
  session_state *s = state;
  s->args = arg;
  s->table = calloc(s->args->max_buffers, sizeof *s->table);
  return s->table ? 0 : ACCEL_ENOMEM;
}

static void session_stop(accel_actor *self, void *state) {
  session_state *s = state;
  if (s->table == NULL)
    return;
  for (uint32_t i = 0; i < s->args->max_buffers; i++)
    if (s->table[i].buf)
      dev_buffer_destroy(s->table[i].buf);
  free(s->table);
}

const accel_behavior dev_session_behavior = {
    .name = "session",
    .state_size = sizeof(session_state),
    .start = session_start,
    .receive = session_receive,
    .stop = session_stop,
};
