/* The remote transport: ops travel to acceld, many in flight, replies matched by request id
 * in any order (clients/remote.h). The bytes go through a link: the daemon's own local
 * transport for ipc:// and unix:// URLs (remote_local.c), nng for tcp:// and tls+tcp://
 * (remote_nng.c). Futures complete on the link's receiving thread and run `then` callbacks
 * on the context's own small runtime. When the connection is lost, every pending op
 * completes with ACCEL_ECLOSED (or the reason the daemon gave) and later calls fail the same
 * way: the daemon freed the session's buffers. */
#include "clients/remote.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "actors/world.h"
#include "proto/tcp.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"
#include "runtime/error_detail.h"

#define HELLO_TIMEOUT_MS 5000
#define PRE_WELCOME_MAX_BODY (1u << 20) /* until the daemon says its limit */

typedef enum pending_kind { PENDING_OP, PENDING_CONTROL } pending_kind;

struct pending {
  struct pending *next;
  uint64_t id;
  pending_kind kind;
  dev_call *call;     /* PENDING_OP */
  accel_future *done; /* PENDING_CONTROL: completed with the status */
  uint8_t *data;      /* PENDING_CONTROL: a copy of the reply's data */
  size_t len;
  uint16_t expect;     /* PENDING_CONTROL: the frame type it waits for */
  bool shm;            /* PENDING_OP: its data went through shared memory */
  shm_region *staging; /* ... through this staging region (NULL: the user's own) */
};

/* ---- the pending table ---- */

/* Under mu: p enters the table under `id`. */
static void table_add(remote *r, pending *p, uint64_t id) {
  pending **head = &r->table[id % REMOTE_BUCKETS];
  p->id = id;
  p->next = *head;
  *head = p;
}

/* Returns p's id: once p is in the table the receiver (or a lost connection) may finish and
 * free it at any moment, so the sender must not read it again. */
static uint64_t pending_put(remote *r, pending *p) {
  pthread_mutex_lock(&r->mu);
  uint64_t id = ++r->next_id;
  table_add(r, p, id);
  pthread_mutex_unlock(&r->mu);
  return id;
}

/* An op's p enters the table under the id op_room gave it, unless the connection is gone
 * (ACCEL_ECLOSED: then p stays the caller's). From here on neither p nor its op may be read
 * by the sender: the receiver, or a lost connection, may finish and free them. */
static int pending_put_op(remote *r, pending *p, uint64_t id) {
  pthread_mutex_lock(&r->mu);
  bool dead = r->dead; /* the table was emptied: nothing would ever answer p */
  if (!dead)
    table_add(r, p, id);
  pthread_mutex_unlock(&r->mu);
  return dead ? ACCEL_ECLOSED : 0;
}

/* Where a sender that found max_in_flight ops unanswered goes on: a quarter of the window
 * lower, so that it then sends a burst (gathered into few messages) rather than one op per
 * answer, each after a wake-up. */
static uint32_t room_low(uint32_t max) {
  return max - 1 - max / 4;
}

/* An op's place in the count (op_room took it) is given back. Under mu. */
static void op_out(remote *r) {
  r->ops_out--;
  if (r->link->credit && r->ops_out == room_low(r->welcome.limits.max_in_flight))
    pthread_cond_broadcast(&r->room);
}

/* p leaves the table. Under mu. */
static void pending_out(remote *r, pending *p) {
  if (p->kind == PENDING_OP)
    op_out(r);
}

static pending *pending_take(remote *r, uint64_t id) {
  pthread_mutex_lock(&r->mu);
  pending **link = &r->table[id % REMOTE_BUCKETS];
  while (*link && (*link)->id != id)
    link = &(*link)->next;
  pending *p = *link;
  if (p) {
    *link = p->next;
    pending_out(r, p);
  }
  pthread_mutex_unlock(&r->mu);
  return p;
}

/* Takes a place for one more op, which it keeps until its pending entry leaves the table
 * (or op_room_return), and its request id (*id: the frame is encoded before the op goes into
 * the table). With link->credit, when max_in_flight ops are unanswered it waits until only
 * room_low are. 0, or ACCEL_ECLOSED once the connection is gone. */
