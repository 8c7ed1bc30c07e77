/* Spawning and the lifecycle: start runs before accel_spawn returns; hooks run in the header's
 * order across a restart and a stop; state is zeroed and private per incarnation; the identity
 * functions; a failing start hook fails the spawn and leaves nothing behind. */
#include "util.h"

enum { MSG_FAIL = MSG_FIRST_LOCAL, MSG_RESTARTED, MSG_CHECK_STATE, MSG_CHECKED, MSG_SETTLED };

static accel_runtime *the_rt;

/* ---- start before run, destroy without run ---- */

static int plain_starts, plain_stops;

static int plain_start(accel_actor *self, void *state, void *arg) {
  plain_starts++;
  return 0;
}

static void plain_stop(accel_actor *self, void *state) {
  plain_stops++;
}

static int ignore_receive(accel_actor *self, void *state, accel_msg *msg) {
  return 0;
}

static const accel_behavior plain_b = {
    .name = "plain", .start = plain_start, .receive = ignore_receive, .stop = plain_stop};

TEST(spawn_before_run_starts_at_once_and_destroy_stops) {
  plain_starts = plain_stops = 0;
  accel_runtime *rt = runtime_new();
  accel_runtime_stats before = stats_of(rt);
  accel_ref ref = spawn_ok(rt, NULL, &plain_b, NULL, NULL);
  CHECK_EQ(plain_starts, 1);
  CHECK_EQ(plain_stops, 0);
  CHECK(!ref_eq(ref, accel_runtime_root(rt)));
  accel_runtime_stats after = stats_of(rt);
  CHECK_EQ(after.actors_live, before.actors_live + 1);
  CHECK_EQ(after.actors_spawned, before.actors_spawned + 1);
  CHECK_OK(accel_spawn(rt, NULL, &plain_b, NULL, NULL, NULL)); /* out may be NULL */
  CHECK_EQ(plain_starts, 2);
  accel_runtime_destroy(rt);
  CHECK_EQ(plain_stops, 2);
}

/* ---- hook order across a restart and a stop ---- */

typedef struct recorder_state {
  uint32_t incarnation;
} recorder_state;

static uint32_t recorder_incarnations;
static accel_ref recorder_first_ref;

static void check_on_loop(accel_actor *self) {
  CHECK_EQ(accel_runtime_on_loop(accel_actor_runtime(self)), 1);
}

static int recorder_start(accel_actor *self, void *state, void *arg) {
  recorder_state *s = state;
  check_on_loop(self);
  CHECK_EQ(s->incarnation, 0);
  s->incarnation = ++recorder_incarnations;
  events_add("x.start:%u", s->incarnation);
  return 0;
}

static int recorder_receive(accel_actor *self, void *state, accel_msg *msg) {
  check_on_loop(self);
  return msg->type == MSG_FAIL ? ACCEL_EIO : 0;
}

static void recorder_stop(accel_actor *self, void *state) {
  recorder_state *s = state;
  check_on_loop(self);
  events_add("x.stop:%u", s->incarnation);
}

static void recorder_pre_restart(accel_actor *self, void *state, int reason) {
  recorder_state *s = state;
  check_on_loop(self);
  events_add("x.pre_restart:%u:%s", s->incarnation, accel_err_name(reason));
}

static void recorder_post_restart(accel_actor *self, void *state, int reason) {
  recorder_state *s = state;
  check_on_loop(self);
  events_add("x.post_restart:%u:%s", s->incarnation, accel_err_name(reason));
  CHECK_OK(tell_arg(accel_actor_runtime(self), accel_parent(self), MSG_RESTARTED, 0));
}

static const accel_behavior recorder_b = {
    .name = "x",
    .state_size = sizeof(recorder_state),
    .start = recorder_start,
    .receive = recorder_receive,
    .stop = recorder_stop,
    .pre_restart = recorder_pre_restart,
    .post_restart = recorder_post_restart,
};

static int kick_on_start(accel_actor *self, void *state, void *arg) {
  tell_self(self, MSG_KICK, 0);
  return 0;
}

static int order_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  accel_ref now = ACCEL_REF_NONE;
  if (msg->type == MSG_KICK) {
    recorder_first_ref = spawn_ok(rt, self, &recorder_b, NULL, NULL);
    CHECK_OK(tell_arg(rt, recorder_first_ref, MSG_FAIL, 0));
  } else if (msg->type == MSG_RESTARTED) {
    CHECK_OK(accel_child(self, "x", &now));
    CHECK(!ref_eq(now, recorder_first_ref));
    recorder_first_ref = now;
    CHECK_OK(accel_stop(rt, now));
  }
  return 0;
}

