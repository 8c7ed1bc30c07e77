/* One received frame: check its header, then HELLO, OP (server_ops.c) or CONTROL. A frame
 * whose header decodes (or at least starts with our magic) but is wrong gets an error REPLY
 * with its request id; bytes that are not ours at all close the pipe. The request message is
 * reused for its reply: it already holds the routing header that raw rep0 sends back by. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/device.h"
#include "runtime/alloc.h"
#include "runtime/loop.h"
#include "server/render.h"
#include "server/server_priv.h"
#include "server/server_shards.h"
#include "server/server_transport.h"

/* ---- replies ---- */

void srv_reply_status(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id, int status) {
  uint8_t head[PROTO_REPLY_HEAD_SIZE];
  nng_msg_clear(m);
  if (proto_encode_reply_head(head, request_id, status, 0) != 0 || /* no data: cannot fail */
      nng_msg_append(m, head, sizeof head) != 0) {
    nng_msg_free(m);
    return;
  }
  srv_conn_send(s, c, m);
}

int srv_fill_reply(nng_msg *m, uint64_t request_id, const void *data, size_t len) {
  uint8_t head[PROTO_REPLY_HEAD_SIZE];
  int rc = proto_encode_reply_head(head, request_id, 0, len);
  nng_msg_clear(m);
  if (rc == 0 && (nng_msg_append(m, head, sizeof head) != 0 || nng_msg_append(m, data, len) != 0))
    rc = ACCEL_ENOMEM;
  return rc;
}

void srv_send_filled(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id, int rc) {
  if (rc == 0)
    srv_conn_send(s, c, m);
  else
    srv_reply_status(s, c, m, request_id, rc);
}

/* A reply with data (text, JSON): `text` is taken. */
void srv_reply_text(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id, char *text) {
  int rc = text == NULL ? ACCEL_ENOMEM : srv_fill_reply(m, request_id, text, strlen(text));
  srv_send_filled(s, c, m, request_id, rc);
  rt_free(text);
}

static void reply_frame(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id, proto_out *o,
                        int rc) {
  nng_msg_clear(m);
  if (rc == 0 && nng_msg_append(m, o->data, o->len) == 0)
    srv_conn_send(s, c, m);
  else
    srv_reply_status(s, c, m, request_id, rc ? rc : ACCEL_ENOMEM);
  proto_out_free(o);
}

/* ---- bad frames ---- */

