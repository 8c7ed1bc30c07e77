/* Fair turns on a device queue (actors/lanes.h): each session's tasks in order, sessions taken
 * round-robin, the queue shallow while several have work, the sessions past the table's size
 * sharing its last lane without a task of one overtaking another, and which sessions pipeline
 * (DEV_LANES_DEEP tasks at once) and which send one op at a time (light). */
#include <stdlib.h>

#include "actors/lanes.h"
#include "test.h"

static dev_task tasks[256];

/* Task i of session `owner` (owners are stand-in pointers: only their identity counts). */
static dev_task *task(int i, uintptr_t owner) {
  tasks[i] = (dev_task){.acct = (struct dev_session_acct *)owner};
  return &tasks[i];
}

static void enter_push(dev_lanes *l, dev_task *t) {
  dev_lanes_enter(l, t, 0);
  dev_lanes_push(l, t);
}

TEST(one_session_keeps_its_order_and_the_deep_queue) {
  static dev_lanes l;
  for (int i = 0; i < 5; i++)
    enter_push(&l, task(i, 0x10));
  CHECK_EQ(dev_lanes_depth(&l, 128, 32, 8, 0), 128u);
  for (int i = 0; i < 5; i++) {
    dev_task *t = dev_lanes_pop(&l);
    CHECK(t == &tasks[i]);
    dev_lanes_leave(&l, t, 0);
  }
  CHECK(dev_lanes_pop(&l) == NULL);
  CHECK_EQ(l.nlanes, 0u);
}

TEST(sessions_take_turns_each_in_order) {
  static dev_lanes l;
  /* a flood of 6 from A, then 2 from B and 1 from C */
  for (int i = 0; i < 6; i++)
    enter_push(&l, task(i, 0xA));
  enter_push(&l, task(6, 0xB));
  enter_push(&l, task(7, 0xB));
  enter_push(&l, task(8, 0xC));
  CHECK_EQ(l.nlanes, 3u);
  CHECK_EQ(dev_lanes_depth(&l, 128, 32, 8, 0), 32u);
  /* A, B, C, A, B, A, A, A, A: B's and C's first tasks come before A's second */
  static const int want[] = {0, 6, 8, 1, 7, 2, 3, 4, 5};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    dev_task *t = dev_lanes_pop(&l);
    CHECK(t == &tasks[want[k]]);
  }
  CHECK(dev_lanes_pop(&l) == NULL);
  /* the lanes stay in use until their tasks leave (run and completed) */
  CHECK_EQ(l.nlanes, 3u);
  for (int i = 0; i < 9; i++)
    if (i != 0)
      dev_lanes_leave(&l, &tasks[i], 0);
  CHECK_EQ(l.nlanes, 1u); /* A's task 0 is still on the queue */
  /* B and C sent one or two at a time beside A's six: short for the hold, then deep */
  CHECK_EQ(dev_lanes_depth(&l, 128, 32, 8, 0), 8u);
  CHECK_EQ(dev_lanes_depth(&l, 128, 32, 8, DEV_LANES_HOLD_NS), 128u);
  dev_lanes_leave(&l, &tasks[0], 0);
  dev_lanes_leave(&l, &tasks[0], 0); /* a second leave changes nothing */
  CHECK_EQ(l.nlanes, 0u);
}

TEST(a_session_with_work_on_the_queue_counts_though_none_waits) {
  static dev_lanes l;
  dev_lanes_enter(&l, task(0, 0x1), 0); /* runs at once: entered, never pushed */
  CHECK_EQ(dev_lanes_depth(&l, 128, 32, 8, 0), 128u);
  dev_lanes_enter(&l, task(1, 0x2), 0);
  CHECK_EQ(dev_lanes_depth(&l, 128, 32, 8, 0), 32u);
  dev_lanes_leave(&l, &tasks[0], 0);
  dev_lanes_leave(&l, &tasks[1], 0);
  CHECK_EQ(l.nlanes, 0u);
}

/* 63 sessions fill the table; the 64th and 65th share the last lane, in order; while it holds
 * work, a session whose lane frees up does not get another (its next task may not overtake). */
