/* One connection of acceld's HTTP endpoint, from accept to close, in three phases, each
 * under one deadline of the connection's timer:
 *   head:   reading the request head, into a buffer of max_header_bytes allocated with the
 *           connection (nothing else a client sends is kept), until header_timeout_ms after
 *           the connect; whole, it is answered; past the buffer, 431; too late, closed.
 *   write:  the response (one write, then a shutdown of our side), until write_timeout_ms
 *           after the request; too late, the connection is reset (SO_LINGER 0) so the kernel
 *           drops what it still holds of the response at once.
 *   linger: what the client still sends is read and dropped until it hangs up, at most
 *           HTTP_LINGER_MS: closing with unread bytes would reset the connection and could
 *           cut the response short on the client's side. Then, a client that has not yet
 *           acknowledged the whole response (the kernel still holds some: SIOCOUTQ) gets until
 *           the write deadline to take it, and is reset then; one that has is closed.
 * A connection's memory is its struct, its head buffer and its response: bounded by the
 * limits. Loop thread only. */
#include <linux/sockios.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "runtime/alloc.h"
#include "server/http_priv.h"

typedef enum http_phase { PHASE_HEAD, PHASE_WRITE, PHASE_LINGER, PHASE_CLOSED } http_phase;

struct http_conn {
  uv_tcp_t tcp;     /* the handles' data is the connection */
  uv_timer_t timer; /* the phase's deadline */
  uv_write_t wreq;
  uv_shutdown_t sreq;
  srv_http *h;
  http_conn *prev, *next; /* h->conns */
  int open_handles;       /* tcp and timer: freed when both have closed */
  http_phase phase;
  bool head_only;          /* HEAD: no body */
  uint64_t write_deadline; /* uv_now() by which the client must have taken the response */
  http_response res;
  char head[256]; /* the response's status line and headers */
  size_t in_len, scanned;
  size_t in_cap; /* max_header_bytes */
  char in[];
};

http_conn *http_conn_next(const http_conn *c) {
  return c->next;
}

/* ---- closing ---- */

static void on_closed(uv_handle_t *hd) {
  http_conn *c = hd->data;
  if (--c->open_handles > 0)
    return;
  srv_http *h = c->h;
  if (c->res.owned)
    rt_free((void *)c->res.body);
  rt_free(c);
  http_handle_gone(h);
}

/* The descriptor closes now (uv_close), so the cap counts it out now; the memory goes in
 * the close callbacks. */
static void conn_close(http_conn *c, bool reset) {
  if (c->phase == PHASE_CLOSED)
    return;
  c->phase = PHASE_CLOSED;
  srv_http *h = c->h;
  h->nconns--;
  if (c->prev)
    c->prev->next = c->next;
  else
    h->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  uv_os_fd_t fd;
  struct linger off = {.l_onoff = 1, .l_linger = 0};
  if (reset && uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof off);
  uv_close((uv_handle_t *)&c->timer, on_closed);
  uv_close((uv_handle_t *)&c->tcp, on_closed);
}

void http_conn_close(http_conn *c) {
  conn_close(c, false);
}

static void on_deadline(uv_timer_t *t);

static void deadline(http_conn *c, uint64_t ms) {
  if (uv_timer_start(&c->timer, on_deadline, ms, 0) != 0)
    conn_close(c, true);
}

/* Bytes of the response the client has not acknowledged yet (0 if unknown). */
static int unacked(http_conn *c) {
  uv_os_fd_t fd;
  int n = 0;
  if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0 || ioctl(fd, SIOCOUTQ, &n) != 0)
    return 0;
  return n;
}

/* Lingered long enough: closed if the client took the response, else given until the write
 * deadline. */
static void linger_over(http_conn *c) {
  uint64_t now = uv_now(c->timer.loop);
  bool pending = unacked(c) > 0;
  if (pending && now < c->write_deadline) {
    deadline(c, c->write_deadline - now);
    return;
  }
  if (pending)
    http_note(c->h, HTTP_EV_WRITE_TIMEOUT);
  conn_close(c, pending);
}

static void on_deadline(uv_timer_t *t) {
  http_conn *c = t->data;
  if (c->phase == PHASE_LINGER) {
    linger_over(c);
    return;
  }
  http_note(c->h, c->phase == PHASE_HEAD ? HTTP_EV_HEAD_TIMEOUT : HTTP_EV_WRITE_TIMEOUT);
  conn_close(c, c->phase == PHASE_WRITE);
}

/* ---- the response ---- */

static const char *reason(int code) {
  switch (code) {
  case 200:
    return "OK";
  case 400:
    return "Bad Request";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 431:
    return "Request Header Fields Too Large";
  case 505:
    return "HTTP Version Not Supported";
  default:
    return "Service Unavailable";
  }
}

