/* acceld's HTTP endpoint (srv_args.metrics_listen): GET /metrics (Prometheus text format),
 * GET /readyz and /healthz (200 "ok" while serving; 503 while draining or with every device
 * quarantined) and GET /livez (200 "ok" whenever acceld's loop answers: Kubernetes restarts a
 * container whose liveness probe fails, which a drain or a quarantine must not cause).
 *
 * A small HTTP/1.1 responder of our own on the server's libuv loop, not nng's HTTP server:
 * nng 1.5.2's has no header timeout, no idle timeout and no connection cap, so a thousand
 * clients sending half a request each held every descriptor of the daemon. Here
 * (srv_http_limits, [metrics] in acceld.conf):
 *   - at most max_connections connections are open at once; one past it is closed as it
 *     comes (counted, logged at most every HTTP_LOG_MS);
 *   - a request's head must be whole within header_timeout_ms of connecting, and at most
 *     max_header_bytes long (431 past it);
 *   - the response must be taken within write_timeout_ms (else the connection is reset), and
 *     the kernel holds at most HTTP_SNDBUF of it;
 *   - every response closes the connection (Connection: close), so there is no idle
 *     keep-alive state to time out: a scrape every few seconds gains nothing from keeping a
 *     connection, and one request per connection keeps a connection's state to one head.
 * Only GET and HEAD (405 otherwise) of those paths (404 otherwise) are served.
 *
 * The handlers run on the loop, where the figures live: the text is rendered as the request
 * arrives, with no hop to another thread. http_conn.c holds a connection's life,
 * http_parse.c the request's parsing, http_url.c the listen address. */
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>

#include "actors/metrics.h"
#include "runtime/alloc.h"
#include "runtime/error_detail.h"
#include "runtime/loop.h"
#include "server/http_priv.h"

#define HTTP_BACKLOG 511 /* a burst of connections waits here, not in SYN retries */
#define TEXT_PLAIN "text/plain; charset=utf-8"
#define PROMETHEUS "text/plain; version=0.0.4; charset=utf-8"

/* ---- what each request gets ---- */

void http_static(http_response *res, int code, const char *body) {
  *res = (http_response){.code = code,
                         .type = TEXT_PLAIN,
                         .body = body,
                         .body_len = strlen(body),
                         .allow = code == 405};
}

static void answer_metrics(srv_http *h, http_response *res) {
  int rc;
  char *text = srv_report_now(h->s, SRV_REPORT_METRICS, &rc);
  if (text == NULL) {
    http_static(res, 503,
                rc == ACCEL_ENOMEM ? "acceld is out of memory\n" : "acceld cannot report now\n");
    return;
  }
  *res = (http_response){
      .code = 200, .type = PROMETHEUS, .body = text, .body_len = strlen(text), .owned = true};
}

static void answer_health(srv_http *h, http_response *res) {
  int rc;
  char *ok = srv_report_now(h->s, SRV_REPORT_HEALTH, &rc);
  if (ok != NULL)
    http_static(res, 200, "ok\n");
  else if (rc == ACCEL_EAGAIN)
    http_static(res, 503, "draining, or every device quarantined\n");
  else
    http_static(res, 503, "acceld cannot report now\n");
  rt_free(ok);
}

static bool path_is(const http_request *req, const char *path) {
  return req->path_len == strlen(path) && memcmp(req->path, path, req->path_len) == 0;
}

void http_answer(srv_http *h, const http_request *req, http_response *res) {
  if (req->method == HTTP_OTHER)
    http_static(res, 405, "only GET and HEAD\n");
  else if (path_is(req, "/metrics"))
    answer_metrics(h, res);
  else if (path_is(req, "/healthz") || path_is(req, "/readyz"))
    answer_health(h, res);
  else if (path_is(req, "/livez"))
    http_static(res, 200, "ok\n"); /* the loop answered: acceld is alive */
  else
    http_static(res, 404, "not found: /metrics, /livez, /readyz and /healthz are served here\n");
}

/* ---- the log, rate-limited ---- */

static const char *const event_what[HTTP_EV_COUNT_] = {
    [HTTP_EV_REFUSED] = "connections refused past max_connections",
    [HTTP_EV_HEAD_TIMEOUT] = "closed with no whole request within header_timeout_ms",
    [HTTP_EV_TOO_LARGE] = "requests over max_header_bytes (431)",
    [HTTP_EV_BAD] = "malformed requests (400)",
    [HTTP_EV_WRITE_TIMEOUT] = "reset with the response not taken within write_timeout_ms",
};

