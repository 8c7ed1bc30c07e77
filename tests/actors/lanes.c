/* Fair turns on a device queue (actors/lanes.h): each session's tasks in order, sessions taken
 * round-robin, the queue shallow while several have work, and the sessions past the table's
 * size sharing its last lane without a task of one overtaking another. */
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
  dev_lanes_enter(l, t);
  dev_lanes_push(l, t);
}

TEST(one_session_keeps_its_order_and_the_deep_queue) {
  static dev_lanes l;
  for (int i = 0; i < 5; i++)
    enter_push(&l, task(i, 0x10));
  CHECK_EQ(dev_lanes_depth(&l, 128, 32), 128u);
  for (int i = 0; i < 5; i++) {
    dev_task *t = dev_lanes_pop(&l);
    CHECK(t == &tasks[i]);
    dev_lanes_leave(&l, t);
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
  CHECK_EQ(dev_lanes_depth(&l, 128, 32), 32u);
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
      dev_lanes_leave(&l, &tasks[i]);
  CHECK_EQ(l.nlanes, 1u); /* A's task 0 is still on the queue */
  CHECK_EQ(dev_lanes_depth(&l, 128, 32), 128u);
  dev_lanes_leave(&l, &tasks[0]);
  dev_lanes_leave(&l, &tasks[0]); /* a second leave changes nothing */
  CHECK_EQ(l.nlanes, 0u);
}

TEST(a_session_with_work_on_the_queue_counts_though_none_waits) {
  static dev_lanes l;
  dev_lanes_enter(&l, task(0, 0x1)); /* runs at once: entered, never pushed */
  CHECK_EQ(dev_lanes_depth(&l, 128, 32), 128u);
  dev_lanes_enter(&l, task(1, 0x2));
  CHECK_EQ(dev_lanes_depth(&l, 128, 32), 32u);
  dev_lanes_leave(&l, &tasks[0]);
  dev_lanes_leave(&l, &tasks[1]);
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
  dev_lanes_leave(&l, first);
  enter_push(&l, s3);
  CHECK_EQ(s3->lane, DEV_LANES_MAX - 1);
  /* drain: the shared lane gives s1, s2, s3 in that order */
  dev_task *order[3];
  int n = 0;
  for (dev_task *t; (t = dev_lanes_pop(&l)) != NULL;) {
    if (t->lane == DEV_LANES_MAX - 1)
      order[n++] = t;
    dev_lanes_leave(&l, t);
  }
  CHECK_EQ(n, 3);
  CHECK(order[0] == s1 && order[1] == s2 && order[2] == s3);
  CHECK_EQ(l.nlanes, 0u);
  CHECK_EQ(l.waiting, 0u);
  /* with the shared lane empty, a new session gets a lane of its own again */
  dev_lanes_enter(&l, task(103, 0x902));
  CHECK_LT(tasks[103].lane, DEV_LANES_MAX - 1);
  dev_lanes_leave(&l, &tasks[103]);
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
      dev_lanes_enter(&l, t);
      CHECK_EQ(t->lane, want);
    } else { /* a task leaves: any of them (work completes out of order across sessions) */
      int i = rand() % nlive;
      dev_lanes_leave(&l, &live[i]);
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

static const test_case tests[] = {
    TEST_CASE(lanes_are_found_and_freed_as_sessions_come_and_go),
    TEST_CASE(one_session_keeps_its_order_and_the_deep_queue),
    TEST_CASE(sessions_take_turns_each_in_order),
    TEST_CASE(a_session_with_work_on_the_queue_counts_though_none_waits),
    TEST_CASE(sessions_past_the_table_share_the_last_lane_in_order),
};

TEST_MAIN(tests)
