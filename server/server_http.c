/* acceld's HTTP endpoint (srv_args.metrics_listen): GET /metrics (Prometheus text format) and
 * GET /healthz (200 "ok" while serving; 503 while draining or with every device quarantined),
 * served by nng's HTTP server.
 *
 * nng runs the handlers on its own threads, and the figures live on the loop: a handler asks
 * the server actor (SRV_MSG_HTTP) and waits for the answer a short while. The server builds
 * the text in its receive, on the loop. A handler that gets no answer in time (the loop
 * stopping) answers 503. */
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <stdlib.h>
#include <string.h>

#include "actors/metrics.h"
#include "runtime/alloc.h"
#include "server/server_priv.h"

#define HTTP_WAIT_MS 2000

typedef struct srv_http {
  nng_http_server *server;
  accel_runtime *rt;
  accel_ref self;
} srv_http;

enum { HTTP_METRICS = 0, HTTP_HEALTH = 1 };

/* On the loop (srv_receive): the text for `what`, with status 0, or a status for /healthz. */
void srv_http_answer(srv_server *s, accel_msg *msg) {
  dev_status_counts c = srv_counts(s);
  if (msg->arg == HTTP_HEALTH) {
    accel_reply(msg, dev_metrics_healthy(s->world, &c) ? 0 : ACCEL_EBUSY, NULL, NULL);
    return;
  }
  char *text = dev_metrics_render(s->world, &c);
  accel_reply(msg, text ? 0 : ACCEL_ENOMEM, text, rt_free);
}

static void respond(nng_aio *aio, uint16_t code, const char *type, const char *body) {
  nng_http_res *res;
  if (nng_http_res_alloc(&res) != 0) {
    nng_aio_finish(aio, NNG_ENOMEM);
    return;
  }
  if (nng_http_res_set_status(res, code) != 0 ||
      nng_http_res_set_header(res, "Content-Type", type) != 0 ||
      nng_http_res_copy_data(res, body, strlen(body)) != 0) {
    nng_http_res_free(res);
    nng_aio_finish(aio, NNG_ENOMEM);
    return;
  }
  nng_aio_set_output(aio, 0, res);
  nng_aio_finish(aio, 0);
}

/* Asks the loop; the future (completed) or NULL when the server did not answer in time. */
static accel_future *ask_loop(srv_http *h, uint64_t what) {
  accel_msg m = {.type = SRV_MSG_HTTP, .arg = what};
  accel_future *f = NULL;
  if (accel_ask(h->rt, h->self, &m, &f) != 0)
    return NULL;
  if (accel_future_wait(f, HTTP_WAIT_MS) == ACCEL_ETIMEDOUT &&
      accel_future_poll(f) == ACCEL_EAGAIN) {
    accel_future_release(f);
    return NULL;
  }
  return f;
}

static void on_metrics(nng_aio *aio) {
  srv_http *h = nng_http_handler_get_data(nng_aio_get_input(aio, 1));
  accel_future *f = ask_loop(h, HTTP_METRICS);
  const char *text = f && accel_future_poll(f) == 0 ? accel_future_value(f) : NULL;
  if (text)
    respond(aio, 200, "text/plain; version=0.0.4; charset=utf-8", text);
  else
    respond(aio, 503, "text/plain; charset=utf-8", "acceld is not answering\n");
  if (f)
    accel_future_release(f);
}

static void on_health(nng_aio *aio) {
  srv_http *h = nng_http_handler_get_data(nng_aio_get_input(aio, 1));
  accel_future *f = ask_loop(h, HTTP_HEALTH);
  int status = f ? accel_future_poll(f) : ACCEL_ETIMEDOUT;
  if (status == 0)
    respond(aio, 200, "text/plain; charset=utf-8", "ok\n");
  else
    respond(aio, 503, "text/plain; charset=utf-8",
            status == ACCEL_EBUSY ? "draining, or every device quarantined\n"
                                  : "acceld is not answering\n");
  if (f)
    accel_future_release(f);
}

static int add_handler(srv_http *h, const char *path, void (*cb)(nng_aio *)) {
  nng_http_handler *hd;
  int rv = nng_http_handler_alloc(&hd, path, cb);
  if (rv != 0)
    return rv;
  if ((rv = nng_http_handler_set_data(hd, h, NULL)) != 0 ||
      (rv = nng_http_server_add_handler(h->server, hd)) != 0)
    nng_http_handler_free(hd);
  return rv;
}

int srv_http_start(srv_server *s, const char *url) {
  int rc = dev_metrics_enable(s->world);
  if (rc != 0)
    return rc;
  srv_http *h = rt_calloc(1, sizeof *h);
  if (h == NULL)
    return ACCEL_ENOMEM;
  h->rt = s->rt;
  h->self = accel_self(s->self);
  nng_url *u = NULL;
  int rv = nng_url_parse(&u, url);
  if (rv == 0 && strcmp(u->u_scheme, "http") != 0)
    rv = NNG_EADDRINVAL;
  if (rv == 0)
    rv = nng_http_server_hold(&h->server, u);
  if (u)
    nng_url_free(u);
  if (rv == 0 && (rv = add_handler(h, "/metrics", on_metrics)) == 0 &&
      (rv = add_handler(h, "/healthz", on_health)) == 0)
    rv = nng_http_server_start(h->server);
  if (rv != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "metrics: cannot serve %s: %s%s", url, nng_strerror(rv),
              rv == NNG_EADDRINUSE ? " (another program, perhaps another acceld, has it)" : "");
    if (h->server)
      nng_http_server_release(h->server);
    rt_free(h);
    return rv == NNG_EADDRINVAL || rv == NNG_EINVAL ? ACCEL_EINVAL : ACCEL_ESYS;
  }
  accel_log(ACCEL_LOG_INFO, "server", "metrics on %s/metrics, health on %s/healthz", url, url);
  s->http = h;
  return 0;
}

void srv_http_stop(srv_server *s) {
  srv_http *h = s->http;
  if (h == NULL)
    return;
  s->http = NULL;
  nng_http_server_stop(h->server);
  nng_http_server_release(h->server);
  rt_free(h);
}
