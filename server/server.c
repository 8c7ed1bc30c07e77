/* The server actor's lifecycle (server.h): start opens the socket and watches it on the loop,
 * messages drain it or change its limits, stop closes it. The server's memory (srv_server)
 * is counted: ops in flight and open uv handles hold references, so a reply that finishes
 * after the actor ended finds it and is dropped instead of touching freed memory. */
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "actors/metrics.h"
#include "runtime/alloc.h"
#include "runtime/loop.h"
#include "server/io_pool.h"
#include "server/server_priv.h"
#include "server/server_shards.h"
#include "server/server_transport.h"

typedef struct srv_state {
  srv_server *s;
} srv_state;

void srv_failpoint_sleep(const char *var, _Atomic long *cached, long max_us) {
  long us = atomic_load(cached);
  if (us < 0) {
    const char *v = getenv(var);
    us = v ? strtol(v, NULL, 10) : 0;
    us = us > 0 && us <= max_us ? us : 0;
    atomic_store(cached, us);
  }
  if (us > 0)
    usleep((useconds_t)us);
}

void srv_release(srv_server *s) {
  if (--s->refs > 0)
    return;
  if (s->io) /* every local socket has closed: each held a reference */
    srv_iopool_stop(s->io);
  srv_op_pool_free(s);
  srv_msg_pool_free(s);
  srv_shards_drain_forget(s);
  srv_shards_detach(s);
  rt_free(s->gone);
  rt_free(s->buckets);
  rt_free(s->sendq.items);
  rt_free(s->listeners);
  if (s->gone_mu_init)
    pthread_mutex_destroy(&s->gone_mu);
  rt_free(s);
}

uint64_t srv_ram_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

uint64_t srv_now_ms(srv_server *s) {
  return uv_now(rt_uv_loop(s->rt));
}

/* ---- a tick while draining ---- */

static void on_tick(uv_timer_t *t) {
  srv_server *s = t->data;
  srv_drain_check(s);
  if (s->drain_reply == NULL) {
    uv_timer_stop(&s->tick);
    s->ticking = false;
  }
}

void srv_tick_start(srv_server *s) {
  if (s->ticking || !s->tick_open)
    return;
  uv_timer_start(&s->tick, on_tick, SRV_TICK_MS, SRV_TICK_MS);
  s->ticking = true;
}

/* ---- draining (SIGTERM) ---- */

static void drain_complete(srv_server *s, int status) {
  srv_shards_drain_forget(s);
  accel_future *f = s->drain_reply;
  s->drain_reply = NULL;
  accel_future_complete(f, status, NULL, NULL);
  accel_future_release(f);
}

/* Called every tick while draining. Done once nothing is in flight and nothing waits to be
 * handed to nng on two ticks in a row (the second tick gives nng's pipes time to write the
 * last replies before the socket closes), and every other shard's drain has ended. */
void srv_drain_check(srv_server *s) {
  if (!s->draining || s->drain_reply == NULL)
    return;
  bool idle = s->ops_in_flight == 0 && s->jobs == 0 && s->local_out_bytes == 0 &&
              s->sendq.len == 0 && s->dirty == NULL && s->out_queued == 0;
  s->drain_idle_ticks = idle ? s->drain_idle_ticks + 1 : 0;
  int peers = 0;
  if (s->drain_idle_ticks >= 2 && srv_shards_drained(s, &peers))
    drain_complete(s, peers);
  else if (srv_now_ms(s) >= s->drain_deadline_ms) {
    accel_log(ACCEL_LOG_WARN, "server", "drain timed out with %llu ops in flight, %u jobs",
              (unsigned long long)s->ops_in_flight, s->jobs);
    drain_complete(s, ACCEL_ETIMEDOUT);
  }
}

static void start_drain(srv_server *s, accel_msg *msg) {
  accel_future *f = accel_msg_take_reply(msg);
  if (s->drain_reply != NULL) { /* one drain at a time; a second asker is told so */
    if (f) {
      accel_future_complete(f, ACCEL_EALREADY, NULL, NULL);
      accel_future_release(f);
    }
    return;
  }
  if (!s->draining) {
    /* No new clients: nng's ADD_PRE hook turns them away. Not nng_listener_close(): in nng
     * that closes every pipe the listener made, the clients whose ops are draining. */
    atomic_store(&s->refusing, true);
    accel_log(ACCEL_LOG_INFO, "server", "draining: %llu ops in flight, %u sessions%s",
              (unsigned long long)s->ops_in_flight, s->sessions,
              s->shards->n > 1 ? " (this shard's)" : "");
  }
  s->draining = true;
  if (f == NULL) {
    if (s->shard == 0)
      srv_shards_drain_others(s, false);
    return;
  }
  uint32_t timeout = s->args->drain_timeout_ms ? s->args->drain_timeout_ms : 10000;
  s->drain_reply = f;
  s->drain_deadline_ms = srv_now_ms(s) + timeout;
  s->drain_idle_ticks = 0;
  if (s->shard == 0)
    srv_shards_drain_others(s, true);
  srv_tick_start(s);
}

/* ---- live limits (SIGHUP) ---- */

