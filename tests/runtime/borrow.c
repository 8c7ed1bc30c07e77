/* Turns run by a client thread while the loop sleeps (runtime/loop.h: rt_tell_and_run):
 *   - a send from a client thread runs the actor on that thread when the loop sleeps
 *     (counted in rt_borrowed_turns), and on the loop thread otherwise;
 *   - what such a turn leaves the loop still happens: a `then` callback (on the loop thread,
 *     never the client's), a timer, a work item's result;
 *   - with borrowing off every turn runs on the loop thread;
 *   - actors run one at a time while several client threads send at once (a plain counter in
 *     the actor's state; ThreadSanitizer checks the hand-offs in CI);
 *   - the loop sleeps (token released) only where uv_run would block: a prepare handle that an
 *     I/O callback starts runs before the sleep (acceld flushes its replies so). */
#include <stdlib.h>

#include "runtime/loop.h"
#include "util.h"

enum { MSG_NOTE = MSG_FIRST_LOCAL, MSG_COUNT, MSG_WORKED };
enum { ACT_NONE, ACT_THEN, ACT_TIMER, ACT_WORK };

static pthread_t loop_thread, noted_on;
static gate noted, acted;
static accel_future *then_future;
static pthread_t then_on;
static uint64_t count_target;

typedef struct counter {
  uint64_t n; /* plain: only the token's holder touches it */
} counter;

static int work_fn(void *data) {
  return 7;
}

static void act(accel_actor *self, uint64_t what) {
  switch (what) {
  case ACT_THEN:
    CHECK_OK(accel_future_complete(then_future, 0, NULL, NULL));
    break;
  case ACT_TIMER:
    CHECK_OK(accel_timer_start(self, 20, 0, MSG_TICK, 0, NULL));
    break;
  case ACT_WORK:
    CHECK_OK(accel_work_submit(self, work_fn, NULL, NULL, MSG_WORKED));
    break;
  default:
    gate_signal(&acted);
  }
}

static int receive(accel_actor *self, void *state, accel_msg *msg) {
  counter *c = state;
  switch (msg->type) {
  case MSG_NOTE:
    noted_on = pthread_self();
    gate_signal(&noted);
    act(self, msg->arg);
    break;
  case MSG_TICK:
    CHECK(pthread_equal(pthread_self(), loop_thread));
    gate_signal(&acted);
    break;
  case MSG_WORKED:
    CHECK_EQ(msg->arg, 7);
    gate_signal(&acted);
    break;
  case MSG_COUNT:
    if (++c->n == count_target)
      gate_signal(&acted);
    break;
  }
  return 0;
}

static const accel_behavior note_b = {
    .name = "noter", .state_size = sizeof(counter), .receive = receive};

static void on_then(accel_future *f, int status, void *arg) {
  then_on = pthread_self();
  gate_signal(&acted);
}

static void record_loop_thread(accel_task *t) {
  loop_thread = pthread_self();
  gate_signal(&noted);
}

static accel_runtime *rt;
static accel_ref noter;
static unsigned notes, acts;

static void setup(void) {
  gate_init(&noted);
  gate_init(&acted);
  notes = acts = 0;
  rt = runtime_started();
  noter = spawn_ok(rt, NULL, &note_b, NULL, NULL);
  static accel_task t;
  accel_post(rt, &t, record_loop_thread);
  CHECK_EQ(gate_wait(&noted, ++notes, 20000), 0);
}

static void teardown(void) {
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&noted);
  gate_destroy(&acted);
}

/* One note with action `what` after a pause (the loop falls asleep); waits for the action to
 * be done wherever it ran. True if the note ran on this thread. */
static bool note_once(uint64_t what) {
  test_sleep_ms(5);
  if (what == ACT_THEN) {
    CHECK_OK(accel_future_create(rt, &then_future));
    CHECK_OK(accel_future_then(then_future, on_then, NULL));
  }
  accel_msg m = msg_make(MSG_NOTE, what);
  CHECK_OK(rt_tell_and_run(rt, noter, &m));
  CHECK_EQ(gate_wait(&noted, ++notes, 20000), 0);
  CHECK_EQ(gate_wait(&acted, ++acts, 5000), 0); /* the loop was woken for what it must do */
  if (what == ACT_THEN) {
    CHECK(pthread_equal(then_on, loop_thread));
    accel_future_release(then_future);
  }
  return pthread_equal(noted_on, pthread_self());
}

/* Notes until one ran on this thread (the loop slept), at most 100. */
static void note_until_borrowed(uint64_t what) {
  uint64_t before = rt_borrowed_turns(rt);
  for (int i = 0; i < 100; i++)
    if (note_once(what)) {
      CHECK(rt_borrowed_turns(rt) > before);
      return;
    }
  TEST_FAIL("100 sends, none ran on the sending thread");
}

