/* Asks and futures: accel_reply with a value; a second reply is EALREADY; implicit completion
 * with receive's return code; deferred replies (taken, completed later from a timer or another
 * thread); `then` on the loop thread (also after release, also when already complete); wait
 * with a timeout and on the loop thread (EDEADLK); poll; double completion; the value's drop runs
 * exactly once; notify_fd writes each token once. */
#include "util.h"

enum {
  MSG_REPLY_VALUE = MSG_FIRST_LOCAL, /* accel_reply(0, counted(arg)) */
  MSG_REPLY_TWICE,                   /* replies, then checks a second reply is EALREADY */
  MSG_REPLY_STATUS,                  /* accel_reply(-arg, NULL), then returns 0 */
  MSG_RETURN,                        /* no reply: returns -arg */
  MSG_DEFER_TIMER,                   /* takes the reply, completes it from a timer */
  MSG_DEFER_THREAD,                  /* takes the reply, completes it from a new thread */
  MSG_WAIT_ON_LOOP,                  /* checks accel_future_wait on the loop thread */
};

static accel_runtime *the_rt;
static atomic_int reply_twice_checked;

/* ---- the server: one behaviour answering every kind of ask ---- */

typedef struct server_state {
  accel_future *deferred[8];
  uint64_t deferred_arg[8];
  int n_deferred;
} server_state;

static void complete_with_counted(accel_future *f, uint64_t value) {
  counted *c = counted_new(value);
  CHECK_OK(accel_future_complete(f, 0, c, counted_drop));
  accel_future_release(f);
}

static void *complete_later(void *arg) {
  accel_future *f = arg;
  test_sleep_ms(20);
  complete_with_counted(f, 77);
  return NULL;
}

static pthread_t completer; /* joined by the test */

static void defer_to_thread(accel_msg *msg) {
  accel_future *f = accel_msg_take_reply(msg);
  CHECK(f != NULL);
  CHECK_EQ(pthread_create(&completer, NULL, complete_later, f), 0);
}

static void defer_to_timer(accel_actor *self, server_state *s, accel_msg *msg) {
  uint64_t id;
  CHECK_LT(s->n_deferred, 8);
  s->deferred_arg[s->n_deferred] = msg->arg;
  s->deferred[s->n_deferred++] = accel_msg_take_reply(msg);
  CHECK(s->deferred[s->n_deferred - 1] != NULL);
  CHECK_OK(accel_timer_start(self, 30, 0, MSG_TICK, 0, &id));
}

static void complete_deferred(server_state *s) {
  for (int i = 0; i < s->n_deferred; i++)
    complete_with_counted(s->deferred[i], s->deferred_arg[i]);
  s->n_deferred = 0;
}

static void reply_twice(accel_msg *msg) {
  CHECK_OK(accel_reply(msg, 0, counted_new(msg->arg), counted_drop));
  CHECK_ERR(accel_reply(msg, ACCEL_EIO, NULL, NULL), ACCEL_EALREADY);
  atomic_fetch_add(&reply_twice_checked, 1);
}

static void check_wait_on_loop(accel_msg *msg) {
  accel_future *pending = NULL, *done = NULL;
  CHECK_OK(accel_future_create(the_rt, &pending));
  CHECK_ERR(accel_future_wait(pending, -1), ACCEL_EDEADLK); /* at once, not forever */
  CHECK_ERR(accel_future_wait(pending, 0), ACCEL_EDEADLK);
  CHECK_OK(accel_future_create(the_rt, &done));
  CHECK_OK(accel_future_complete(done, ACCEL_ENOENT, NULL, NULL));
  CHECK_ERR(accel_future_wait(done, -1), ACCEL_ENOENT); /* complete: no need to block */
  CHECK_OK(accel_future_complete(pending, 0, NULL, NULL));
  accel_future_release(pending);
  accel_future_release(done);
  CHECK_OK(accel_reply(msg, 0, NULL, NULL));
}

