/* The remote transport: ops travel to acceld over nng ("ipc://", "tcp://"), many in flight,
 * replies matched by request id in any order.
 *
 * The socket is a raw req0 socket: nng adds no retries and no one-request-at-a-time rule; the
 * 32-bit nng request id in the message header is ours (the frame's id with the high bit set)
 * and the daemon's raw rep socket echoes it back. One nng aio receives replies; its callback
 * (an nng thread) completes futures, which run `then` callbacks on the context's own small
 * runtime. When the connection to the daemon is lost, every pending op completes with
 * ACCEL_ECLOSED and later calls fail the same way: the daemon freed the session's buffers. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdlib.h>
#include <string.h>

#include "actors/world.h"
#include "clients/ctx.h"
#include "clients/remote_dial.h"
#include "proto/wire.h"

#define BUCKETS 4096u
#define HELLO_TIMEOUT_MS 5000

typedef enum pending_kind { PENDING_OP, PENDING_CONTROL } pending_kind;

typedef struct pending {
  struct pending *next;
  uint64_t id;
  pending_kind kind;
  dev_op *op;              /* PENDING_OP */
  accel_future *done;      /* PENDING_CONTROL: completed with the status */
  uint8_t *data;           /* PENDING_CONTROL: a copy of the reply's data */
  size_t len;
  uint16_t expect;         /* PENDING_CONTROL: the frame type it waits for */
} pending;

typedef struct remote {
  nng_socket sock;
  nng_aio *rx;
  pthread_mutex_t mu;
  pending *table[BUCKETS];
  uint64_t next_id;
  bool dead;
  bool nng_used;
  proto_welcome welcome;
  uint32_t received, acked; /* nng messages received; the count last acknowledged (receiver) */
} remote;

static remote *impl_of(accel_ctx *ctx) {
  return ctx->impl;
}

/* nng starts threads of its own with the first socket, which outlive every context (and
 * show as leaks). nng 1.5 cannot be used again after nng_fini(), so it is finalised only when
 * the library is unloaded (at process exit), if this library used it and no context is open. */
static pthread_mutex_t nng_users_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned nng_users;
static bool nng_used_ever;

static void nng_user_add(void) {
  pthread_mutex_lock(&nng_users_mu);
  nng_users++;
  nng_used_ever = true;
  pthread_mutex_unlock(&nng_users_mu);
}

static void nng_user_remove(void) {
  pthread_mutex_lock(&nng_users_mu);
  nng_users--;
  pthread_mutex_unlock(&nng_users_mu);
}

__attribute__((destructor)) static void nng_finalise_at_exit(void) {
  pthread_mutex_lock(&nng_users_mu);
  bool fini = nng_used_ever && nng_users == 0;
  pthread_mutex_unlock(&nng_users_mu);
  if (fini)
    nng_fini();
}

/* ---- the pending table ---- */

static void pending_put(remote *r, pending *p) {
  pthread_mutex_lock(&r->mu);
  p->id = ++r->next_id;
  pending **head = &r->table[p->id % BUCKETS];
  p->next = *head;
  *head = p;
  pthread_mutex_unlock(&r->mu);
}

static pending *pending_take(remote *r, uint64_t id) {
  pthread_mutex_lock(&r->mu);
  pending **link = &r->table[id % BUCKETS];
  while (*link && (*link)->id != id)
    link = &(*link)->next;
  pending *p = *link;
  if (p)
    *link = p->next;
  pthread_mutex_unlock(&r->mu);
  return p;
}

/* ---- completing ---- */

static void finish_op(accel_ctx *ctx, dev_op *op, int status) {
  if (op->future) {
    accel_future_complete(op->future, status, NULL, NULL);
    accel_future_release(op->future);
  }
  free(op);
  client_op_done(ctx, status);
}

static void finish_pending(accel_ctx *ctx, pending *p, int status, proto_bytes data) {
  if (p->kind == PENDING_OP) {
    dev_op *op = p->op;
    if (status == 0 && op->h.kind == DEV_OP_READ) {
      size_t want = op->bufs[0].count * 4; /* both dtypes are 4 bytes */
      if (data.len == want)
        memcpy(op->u.read.dst, data.data, want);
      else
        status = ACCEL_EPROTO;
    }
    finish_op(ctx, op, status);
    free(p);
    return;
  }
  if (data.len && (p->data = malloc(data.len)) != NULL) {
    memcpy(p->data, data.data, data.len);
    p->len = data.len;
  }
  accel_future *done = p->done; /* after completing, p belongs to the waiter */
  accel_future_complete(done, status, NULL, NULL);
  accel_future_release(done);   /* the receiver's reference */
}

