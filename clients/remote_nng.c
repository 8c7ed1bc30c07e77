/* The nng link of the remote transport (clients/remote.h): tcp:// and tls+tcp://.
 *
 * A raw req0 socket: nng adds no retries and no one-request-at-a-time rule; the 32-bit nng
 * request id in the message header is ours (the frame's id with the high bit set) and the
 * daemon's raw rep socket echoes it back. One nng aio receives replies; its callback (an nng
 * thread) hands them to remote.c. nng's raw rep0 drops replies past 64 queued per pipe, so
 * this link asks for PROTO_CAP_ACK and acknowledges every PROTO_ACK_EVERY messages.
 *
 * Sending. nng costs a few thread hand-offs per message (a message crosses the caller's, the
 * socket's and the pipe's tasks), which bounded pipelined ops to one message each: about
 * 45 kops/s where a raw TCP socket moves 500 k requests/s. So frames are coalesced
 * (PROTO_CAP_BATCH): one nng message is in flight at a time (an aio), and the frames sent
 * meanwhile are appended to the next one, which leaves as soon as the previous is taken. A
 * sender returns once its bytes are copied; it waits only while the next message already
 * holds NNG_BATCH_MAX bytes (or would exceed the daemon's max_message), so what this link
 * holds is bounded. The acknowledgement rides in the next message, or goes alone when nothing
 * else is in flight.
 *
 * nng 1.5.2 (Debian 12) can hang in nng_close() when replies were in flight: closing runs on
 * a thread of its own and is abandoned after NNG_CLOSE_WAIT_MS (its memory leaks, no callback
 * of ours runs again), so accel_close() never hangs. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clients/remote.h"
#include "clients/remote_dial.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"

#define NNG_CLOSE_WAIT_MS 2000
#define NNG_BATCH_MAX (4u << 20) /* bytes of small frames gathered behind the one in flight */
#define NNG_LARGE (64u << 10)    /* a frame this large ends its message (sealed) */

typedef struct nng_link {
  accel_ctx *ctx;
  nng_socket sock;
  nng_aio *rx, *tx;
  uint32_t received;   /* messages received (under smu) */
  atomic_bool closing; /* set before the context goes: callbacks do nothing */
  pthread_mutex_t mu;  /* guards refs and closed (the closer thread) */
  pthread_cond_t cv;
  int refs;
  bool closed;
  /* sending, under smu */
  pthread_mutex_t smu;
  pthread_cond_t room; /* next was taken, or sending ended */
  nng_msg *next;       /* frames waiting for the message in flight to leave */
  bool busy;           /* tx holds a message */
  bool ended;          /* closing or a send failed: nothing is sent any more */
  bool sealed;         /* next ends with a large frame: nothing more joins it */
  bool ack_owed;       /* ack_count goes in the next message */
  uint32_t ack_count, acked;
} nng_link;

static nng_link *link_of(remote *r) {
  return r->nng;
}

/* nng starts threads of its own with the first socket, which outlive every context (and
 * show as leaks). nng 1.5 cannot be used again after nng_fini(), so it is finalised only when
 * the library is unloaded (at process exit), if this library used it and no context is open. */
static pthread_mutex_t nng_users_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned nng_users;
static bool nng_used_ever, nng_abandoned;

static void nng_user_add(void) {
  pthread_mutex_lock(&nng_users_mu);
  nng_users++;
  nng_used_ever = true;
  pthread_mutex_unlock(&nng_users_mu);
}

static void nng_user_remove(bool abandoned) {
  pthread_mutex_lock(&nng_users_mu);
  nng_users--;
  nng_abandoned |= abandoned;
  pthread_mutex_unlock(&nng_users_mu);
}

__attribute__((destructor)) static void nng_finalise_at_exit(void) {
  pthread_mutex_lock(&nng_users_mu);
  bool fini = nng_used_ever && nng_users == 0 && !nng_abandoned;
  pthread_mutex_unlock(&nng_users_mu);
  if (fini)
    nng_fini();
}

