/* The service actor (service.h). Its uv handles live in a separate allocation that the last
 * close callback frees: the actor's own state is freed as soon as its stop hook returns, while
 * uv_close finishes a loop iteration later. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "daemon/exit_watch.h"
#include "daemon/service.h"
#include "runtime/alloc.h"
#include "runtime/loop.h"
#include "server/server.h"

enum {
  SVC_MSG_SIGNAL = ACCEL_MSG_USER + 400, /* arg: the signal */
  SVC_MSG_RELOADED,                      /* a worker read the file: data = reload */
};

typedef struct svc_handles {
  uv_signal_t term, intr, hup;
  uv_timer_t watchdog;
  int open; /* handles not closed yet */
  accel_runtime *rt;
  accel_ref self;
} svc_handles;

typedef struct svc_state {
  acd_service_args *args;
  svc_handles *h;
  bool draining, reloading;
} svc_state;

typedef struct reload {
  const acd_flags *flags;
  acd_config config;
  char err[256];
} reload;

/* ---- handles ---- */

static void on_signal(uv_signal_t *sig, int signum) {
  svc_handles *h = sig->data;
  accel_msg m = {.type = SVC_MSG_SIGNAL, .arg = (uint64_t)signum};
  if (accel_tell(h->rt, h->self, &m) != 0 && signum != SIGHUP)
    accel_runtime_stop(h->rt); /* cannot drain (mailbox full): stop at once */
}

static void on_watchdog(uv_timer_t *t) {
  sd_notify(0, "WATCHDOG=1");
}

static void on_closed(uv_handle_t *handle) {
  svc_handles *h = handle->data;
  if (--h->open == 0)
    rt_free(h);
}

static int start_signal(svc_handles *h, uv_signal_t *sig, int signum) {
  uv_signal_init(rt_uv_loop(h->rt), sig);
  sig->data = h;
  h->open++;
  return uv_signal_start(sig, on_signal, signum) == 0 ? 0 : ACCEL_ESYS;
}

/* WATCHDOG=1 at half the interval systemd set (WATCHDOG_USEC), if it set one. */
static void start_watchdog(svc_handles *h) {
  uint64_t usec = 0;
  uv_timer_init(rt_uv_loop(h->rt), &h->watchdog);
  h->watchdog.data = h;
  h->open++;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec < 2000)
    return;
  uint64_t ms = usec / 2000;
  uv_timer_start(&h->watchdog, on_watchdog, ms, ms);
  accel_log(ACCEL_LOG_INFO, "service", "systemd watchdog: every %llu ms", (unsigned long long)ms);
}

/* ---- SIGTERM: drain, then stop ---- */

static void on_drained(accel_future *f, int status, void *arg) {
  accel_log(ACCEL_LOG_INFO, "service", "drained (%s): stopping", accel_err_name(status));
  accel_runtime_stop(arg);
}

static void terminate(svc_state *st, accel_actor *self, int signum) {
  accel_runtime *rt = accel_actor_runtime(self);
  if (st->draining) {
    accel_log(ACCEL_LOG_WARN, "service", "signal %d while draining: stopping now", signum);
    accel_runtime_stop(rt);
    return;
  }
  st->draining = true;
  const acd_config *c = st->args->config;
  acd_exit_watch_start(c->exit_timeout_ms ? c->drain_timeout_ms + c->exit_timeout_ms : 0,
                       st->args->exit_status());
  sd_notify(0, "STOPPING=1\nSTATUS=draining");
  accel_log(ACCEL_LOG_INFO, "service", "signal %d: draining", signum);
  accel_msg m = {.type = SRV_MSG_DRAIN};
  accel_future *f;
  if (accel_ask(rt, st->args->server, &m, &f) != 0) {
    accel_runtime_stop(rt);
    return;
  }
  accel_future_then(f, on_drained, rt);
  accel_future_release(f);
}

/* ---- SIGHUP: reload ---- */

static int reload_work(void *data) { /* on a worker: reading a file may block */
  reload *r = data;
  return acd_config_read(&r->config, r->flags, r->err, sizeof r->err);
}

static void reload_drop(void *data) {
  reload *r = data;
  acd_config_free(&r->config); /* zeroed by a failed read, so this is safe either way */
  rt_free(r);
}

static void start_reload(svc_state *st, accel_actor *self) {
  reload *r = rt_calloc(1, sizeof *r);
  if (st->reloading || r == NULL) {
    rt_free(r);
    return;
  }
  r->flags = st->args->flags;
  sd_notify(0, "RELOADING=1");
  if (accel_work_submit(self, reload_work, r, reload_drop, SVC_MSG_RELOADED) == 0)
    st->reloading = true;
  else
    rt_free(r);
}

