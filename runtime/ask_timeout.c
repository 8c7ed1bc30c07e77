/* An ask with a deadline (runtime.h: accel_ask_timeout): the ask's future completes with
 * ACCEL_ETIMEDOUT unless the reply came first. A timer on the loop does it; the future's
 * `then` callback, which runs once whichever completes it, ends the timer, so nothing lingers
 * for the length of the timeout after a quick reply. */
#include "runtime/alloc.h"
#include "runtime/rt.h"

typedef struct ask_timer {
  rt_task task; /* first: posted to the loop to start the timer */
  rt_list link; /* in rt->ask_timers while the timer runs */
  uv_timer_t timer;
  accel_runtime *rt;
  accel_future *f; /* one reference, released with the timer */
  uint64_t ms;
} ask_timer;

static void timer_closed(uv_handle_t *h) {
  ask_timer *t = h->data;
  accel_future_release(t->f);
  rt_free(t);
}

static void timed_out(uv_timer_t *h) {
  ask_timer *t = h->data;
  (void)accel_future_complete(t->f, ACCEL_ETIMEDOUT, NULL, NULL); /* EALREADY: replied */
}

/* The future completed (reply or timeout): the timer goes. */
static void settled(accel_future *f, int status, void *arg) {
  ask_timer *t = arg;
  rt_list_remove(&t->link);
  uv_timer_stop(&t->timer);
  uv_close((uv_handle_t *)&t->timer, timer_closed);
}

/* On the loop thread: uv handles are the loop's. */
static void start_timer(rt_task *task) {
  ask_timer *t = (ask_timer *)task;
  uv_timer_init(&t->rt->loops[0].loop, &t->timer); /* loop 0 runs `then` callbacks */
  t->timer.data = t;
  uv_timer_start(&t->timer, timed_out, t->ms, 0);
  rt_list_push_back(&t->rt->ask_timers, &t->link);
  if (accel_future_then(t->f, settled, t) != 0) /* no memory for the callback: end it now */
    settled(t->f, 0, t);
}

void rt_ask_timers_close(accel_runtime *rt) {
  RT_LIST_FOR_EACH(ask_timer, t, &rt->ask_timers, link)
  (void)accel_future_complete(t->f, ACCEL_ECLOSED, NULL, NULL);
}

int accel_ask_timeout(accel_runtime *rt, accel_ref to, const accel_msg *msg, uint64_t timeout_ms,
                      accel_future **out) {
  if (rt == NULL || msg == NULL || out == NULL || timeout_ms == 0)
    return ACCEL_EINVAL;
  ask_timer *t = rt_calloc(1, sizeof *t);
  if (t == NULL)
    return ACCEL_ENOMEM;
  accel_future *f;
  int rc = accel_ask(rt, to, msg, &f);
  if (rc != 0) {
    rt_free(t);
    return rc;
  }
  accel_future_retain(f);
  t->rt = rt;
  t->f = f;
  t->ms = timeout_ms;
  t->task.fn_ = start_timer;
  rt_post_loop_thread(rt, &t->task);
  *out = f;
  return 0;
}