static void apply_limits(srv_server *s, const proto_limits *l) {
  if (l == NULL || l->max_message < PROTO_REPLY_HEAD_SIZE || l->max_buffers < 2)
    return;
  /* The socket's limit first: frames the codec would refuse must not be let in, so a
   * failure keeps every old limit. */
  int rv = srv_set_recv_limit(s, l->max_message);
  if (rv != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "new limits not applied: cannot set %s: %s",
              NNG_OPT_RECVMAXSZ, nng_strerror(rv));
    return;
  }
  s->limits = *l;
  if (s->shard == 0)
    srv_shards_limits_others(s, l);
  for (uint32_t b = 0; b < s->nbuckets; b++)
    for (srv_conn *c = s->buckets[b]; c; c = c->hnext) {
      c->sargs.max_in_flight = l->max_in_flight; /* the session reads these per op */
      c->sargs.max_memory = l->max_memory;
    }
}

/* ---- sessions ---- */

/* [security] user_kernels for this connection's transport. */
static bool modules_allowed(const srv_server *s, const srv_conn *c) {
  switch (s->args->sec.user_kernels) {
  case SRV_USER_KERNELS_ALL:
    return true;
  case SRV_USER_KERNELS_LOCAL:
    return c->tp->local;
  default:
    return false;
  }
}

int srv_session_start(srv_server *s, srv_conn *c) {
  c->sargs = (dev_session_args){
      .world = s->world,
      .max_buffers = s->limits.max_buffers,
      .max_in_flight = s->limits.max_in_flight,
      .max_memory = s->limits.max_memory,
      .forbid_modules = !modules_allowed(s, c),
      .name = c->name, /* filled by HELLO; the connection outlives the session's ops */
  };
  char name[32];
  snprintf(name, sizeof name, "session-%u", c->pipe);
  accel_spawn_opts o = {.name = name, .mailbox_capacity = 1u << 14};
  int rc = accel_spawn(s->rt, s->self, &dev_session_behavior, &c->sargs, &o, &c->session);
  if (rc != 0)
    return rc;
  c->session_live = true;
  s->sessions++;
  return 0;
}

/* ---- the behaviour ---- */

static int srv_start(accel_actor *self, void *state, void *arg) {
  srv_state *st = state;
  const srv_args *args = arg;
  if (args == NULL || args->world == NULL ||
      (args->nlisten == 0 && (args->shards == NULL || args->shard == 0)))
    return ACCEL_EINVAL;
  srv_server *s = rt_calloc(1, sizeof *s);
  if (s == NULL)
    return ACCEL_ENOMEM;
  st->s = s;
  s->refs = 1;
  s->rt = accel_actor_runtime(self);
  s->self = self;
  s->world = args->world;
  s->args = args;
  s->limits = args->limits;
  s->started_ms = srv_now_ms(s);
  pthread_mutex_init(&s->gone_mu, NULL);
  s->gone_mu_init = true;
  int rc = srv_shards_attach(s);
  if (rc == 0)
    rc = srv_conns_init(s);
  if (rc == 0)
    rc = srv_io_start(s);
  if (rc == 0 && args->metrics_listen && s->shard == 0)
    rc = srv_http_start(s, args->metrics_listen);
  else if (rc == 0 && args->metrics_listen) /* shard 0's /metrics counts this world's ops too */
    rc = dev_metrics_enable(s->world);
  return rc;
}

static void srv_stop(accel_actor *self, void *state) {
  srv_server *s = ((srv_state *)state)->s;
  if (s == NULL)
    return;
  s->stopped = true;
  s->self = NULL;
  if (s->drain_reply)
    drain_complete(s, ACCEL_ECLOSED);
  srv_http_stop(s);
  srv_io_close(s);
  srv_conns_free_all(s);
  srv_release(s);
}

static int srv_receive(accel_actor *self, void *state, accel_msg *msg) {
  srv_server *s = ((srv_state *)state)->s;
  switch (msg->type) {
  case SRV_MSG_DRAIN:
    start_drain(s, msg);
    return 0;
  case SRV_MSG_LIMITS:
    apply_limits(s, msg->data);
    return 0;
  case SRV_MSG_SHM_REGISTERED: /* the job is taken: the message's drop must not run */
    srv_shm_registered(s, msg->data);
    msg->data = NULL;
    return 0;
  case SRV_MSG_PARK: /* taken; returns once shard 0 has read this shard */
    srv_shards_parked(msg->data);
    msg->data = NULL;
    return 0;
  case SRV_MSG_ADOPT: /* taken */
    srv_shards_adopt(s, msg->data);
    msg->data = NULL;
    return 0;
  case SRV_MSG_SHM_UNMAPPED: /* done on the worker: only the job's memory is left */
    rt_free(msg->data);
    msg->data = NULL;
    return 0;
  default:
    return 0;
  }
}

static void srv_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  srv_conn_session_exited(((srv_state *)state)->s, child);
}

const accel_behavior srv_behavior = {
    .name = "server",
    .state_size = sizeof(srv_state),
    .start = srv_start,
    .receive = srv_receive,
    .stop = srv_stop,
    .child_exit = srv_child_exit,
};