static void on_alloc(uv_handle_t *hd, size_t hint, uv_buf_t *buf) {
  http_conn *c = hd->data;
  if (c->phase == PHASE_LINGER) /* dropped: the buffer is free again */
    *buf = uv_buf_init(c->in, (unsigned)c->in_cap);
  else
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

static void on_shutdown(uv_shutdown_t *req, int status) {
  http_conn *c = req->data;
  if (c->phase != PHASE_WRITE)
    return; /* closed meanwhile */
  if (status < 0) {
    conn_close(c, true);
    return;
  }
  c->phase = PHASE_LINGER;
  deadline(c, HTTP_LINGER_MS);
  if (c->phase == PHASE_LINGER && uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
    conn_close(c, false);
}

static void on_written(uv_write_t *req, int status) {
  http_conn *c = req->data;
  if (status < 0 && c->phase == PHASE_WRITE)
    conn_close(c, true); /* the peer is gone */
}

/* Writes the response, then shuts our side down (after the write, in libuv's order). */
static void respond(http_conn *c) {
  const http_response *r = &c->res;
  int n = snprintf(c->head, sizeof c->head,
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                   "Connection: close\r\n\r\n",
                   r->code, reason(r->code), r->type, r->body_len,
                   r->allow ? "Allow: GET, HEAD\r\n" : "");
  uv_buf_t bufs[2] = {uv_buf_init(c->head, (unsigned)n),
                      uv_buf_init((char *)r->body, (unsigned)r->body_len)};
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->phase = PHASE_WRITE;
  c->write_deadline = uv_now(c->timer.loop) + c->h->lim.write_timeout_ms;
  deadline(c, c->h->lim.write_timeout_ms);
  c->wreq.data = c->sreq.data = c;
  if (c->phase != PHASE_WRITE)
    return;
  if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, bufs, c->head_only ? 1 : 2, on_written) != 0 ||
      uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown) != 0)
    conn_close(c, true);
}

/* ---- the request ---- */

static void request(http_conn *c, size_t head_len) {
  http_request req;
  int code = http_request_parse(c->in, head_len, &req);
  if (code != 0) {
    http_note(c->h, HTTP_EV_BAD);
    http_static(&c->res, code, code == 505 ? "HTTP/1.0 or HTTP/1.1 only\n" : "bad request\n");
  } else {
    http_answer(c->h, &req, &c->res);
  }
  c->head_only = req.method == HTTP_HEAD;
  respond(c);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  http_conn *c = st->data;
  if (n < 0) {
    if (n == UV_EOF && c->phase == PHASE_LINGER && unacked(c) > 0) {
      uv_read_stop(st); /* half-closed, and may still be reading: the deadline decides */
      return;
    }
    conn_close(c, false); /* hung up (or reset): nothing more to answer */
    return;
  }
  if (c->phase != PHASE_HEAD)
    return; /* lingering: dropped */
  c->in_len += (size_t)n;
  size_t end = http_head_end(c->in, c->in_len, c->scanned);
  c->scanned = c->in_len;
  if (end > 0) {
    request(c, end);
  } else if (c->in_len == c->in_cap) {
    http_note(c->h, HTTP_EV_TOO_LARGE);
    http_static(&c->res, 431, "request head over max_header_bytes\n");
    respond(c);
  }
}

/* ---- accepting ---- */

static void bound_send_buffer(http_conn *c) {
  uv_os_fd_t fd;
  int size = HTTP_SNDBUF;
  if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
}

static void link_in(srv_http *h, http_conn *c) {
  c->next = h->conns;
  if (h->conns)
    h->conns->prev = c;
  h->conns = c;
  h->nconns++;
  h->open_handles++;
}

int http_conn_accept(srv_http *h) {
  size_t cap = h->lim.max_header_bytes;
  http_conn *c = rt_malloc(sizeof *c + cap);
  if (c == NULL)
    return ACCEL_ENOMEM;
  memset(c, 0, sizeof *c);
  c->h = h;
  c->in_cap = cap;
  c->open_handles = 2;
  uv_tcp_init(h->listener.loop, &c->tcp);
  uv_timer_init(h->listener.loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  link_in(h, c);
  if (uv_accept((uv_stream_t *)&h->listener, (uv_stream_t *)&c->tcp) != 0) {
    conn_close(c, false);
    return 0;
  }
  bound_send_buffer(c);
  deadline(c, h->lim.header_timeout_ms);
  if (c->phase == PHASE_HEAD && uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
    conn_close(c, false);
  return 0;
}
