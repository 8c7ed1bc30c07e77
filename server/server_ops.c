/* OP frames: decode into an envelope, send it to the connection's session, and reply when it
 * finishes (the op's `done`, on the loop). The request message stays alive as the op's owner
 * while the op runs, because a write's bytes (and a module's code) are read straight out of
 * it; it then becomes the reply. A read's reply is allocated before the op is sent, with room
 * for the data, and the buffer is read straight into it. A module load's reply carries its
 * build log (call.result), whatever its status. */
#include <stdlib.h>
#include <string.h>

#include "runtime/alloc.h"
#include "server/io_pool.h"
#include "server/server_transport.h"

typedef struct srv_op {
  dev_call call;            /* first: `done` gets &call */
  srv_server *srv;          /* holds a reference */
  srv_conn *conn;           /* counted in conn->ops */
  struct srv_op *pool_next; /* in the server's pool of finished records */
  nng_msg *req;             /* == call.owner: the request, with the routing header */
  nng_msg *rep;             /* a read's reply, data at PROTO_REPLY_HEAD_SIZE; else NULL */
  uint64_t read_bytes;
  uint64_t req_bytes; /* the request's size, counted in conn->req_bytes */
  srv_region *region; /* PROTO_OPF_SHM: the shared memory its data is in (held) */
  char *options;      /* MODULE_LOAD: call.op.u.module.options, a NUL-terminated copy (or NULL) */
  srv_iost *early_st; /* the connection's stream (held) for op_early; NULL: no early reply */
  bool early_sent;    /* op_early wrote the reply (read on the loop once `early` settled) */
} srv_op;

/* Finished ops' records kept for the next ones: a record (1400 bytes) is past malloc's
 * per-thread caches, and its allocation and release cost more than a tiny op's decoding
 * (callgrind: about 1000 instructions of 8000 per op). */
#define SRV_OP_POOL_MAX 256

static srv_op *srv_op_new(srv_server *s) {
  srv_op *so = s->op_pool;
  if (so == NULL)
    return rt_calloc(1, sizeof *so);
  s->op_pool = so->pool_next;
  s->op_pool_len--;
  memset(so, 0, sizeof *so);
  return so;
}

/* The op's memory, once nothing refers to it any more. */
static void srv_op_free(srv_server *s, srv_op *so) {
  if (so->early_st)
    srv_iost_release(so->early_st);
  rt_free(so->call.result);
  rt_free(so->options);
  if (s->op_pool_len >= SRV_OP_POOL_MAX) {
    rt_free(so);
    return;
  }
  so->pool_next = s->op_pool;
  s->op_pool = so;
  s->op_pool_len++;
}

void srv_op_pool_free(srv_server *s) {
  while (s->op_pool) {
    srv_op *so = s->op_pool;
    s->op_pool = so->pool_next;
    rt_free(so);
  }
  s->op_pool_len = 0;
}

/* A reply whose data is the op's text result (a build log), cut to what one frame and
 * PROTO_BUILD_LOG_MAX allow. Without memory for it, the status alone. */
static void send_text(srv_server *s, srv_op *so, int status) {
  srv_conn *c = so->conn;
  size_t room = s->limits.max_message - PROTO_REPLY_HEAD_SIZE;
  size_t n = strnlen(so->call.result, room < PROTO_BUILD_LOG_MAX ? room : PROTO_BUILD_LOG_MAX);
  nng_msg *m;
  if (nng_msg_alloc(&m, PROTO_REPLY_HEAD_SIZE + n) != 0) {
    srv_reply_status(s, c, so->req, so->call.op.h.request_id, status);
    return;
  }
  memcpy((uint8_t *)nng_msg_body(m) + PROTO_REPLY_HEAD_SIZE, so->call.result, n);
  if (proto_encode_reply_head(nng_msg_body(m), so->call.op.h.request_id, status, n) != 0 ||
      nng_msg_header_append(m, nng_msg_header(so->req), nng_msg_header_len(so->req)) != 0) {
    nng_msg_free(m);
    srv_reply_status(s, c, so->req, so->call.op.h.request_id, status);
    return;
  }
  nng_msg_free(so->req);
  srv_conn_send(s, c, m);
}

/* The status-only reply is the request made over; a read's reply gets the routing header. */
static void send_result(srv_server *s, srv_op *so, int status) {
  srv_conn *c = so->conn;
  if (so->call.result != NULL && so->rep == NULL) {
    send_text(s, so, status);
    return;
  }
  if (so->rep == NULL || status != 0) {
    if (so->rep)
      nng_msg_free(so->rep);
    srv_reply_status(s, c, so->req, so->call.op.h.request_id, status);
    return;
  }
  int rc = proto_encode_reply_head(nng_msg_body(so->rep), so->call.op.h.request_id, 0,
                                   so->read_bytes);
  if (rc == 0 &&
      nng_msg_header_append(so->rep, nng_msg_header(so->req), nng_msg_header_len(so->req)) != 0)
    rc = ACCEL_ENOMEM;
  if (rc != 0) {
    nng_msg_free(so->rep);
    srv_reply_status(s, c, so->req, so->call.op.h.request_id, rc);
    return;
  }
  nng_msg_free(so->req);
  srv_conn_send(s, c, so->rep);
}

