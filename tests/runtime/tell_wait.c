/* Sends that wait for room (accel_tell_wait): from a plain thread into a slow actor's tiny
 * mailbox, every message arrives, in order, none refused, and the mailbox was full on the way
 * (the waiting path ran); from an actor, the messages that wait fail with ACCEL_ESTALE when
 * the target's incarnation ends, while those that went in count as delivered; arguments. */
#include <stdatomic.h>
#include <time.h>

#include "util.h"

enum { MSG_SEQ = MSG_FIRST_LOCAL, MSG_REPORT, MSG_BURST, MSG_BREAK };

#define N 2000

typedef struct sink {
  uint64_t next; /* the arg the next MSG_SEQ must carry */
  uint64_t got, out_of_order;
} sink;

static void spin_us(long us) { /* a slow receive: the tiny mailbox fills up */
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do
    clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

static int sink_receive(accel_actor *self, void *state, accel_msg *msg) {
  sink *s = state;
  switch (msg->type) {
  case MSG_SEQ:
    s->out_of_order += msg->arg != s->next;
    s->next = msg->arg + 1;
    s->got++;
    spin_us(5); /* slow: the sender finds it full, then room in the middle of its turn */
    return 0;
  case MSG_REPORT: {
    uint64_t *r = malloc(2 * sizeof *r);
    if (r == NULL)
      return ACCEL_ENOMEM;
    r[0] = s->got, r[1] = s->out_of_order;
    return accel_reply(msg, 0, r, free);
  }
  case MSG_BREAK:
    return ACCEL_EIO; /* fails: this incarnation ends */
  default:
    return 0;
  }
}

static const accel_behavior sink_b = {
    .name = "sink", .state_size = sizeof(sink), .receive = sink_receive};

TEST(a_plain_thread_waits_for_room_in_order) {
  accel_runtime *rt = runtime_started();
  accel_ref s = spawn_ok(rt, NULL, &sink_b, NULL, &(accel_spawn_opts){.mailbox_capacity = 4});
  static accel_future *f[N];
  for (uint64_t i = 0; i < N; i++)
    CHECK_OK(accel_tell_wait(rt, s, &(accel_msg){.type = MSG_SEQ, .arg = i}, &f[i]));
  for (int i = 0; i < N; i++) {
    CHECK_OK(accel_future_wait(f[i], 10000));
    accel_future_release(f[i]);
  }
  CHECK_GT(stats_of(rt).busy_refusals, 0u); /* the mailbox was full: some waited */
  accel_future *r;
  CHECK_OK(accel_tell_wait(rt, s, &(accel_msg){.type = MSG_SEQ, .arg = N}, &r));
  CHECK_OK(accel_future_wait(r, 10000)); /* the report's ask must not overtake it */
  accel_future_release(r);
  accel_msg report = {.type = MSG_REPORT};
  int rc;
  while ((rc = accel_ask(rt, s, &report, &r)) == ACCEL_EBUSY)
    test_sleep_ms(1);
  CHECK_OK(rc);
  CHECK_OK(accel_future_wait(r, 10000));
  const uint64_t *got = accel_future_value(r);
  CHECK_EQ(got[0], (uint64_t)N + 1);
  CHECK_EQ(got[1], 0u); /* every message in the order sent */
  accel_future_release(r);
  runtime_stop_then_destroy(rt, NULL);
}

/* An actor sends 6 to a sink whose mailbox holds 2, the first of them failing it: 2 go in
 * (delivered), 4 wait and then fail with ACCEL_ESTALE when the sink's incarnation ends. */
static accel_future *burst_f[6];
static accel_ref burst_to;

static int driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type != MSG_BURST)
    return 0;
  accel_runtime *rt = accel_actor_runtime(self);
  for (int i = 0; i < 6; i++) {
    accel_msg m = {.type = i == 0 ? MSG_BREAK : MSG_SEQ, .arg = (uint64_t)i - 1};
    int rc = accel_tell_wait(rt, burst_to, &m, &burst_f[i]);
    if (rc != 0)
      return rc;
  }
  return accel_reply(msg, 0, NULL, NULL);
}

static const accel_behavior driver_b = {.name = "driver", .receive = driver_receive};