static int server_receive(accel_actor *self, void *state, accel_msg *msg) {
  server_state *s = state;
  switch (msg->type) {
  case MSG_REPLY_VALUE:
    CHECK_OK(accel_reply(msg, 0, counted_new(msg->arg), counted_drop));
    return 0;
  case MSG_REPLY_TWICE:
    reply_twice(msg);
    return 0;
  case MSG_REPLY_STATUS:
    CHECK_OK(accel_reply(msg, -(int)msg->arg, NULL, NULL));
    return 0;
  case MSG_RETURN:
    return -(int)msg->arg;
  case MSG_DEFER_TIMER:
    defer_to_timer(self, s, msg);
    return 0;
  case MSG_DEFER_THREAD:
    defer_to_thread(msg);
    return 0;
  case MSG_WAIT_ON_LOOP:
    check_wait_on_loop(msg);
    return 0;
  case MSG_TICK:
    complete_deferred(s);
    return 0;
  }
  TEST_FAIL("unexpected message %u", msg->type);
}

/* Futures it took and did not complete yet are completed when it stops. */
static void server_stop(accel_actor *self, void *state) {
  server_state *s = state;
  for (int i = 0; i < s->n_deferred; i++) {
    CHECK_OK(accel_future_complete(s->deferred[i], ACCEL_ECANCELED, NULL, NULL));
    accel_future_release(s->deferred[i]);
  }
}

static const accel_behavior server_b = {.name = "server",
                                        .state_size = sizeof(server_state),
                                        .receive = server_receive,
                                        .stop = server_stop};

/* A started runtime with a server. */
static accel_ref server_up(void) {
  counted_reset();
  the_rt = runtime_started();
  return spawn_ok(the_rt, NULL, &server_b, NULL, NULL);
}

static void server_down(void) {
  runtime_stop_then_destroy(the_rt, NULL);
  the_rt = NULL;
  CHECK_EQ(counted_live(), 0);
}

static accel_future *ask_ok(accel_ref to, uint32_t type, uint64_t arg) {
  accel_msg m = msg_make(type, arg);
  accel_future *f = NULL;
  CHECK_OK(accel_ask(the_rt, to, &m, &f));
  CHECK(f != NULL);
  return f;
}

static uint64_t value_of(accel_future *f) {
  counted *c = accel_future_value(f);
  CHECK(c != NULL);
  return c->value;
}

/* ---- tests ---- */

TEST(reply_carries_status_and_value) {
  accel_ref server = server_up();
  accel_future *f = ask_ok(server, MSG_REPLY_VALUE, 5);
  CHECK_OK(accel_future_wait(f, 20000));
  CHECK_OK(accel_future_poll(f));
  CHECK_EQ(value_of(f), 5);
  CHECK_EQ(counted_dropped(), 0); /* the future owns the value until freed */
  accel_future_release(f);
  server_down();
  CHECK_EQ(counted_dropped(), 1);
}

TEST(second_reply_is_ealready) {
  atomic_store(&reply_twice_checked, 0);
  accel_ref server = server_up();
  accel_future *f = ask_ok(server, MSG_REPLY_TWICE, 9);
  CHECK_OK(accel_future_wait(f, 20000));
  CHECK_EQ(value_of(f), 9);
  accel_future_release(f);
  server_down();
  CHECK_EQ(atomic_load(&reply_twice_checked), 1);
}

TEST(reply_status_wins_over_return_code) {
  accel_ref server = server_up();
  accel_future *f = ask_ok(server, MSG_REPLY_STATUS, (uint64_t)-ACCEL_EPERM);
  CHECK_ERR(accel_future_wait(f, 20000), ACCEL_EPERM);
  CHECK(accel_future_value(f) == NULL);
  accel_future_release(f);
  server_down();
}

TEST(no_reply_completes_with_receive_return_code) {
  accel_ref server = server_up();
  accel_future *ok = ask_ok(server, MSG_RETURN, 0);
  CHECK_OK(accel_future_wait(ok, 20000));
  CHECK(accel_future_value(ok) == NULL);
  accel_future *failed = ask_ok(server, MSG_RETURN, (uint64_t)-ACCEL_ENOENT);
  CHECK_ERR(accel_future_wait(failed, 20000), ACCEL_ENOENT); /* and the server restarts */
  accel_future_release(ok);
  accel_future_release(failed);
  server_down();
}

TEST(deferred_reply_from_a_timer) {
  accel_ref server = server_up();
  accel_future *f = ask_ok(server, MSG_DEFER_TIMER, 31);
  CHECK_OK(accel_future_wait(f, 20000));
  CHECK_EQ(value_of(f), 31); /* not an implicit completion (which has no value) */
  accel_future_release(f);
  server_down();
  CHECK_EQ(counted_dropped(), 1);
}