static int op_room(remote *r, uint64_t *id) {
  pthread_mutex_lock(&r->mu);
  uint32_t max = r->welcome.limits.max_in_flight;
  if (r->link->credit && max > 0 && r->ops_out >= max)
    while (r->ops_out > room_low(max) && !r->dead)
      pthread_cond_wait(&r->room, &r->mu);
  int rc = r->dead ? ACCEL_ECLOSED : 0;
  r->ops_out += rc == 0;
  *id = ++r->next_id;
  pthread_mutex_unlock(&r->mu);
  return rc;
}

bool remote_others_in_flight(remote *r) {
  pthread_mutex_lock(&r->mu);
  bool others = r->ops_out > 1; /* the op being sent took its place already */
  pthread_mutex_unlock(&r->mu);
  return others;
}

static void op_room_return(remote *r) {
  pthread_mutex_lock(&r->mu);
  op_out(r);
  pthread_mutex_unlock(&r->mu);
}

/* ---- completing ---- */

/* `value` (a module load's build log, or NULL) goes to the op's future, or is freed. */
static void finish_op(accel_ctx *ctx, dev_call *call, int status, char *value) {
  status = client_op_settle(ctx, &call->op, status);
  if (call->future) {
    accel_future_complete(call->future, status, value, value ? rt_free : NULL);
    accel_future_release(call->future);
  } else {
    rt_free(value);
  }
  dev_call_free(call);
  client_op_done(ctx, status);
}

/* A module load's REPLY carries the build log, whatever its status: a string for the
 * future (NULL if empty, or without memory for it: the status is what matters). */
static char *log_of(proto_bytes data) {
  char *text = data.len ? rt_malloc(data.len + 1) : NULL;
  if (text) {
    memcpy(text, data.data, data.len);
    text[data.len] = '\0';
  }
  return text;
}

static void finish_pending(accel_ctx *ctx, pending *p, int status, proto_bytes data) {
  if (p->kind == PENDING_OP && p->shm) {
    remote_shm_complete(remote_of(ctx), &p->call->op, p->staging, status);
    finish_op(ctx, p->call, status, NULL);
    rt_free(p);
    return;
  }
  if (p->kind == PENDING_OP) {
    dev_op *op = &p->call->op;
    if (status == 0 && op->h.kind == DEV_OP_READ) {
      size_t want = (size_t)op->u.read.bytes;
      if (data.len == want)
        memcpy(op->u.read.dst, data.data, want);
      else
        status = ACCEL_EPROTO;
    }
    finish_op(ctx, p->call, status, op->h.kind == DEV_OP_MODULE_LOAD ? log_of(data) : NULL);
    rt_free(p);
    return;
  }
  if (data.len && (p->data = rt_malloc(data.len)) != NULL) {
    memcpy(p->data, data.data, data.len);
    p->len = data.len;
  } else if (data.len) {
    status = status == 0 ? ACCEL_ENOMEM : status; /* the answer is lost to the waiter */
  }
  accel_future *done = p->done; /* after completing, p belongs to the waiter */
  accel_future_complete(done, status, NULL, NULL);
  accel_future_release(done); /* the receiver's reference */
}

void remote_on_lost(accel_ctx *ctx) {
  remote *r = remote_of(ctx);
  int why = atomic_load(&r->conn_error);
  pthread_mutex_lock(&r->mu);
  r->dead = true;
  pthread_cond_broadcast(&r->room);
  pthread_mutex_unlock(&r->mu);
  for (uint32_t b = 0; b < REMOTE_BUCKETS; b++) {
    for (;;) {
      pthread_mutex_lock(&r->mu);
      pending *p = r->table[b];
      if (p) {
        r->table[b] = p->next;
        pending_out(r, p);
      }
      pthread_mutex_unlock(&r->mu);
      if (p == NULL)
        break;
      finish_pending(ctx, p, why ? why : ACCEL_ECLOSED, (proto_bytes){NULL, 0});
    }
  }
}

/* ---- receiving (the link's thread) ---- */

/* A REPLY with request id 0 is about the connection itself (refused: not allowed, draining):
 * the daemon closes it next, and pending requests complete with that reason. */
static void connection_reply(remote *r, const uint8_t *body, uint32_t len) {
  int32_t status;
  proto_bytes data;
  if (proto_decode_reply(body, len, &status, &data) == 0 && status < 0)
    atomic_store(&r->conn_error, status);
}

