/* Actor timers: a uv timer per accel_timer_start that delivers a message to the actor itself.
 * Timers belong to one incarnation and are closed when it ends. */
#include <stdlib.h>

#include "runtime/alloc.h"
#include "runtime/defer.h"
#include "runtime/rt.h"

struct rt_timer {
  uv_timer_t handle; /* first: the handle pointer is the timer */
  rt_timer *next;
  accel_actor *cell;
  uint64_t id;
  uint32_t type;
  uint64_t arg;
  bool repeat;
};

static void free_timer(uv_handle_t *h) {
  rt_free(h);
}

static void unlink_and_close(rt_timer *t) {
  rt_timer **link = &t->cell->timers;
  while (*link != t)
    link = &(*link)->next;
  *link = t->next;
  uv_close((uv_handle_t *)&t->handle, free_timer);
}

static void on_tick(uv_timer_t *h) {
  rt_timer *t = (rt_timer *)h;
  accel_actor *cell = t->cell;
  accel_msg msg = {.type = t->type, .arg = t->arg};
  if (rt_send_later(rt_send_local(cell->rt, cell->ref, &msg)))
    rt_retry_send(cell->rt, cell->ref, &msg); /* a full mailbox delays the tick */
  if (!t->repeat)
    unlink_and_close(t);
}

int accel_timer_start(accel_actor *self, uint64_t delay_ms, uint64_t repeat_ms, uint32_t type,
                      uint64_t arg, uint64_t *id) {
  if (self == NULL || self->status != RT_RUNNING || rt_tls_loop != self->home)
    return ACCEL_EINVAL;
  rt_timer *t = rt_calloc(1, sizeof *t);
  if (t == NULL)
    return ACCEL_ENOMEM;
  int rc = uv_timer_init(&self->home->loop, &t->handle);
  if (rc != 0) {
    rt_free(t); /* not a handle of the loop yet: no close needed */
    return rt_uv_err(rc);
  }
  rc = uv_timer_start(&t->handle, on_tick, delay_ms, repeat_ms);
  if (rc != 0) {
    uv_close((uv_handle_t *)&t->handle, free_timer); /* the loop knows it now */
    return rt_uv_err(rc);
  }
  if (delay_ms == 0)
    rt_poll_soon(); /* due at once: not after the loop's turns back to back (loop.c) */
  t->cell = self;
  t->id = ++self->home->next_timer_id;
  t->type = type;
  t->arg = arg;
  t->repeat = repeat_ms > 0;
  t->next = self->timers;
  self->timers = t;
  if (id)
    *id = t->id;
  return 0;
}

int accel_timer_cancel(accel_actor *self, uint64_t id) {
  if (self == NULL)
    return ACCEL_EINVAL;
  for (rt_timer *t = self->timers; t; t = t->next) {
    if (t->id == id) {
      unlink_and_close(t);
      return 0;
    }
  }
  return ACCEL_ENOENT;
}

void rt_timers_stop_all(accel_actor *cell) {
  while (cell->timers)
    unlink_and_close(cell->timers);
}
