/* Timers: a one-shot fires once with its type and arg, not early; a repeating timer fires
 * until cancelled; a cancel before the first tick means no tick; timers fire in due order;
 * timers die with their incarnation (a restart or a stop). */
#include "util.h"

enum { MSG_FAIL = MSG_FIRST_LOCAL, MSG_SETTLED, MSG_ORDER, MSG_RESTARTED };

static int kick_on_start(accel_actor *self, void *state, void *arg) {
  tell_self(self, MSG_KICK, 0);
  return 0;
}

static uint64_t timer_ok(accel_actor *self, uint64_t delay, uint64_t repeat, uint32_t type,
                         uint64_t arg) {
  uint64_t id = 0;
  CHECK_OK(accel_timer_start(self, delay, repeat, type, arg, &id));
  return id;
}

static void run_actor(const accel_behavior *b) {
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
}

/* ---- one-shot ---- */

static int once_ticks;
static uint64_t once_started_ns, once_fired_ns;

static int once_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_KICK) {
    once_started_ns = test_now_ns();
    timer_ok(self, 60, 0, MSG_TICK, 77);
    timer_ok(self, 200, 0, MSG_SETTLED, 0); /* time for a wrong second tick to show */
  } else if (msg->type == MSG_TICK) {
    CHECK_EQ(msg->arg, 77);
    CHECK(ref_eq(msg->sender, ACCEL_REF_NONE) || ref_eq(msg->sender, accel_self(self)));
    CHECK(msg->reply == NULL);
    once_fired_ns = test_now_ns();
    once_ticks++;
  } else if (msg->type == MSG_SETTLED) {
    stop_runtime_from(self);
  }
  return 0;
}

static const accel_behavior once_b = {
    .name = "once", .start = kick_on_start, .receive = once_receive};

TEST(one_shot_fires_once_and_not_early) {
  once_ticks = 0;
  run_actor(&once_b);
  CHECK_EQ(once_ticks, 1);
  /* A lower bound with slack: the loop's clock may lag the real one a little. */
  CHECK_GE((once_fired_ns - once_started_ns) / 1000000u, 40);
}

/* ---- repeating, then cancelled ---- */

enum { REPEAT_TICKS = 5 };
static int repeat_ticks, repeat_ticks_at_cancel;

static int repeat_receive(accel_actor *self, void *state, accel_msg *msg) {
  uint64_t *id = state;
  if (msg->type == MSG_KICK) {
    *id = timer_ok(self, 10, 10, MSG_TICK, 5);
  } else if (msg->type == MSG_TICK) {
    CHECK_EQ(msg->arg, 5);
    if (++repeat_ticks != REPEAT_TICKS)
      return 0;
    CHECK_OK(accel_timer_cancel(self, *id));
    repeat_ticks_at_cancel = repeat_ticks;
    timer_ok(self, 150, 0, MSG_SETTLED, 0);
  } else if (msg->type == MSG_SETTLED) {
    stop_runtime_from(self);
  }
  return 0;
}

static const accel_behavior repeat_b = {.name = "repeat",
                                        .state_size = sizeof(uint64_t),
                                        .start = kick_on_start,
                                        .receive = repeat_receive};

TEST(repeating_timer_stops_when_cancelled) {
  repeat_ticks = repeat_ticks_at_cancel = 0;
  run_actor(&repeat_b);
  CHECK_EQ(repeat_ticks_at_cancel, REPEAT_TICKS);
  /* A tick already in the mailbox when cancel ran may still arrive; no more than that. */
  CHECK_LE(repeat_ticks, REPEAT_TICKS + 1);
}

/* ---- cancelled before the first tick ---- */

static int early_cancel_ticks;

static int early_cancel_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_KICK) {
    uint64_t once = timer_ok(self, 20, 0, MSG_TICK, 1);
    uint64_t repeat = timer_ok(self, 20, 20, MSG_TICK, 2);
    CHECK_NE(once, repeat);
    CHECK_OK(accel_timer_cancel(self, once));
    CHECK_OK(accel_timer_cancel(self, repeat));
    timer_ok(self, 150, 0, MSG_SETTLED, 0);
  } else if (msg->type == MSG_TICK) {
    early_cancel_ticks++;
  } else if (msg->type == MSG_SETTLED) {
    stop_runtime_from(self);
  }
  return 0;
}

static const accel_behavior early_cancel_b = {
    .name = "early-cancel", .start = kick_on_start, .receive = early_cancel_receive};

TEST(cancel_before_the_first_tick_means_no_tick) {
  early_cancel_ticks = 0;
  run_actor(&early_cancel_b);
  CHECK_EQ(early_cancel_ticks, 0);
}

/* ---- several timers fire in the order they are due ---- */

static char order_log[64];

