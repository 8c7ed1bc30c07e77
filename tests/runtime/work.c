/* The worker pool: work runs off the loop thread; its result comes back as a message
 * {type, arg = result, data}; data the receiver leaves is dropped; many works all come back; if
 * the incarnation is gone (stopped, restarted) drop(data) runs on the loop instead; shutdown
 * waits for work in flight. */
#include "util.h"

enum { MSG_DONE = MSG_FIRST_LOCAL, MSG_FAIL, MSG_RESTARTED, MSG_SUBMITTED };

static accel_runtime *the_rt;
static atomic_int work_on_loop, works_run;
static pthread_t loop_thread;
static atomic_int work_on_loop_thread;

static int kick_on_start(accel_actor *self, void *state, void *arg) {
  tell_self(self, MSG_KICK, 0);
  return 0;
}

static void note_work_thread(void) {
  atomic_fetch_add(&works_run, 1);
  if (accel_runtime_on_loop(the_rt))
    atomic_store(&work_on_loop, 1);
  if (pthread_equal(pthread_self(), loop_thread))
    atomic_store(&work_on_loop_thread, 1);
}

static int work_returning_value(void *data) {
  note_work_thread();
  return (int)((counted *)data)->value;
}

static void reset_work_records(void) {
  counted_reset();
  atomic_store(&work_on_loop, 0);
  atomic_store(&work_on_loop_thread, 0);
  atomic_store(&works_run, 0);
  loop_thread = pthread_self(); /* these tests run the loop on the calling thread */
}

static void run_actor(const accel_behavior *b) {
  the_rt = runtime_new();
  spawn_ok(the_rt, NULL, b, NULL, NULL);
  runtime_run_then_destroy(the_rt, NULL);
  the_rt = NULL;
}

/* ---- results come back as messages ---- */

static int results_seen;

static void check_result(accel_msg *msg) {
  counted *c = msg->data;
  CHECK(c != NULL);
  CHECK_EQ((int64_t)msg->arg, (int64_t)(int)c->value);
  CHECK_EQ(accel_runtime_on_loop(the_rt), 1);
  if (c->value == 42) { /* take it */
    counted_free(c);
    msg->data = NULL;
  } /* else leave it: the runtime drops it after the call */
}

static int result_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_KICK) {
    CHECK_OK(
        accel_work_submit(self, work_returning_value, counted_new(42), counted_drop, MSG_DONE));
    CHECK_OK(accel_work_submit(self, work_returning_value, counted_new((uint64_t)-7), counted_drop,
                               MSG_DONE));
  } else if (msg->type == MSG_DONE) {
    check_result(msg);
    if (++results_seen == 2)
      stop_runtime_from(self);
  }
  return 0;
}

static const accel_behavior result_b = {
    .name = "result", .start = kick_on_start, .receive = result_receive};

TEST(work_runs_off_the_loop_and_its_result_comes_back) {
  reset_work_records();
  results_seen = 0;
  run_actor(&result_b);
  CHECK_EQ(results_seen, 2);
  CHECK_EQ(atomic_load(&works_run), 2);
  CHECK_EQ(atomic_load(&work_on_loop), 0);
  CHECK_EQ(atomic_load(&work_on_loop_thread), 0);
  CHECK_EQ(counted_dropped(), 1); /* the result whose data the receiver left */
  CHECK_EQ(counted_live(), 0);
}

/* ---- many works, no data ---- */

enum { MANY_WORKS = 32 };
static int many_seen[MANY_WORKS], many_total;

static int indexed_work(void *data) {
  note_work_thread();
  test_sleep_ms(2);
  return (int)(intptr_t)data;
}

static int many_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_KICK) {
    for (intptr_t i = 0; i < MANY_WORKS; i++)
      CHECK_OK(accel_work_submit(self, indexed_work, (void *)i, NULL, MSG_DONE));
    return 0;
  }
  CHECK_EQ(msg->type, MSG_DONE);
  CHECK_LT(msg->arg, MANY_WORKS);
  CHECK_PTR_EQ(msg->data, (void *)(intptr_t)msg->arg);
  msg->data = NULL; /* not a pointer: nothing to drop */
  many_seen[msg->arg]++;
  if (++many_total == MANY_WORKS)
    stop_runtime_from(self);
  return 0;
}

static const accel_behavior many_b = {
    .name = "many", .start = kick_on_start, .receive = many_receive};

TEST(many_works_all_come_back) {
  reset_work_records();
  memset(many_seen, 0, sizeof many_seen);
  many_total = 0;
  run_actor(&many_b);
  for (int i = 0; i < MANY_WORKS; i++)
    CHECK_EQ(many_seen[i], 1);
  CHECK_EQ(atomic_load(&work_on_loop), 0);
}

/* ---- the incarnation is gone when the work finishes ---- */

static gate work_gate;
static atomic_int gone_drops, gone_results, gone_drop_on_loop;