/* ---- sending ---- */

/* A message with nng's request header (`id` with the high bit set), or NULL. */
static nng_msg *msg_new(uint64_t id, size_t reserve) {
  nng_msg *m;
  if (nng_msg_alloc(&m, 0) != 0)
    return NULL;
  if (nng_msg_header_append_u32(m, (uint32_t)id | 0x80000000u) != 0 ||
      (reserve && nng_msg_reserve(m, reserve) != 0)) {
    nng_msg_free(m);
    return NULL;
  }
  return m;
}

/* Appends the owed acknowledgement to *m (made if NULL). Under smu. */
static void add_ack(nng_link *l, nng_msg **m) {
  proto_out o;
  proto_out_init(&o);
  proto_control_req c = {PROTO_CTL_ACK, l->ack_count};
  if (proto_encode_control(&o, 0, &c) == 0 && (*m != NULL || (*m = msg_new(0, 0)) != NULL) &&
      nng_msg_append(*m, o.data, o.len) == 0) {
    l->ack_owed = false;
    l->acked = l->ack_count;
  } /* else still owed: the next message carries it */
  proto_out_free(&o);
}

/* The link is busy with m until on_sent: only the thread that set busy hands it to nng,
 * outside smu (a callback that nng ran at once would otherwise wait for smu). */
static nng_msg *take_send(nng_link *l, nng_msg *m) {
  l->busy = m != NULL;
  return m;
}

static void launch(nng_link *l, nng_msg *m) {
  if (m == NULL)
    return;
  nng_aio_set_msg(l->tx, m);
  nng_send_aio(l->sock, l->tx);
}

/* The message in flight was taken (an nng thread): the next one leaves. A failed send loses
 * its frames, whose requests would then never be answered: the connection counts as lost. */
static void on_sent(void *arg) {
  nng_link *l = arg;
  int rv = nng_aio_result(l->tx);
  if (rv != 0)
    nng_msg_free(nng_aio_get_msg(l->tx)); /* on failure the message is still ours */
  nng_msg *m = NULL;
  pthread_mutex_lock(&l->smu);
  bool lost = rv != 0 && !l->ended && !atomic_load(&l->closing);
  if (rv != 0 || atomic_load(&l->closing)) {
    l->ended = true;
  } else {
    m = l->next;
    l->next = NULL;
    if (l->ack_owed && !l->sealed) /* else it goes alone after this one */
      add_ack(l, &m);
    l->sealed = false;
  }
  m = take_send(l, m);
  pthread_cond_broadcast(&l->room);
  pthread_mutex_unlock(&l->smu);
  launch(l, m);
  if (lost) {
    accel_log(ACCEL_LOG_WARN, "libaccel", "nng send: %s: connection lost", nng_strerror(rv));
    remote_on_lost(l->ctx);
  }
}

/* Room for len more bytes in l->next, within NNG_BATCH_MAX and the daemon's limit (one frame
 * alone always fits: remote.c never sends a frame over max_message). Under smu. */
static bool fits(nng_link *l, remote *r, size_t len) {
  if (l->next == NULL)
    return true;
  if (l->sealed)
    return false;
  size_t have = nng_msg_len(l->next), cap = atomic_load(&r->max_body);
  cap = cap < NNG_BATCH_MAX ? cap : NNG_BATCH_MAX;
  return have + len <= cap;
}

/* Appends head and tail to m: all or nothing. */
static int append_parts(nng_msg *m, const uint8_t *head, size_t head_len, const uint8_t *tail,
                        size_t tail_len) {
  if (nng_msg_append(m, head, head_len) != 0)
    return ACCEL_ENOMEM;
  if (tail_len > 0 && nng_msg_append(m, tail, tail_len) != 0) {
    nng_msg_chop(m, head_len); /* cannot fail: head_len bytes were just appended */
    return ACCEL_ENOMEM;
  }
  return 0;
}