TEST(sessions_past_the_table_share_the_last_lane_in_order) {
  static dev_lanes l;
  for (int i = 0; i < DEV_LANES_MAX - 1; i++)
    enter_push(&l, task(i, 0x100 + (uintptr_t)i));
  dev_task *s1 = task(100, 0x900), *s2 = task(101, 0x901), *s3 = task(102, 0x900);
  enter_push(&l, s1);
  enter_push(&l, s2);
  CHECK_EQ(s1->lane, DEV_LANES_MAX - 1);
  CHECK_EQ(s2->lane, DEV_LANES_MAX - 1);
  /* session 0x100's only task runs and completes: its lane is free, but 0x900 has a task in
   * the shared lane, so its next task goes there too, behind it */
  dev_task *first = dev_lanes_pop(&l);
  CHECK(first == &tasks[0]);
  dev_lanes_leave(&l, first, 0);
  enter_push(&l, s3);
  CHECK_EQ(s3->lane, DEV_LANES_MAX - 1);
  /* drain: the shared lane gives s1, s2, s3 in that order */
  dev_task *order[3];
  int n = 0;
  for (dev_task *t; (t = dev_lanes_pop(&l)) != NULL;) {
    if (t->lane == DEV_LANES_MAX - 1)
      order[n++] = t;
    dev_lanes_leave(&l, t, 0);
  }
  CHECK_EQ(n, 3);
  CHECK(order[0] == s1 && order[1] == s2 && order[2] == s3);
  CHECK_EQ(l.nlanes, 0u);
  CHECK_EQ(l.waiting, 0u);
  /* with the shared lane empty, a new session gets a lane of its own again */
  dev_lanes_enter(&l, task(103, 0x902), 0);
  CHECK_LT(tasks[103].lane, DEV_LANES_MAX - 1);
  dev_lanes_leave(&l, &tasks[103], 0);
}

/* The lane a task of `owner` must get, read off the table as it stands: the owner's lane in
 * use, else (the shared lane idle) the lowest free one, else the shared one. */
static uint32_t expected_lane(const dev_lanes *l, const void *owner) {
  for (uint32_t i = 0; i + 1 < DEV_LANES_MAX; i++)
    if (l->lane[i].active > 0 && l->lane[i].owner == owner)
      return i;
  if (l->lane[DEV_LANES_MAX - 1].active > 0)
    return DEV_LANES_MAX - 1;
  for (uint32_t i = 0; i + 1 < DEV_LANES_MAX; i++)
    if (l->lane[i].active == 0)
      return i;
  return DEV_LANES_MAX - 1;
}

/* Sessions come and go at random, up to past the table's size: every task gets the lane the
 * rule above gives, and the lanes in use are counted right, at every step. */
TEST(lanes_are_found_and_freed_as_sessions_come_and_go) {
  static dev_lanes l;
  static dev_task live[256];
  int nlive = 0, shared_then_free = 0;
  bool growing = true; /* tides: up to 200 tasks, then down to none */
  srand(12345);
  for (int step = 0; step < 20000; step++) {
    if (nlive == 200 || nlive == 0)
      growing = nlive == 0;
    bool enter = rand() % 4 < (growing ? 3 : 1);
    enter = nlive == 0 || (enter && nlive < 256);
    if (enter && l.lane[DEV_LANES_MAX - 1].active > 0 && l.nlanes < DEV_LANES_MAX)
      shared_then_free++; /* the case where a free lane must not be taken */
    if (enter) {
      /* owners 1..90: more sessions than lanes, so the shared lane fills at times */
      dev_task *t = &live[nlive++];
      *t = (dev_task){.acct = (struct dev_session_acct *)(uintptr_t)(1 + rand() % 90)};
      uint32_t want = expected_lane(&l, t->acct);
      dev_lanes_enter(&l, t, 0);
      CHECK_EQ(t->lane, want);
    } else { /* a task leaves: any of them (work completes out of order across sessions) */
      int i = rand() % nlive;
      dev_lanes_leave(&l, &live[i], 0);
      live[i] = live[--nlive];
    }
    uint32_t in_use = 0;
    for (uint32_t i = 0; i < DEV_LANES_MAX; i++) {
      bool active = l.lane[i].active > 0;
      in_use += active;
      CHECK_EQ(((l.used >> i) & 1) != 0, active);
    }
    CHECK_EQ(l.nlanes, in_use);
  }
  CHECK_GT(shared_then_free, 100);
}

