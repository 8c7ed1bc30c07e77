/* Supervision: which children each strategy restarts (start counters, changed refs, hook
 * order); restart intensity then escalation to the parent's own supervisor; on_limit
 * STOP_CHILD (child_exit, no escalation); the intensity window; exponential backoff and its
 * cap (each delay between a lower and an upper bound); failing start hooks during restarts;
 * children stop in reverse start order, on accel_stop and on runtime shutdown. */
#include "util.h"

enum { MSG_FAIL = MSG_FIRST_LOCAL, MSG_STARTED, MSG_SETTLED };
enum { MAX_KIDS = 4, SETTLE_MS = 100 };

/* ---- kids: each start tells the driver, every hook is logged ---- */

typedef struct kid_spec {
  int index;
  const char *name;
} kid_spec;

static const kid_spec kids[MAX_KIDS] = {{0, "c0"}, {1, "c1"}, {2, "c2"}, {3, "c3"}};

static accel_ref driver; /* the test's driver: kids report their starts to it */
static int kid_starts[MAX_KIDS];
static int kid_fail_restarts; /* when set, every start after the first fails */
static uint64_t kid_start_ns[16], kid_fail_ns[16];

static uint64_t ref_to_arg(accel_ref r) {
  return (uint64_t)r.slot << 32 | r.gen;
}
static accel_ref ref_from_arg(uint64_t a) {
  return (accel_ref){(uint32_t)(a >> 32), (uint32_t)a};
}

static int kid_start(accel_actor *self, void *state, void *arg) {
  const kid_spec *k = arg;
  int n = ++kid_starts[k->index];
  if (n < 16)
    kid_start_ns[n] = test_now_ns();
  events_add("start:%s", k->name);
  if (kid_fail_restarts && n > 1)
    return ACCEL_EIO;
  accel_msg m = msg_make(MSG_STARTED, ref_to_arg(accel_self(self)));
  m.flags = (uint32_t)k->index;
  CHECK_OK(accel_tell(accel_actor_runtime(self), driver, &m));
  return 0;
}

static int kid_receive(accel_actor *self, void *state, accel_msg *msg) {
  int n = kid_starts[0];
  CHECK_EQ(msg->type, MSG_FAIL);
  if (n < 16)
    kid_fail_ns[n] = test_now_ns();
  return ACCEL_EIO;
}

static void kid_stop(accel_actor *self, void *state) {
  events_add("stop:%s", accel_actor_name(self));
}

static void kid_pre_restart(accel_actor *self, void *state, int reason) {
  events_add("pre:%s", accel_actor_name(self));
}

static void kid_post_restart(accel_actor *self, void *state, int reason) {
  events_add("post:%s", accel_actor_name(self));
}

static const accel_behavior kid_b = {
    .name = "kid",
    .start = kid_start,
    .receive = kid_receive,
    .stop = kid_stop,
    .pre_restart = kid_pre_restart,
    .post_restart = kid_post_restart,
};

static accel_ref spawn_kid(accel_actor *parent, int index) {
  accel_spawn_opts opts = {.name = kids[index].name};
  return spawn_ok(accel_actor_runtime(parent), parent, &kid_b, (void *)&kids[index], &opts);
}

static void reset_kids(void) {
  memset(kid_starts, 0, sizeof kid_starts);
  memset(kid_start_ns, 0, sizeof kid_start_ns);
  memset(kid_fail_ns, 0, sizeof kid_fail_ns);
  kid_fail_restarts = 0;
  events_reset();
}

static void settle_then_stop(accel_actor *self) {
  uint64_t id;
  CHECK_OK(accel_timer_start(self, SETTLE_MS, 0, MSG_SETTLED, 0, &id));
}

/* ---- strategies: three kids, c1 fails once ---- */

typedef struct strategy_run {
  int expected_restarts; /* starts to wait for after the failure */
  accel_ref before[3], after[3];
  char log[1024]; /* the event log when things settled */
  int started, child_exits;
} strategy_run;

static strategy_run srun;

