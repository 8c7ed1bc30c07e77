/* nng and the loop. The socket is rep0 in raw mode: a received message's header holds the
 * routing back to the peer (pipe id, then the peer's request id), and a reply that keeps that
 * header goes back to that request, in whatever order replies are sent. nng's receive and send
 * descriptors (NNG_OPT_RECVFD / NNG_OPT_SENDFD: readable while a message can be received /
 * sent) are watched with uv_poll on the runtime's loop; frames are received and replies sent
 * with NNG_FLAG_NONBLOCK there, so no thread of ours stands between nng and the actors.
 *
 * Pipe removals come from nng's threads (nng_pipe_notify): they are queued under a mutex and
 * the loop is woken with a uv_async, rather than told to the actor, so that a full mailbox can
 * never lose one (a lost removal would leak a session and its buffers). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/local.h"
#include "proto/tcp.h"
#include "runtime/alloc.h"
#include "runtime/loop.h"
#include "server/server_priv.h"

/* ---- receiving ---- */

static void on_recv_ready(uv_poll_t *h, int status, int events) {
  srv_server *s = h->data;
  for (int i = 0; i < SRV_RECV_BATCH && !s->stopped; i++) {
    nng_msg *m;
    int rv = nng_recvmsg(s->sock, &m, NNG_FLAG_NONBLOCK);
    if (rv == NNG_EAGAIN)
      return;
    if (rv != 0) {
      accel_log(ACCEL_LOG_ERROR, "server", "receive: %s", nng_strerror(rv));
      return;
    }
    srv_frame(s, m);
  }
  /* More may wait: the descriptor stays readable and the poll comes back next iteration,
   * after the actors have had their turn. */
}

/* ---- sending ---- */

static int sendq_push(srv_sendq *q, nng_msg *m) {
  if (q->len == q->cap) {
    uint32_t cap = q->cap ? q->cap * 2 : 256;
    nng_msg **items = rt_malloc(cap * sizeof *items);
    if (items == NULL)
      return ACCEL_ENOMEM;
    for (uint32_t i = 0; i < q->len; i++)
      items[i] = q->items[(q->head + i) % q->cap];
    rt_free(q->items);
    q->items = items;
    q->cap = cap;
    q->head = 0;
  }
  q->items[(q->head + q->len) % q->cap] = m;
  q->len++;
  return 0;
}

static nng_msg *sendq_peek(const srv_sendq *q) {
  return q->len ? q->items[q->head] : NULL;
}

static void sendq_pop(srv_sendq *q) {
  q->head = (q->head + 1) % q->cap;
  q->len--;
}

static void send_poll_set(srv_server *s, bool on);

/* Sends queued replies until nng's queue is full again. */
static void drain_sendq(srv_server *s) {
  nng_msg *m;
  while ((m = sendq_peek(&s->sendq)) != NULL) {
    int rv = nng_sendmsg(s->sock, m, NNG_FLAG_NONBLOCK);
    if (rv == NNG_EAGAIN)
      return;
    sendq_pop(&s->sendq);
    if (rv != 0)
      nng_msg_free(m); /* the socket is closing: the reply has nowhere to go */
  }
  send_poll_set(s, false);
}

static void on_send_ready(uv_poll_t *h, int status, int events) {
  drain_sendq(h->data);
}

static void send_poll_set(srv_server *s, bool on) {
  if (on == s->send_polling || !s->send_poll_open)
    return;
  if (on)
    uv_poll_start(&s->send_poll, UV_READABLE, on_send_ready);
  else
    uv_poll_stop(&s->send_poll);
  s->send_polling = on;
}

/* nng owns a message once nng_sendmsg() returns 0; on any other result it is still ours.
 * nng 1.5.2 leaks a message its pipe is handing to the transport as the pipe closes (the
 * pipe's send aio is closed first and refuses it; nothing frees it): a client that hangs up
 * while its replies are on their way can leave one behind, and nothing here can free it. */
void srv_send(srv_server *s, nng_msg *m) {
  if (s->stopped) {
    nng_msg_free(m);
    return;
  }
  if (s->sendq.len == 0) { /* keep order behind queued replies */
    int rv = nng_sendmsg(s->sock, m, NNG_FLAG_NONBLOCK);
    if (rv == 0)
      return;
    if (rv != NNG_EAGAIN) {
      nng_msg_free(m);
      return;
    }
  }
  if (sendq_push(&s->sendq, m) != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "out of memory queueing a reply: dropped");
    nng_msg_free(m);
    return;
  }
  send_poll_set(s, true);
}