static void order_driver_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  check_on_loop(self);
  events_add("driver.child_exit:%s:%s", ref_eq(child, recorder_first_ref) ? "same" : "other",
             accel_err_name(reason));
  stop_runtime_from(self);
}

static const accel_behavior order_driver_b = {
    .name = "driver",
    .start = kick_on_start,
    .receive = order_driver_receive,
    .child_exit = order_driver_child_exit,
};

TEST(hooks_run_in_order_across_restart_and_stop) {
  events_reset();
  recorder_incarnations = 0;
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &order_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_STR_EQ(events_get(), "x.start:1 x.pre_restart:1:EIO x.stop:1 x.start:2 "
                             "x.post_restart:2:EIO x.stop:2 driver.child_exit:same:OK");
}

/* ---- state: zeroed and private per incarnation ---- */

enum { BIG_STATE = 512, ZS_ACTORS = 2, ZS_RESTARTS = 3 };

typedef struct zs_record {
  unsigned char *state; /* the current incarnation's state */
  int starts;
  int checked;
} zs_record;

static zs_record zs[ZS_ACTORS];

static unsigned char zs_pattern(int index, int incarnation) {
  return (unsigned char)(0xA5 ^ (index * 16 + incarnation));
}

static int zs_start(accel_actor *self, void *state, void *arg) {
  int index = (int)(intptr_t)arg;
  unsigned char *bytes = state;
  CHECK(bytes != NULL);
  for (int i = 0; i < BIG_STATE; i++)
    CHECK_EQ(bytes[i], 0);
  zs[index].starts++;
  memset(bytes, zs_pattern(index, zs[index].starts), BIG_STATE);
  zs[index].state = bytes;
  return 0;
}

static int zs_receive(accel_actor *self, void *state, accel_msg *msg) {
  int index = (int)msg->arg;
  unsigned char *bytes = state;
  if (msg->type == MSG_FAIL)
    return ACCEL_EIO;
  CHECK_EQ(msg->type, MSG_CHECK_STATE);
  CHECK_PTR_EQ(bytes, zs[index].state);
  for (int i = 0; i < BIG_STATE; i++)
    CHECK_EQ(bytes[i], zs_pattern(index, zs[index].starts));
  zs[index].checked++;
  CHECK_OK(tell_arg(accel_actor_runtime(self), accel_parent(self), MSG_CHECKED, 0));
  return 0;
}

static void zs_post_restart(accel_actor *self, void *state, int reason) {
  CHECK_OK(tell_arg(accel_actor_runtime(self), accel_parent(self), MSG_RESTARTED, 0));
}

static const accel_behavior zs_b = {
    .name = "zs",
    .state_size = BIG_STATE,
    .start = zs_start,
    .receive = zs_receive,
    .post_restart = zs_post_restart,
};

typedef struct zs_driver_state {
  accel_ref kids[ZS_ACTORS];
  int restarts, checks;
} zs_driver_state;

static void zs_check_both(accel_actor *self, zs_driver_state *d) {
  accel_runtime *rt = accel_actor_runtime(self);
  CHECK_OK(accel_child(self, "zs0", &d->kids[0]));
  for (int i = 0; i < ZS_ACTORS; i++)
    CHECK_OK(tell_arg(rt, d->kids[i], MSG_CHECK_STATE, (uint64_t)i));
}

static void zs_spawn_both(accel_actor *self, zs_driver_state *d) {
  static const char *const names[ZS_ACTORS] = {"zs0", "zs1"};
  for (int i = 0; i < ZS_ACTORS; i++) {
    accel_spawn_opts opts = {.name = names[i]};
    d->kids[i] = spawn_ok(accel_actor_runtime(self), self, &zs_b, (void *)(intptr_t)i, &opts);
  }
  /* Two live states never overlap. */
  CHECK(zs[0].state + BIG_STATE <= zs[1].state || zs[1].state + BIG_STATE <= zs[0].state);
}

static int zs_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  zs_driver_state *d = state;
  accel_runtime *rt = accel_actor_runtime(self);
  if (msg->type == MSG_KICK) {
    zs_spawn_both(self, d);
    CHECK_OK(tell_arg(rt, d->kids[0], MSG_FAIL, 0));
  } else if (msg->type == MSG_RESTARTED && ++d->restarts < ZS_RESTARTS) {
    CHECK_OK(accel_child(self, "zs0", &d->kids[0]));
    CHECK_OK(tell_arg(rt, d->kids[0], MSG_FAIL, 0));
  } else if (msg->type == MSG_RESTARTED) {
    zs_check_both(self, d);
  } else if (msg->type == MSG_CHECKED && ++d->checks == ZS_ACTORS) {
    stop_runtime_from(self);
  }
  return 0;
}