TEST(a_session_pipelines_from_the_deep_count_on) {
  static dev_lanes l;
  for (int i = 0; i < DEV_LANES_DEEP - 1; i++)
    CHECK(!dev_lanes_enter(&l, task(i, 0xA), 0));               /* one short of the count */
  CHECK(dev_lanes_enter(&l, task(DEV_LANES_DEEP - 1, 0xA), 0)); /* at it: once */
  CHECK(!dev_lanes_enter(&l, task(DEV_LANES_DEEP, 0xA), 0));    /* past it: already said */
  CHECK(!dev_lanes_enter(&l, task(20, 0xB), 0));                /* another session's first */
  for (int i = 0; i <= DEV_LANES_DEEP; i++)
    CHECK(!dev_lanes_leave(&l, &tasks[i], 0)); /* A was no light session */
  CHECK(dev_lanes_leave(&l, &tasks[20], 0));   /* B was: one task, alone */
  CHECK_EQ(l.nlanes, 0u);
  for (int i = 0; i < DEV_LANES_DEEP - 1; i++)
    CHECK(!dev_lanes_enter(&l, task(i, 0xA), 0));
  CHECK(dev_lanes_enter(&l, task(DEV_LANES_DEEP - 1, 0xA), 0)); /* again after its lane emptied */
  for (int i = 0; i < DEV_LANES_DEEP; i++)
    dev_lanes_leave(&l, &tasks[i], 0);
}

TEST(a_light_session_may_have_its_next_op_come_early_but_not_two) {
  static dev_lanes l;
  /* two at once: an op's tail in the loop and the next op, come after the early reply */
  dev_lanes_enter(&l, task(0, 0xC), 0);
  dev_lanes_enter(&l, task(1, 0xC), 0);
  CHECK(!dev_lanes_leave(&l, &tasks[0], 0)); /* its lane is not empty yet */
  CHECK(dev_lanes_leave(&l, &tasks[1], 0));  /* empty, never three: light */
  /* three at once: it pipelines, however short */
  for (int i = 2; i < 5; i++)
    dev_lanes_enter(&l, task(i, 0xC), 0);
  for (int i = 2; i < 4; i++)
    CHECK(!dev_lanes_leave(&l, &tasks[i], 0));
  CHECK(!dev_lanes_leave(&l, &tasks[4], 0));
  /* the next op alone is light again: the lane was empty in between */
  dev_lanes_enter(&l, task(5, 0xC), 0);
  CHECK(dev_lanes_leave(&l, &tasks[5], 0));
  CHECK(!dev_lanes_leave(&l, &tasks[5], 0)); /* a second leave says nothing */
  CHECK_EQ(l.nlanes, 0u);
}

/* The queue is kept short for the hold after a light op ends while a session pipelined within
 * the hold before it: at the hold's last nanosecond, not one past it; a light op with no
 * pipelining session in the hold keeps nothing short. */
TEST(the_queue_is_short_for_the_hold_after_a_light_op_beside_a_pipelining_one) {
  static dev_lanes l;
  const uint64_t h = DEV_LANES_HOLD_NS, t0 = 1000;
  /* no pipelining session yet: a light op changes nothing */
  dev_lanes_enter(&l, task(0, 0xB), t0);
  CHECK(dev_lanes_leave(&l, &tasks[0], t0 + 1));
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t0 + 2), 128u);
  /* A pipelines from t0 on; B's op ends at the hold's last nanosecond after it */
  for (int i = 1; i <= DEV_LANES_DEEP; i++)
    dev_lanes_enter(&l, task(i, 0xA), t0);
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t0), 128u); /* one session: deep */
  dev_lanes_enter(&l, task(10, 0xB), t0 + h - 2);
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t0 + h - 2), 64u); /* two: shallow */
  CHECK(dev_lanes_leave(&l, &tasks[10], t0 + h - 1));
  const uint64_t end = t0 + h - 1 + h; /* the light hold's end */
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t0 + h), 8u);
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, end - 1), 8u); /* its last nanosecond */
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, end), 128u);   /* one past: A alone, deep */
  /* a light op that ends one past the pipelining hold (A's last enter or leave was at t0)
   * extends nothing */
  dev_lanes_enter(&l, task(11, 0xB), t0 + h);
  CHECK(dev_lanes_leave(&l, &tasks[11], t0 + h));
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, end), 128u); /* else short until t0 + 2h */
  for (int i = 1; i <= DEV_LANES_DEEP; i++)
    dev_lanes_leave(&l, &tasks[i], end);
  CHECK_EQ(l.nlanes, 0u);
}

/* A session that keeps DEV_LANES_DEEP tasks counts as pipelining for the hold after its last
 * enter or leave at that count, not only after it first reached it. */