static void strategy_on_started(accel_actor *self) {
  if (++srun.started == 3) {
    for (int i = 0; i < 3; i++)
      CHECK_OK(accel_child(self, kids[i].name, &srun.before[i]));
    CHECK_OK(tell_arg(accel_actor_runtime(self), srun.before[1], MSG_FAIL, 0));
  } else if (srun.started == 3 + srun.expected_restarts) {
    settle_then_stop(self);
  }
}

static void strategy_on_settled(accel_actor *self) {
  for (int i = 0; i < 3; i++)
    CHECK_OK(accel_child(self, kids[i].name, &srun.after[i]));
  snprintf(srun.log, sizeof srun.log, "%s", events_get());
  stop_runtime_from(self);
}

static int strategy_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_KICK)
    for (int i = 0; i < 3; i++)
      spawn_kid(self, i);
  else if (msg->type == MSG_STARTED)
    strategy_on_started(self);
  else if (msg->type == MSG_SETTLED)
    strategy_on_settled(self);
  return 0;
}

static int driver_start(accel_actor *self, void *state, void *arg) {
  driver = accel_self(self);
  tell_self(self, MSG_KICK, 0);
  return 0;
}

static void strategy_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  srun.child_exits++;
}

static const accel_behavior strategy_driver_b = {.name = "driver",
                                                 .start = driver_start,
                                                 .receive = strategy_driver_receive,
                                                 .child_exit = strategy_child_exit};

/* Index of the first token equal to `word` at or after `from` in a space-separated log. */
static int token_index(const char *log, const char *word, int from) {
  char copy[1024], *save = NULL;
  int i = 0;
  snprintf(copy, sizeof copy, "%s", log);
  for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save), i++)
    if (i >= from && strcmp(t, word) == 0)
      return i;
  return -1;
}

/* pre:name, stop:name, start:name (the second), post:name, in that order. */
static void check_restart_hooks(const char *log, const char *name) {
  char pre[16], stop[16], start[16], post[16];
  snprintf(pre, sizeof pre, "pre:%s", name);
  snprintf(stop, sizeof stop, "stop:%s", name);
  snprintf(start, sizeof start, "start:%s", name);
  snprintf(post, sizeof post, "post:%s", name);
  int i_pre = token_index(log, pre, 0);
  int i_stop = token_index(log, stop, i_pre + 1);
  int i_start = token_index(log, start, token_index(log, start, 0) + 1);
  int i_post = token_index(log, post, i_start + 1);
  if (!(i_pre >= 0 && i_pre < i_stop && i_stop < i_start && i_start < i_post))
    TEST_FAIL("restart hooks of %s out of order (pre %d stop %d start %d post %d): %s", name, i_pre,
              i_stop, i_start, i_post, log);
}

/* Only the start:/stop: events of a log, space-separated. */
static const char *starts_and_stops(const char *log) {
  static char out[1024];
  char copy[1024], *save = NULL;
  size_t len = 0;
  snprintf(copy, sizeof copy, "%s", log);
  out[0] = '\0';
  for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save))
    if (strncmp(t, "start:", 6) == 0 || strncmp(t, "stop:", 5) == 0)
      len += (size_t)snprintf(out + len, sizeof out - len, "%s%s", len ? " " : "", t);
  return out;
}

static void run_strategy(accel_strategy strategy, int expected_restarts,
                         accel_runtime_stats *stats) {
  reset_kids();
  memset(&srun, 0, sizeof srun);
  srun.expected_restarts = expected_restarts;
  accel_supervision sup = {.strategy = strategy, .max_restarts = 5, .within_ms = 60000};
  accel_spawn_opts opts = {.supervision = &sup};
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &strategy_driver_b, NULL, &opts);
  runtime_run_then_destroy(rt, stats);
  CHECK_EQ(srun.child_exits, 0);
}

static void check_restarted(const int *restarted) {
  for (int i = 0; i < 3; i++) {
    CHECK_EQ(kid_starts[i], 1 + restarted[i]);
    CHECK_EQ(!ref_eq(srun.before[i], srun.after[i]), restarted[i]);
  }
}