static int order_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_KICK) {
    timer_ok(self, 60, 0, MSG_ORDER, 3);
    timer_ok(self, 20, 0, MSG_ORDER, 1);
    timer_ok(self, 40, 0, MSG_ORDER, 2);
    timer_ok(self, 0, 0, MSG_ORDER, 0);
  } else if (msg->type == MSG_ORDER) {
    size_t len = strlen(order_log);
    snprintf(order_log + len, sizeof order_log - len, "%u", (unsigned)msg->arg);
    if (msg->arg == 3)
      stop_runtime_from(self);
  }
  return 0;
}

static const accel_behavior order_b = {
    .name = "order", .start = kick_on_start, .receive = order_receive};

TEST(timers_fire_in_due_order) {
  order_log[0] = '\0';
  run_actor(&order_b);
  CHECK_STR_EQ(order_log, "0123");
}

/* ---- timers die with the incarnation ---- */

static int inc_starts, inc_ticks[4];

static int inc_start(accel_actor *self, void *state, void *arg) {
  inc_starts++;
  return 0;
}

static int inc_receive(accel_actor *self, void *state, accel_msg *msg) {
  CHECK_LT(inc_starts, 4);
  if (msg->type == MSG_KICK) {
    timer_ok(self, 10, 10, MSG_TICK, 0);
  } else if (msg->type == MSG_TICK && ++inc_ticks[inc_starts] == 2) {
    return ACCEL_EIO; /* restart: the repeating timer must not reach the new incarnation */
  }
  return 0;
}

static void inc_post_restart(accel_actor *self, void *state, int reason) {
  CHECK_OK(tell_arg(accel_actor_runtime(self), accel_parent(self), MSG_RESTARTED, 0));
}

static const accel_behavior inc_b = {
    .name = "inc", .start = inc_start, .receive = inc_receive, .post_restart = inc_post_restart};

static int inc_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  accel_ref *stopped = state;
  if (msg->type == MSG_KICK) {
    CHECK_OK(tell_arg(rt, spawn_ok(rt, self, &inc_b, NULL, NULL), MSG_KICK, 0));
    *stopped = spawn_ok(rt, self, &repeat_b, NULL, NULL); /* a repeating timer, then a stop */
  } else if (msg->type == MSG_RESTARTED) {
    CHECK_OK(accel_stop(rt, *stopped));
    timer_ok(self, 150, 0, MSG_SETTLED, 0);
  } else if (msg->type == MSG_SETTLED) {
    stop_runtime_from(self);
  }
  return 0;
}

static const accel_behavior inc_driver_b = {.name = "driver",
                                            .state_size = sizeof(accel_ref),
                                            .start = kick_on_start,
                                            .receive = inc_driver_receive};

TEST(timers_die_with_their_incarnation) {
  inc_starts = 0;
  memset(inc_ticks, 0, sizeof inc_ticks);
  repeat_ticks = repeat_ticks_at_cancel = 0;
  run_actor(&inc_driver_b);
  CHECK_EQ(inc_starts, 2);
  CHECK_EQ(inc_ticks[1], 2);
  CHECK_EQ(inc_ticks[2], 0);            /* nothing from the old incarnation's timer */
  CHECK_LT(repeat_ticks, REPEAT_TICKS); /* stopped before it could cancel its own */
}

/* ---- many timers on many actors ---- */

enum { MANY_ACTORS = 20, MANY_TICKS = 5 };
static int many_done;

static int many_receive(accel_actor *self, void *state, accel_msg *msg) {
  int *ticks = state;
  if (msg->type == MSG_KICK) {
    *ticks = 0;
    timer_ok(self, 1, 3, MSG_TICK, 0);
  } else if (msg->type == MSG_TICK && ++*ticks == MANY_TICKS) {
    if (++many_done == MANY_ACTORS)
      stop_runtime_from(self);
  }
  return 0;
}

static const accel_behavior many_b = {
    .name = "many", .state_size = sizeof(int), .start = kick_on_start, .receive = many_receive};

TEST(many_actors_with_repeating_timers) {
  many_done = 0;
  accel_runtime *rt = runtime_new();
  for (int i = 0; i < MANY_ACTORS; i++)
    spawn_ok(rt, NULL, &many_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL); /* shutdown with repeating timers still armed */
  CHECK_EQ(many_done, MANY_ACTORS);
}

static const test_case tests[] = {
    TEST_CASE(one_shot_fires_once_and_not_early),
    TEST_CASE(repeating_timer_stops_when_cancelled),
    TEST_CASE(cancel_before_the_first_tick_means_no_tick),
    TEST_CASE(timers_fire_in_due_order),
    TEST_CASE(timers_die_with_their_incarnation),
    TEST_CASE(many_actors_with_repeating_timers),
};

TEST_MAIN(tests)