TEST(pipelining_is_remembered_while_the_session_keeps_its_count) {
  static dev_lanes l;
  const uint64_t h = DEV_LANES_HOLD_NS, t0 = 5000;
  for (int i = 0; i < DEV_LANES_DEEP; i++)
    dev_lanes_enter(&l, task(i, 0xA), t0);
  CHECK(!dev_lanes_enter(&l, task(DEV_LANES_DEEP, 0xA), t0 + h)); /* a fifth, a hold later */
  dev_lanes_enter(&l, task(20, 0xB), t0 + h + 1);
  CHECK(dev_lanes_leave(&l, &tasks[20], t0 + 2 * h - 1)); /* within the fifth's hold */
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t0 + 2 * h), 8u);
  /* A's first leave, holding five (four and more), refreshes it too */
  dev_lanes_leave(&l, &tasks[0], t0 + 3 * h);
  dev_lanes_enter(&l, task(21, 0xB), t0 + 4 * h - 2);
  CHECK(dev_lanes_leave(&l, &tasks[21], t0 + 4 * h - 1));
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t0 + 4 * h), 8u);
  /* A now holds four; its leave at four refreshes, at three no longer */
  dev_lanes_leave(&l, &tasks[1], t0 + 5 * h); /* held four: the hold runs to t0 + 6h */
  dev_lanes_enter(&l, task(22, 0xB), t0 + 6 * h - 2);
  CHECK(dev_lanes_leave(&l, &tasks[22], t0 + 6 * h - 1));
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t0 + 6 * h), 8u); /* within it: short */
  dev_lanes_leave(&l, &tasks[2], t0 + 8 * h);                /* held three: no refresh */
  dev_lanes_enter(&l, task(23, 0xB), t0 + 8 * h);
  CHECK(dev_lanes_leave(&l, &tasks[23], t0 + 8 * h)); /* past the hold: nothing */
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t0 + 8 * h), 128u);
  for (int i = 3; i <= DEV_LANES_DEEP; i++)
    dev_lanes_leave(&l, &tasks[i], t0 + 8 * h);
  CHECK_EQ(l.nlanes, 0u);
}

/* Session `owner` enters DEV_LANES_DEEP tasks (tasks 0..) at `in`, all of which leave at `out`;
 * returns the lane they had. */
static uint32_t pipeline_then_drain(dev_lanes *l, uintptr_t owner, uint64_t in, uint64_t out) {
  for (int i = 0; i < DEV_LANES_DEEP; i++)
    dev_lanes_enter(l, task(i, owner), in);
  uint32_t lane = tasks[0].lane;
  for (int i = 0; i < DEV_LANES_DEEP; i++)
    dev_lanes_leave(l, &tasks[i], out);
  return lane;
}

/* A session's own pipelining does not make its next lone op light, and the shared lane (the
 * sessions past the table, counted together) is neither pipelining nor light. */
TEST(light_needs_another_session_pipelining_and_a_lane_of_its_own) {
  static dev_lanes l;
  const uint64_t t0 = 7000;
  pipeline_then_drain(&l, 0xA, t0, t0);
  dev_lanes_enter(&l, task(10, 0xA), t0 + 1); /* A alone now, one op */
  CHECK(dev_lanes_leave(&l, &tasks[10], t0 + 2));
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t0 + 3), 128u); /* not short: its own pipelining */
  /* a hold later, fill the table so that more sessions share the last lane */
  const uint64_t t1 = t0 + 2 * DEV_LANES_HOLD_NS;
  for (int i = 0; i < DEV_LANES_MAX - 1; i++)
    dev_lanes_enter(&l, task(20 + i, 0x100 + (uintptr_t)i), t1);
  int shared = 0;
  for (int i = 0; i < DEV_LANES_DEEP; i++) { /* four sessions' ops in the shared lane */
    CHECK(!dev_lanes_enter(&l, task(100 + i, 0x900 + (uintptr_t)i), t1 + 1));
    shared += tasks[100 + i].lane == DEV_LANES_MAX - 1;
  }
  CHECK_EQ(shared, DEV_LANES_DEEP);
  for (int i = 0; i < DEV_LANES_MAX - 1; i++) /* lone ops beside the shared lane's four */
    CHECK(dev_lanes_leave(&l, &tasks[20 + i], t1 + 2));
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t1 + 3), 128u); /* the four were no pipelining */
  for (int i = 0; i < DEV_LANES_DEEP; i++)
    CHECK(!dev_lanes_leave(&l, &tasks[100 + i], t1 + 4)); /* nor is the shared lane light */
  CHECK_EQ(l.nlanes, 0u);
}