TEST(deferred_reply_from_another_thread) {
  accel_ref server = server_up();
  accel_future *f = ask_ok(server, MSG_DEFER_THREAD, 0);
  CHECK_OK(accel_future_wait(f, 20000));
  CHECK_EQ(value_of(f), 77);
  CHECK_EQ(pthread_join(completer, NULL), 0);
  accel_future_release(f);
  server_down();
  CHECK_EQ(counted_dropped(), 1);
}

TEST(taken_reply_completed_by_the_stop_hook_on_shutdown) {
  accel_ref server = server_up();
  accel_future *f = ask_ok(server, MSG_DEFER_TIMER, 1);
  accel_runtime_stop(the_rt); /* races with the timer: either completion is fine */
  int status = accel_future_wait(f, 20000);
  CHECK(status == 0 || status == ACCEL_ECANCELED || status == ACCEL_ESTALE);
  accel_future_release(f);
  server_down();
}

/* ---- then ---- */

typedef struct then_record {
  gate ran;
  atomic_int calls, on_loop, status;
  atomic_uintptr_t future_seen, value_seen;
} then_record;

static then_record then_rec;

static void then_record_reset(void) {
  gate_init(&then_rec.ran);
  atomic_store(&then_rec.calls, 0);
  atomic_store(&then_rec.on_loop, 0);
  atomic_store(&then_rec.status, 1);
  atomic_store(&then_rec.future_seen, 0);
  atomic_store(&then_rec.value_seen, 0);
}

static void on_then(accel_future *f, int status, void *arg) {
  CHECK_PTR_EQ(arg, &then_rec);
  atomic_fetch_add(&then_rec.calls, 1);
  atomic_store(&then_rec.on_loop, accel_runtime_on_loop(the_rt));
  atomic_store(&then_rec.status, status);
  atomic_store(&then_rec.future_seen, (uintptr_t)f);
  CHECK_EQ(accel_future_poll(f), status); /* valid during the callback */
  atomic_store(&then_rec.value_seen, (uintptr_t)accel_future_value(f));
  gate_signal(&then_rec.ran);
}

static void on_then_unexpected(accel_future *f, int status, void *arg) {
  TEST_FAIL("a second then callback ran");
}

static void check_then_ran_once(accel_future *f, int status) {
  CHECK_EQ(gate_wait(&then_rec.ran, 1, 20000), 0);
  CHECK_EQ(atomic_load(&then_rec.calls), 1);
  CHECK_EQ(atomic_load(&then_rec.on_loop), 1);
  CHECK_ERR(atomic_load(&then_rec.status), status);
  CHECK_EQ(atomic_load(&then_rec.future_seen), (uintptr_t)f);
}

TEST(then_runs_on_the_loop_after_release) {
  then_record_reset();
  accel_ref server = server_up();
  accel_future *f = ask_ok(server, MSG_DEFER_TIMER, 12); /* completes ~30 ms later */
  CHECK_OK(accel_future_then(f, on_then, &then_rec));
  CHECK_ERR(accel_future_then(f, on_then_unexpected, NULL), ACCEL_EALREADY);
  accel_future_release(f); /* the callback holds its own reference */
  check_then_ran_once(f, 0);
  CHECK(atomic_load(&then_rec.value_seen) != 0);
  server_down();
  CHECK_EQ(counted_dropped(), 1);
  gate_destroy(&then_rec.ran);
}

/* Freed futures are kept for reuse while a runtime lives (runtime/future.c): one made from
 * the pool is pending, has no value, no callback, no notify fd, and works as a new one. */
