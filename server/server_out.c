/* A connection's output. nng's raw rep0 keeps at most 64 messages queued per pipe and drops
 * the rest without a word, and its pipes send one message per write, so a burst of small
 * replies to one client loses some (measured: most of 5000 sent back to back). Two remedies,
 * each taken only by a client that says it can (HELLO capabilities, echoed in WELCOME):
 *   PROTO_CAP_BATCH  the replies made for a connection during one loop iteration leave as
 *                    one message (frames back to back), flushed from a uv_prepare handle:
 *                    after the actors' turn and the poll phase, before the loop may block,
 *                    so no reply waits for more work to arrive; the reply to a
 *                    connection's only op in flight leaves at once (srv_conn_flush from
 *                    server_ops.c): nothing would join its batch, and a busy iteration
 *                    would make it wait for everything else the loop does;
 *   PROTO_CAP_ACK    the client reports how many messages it has received; at most
 *                    PROTO_ACK_WINDOW (< 64) are then unacknowledged, the rest wait here.
 * Clients without them (accelctl, one request at a time) get one message per reply. */
#include <stdlib.h>

#include "runtime/alloc.h"
#include "runtime/defer.h"
#include "server/server_transport.h"

/* The queue holds at least `need` messages after this (0 or ACCEL_ENOMEM). */
static int outq_grow(srv_conn *c, uint32_t need) {
  if (c->oq_cap >= need)
    return 0;
  uint32_t cap = c->oq_cap ? c->oq_cap * 2 : 16;
  cap = cap < need ? need : cap;
  nng_msg **items = rt_malloc(cap * sizeof *items);
  if (items == NULL)
    return ACCEL_ENOMEM;
  for (uint32_t i = 0; i < c->oq_len; i++)
    items[i] = c->outq[(c->oq_head + i) % c->oq_cap];
  rt_free(c->outq);
  c->outq = items;
  c->oq_cap = cap;
  c->oq_head = 0;
  return 0;
}

/* Room for the reply of a request about to be taken, for every op in flight, and two spare:
 * a reply is made when work completes, when no memory may be left, so the room is taken
 * beforehand. When it cannot be, the room kept by the last success still holds the error
 * reply to this request. */
int srv_out_reserve(srv_server *s, srv_conn *c) {
  return outq_grow(c, c->oq_len + c->ops + 3);
}

static int outq_push(srv_server *s, srv_conn *c, nng_msg *m) {
  int rc = outq_grow(c, c->oq_len + 1);
  if (rc != 0)
    return rc;
  c->outq[(c->oq_head + c->oq_len) % c->oq_cap] = m;
  c->oq_len++;
  s->out_queued++;
  return 0;
}

static nng_msg *outq_pop(srv_server *s, srv_conn *c) {
  nng_msg *m = c->outq[c->oq_head];
  c->oq_head = (c->oq_head + 1) % c->oq_cap;
  c->oq_len--;
  s->out_queued--;
  return m;
}

/* Closes the batch being built: it waits in the queue like any message. */
static void seal_batch(srv_server *s, srv_conn *c) {
  if (c->batch == NULL)
    return;
  if (outq_push(s, c, c->batch) != 0) { /* out of memory: those replies are lost */
    c->out_bytes -= nng_msg_len(c->batch);
    nng_msg_free(c->batch);
  }
  c->batch = NULL;
}

/* Adds the reply's frame to the batch: a small first reply of a batch becomes it (its routing
 * header is the batch's; nothing copied), later ones (and a first one in a large message) are
 * appended, the room doubling as it
 * grows (nng grows a message only to the size asked, copying it each time). BATCH_TAKEN if m
 * is the batch now, 0 if it was copied (the caller frees it), or ACCEL_ENOMEM. */
#define BATCH_TAKEN 1
static int batch_add(srv_server *s, srv_conn *c, nng_msg *m) {
  if (c->batch && nng_msg_len(c->batch) + nng_msg_len(m) > s->limits.max_message)
    seal_batch(s, c);
  if (c->batch == NULL && nng_msg_capacity(m) <= SRV_BATCH_ADOPT_MAX) {
    c->batch = m; /* a small one: a reply made in a large request would hold all of it */
    return BATCH_TAKEN;
  }
  if (c->batch == NULL) {
    if (nng_msg_alloc(&c->batch, 0) != 0)
      return ACCEL_ENOMEM;
    if (nng_msg_header_append(c->batch, nng_msg_header(m), nng_msg_header_len(m)) != 0) {
      nng_msg_free(c->batch);
      c->batch = NULL;
      return ACCEL_ENOMEM;
    }
  }
  size_t need = nng_msg_len(c->batch) + nng_msg_len(m), room = nng_msg_capacity(c->batch);
  if (need > room && nng_msg_reserve(c->batch, need > 2 * room ? need : 2 * room) != 0)
    return ACCEL_ENOMEM;
  return nng_msg_append(c->batch, nng_msg_body(m), nng_msg_len(m)) == 0 ? 0 : ACCEL_ENOMEM;
}