TEST(waiting_sends_fail_when_the_target_ends) {
  accel_runtime *rt = runtime_started();
  /* the failure ends the incarnation the messages were sent to (a restart is a new one) */
  burst_to = spawn_ok(rt, NULL, &sink_b, NULL, &(accel_spawn_opts){.mailbox_capacity = 2});
  accel_ref d = spawn_ok(rt, NULL, &driver_b, NULL, NULL);
  accel_future *f;
  CHECK_OK(accel_ask(rt, d, &(accel_msg){.type = MSG_BURST}, &f));
  CHECK_OK(accel_future_wait(f, 10000));
  accel_future_release(f);
  for (int i = 0; i < 6; i++) {
    CHECK_ERR(accel_future_wait(burst_f[i], 10000), i < 2 ? 0 : ACCEL_ESTALE);
    accel_future_release(burst_f[i]);
  }
  runtime_stop_then_destroy(rt, NULL);
}

TEST(arguments_and_plain_refusals) {
  accel_runtime *rt = runtime_started();
  accel_ref s = spawn_ok(rt, NULL, &sink_b, NULL, NULL);
  accel_future *f = (accel_future *)1;
  CHECK_ERR(accel_tell_wait(rt, s, NULL, &f), ACCEL_EINVAL);
  CHECK(f == (accel_future *)1); /* untouched on a refusal of the arguments */
  CHECK_ERR(accel_tell_wait(NULL, s, &(accel_msg){.type = MSG_SEQ}, &f), ACCEL_EINVAL);
  CHECK_OK(accel_stop(rt, s));
  for (int i = 0; i < 1000 && accel_tell(rt, s, &(accel_msg){.type = MSG_SEQ}) == 0; i++)
    test_sleep_ms(1);
  CHECK_ERR(accel_tell_wait(rt, s, &(accel_msg){.type = MSG_SEQ}, &f), ACCEL_ESTALE);
  CHECK(f == NULL); /* no future when the send is refused */
  runtime_stop_then_destroy(rt, NULL);
}

/* The overtaking race, made to happen: a message waits (its park is posted, the loop busy), the
 * target's turn then makes room, and the same thread sends again before the park has run. The
 * later message must still come after the earlier one. The loop is held inside the target's
 * receive of message 0 (room for one), while the park of message 4 waits behind that turn. */
static atomic_int gate_entered, gate_open;

static int gated_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_SEQ && msg->arg == 0) {
    atomic_store(&gate_entered, 1);
    while (!atomic_load(&gate_open))
      test_sleep_ms(1);
  }
  return sink_receive(self, state, msg);
}

static const accel_behavior gated_b = {
    .name = "gated", .state_size = sizeof(sink), .receive = gated_receive};

TEST(a_later_send_never_overtakes_one_that_waits) {
  accel_runtime *rt;
  CHECK_OK(accel_runtime_create(&rt, NULL));
  accel_ref s = spawn_ok(rt, NULL, &gated_b, NULL, &(accel_spawn_opts){.mailbox_capacity = 4});
  atomic_store(&gate_entered, 0);
  atomic_store(&gate_open, 0);
  for (uint64_t i = 0; i < 4; i++) /* full, before the loop runs */
    CHECK_OK(accel_tell(rt, s, &(accel_msg){.type = MSG_SEQ, .arg = i}));
  accel_future *f4, *f5, *r;
  CHECK_OK(accel_tell_wait(rt, s, &(accel_msg){.type = MSG_SEQ, .arg = 4}, &f4)); /* waits */
  CHECK_OK(accel_runtime_start(rt));
  while (!atomic_load(&gate_entered)) /* message 0 taken: room for one, 4's park not run */
    test_sleep_ms(1);
  CHECK_ERR(accel_future_poll(f4), ACCEL_EAGAIN);
  CHECK_OK(accel_tell_wait(rt, s, &(accel_msg){.type = MSG_SEQ, .arg = 5}, &f5));
  atomic_store(&gate_open, 1);
  CHECK_OK(accel_future_wait(f4, 10000));
  CHECK_OK(accel_future_wait(f5, 10000));
  accel_future_release(f4);
  accel_future_release(f5);
  CHECK_OK(accel_ask(rt, s, &(accel_msg){.type = MSG_REPORT}, &r));
  CHECK_OK(accel_future_wait(r, 10000));
  const uint64_t *got = accel_future_value(r);
  CHECK_EQ(got[0], 6u);
  CHECK_EQ(got[1], 0u); /* 0 1 2 3 4 5 */
  accel_future_release(r);
  runtime_stop_then_destroy(rt, NULL);
}

static const test_case tests[] = {
    TEST_CASE(a_plain_thread_waits_for_room_in_order),
    TEST_CASE(a_later_send_never_overtakes_one_that_waits),
    TEST_CASE(waiting_sends_fail_when_the_target_ends),
    TEST_CASE(arguments_and_plain_refusals),
};

TEST_MAIN(tests)