/* Lanes are reused: light is judged by session, not by lane. */
TEST(light_is_judged_by_session_when_lanes_are_reused) {
  static dev_lanes l;
  const uint64_t t0 = 9000;
  /* A pipelines on lane 0 and drains; B's one op gets lane 0 back: light beside A */
  CHECK_EQ(pipeline_then_drain(&l, 0xA, t0, t0 + 1), 0u);
  dev_lanes_enter(&l, task(10, 0xB), t0 + 2);
  CHECK_EQ(tasks[10].lane, 0u);
  CHECK(dev_lanes_leave(&l, &tasks[10], t0 + 3));
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t0 + 4), 8u);
  /* a hold later: C on lane 0, D pipelines on lane 1 and drains; D's one op gets lane 0
   * after C left: its own pipelining, not light */
  const uint64_t t1 = t0 + 4 * DEV_LANES_HOLD_NS;
  dev_lanes_enter(&l, task(20, 0xC), t1);
  dev_lanes_enter(&l, task(21, 0xD), t1);
  CHECK_EQ(tasks[20].lane, 0u);
  CHECK_EQ(tasks[21].lane, 1u);
  CHECK(dev_lanes_leave(&l, &tasks[20], t1 + 1)); /* C was light, with nobody pipelining */
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t1 + 1), 128u);
  for (int i = 22; i < 22 + DEV_LANES_DEEP - 1; i++)
    dev_lanes_enter(&l, task(i, 0xD), t1 + 2);
  dev_lanes_leave(&l, &tasks[21], t1 + 3);
  for (int i = 22; i < 22 + DEV_LANES_DEEP - 1; i++)
    dev_lanes_leave(&l, &tasks[i], t1 + 3);
  dev_lanes_enter(&l, task(30, 0xD), t1 + 4);
  CHECK_EQ(tasks[30].lane, 0u);
  CHECK(dev_lanes_leave(&l, &tasks[30], t1 + 5));
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t1 + 6), 128u);
  CHECK_EQ(l.nlanes, 0u);
}

/* One task of a session in the shared lane is no light op, even beside a pipelining session. */
TEST(a_lone_task_in_the_shared_lane_is_not_light) {
  static dev_lanes l;
  const uint64_t t0 = 11000;
  for (int i = 0; i < DEV_LANES_MAX - 1; i++) /* the table full: lane 0 is A's, pipelining */
    dev_lanes_enter(&l, task(i, i == 0 ? 0xA : 0x100 + (uintptr_t)i), t0);
  for (int i = 0; i < DEV_LANES_DEEP - 1; i++)
    dev_lanes_enter(&l, task(70 + i, 0xA), t0);
  dev_lanes_enter(&l, task(80, 0x900), t0 + 1);
  CHECK_EQ(tasks[80].lane, DEV_LANES_MAX - 1);
  CHECK(!dev_lanes_leave(&l, &tasks[80], t0 + 2));
  CHECK_EQ(dev_lanes_depth(&l, 128, 64, 8, t0 + 3), 64u); /* shallow, not short */
  for (int i = 0; i < DEV_LANES_MAX - 1; i++)
    dev_lanes_leave(&l, &tasks[i], t0 + 4);
  for (int i = 0; i < DEV_LANES_DEEP - 1; i++)
    dev_lanes_leave(&l, &tasks[70 + i], t0 + 4);
  CHECK_EQ(l.nlanes, 0u);
}

static const test_case tests[] = {
    TEST_CASE(lanes_are_found_and_freed_as_sessions_come_and_go),
    TEST_CASE(one_session_keeps_its_order_and_the_deep_queue),
    TEST_CASE(sessions_take_turns_each_in_order),
    TEST_CASE(a_session_with_work_on_the_queue_counts_though_none_waits),
    TEST_CASE(sessions_past_the_table_share_the_last_lane_in_order),
    TEST_CASE(a_session_pipelines_from_the_deep_count_on),
    TEST_CASE(a_light_session_may_have_its_next_op_come_early_but_not_two),
    TEST_CASE(the_queue_is_short_for_the_hold_after_a_light_op_beside_a_pipelining_one),
    TEST_CASE(pipelining_is_remembered_while_the_session_keeps_its_count),
    TEST_CASE(light_needs_another_session_pipelining_and_a_lane_of_its_own),
    TEST_CASE(light_is_judged_by_session_when_lanes_are_reused),
    TEST_CASE(a_lone_task_in_the_shared_lane_is_not_light),
};

TEST_MAIN(tests)
