/* A connection's output. nng's raw rep0 keeps at most 64 messages queued per pipe and drops
 * the rest without a word, and its pipes send one message per write, so a burst of small
 * replies to one client loses some (measured: most of 5000 sent back to back). Two remedies,
 * each taken only by a client that says it can (HELLO capabilities, echoed in WELCOME):
 *   PROTO_CAP_BATCH  the replies made for a connection during one loop iteration leave as
 *                    one message (frames back to back), flushed from a uv_prepare handle:
 *                    after the actors' turn and the poll phase, before the loop may block,
 *                    so no reply waits for more work to arrive;
 *   PROTO_CAP_ACK    the client reports how many messages it has received; at most
 *                    PROTO_ACK_WINDOW (< 64) are then unacknowledged, the rest wait here.
 * Clients without them (accelctl, one request at a time) get one message per reply. */
#include <stdlib.h>

#include "actors/server_priv.h"

#define SRV_BATCH_COPY_MAX 4096u /* a larger reply (a read's data) travels on its own */

static int outq_push(srv_server *s, srv_conn *c, nng_msg *m) {
  if (c->oq_len == c->oq_cap) {
    uint32_t cap = c->oq_cap ? c->oq_cap * 2 : 16;
    nng_msg **items = malloc(cap * sizeof *items);
    if (items == NULL)
      return ACCEL_ENOMEM;
    for (uint32_t i = 0; i < c->oq_len; i++)
      items[i] = c->outq[(c->oq_head + i) % c->oq_cap];
    free(c->outq);
    c->outq = items;
    c->oq_cap = cap;
    c->oq_head = 0;
  }
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
  if (outq_push(s, c, c->batch) != 0)
    nng_msg_free(c->batch); /* out of memory: those replies are lost, as nng would */
  c->batch = NULL;
}

/* Appends the reply's frame to the batch (made with the reply's routing header). */
static int batch_add(srv_server *s, srv_conn *c, nng_msg *m) {
  if (c->batch && nng_msg_len(c->batch) + nng_msg_len(m) > s->limits.max_message)
    seal_batch(s, c);
  if (c->batch == NULL) {
    if (nng_msg_alloc(&c->batch, 0) != 0)
      return ACCEL_ENOMEM;
    if (nng_msg_header_append(c->batch, nng_msg_header(m), nng_msg_header_len(m)) != 0) {
      nng_msg_free(c->batch);
      c->batch = NULL;
      return ACCEL_ENOMEM;
    }
  }
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
}

void srv_conn_send(srv_server *s, srv_conn *c, nng_msg *m) {
  if (s->stopped || c->dead) {
    nng_msg_free(m);
    return;
  }
  bool batched = (c->caps & PROTO_CAP_BATCH) && nng_msg_len(m) <= SRV_BATCH_COPY_MAX &&
                 batch_add(s, c, m) == 0;
  if (batched) {
    nng_msg_free(m);
  } else {
    seal_batch(s, c); /* keep the order replies were made in */
    if (outq_push(s, c, m) != 0) {
      accel_log(ACCEL_LOG_ERROR, "server", "out of memory queueing a reply: dropped");
      nng_msg_free(m);
    }
  }
  mark_dirty(s, c);
}

/* Hands queued messages to nng while the window allows. */
static void flush_conn(srv_server *s, srv_conn *c) {
  seal_batch(s, c);
  bool windowed = (c->caps & PROTO_CAP_ACK) != 0;
  while (c->oq_len > 0 && (!windowed || c->sent - c->acked < PROTO_ACK_WINDOW)) {
    srv_send(s, outq_pop(s, c));
    c->sent++;
  }
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
 * count beyond what was sent is a lie and is ignored. */
void srv_conn_ack(srv_server *s, srv_conn *c, uint32_t received) {
  if (received - c->acked > c->sent - c->acked)
    return;
  c->acked = received;
  if (c->oq_len > 0)
    mark_dirty(s, c);
}

void srv_out_free(srv_server *s, srv_conn *c) {
  if (c->batch)
    nng_msg_free(c->batch);
  c->batch = NULL;
  while (c->oq_len > 0)
    nng_msg_free(outq_pop(s, c));
  free(c->outq);
  c->outq = NULL;
  c->oq_cap = c->oq_head = 0;
}

/* The actor ended: nothing will be flushed any more. */
void srv_out_forget_dirty(srv_server *s) {
  for (srv_conn *c = s->dirty; c; c = c->next_dirty)
    c->dirty = false;
  s->dirty = NULL;
}