TEST(one_for_one_restarts_only_the_failed_child) {
  static const int restarted[3] = {0, 1, 0};
  accel_runtime_stats stats;
  run_strategy(ACCEL_ONE_FOR_ONE, 1, &stats);
  check_restarted(restarted);
  CHECK_STR_EQ(srun.log, "start:c0 start:c1 start:c2 pre:c1 stop:c1 start:c1 post:c1");
  CHECK_EQ(stats.restarts, 1);
  CHECK_GE(stats.failures, 1);
  CHECK_EQ(stats.escalations, 0);
}

TEST(one_for_all_restarts_every_child) {
  static const int restarted[3] = {1, 1, 1};
  accel_runtime_stats stats;
  run_strategy(ACCEL_ONE_FOR_ALL, 3, &stats);
  check_restarted(restarted);
  CHECK_STR_EQ(starts_and_stops(srun.log), "start:c0 start:c1 start:c2 "
                                           "stop:c2 stop:c1 stop:c0 "
                                           "start:c0 start:c1 start:c2");
  for (int i = 0; i < 3; i++)
    check_restart_hooks(srun.log, kids[i].name);
  CHECK_EQ(stats.escalations, 0);
}

TEST(rest_for_one_restarts_the_failed_and_later_children) {
  static const int restarted[3] = {0, 1, 1};
  accel_runtime_stats stats;
  run_strategy(ACCEL_REST_FOR_ONE, 2, &stats);
  check_restarted(restarted);
  CHECK_STR_EQ(starts_and_stops(srun.log), "start:c0 start:c1 start:c2 "
                                           "stop:c2 stop:c1 "
                                           "start:c1 start:c2");
  check_restart_hooks(srun.log, "c1");
  check_restart_hooks(srun.log, "c2");
  CHECK_EQ(stats.escalations, 0);
}

/* ---- intensity: past R restarts the child stops and its supervisor fails (escalation) ---- */

static int mid_starts, mid_pre_restarts, mid_pre_reason, top_child_exits;

static int mid_start(accel_actor *self, void *state, void *arg) {
  mid_starts++;
  events_add("start:mid");
  spawn_kid(self, 0);
  return 0;
}

static void mid_pre_restart(accel_actor *self, void *state, int reason) {
  mid_pre_restarts++;
  mid_pre_reason = reason;
}

static const accel_behavior mid_b = {
    .name = "mid", .start = mid_start, .receive = kid_receive, .pre_restart = mid_pre_restart};

static int escalation_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  accel_supervision mid_sup = {
      .strategy = ACCEL_ONE_FOR_ONE, .max_restarts = 2, .within_ms = 60000};
  accel_spawn_opts mid_opts = {.name = "mid", .supervision = &mid_sup};
  if (msg->type == MSG_KICK)
    spawn_ok(rt, self, &mid_b, NULL, &mid_opts);
  else if (msg->type == MSG_STARTED && kid_starts[0] <= 3) /* 1 start + R restarts */
    CHECK_OK(tell_arg(rt, ref_from_arg(msg->arg), MSG_FAIL, 0));
  else if (msg->type == MSG_STARTED)
    settle_then_stop(self);
  else if (msg->type == MSG_SETTLED)
    stop_runtime_from(self);
  return 0;
}

static void count_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  top_child_exits++;
}

static const accel_behavior escalation_driver_b = {.name = "top",
                                                   .start = driver_start,
                                                   .receive = escalation_driver_receive,
                                                   .child_exit = count_child_exit};