void remote_on_frame(accel_ctx *ctx, const uint8_t *frame, size_t len) {
  remote *r = remote_of(ctx);
  proto_header h;
  if (proto_decode_header(frame, len, atomic_load(&r->max_body) + PROTO_HEADER_SIZE, &h) != 0)
    return; /* not ours to answer: drop it */
  const uint8_t *body = frame + PROTO_HEADER_SIZE;
  if (h.request_id == 0 && h.type == PROTO_REPLY) {
    connection_reply(r, body, h.body_len);
    return;
  }
  pending *p = pending_take(r, h.request_id);
  if (p == NULL)
    return;
  int32_t status = ACCEL_EPROTO;
  proto_bytes data = {NULL, 0};
  if (h.type == PROTO_REPLY && proto_decode_reply(body, h.body_len, &status, &data) != 0)
    status = ACCEL_EPROTO;
  else if (h.type == PROTO_REPLY && status == 0 && p->kind == PENDING_CONTROL &&
           p->expect == PROTO_WELCOME)
    status = ACCEL_EPROTO; /* a HELLO is answered by a WELCOME, or by an error */
  else if (h.type == PROTO_WELCOME && p->kind == PENDING_CONTROL && p->expect == PROTO_WELCOME)
    status = 0, data = (proto_bytes){body, h.body_len};
  finish_pending(ctx, p, status, data);
}

void remote_on_message(accel_ctx *ctx, const uint8_t *p, size_t len) {
  while (len > 0) {
    size_t n = proto_next_frame(p, len);
    if (n == 0)
      return; /* not a whole frame: malformed, drop the rest */
    remote_on_frame(ctx, p, n);
    p += n;
    len -= n;
  }
}

/* ---- sending ---- */

/* A thread in a send holds the remote: a send the link blocked (nng, when the daemon died)
 * returns only once the link is closed, and must not find the remote freed. */
static void sender_enter(remote *r) {
  pthread_mutex_lock(&r->mu);
  r->senders++;
  pthread_mutex_unlock(&r->mu);
}

static void sender_leave(remote *r) {
  pthread_mutex_lock(&r->mu);
  if (--r->senders == 0)
    pthread_cond_broadcast(&r->idle);
  pthread_mutex_unlock(&r->mu);
}

/* After the link closed (which releases blocked sends): waits for senders to leave, at most
 * a few seconds; false if one is still inside (the remote must then not be freed). */
static bool senders_gone(remote *r) {
  struct timespec until = rt_deadline_after(3000);
  pthread_mutex_lock(&r->mu);
  while (r->senders > 0 && pthread_cond_timedwait(&r->idle, &r->mu, &until) == 0)
    ;
  bool gone = r->senders == 0;
  pthread_mutex_unlock(&r->mu);
  return gone;
}

static int link_send(remote *r, const uint8_t *bytes, size_t len, uint64_t id, int fd) {
  sender_enter(r);
  int rc = fd < 0             ? r->link->send(r, bytes, len, id)
           : r->link->send_fd ? r->link->send_fd(r, bytes, len, fd)
                              : ACCEL_ENOTSUP;
  sender_leave(r);
  return rc;
}

/* A large write through a link that gathers: its bytes are copied once, into the link's
 * message, rather than into the encoded frame first. */
#define GATHER_MIN (64u << 10)

static int link_send_gather(remote *r, const uint8_t *head, size_t head_len, proto_bytes tail,
                            uint64_t id) {
  sender_enter(r);
  int rc = r->link->send_gather(r, head, head_len, tail.data, tail.len, id);
  sender_leave(r);
  return rc;
}

static int send_op_frame(accel_ctx *ctx, dev_call *call);

/* The whole send holds the remote, not only the link's part: after the link returns, the
 * sender still looks its request up in the table. */
static int remote_send(accel_ctx *ctx, dev_call *call) {
  remote *r = remote_of(ctx);
  sender_enter(r);
  int rc = send_op_frame(ctx, call);
  sender_leave(r);
  return rc;
}