/* One line with every count since the last line: a flood of refusals is one line per
 * HTTP_LOG_MS, not one per connection. */
static void log_window(srv_http *h, uint64_t now) {
  char line[512];
  size_t n = 0;
  for (int e = 0; e < HTTP_EV_COUNT_; e++)
    if (h->window[e] > 0 && n < sizeof line)
      n += (size_t)snprintf(line + n, sizeof line - n, "%s%llu %s", n ? ", " : "",
                            (unsigned long long)h->window[e], event_what[e]);
  memset(h->window, 0, sizeof h->window);
  if (n == 0)
    return;
  accel_log(ACCEL_LOG_WARN, "server", "metrics %s: %s (max_connections %u)", h->where, line,
            h->lim.max_connections);
  h->last_log_ms = now;
  h->logged = true;
}

void http_note(srv_http *h, http_event ev) {
  uint64_t now = srv_now_ms(h->s);
  h->window[ev]++;
  if (!h->logged || now - h->last_log_ms >= HTTP_LOG_MS)
    log_window(h, now);
}

/* ---- accepting ---- */

void http_handle_gone(srv_http *h) {
  if (--h->open_handles > 0)
    return;
  srv_server *s = h->s;
  rt_free(h);
  srv_release(s);
}

static void on_handle_closed(uv_handle_t *hd) {
  http_handle_gone(hd->data);
}

static void on_refused_closed(uv_handle_t *hd) {
  srv_http *h = hd->data;
  rt_free(hd);
  http_handle_gone(h);
}

/* A connection past max_connections: accepted only to be closed (a pending one would hold
 * the listen queue), with no answer, by a reset: a flood of them leaves no TIME_WAIT state
 * behind here (which also delays new connections from the same ports). ACCEL_ENOMEM: it
 * stays pending. */
static int refuse(srv_http *h) {
  uv_tcp_t *t = rt_malloc(sizeof *t);
  if (t == NULL)
    return ACCEL_ENOMEM;
  uv_tcp_init(h->listener.loop, t);
  t->data = h;
  h->open_handles++;
  if (uv_accept((uv_stream_t *)&h->listener, (uv_stream_t *)t) != 0 ||
      uv_tcp_close_reset(t, on_refused_closed) != 0)
    uv_close((uv_handle_t *)t, on_refused_closed);
  http_note(h, HTTP_EV_REFUSED);
  return 0;
}

static void accept_one(srv_http *h);

static void on_accept_retry(uv_timer_t *t) {
  srv_http *h = t->data;
  if (!h->stopping)
    accept_one(h);
}

/* Out of memory for a connection: it stays in the listen queue (libuv stops watching the
 * listener until it is taken) and is tried again from a timer, 1 ms doubling to 1 s. */
static void accept_later(srv_http *h) {
  h->retry_ms = h->retry_ms == 0 ? 1 : h->retry_ms >= 512 ? 1000 : h->retry_ms * 2;
  if (uv_timer_start(&h->retry, on_accept_retry, h->retry_ms, 0) != 0)
    accel_log(ACCEL_LOG_ERROR, "server", "metrics %s: cannot retry a connection", h->where);
}

static void accept_one(srv_http *h) {
  int rc = h->nconns >= h->lim.max_connections ? refuse(h) : http_conn_accept(h);
  if (rc == ACCEL_ENOMEM)
    accept_later(h);
  else
    h->retry_ms = 0;
}

static void on_connection(uv_stream_t *listener, int status) {
  srv_http *h = listener->data;
  if (status == 0 && !h->stopping)
    accept_one(h);
}

/* ---- binding ---- */

/* The address to bind: no host is loopback; a name is looked up (blocking, once at start). */
static int resolve(const srv_http_addr *a, struct sockaddr_storage *ss) {
  const char *host = a->host[0] == '\0' ? "127.0.0.1" : !strcmp(a->host, "*") ? "0.0.0.0" : a->host;
  if (uv_ip4_addr(host, a->port, (struct sockaddr_in *)ss) == 0 ||
      uv_ip6_addr(host, a->port, (struct sockaddr_in6 *)ss) == 0)
    return 0;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL)
    return UV_EADDRNOTAVAIL;
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  ((struct sockaddr_in *)ss)->sin_port = htons(a->port); /* same place in sockaddr_in6 */
  return 0;
}