TEST(past_the_limit_the_supervisor_escalates) {
  reset_kids();
  mid_starts = mid_pre_restarts = top_child_exits = 0;
  mid_pre_reason = 0;
  accel_supervision top_sup = {
      .strategy = ACCEL_ONE_FOR_ONE, .max_restarts = 5, .within_ms = 60000};
  accel_spawn_opts opts = {.supervision = &top_sup};
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &escalation_driver_b, NULL, &opts);
  accel_runtime_stats stats;
  runtime_run_then_destroy(rt, &stats);
  CHECK_EQ(kid_starts[0], 4); /* 1 + 2 restarts under mid #1, then 1 under mid #2 */
  CHECK_EQ(mid_starts, 2);    /* the top supervisor restarted mid */
  CHECK_EQ(mid_pre_restarts, 1);
  CHECK_LT(mid_pre_reason, 0);
  CHECK_EQ(top_child_exits, 0);
  CHECK_EQ(stats.restarts, 3);
  CHECK_EQ(stats.escalations, 1);
  CHECK_GE(stats.failures, 4);
}

/* ---- on_limit STOP_CHILD: child_exit, no escalation ---- */

typedef struct stop_child_run {
  int driver_starts, child_exits, exit_reason;
  accel_ref last_kid;
} stop_child_run;

static stop_child_run scr;

static int stop_child_driver_start(accel_actor *self, void *state, void *arg) {
  scr.driver_starts++;
  return driver_start(self, state, arg);
}

static int stop_child_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_KICK) {
    scr.last_kid = spawn_kid(self, 0);
    if (kid_fail_restarts)
      CHECK_OK(tell_arg(accel_actor_runtime(self), scr.last_kid, MSG_FAIL, 0));
  } else if (msg->type == MSG_STARTED && !kid_fail_restarts) {
    scr.last_kid = ref_from_arg(msg->arg);
    CHECK_OK(tell_arg(accel_actor_runtime(self), scr.last_kid, MSG_FAIL, 0));
  } else if (msg->type == MSG_SETTLED) {
    stop_runtime_from(self);
  }
  return 0;
}

static void stop_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  accel_ref found;
  scr.child_exits++;
  scr.exit_reason = reason;
  CHECK_ERR(accel_child(self, "c0", &found), ACCEL_ENOENT);
  if (!kid_fail_restarts)
    CHECK(ref_eq(child, scr.last_kid));
  CHECK_ERR(tell_arg(accel_actor_runtime(self), child, MSG_FAIL, 0), ACCEL_ESTALE);
  settle_then_stop(self);
}

static const accel_behavior stop_child_driver_b = {.name = "driver",
                                                   .start = stop_child_driver_start,
                                                   .receive = stop_child_driver_receive,
                                                   .child_exit = stop_child_exit};

static void run_stop_child(accel_runtime_stats *stats) {
  memset(&scr, 0, sizeof scr);
  accel_supervision sup = {.strategy = ACCEL_ONE_FOR_ONE,
                           .max_restarts = 2,
                           .within_ms = 60000,
                           .on_limit = ACCEL_LIMIT_STOP_CHILD};
  accel_spawn_opts opts = {.supervision = &sup};
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &stop_child_driver_b, NULL, &opts);
  runtime_run_then_destroy(rt, stats);
}

TEST(limit_stop_child_stops_it_without_escalation) {
  reset_kids();
  accel_runtime_stats stats;
  run_stop_child(&stats);
  CHECK_EQ(kid_starts[0], 3);
  CHECK_EQ(scr.child_exits, 1);
  CHECK_LT(scr.exit_reason, 0);
  CHECK_EQ(scr.driver_starts, 1);
  CHECK_EQ(stats.escalations, 0);
  CHECK_EQ(stats.restarts, 2);
}

TEST(failing_start_during_restart_counts_toward_the_limit) {
  reset_kids();
  kid_fail_restarts = 1;
  accel_runtime_stats stats;
  run_stop_child(&stats);
  CHECK_EQ(kid_starts[0], 3); /* the first start, then two restarts whose start failed */
  CHECK_EQ(scr.child_exits, 1);
  CHECK_LT(scr.exit_reason, 0);
  CHECK_EQ(scr.driver_starts, 1);
  CHECK_EQ(stats.escalations, 0);
}

/* ---- the window: restarts further apart than T never reach the limit ---- */

enum { WINDOW_MS = 100, WINDOW_GAP_MS = 250, WINDOW_FAILURES = 4 };