static int send_op_frame(accel_ctx *ctx, dev_call *call) {
  remote *r = remote_of(ctx);
  dev_op *op = &call->op;
  uint64_t id;
  int rc = op_room(r, &id);
  if (rc != 0)
    return rc;
  pending *p = rt_calloc(1, sizeof *p);
  if (p == NULL) {
    op_room_return(r);
    return ACCEL_ENOMEM;
  }
  p->kind = PENDING_OP;
  p->call = call;
  proto_shm_ref ref;
  bool shm = p->shm = remote_shm_prepare(ctx, op, &ref, &p->staging) == 1;
  shm_region *staging = p->staging;
  proto_bytes data = {NULL, 0};
  if (op->h.kind == DEV_OP_WRITE && !shm)
    data = (proto_bytes){op->u.write.src, op->u.write.bytes};
  proto_out o;
  proto_out_init(&o);
  bool gather = data.len >= GATHER_MIN && r->link->send_gather != NULL;
  /* Everything of the op is read before it enters the table (pending_put_op). */
  if (op->h.kind == DEV_OP_MODULE_LOAD && op->u.module.len > r->welcome.limits.max_message)
    rc = ACCEL_ELIMIT; /* a module's code goes in one frame: refused before it is copied */
  else if (gather)
    rc = proto_encode_write_head(&o, id, op, data.len);
  else
    rc = shm ? proto_encode_op_shm(&o, id, op, ref) : proto_encode_op(&o, id, op, data);
  if (rc == 0 && o.len + (gather ? data.len : 0) > r->welcome.limits.max_message)
    rc = ACCEL_ELIMIT; /* larger than the daemon takes in one frame */
  if (rc == 0 && call->future != NULL && r->link->offer_help != NULL)
    r->link->offer_help(ctx, call->future); /* before the send: after it, call may be gone */
  bool put = rc == 0 && (rc = pending_put_op(r, p, id)) == 0;
  if (rc == 0)
    rc = gather ? link_send_gather(r, o.data, o.len, data, id)
                : link_send(r, o.data, o.len, id, -1);
  proto_out_free(&o);
  if (rc != 0 && (!put || pending_take(r, id) == p)) {
    if (!put)
      op_room_return(r); /* pending_take gives it back otherwise */
    if (shm)
      remote_shm_complete(r, op, staging, rc);
    rt_free(p); /* not sent: the op stays the caller's */
  } else if (rc != 0)
    rc = 0; /* the connection was lost meanwhile: remote_on_lost finished it */
  return rc;
}

/* A pending request whose answer a caller waits for; its future has two references, the
 * waiter's and the receiver's. */
static pending *waited_pending(accel_ctx *ctx, uint16_t expect) {
  pending *p = rt_calloc(1, sizeof *p);
  if (p == NULL)
    return NULL;
  p->kind = PENDING_CONTROL;
  p->expect = expect;
  if (accel_future_create(ctx->rt, &p->done) != 0) {
    rt_free(p);
    return NULL;
  }
  accel_future_retain(p->done);
  pending_put(remote_of(ctx), p);
  return p;
}

/* The waiter is done with p. If the request got no answer (send failed, timeout) and the
 * receiver has taken it meanwhile, its answer is imminent: wait for it, then free. */
static void waited_free(remote *r, pending *p, bool answered) {
  if (!answered && pending_take(r, p->id) == p)
    accel_future_release(p->done); /* the receiver's reference, never to be used */
  else if (!answered)
    accel_future_wait(p->done, -1);
  rt_free(p->data);
  accel_future_release(p->done);
  rt_free(p);
}

/* Sends the encoded request of p and waits for its answer (timeout_ms < 0: for ever);
 * *answered says whether it came. A send that fails on a connection already lost reports
 * why the daemon closed it, when it said so. The caller frees p with waited_free. */
static int request(accel_ctx *ctx, pending *p, proto_out *o, int timeout_ms, int fd,
                   bool *answered) {
  remote *r = remote_of(ctx);
  pthread_mutex_lock(&r->mu);
  bool dead = r->dead; /* the table was emptied: nothing would ever answer p */
  pthread_mutex_unlock(&r->mu);
  int rc = dead ? ACCEL_ECLOSED : link_send(r, o->data, o->len, p->id, fd);
  *answered = false;
  if (rc == ACCEL_ECLOSED && atomic_load(&r->conn_error) != 0)
    rc = atomic_load(&r->conn_error);
  if (rc != 0)
    return rc;
  rc = accel_future_wait(p->done, timeout_ms);
  *answered = rc != ACCEL_ETIMEDOUT;
  return rc;
}

int remote_control(accel_ctx *ctx, uint32_t command, uint64_t arg, int fd, uint8_t **out,
                   size_t *out_len) {
  pending *p = waited_pending(ctx, PROTO_REPLY);
  if (p == NULL)
    return ACCEL_ENOMEM;
  proto_out o;
  proto_out_init(&o);
  proto_control_req c = {command, arg};
  bool answered = false;
  int rc = proto_encode_control(&o, p->id, &c);
  if (rc == 0)
    rc = request(ctx, p, &o, -1, fd, &answered);
  proto_out_free(&o);
  if (rc == 0 && out) {
    *out = p->data;
    *out_len = p->len;
    p->data = NULL;
  }
  waited_free(remote_of(ctx), p, answered);
  return rc;
}

