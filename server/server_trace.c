/* accelctl trace (PROTO_CTL_TRACE_START, _STOP): a trace of every session's ops
 * (actors/trace.h), of every shard. Each shard's world records its own sessions; a start or a
 * stop is made on shard 0's loop with every other shard parked (server_shards.h, as the
 * reports are), so that it may start or take every world's trace at once, and answered on the
 * asking connection's loop, each step a task posted there. The stopped traces are rendered
 * together (dev_trace_render_all) on libuv's pool of the asking shard's loop: a million events
 * take seconds and the reply hundreds of megabytes, which on a loop stalled every client of
 * it (4-9 us an event). */
#include <stddef.h>
#include <stdlib.h>

#include "actors/trace.h"
#include "runtime/alloc.h"
#include "runtime/loop.h"
#include "server/server_priv.h"
#include "server/server_shards.h"

/* A client that never stops its trace leaves at most `max_events` events behind (split among
 * the shards' worlds), and the next start drops them. */
#define TRACE_MAX_EVENTS (4u << 20) /* 192 MiB at most */

typedef struct trace_req {
  accel_task task; /* posted to shard 0's loop, then back to the asking shard's */
  uv_work_t work;  /* the render, on the asking shard's loop's pool */
  srv_server *s;   /* the shard that asked */
  srv_conn *c;     /* counted in c->ops meanwhile (srv_job_begin) */
  nng_msg *m;      /* the request's message; the reply once rendered */
  uint64_t request_id, max_events;
  uint32_t command;
  dev_trace *parts[SRV_SHARDS_MAX]; /* a stop's traces, by shard (NULL: that world had none) */
  uint32_t nparts;
  int rc;
} trace_req;

static void req_free(trace_req *r) {
  for (uint32_t k = 0; k < r->nparts; k++)
    dev_trace_free(r->parts[k]);
  rt_free(r);
}

/* ---- on shard 0, the others parked ---- */

/* ACCEL_TEST_TRACE_RESTART_FAILS=k (tests): every start after the first fails in shard k's
 * world as if out of memory, that world keeping the trace it ran (as dev_trace_start does). */
static bool restart_fails(uint32_t k) {
  static _Atomic long shard = -2; /* -2: not read yet; -1: none */
  static _Atomic uint32_t starts;
  if (atomic_load(&shard) == -2) {
    const char *v = getenv("ACCEL_TEST_TRACE_RESTART_FAILS");
    atomic_store(&shard, v != NULL && *v ? strtol(v, NULL, 10) : -1);
  }
  if (k == 0)
    atomic_fetch_add(&starts, 1);
  return atomic_load(&shard) == (long)k && atomic_load(&starts) > 1;
}

/* Every world's trace started, max_events split evenly among them (one at least each: a
 * shard's part of the budget is its own, so one busy shard keeps 1/n of the events); on a
 * failure none is left running, not even a trace some world ran before this start (a world
 * whose new trace cannot be made keeps its old one: dev_trace_start). */
static int start_all(srv_shards *sh, uint64_t max_events) {
  uint32_t n = 0;
  for (uint32_t k = 0; k < sh->n; k++)
    n += sh->worlds[k] != NULL;
  uint64_t all = max_events ? max_events : DEV_TRACE_MAX_EVENTS_DEFAULT;
  uint64_t each = n > 1 ? all / n : all;
  each = each > 0 ? each : 1;
  int rc = 0;
  for (uint32_t k = 0; k < sh->n && rc == 0; k++)
    if (sh->worlds[k] != NULL)
      rc = restart_fails(k) ? ACCEL_ENOMEM : dev_trace_start(sh->worlds[k], (uint32_t)each);
  if (rc != 0)
    for (uint32_t k = 0; k < sh->n; k++)
      if (sh->worlds[k] != NULL)
        dev_trace_free(dev_trace_detach(sh->worlds[k]));
  return rc;
}

/* Every world's trace stopped and taken, at its shard's index (NULL where a world has none);
 * EINVAL when none ran. */
static int detach_all(srv_shards *sh, trace_req *r) {
  bool any = false;
  for (uint32_t k = 0; k < sh->n; k++) {
    r->parts[k] = sh->worlds[k] != NULL ? dev_trace_detach(sh->worlds[k]) : NULL;
    any = any || r->parts[k] != NULL;
  }
  r->nparts = sh->n;
  if (!any)
    return ACCEL_EINVAL;
  atomic_store(&sh->trace_rendering, true); /* until the render is done */
  return 0;
}

static void on_zero_done(trace_req *r);