/* On the thread that learns the op's device work is done (kernel_actor.c; acceld's reader of
 * the device worker's notes): the status reply goes into the client's ring now, rather than
 * after the loop's turn reaches the completion, when nothing of the connection's waits (else
 * op_done sends it as before); a client asleep is rung by its stream's I/O thread. The
 * client's next op then reaches the loop while the loop finishes this one. */
static void op_early(dev_call *call, int status) {
  srv_op *so = (srv_op *)call;
  uint8_t head[PROTO_REPLY_HEAD_SIZE];
  if (proto_encode_reply_head(head, call->op.h.request_id, status, 0) == 0 &&
      srv_iost_write_early(so->early_st, head, sizeof head, &so->conn->answered_early) == 1) {
    so->early_sent = true;
    atomic_fetch_add_explicit(&so->srv->replies_early, 1, memory_order_relaxed);
  }
}

/* Ops of the connection whose replies have not left yet. */
static uint32_t unanswered(srv_conn *c) {
  return c->ops - atomic_load(&c->answered_early);
}

static void op_done(dev_call *call, int status) {
  srv_op *so = (srv_op *)call;
  const dev_op *op = &call->op;
  srv_server *s = so->srv;
  srv_conn *c = so->conn;
  s->ops_in_flight--;
  s->ops_completed++;
  s->ops_failed += status < 0;
  if (status < 0)
    accel_log(ACCEL_LOG_DEBUG, "server", "pipe %u: op %u (request %llu): %s", c->pipe, op->h.kind,
              (unsigned long long)op->h.request_id, accel_err_name(status));
  if (s->stopped) {
    nng_msg_free(so->req);
    if (so->rep)
      nng_msg_free(so->rep);
  } else if (so->early_sent) {
    srv_msg_give(s, so->req); /* its reply left as the device finished (op_early) */
  } else {
    send_result(s, so, status);
    if (unanswered(c) == 1)
      srv_conn_flush(s, c); /* its only op: no batch to wait for (server_out.c) */
  }
  if (so->early_sent)
    atomic_fetch_sub(&c->answered_early, 1);
  if (so->region)
    srv_shm_release(s, c, so->region);
  srv_conn_ops_add(s, c, -1, false);
  c->read_pending -= so->read_bytes;
  c->req_bytes -= so->req_bytes;
  c->tp->flow(s, c);
  srv_conn_maybe_free(s, c);
  srv_op_free(s, so);
  srv_release(s);
}

/* ACCEL_EARLY_REPLIES=0 in acceld's environment turns early replies off (for A/B runs). */
static bool early_replies(void) {
  static int on = -1;
  if (on < 0) {
    const char *e = getenv("ACCEL_EARLY_REPLIES");
    on = e == NULL || strcmp(e, "0") != 0;
  }
  return on;
}

/* The status-only reply to a connection's only op in flight may leave early (op_early), on
 * shared rings only (srv_iost_write_early): a pipelining client's replies leave batched from
 * the loop, and through a socket each early reply would cost a system call on the one thread
 * completing every client's work. A read's reply carries data, a module load's its build
 * log. */
static void offer_early(srv_conn *c, srv_op *so) {
  srv_iost *st = c->tp->stream ? c->tp->stream(c) : NULL;
  if (st == NULL || !srv_iost_writes_to_ring(st) || unanswered(c) != 0 || so->rep != NULL ||
      so->call.op.h.kind == DEV_OP_MODULE_LOAD || !early_replies())
    return;
  srv_iost_hold(st);
  so->early_st = st;
  so->call.early = op_early;
}

/* Sizes a read's reply from the count the decoder checked against nothing yet: bounded by
 * the frame limit before anything is allocated; the session checks it against the buffer. */
static int prepare_read(srv_server *s, srv_conn *c, srv_op *so) {
  uint64_t bytes = so->call.op.u.read.bytes; /* the session holds it to count x the dtype's size */
  uint64_t room = s->limits.max_message - PROTO_REPLY_HEAD_SIZE;
  if (bytes > room)
    return ACCEL_ELIMIT;
  /* Reads whose replies are still being made or wait to be written (or acknowledged) hold
   * memory until the client takes them: past the budget, retry later. */
  if (c->read_pending + c->out_bytes + bytes > srv_conn_budget(s))
    return ACCEL_EBUSY;
  if (nng_msg_alloc(&so->rep, PROTO_REPLY_HEAD_SIZE + (size_t)bytes) != 0)
    return ACCEL_ENOMEM;
  so->read_bytes = bytes;
  so->call.op.u.read.dst = (uint8_t *)nng_msg_body(so->rep) + PROTO_REPLY_HEAD_SIZE;
  c->read_pending += bytes;
  return 0;
}