TEST(a_reused_future_starts_pending_and_clean) {
  then_record_reset();
  counted_reset();
  accel_ref server = server_up();
  accel_future *f = ask_ok(server, MSG_DEFER_TIMER, 12);
  CHECK_OK(accel_future_then(f, on_then, &then_rec));
  accel_future_release(f);
  check_then_ran_once(f, 0);
  gate_destroy(&then_rec.ran);
  then_record_reset();
  /* run_then drops the callback's reference just after the callback: until then f is not
   * in the pool, and a new future is another block (kept aside, so it cannot come back). */
  accel_future *g = NULL, *aside[64];
  int naside = 0;
  for (uint64_t t0 = test_now_ms();; test_sleep_ms(1)) {
    CHECK_OK(accel_future_create(the_rt, &g));
    if (g == f)
      break;
    CHECK(naside < 64 && test_now_ms() - t0 < 10000);
    aside[naside++] = g;
  }
  while (naside > 0)
    accel_future_release(aside[--naside]);
  CHECK_ERR(accel_future_poll(g), ACCEL_EAGAIN);
  CHECK(accel_future_value(g) == NULL);
  CHECK_ERR(accel_future_wait(g, 0), ACCEL_ETIMEDOUT);
  CHECK_OK(accel_future_then(g, on_then, &then_rec)); /* no callback left from f */
  CHECK_OK(accel_future_complete(g, ACCEL_EIO, NULL, NULL));
  check_then_ran_once(g, ACCEL_EIO);
  CHECK(atomic_load(&then_rec.value_seen) == 0);
  accel_future_release(g);
  server_down();
  CHECK_EQ(counted_dropped(), 1); /* f's value, dropped once, when f was freed */
  gate_destroy(&then_rec.ran);
}

TEST(then_on_a_completed_future_runs_soon) {
  then_record_reset();
  accel_ref server = server_up();
  accel_future *f = ask_ok(server, MSG_REPLY_STATUS, (uint64_t)-ACCEL_EIO);
  CHECK_ERR(accel_future_wait(f, 20000), ACCEL_EIO);
  CHECK_OK(accel_future_then(f, on_then, &then_rec));
  check_then_ran_once(f, ACCEL_EIO);
  CHECK_ERR(accel_future_then(f, on_then_unexpected, NULL), ACCEL_EALREADY);
  accel_future_release(f);
  server_down();
  gate_destroy(&then_rec.ran);
}

/* The usual pattern: the owner's reference is released inside the callback. */
static void release_in_then(accel_future *f, int status, void *arg) {
  CHECK_OK(status);
  CHECK(accel_future_value(f) != NULL);
  accel_future_release(f);
  gate_signal(arg);
}

TEST(release_inside_then_drops_the_value_once) {
  gate ran;
  gate_init(&ran);
  accel_ref server = server_up();
  for (uint64_t i = 0; i < 10; i++) {
    accel_future *f = ask_ok(server, i % 2 ? MSG_REPLY_VALUE : MSG_DEFER_TIMER, i);
    CHECK_OK(accel_future_then(f, release_in_then, &ran));
  }
  CHECK_EQ(gate_wait(&ran, 10, 20000), 0);
  server_down();
  CHECK_EQ(counted_dropped(), 10);
  gate_destroy(&ran);
}

TEST(reply_to_a_released_future_is_dropped_once) {
  accel_ref server = server_up();
  for (uint64_t i = 0; i < 10; i++)
    accel_future_release(ask_ok(server, i % 2 ? MSG_REPLY_VALUE : MSG_DEFER_TIMER, i));
  accel_future *last = ask_ok(server, MSG_DEFER_TIMER, 99); /* after the others */
  CHECK_OK(accel_future_wait(last, 20000));
  accel_future_release(last);
  server_down();
  CHECK_EQ(counted_dropped(), 11);
}

/* ---- the promise side: create, complete, wait, poll ---- */

static void *complete_after_20ms(void *arg) {
  test_sleep_ms(20);
  CHECK_OK(accel_future_complete(arg, ACCEL_EIO, counted_new(3), counted_drop));
  return NULL;
}

TEST(wait_times_out_while_pending_then_returns_status) {
  counted_reset();
  the_rt = runtime_started();
  accel_future *f = NULL;
  pthread_t th;
  CHECK_OK(accel_future_create(the_rt, &f));
  CHECK_ERR(accel_future_poll(f), ACCEL_EAGAIN);
  CHECK(accel_future_value(f) == NULL);
  CHECK_ERR(accel_future_wait(f, 0), ACCEL_ETIMEDOUT);
  uint64_t t0 = test_now_ms();
  CHECK_ERR(accel_future_wait(f, 50), ACCEL_ETIMEDOUT);
  CHECK_GE(test_now_ms() - t0, 40); /* it did wait (a lower bound, with slack) */
  CHECK_EQ(pthread_create(&th, NULL, complete_after_20ms, f), 0);
  CHECK_ERR(accel_future_wait(f, -1), ACCEL_EIO);
  CHECK_EQ(pthread_join(th, NULL), 0);
  CHECK_ERR(accel_future_poll(f), ACCEL_EIO);
  CHECK_ERR(accel_future_wait(f, 0), ACCEL_EIO);
  CHECK_EQ(value_of(f), 3);
  accel_future_release(f);
  server_down();
  CHECK_EQ(counted_dropped(), 1);
}