static int window_child_exits;

static int window_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_ref *kid = state;
  uint64_t id;
  if (msg->type == MSG_KICK) {
    spawn_kid(self, 0);
  } else if (msg->type == MSG_STARTED && kid_starts[0] <= WINDOW_FAILURES) {
    *kid = ref_from_arg(msg->arg);
    CHECK_OK(accel_timer_start(self, WINDOW_GAP_MS, 0, MSG_TICK, 0, &id));
  } else if (msg->type == MSG_TICK) {
    CHECK_OK(tell_arg(accel_actor_runtime(self), *kid, MSG_FAIL, 0));
  } else if (msg->type == MSG_STARTED) {
    stop_runtime_from(self);
  }
  return 0;
}

static void window_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  window_child_exits++;
  stop_runtime_from(self);
}

static const accel_behavior window_driver_b = {.name = "driver",
                                               .state_size = sizeof(accel_ref),
                                               .start = driver_start,
                                               .receive = window_driver_receive,
                                               .child_exit = window_child_exit};

TEST(restarts_outside_the_window_do_not_count) {
  reset_kids();
  window_child_exits = 0;
  accel_supervision sup = {.strategy = ACCEL_ONE_FOR_ONE,
                           .max_restarts = 1,
                           .within_ms = WINDOW_MS,
                           .on_limit = ACCEL_LIMIT_STOP_CHILD};
  accel_spawn_opts opts = {.supervision = &sup};
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &window_driver_b, NULL, &opts);
  accel_runtime_stats stats;
  runtime_run_then_destroy(rt, &stats);
  CHECK_EQ(window_child_exits, 0);
  CHECK_EQ(kid_starts[0], 1 + WINDOW_FAILURES);
  CHECK_EQ(stats.restarts, WINDOW_FAILURES);
}

/* ---- exponential backoff between restarts ---- */

static int backoff_restarts; /* how many times the driver makes the kid fail */

static int backoff_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_KICK)
    spawn_kid(self, 0);
  else if (msg->type == MSG_STARTED && kid_starts[0] <= backoff_restarts)
    CHECK_OK(tell_arg(accel_actor_runtime(self), ref_from_arg(msg->arg), MSG_FAIL, 0));
  else if (msg->type == MSG_STARTED)
    stop_runtime_from(self);
  return 0;
}

static const accel_behavior backoff_driver_b = {
    .name = "driver", .start = driver_start, .receive = backoff_driver_receive};

/* The kid fails `restarts` times in a row (all within one intensity window). */
static void run_backoff(uint32_t initial_ms, uint32_t max_ms, int restarts) {
  reset_kids();
  backoff_restarts = restarts;
  accel_supervision sup = {.strategy = ACCEL_ONE_FOR_ONE,
                           .max_restarts = 10,
                           .within_ms = 60000,
                           .backoff_initial_ms = initial_ms,
                           .backoff_max_ms = max_ms};
  accel_spawn_opts opts = {.supervision = &sup};
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &backoff_driver_b, NULL, &opts);
  runtime_run_then_destroy(rt, NULL);
  CHECK_EQ(kid_starts[0], 1 + restarts);
}

/* The documented delay before the k-th restart of a window: initial * 2^(k-1), capped. */
static uint64_t backoff_expected_ms(uint64_t initial_ms, uint64_t max_ms, int k) {
  uint64_t d = initial_ms << (k - 1);
  return d < max_ms ? d : max_ms;
}

/* From the k-th failure to the next start. */
static uint64_t backoff_gap_ms(int k) {
  CHECK_NE(kid_fail_ns[k], 0);
  return (kid_start_ns[k + 1] - kid_fail_ns[k]) / 1000000u;
}

/* How late a restart may come: generous for a loaded machine, yet short of the next doubling
 * of every delay below (a delay that grows too fast or past the cap lands beyond it). The
 * lower bound has a little slack of its own: the loop's clock may lag the real one. */
enum { BACKOFF_LATE_MS = 190 };