/* ---- open: connect, HELLO, WELCOME ---- */

static void take_welcome(accel_ctx *ctx, remote *r) {
  atomic_store(&r->max_body, r->welcome.limits.max_message);
  /* room for the frame's header, the op's head and buffers, the payload */
  uint32_t max = r->welcome.limits.max_message;
  ctx->max_op_bytes = max > 8192 ? max - 4096 : max / 2;
}

static int hello(accel_ctx *ctx, const char *name) {
  remote *r = remote_of(ctx);
  pending *p = waited_pending(ctx, PROTO_WELCOME);
  if (p == NULL)
    return ACCEL_ENOMEM;
  proto_out o;
  proto_out_init(&o);
  int rings_fd = rings_offer(r);
  proto_hello h = {.version = PROTO_VERSION,
                   .capabilities = r->link->caps | (rings_fd >= 0 ? PROTO_CAP_RINGS : 0)};
  snprintf(h.name, sizeof h.name, "%s", name);
  bool answered = false;
  int rc = proto_encode_hello(&o, p->id, &h);
  if (rc == 0)
    rc = request(ctx, p, &o, HELLO_TIMEOUT_MS, rings_fd, &answered);
  proto_out_free(&o);
  if (rings_fd >= 0)
    close(rings_fd);
  if (rc == 0 && proto_decode_welcome(p->data, p->len, &r->welcome) != 0)
    rc = ACCEL_EPROTO;
  if (rc == 0 && r->welcome.version != PROTO_VERSION)
    rc = ACCEL_EPROTO;
  /* Nothing else is sent or read until this returns: from here both ways use the rings. */
  rings_welcome(r, rc == 0 && (r->welcome.capabilities & PROTO_CAP_RINGS));
  if (rc == 0)
    take_welcome(ctx, r);
  waited_free(r, p, answered);
  return rc;
}

/* After the link has closed: nothing receives any more. */
static void remote_free(accel_ctx *ctx) {
  remote *r = remote_of(ctx);
  r->link->close(ctx);
  pthread_mutex_lock(&r->mu);
  r->dead = true; /* a sender waiting for room gives up */
  pthread_cond_broadcast(&r->room);
  pthread_mutex_unlock(&r->mu);
  if (!senders_gone(r)) { /* a send still blocked in the link: leak rather than free under it */
    accel_log(ACCEL_LOG_WARN, "libaccel", "a send did not return after close: abandoned");
    return;
  }
  remote_on_lost(ctx);
  sendq_free(r); /* the stream links' (no sender is inside now) */
  remote_shm_free_all(r);
  ctx->call_pool = NULL;
  dev_call_pool_drain(&r->calls); /* every op has ended: remote_on_lost failed the last */
  pthread_mutex_destroy(&r->shm_mu);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->idle);
  pthread_cond_destroy(&r->room);
  rt_free(r);
}

static void open_failed(accel_ctx *ctx) {
  remote_free(ctx);
  accel_runtime_destroy(ctx->rt);
  pthread_mutex_destroy(&ctx->mu);
  pthread_mutex_destroy(&ctx->done_mu);
  pthread_cond_destroy(&ctx->done_cv);
  rt_free(ctx->handles);
}

/* ---- the URL's parameters ---- */

/* The client's name in HELLO, as `accelctl clients` and acceld's log show it: the URL's
 * name= (at most PROTO_NAME_MAX bytes), else the program's (program_invocation_short_name). */
static int take_param(const char *url, const char *param, size_t len, char *name) {
  static const char key[] = "name=";
  size_t klen = sizeof key - 1;
  if (len <= klen || len - klen > PROTO_NAME_MAX || strncmp(param, key, klen) != 0)
    return rt_error_detail(ACCEL_EINVAL,
                           "%s: '%.*s' is not a parameter of a daemon's URL (only name=NAME, "
                           "1 to %u bytes)",
                           url, (int)len, param, PROTO_NAME_MAX);
  memcpy(name, param + klen, len - klen);
  name[len - klen] = '\0';
  return 0;
}

/* Splits "SCHEME://ADDRESS?name=NAME" into the address the link dials (*link, rt_malloc'd)
 * and the name. */