static bool is_loopback(const struct sockaddr_storage *ss) {
  if (ss->ss_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
  const struct in6_addr *a6 = &((const struct sockaddr_in6 *)ss)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
}

static void describe(srv_http *h, const struct sockaddr_storage *ss) {
  char ip[INET6_ADDRSTRLEN] = "?";
  uint16_t port;
  if (ss->ss_family == AF_INET) {
    uv_ip4_name((const struct sockaddr_in *)ss, ip, sizeof ip);
    port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
  } else {
    uv_ip6_name((const struct sockaddr_in6 *)ss, ip, sizeof ip);
    port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
  }
  snprintf(h->where, sizeof h->where, ss->ss_family == AF_INET ? "http://%s:%u" : "http://[%s]:%u",
           ip, port);
}

static int listen_on(srv_http *h, const srv_http_addr *a) {
  struct sockaddr_storage ss = {0};
  int rv = resolve(a, &ss);
  if (rv != 0)
    return rv;
  describe(h, &ss);
  if ((rv = uv_tcp_bind(&h->listener, (const struct sockaddr *)&ss, 0)) != 0 ||
      (rv = uv_listen((uv_stream_t *)&h->listener, HTTP_BACKLOG, on_connection)) != 0)
    return rv;
  if (!is_loopback(&ss))
    accel_log(ACCEL_LOG_WARN, "server",
              "metrics on %s: not a loopback address, and the endpoint has no "
              "authentication: anyone who reaches it reads the metrics",
              h->where);
  return 0;
}

static uint32_t or_default(uint32_t v, uint32_t def) {
  return v ? v : def;
}

static srv_http_limits limits_of(const srv_args *args) {
  const srv_http_limits *l = &args->metrics;
  return (srv_http_limits){
      .max_connections = or_default(l->max_connections, SRV_HTTP_DEFAULT_MAX_CONNECTIONS),
      .header_timeout_ms = or_default(l->header_timeout_ms, SRV_HTTP_DEFAULT_HEADER_TIMEOUT_MS),
      .write_timeout_ms = or_default(l->write_timeout_ms, SRV_HTTP_DEFAULT_WRITE_TIMEOUT_MS),
      .max_header_bytes = or_default(l->max_header_bytes, SRV_HTTP_DEFAULT_MAX_HEADER_BYTES),
  };
}

/* The listener and the retry timer open; h holds a reference on s until both are closed. */
static srv_http *http_new(srv_server *s) {
  srv_http *h = rt_calloc(1, sizeof *h);
  if (h == NULL)
    return NULL;
  h->s = s;
  h->lim = limits_of(s->args);
  uv_loop_t *loop = rt_uv_loop(s->rt);
  uv_tcp_init(loop, &h->listener);
  uv_timer_init(loop, &h->retry);
  h->listener.data = h->retry.data = h;
  h->open_handles = 2;
  s->refs++;
  return h;
}

static void http_close(srv_http *h) {
  h->stopping = true;
  uv_close((uv_handle_t *)&h->listener, on_handle_closed);
  uv_close((uv_handle_t *)&h->retry, on_handle_closed);
  for (http_conn *c = h->conns, *next; c; c = next) {
    next = http_conn_next(c);
    http_conn_close(c);
  }
}

int srv_http_start(srv_server *s, const char *url) {
  int rc = dev_metrics_enable(s->world);
  srv_http_addr a;
  if (rc == 0 && srv_http_addr_parse(url, &a) != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "metrics: cannot serve %s: not http://HOST:PORT", url);
    rc = rt_error_detail(ACCEL_EINVAL, "metrics %s: not http://HOST:PORT", url);
  }
  srv_http *h = rc == 0 ? http_new(s) : NULL;
  if (rc != 0 || h == NULL)
    return rc != 0 ? rc : ACCEL_ENOMEM;
  int rv = listen_on(h, &a);
  if (rv != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "metrics: cannot serve %s: %s%s", url, uv_strerror(rv),
              rv == UV_EADDRINUSE ? " (another program, perhaps another acceld, has it)" : "");
    /* acceld's "cannot start: ..." line ends with this (daemon/main.c) */
    rc = rt_error_detail(rv == UV_EADDRNOTAVAIL || rv == UV_EINVAL ? ACCEL_EINVAL : ACCEL_ESYS,
                         "metrics %s: %s", h->where[0] ? h->where : url, uv_strerror(rv));
    http_close(h);
    return rc;
  }
  accel_log(ACCEL_LOG_INFO, "server", "metrics on %s/metrics, health on %s/healthz", h->where,
            h->where);
  s->http = h;
  return 0;
}

void srv_http_stop(srv_server *s) {
  srv_http *h = s->http;
  if (h == NULL)
    return;
  s->http = NULL;
  log_window(h, srv_now_ms(s)); /* what the rate limit held back */
  http_close(h);
}