/* Under valgrind and ThreadSanitizer the restarts run many times slower: the late slack says
 * nothing of a cap there (the normal and ASan builds check it). */
static uint64_t backoff_late_ms(void) {
#ifdef __SANITIZE_THREAD__
  return 10 * BACKOFF_LATE_MS;
#else
  return test_under_valgrind() ? 10 * BACKOFF_LATE_MS : BACKOFF_LATE_MS;
#endif
}

static void check_backoff_gaps(uint64_t initial_ms, uint64_t max_ms, int restarts) {
  for (int k = 1; k <= restarts; k++) {
    uint64_t expected = backoff_expected_ms(initial_ms, max_ms, k), gap = backoff_gap_ms(k);
    CHECK_GE(gap, expected * 3 / 4);
    CHECK_LT(gap, expected + backoff_late_ms());
  }
}

enum { BACKOFF_INITIAL_MS = 100, BACKOFF_RESTARTS = 3 };

TEST(restart_delays_grow_exponentially) {
  run_backoff(BACKOFF_INITIAL_MS, 10000, BACKOFF_RESTARTS);
  check_backoff_gaps(BACKOFF_INITIAL_MS, 10000, BACKOFF_RESTARTS);
}

/* 50, 100, 200, then 200 for good; uncapped the last three would be 400, 800, 1600. */
enum { CAP_INITIAL_MS = 50, CAP_MAX_MS = 200, CAP_RESTARTS = 6 };

TEST(restart_delays_stop_growing_at_the_cap) {
  run_backoff(CAP_INITIAL_MS, CAP_MAX_MS, CAP_RESTARTS);
  check_backoff_gaps(CAP_INITIAL_MS, CAP_MAX_MS, CAP_RESTARTS);
  uint64_t uncapped_ms = 0;
  for (int k = 1; k <= CAP_RESTARTS; k++)
    uncapped_ms += backoff_expected_ms(CAP_INITIAL_MS, UINT64_MAX, k);
  uint64_t total_ms = (kid_start_ns[CAP_RESTARTS + 1] - kid_fail_ns[1]) / 1000000u;
  CHECK_LT(total_ms, uncapped_ms);
}

/* A cap that is no power-of-two multiple of the initial delay: 100, 200, 400, then 500 (the
 * cap cuts the doubling short); a delay that doubled past it once more would be 800, beyond
 * 500 + BACKOFF_LATE_MS. */
enum { CUT_INITIAL_MS = 100, CUT_MAX_MS = 500, CUT_RESTARTS = 5 };

TEST(restart_delays_are_cut_at_an_uneven_cap) {
  run_backoff(CUT_INITIAL_MS, CUT_MAX_MS, CUT_RESTARTS);
  check_backoff_gaps(CUT_INITIAL_MS, CUT_MAX_MS, CUT_RESTARTS);
}

/* A first delay above the cap is cut to it (400, cut to 100). */
enum { HIGH_INITIAL_MS = 400, LOW_CAP_MS = 100, LOW_CAP_RESTARTS = 2 };

TEST(a_first_delay_above_the_cap_is_cut_to_it) {
  run_backoff(HIGH_INITIAL_MS, LOW_CAP_MS, LOW_CAP_RESTARTS);
  check_backoff_gaps(HIGH_INITIAL_MS, LOW_CAP_MS, LOW_CAP_RESTARTS);
}

/* ---- stop order: children in reverse start order, depth first ---- */

typedef struct node_spec {
  const char *name;
  int n_children;
  const struct node_spec *children;
} node_spec;

static const accel_behavior node_b;

static int node_start(accel_actor *self, void *state, void *arg) {
  const node_spec *spec = arg;
  CHECK_STR_EQ(accel_actor_name(self), spec->name);
  for (int i = 0; i < spec->n_children; i++) {
    accel_spawn_opts opts = {.name = spec->children[i].name};
    spawn_ok(accel_actor_runtime(self), self, &node_b, (void *)&spec->children[i], &opts);
  }
  return 0;
}