static int parse_url(const char *url, char **link, char name[PROTO_NAME_MAX + 1]) {
  const char *q = strchr(url, '?');
  size_t n = q ? (size_t)(q - url) : strlen(url);
  snprintf(name, PROTO_NAME_MAX + 1, "%s", program_invocation_short_name);
  for (const char *p = q ? q + 1 : NULL; p != NULL;) {
    const char *amp = strchr(p, '&');
    size_t len = amp ? (size_t)(amp - p) : strlen(p);
    int rc = take_param(url, p, len, name);
    if (rc != 0)
      return rc;
    p = amp ? amp + 1 : NULL;
  }
  if ((*link = rt_malloc(n + 1)) == NULL)
    return ACCEL_ENOMEM;
  memcpy(*link, url, n);
  (*link)[n] = '\0';
  return 0;
}

static int remote_open(accel_ctx *ctx, const char *url, const char *name) {
  remote *r = rt_calloc(1, sizeof *r);
  if (r == NULL)
    return ACCEL_ENOMEM;
  r->fd = -1;
  r->link = proto_local_path(url) ? &remote_local_link
            : proto_tcp_url(url)  ? &remote_tcp_link
                                  : &remote_nng_link;
  atomic_init(&r->max_body, PRE_WELCOME_MAX_BODY);
  if (rt_cond_init_monotonic(&r->idle) != 0) { /* senders_gone's deadline is monotonic */
    rt_free(r);
    return ACCEL_ENOMEM;
  }
  if (pthread_cond_init(&r->room, NULL) != 0) {
    pthread_cond_destroy(&r->idle);
    rt_free(r);
    return ACCEL_ENOMEM;
  }
  pthread_mutex_init(&r->mu, NULL);
  pthread_mutex_init(&r->shm_mu, NULL);
  int rc = client_ctx_init(ctx, CLIENT_DEFAULT_MAX_BUFFERS);
  if (rc != 0) {
    pthread_mutex_destroy(&r->shm_mu);
    pthread_cond_destroy(&r->idle);
    pthread_cond_destroy(&r->room);
    pthread_mutex_destroy(&r->mu);
    rt_free(r);
    return rc;
  }
  dev_call_pool_init(&r->calls);
  ctx->call_pool = &r->calls;
  ctx->tp = &client_remote_transport;
  ctx->impl = r;
  rc = accel_runtime_create(&ctx->rt, &(accel_runtime_opts){.loops = 1}); /* for `then` only */
  if (rc == 0)
    rc = accel_runtime_start(ctx->rt);
  if (rc == 0)
    rc = r->link->open(ctx, url);
  if (rc == 0 && (rc = hello(ctx, name)) != 0)
    rt_error_detail(rc, "acceld at %s did not welcome this client (HELLO: %s)", url,
                    accel_strerror(rc));
  if (rc != 0)
    open_failed(ctx);
  return rc;
}

int client_remote_open(accel_ctx *ctx, const char *url) {
  char *link, name[PROTO_NAME_MAX + 1];
  int rc = parse_url(url, &link, name);
  if (rc != 0)
    return rc;
  rc = remote_open(ctx, link, name);
  rt_free(link);
  return rc;
}

/* ---- the rest of the transport ---- */

static int remote_device_count(accel_ctx *ctx) {
  return (int)remote_of(ctx)->welcome.device_count;
}

static int remote_device_info(accel_ctx *ctx, accel_device dev, struct accel_device_info *out) {
  uint8_t *data = NULL;
  size_t len = 0;
  int rc = remote_control(ctx, PROTO_CTL_DEVICE_INFO, (uint64_t)dev, -1, &data, &len);
  if (rc == 0 && proto_decode_device(data, len, out) != 0)
    rc = ACCEL_EPROTO;
  rt_free(data);
  return rc;
}

static int remote_inject_fault(accel_ctx *ctx, accel_device dev) {
  return remote_control(ctx, PROTO_CTL_INJECT_FAULT, (uint64_t)dev, -1, NULL, NULL);
}

static int remote_transfer_stats(accel_ctx *ctx, accel_transfer_stats *out) {
  uint8_t *data = NULL;
  size_t len = 0;
  int rc = remote_control(ctx, PROTO_CTL_TRANSFER_STATS, 0, -1, &data, &len);
  if (rc == 0 && proto_decode_transfer_stats(data, len, out) != 0)
    rc = ACCEL_EPROTO;
  rt_free(data);
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
    .host_alloc = remote_host_alloc,
    .host_free = remote_host_free,
};