TEST(a_send_runs_on_the_sender_while_the_loop_sleeps) {
  setup();
  note_until_borrowed(ACT_NONE);
  teardown();
}

TEST(then_callbacks_of_a_borrowed_turn_run_on_the_loop_thread) {
  setup();
  note_until_borrowed(ACT_THEN);
  teardown();
}

TEST(a_timer_started_in_a_borrowed_turn_fires) {
  setup();
  note_until_borrowed(ACT_TIMER);
  teardown();
}

TEST(work_submitted_in_a_borrowed_turn_comes_back) {
  setup();
  note_until_borrowed(ACT_WORK);
  teardown();
}

TEST(with_borrowing_off_the_loop_thread_runs_every_turn) {
  setup();
  rt_borrow_disable(rt);
  for (int i = 0; i < 20; i++)
    CHECK(!note_once(ACT_NONE));
  CHECK_EQ(rt_borrowed_turns(rt), 0);
  teardown();
}

enum { SENDERS = 4 };

static void *send_counts(void *arg) {
  uint64_t n = *(uint64_t *)arg;
  accel_msg m = msg_make(MSG_COUNT, 0);
  for (uint64_t i = 0; i < n; i++) {
    int rc;
    while ((rc = rt_tell_and_run(rt, noter, &m)) == ACCEL_EBUSY)
      test_sleep_ms(1);
    CHECK_OK(rc);
    if (i % 64 == 0)
      test_sleep_ms(0); /* let the loop fall asleep now and then */
  }
  return NULL;
}

TEST(senders_on_many_threads_run_actors_one_at_a_time) {
  setup();
  uint64_t per = (uint64_t)test_scaled(20000, 500);
  count_target = per * SENDERS;
  pthread_t t[SENDERS];
  for (int i = 0; i < SENDERS; i++)
    CHECK_EQ(pthread_create(&t[i], NULL, send_counts, &per), 0);
  for (int i = 0; i < SENDERS; i++)
    CHECK_EQ(pthread_join(t[i], NULL), 0);
  CHECK_EQ(gate_wait(&acted, 1, 20000), 0);
  printf("  %" PRIu64 " sends, %" PRIu64 " turns on the senders' threads\n", count_target,
         rt_borrowed_turns(rt));
  teardown();
}

/* ---- the loop's phases around its sleep ---- */

static uv_async_t poke;
static uv_prepare_t flush;

static void on_flush(uv_prepare_t *h) {
  uv_prepare_stop(h);
  gate_signal(&acted);
}

static void on_poke(uv_async_t *h) {
  uv_prepare_start(&flush, on_flush); /* from the poll phase, as acceld's replies are queued */
}

static void open_poke(accel_task *t) {
  uv_loop_t *l = rt_uv_loop(rt);
  CHECK_EQ(uv_async_init(l, &poke, on_poke), 0);
  CHECK_EQ(uv_prepare_init(l, &flush), 0);
  gate_signal(&noted);
}

static void close_poke(accel_task *t) {
  uv_close((uv_handle_t *)&poke, NULL);
  uv_close((uv_handle_t *)&flush, NULL);
  gate_signal(&noted);
}

/* A sleep between two uv_run calls would leave the prepare phase for after the next wake-up:
 * this waited for ever (acceld never answered). */
TEST(a_prepare_started_by_an_io_callback_runs_before_the_loop_sleeps) {
  setup();
  static accel_task open_t, close_t;
  accel_post(rt, &open_t, open_poke);
  CHECK_EQ(gate_wait(&noted, ++notes, 20000), 0);
  for (int i = 0; i < 5; i++) {
    test_sleep_ms(5); /* the loop falls asleep */
    CHECK_EQ(uv_async_send(&poke), 0);
    CHECK_EQ(gate_wait(&acted, ++acts, 5000), 0);
  }
  accel_post(rt, &close_t, close_poke);
  CHECK_EQ(gate_wait(&noted, ++notes, 20000), 0);
  teardown();
}

static const test_case tests[] = {
    TEST_CASE(a_send_runs_on_the_sender_while_the_loop_sleeps),
    TEST_CASE(then_callbacks_of_a_borrowed_turn_run_on_the_loop_thread),
    TEST_CASE(a_timer_started_in_a_borrowed_turn_fires),
    TEST_CASE(work_submitted_in_a_borrowed_turn_comes_back),
    TEST_CASE(with_borrowing_off_the_loop_thread_runs_every_turn),
    TEST_CASE(senders_on_many_threads_run_actors_one_at_a_time),
    TEST_CASE(a_prepare_started_by_an_io_callback_runs_before_the_loop_sleeps),
};

TEST_MAIN(tests)
