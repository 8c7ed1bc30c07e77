/* Internals of acceld's HTTP endpoint (GET /metrics, GET /healthz), shared by
 * server/server_http.c (the listener, the connection cap, what each path answers),
 * server/http_conn.c (one connection's life) and server/http_parse.c (the request head).
 * Loop thread only. */
#ifndef SRV_HTTP_PRIV_H
#define SRV_HTTP_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "runtime/attr.h"
#include "server/server_priv.h"

/* After the response, the connection reads (and drops) what the client still sends until it
 * hangs up, at most this long, so that closing never resets a response the client has not
 * read yet (a close with unread bytes sends RST). */
#define HTTP_LINGER_MS 1000
/* The kernel's send buffer of each connection (SO_SNDBUF; Linux doubles it): the memory a
 * client that does not read can hold in the kernel, and the point past which a response
 * waits for the client, so that write_timeout_ms applies. The metrics text is tens of KiB. */
#define HTTP_SNDBUF (8u << 10)
/* Refusals, timeouts and bad requests are logged at most once per this long, with counts. */
#define HTTP_LOG_MS 10000

/* ---- http_parse.c: the request head ---- */

typedef enum http_method { HTTP_GET, HTTP_HEAD, HTTP_OTHER } http_method;

typedef struct http_request {
  http_method method;
  const char *path; /* the target's path, without its query; points into the head */
  size_t path_len;
} http_request;

/* The length of the request head at buf (empty lines before it, the request line and the
 * header lines through the empty line that ends them) once it is whole in buf[0, len), else
 * 0. `from` is the length already scanned by an earlier call (0 the first time). */
size_t http_head_end(const char *buf, size_t len, size_t from);
/* Parses a whole head (len from http_head_end): 0, or the status to answer (400, 505). */
RT_MUST_USE int http_request_parse(const char *head, size_t len, http_request *req);

/* ---- server_http.c: the endpoint ---- */

typedef struct http_conn http_conn;

typedef enum http_event {
  HTTP_EV_REFUSED,       /* a connection past max_connections, closed at accept */
  HTTP_EV_HEAD_TIMEOUT,  /* no whole request head within header_timeout_ms */
  HTTP_EV_TOO_LARGE,     /* a request head over max_header_bytes: 431 */
  HTTP_EV_BAD,           /* a request that does not parse: 400 (or 505) */
  HTTP_EV_WRITE_TIMEOUT, /* the response not taken within write_timeout_ms: reset */
  HTTP_EV_COUNT_
} http_event;

typedef struct srv_http {
  srv_server *s;
  srv_http_limits lim; /* every field set (defaults applied) */
  uv_tcp_t listener;
  uv_timer_t retry;  /* accepting again after a connection found no memory */
  uint64_t retry_ms; /* the last delay; 0 once a connection was taken */
  int open_handles;  /* listener, retry, every connection and refusal: freed at 0 */
  bool stopping;
  http_conn *conns; /* open connections, for the stop */
  uint32_t nconns;  /* open connections (descriptors held), against max_connections */
  char where[96];   /* http://HOST:PORT as bound, for the log */
  uint64_t window[HTTP_EV_COUNT_]; /* events since the last log line */
  uint64_t last_log_ms;
  bool logged;
} srv_http;

/* What to answer a parsed request (on the loop: the figures are rendered here). */
typedef struct http_response {
  int code;
  const char *type;
  const char *body; /* rt_malloc'd when `owned`, else static */
  size_t body_len;
  bool owned;
  bool allow; /* 405: an Allow header */
} http_response;

/* Fills `res` for the request (body NULL only when out of memory: 503 with a static body). */
void http_answer(srv_http *h, const http_request *req, http_response *res);
/* A response with a static text body. */
void http_static(http_response *res, int code, const char *body);
/* Counts an event and logs the counts at most once per HTTP_LOG_MS. */
void http_note(srv_http *h, http_event ev);
/* A handle of the endpoint closed (a connection freed, a refusal, the listener). */
void http_handle_gone(srv_http *h);

/* ---- http_conn.c: one connection ---- */

/* Accepts the pending connection of h's listener and starts reading its request head:
 * 0, or ACCEL_ENOMEM (the connection stays pending in the listener). */
RT_MUST_USE int http_conn_accept(srv_http *h);
/* Closes it now (the stop): idempotent. */
void http_conn_close(http_conn *c);
/* The next connection in h's list. */
http_conn *http_conn_next(const http_conn *c);

#endif