TEST(double_complete_is_ealready_and_keeps_the_second_value) {
  counted_reset();
  the_rt = runtime_new();
  accel_future *f = NULL;
  CHECK_OK(accel_future_create(the_rt, &f));
  CHECK_OK(accel_future_complete(f, 0, counted_new(1), counted_drop));
  counted *second = counted_new(2);
  CHECK_ERR(accel_future_complete(f, ACCEL_EIO, second, counted_drop), ACCEL_EALREADY);
  CHECK_OK(accel_future_poll(f)); /* the first completion stands */
  CHECK_EQ(value_of(f), 1);
  CHECK_EQ(counted_dropped(), 0);
  counted_free(second); /* still ours */
  accel_future_release(f);
  CHECK_EQ(counted_dropped(), 1);
  accel_runtime_destroy(the_rt);
  CHECK_EQ(counted_live(), 0);
}

TEST(value_is_dropped_once_when_the_last_reference_goes) {
  counted_reset();
  the_rt = runtime_new();
  accel_future *f = NULL;
  CHECK_OK(accel_future_create(the_rt, &f));
  CHECK_OK(accel_future_complete(f, 0, counted_new(8), counted_drop));
  accel_future_retain(f);
  accel_future_retain(f);
  accel_future_release(f);
  accel_future_release(f);
  CHECK_EQ(counted_dropped(), 0); /* one reference left */
  CHECK_EQ(value_of(f), 8);
  accel_future_release(f);
  CHECK_EQ(counted_dropped(), 1);
  accel_runtime_destroy(the_rt);
  CHECK_EQ(counted_live(), 0);
}

TEST(pending_future_released_without_completion_frees_cleanly) {
  the_rt = runtime_new();
  accel_future *f = NULL;
  CHECK_OK(accel_future_create(the_rt, &f));
  accel_future_release(f); /* nothing to drop; no leak under LSan/valgrind */
  accel_runtime_destroy(the_rt);
}

static void *complete_from_thread(void *arg) {
  CHECK_OK(accel_future_complete(arg, ACCEL_ETIMEDOUT, NULL, NULL));
  return NULL;
}

TEST(then_from_a_thread_completed_by_another_thread) {
  then_record_reset();
  the_rt = runtime_started();
  accel_future *f = NULL;
  pthread_t th;
  CHECK_OK(accel_future_create(the_rt, &f));
  CHECK_OK(accel_future_then(f, on_then, &then_rec));
  accel_future_release(f);
  CHECK_EQ(pthread_create(&th, NULL, complete_from_thread, f), 0);
  check_then_ran_once(f, ACCEL_ETIMEDOUT);
  CHECK_EQ(pthread_join(th, NULL), 0);
  CHECK_EQ(atomic_load(&then_rec.value_seen), 0);
  runtime_stop_then_destroy(the_rt, NULL);
  gate_destroy(&then_rec.ran);
}

/* notify_fd: each future's token arrives once on the pipe, whichever completes first, also
 * for a future already complete when registered; a second registration is EALREADY and does
 * not change the first one's token; bad arguments are EINVAL. */
