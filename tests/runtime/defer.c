/* Work deferred to the end of a loop's iteration (runtime/defer.h): refused off the loop; on
 * it, run after the callback that queued it and before the loop sleeps, in queueing order,
 * what a deferred item queues running in the same round. */
#include <stdatomic.h>
#include <stdbool.h>

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

static const test_case tests[] = {
    TEST_CASE(deferred_work_runs_after_the_callback_in_order),
};
TEST_MAIN(tests)
