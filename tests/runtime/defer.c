/* Work deferred to the end of a loop's iteration (runtime/defer.h): refused off the loop; on
 * it, run after the callback that queued it and before the loop sleeps, in queueing order,
 * what a deferred item queues running in the same round. And turns back to back (loop.c
 * run_turns): a loop whose work never ends still runs its deferred work and its timers,
 * within the span, or at once after a turn that asked for the poll (rt_poll_soon) or started a
 * timer due at once. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/defer.h"
#include "util.h"

typedef struct item {
  rt_deferred d;
  int id;
  int *log;          /* the order items ran in */
  atomic_int *nlog;  /* written by the loop thread alone */
  struct item *then; /* queued by this one's run */
} item;

static void item_run(rt_deferred *d) {
  item *it = (item *)d;
  int n = atomic_load(it->nlog);
  it->log[n] = it->id;
  atomic_store(it->nlog, n + 1); /* publishes log[n] to the test's thread */
  if (it->then != NULL)
    (void)rt_defer_before_poll(&it->then->d);
}

typedef struct on_loop {
  accel_task task;
  item a, b, c;
  int log[8];
  atomic_int nlog;
  bool queued, ran_inside;
  atomic_bool done;
} on_loop;

static void queue_two(accel_task *t) {
  on_loop *o = (on_loop *)t;
  o->queued = rt_defer_before_poll(&o->a.d) && rt_defer_before_poll(&o->b.d);
  o->ran_inside = atomic_load(&o->nlog) != 0; /* nothing may run before this callback returns */
}

static void look(accel_task *t) {
  on_loop *o = (on_loop *)t;
  atomic_store(&o->done, true);
}

TEST(deferred_work_runs_after_the_callback_in_order) {
  rt_deferred off = {.run = NULL};
  CHECK(!rt_defer_before_poll(&off)); /* not a loop's thread */
  accel_runtime *rt = NULL;
  CHECK_OK(accel_runtime_create(&rt, NULL));
  CHECK_OK(accel_runtime_start(rt));
  on_loop o = {0};
  o.a = (item){.d.run = item_run, .id = 1, .log = o.log, .nlog = &o.nlog, .then = &o.c};
  o.b = (item){.d.run = item_run, .id = 2, .log = o.log, .nlog = &o.nlog};
  o.c = (item){.d.run = item_run, .id = 3, .log = o.log, .nlog = &o.nlog};
  accel_post(rt, &o.task, queue_two);
  TEST_WAIT_FOR(atomic_load(&o.nlog) == 3, 10); /* with nothing else for the loop to do */
  CHECK(o.queued);
  CHECK(!o.ran_inside);
  CHECK_EQ(o.log[0], 1);
  CHECK_EQ(o.log[1], 2);
  CHECK_EQ(o.log[2], 3);         /* queued by 1's run: the same round, after what was queued */
  accel_post(rt, &o.task, look); /* the loop goes on afterwards */
  TEST_WAIT_FOR(atomic_load(&o.done), 10);
  CHECK_EQ(atomic_load(&o.nlog), 3); /* each ran once */
  accel_runtime_stop(rt);
  CHECK_OK(accel_runtime_join(rt));
  accel_runtime_destroy(rt);
}

/* ---- a loop that never runs out of work ---- */

static accel_runtime *busy_rt;

typedef struct busy {
  accel_task task;
  atomic_bool stop;
  atomic_ulong runs;
  atomic_bool ask_poll; /* each run calls rt_poll_soon */
  bool ask_poll_later;  /* set ask_poll once the deferred item has run */
  item deferred;        /* queued by the first run */
  atomic_int nlog;      /* the deferred item's log */
  int log[1];
} busy;

static void busy_run(accel_task *t) {
  busy *b = (busy *)t;
  unsigned long n = atomic_fetch_add(&b->runs, 1);
  if (n == 0)
    (void)rt_defer_before_poll(&b->deferred.d);
  if (atomic_load(&b->ask_poll))
    rt_poll_soon();
  if (!atomic_load(&b->stop))
    accel_post(busy_rt, t, busy_run); /* the next turn: the loop always has work */
}

static struct ticker {
  atomic_bool fired;
  uint64_t fired_ns; /* written before `fired` */
} tick;

static uint64_t tick_delay_ms = 2;

static int ticker_start(accel_actor *self, void *state, void *arg) {
  uint64_t id;
  return accel_timer_start(self, tick_delay_ms, 0, MSG_TICK, 0, &id);
}