static const accel_behavior zs_driver_b = {
    .name = "zs-driver",
    .state_size = sizeof(zs_driver_state),
    .start = kick_on_start,
    .receive = zs_driver_receive,
};

TEST(state_is_zeroed_and_private_per_incarnation) {
  memset(zs, 0, sizeof zs);
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &zs_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_EQ(zs[0].starts, 1 + ZS_RESTARTS);
  CHECK_EQ(zs[1].starts, 1);
  CHECK_EQ(zs[0].checked, 1);
  CHECK_EQ(zs[1].checked, 1);
}

/* ---- identity: self, name, parent, child, runtime ---- */

static accel_ref top_ref, child_ref;
static int identity_checks;

static int child_start(accel_actor *self, void *state, void *arg) {
  CHECK(ref_eq(accel_parent(self), top_ref));
  CHECK_STR_EQ(accel_actor_name(self), (const char *)arg);
  identity_checks++;
  return 0;
}

static const accel_behavior child_b = {
    .name = "child-b", .start = child_start, .receive = ignore_receive};

static void check_top_identity(accel_actor *self) {
  CHECK_PTR_EQ(accel_actor_runtime(self), the_rt);
  CHECK(ref_eq(accel_self(self), top_ref));
  CHECK(ref_eq(accel_parent(self), accel_runtime_root(the_rt)));
  CHECK_STR_EQ(accel_actor_name(self), "top-name");
  check_on_loop(self);
}

static void check_children_lookup(accel_actor *self) {
  accel_ref found = ACCEL_REF_NONE;
  accel_spawn_opts named = {.name = "second"};
  child_ref = spawn_ok(the_rt, self, &child_b, (void *)"child-b", NULL);
  CHECK_OK(accel_child(self, "child-b", &found));
  CHECK(ref_eq(found, child_ref));
  CHECK_OK(accel_spawn(the_rt, self, &child_b, (void *)"second", &named, NULL));
  CHECK_OK(accel_child(self, "second", &found));
  CHECK(!ref_eq(found, child_ref));
  CHECK_NE(found.gen, 0);
  CHECK_ERR(accel_child(self, "nope", &found), ACCEL_ENOENT);
  identity_checks++;
}

static int top_receive(accel_actor *self, void *state, accel_msg *msg) {
  check_top_identity(self);
  check_children_lookup(self);
  stop_runtime_from(self);
  return 0;
}

static const accel_behavior top_b = {
    .name = "top-behavior", .start = kick_on_start, .receive = top_receive};

TEST(identity_inside_callbacks) {
  char name[32];
  identity_checks = 0;
  the_rt = runtime_new();
  CHECK_NE(accel_runtime_root(the_rt).gen, 0);
  CHECK_EQ(accel_runtime_on_loop(the_rt), 0);
  snprintf(name, sizeof name, "top-name");
  accel_spawn_opts opts = {.name = name};
  top_ref = spawn_ok(the_rt, NULL, &top_b, NULL, &opts);
  memset(name, 'z', sizeof name - 1); /* the runtime copied the name */
  runtime_run_then_destroy(the_rt, NULL);
  CHECK_EQ(identity_checks, 3); /* two children's starts and the top's checks */
}

/* ---- a failing start hook fails the spawn ---- */

static int fs_fail_starts, fs_grandchild_starts, fs_grandchild_stops, fs_child_exits;

static int grandchild_start(accel_actor *self, void *state, void *arg) {
  fs_grandchild_starts++;
  return 0;
}

static void grandchild_stop(accel_actor *self, void *state) {
  fs_grandchild_stops++;
}

static const accel_behavior grandchild_b = {.name = "grandchild",
                                            .start = grandchild_start,
                                            .receive = ignore_receive,
                                            .stop = grandchild_stop};

static int failing_start(accel_actor *self, void *state, void *arg) {
  fs_fail_starts++;
  if (arg != NULL)
    spawn_ok(accel_actor_runtime(self), self, &grandchild_b, NULL, NULL);
  return ACCEL_EPERM;
}

static const accel_behavior failing_b = {
    .name = "bad", .start = failing_start, .receive = ignore_receive};