static uint64_t le_at(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* A peer is refused, not disconnected: nng 1.5.2's raw rep0 can deadlock its pipe reaper
 * (and so nng_close, and our shutdown) when nng_pipe_close() hits a pipe whose messages are
 * still being delivered (docs/PROTOCOL.md, "Closing"). Its later frames are dropped unread. */
static void refuse(srv_conn *c, const char *why) {
  if (!c->refused)
    accel_log(ACCEL_LOG_INFO, "server", "pipe %u: %s: refused", c->pipe, why);
  c->refused = true;
}

/* `rc` is why the header did not decode. With our magic the peer speaks accel and hears why
 * (and a peer of another protocol version is refused from then on); otherwise it is not a
 * client of ours: no answer, and nothing more is read from it. */
static void bad_header(srv_server *s, srv_conn *c, nng_msg *m, int rc) {
  const uint8_t *p = nng_msg_body(m);
  size_t len = nng_msg_len(m);
  s->frames_bad++;
  if (len < PROTO_HEADER_SIZE || le_at(p, 4) != PROTO_MAGIC) {
    refuse(c, "not an accel frame");
    nng_msg_free(m);
    return;
  }
  if (le_at(p + 4, 2) != PROTO_VERSION)
    refuse(c, "another protocol version");
  srv_reply_status(s, c, m, le_at(p + 16, 8), rc);
}

/* ---- HELLO -> WELCOME ---- */

/* Device `index` as the C API describes it (the world's node index + 1). */
static void device_info(const dev_world *world, int index, struct accel_device_info *d) {
  dev_node_describe(&world->nodes[index + 1], d);
}

static void fill_welcome(srv_server *s, proto_welcome *w) {
  memset(w, 0, sizeof *w);
  w->version = PROTO_VERSION;
  w->limits = s->limits;
  for (int i = 0; i + 1 < s->world->nnodes && w->device_count < PROTO_MAX_DEVICES; i++)
    device_info(s->world, i, &w->devices[w->device_count++]);
}

/* The client's name as a log may show it: printable ASCII, the rest as '?'. */
static void printable(char *dst, const char *src, size_t n) {
  size_t i = 0;
  for (; i + 1 < n && src[i]; i++)
    dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? src[i] : '?';
  dst[i] = '\0';
}

static void log_hello(srv_conn *c, const proto_hello *h) {
  char *name = c->name;
  printable(name, h->name, sizeof c->name);
  uint64_t uid = c->peer_uid == UINT32_MAX ? UINT64_MAX : c->peer_uid;
  if (uid != UINT64_MAX)
    accel_log(ACCEL_LOG_INFO, "server", "pipe %u: hello from '%s' (uid %llu)", c->pipe, name,
              (unsigned long long)uid);
  else
    accel_log(ACCEL_LOG_INFO, "server", "pipe %u: hello from '%s'", c->pipe, name);
}

/* The region of shared rings a HELLO offered (its descriptor came with it): whether the
 * connection's frames go through it from the WELCOME on. Declined where the transport has
 * none (its I/O is not polled by a thread of its own) or the region is not one. */
static bool take_rings(srv_server *s, srv_conn *c, int fd, bool first) {
  bool on = fd >= 0 && first && c->tp->use_rings != NULL && c->tp->use_rings(s, c, fd);
  if (fd >= 0)
    close(fd);
  return on;
}

static void on_hello(srv_server *s, srv_conn *c, nng_msg *m, const proto_header *h) {
  proto_hello hello;
  int rc = proto_decode_hello((const uint8_t *)nng_msg_body(m) + PROTO_HEADER_SIZE, h->body_len,
                              &hello);
  /* A region offered comes with the HELLO: taken whatever comes of it (it is this frame's). */
  int rings_fd = rc == 0 && (hello.capabilities & PROTO_CAP_RINGS) && c->tp->take_fd != NULL
                     ? c->tp->take_fd(c)
                     : -1;
  bool first = !c->session_live;
  if (rc == 0 && hello.version != PROTO_VERSION) {
    rc = ACCEL_EPROTO; /* a client of another version: told, then refused */
    refuse(c, "another protocol version");
  }
  if (rc == 0 && s->draining)
    rc = ACCEL_ECLOSED;
  if (rc == 0 && !c->session_live) {
    rc = srv_session_start(s, c);
    if (rc == 0)
      log_hello(c, &hello);
  }
  bool rings = take_rings(s, c, rc == 0 ? rings_fd : -1, first);
  if (rings_fd >= 0 && rc != 0)
    close(rings_fd);
  if (rc != 0) {
    s->frames_bad += rc == ACCEL_EPROTO;
    srv_reply_status(s, c, m, h->request_id, rc);
    return;
  }
  c->rings |= rings; /* a second HELLO leaves them as they are */
  proto_welcome w;
  proto_out o;
  fill_welcome(s, &w);
  w.capabilities = (hello.capabilities & (PROTO_CAP_BATCH | PROTO_CAP_ACK)) |
                   (c->rings ? PROTO_CAP_RINGS : 0);
  proto_out_init(&o);
  rc = proto_encode_welcome(&o, h->request_id, &w);
  reply_frame(s, c, m, h->request_id, &o, rc);
  c->caps = w.capabilities; /* from the next reply on: the WELCOME itself goes alone */
}

/* ---- CONTROL ---- */

srv_status_counts srv_counts(srv_server *s) {
  return (srv_status_counts){
      .connections = s->nconns,
      .sessions = s->sessions,
      .ops_completed = s->ops_completed,
      .ops_failed = s->ops_failed,
      .ops_in_flight = s->ops_in_flight,
      .replies_early = atomic_load(&s->replies_early),
      .light_clients = s->light_conns,
      .frames_bad = s->frames_bad,
      .uptime_ms = srv_now_ms(s) - s->started_ms,
      .draining = s->draining,
  };
}

/* A request answered later, off the op path (an injected fault, a trace's render): the
 * connection (counted among its ops) and the server are held, and a drain waits for it. */
void srv_job_begin(srv_server *s, srv_conn *c) {
  s->refs++;
  s->jobs++;
  srv_conn_ops_add(s, c, +1, true);
}

void srv_job_end(srv_server *s, srv_conn *c) {
  srv_conn_ops_add(s, c, -1, true);
  s->jobs--;
  c->tp->flow(s, c); /* counted among its ops: its reading may resume */
  srv_conn_maybe_free(s, c);
  srv_release(s);
}

typedef struct fault_req {
  accel_task task; /* first: the reply is made on the server's own loop */
  srv_server *s;
  srv_conn *c; /* counted in c->ops meanwhile */
  nng_msg *m;
  uint64_t request_id;
  accel_runtime *rt;
  uint32_t loop; /* the server's */
  int status;
} fault_req;

static void fault_reply(accel_task *task) {
  fault_req *r = (fault_req *)task;
  if (r->s->stopped)
    nng_msg_free(r->m);
  else
    srv_reply_status(r->s, r->c, r->m, r->request_id, r->status);
  srv_job_end(r->s, r->c);
  rt_free(r);
}

/* On loop 0, where `then` callbacks run: to the server's loop (a shard's may be another). */
static void fault_done(accel_future *f, int status, void *arg) {
  fault_req *r = arg;
  r->status = status;
  accel_post_to(r->rt, r->loop, &r->task, fault_reply);
}

/* Asks the device's actor to fault (it answers, then fails and is restarted); the reply
 * follows its answer. */
static void inject_fault(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id,
                         uint64_t device) {
  dev_world *w = s->world;
  int rc = !w->fault_injection                   ? ACCEL_EPERM
           : device >= (uint64_t)(w->nnodes - 1) ? ACCEL_EINVAL
                                                 : 0;
  fault_req *r = rc == 0 ? rt_malloc(sizeof *r) : NULL;
  if (rc == 0 && r == NULL)
    rc = ACCEL_ENOMEM;
  accel_future *f = NULL;
  if (rc == 0) {
    accel_msg q = {.type = DEV_MSG_INJECT_FAULT};
    rc = accel_ask(s->rt, w->nodes[device + 1].actor, &q, &f);
  }
  if (rc != 0) {
    rt_free(r);
    srv_reply_status(s, c, m, request_id, rc);
    return;
  }
  accel_log(ACCEL_LOG_WARN, "server", "injecting a fault into device %llu",
            (unsigned long long)device);
  *r = (fault_req){
      .s = s, .c = c, .m = m, .request_id = request_id, .rt = s->rt, .loop = rt_loop_index(s->rt)};
  srv_job_begin(s, c);
  accel_future_then(f, fault_done, r);
  accel_future_release(f);
}

/* A reply whose data is a fixed binary record (DEVICE_INFO, TRANSFER_STATS). */
static void reply_record(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id, proto_out *o,
                         int rc) {
  if (rc == 0)
    rc = srv_fill_reply(m, request_id, o->data, o->len);
  proto_out_free(o);
  srv_send_filled(s, c, m, request_id, rc);
}

static void on_device_info(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id,
                           uint64_t index) {
  if (index >= (uint64_t)(s->world->nnodes - 1)) {
    srv_reply_status(s, c, m, request_id, ACCEL_EINVAL);
    return;
  }
  struct accel_device_info d;
  proto_out o;
  device_info(s->world, (int)index, &d);
  proto_out_init(&o);
  reply_record(s, c, m, request_id, &o, proto_encode_device(&o, &d));
}

/* The bytes this connection's session moved: one client never sees another's traffic. A
 * connection without a session (no HELLO) has none to report. */
static void on_transfer_stats(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id) {
  if (!c->session_live || c->sargs.acct == NULL) {
    srv_reply_status(s, c, m, request_id, ACCEL_EPROTO);
    return;
  }
  accel_transfer_stats t = c->sargs.acct->moved;
  proto_out o;
  proto_out_init(&o);
  reply_record(s, c, m, request_id, &o, proto_encode_transfer_stats(&o, &t));
}

static void on_control(srv_server *s, srv_conn *c, nng_msg *m, const proto_header *h) {
  proto_control_req req;
  int rc = proto_decode_control((const uint8_t *)nng_msg_body(m) + PROTO_HEADER_SIZE, h->body_len,
                                &req);
  if (rc != 0) {
    s->frames_bad++;
    srv_reply_status(s, c, m, h->request_id, rc);
    return;
  }
  switch (req.command) {
  case PROTO_CTL_PING:
    srv_reply_status(s, c, m, h->request_id, 0);
    break;
  case PROTO_CTL_STATUS: /* arg 1: text for people, else JSON */
  case PROTO_CTL_DEVICES:
  case PROTO_CTL_TREE:    /* arg 1: JSON, else text */
  case PROTO_CTL_CLIENTS: /* arg 1: text, else JSON */
    srv_report(s, c, m, h->request_id, req.command, req.arg);
    break;
  case PROTO_CTL_INJECT_FAULT:
    inject_fault(s, c, m, h->request_id, req.arg);
    break;
  case PROTO_CTL_DEVICE_INFO:
    on_device_info(s, c, m, h->request_id, req.arg);
    break;
  case PROTO_CTL_TRANSFER_STATS:
    on_transfer_stats(s, c, m, h->request_id);
    break;
  case PROTO_CTL_SHM_ATTACH:
    srv_reply_status(s, c, m, h->request_id, srv_shm_attach(s, c, req.arg));
    break;
  case PROTO_CTL_SHM_DETACH:
    srv_reply_status(s, c, m, h->request_id, srv_shm_detach(s, c, req.arg));
    break;
  case PROTO_CTL_TRACE_START: /* arg: the most events kept (0: the default) */
  case PROTO_CTL_TRACE_STOP:
    srv_trace_control(s, c, m, h->request_id, req.command, req.arg);
    break;
  case PROTO_CTL_ACK: /* never answered: an answer would need acknowledging too */
    srv_conn_ack(s, c, (uint32_t)req.arg);
    nng_msg_free(m);
    break;
  default: /* a command of a later protocol version */
    srv_reply_status(s, c, m, h->request_id, ACCEL_ENOTSUP);
    break;
  }
}

/* ---- dispatch ---- */

static void one_frame(srv_server *s, srv_conn *c, nng_msg *m) {
  proto_header h;
  int rc = proto_decode_header(nng_msg_body(m), nng_msg_len(m), s->limits.max_message, &h);
  if (rc != 0) {
    bad_header(s, c, m, rc);
    return;
  }
  if (srv_out_reserve(s, c) != 0) {
    srv_reply_status(s, c, m, h.request_id, ACCEL_ENOMEM); /* into the room kept for it */
    return;
  }
  switch (h.type) {
  case PROTO_HELLO:
    on_hello(s, c, m, &h);
    break;
  case PROTO_OP:
    srv_op_frame(s, c, m, h.request_id);
    break;
  case PROTO_CONTROL:
    on_control(s, c, m, &h);
    break;
  default: /* WELCOME, REPLY: the daemon's own frames */
    s->frames_bad++;
    srv_reply_status(s, c, m, h.request_id, ACCEL_EPROTO);
    break;
  }
}

/* A client with PROTO_CAP_BATCH may send several frames in one message: each becomes a
 * message of its own (with the same routing header), as if sent alone. A large last frame
 * keeps the message itself (its front trimmed, nothing copied): a client puts a large frame
 * (a write's chunk) last, so its bytes are not copied here. A small one is copied like the
 * others, so that no small reply holds a large message (its reply is made in it). Bytes
 * after the last whole frame are one more (bad) frame. */
static void split_frames(srv_server *s, srv_conn *c, nng_msg *m) {
  size_t at = 0, len = nng_msg_len(m);
  while (at < len && !c->refused) {
    const uint8_t *p = (const uint8_t *)nng_msg_body(m) + at;
    size_t n = proto_next_frame(p, len - at);
    n = n ? n : len - at;
    if (at + n == len && (at == 0 || n > SRV_BATCH_ADOPT_MAX)) {
      nng_msg_trim(m, at); /* cannot fail: at < len */
      one_frame(s, c, m);
      return;
    }
    nng_msg *f;
    if (nng_msg_alloc(&f, n) != 0)
      break; /* out of memory: the rest is lost, as a dropped message would be */
    memcpy(nng_msg_body(f), p, n);
    if (nng_msg_header_append(f, nng_msg_header(m), nng_msg_header_len(m)) != 0) {
      nng_msg_free(f);
      break;
    }
    one_frame(s, c, f);
    at += n;
  }
  nng_msg_free(m);
}

void srv_frame(srv_server *s, nng_msg *m) {
  srv_conn *c = srv_conn_for(s, nng_msg_get_pipe(m));
  if (c == NULL) { /* pipe gone (or no memory for a record) */
    nng_msg_free(m);
    return;
  }
  srv_frame_on(s, c, m);
}

void srv_frame_on(srv_server *s, srv_conn *c, nng_msg *m) {
  if (c->refused) {
    nng_msg_free(m);
    return;
  }
  size_t first = proto_next_frame(nng_msg_body(m), nng_msg_len(m));
  if ((c->caps & PROTO_CAP_BATCH) && first > 0 && first < nng_msg_len(m))
    split_frames(s, c, m);
  else
    one_frame(s, c, m);
}