/* ---- pipe removals, from nng's threads ---- */

static void on_pipe_removed(nng_pipe np, nng_pipe_ev ev, void *arg) {
  srv_server *s = arg;
  pthread_mutex_lock(&s->gone_mu);
  if (s->ngone == s->gone_cap) {
    uint32_t cap = s->gone_cap ? s->gone_cap * 2 : 64;
    uint32_t *p = rt_realloc(s->gone, cap * sizeof *p);
    if (p != NULL) {
      s->gone = p;
      s->gone_cap = cap;
    }
  }
  if (s->ngone < s->gone_cap) /* else out of memory: the session lives until shutdown */
    s->gone[s->ngone++] = (uint32_t)nng_pipe_id(np);
  pthread_mutex_unlock(&s->gone_mu);
  uv_async_send(&s->gone_async);
}

/* While draining, a new client is turned away before nng adds its pipe (the documented way
 * to reject one: no message of it can be queued yet). */
static void on_pipe_adding(nng_pipe np, nng_pipe_ev ev, void *arg) {
  srv_server *s = arg;
  if (atomic_load(&s->refusing))
    nng_pipe_close(np);
}

static void on_gone(uv_async_t *h) {
  srv_server *s = h->data;
  pthread_mutex_lock(&s->gone_mu);
  uint32_t *ids = s->gone, n = s->ngone;
  s->gone = NULL;
  s->ngone = s->gone_cap = 0;
  pthread_mutex_unlock(&s->gone_mu);
  for (uint32_t i = 0; i < n && !s->stopped; i++)
    srv_conn_gone(s, ids[i]);
  rt_free(ids);
}

/* ---- listening ---- */

/* ipc:// socket files get the configured mode (set before the listener binds, so there is no
 * moment with the wrong one) and group (after: the file exists only then). */
static int ipc_prepare(srv_server *s, nng_listener l, const char *url) {
  if (strncmp(url, "ipc://", 6) != 0 || s->args->ipc_mode < 0)
    return 0;
  int rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, s->args->ipc_mode);
  return rv == 0 ? 0 : ACCEL_EINVAL;
}

static int ipc_chown(srv_server *s, const char *url) {
  if (strncmp(url, "ipc://", 6) != 0 || s->args->ipc_gid < 0)
    return 0;
  if (chown(url + 6, (uid_t)-1, (gid_t)s->args->ipc_gid) != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "chown %s to group %d: %s", url + 6, s->args->ipc_gid,
              strerror(errno));
    return ACCEL_ESYS;
  }
  return 0;
}

static int listen_one(srv_server *s, const char *url) {
  nng_listener l;
  int rv = nng_listener_create(&l, s->sock, url);
  if (rv == 0 && ipc_prepare(s, l, url) != 0)
    rv = NNG_EINVAL;
  if (rv == 0) {
    int rc = srv_nng_listener_setup(l, url, &s->args->sec);
    if (rc != 0) {
      nng_listener_close(l);
      return rc;
    }
  }
  if (rv == 0)
    rv = nng_listener_start(l, 0);
  if (rv != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "cannot listen on %s: %s", url, nng_strerror(rv));
    return rv == NNG_EADDRINUSE ? ACCEL_EBUSY : ACCEL_EINVAL;
  }
  s->listeners[s->nlisteners++] = l;
  accel_log(ACCEL_LOG_INFO, "server", "listening on %s", url);
  return ipc_chown(s, url);
}

/* ---- start and close ---- */

/* The receive limit leaves room for the routing header nng keeps in front of our frame. */
int srv_set_recv_limit(srv_server *s, uint32_t max_message) {
  return nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, (size_t)max_message + 64);
}

static int set_option_failed(const char *opt, int rv) {
  accel_log(ACCEL_LOG_ERROR, "server", "cannot set %s on the socket: %s", opt, nng_strerror(rv));
  return ACCEL_ESYS;
}

/* Deep queues both ways: many requests in flight per client, bursts of replies. Any failure
 * fails the start: without the receive limit a peer could make nng allocate any size before
 * we see a byte, and these options never fail on a healthy socket, so a failure means a
 * broken nng rather than something to serve on. */
static int socket_options(srv_server *s) {
  int rv = nng_socket_set_int(s->sock, NNG_OPT_RECVBUF, 1024);
  if (rv != 0)
    return set_option_failed(NNG_OPT_RECVBUF, rv);
  rv = nng_socket_set_int(s->sock, NNG_OPT_SENDBUF, 1024);
  if (rv != 0)
    return set_option_failed(NNG_OPT_SENDBUF, rv);
  rv = srv_set_recv_limit(s, s->limits.max_message);
  return rv == 0 ? 0 : set_option_failed(NNG_OPT_RECVMAXSZ, rv);
}