/* On shard 0's loop (its server may have stopped: ECLOSED). */
static void on_zero(accel_task *task) {
  trace_req *r = (trace_req *)task;
  srv_shards *sh = r->s->shards;
  srv_server *zero = sh->servers[0];
  if (zero == NULL || zero->stopped) {
    r->rc = ACCEL_ECLOSED;
  } else if (r->command == PROTO_CTL_TRACE_START && atomic_load(&sh->trace_rendering)) {
    r->rc = ACCEL_EBUSY; /* renders never pile up: each holds its events until it is done */
  } else {
    srv_park *park;
    r->rc = srv_shards_park_others(zero, &park);
    if (r->rc == 0)
      r->rc = r->command == PROTO_CTL_TRACE_START ? start_all(sh, r->max_events)
                                                  : detach_all(sh, r);
    srv_shards_resume_others(park);
  }
  on_zero_done(r);
}

/* ---- on the asking shard's loop ---- */

/* ACCEL_TEST_TRACE_RENDER_DELAY_US: each render takes that much longer (tests: a render of a
 * test's few events is otherwise too quick to be seen under way). */
static void render_delay(void) {
  static _Atomic long delay_us = -1;
  srv_failpoint_sleep("ACCEL_TEST_TRACE_RENDER_DELAY_US", &delay_us, 2000000);
}

/* The pool's thread: the JSON, then the whole reply in the request's message. */
static void render(uv_work_t *work) {
  trace_req *r = (trace_req *)((char *)work - offsetof(trace_req, work));
  render_delay();
  char *json = NULL;
  size_t len = 0;
  r->rc = dev_trace_render_all((const dev_trace *const *)r->parts, r->nparts, &json, &len);
  if (r->rc == 0)
    r->rc = srv_fill_reply(r->m, r->request_id, json, len);
  rt_free(json);
}

static void rendered(uv_work_t *work, int status) {
  trace_req *r = (trace_req *)((char *)work - offsetof(trace_req, work));
  srv_server *s = r->s;
  atomic_store(&s->shards->trace_rendering, false);
  if (s->stopped)
    nng_msg_free(r->m);
  else /* a cancelled request never ran: m holds no reply */
    srv_send_filled(s, r->c, r->m, r->request_id, status != 0 ? ACCEL_ECANCELED : r->rc);
  srv_job_end(s, r->c);
  req_free(r);
}

/* Back on the asking shard's loop: a start's or a failure's status, or the render. */
static void back(accel_task *task) {
  trace_req *r = (trace_req *)task;
  srv_server *s = r->s;
  if (r->rc == 0 && r->command == PROTO_CTL_TRACE_START)
    accel_log(ACCEL_LOG_INFO, "server", "connection %u%s%s%s started a trace", r->c->pipe,
              r->c->name[0] ? " ('" : "", r->c->name, r->c->name[0] ? "')" : "");
  if (r->rc != 0 || r->command == PROTO_CTL_TRACE_START || s->stopped) {
    if (r->rc == 0 && r->nparts > 0) /* taken: only the asking server stopped meanwhile */
      atomic_store(&s->shards->trace_rendering, false);
    if (s->stopped)
      nng_msg_free(r->m);
    else
      srv_reply_status(s, r->c, r->m, r->request_id, r->rc);
    srv_job_end(s, r->c);
    req_free(r);
    return;
  }
  if (uv_queue_work(rt_uv_loop(s->rt), &r->work, render, rendered) != 0) {
    render(&r->work); /* only with a loop that is gone; then here */
    rendered(&r->work, 0);
  }
}

static void on_zero_done(trace_req *r) {
  if (r->s->shard == 0)
    back(&r->task);
  else
    srv_shards_post(r->s, r->s->shard, &r->task, back);
}

void srv_trace_control(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id,
                       uint32_t command, uint64_t arg) {
  if (command == PROTO_CTL_TRACE_START && arg > TRACE_MAX_EVENTS) {
    srv_reply_status(s, c, m, request_id, ACCEL_EINVAL);
    return;
  }
  trace_req *r = rt_calloc(1, sizeof *r);
  if (r == NULL) {
    srv_reply_status(s, c, m, request_id, ACCEL_ENOMEM);
    return;
  }
  *r = (trace_req){.s = s,
                   .c = c,
                   .m = m,
                   .request_id = request_id,
                   .max_events = command == PROTO_CTL_TRACE_START ? arg : 0,
                   .command = command};
  srv_job_begin(s, c);
  if (s->shard == 0)
    on_zero(&r->task);
  else
    srv_shards_post(s, 0, &r->task, on_zero);
}