static void spawn_failing_children(accel_actor *self) {
  accel_runtime *rt = accel_actor_runtime(self);
  accel_runtime_stats before = stats_of(rt);
  accel_ref ref = ACCEL_REF_NONE, found;
  CHECK_ERR(accel_spawn(rt, self, &failing_b, NULL, NULL, &ref), ACCEL_EPERM);
  CHECK_ERR(accel_child(self, "bad", &found), ACCEL_ENOENT);
  CHECK_ERR(accel_spawn(rt, self, &failing_b, (void *)"with grandchild", NULL, &ref), ACCEL_EPERM);
  CHECK_ERR(accel_child(self, "bad", &found), ACCEL_ENOENT);
  CHECK_EQ(fs_grandchild_starts, 1);
  CHECK_EQ(fs_grandchild_stops, 1); /* nothing remains: the grandchild was stopped */
  CHECK_EQ(stats_of(rt).actors_live, before.actors_live);
}

static int fs_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  uint64_t id = 0;
  if (msg->type == MSG_KICK) {
    spawn_failing_children(self);
    /* Give a wrongly supervised failure time to show up as a restart. */
    CHECK_OK(accel_timer_start(self, 100, 0, MSG_SETTLED, 0, &id));
  } else if (msg->type == MSG_SETTLED) {
    stop_runtime_from(self);
  }
  return 0;
}

static void fs_driver_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  fs_child_exits++;
}

static const accel_behavior fs_driver_b = {.name = "fs-driver",
                                           .start = kick_on_start,
                                           .receive = fs_driver_receive,
                                           .child_exit = fs_driver_child_exit};

TEST(failing_start_fails_spawn_and_leaves_nothing) {
  fs_fail_starts = fs_grandchild_starts = fs_grandchild_stops = fs_child_exits = 0;
  accel_runtime *rt = runtime_new();
  accel_runtime_stats before = stats_of(rt);
  accel_ref ref = ACCEL_REF_NONE;
  CHECK_ERR(accel_spawn(rt, NULL, &failing_b, NULL, NULL, &ref), ACCEL_EPERM);
  CHECK_EQ(stats_of(rt).actors_live, before.actors_live);
  spawn_ok(rt, NULL, &fs_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_EQ(fs_fail_starts, 3); /* never retried by supervision */
  CHECK_EQ(fs_child_exits, 0);
}

/* ---- children spawned in a start hook start at once, in order ---- */

static int logging_child_start(accel_actor *self, void *state, void *arg) {
  events_add("%s.start", accel_actor_name(self));
  return 0;
}

static const accel_behavior logging_child_b = {
    .name = "c", .start = logging_child_start, .receive = ignore_receive};

static int nesting_parent_start(accel_actor *self, void *state, void *arg) {
  static const char *const names[] = {"c0", "c1", "c2"};
  events_add("p.begin");
  for (int i = 0; i < 3; i++) {
    accel_spawn_opts opts = {.name = names[i]};
    spawn_ok(accel_actor_runtime(self), self, &logging_child_b, NULL, &opts);
  }
  events_add("p.end");
  return 0;
}

static const accel_behavior nesting_parent_b = {
    .name = "p", .start = nesting_parent_start, .receive = ignore_receive};

TEST(children_spawned_in_start_start_in_order) {
  events_reset();
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &nesting_parent_b, NULL, NULL);
  CHECK_STR_EQ(events_get(), "p.begin c0.start c1.start c2.start p.end");
  accel_runtime_destroy(rt);
}

TEST(stop_of_a_ref_that_is_not_live_is_estale) {
  accel_runtime *rt = runtime_new();
  CHECK_ERR(accel_stop(rt, ACCEL_REF_NONE), ACCEL_ESTALE);
  CHECK_ERR(accel_stop(rt, (accel_ref){0xFFFFFFF0u, 1}), ACCEL_ESTALE);
  accel_ref ref = spawn_ok(rt, NULL, &plain_b, NULL, NULL);
  CHECK_ERR(accel_stop(rt, (accel_ref){ref.slot, ref.gen + 1}), ACCEL_ESTALE);
  accel_runtime_destroy(rt);
}

static const test_case tests[] = {
    TEST_CASE(spawn_before_run_starts_at_once_and_destroy_stops),
    TEST_CASE(hooks_run_in_order_across_restart_and_stop),
    TEST_CASE(state_is_zeroed_and_private_per_incarnation),
    TEST_CASE(identity_inside_callbacks),
    TEST_CASE(failing_start_fails_spawn_and_leaves_nothing),
    TEST_CASE(children_spawned_in_start_start_in_order),
    TEST_CASE(stop_of_a_ref_that_is_not_live_is_estale),
};

TEST_MAIN(tests)