static int nng_link_send_gather(remote *r, const uint8_t *head, size_t head_len,
                                const uint8_t *tail, size_t tail_len, uint64_t id) {
  nng_link *l = link_of(r);
  size_t len = head_len + tail_len;
  nng_msg *now = NULL;
  int rc = 0;
  pthread_mutex_lock(&l->smu);
  while (!l->ended && l->busy && !fits(l, r, len))
    pthread_cond_wait(&l->room, &l->smu);
  if (l->ended) {
    rc = ACCEL_ECLOSED;
  } else if (!l->busy) { /* nothing in flight: it leaves at once (after an ack owed) */
    nng_msg *m = msg_new(id, len);
    if (m != NULL && l->ack_owed)
      add_ack(l, &m);
    if (m == NULL || append_parts(m, head, head_len, tail, tail_len) != 0) {
      if (m)
        nng_msg_free(m);
      rc = ACCEL_ENOMEM;
    } else {
      now = take_send(l, m);
    }
  } else {
    if (l->next == NULL)
      l->next = msg_new(id, len < 65536 ? 65536 : len);
    if (l->next == NULL || append_parts(l->next, head, head_len, tail, tail_len) != 0)
      rc = ACCEL_ENOMEM; /* the message is left as it was */
    else
      l->sealed = len >= NNG_LARGE; /* the daemon takes the last frame without a copy */
  }
  pthread_mutex_unlock(&l->smu);
  launch(l, now);
  return rc;
}

static int nng_link_send(remote *r, const uint8_t *bytes, size_t len, uint64_t id) {
  return nng_link_send_gather(r, bytes, len, NULL, 0, id);
}

/* The daemon keeps at most PROTO_ACK_WINDOW messages unacknowledged (beyond that nng would
 * drop them): tell it every PROTO_ACK_EVERY messages how many have arrived. Never waits (an
 * nng thread): the count rides in the next message, or leaves alone if none is in flight. */
static void acknowledge(nng_link *l) {
  nng_msg *m = NULL;
  pthread_mutex_lock(&l->smu);
  if (++l->received - l->acked >= PROTO_ACK_EVERY && !l->ended) {
    l->ack_owed = true;
    l->ack_count = l->received;
    if (!l->busy) {
      add_ack(l, &m);
      m = take_send(l, m);
    }
  }
  pthread_mutex_unlock(&l->smu);
  launch(l, m);
}

/* Wakes senders waiting for room: nothing will be sent any more. */
static void end_sending(nng_link *l) {
  pthread_mutex_lock(&l->smu);
  l->ended = true;
  pthread_cond_broadcast(&l->room);
  pthread_mutex_unlock(&l->smu);
}

/* ---- receiving (an nng thread) ---- */

static void on_receive(void *arg) {
  nng_link *l = arg;
  if (atomic_load(&l->closing))
    return;
  int rv = nng_aio_result(l->rx);
  if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
    return;
  if (rv == 0) {
    nng_msg *msg = nng_aio_get_msg(l->rx);
    remote_on_message(l->ctx, nng_msg_body(msg), nng_msg_len(msg));
    nng_msg_free(msg);
    acknowledge(l);
  }
  nng_recv_aio(l->sock, l->rx);
}

static void on_pipe_gone(nng_pipe pipe, nng_pipe_ev ev, void *arg) {
  nng_link *l = arg;
  if (atomic_load(&l->closing))
    return;
  end_sending(l); /* a message in flight may never leave now: no sender waits for it */
  remote_on_lost(l->ctx);
}

/* ---- open and close ---- */