/* The daemon is gone: every pending request completes with ACCEL_ECLOSED. */
static void fail_all(accel_ctx *ctx) {
  remote *r = impl_of(ctx);
  pthread_mutex_lock(&r->mu);
  r->dead = true;
  pthread_mutex_unlock(&r->mu);
  for (uint32_t b = 0; b < BUCKETS; b++) {
    for (;;) {
      pthread_mutex_lock(&r->mu);
      pending *p = r->table[b];
      if (p)
        r->table[b] = p->next;
      pthread_mutex_unlock(&r->mu);
      if (p == NULL)
        break;
      finish_pending(ctx, p, ACCEL_ECLOSED, (proto_bytes){NULL, 0});
    }
  }
}

/* ---- receiving (an nng thread) ---- */

static void handle_frame(accel_ctx *ctx, const uint8_t *frame, size_t len) {
  remote *r = impl_of(ctx);
  proto_header h;
  uint32_t max = r->welcome.limits.max_message ? r->welcome.limits.max_message : UINT32_MAX;
  if (proto_decode_header(frame, len, max, &h) != 0)
    return; /* not ours to answer: drop it */
  pending *p = pending_take(r, h.request_id);
  if (p == NULL)
    return;
  const uint8_t *body = frame + PROTO_HEADER_SIZE;
  int32_t status = ACCEL_EPROTO;
  proto_bytes data = {NULL, 0};
  if (h.type == PROTO_REPLY && proto_decode_reply(body, h.body_len, &status, &data) != 0)
    status = ACCEL_EPROTO;
  else if (h.type == PROTO_WELCOME && p->kind == PENDING_CONTROL && p->expect == PROTO_WELCOME)
    status = 0, data = (proto_bytes){body, h.body_len};
  finish_pending(ctx, p, status, data);
}

static int send_frame(remote *r, const proto_out *o, uint64_t id);

/* The daemon keeps at most PROTO_ACK_WINDOW messages unacknowledged (beyond that nng would
 * drop them): tell it every PROTO_ACK_EVERY messages how many have arrived. */
static void acknowledge(remote *r) {
  if (++r->received - r->acked < PROTO_ACK_EVERY)
    return;
  proto_out o;
  proto_out_init(&o);
  proto_control_req c = {PROTO_CTL_ACK, r->received};
  if (proto_encode_control(&o, 0, &c) == 0 && send_frame(r, &o, 0) == 0)
    r->acked = r->received;
  proto_out_free(&o);
}

/* One message may hold several frames back to back (PROTO_CAP_BATCH). */
static void handle_message(accel_ctx *ctx, const uint8_t *p, size_t len) {
  while (len > 0) {
    size_t n = proto_next_frame(p, len);
    if (n == 0)
      return; /* not a whole frame: malformed, drop the rest */
    handle_frame(ctx, p, n);
    p += n;
    len -= n;
  }
}

static void on_receive(void *arg) {
  accel_ctx *ctx = arg;
  remote *r = impl_of(ctx);
  int rv = nng_aio_result(r->rx);
  if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
    return;
  if (rv == 0) {
    nng_msg *msg = nng_aio_get_msg(r->rx);
    handle_message(ctx, nng_msg_body(msg), nng_msg_len(msg));
    nng_msg_free(msg);
    acknowledge(r);
  }
  nng_recv_aio(r->sock, r->rx);
}

static void on_pipe_gone(nng_pipe pipe, nng_pipe_ev ev, void *arg) {
  fail_all(arg);
}

/* ---- sending ---- */

static int send_frame(remote *r, const proto_out *o, uint64_t id) {
  nng_msg *msg;
  if (nng_msg_alloc(&msg, 0) != 0)
    return ACCEL_ENOMEM;
  if (nng_msg_header_append_u32(msg, (uint32_t)id | 0x80000000u) != 0 ||
      nng_msg_append(msg, o->data, o->len) != 0) {
    nng_msg_free(msg);
    return ACCEL_ENOMEM;
  }
  if (nng_sendmsg(r->sock, msg, 0) != 0) {
    nng_msg_free(msg);
    return ACCEL_ECLOSED;
  }
  return 0;
}