/* The op's data is in the client's shared memory: point the op there. The read's reply
 * then carries no data. The region's size was checked against the op's bytes; the buffer's
 * checker holds those bytes to the buffer's dtype and count. */
static int resolve_shm(srv_conn *c, srv_op *so, proto_shm_ref ref) {
  dev_op *op = &so->call.op;
  bool write = op->h.kind == DEV_OP_WRITE;
  uint64_t bytes = write ? op->u.write.bytes : op->u.read.bytes;
  uint8_t *p;
  int rc = srv_shm_resolve(c, ref, bytes, &p, &so->region);
  if (rc != 0)
    return rc;
  if (write)
    op->u.write.src = p;
  else
    op->u.read.dst = p;
  return 0;
}

/* A module's options come without their NUL (the decoder checked that they hold none). */
static int take_options(srv_op *so, proto_bytes options) {
  if (options.len == 0)
    return 0;
  so->options = rt_malloc(options.len + 1);
  if (so->options == NULL)
    return ACCEL_ENOMEM;
  memcpy(so->options, options.data, options.len);
  so->options[options.len] = '\0';
  so->call.op.u.module.options = so->options;
  return 0;
}

static int decode(srv_server *s, srv_conn *c, nng_msg *m, srv_op *so) {
  proto_op_data out;
  const uint8_t *body = (const uint8_t *)nng_msg_body(m) + PROTO_HEADER_SIZE;
  bool shm = c->tp->take_fd != NULL; /* shared memory comes only where descriptors pass */
  int rc = proto_decode_op_ex(body, nng_msg_len(m) - PROTO_HEADER_SIZE, shm, &so->call.op, &out);
  if (rc != 0) {
    s->frames_bad++;
    return rc;
  }
  int32_t dev = so->call.op.h.device; /* only the daemon knows how many devices it has */
  if (dev != ACCEL_DEVICE_ANY && (dev < 0 || dev >= s->world->nnodes - 1))
    return ACCEL_EINVAL;
  if (so->call.op.h.flags & PROTO_OPF_SHM)
    return resolve_shm(c, so, out.shm);
  if (so->call.op.h.kind == DEV_OP_MODULE_LOAD && (rc = take_options(so, out.options)) != 0)
    return rc;
  return so->call.op.h.kind == DEV_OP_READ ? prepare_read(s, c, so) : 0;
}

/* Requests hold their bytes (a write's data) until the op is done. A local connection stops
 * being read past its budget (server_local.c); an nng pipe cannot be paused alone, so its
 * ops past the budget are refused instead. */
static int admit(srv_server *s, srv_conn *c, srv_op *so, nng_msg *m) {
  so->req_bytes = nng_msg_len(m);
  if (!c->tp->pausable && c->req_bytes + so->req_bytes > srv_conn_budget(s))
    return ACCEL_EBUSY;
  return 0;
}

static int submit(srv_server *s, srv_conn *c, srv_op *so) {
  accel_msg msg;
  so->srv = s;
  so->conn = c;
  dev_session_op_msg(&msg, &so->call);
  int rc = accel_tell(s->rt, c->session, &msg); /* the session runs later: not inside this */
  if (rc != 0)
    return rc; /* ACCEL_EBUSY: the session's mailbox is full */
  s->refs++;
  s->ops_in_flight++;
  srv_conn_ops_add(s, c, +1, false);
  c->req_bytes += so->req_bytes;
  return 0;
}

void srv_op_frame(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id) {
  int rc = s->draining ? ACCEL_ECLOSED : !c->session_live ? ACCEL_EPROTO : 0;
  srv_op *so = rc == 0 ? srv_op_new(s) : NULL;
  if (rc == 0 && so == NULL)
    rc = ACCEL_ENOMEM;
  if (rc == 0)
    rc = decode(s, c, m, so);
  if (rc == 0)
    rc = admit(s, c, so, m);
  if (rc == 0) {
    so->call.op.h.request_id = request_id;
    so->call.done = op_done;
    so->call.owner = m;
    so->req = m;
    offer_early(c, so);
    rc = submit(s, c, so);
  }
  if (rc == 0)
    return;
  if (so && so->rep) {
    c->read_pending -= so->read_bytes;
    nng_msg_free(so->rep);
  }
  if (so && so->region)
    srv_shm_release(s, c, so->region);
  if (so)
    srv_op_free(s, so);
  srv_reply_status(s, c, m, request_id, rc);
}