static void note_restart_only(const acd_config *old, const acd_config *new) {
  bool listen = old->nlisten != new->nlisten;
  for (uint32_t i = 0; !listen && i < old->nlisten; i++)
    listen = strcmp(old->listen[i], new->listen[i]) != 0;
  const char *what = listen                                         ? "listen"
                     : old->cpu_devices != new->cpu_devices         ? "cpu_devices"
                     : strcmp(old->backends, new->backends) != 0    ? "backends"
                     : old->fault_injection != new->fault_injection ? "fault_injection"
                     : old->socket_mode != new->socket_mode         ? "socket_mode"
                     : old->completion != new->completion           ? "completion"
                     : old->cuda_primary != new->cuda_primary       ? "cuda_context"
                     : old->pinned_max != new->pinned_max           ? "pinned_max"
                                                                    : NULL;
  if (what)
    accel_log(ACCEL_LOG_WARN, "service", "reload: %s changed: takes effect on restart", what);
  /* Its own line, never hidden by another change: who may connect is what an administrator
   * most needs to know is still the old. */
  if (!acd_config_security_same(old, new))
    accel_log(ACCEL_LOG_WARN, "service",
              "reload: [security] changed: takes effect on restart (until then the old "
              "settings apply)");
}

static void log_limit(const char *name, uint64_t old, uint64_t new) {
  if (old != new)
    accel_log(ACCEL_LOG_INFO, "service", "reload: %s %llu -> %llu", name, (unsigned long long)old,
              (unsigned long long)new);
}

static void apply_limits(svc_state *st, accel_actor *self, const proto_limits *l) {
  proto_limits *old = &st->args->config->limits;
  if (memcmp(old, l, sizeof *l) == 0)
    return;
  log_limit("max_message", old->max_message, l->max_message);
  log_limit("max_in_flight", old->max_in_flight, l->max_in_flight);
  log_limit("max_buffers", old->max_buffers, l->max_buffers);
  log_limit("max_memory", old->max_memory, l->max_memory);
  proto_limits *copy = rt_malloc(sizeof *copy);
  if (copy == NULL)
    return;
  *copy = *l;
  accel_msg m = {.type = SRV_MSG_LIMITS, .data = copy, .drop = rt_free};
  if (accel_tell(accel_actor_runtime(self), st->args->server, &m) != 0) {
    rt_free(copy);
    return;
  }
  *old = *l;
}

static void reloaded(svc_state *st, accel_actor *self, accel_msg *msg) {
  reload *r = msg->data;
  acd_config *cur = st->args->config;
  st->reloading = false;
  if ((int)(int64_t)msg->arg != 0) {
    accel_log(ACCEL_LOG_ERROR, "service", "reload failed, nothing changed: %s", r->err);
  } else {
    note_restart_only(cur, &r->config);
    if (cur->log_level != r->config.log_level) {
      accel_log(ACCEL_LOG_INFO, "service", "reload: log_level %s -> %s",
                accel_log_level_name(cur->log_level), accel_log_level_name(r->config.log_level));
      accel_log_set_level(r->config.log_level);
      cur->log_level = r->config.log_level;
    }
    apply_limits(st, self, &r->config.limits);
    log_limit("exit_timeout_ms", cur->exit_timeout_ms, r->config.exit_timeout_ms);
    cur->exit_timeout_ms = r->config.exit_timeout_ms; /* read when a SIGTERM comes */
    accel_log(ACCEL_LOG_INFO, "service", "configuration reloaded");
  }
  sd_notify(0, "READY=1");
}

/* ---- the behaviour ---- */

static void tell_ready(acd_service_args *a) {
  sd_notify(0, "READY=1\nSTATUS=serving");
  if (a->ready_fd < 0)
    return;
  (void)!write(a->ready_fd, "R", 1);
  close(a->ready_fd);
  a->ready_fd = -1;
}

static int svc_start(accel_actor *self, void *state, void *arg) {
  svc_state *st = state;
  st->args = arg;
  st->h = rt_calloc(1, sizeof *st->h);
  if (st->h == NULL)
    return ACCEL_ENOMEM;
  st->h->rt = accel_actor_runtime(self);
  st->h->self = accel_self(self);
  int rc = start_signal(st->h, &st->h->term, SIGTERM);
  if (rc == 0)
    rc = start_signal(st->h, &st->h->intr, SIGINT);
  if (rc == 0)
    rc = start_signal(st->h, &st->h->hup, SIGHUP);
  if (rc != 0)
    return rc;
  start_watchdog(st->h);
  tell_ready(st->args);
  return 0;
}

static void svc_stop(accel_actor *self, void *state) {
  svc_state *st = state;
  svc_handles *h = st->h;
  if (h == NULL)
    return;
  if (h->open == 0) {
    rt_free(h);
    return;
  }
  uv_signal_t *sigs[] = {&h->term, &h->intr, &h->hup};
  int n = h->open; /* the handles are initialised in this order; close those that were */
  for (int i = 0; i < 3 && i < n; i++)
    uv_close((uv_handle_t *)sigs[i], on_closed);
  if (n == 4)
    uv_close((uv_handle_t *)&h->watchdog, on_closed);
}

static int svc_receive(accel_actor *self, void *state, accel_msg *msg) {
  svc_state *st = state;
  if (msg->type == SVC_MSG_SIGNAL && msg->arg == SIGHUP)
    start_reload(st, self);
  else if (msg->type == SVC_MSG_SIGNAL)
    terminate(st, self, (int)msg->arg);
  else if (msg->type == SVC_MSG_RELOADED)
    reloaded(st, self, msg);
  return 0;
}

const accel_behavior acd_service_behavior = {
    .name = "service",
    .state_size = sizeof(svc_state),
    .start = svc_start,
    .receive = svc_receive,
    .stop = svc_stop,
};