static int ticker_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_TICK && !atomic_load(&tick.fired)) {
    tick.fired_ns = test_now_ns();
    atomic_store(&tick.fired, true);
  }
  return 0;
}

static const accel_behavior ticker_b = {
    .name = "ticker", .start = ticker_start, .receive = ticker_receive};

/* Starts a runtime (span: ACCEL_TURN_SPAN_US for it, NULL for the default) and keeps its loop
 * busy with a task that posts itself again at every run; checks that the item its first run
 * deferred has run though the work never ended; then, asking for the poll from each run if
 * b->ask_poll_later, starts a 2 ms timer and returns how long after that it fired. */
static uint64_t timer_delay_while_busy(const char *span, busy *b, uint64_t *max_stall_ns) {
  const char *env = getenv("ACCEL_TURN_SPAN_US");
  char *before = env ? strdup(env) : NULL; /* setenv may free what getenv gave */
  if (span)
    setenv("ACCEL_TURN_SPAN_US", span, 1);
  CHECK_OK(accel_runtime_create(&busy_rt, NULL));
  if (before)
    setenv("ACCEL_TURN_SPAN_US", before, 1);
  else
    unsetenv("ACCEL_TURN_SPAN_US");
  free(before);
  CHECK_OK(accel_runtime_start(busy_rt));
  b->deferred = (item){.d.run = item_run, .id = 1, .log = b->log, .nlog = &b->nlog};
  accel_post(busy_rt, &b->task, busy_run);
  TEST_WAIT_FOR(atomic_load(&b->runs) > 10, 1); /* turning back to back, early in the span */
  for (int ms = 0; ms < 500 && atomic_load(&b->nlog) == 0; ms++)
    test_sleep_ms(1);
  CHECK_EQ(atomic_load(&b->nlog), 1); /* run between two turns, not at the span's end */
  if (b->ask_poll_later)
    atomic_store(&b->ask_poll, true);
  atomic_store(&tick.fired, false);
  uint64_t t0 = test_now_ns();
  spawn_ok(busy_rt, NULL, &ticker_b, NULL, NULL);
  TEST_WAIT_FOR(atomic_load(&tick.fired), 1);
  uint64_t delay = tick.fired_ns - t0;
  if (max_stall_ns)
    *max_stall_ns = accel_runtime_max_stall_ns(busy_rt, 0); /* the longest span so far */
  atomic_store(&b->stop, true);
  accel_runtime_stop(busy_rt);
  CHECK_OK(accel_runtime_join(busy_rt));
  accel_runtime_destroy(busy_rt);
  CHECK_EQ(atomic_load(&b->nlog), 1); /* once */
  return delay;
}

TEST(a_loop_busy_without_end_runs_its_timers_and_deferred_work) {
  static busy b;
  uint64_t delay = timer_delay_while_busy(NULL, &b, NULL);
  CHECK(delay < 2000000000ull); /* the span is 20 us: turns never ran back to back for long */
}

/* With a span of a second (the most ACCEL_TURN_SPAN_US takes), deferred work still runs
 * between turns, and only turns that ask for the poll let the timer through before the span's
 * end; without asking (the control), turns ran back to back for the whole second (the loop's
 * longest stall: wherever in a span the timer started, it waited for that span's end). */
TEST(a_turn_that_asks_for_the_poll_ends_the_turns_back_to_back) {
  static busy asking = {.ask_poll_later = true}, control;
  uint64_t delay = timer_delay_while_busy("1000000", &asking, NULL);
  CHECK(delay < 500000000ull); /* without rt_poll_soon: the span's rest, about 1 s */
  uint64_t stall = 0;
  (void)timer_delay_while_busy("1000000", &control, &stall);
  CHECK(stall >= 900000000ull); /* the 1 s span applied: the test above can fail */
}

/* A timer due at once needs the loop's next timer phase: starting one ends the turns. */
TEST(a_timer_due_at_once_ends_the_turns_back_to_back) {
  static busy b;
  tick_delay_ms = 0;
  uint64_t delay = timer_delay_while_busy("1000000", &b, NULL);
  tick_delay_ms = 2;
  CHECK(delay < 500000000ull); /* else the span's rest, about 1 s (the test above's control) */
}

static const test_case tests[] = {
    TEST_CASE(deferred_work_runs_after_the_callback_in_order),
    TEST_CASE(a_loop_busy_without_end_runs_its_timers_and_deferred_work),
    TEST_CASE(a_turn_that_asks_for_the_poll_ends_the_turns_back_to_back),
    TEST_CASE(a_timer_due_at_once_ends_the_turns_back_to_back),
};
TEST_MAIN(tests)