static int open_socket(srv_server *s) {
  int rv = nng_rep0_open_raw(&s->sock);
  if (rv != 0)
    return ACCEL_ENOMEM;
  s->sock_open = true;
  int rc = socket_options(s);
  if (rc != 0)
    return rc;
  rv = nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, on_pipe_removed, s);
  if (rv == 0)
    rv = nng_pipe_notify(s->sock, NNG_PIPE_EV_ADD_PRE, on_pipe_adding, s);
  return rv == 0 ? 0 : ACCEL_ENOMEM;
}

static int init_handles(srv_server *s) {
  uv_loop_t *loop = rt_uv_loop(s->rt);
  int rfd, sfd;
  if (nng_socket_get_int(s->sock, NNG_OPT_RECVFD, &rfd) != 0 ||
      nng_socket_get_int(s->sock, NNG_OPT_SENDFD, &sfd) != 0)
    return ACCEL_ENOTSUP;
  if (uv_poll_init(loop, &s->recv_poll, rfd) != 0)
    return ACCEL_ESYS;
  s->recv_poll.data = s;
  s->recv_poll_open = true;
  s->refs++;
  if (uv_poll_init(loop, &s->send_poll, sfd) != 0)
    return ACCEL_ESYS;
  s->send_poll.data = s;
  s->send_poll_open = true;
  s->refs++;
  if (uv_async_init(loop, &s->gone_async, on_gone) != 0)
    return ACCEL_ESYS;
  s->gone_async.data = s;
  s->gone_async_open = true;
  s->refs++;
  if (uv_timer_init(loop, &s->tick) != 0)
    return ACCEL_ESYS;
  s->tick.data = s;
  s->tick_open = true;
  s->refs++;
  if (uv_prepare_init(loop, &s->flush) != 0)
    return ACCEL_ESYS;
  s->flush.data = s;
  s->flush_open = true;
  s->refs++;
  return uv_poll_start(&s->recv_poll, UV_READABLE, on_recv_ready) == 0 ? 0 : ACCEL_ESYS;
}

int srv_io_start(srv_server *s) {
  s->listeners = rt_calloc(s->args->nlisten ? s->args->nlisten : 1, sizeof *s->listeners);
  if (s->listeners == NULL)
    return ACCEL_ENOMEM;
  int rc = open_socket(s);
  if (rc == 0)
    rc = init_handles(s);
  if (rc == 0 && s->shard != 0) /* ready for the connections shard 0 hands it */
    rc = srv_local_start(s);
  /* Only shard 0 listens: the others serve the connections it hands them. */
  for (uint32_t i = 0; rc == 0 && s->shard == 0 && i < s->args->nlisten; i++) {
    const char *url = s->args->listen[i], *path = proto_local_path(url);
    rc = path                 ? srv_local_listen(s, path)
         : proto_tcp_url(url) ? srv_tcp_listen(s, url)
                              : listen_one(s, url);
  }
  return rc;
}

static void on_handle_closed(uv_handle_t *h) {
  srv_release(h->data);
}

static void close_handle(uv_handle_t *h, bool *open) {
  if (!*open)
    return;
  *open = false;
  uv_close(h, on_handle_closed);
}

/* Polls first (nng owns their descriptors and closes them with the socket), then the socket
 * (which runs the last pipe callbacks, so the async handle must still be open), then the
 * rest. Replies still queued are dropped: their clients are being disconnected. */
void srv_io_close(srv_server *s) {
  srv_local_stop_listening(s);
  srv_conns_close_all(s);
  close_handle((uv_handle_t *)&s->flush, &s->flush_open);
  srv_out_forget_dirty(s);
  close_handle((uv_handle_t *)&s->recv_poll, &s->recv_poll_open);
  close_handle((uv_handle_t *)&s->send_poll, &s->send_poll_open);
  if (s->sock_open) {
    s->sock_open = false;
    nng_close(s->sock);
  }
  for (nng_msg *m; (m = sendq_peek(&s->sendq)) != NULL;) {
    sendq_pop(&s->sendq);
    nng_msg_free(m);
  }
  close_handle((uv_handle_t *)&s->gone_async, &s->gone_async_open);
  close_handle((uv_handle_t *)&s->tick, &s->tick_open);
}