static int remote_send(accel_ctx *ctx, dev_op *op) {
  remote *r = impl_of(ctx);
  pending *p = calloc(1, sizeof *p);
  if (p == NULL)
    return ACCEL_ENOMEM;
  p->kind = PENDING_OP;
  p->op = op;
  pending_put(r, p);
  proto_bytes data = {NULL, 0};
  if (op->h.kind == DEV_OP_WRITE)
    data = (proto_bytes){op->u.write.src, op->u.write.bytes};
  proto_out o;
  proto_out_init(&o);
  int rc = proto_encode_op(&o, p->id, op, data);
  if (rc == 0 && o.len > r->welcome.limits.max_message)
    rc = ACCEL_ELIMIT; /* larger than the daemon takes in one frame */
  pthread_mutex_lock(&r->mu);
  if (rc == 0 && r->dead)
    rc = ACCEL_ECLOSED;
  pthread_mutex_unlock(&r->mu);
  if (rc == 0)
    rc = send_frame(r, &o, p->id);
  proto_out_free(&o);
  if (rc != 0 && pending_take(r, p->id) == p)
    free(p); /* not sent: the op stays the caller's */
  else if (rc != 0)
    rc = 0; /* fail_all already finished it */
  return rc;
}

/* A pending request whose answer a caller waits for; its future has two references, the
 * waiter's and the receiver's. */
static pending *waited_pending(accel_ctx *ctx, uint16_t expect) {
  pending *p = calloc(1, sizeof *p);
  if (p == NULL)
    return NULL;
  p->kind = PENDING_CONTROL;
  p->expect = expect;
  if (accel_future_create(ctx->rt, &p->done) != 0) {
    free(p);
    return NULL;
  }
  accel_future_retain(p->done);
  pending_put(impl_of(ctx), p);
  return p;
}

/* The waiter is done with p. If the request got no answer (send failed, timeout) and the
 * receiver has taken it meanwhile, its answer is imminent: wait for it, then free. */
static void waited_free(remote *r, pending *p, bool answered) {
  if (!answered && pending_take(r, p->id) == p)
    accel_future_release(p->done); /* the receiver's reference, never to be used */
  else if (!answered)
    accel_future_wait(p->done, -1);
  free(p->data);
  accel_future_release(p->done);
  free(p);
}

/* Sends one control frame and waits for its answer. On success *out (may be NULL) receives a
 * malloc'd copy of the reply's data. */
static int control(accel_ctx *ctx, uint32_t command, uint64_t arg, uint8_t **out,
                   size_t *out_len) {
  remote *r = impl_of(ctx);
  pending *p = waited_pending(ctx, PROTO_REPLY);
  if (p == NULL)
    return ACCEL_ENOMEM;
  int rc;
  proto_out o;
  proto_out_init(&o);
  proto_control_req c = {command, arg};
  rc = proto_encode_control(&o, p->id, &c);
  if (rc == 0)
    rc = send_frame(r, &o, p->id);
  proto_out_free(&o);
  if (rc != 0) {
    waited_free(r, p, false);
    return rc;
  }
  rc = accel_future_wait(p->done, -1);
  if (rc == 0 && out) {
    *out = p->data;
    *out_len = p->len;
    p->data = NULL;
  }
  waited_free(r, p, true);
  return rc;
}

/* ---- open: dial, HELLO, WELCOME ---- */

static int hello(accel_ctx *ctx) {
  remote *r = impl_of(ctx);
  pending *p = waited_pending(ctx, PROTO_WELCOME);
  if (p == NULL)
    return ACCEL_ENOMEM;
  int rc;
  proto_out o;
  proto_out_init(&o);
  proto_hello h = {.version = PROTO_VERSION, .capabilities = PROTO_CAP_BATCH | PROTO_CAP_ACK,
                   .name = "libaccel"};
  rc = proto_encode_hello(&o, p->id, &h);
  if (rc == 0)
    rc = send_frame(r, &o, p->id);
  proto_out_free(&o);
  if (rc != 0) {
    waited_free(r, p, false);
    return rc;
  }
  rc = accel_future_wait(p->done, HELLO_TIMEOUT_MS);
  if (rc == ACCEL_ETIMEDOUT) {
    waited_free(r, p, false);
    return rc;
  }
  if (rc == 0 && proto_decode_welcome(p->data, p->len, &r->welcome) != 0)
    rc = ACCEL_EPROTO;
  if (rc == 0 && r->welcome.version != PROTO_VERSION)
    rc = ACCEL_EPROTO;
  if (rc == 0) /* room for the frame's header, the op's head and buffers, the payload */
    ctx->max_op_bytes = r->welcome.limits.max_message > 4096 ? r->welcome.limits.max_message - 4096 : 0;
  waited_free(r, p, true);
  return rc;
}