static int nng_link_open(accel_ctx *ctx, const char *url) {
  remote *r = remote_of(ctx);
  nng_link *l = rt_calloc(1, sizeof *l);
  if (l == NULL)
    return ACCEL_ENOMEM;
  l->ctx = ctx;
  l->refs = 1;
  if (rt_cond_init_monotonic(&l->cv) != 0) { /* wait_closed's deadline is monotonic */
    rt_free(l);
    return ACCEL_ENOMEM;
  }
  if (rt_cond_init_monotonic(&l->room) != 0) {
    pthread_cond_destroy(&l->cv);
    rt_free(l);
    return ACCEL_ENOMEM;
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_mutex_init(&l->smu, NULL);
  r->nng = l;
  nng_user_add();
  if (nng_req0_open_raw(&l->sock) != 0)
    return ACCEL_ESYS;
  /* Without the notification a daemon's death would leave every request waiting. */
  if (nng_pipe_notify(l->sock, NNG_PIPE_EV_REM_POST, on_pipe_gone, l) != 0)
    return ACCEL_ESYS;
  if (nng_aio_alloc(&l->rx, on_receive, l) != 0 || nng_aio_alloc(&l->tx, on_sent, l) != 0)
    return ACCEL_ENOMEM;
  /* nng refuses messages over 1 MiB by default (closing the connection): a read's reply is
   * as large as the daemon's max_message allows, which it enforces itself. */
  if (nng_socket_set_size(l->sock, NNG_OPT_RECVMAXSZ, 0) != 0)
    return ACCEL_ESYS;
  int rc = client_nng_dial(l->sock, url);
  if (rc != 0)
    return rc;
  nng_recv_aio(l->sock, l->rx);
  return 0;
}

static void link_release(nng_link *l) {
  pthread_mutex_lock(&l->mu);
  bool last = --l->refs == 0;
  pthread_mutex_unlock(&l->mu);
  if (!last)
    return;
  if (l->rx)
    nng_aio_free(l->rx);
  if (l->tx)
    nng_aio_free(l->tx);
  if (l->next)
    nng_msg_free(l->next);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->smu);
  pthread_cond_destroy(&l->room);
  rt_free(l);
}

static void *closer(void *arg) {
  nng_link *l = arg;
  nng_close(l->sock); /* after this no callback of ours runs again */
  pthread_mutex_lock(&l->mu);
  l->closed = true;
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&l->mu);
  link_release(l);
  return NULL;
}

/* Waits for the closer thread up to NNG_CLOSE_WAIT_MS; false if it is still in nng_close. */
static bool wait_closed(nng_link *l) {
  struct timespec until = rt_deadline_after(NNG_CLOSE_WAIT_MS);
  pthread_mutex_lock(&l->mu);
  while (!l->closed && pthread_cond_timedwait(&l->cv, &l->mu, &until) == 0)
    ;
  bool closed = l->closed;
  pthread_mutex_unlock(&l->mu);
  return closed;
}

static void nng_link_close(accel_ctx *ctx) {
  nng_link *l = link_of(remote_of(ctx));
  if (l == NULL)
    return;
  atomic_store(&l->closing, true);
  end_sending(l);
  if (l->rx)
    nng_aio_stop(l->rx); /* first: on_receive would re-arm it on a closing socket */
  if (l->tx)
    nng_aio_stop(l->tx); /* a message in flight is dropped (on_sent frees it) */
  pthread_t t;
  l->refs++; /* the closer's */
  bool closed = true;
  if (pthread_create(&t, NULL, closer, l) == 0) {
    closed = wait_closed(l);
    pthread_detach(t);
  } else {
    l->refs--;
    nng_close(l->sock);
  }
  if (!closed)
    accel_log(ACCEL_LOG_WARN, "libaccel", "nng_close did not return in %d ms: abandoned",
              NNG_CLOSE_WAIT_MS);
  nng_user_remove(!closed);
  link_release(l);
}

const remote_link remote_nng_link = {
    .open = nng_link_open,
    .send = nng_link_send,
    .send_gather = nng_link_send_gather,
    .close = nng_link_close,
    .caps = PROTO_CAP_BATCH | PROTO_CAP_ACK,
    .credit = true,
};
