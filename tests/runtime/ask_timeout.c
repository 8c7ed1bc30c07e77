/* Asks with a deadline (accel_ask_timeout): no reply within it is ACCEL_ETIMEDOUT, not much
 * before the deadline nor long after; a reply in time wins and its value comes through; a
 * reply after the deadline is dropped (its value freed, accel_reply says ACCEL_EALREADY); an
 * ask still pending when the runtime stops is ACCEL_ECLOSED at once, not at its deadline;
 * timeout 0 is refused. */
#include <time.h>

#include "util.h"

enum { MSG_HOLD = MSG_FIRST_LOCAL, MSG_ANSWER, MSG_RELEASE };

typedef struct holder {
  accel_msg held; /* an ask kept back: its reply future taken out */
  accel_future *reply;
} holder;

static int replied_late = 1; /* accel_reply's code for the late answer */

static int holder_receive(accel_actor *self, void *state, accel_msg *msg) {
  holder *h = state;
  switch (msg->type) {
  case MSG_HOLD: /* keep the ask's reply for later */
    h->reply = accel_msg_take_reply(msg);
    return 0;
  case MSG_ANSWER:
    return accel_reply(msg, 0, counted_new(7), counted_drop) == 0 ? 0 : -1;
  case MSG_RELEASE: { /* answer the held ask now, as accel_reply would */
    accel_msg m = {.reply = h->reply};
    h->reply = NULL;
    replied_late = accel_reply(&m, 0, counted_new(8), counted_drop);
    return 0;
  }
  default:
    return 0;
  }
}

static void holder_stop(accel_actor *self, void *state) {
  holder *h = state;
  if (h->reply) { /* never answered: complete it as the owner must */
    accel_future_complete(h->reply, ACCEL_ECANCELED, NULL, NULL);
    accel_future_release(h->reply);
  }
}

static const accel_behavior holder_b = {
    .name = "holder", .state_size = sizeof(holder), .receive = holder_receive, .stop = holder_stop};

static uint64_t ms_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

TEST(no_reply_within_the_deadline_is_etimedout) {
  accel_runtime *rt = runtime_started();
  accel_ref h = spawn_ok(rt, NULL, &holder_b, NULL, NULL);
  accel_future *f;
  uint64_t t0 = ms_now();
  CHECK_OK(accel_ask_timeout(rt, h, &(accel_msg){.type = MSG_HOLD}, 30, &f));
  CHECK_ERR(accel_future_wait(f, 5000), ACCEL_ETIMEDOUT);
  uint64_t waited = ms_now() - t0;
  CHECK(waited >= 29 && waited < 3000);
  accel_future_release(f);
  runtime_stop_then_destroy(rt, NULL);
}

TEST(a_reply_in_time_wins_with_its_value) {
  counted_reset();
  accel_runtime *rt = runtime_started();
  accel_ref h = spawn_ok(rt, NULL, &holder_b, NULL, NULL);
  accel_future *f;
  CHECK_OK(accel_ask_timeout(rt, h, &(accel_msg){.type = MSG_ANSWER}, 60000, &f));
  CHECK_OK(accel_future_wait(f, 5000));
  CHECK_EQ(((counted *)accel_future_value(f))->value, 7);
  accel_future_release(f);
  /* The 60 s timer ends with the reply, and with it its reference: the value goes now, the
   * runtime still running, not at the deadline nor at the stop. */
  for (int i = 0; i < 1000 && counted_live() != 0; i++)
    test_sleep_ms(1);
  CHECK_EQ(counted_live(), 0);
  runtime_stop_then_destroy(rt, NULL);
}

TEST(a_reply_after_the_deadline_is_dropped) {
  counted_reset();
  accel_runtime *rt = runtime_started();
  accel_ref h = spawn_ok(rt, NULL, &holder_b, NULL, NULL);
  accel_future *f;
  CHECK_OK(accel_ask_timeout(rt, h, &(accel_msg){.type = MSG_HOLD}, 10, &f));
  CHECK_ERR(accel_future_wait(f, 5000), ACCEL_ETIMEDOUT);
  accel_future *g;
  CHECK_OK(accel_ask(rt, h, &(accel_msg){.type = MSG_RELEASE}, &g)); /* after the release */
  CHECK_OK(accel_future_wait(g, 5000));
  accel_future_release(g);
  CHECK_EQ(replied_late, ACCEL_EALREADY);
  CHECK(accel_future_value(f) == NULL); /* the timeout's, not the late value */
  CHECK_EQ(counted_live(), 0);          /* freed by accel_reply, at once */
  CHECK_EQ(counted_dropped(), 1);
  accel_future_release(f);
  runtime_stop_then_destroy(rt, NULL);
}

TEST(a_pending_ask_ends_with_the_runtime_not_its_deadline) {
  accel_runtime *rt = runtime_started();
  accel_ref h = spawn_ok(rt, NULL, &holder_b, NULL, NULL);
  accel_future *f;
  CHECK_OK(accel_ask_timeout(rt, h, &(accel_msg){.type = MSG_HOLD}, 3600 * 1000, &f));
  test_sleep_ms(20); /* its timer started */
  uint64_t t0 = ms_now();
  runtime_stop_then_destroy(rt, NULL);
  CHECK(ms_now() - t0 < 3000);
  /* The stop completes the asks with a deadline first, then stops the tree (the holder's
   * stop hook would answer ECANCELED). */
  CHECK_ERR(accel_future_poll(f), ACCEL_ECLOSED);
  accel_future_release(f);
}

TEST(a_timeout_of_zero_is_refused) {
  accel_runtime *rt = runtime_started();
  accel_ref h = spawn_ok(rt, NULL, &holder_b, NULL, NULL);
  accel_future *f = NULL;
  CHECK_ERR(accel_ask_timeout(rt, h, &(accel_msg){.type = MSG_ANSWER}, 0, &f), ACCEL_EINVAL);
  CHECK(f == NULL);
  CHECK_OK(accel_ask_timeout(rt, h, &(accel_msg){.type = MSG_ANSWER}, 1, &f)); /* the least */
  int st = accel_future_wait(f, 5000);
  CHECK(st == 0 || st == ACCEL_ETIMEDOUT);
  accel_future_release(f);
  runtime_stop_then_destroy(rt, NULL);
}

static const test_case tests[] = {
    TEST_CASE(no_reply_within_the_deadline_is_etimedout),
    TEST_CASE(a_reply_in_time_wins_with_its_value),
    TEST_CASE(a_reply_after_the_deadline_is_dropped),
    TEST_CASE(a_pending_ask_ends_with_the_runtime_not_its_deadline),
    TEST_CASE(a_timeout_of_zero_is_refused),
};

TEST_MAIN(tests)