static void mark_dirty(srv_server *s, srv_conn *c) {
  if (c->dirty)
    return;
  c->dirty = true;
  c->next_dirty = s->dirty;
  s->dirty = c;
  if (!s->flushing && s->flush_open) {
    uv_prepare_start(&s->flush, srv_out_flush_all);
    s->flushing = true;
  }
  rt_poll_soon(); /* the batch leaves at this iteration's prepare phase, not after more turns */
}

/* An nng pipe cannot be paused alone, and a client that never acknowledges makes even
 * status replies pile up here: past twice its budget it is refused (its frames dropped
 * unread, docs/PROTOCOL.md) until it hangs up. Local connections pause instead. */
static void overflow_check(srv_server *s, srv_conn *c) {
  if (c->tp->pausable || c->refused || c->out_bytes <= 2 * srv_conn_budget(s))
    return;
  c->refused = true;
  accel_log(ACCEL_LOG_WARN, "server", "pipe %u: %llu bytes of replies not taken: refused", c->pipe,
            (unsigned long long)c->out_bytes);
}

void srv_conn_send(srv_server *s, srv_conn *c, nng_msg *m) {
  if (s->stopped || c->dead) {
    nng_msg_free(m);
    return;
  }
  c->out_bytes += nng_msg_len(m); /* until written (local) or acknowledged (nng) */
  overflow_check(s, c);
  int batched = (c->caps & PROTO_CAP_BATCH) && nng_msg_len(m) <= SRV_BATCH_COPY_MAX
                    ? batch_add(s, c, m)
                    : ACCEL_ENOTSUP;
  if (batched == 0) {
    srv_msg_give(s, m);
  } else if (batched != BATCH_TAKEN) {
    seal_batch(s, c); /* keep the order replies were made in */
    if (outq_push(s, c, m) != 0) {
      accel_log(ACCEL_LOG_ERROR, "server", "out of memory queueing a reply: dropped");
      c->out_bytes -= nng_msg_len(m);
      nng_msg_free(m);
    }
  }
  mark_dirty(s, c);
}

/* Hands queued messages to the transport (its send entry keeps the books of what it took)
 * while the window allows. A local connection is a stream that drops nothing: no window (its
 * flow control is in server_local.c). */
static void flush_conn(srv_server *s, srv_conn *c) {
  seal_batch(s, c);
  bool windowed = (c->caps & PROTO_CAP_ACK) != 0 && c->tp->ack_window;
  while (c->oq_len > 0 && (!windowed || c->sent - c->acked < PROTO_ACK_WINDOW))
    c->tp->send(s, c, outq_pop(s, c));
}

void srv_conn_flush(srv_server *s, srv_conn *c) {
  if (!c->dead && !s->stopped)
    flush_conn(s, c);
}

uint64_t srv_conn_budget(const srv_server *s) {
  uint64_t cap = s->limits.max_memory ? s->limits.max_memory : (1ull << 30);
  uint64_t two = 2ull * s->limits.max_message;
  return cap < two ? two : cap;
}

void srv_conn_status(srv_server *s, srv_conn *c, uint64_t request_id, int status) {
  uint8_t head[PROTO_REPLY_HEAD_SIZE];
  nng_msg *m;
  if (proto_encode_reply_head(head, request_id, status, 0) != 0) /* no data: cannot fail */
    return;
  if (nng_msg_alloc(&m, 0) != 0)
    return;
  if (nng_msg_append(m, head, sizeof head) != 0) {
    nng_msg_free(m);
    return;
  }
  srv_conn_send(s, c, m);
}

void srv_out_flush_all(uv_prepare_t *h) {
  srv_server *s = h->data;
  srv_conn *list = s->dirty;
  s->dirty = NULL;
  while (list) {
    srv_conn *c = list;
    list = c->next_dirty;
    c->dirty = false;
    if (c->dead)
      srv_out_free(s, c);
    else
      flush_conn(s, c);
    srv_conn_maybe_free(s, c);
  }
  if (s->dirty == NULL && s->flushing) {
    uv_prepare_stop(&s->flush);
    s->flushing = false;
  }
}

/* `received` counts every message the client has taken from this connection (mod 2^32). A
 * count beyond what was sent is a lie and is ignored, and so is any on a transport without the
 * window. */
void srv_conn_ack(srv_server *s, srv_conn *c, uint32_t received) {
  if (!c->tp->ack_window || received - c->acked > c->sent - c->acked)
    return;
  for (; c->acked != received; c->acked++)
    c->out_bytes -= c->unacked_len[c->acked % PROTO_ACK_WINDOW];
  if (c->oq_len > 0)
    mark_dirty(s, c);
}

void srv_out_free(srv_server *s, srv_conn *c) {
  if (c->batch) {
    c->out_bytes -= nng_msg_len(c->batch);
    nng_msg_free(c->batch);
  }
  c->batch = NULL;
  while (c->oq_len > 0) {
    nng_msg *m = outq_pop(s, c);
    c->out_bytes -= nng_msg_len(m);
    nng_msg_free(m);
  }
  rt_free(c->outq);
  c->outq = NULL;
  c->oq_cap = c->oq_head = 0;
}

/* The actor ended: nothing will be flushed any more. */
void srv_out_forget_dirty(srv_server *s) {
  for (srv_conn *c = s->dirty; c; c = c->next_dirty)
    c->dirty = false;
  s->dirty = NULL;
}
