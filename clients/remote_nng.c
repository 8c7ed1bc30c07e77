/* The nng link of the remote transport (clients/remote.h): tcp:// and tls+tcp://.
 *
 * A raw req0 socket: nng adds no retries and no one-request-at-a-time rule; the 32-bit nng
 * request id in the message header is ours (the frame's id with the high bit set) and the
 * daemon's raw rep socket echoes it back. One nng aio receives replies; its callback (an nng
 * thread) hands them to remote.c. nng's raw rep0 drops replies past 64 queued per pipe, so
 * this link asks for PROTO_CAP_ACK and acknowledges every PROTO_ACK_EVERY messages.
 *
 * nng 1.5.2 (Debian 12) can hang in nng_close() when replies were in flight: closing runs on
 * a thread of its own and is abandoned after NNG_CLOSE_WAIT_MS (its memory leaks, no callback
 * of ours runs again), so accel_close() never hangs. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdlib.h>
#include <time.h>

#include "clients/remote.h"
#include "clients/remote_dial.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"

#define NNG_CLOSE_WAIT_MS 2000

typedef struct nng_link {
  accel_ctx *ctx;
  nng_socket sock;
  nng_aio *rx;
  uint32_t received, acked; /* messages received; the count last acknowledged (receiver) */
  atomic_bool closing;      /* set before the context goes: callbacks do nothing */
  pthread_mutex_t mu;       /* guards refs and closed (the closer thread) */
  pthread_cond_t cv;
  int refs;
  bool closed;
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

static int nng_link_send(remote *r, const uint8_t *bytes, size_t len, uint64_t id) {
  nng_link *l = link_of(r);
  nng_msg *msg;
  if (nng_msg_alloc(&msg, 0) != 0)
    return ACCEL_ENOMEM;
  if (nng_msg_header_append_u32(msg, (uint32_t)id | 0x80000000u) != 0 ||
      nng_msg_append(msg, bytes, len) != 0) {
    nng_msg_free(msg);
    return ACCEL_ENOMEM;
  }
  if (nng_sendmsg(l->sock, msg, 0) != 0) {
    nng_msg_free(msg);
    return ACCEL_ECLOSED;
  }
  return 0;
}

/* The daemon keeps at most PROTO_ACK_WINDOW messages unacknowledged (beyond that nng would
 * drop them): tell it every PROTO_ACK_EVERY messages how many have arrived. */
static void acknowledge(remote *r, nng_link *l) {
  if (++l->received - l->acked < PROTO_ACK_EVERY)
    return;
  proto_out o;
  proto_out_init(&o);
  proto_control_req c = {PROTO_CTL_ACK, l->received};
  if (proto_encode_control(&o, 0, &c) == 0 && nng_link_send(r, o.data, o.len, 0) == 0)
    l->acked = l->received;
  proto_out_free(&o);
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
    acknowledge(remote_of(l->ctx), l);
  }
  nng_recv_aio(l->sock, l->rx);
}

static void on_pipe_gone(nng_pipe pipe, nng_pipe_ev ev, void *arg) {
  nng_link *l = arg;
  if (!atomic_load(&l->closing))
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
  pthread_mutex_init(&l->mu, NULL);
  r->nng = l;
  nng_user_add();
  if (nng_req0_open_raw(&l->sock) != 0)
    return ACCEL_ESYS;
  /* Without the notification a daemon's death would leave every request waiting. */
  if (nng_pipe_notify(l->sock, NNG_PIPE_EV_REM_POST, on_pipe_gone, l) != 0)
    return ACCEL_ESYS;
  if (nng_aio_alloc(&l->rx, on_receive, l) != 0)
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
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
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
  if (l->rx)
    nng_aio_stop(l->rx); /* first: on_receive would re-arm it on a closing socket */
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
    .close = nng_link_close,
    .caps = PROTO_CAP_BATCH | PROTO_CAP_ACK,
};