static void node_stop(accel_actor *self, void *state) {
  events_add("stop:%s", accel_actor_name(self));
}

static int ignore_receive(accel_actor *self, void *state, accel_msg *msg) {
  return 0;
}

static const accel_behavior node_b = {
    .name = "node", .start = node_start, .receive = ignore_receive, .stop = node_stop};

/* clang-format off */
#define LEAF(n) {n, 0, NULL}
/* clang-format on */
static const node_spec c0_kids[] = {LEAF("c0.g0"), LEAF("c0.g1")};
static const node_spec c1_kids[] = {LEAF("c1.g0"), LEAF("c1.g1")};
static const node_spec c2_kids[] = {LEAF("c2.g0"), LEAF("c2.g1")};
static const node_spec p_kids[] = {{"c0", 2, c0_kids}, {"c1", 2, c1_kids}, {"c2", 2, c2_kids}};
static const node_spec p_tree = {"p", 3, p_kids};

static int stop_order_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  accel_spawn_opts opts = {.name = "p"};
  CHECK_OK(accel_stop(rt, spawn_ok(rt, self, &node_b, (void *)&p_tree, &opts)));
  return 0;
}

static char stop_order_log[1024];

static void stop_order_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  CHECK_EQ(reason, 0);
  snprintf(stop_order_log, sizeof stop_order_log, "%s", events_get());
  stop_runtime_from(self);
}

static const accel_behavior stop_order_driver_b = {.name = "driver",
                                                   .start = driver_start,
                                                   .receive = stop_order_driver_receive,
                                                   .child_exit = stop_order_child_exit};

TEST(children_stop_in_reverse_start_order) {
  events_reset();
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &stop_order_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_STR_EQ(stop_order_log, "stop:c2.g1 stop:c2.g0 stop:c2 stop:c1.g1 stop:c1.g0 stop:c1 "
                               "stop:c0.g1 stop:c0.g0 stop:c0 stop:p");
}

static int stopper_receive(accel_actor *self, void *state, accel_msg *msg) {
  stop_runtime_from(self);
  return 0;
}

static int stopper_start(accel_actor *self, void *state, void *arg) {
  tell_self(self, MSG_KICK, 0);
  return 0;
}

static const accel_behavior stopper_b = {
    .name = "stopper", .start = stopper_start, .receive = stopper_receive};

TEST(shutdown_stops_top_level_actors_in_reverse_order) {
  static const node_spec tops[] = {{"a", 2, c0_kids}, {"b", 0, NULL}, {"c", 2, c1_kids}};
  events_reset();
  accel_runtime *rt = runtime_new();
  for (int i = 0; i < 3; i++) {
    accel_spawn_opts opts = {.name = tops[i].name};
    spawn_ok(rt, NULL, &node_b, (void *)&tops[i], &opts);
  }
  spawn_ok(rt, NULL, &stopper_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_STR_EQ(events_get(), "stop:c1.g1 stop:c1.g0 stop:c stop:b stop:c0.g1 stop:c0.g0 stop:a");
}

static const test_case tests[] = {
    TEST_CASE(one_for_one_restarts_only_the_failed_child),
    TEST_CASE(one_for_all_restarts_every_child),
    TEST_CASE(rest_for_one_restarts_the_failed_and_later_children),
    TEST_CASE(past_the_limit_the_supervisor_escalates),
    TEST_CASE(limit_stop_child_stops_it_without_escalation),
    TEST_CASE(failing_start_during_restart_counts_toward_the_limit),
    TEST_CASE(restarts_outside_the_window_do_not_count),
    TEST_CASE(restart_delays_grow_exponentially),
    TEST_CASE(restart_delays_stop_growing_at_the_cap),
    TEST_CASE(restart_delays_are_cut_at_an_uneven_cap),
    TEST_CASE(a_first_delay_above_the_cap_is_cut_to_it),
    TEST_CASE(children_stop_in_reverse_start_order),
    TEST_CASE(shutdown_stops_top_level_actors_in_reverse_order),
};

TEST_MAIN(tests)