static int gated_work(void *data) {
  note_work_thread();
  CHECK_EQ(gate_wait(&work_gate, 1, 20000), 0);
  return 1;
}

static void gone_drop(void *data) {
  atomic_fetch_add(&gone_drops, 1);
  atomic_store(&gone_drop_on_loop, accel_runtime_on_loop(the_rt));
  counted_free(data);
  accel_runtime_stop(the_rt);
}

static int gone_worker_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_DONE) {
    atomic_fetch_add(&gone_results, 1);
    return 0;
  }
  CHECK_OK(accel_work_submit(self, gated_work, counted_new(1), gone_drop, MSG_DONE));
  if (msg->type == MSG_FAIL)
    return ACCEL_EIO;
  CHECK_OK(tell_arg(accel_actor_runtime(self), accel_parent(self), MSG_SUBMITTED, 0));
  return 0;
}

static void gone_worker_post_restart(accel_actor *self, void *state, int reason) {
  CHECK_OK(tell_arg(accel_actor_runtime(self), accel_parent(self), MSG_RESTARTED, 0));
}

static const accel_behavior gone_worker_b = {
    .name = "worker", .receive = gone_worker_receive, .post_restart = gone_worker_post_restart};

static int gone_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  const uint32_t *how = state;
  if (msg->type == MSG_KICK) {
    accel_ref w = spawn_ok(rt, self, &gone_worker_b, NULL, NULL);
    CHECK_OK(tell_arg(rt, w, *how, 0));
  } else if (msg->type == MSG_SUBMITTED) {
    CHECK_OK(accel_stop(rt, msg->sender));
  } else if (msg->type == MSG_RESTARTED) {
    gate_signal(&work_gate); /* the old incarnation is gone: let the work finish */
  }
  return 0;
}

static void gone_driver_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  gate_signal(&work_gate);
}

static int gone_driver_start(accel_actor *self, void *state, void *arg) {
  *(uint32_t *)state = (uint32_t)(uintptr_t)arg;
  return kick_on_start(self, state, arg);
}

static const accel_behavior gone_driver_b = {.name = "driver",
                                             .state_size = sizeof(uint32_t),
                                             .start = gone_driver_start,
                                             .receive = gone_driver_receive,
                                             .child_exit = gone_driver_child_exit};

/* `how`: MSG_KICK (the worker submits, then is stopped) or MSG_FAIL (it submits and fails). */
static void check_drop_when_gone(uint32_t how) {
  reset_work_records();
  gate_init(&work_gate);
  atomic_store(&gone_drops, 0);
  atomic_store(&gone_results, 0);
  atomic_store(&gone_drop_on_loop, 0);
  the_rt = runtime_new();
  spawn_ok(the_rt, NULL, &gone_driver_b, (void *)(uintptr_t)how, NULL);
  runtime_run_then_destroy(the_rt, NULL); /* gone_drop stops the runtime */
  the_rt = NULL;
  CHECK_EQ(atomic_load(&gone_drops), 1);
  CHECK_EQ(atomic_load(&gone_drop_on_loop), 1);
  CHECK_EQ(atomic_load(&gone_results), 0);
  CHECK_EQ(counted_live(), 0);
  gate_destroy(&work_gate);
}

TEST(work_of_a_stopped_actor_drops_its_data) {
  check_drop_when_gone(MSG_KICK);
}
TEST(work_of_a_restarted_incarnation_drops_its_data) {
  check_drop_when_gone(MSG_FAIL);
}

/* ---- shutdown waits for work in flight ---- */

static atomic_int slow_finished;

static int slow_work(void *data) {
  test_sleep_ms(100);
  atomic_store(&slow_finished, 1);
  return 0;
}

static int slow_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_KICK) {
    CHECK_OK(accel_work_submit(self, slow_work, counted_new(0), counted_drop, MSG_DONE));
    stop_runtime_from(self);
  }
  return 0;
}

static const accel_behavior slow_b = {
    .name = "slow", .start = kick_on_start, .receive = slow_receive};

TEST(shutdown_waits_for_work_in_flight) {
  reset_work_records();
  atomic_store(&slow_finished, 0);
  the_rt = runtime_new();
  spawn_ok(the_rt, NULL, &slow_b, NULL, NULL);
  CHECK_OK(accel_runtime_run(the_rt));
  CHECK_EQ(atomic_load(&slow_finished), 1);
  CHECK_EQ(counted_dropped(), 1); /* the actor was gone: its data was dropped */
  accel_runtime_destroy(the_rt);
  the_rt = NULL;
  CHECK_EQ(counted_live(), 0);
}

static const test_case tests[] = {
    TEST_CASE(work_runs_off_the_loop_and_its_result_comes_back),
    TEST_CASE(many_works_all_come_back),
    TEST_CASE(work_of_a_stopped_actor_drops_its_data),
    TEST_CASE(work_of_a_restarted_incarnation_drops_its_data),
    TEST_CASE(shutdown_waits_for_work_in_flight),
};

TEST_MAIN(tests)