TEST(notify_fd_writes_each_token_once) {
  enum { N = 64 };
  the_rt = runtime_started();
  int fds[2];
  CHECK_EQ(pipe(fds), 0);
  accel_future *fs[N];
  for (int i = 0; i < N; i++) {
    CHECK_OK(accel_future_create(the_rt, &fs[i]));
    if (i % 4 == 0)
      CHECK_OK(accel_future_complete(fs[i], -i, NULL, NULL)); /* complete before */
    CHECK_OK(accel_future_notify_fd(fs[i], fds[1], 1000u + (uint64_t)i));
    CHECK_ERR(accel_future_notify_fd(fs[i], fds[1], 5), ACCEL_EALREADY);
    CHECK_ERR(accel_future_then(fs[i], on_then_unexpected, NULL), ACCEL_EALREADY);
  }
  CHECK_ERR(accel_future_notify_fd(NULL, fds[1], 1), ACCEL_EINVAL);
  CHECK_ERR(accel_future_notify_fd(fs[0], -1, 1), ACCEL_EINVAL);
  for (int i = N - 1; i >= 0; i--) {
    if (i % 4 != 0)
      CHECK_OK(accel_future_complete(fs[i], -i, NULL, NULL));
    accel_future_release(fs[i]); /* the registration holds its own reference */
  }
  int seen[N] = {0};
  for (int got = 0; got < N; got++) {
    uint64_t token;
    CHECK_EQ(read(fds[0], &token, sizeof token), (ssize_t)sizeof token);
    CHECK(token >= 1000u && token < 1000u + N);
    seen[token - 1000u]++;
  }
  for (int i = 0; i < N; i++)
    CHECK_EQ(seen[i], 1);
  runtime_stop_then_destroy(the_rt, NULL);
  close(fds[0]);
  close(fds[1]);
}

TEST(wait_on_the_loop_thread_is_edeadlk) {
  accel_ref server = server_up();
  accel_future *f = ask_ok(server, MSG_WAIT_ON_LOOP, 0);
  CHECK_OK(accel_future_wait(f, 20000));
  accel_future_release(f);
  server_down();
}

/* ---- many asks from many threads, each waited for ---- */

enum { ASK_THREADS = 4 };

static void *ask_many(void *arg) {
  accel_ref server = *(accel_ref *)arg;
  long n = test_scaled(2000, 50);
  for (long i = 0; i < n; i++) {
    accel_msg m = msg_make(MSG_REPLY_VALUE, (uint64_t)i);
    accel_future *f = NULL;
    unsigned streak = 0;
    int rc;
    while ((rc = accel_ask(the_rt, server, &m, &f)) == ACCEL_EBUSY)
      pause_after_busy(&streak);
    CHECK_OK(rc);
    CHECK_OK(accel_future_wait(f, 20000));
    CHECK_EQ(value_of(f), (uint64_t)i);
    accel_future_release(f);
  }
  return NULL;
}

TEST(asks_from_many_threads_each_get_their_reply) {
  accel_ref server = server_up();
  pthread_t th[ASK_THREADS];
  for (int i = 0; i < ASK_THREADS; i++)
    CHECK_EQ(pthread_create(&th[i], NULL, ask_many, &server), 0);
  for (int i = 0; i < ASK_THREADS; i++)
    CHECK_EQ(pthread_join(th[i], NULL), 0);
  server_down();
  CHECK_EQ(counted_dropped(), ASK_THREADS * test_scaled(2000, 50));
}

static const test_case tests[] = {
    TEST_CASE(reply_carries_status_and_value),
    TEST_CASE(second_reply_is_ealready),
    TEST_CASE(reply_status_wins_over_return_code),
    TEST_CASE(no_reply_completes_with_receive_return_code),
    TEST_CASE(deferred_reply_from_a_timer),
    TEST_CASE(deferred_reply_from_another_thread),
    TEST_CASE(taken_reply_completed_by_the_stop_hook_on_shutdown),
    TEST_CASE(then_runs_on_the_loop_after_release),
    TEST_CASE(a_reused_future_starts_pending_and_clean),
    TEST_CASE(then_on_a_completed_future_runs_soon),
    TEST_CASE(release_inside_then_drops_the_value_once),
    TEST_CASE(reply_to_a_released_future_is_dropped_once),
    TEST_CASE(wait_times_out_while_pending_then_returns_status),
    TEST_CASE(double_complete_is_ealready_and_keeps_the_second_value),
    TEST_CASE(value_is_dropped_once_when_the_last_reference_goes),
    TEST_CASE(pending_future_released_without_completion_frees_cleanly),
    TEST_CASE(then_from_a_thread_completed_by_another_thread),
    TEST_CASE(notify_fd_writes_each_token_once),
    TEST_CASE(wait_on_the_loop_thread_is_edeadlk),
    TEST_CASE(asks_from_many_threads_each_get_their_reply),
};

TEST_MAIN(tests)