static int connect_socket(accel_ctx *ctx, const char *url) {
  remote *r = impl_of(ctx);
  nng_user_add();
  r->nng_used = true;
  if (nng_req0_open_raw(&r->sock) != 0)
    return ACCEL_ESYS;
  nng_pipe_notify(r->sock, NNG_PIPE_EV_REM_POST, on_pipe_gone, ctx);
  if (nng_aio_alloc(&r->rx, on_receive, ctx) != 0)
    return ACCEL_ENOMEM;
  /* nng refuses messages over 1 MiB by default (closing the connection): a read's reply is
   * as large as the daemon's max_message allows, which it enforces itself. */
  nng_socket_set_size(r->sock, NNG_OPT_RECVMAXSZ, 0);
  int rc = client_nng_dial(r->sock, url);
  if (rc != 0)
    return rc;
  nng_recv_aio(r->sock, r->rx);
  return 0;
}

static void remote_free(accel_ctx *ctx) {
  remote *r = impl_of(ctx);
  if (r->rx)
    nng_aio_stop(r->rx); /* first: on_receive would re-arm it on a closing socket */
  nng_close(r->sock);    /* after this no callback of ours runs again */
  if (r->rx)
    nng_aio_free(r->rx);
  fail_all(ctx);
  if (r->nng_used)
    nng_user_remove();
  pthread_mutex_destroy(&r->mu);
  free(r);
}

int client_remote_open(accel_ctx *ctx, const char *url) {
  remote *r = calloc(1, sizeof *r);
  if (r == NULL)
    return ACCEL_ENOMEM;
  pthread_mutex_init(&r->mu, NULL);
  int rc = client_ctx_init(ctx, CLIENT_DEFAULT_MAX_BUFFERS);
  if (rc != 0) {
    pthread_mutex_destroy(&r->mu);
    free(r);
    return rc;
  }
  ctx->tp = &client_remote_transport;
  ctx->impl = r;
  rc = accel_runtime_create(&ctx->rt, NULL);
  if (rc == 0)
    rc = accel_runtime_start(ctx->rt);
  if (rc == 0)
    rc = connect_socket(ctx, url);
  if (rc == 0)
    rc = hello(ctx);
  if (rc != 0) {
    remote_free(ctx);
    accel_runtime_destroy(ctx->rt);
    pthread_mutex_destroy(&ctx->mu);
    pthread_mutex_destroy(&ctx->done_mu);
    pthread_cond_destroy(&ctx->done_cv);
    free(ctx->handles);
  }
  return rc;
}

/* ---- the rest of the transport ---- */

static int remote_device_count(accel_ctx *ctx) {
  return (int)impl_of(ctx)->welcome.device_count;
}

static int remote_device_info(accel_ctx *ctx, accel_device dev,
                              struct accel_device_info *out) {
  uint8_t *data = NULL;
  size_t len = 0;
  int rc = control(ctx, PROTO_CTL_DEVICE_INFO, (uint64_t)dev, &data, &len);
  if (rc == 0 && proto_decode_device(data, len, out) != 0)
    rc = ACCEL_EPROTO;
  free(data);
  return rc;
}

static int remote_inject_fault(accel_ctx *ctx, accel_device dev) {
  return control(ctx, PROTO_CTL_INJECT_FAULT, (uint64_t)dev, NULL, NULL);
}

static int remote_transfer_stats(accel_ctx *ctx, accel_transfer_stats *out) {
  uint8_t *data = NULL;
  size_t len = 0;
  int rc = control(ctx, PROTO_CTL_TRANSFER_STATS, 0, &data, &len);
  if (rc == 0 && proto_decode_transfer_stats(data, len, out) != 0)
    rc = ACCEL_EPROTO;
  free(data);
  return rc;
}

static void remote_close(accel_ctx *ctx) {
  remote_free(ctx);
  accel_runtime_stop(ctx->rt);
  accel_runtime_join(ctx->rt);
  accel_runtime_destroy(ctx->rt);
}

const client_transport client_remote_transport = {
    .send_op = remote_send,
    .device_count = remote_device_count,
    .device_info = remote_device_info,
    .inject_fault = remote_inject_fault,
    .transfer_stats = remote_transfer_stats,
    .close = remote_close,
};
