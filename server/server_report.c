/* Reports asked for over a connection (accelctl status, devices, tree, clients: PROTO_CTL_*)
 * and over HTTP (/metrics, /healthz). With several shards they cover the whole daemon: they
 * are made on shard 0 with every other shard parked (server_shards.h), from every shard's
 * world and counters (/healthz needs only the devices' states, atomics: nothing parked); a
 * connection served by another shard has its request made there and the text sent back. Parking
 * stalls the other loops for the time of one render, as the one loop of a daemon without shards is
 * stalled by it. */
#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"
#include "runtime/alloc.h"
#include "server/render.h"
#include "server/server_priv.h"
#include "server/server_shards.h"
#include "server/server_transport.h"

/* a then b, in one malloc'd string; NULL without memory. */
static char *concat(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *v = rt_malloc(la + lb + 1);
  if (v != NULL) {
    memcpy(v, a, la);
    memcpy(v + la, b, lb + 1);
  }
  return v;
}

/* The text of a report (malloc'd), with every other shard parked meanwhile; NULL and *rc. */
static char *render(srv_server *s, uint32_t command, uint64_t arg, int *rc) {
  srv_park *park;
  char *text = NULL;
  *rc = srv_shards_park_others(s, &park);
  if (*rc == 0) {
    srv_worlds ws;
    srv_shards_worlds(s, &ws);
    srv_status_counts n = srv_shards_counts(s);
    switch (command) {
    case PROTO_CTL_STATUS:
      text = arg == 1 ? srv_status_text(&ws, &n) : srv_status_json(&ws, &n);
      break;
    case PROTO_CTL_DEVICES:
      text = srv_status_devices(&ws);
      break;
    case PROTO_CTL_TREE:
      text = arg == 1 ? srv_status_tree_json(s->rt, &ws) : srv_status_tree(s->rt, &ws);
      break;
    case PROTO_CTL_CLIENTS:
      text = srv_clients_report(s, arg != 1);
      break;
    case SRV_REPORT_METRICS: {
      char *devices = srv_metrics_render(&ws, &n);
      char *clients = devices ? srv_clients_metrics(s) : NULL;
      text = clients ? concat(devices, clients) : NULL;
      rt_free(devices);
      rt_free(clients);
      break;
    }
    default:
      *rc = ACCEL_ENOTSUP;
      break;
    }
    if (text == NULL && *rc == 0)
      *rc = ACCEL_ENOMEM;
  }
  srv_shards_resume_others(park);
  return text;
}

/* /healthz, probed every few seconds: from the devices' states (atomics) and shard 0's drain,
 * with no shard parked. */
static char *health(srv_server *s, int *rc) {
  srv_worlds ws;
  srv_shards_worlds(s, &ws);
  srv_status_counts n = srv_counts(s);
  bool healthy = srv_metrics_healthy(&ws, &n);
  char *ok = healthy ? rt_strdup("ok\n") : NULL;
  *rc = ok ? 0 : healthy ? ACCEL_ENOMEM : ACCEL_EAGAIN;
  return ok;
}

char *srv_report_now(srv_server *s, uint32_t command, int *rc) {
  return command == SRV_REPORT_HEALTH ? health(s, rc) : render(s, command, 0, rc);
}

/* ---- a report asked for on a shard other than 0 ---- */

/* Made on shard 0's loop and answered on the asking shard's, each step a task posted to that
 * loop (never refused, unlike a message to a full mailbox): the asking connection and server
 * are held meanwhile (srv_job_begin), and every request is answered. */
typedef struct report_req {
  accel_task task;
  srv_server *s; /* the shard that asked */
  uint32_t shard;
  srv_conn *c;
  nng_msg *m;
  uint64_t request_id, arg;
  uint32_t command;
  int rc;
  char *text;
} report_req;

/* The report's text (taken), or its error rc, as the reply to request m on c. */
static void answer(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id, char *text,
                   int rc) {
  if (text == NULL)
    srv_reply_status(s, c, m, request_id, rc);
  else
    srv_reply_text(s, c, m, request_id, text);
}

static void report_back(accel_task *task) {
  report_req *r = (report_req *)task;
  srv_server *s = r->s;
  if (s->stopped) {
    nng_msg_free(r->m);
    rt_free(r->text);
  } else {
    answer(s, r->c, r->m, r->request_id, r->text, r->rc);
  }
  srv_job_end(s, r->c);
  rt_free(r);
}

/* On shard 0's loop (its server may have stopped: ECLOSED). */
static void report_make(accel_task *task) {
  report_req *r = (report_req *)task;
  srv_server *zero = r->s->shards->servers[0];
  if (zero == NULL || zero->stopped)
    r->rc = ACCEL_ECLOSED;
  else
    r->text = render(zero, r->command, r->arg, &r->rc);
  srv_shards_post(r->s, r->shard, &r->task, report_back);
}

void srv_report(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id, uint32_t command,
                uint64_t arg) {
  if (s->shard == 0) {
    int rc;
    char *text = render(s, command, arg, &rc);
    answer(s, c, m, request_id, text, rc);
    return;
  }
  report_req *r = rt_malloc(sizeof *r);
  if (r == NULL) {
    srv_reply_status(s, c, m, request_id, ACCEL_ENOMEM);
    return;
  }
  *r = (report_req){.s = s,
                    .shard = s->shard,
                    .c = c,
                    .m = m,
                    .request_id = request_id,
                    .arg = arg,
                    .command = command};
  srv_job_begin(s, c);
  srv_shards_post(s, 0, &r->task, report_make);
}
