/* The loop: accel_runtime_run on the calling thread (stopped by an actor or by another
 * thread), accel_runtime_start/stop/join on the runtime's own thread, a second run is
 * EALREADY, stop is idempotent, spawns from foreign threads while running (the start hook has
 * run on the loop when accel_spawn returns), sends after shutdown are refused without hanging,
 * and a small ref table reuses slots with new generations. */
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include "util.h"

enum { MSG_PING = MSG_FIRST_LOCAL, MSG_SETTLED };

static accel_runtime *the_rt;
static pthread_t main_thread;

static int kick_on_start(accel_actor *self, void *state, void *arg) {
  tell_self(self, MSG_KICK, 0);
  return 0;
}

/* ---- run on the calling thread, stopped by an actor ---- */

static int in_loop_checks;

static int self_stopper_receive(accel_actor *self, void *state, accel_msg *msg) {
  CHECK_EQ(accel_runtime_on_loop(the_rt), 1);
  CHECK(pthread_equal(pthread_self(), main_thread));
  CHECK_ERR(accel_runtime_run(the_rt), ACCEL_EALREADY);
  accel_runtime_stop(the_rt);
  accel_runtime_stop(the_rt); /* idempotent */
  in_loop_checks++;
  return 0;
}

static const accel_behavior self_stopper_b = {
    .name = "self-stopper", .start = kick_on_start, .receive = self_stopper_receive};

TEST(run_on_the_calling_thread_until_an_actor_stops_it) {
  in_loop_checks = 0;
  main_thread = pthread_self();
  the_rt = runtime_new();
  spawn_ok(the_rt, NULL, &self_stopper_b, NULL, NULL);
  CHECK_OK(accel_runtime_run(the_rt));
  CHECK_EQ(accel_runtime_on_loop(the_rt), 0);
  accel_runtime_destroy(the_rt);
  CHECK_EQ(in_loop_checks, 1);
}

/* ---- run on the calling thread, stopped by another thread ---- */

static gate loop_running;

static int signal_receive(accel_actor *self, void *state, accel_msg *msg) {
  gate_signal(&loop_running);
  return 0;
}

static const accel_behavior signaller_b = {
    .name = "signaller", .start = kick_on_start, .receive = signal_receive};

static void *stop_when_running(void *arg) {
  CHECK_EQ(gate_wait(&loop_running, 1, 20000), 0);
  CHECK_EQ(accel_runtime_on_loop(the_rt), 0);
  CHECK_ERR(accel_runtime_run(the_rt), ACCEL_EALREADY);
  accel_runtime_stop(the_rt);
  accel_runtime_stop(the_rt);
  return NULL;
}

TEST(run_on_the_calling_thread_until_another_thread_stops_it) {
  pthread_t stopper;
  gate_init(&loop_running);
  the_rt = runtime_new();
  spawn_ok(the_rt, NULL, &signaller_b, NULL, NULL);
  CHECK_EQ(pthread_create(&stopper, NULL, stop_when_running, NULL), 0);
  CHECK_OK(accel_runtime_run(the_rt));
  CHECK_EQ(pthread_join(stopper, NULL), 0);
  accel_runtime_destroy(the_rt);
  gate_destroy(&loop_running);
}

/* ---- the runtime's own thread; spawn from a foreign thread ---- */

static atomic_int foreign_starts, foreign_stops, foreign_start_on_loop, foreign_start_on_main;
static gate pinged;

static int foreign_start(accel_actor *self, void *state, void *arg) {
  atomic_fetch_add(&foreign_starts, 1);
  if (accel_runtime_on_loop(accel_actor_runtime(self)))
    atomic_fetch_add(&foreign_start_on_loop, 1);
  if (pthread_equal(pthread_self(), main_thread))
    atomic_fetch_add(&foreign_start_on_main, 1);
  return arg == NULL ? 0 : (int)(intptr_t)arg;
}

static int foreign_receive(accel_actor *self, void *state, accel_msg *msg) {
  CHECK_EQ(msg->type, MSG_PING);
  gate_signal(&pinged);
  return 0;
}

static void foreign_stop(accel_actor *self, void *state) {
  atomic_fetch_add(&foreign_stops, 1);
}

static const accel_behavior foreign_b = {
    .name = "foreign", .start = foreign_start, .receive = foreign_receive, .stop = foreign_stop};

static void reset_foreign(void) {
  atomic_store(&foreign_starts, 0);
  atomic_store(&foreign_stops, 0);
  atomic_store(&foreign_start_on_loop, 0);
  atomic_store(&foreign_start_on_main, 0);
  gate_init(&pinged);
  main_thread = pthread_self();
}

TEST(own_thread_start_stop_join_and_foreign_spawn) {
  reset_foreign();
  the_rt = runtime_started();
  CHECK_EQ(accel_runtime_on_loop(the_rt), 0);
  accel_ref ref = spawn_ok(the_rt, NULL, &foreign_b, NULL, NULL);
  CHECK_EQ(atomic_load(&foreign_starts), 1); /* ran before accel_spawn returned */
  CHECK_EQ(atomic_load(&foreign_start_on_loop), 1);
  CHECK_EQ(atomic_load(&foreign_start_on_main), 0);
  CHECK_OK(tell_arg(the_rt, ref, MSG_PING, 0));
  CHECK_EQ(gate_wait(&pinged, 1, 20000), 0);
  CHECK_ERR(accel_runtime_run(the_rt), ACCEL_EALREADY);
  accel_runtime_stop(the_rt);
  CHECK_OK(accel_runtime_join(the_rt));
  accel_runtime_stop(the_rt); /* idempotent, also after the loop exited */
  CHECK_EQ(atomic_load(&foreign_stops), 1);
  accel_runtime_destroy(the_rt);
  CHECK_EQ(atomic_load(&foreign_stops), 1);
  gate_destroy(&pinged);
}

TEST(foreign_spawn_with_failing_start_returns_its_code) {
  reset_foreign();
  the_rt = runtime_started();
  accel_ref ref = ACCEL_REF_NONE;
  CHECK_ERR(accel_spawn(the_rt, NULL, &foreign_b, (void *)(intptr_t)ACCEL_ENOENT, NULL, &ref),
            ACCEL_ENOENT);
  CHECK_EQ(atomic_load(&foreign_starts), 1);
  runtime_stop_then_destroy(the_rt, NULL);
  gate_destroy(&pinged);
}

/* ---- many threads spawn at once ---- */

enum { SPAWN_THREADS = 4, SPAWNS_PER_THREAD = 100 };
static accel_ref spawned[SPAWN_THREADS][SPAWNS_PER_THREAD];

static void *spawn_many(void *arg) {
  int t = (int)(intptr_t)arg;
  for (int i = 0; i < SPAWNS_PER_THREAD; i++)
    spawned[t][i] = spawn_ok(the_rt, NULL, &foreign_b, NULL, NULL);
  return NULL;
}

static void check_refs_distinct(void) {
  const accel_ref *all = &spawned[0][0];
  for (int i = 0; i < SPAWN_THREADS * SPAWNS_PER_THREAD; i++)
    for (int j = i + 1; j < SPAWN_THREADS * SPAWNS_PER_THREAD; j++)
      CHECK(!ref_eq(all[i], all[j]));
}

TEST(spawns_from_many_threads_at_once) {
  pthread_t th[SPAWN_THREADS];
  reset_foreign();
  the_rt = runtime_started();
  for (int t = 0; t < SPAWN_THREADS; t++)
    CHECK_EQ(pthread_create(&th[t], NULL, spawn_many, (void *)(intptr_t)t), 0);
  for (int t = 0; t < SPAWN_THREADS; t++)
    CHECK_EQ(pthread_join(th[t], NULL), 0);
  check_refs_distinct();
  for (int t = 0; t < SPAWN_THREADS; t++)
    for (int i = 0; i < SPAWNS_PER_THREAD; i++)
      CHECK_OK(tell_arg(the_rt, spawned[t][i], MSG_PING, 0));
  CHECK_EQ(gate_wait(&pinged, SPAWN_THREADS * SPAWNS_PER_THREAD, 20000), 0);
  accel_runtime_stats stats;
  runtime_stop_then_destroy(the_rt, &stats);
  CHECK_EQ(atomic_load(&foreign_starts), SPAWN_THREADS * SPAWNS_PER_THREAD);
  CHECK_EQ(atomic_load(&foreign_start_on_loop), SPAWN_THREADS * SPAWNS_PER_THREAD);
  CHECK_EQ(atomic_load(&foreign_stops), SPAWN_THREADS * SPAWNS_PER_THREAD);
  CHECK_GE(stats.actors_spawned, SPAWN_THREADS * SPAWNS_PER_THREAD);
  gate_destroy(&pinged);
}

/* ---- after shutdown: refused, never a hang ---- */

TEST(after_shutdown_sends_and_spawns_are_refused) {
  reset_foreign();
  the_rt = runtime_started();
  accel_ref ref = spawn_ok(the_rt, NULL, &foreign_b, NULL, NULL);
  accel_runtime_stop(the_rt);
  CHECK_OK(accel_runtime_join(the_rt));
  int rc = tell_arg(the_rt, ref, MSG_PING, 0);
  CHECK(rc == ACCEL_ECLOSED || rc == ACCEL_ESTALE);
  accel_msg m = msg_make(MSG_PING, 0);
  accel_future *f = NULL;
  rc = accel_ask(the_rt, ref, &m, &f);
  CHECK(rc == ACCEL_ECLOSED || rc == ACCEL_ESTALE);
  rc = accel_stop(the_rt, ref);
  CHECK(rc == ACCEL_ECLOSED || rc == ACCEL_ESTALE);
  rc = accel_spawn(the_rt, NULL, &foreign_b, NULL, NULL, &ref);
  CHECK_LT(rc, 0);
  CHECK_EQ(atomic_load(&foreign_starts), 1);
  accel_runtime_destroy(the_rt);
  CHECK_EQ(atomic_load(&foreign_stops), 1);
  gate_destroy(&pinged);
}

/* ---- a small ref table: slots run out, then are reused with a new generation ---- */

enum { TABLE_SIZE = 8 };

typedef struct table_run {
  accel_ref first;
  int spawned, refusal, respawned, retries;
} table_run;

static table_run table;

static void fill_the_table(accel_actor *self) {
  accel_ref ref = ACCEL_REF_NONE;
  int rc = 0;
  for (int i = 0; i < 4 * TABLE_SIZE && rc == 0; i++) {
    rc = accel_spawn(accel_actor_runtime(self), self, &foreign_b, NULL, NULL, &ref);
    if (rc == 0 && table.spawned++ == 0)
      table.first = ref;
  }
  table.refusal = rc;
}

/* A stopped actor's slot comes back once the runtime has swept it: retry for a while. */
static void respawn_in_freed_slot(accel_actor *self) {
  accel_runtime *rt = accel_actor_runtime(self);
  accel_ref again = ACCEL_REF_NONE;
  uint64_t id;
  int rc = accel_spawn(rt, self, &foreign_b, NULL, NULL, &again);
  if (rc == table.refusal && ++table.retries < 200) {
    CHECK_OK(accel_timer_start(self, 5, 0, MSG_SETTLED, 0, &id));
    return;
  }
  CHECK_OK(rc);
  CHECK(!ref_eq(again, table.first));
  if (again.slot == table.first.slot)
    CHECK_NE(again.gen, table.first.gen);
  CHECK_ERR(tell_arg(rt, table.first, MSG_PING, 0), ACCEL_ESTALE);
  table.respawned++;
  stop_runtime_from(self);
}

static int table_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_SETTLED) {
    respawn_in_freed_slot(self);
    return 0;
  }
  fill_the_table(self);
  if (table.spawned > 0)
    CHECK_OK(accel_stop(accel_actor_runtime(self), table.first));
  else
    stop_runtime_from(self);
  return 0;
}

static void table_driver_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  CHECK(ref_eq(child, table.first));
  CHECK_ERR(tell_arg(accel_actor_runtime(self), table.first, MSG_PING, 0), ACCEL_ESTALE);
  respawn_in_freed_slot(self);
}

static const accel_behavior table_driver_b = {.name = "driver",
                                              .start = kick_on_start,
                                              .receive = table_driver_receive,
                                              .child_exit = table_driver_child_exit};

TEST(small_ref_table_runs_out_then_reuses_slots) {
  reset_foreign();
  memset(&table, 0, sizeof table);
  accel_runtime_opts opts = {.max_actors = TABLE_SIZE};
  CHECK_OK(accel_runtime_create(&the_rt, &opts));
  spawn_ok(the_rt, NULL, &table_driver_b, NULL, NULL);
  runtime_run_then_destroy(the_rt, NULL);
  printf("# %d spawned, then %s; respawned after %d retries\n", table.spawned,
         accel_err_name(table.refusal), table.retries);
  CHECK_GE(table.spawned, 1);
  CHECK_LE(table.spawned, TABLE_SIZE);
  CHECK_LT(table.refusal, 0);
  CHECK_EQ(table.respawned, 1);
  CHECK_EQ(atomic_load(&foreign_starts), atomic_load(&foreign_stops));
  gate_destroy(&pinged);
}

/* ---- the loop's longest stall ---- */

static int sleepy_receive(accel_actor *self, void *state, accel_msg *msg) {
  struct timespec d = {.tv_nsec = (long)msg->arg * 1000000L};
  nanosleep(&d, NULL); /* a callback that blocks the loop (what accel must never do) */
  return 0;
}

static const accel_behavior sleepy_b = {.name = "sleepy", .receive = sleepy_receive};

static void ask_and_wait(accel_runtime *rt, accel_ref to, uint64_t ms) {
  accel_future *f;
  accel_msg m = msg_make(MSG_FIRST_LOCAL, ms);
  CHECK_OK(accel_ask(rt, to, &m, &f));
  CHECK_OK(accel_future_wait(f, 20000));
  accel_future_release(f);
}

/* The stall, once it is at least `want` or a second has passed: the answer to an ask comes
 * before its turn ends, and the turn is timed when it ends. */
static uint64_t stall_after_turn(accel_runtime *rt, uint64_t want) {
  uint64_t v = 0;
  for (int i = 0; i < 100 && (v = accel_runtime_max_stall_ns(rt, 0)) < want; i++) {
    struct timespec d = {.tv_nsec = 10000000L};
    nanosleep(&d, NULL);
  }
  return v;
}

/* A callback that holds the loop 60 ms shows as a stall of at least that; after a reset, a
 * callback of 1 ms shows as less than the 60 ms (an upper bound with room for a busy
 * machine's preemption, far from what a missed reset would show). */
TEST(longest_stall_is_measured_and_reset) {
  accel_runtime *rt = runtime_started();
  accel_ref s = spawn_ok(rt, NULL, &sleepy_b, NULL, NULL);
  ask_and_wait(rt, s, 60);
  CHECK_GE(stall_after_turn(rt, 60000000ull), 60000000ull);
  CHECK_GE(accel_runtime_max_stall_ns(rt, 1), 60000000ull);
  ask_and_wait(rt, s, 1);
  uint64_t after = stall_after_turn(rt, 1000000ull);
  CHECK_GE(after, 1000000ull);
  CHECK_LT(after, 60000000ull);
  CHECK_EQ(accel_runtime_max_stall_ns(NULL, 0), 0);
  accel_runtime_stop(rt);
  CHECK_OK(accel_runtime_join(rt));
  accel_runtime_destroy(rt);
}

/* ---- the loop's busy time ---- */

/* The loop's busy time once it is at least `want`, or after a second: a turn is counted when
 * it ends, after the answer it sent. */
static uint64_t busy_at_least(accel_runtime *rt, uint64_t want) {
  uint64_t v = 0;
  for (int i = 0; i < 100 && (v = accel_runtime_loop_busy_ns(rt, 0)) < want; i++)
    test_sleep_ms(10);
  return v;
}

/* An actor that sends itself k - 1 after each message of k, each turn holding the loop 1 ms:
 * turns back to back, without the loop polling between them. */
static atomic_int chain_left;

static int chain_receive(accel_actor *self, void *state, accel_msg *msg) {
  struct timespec d = {.tv_nsec = 1000000L};
  nanosleep(&d, NULL);
  if (msg->arg > 1) {
    accel_msg next = msg_make(MSG_FIRST_LOCAL, msg->arg - 1);
    CHECK_OK(accel_tell(accel_actor_runtime(self), accel_self(self), &next));
  }
  atomic_store(&chain_left, (int)msg->arg - 1);
  return 0;
}

static const accel_behavior chain_b = {.name = "chain", .receive = chain_receive};

/* Twenty turns of 1 ms back to back count at least 20 ms. */
TEST(busy_time_counts_turns_back_to_back) {
  accel_runtime *rt = runtime_started();
  accel_ref c = spawn_ok(rt, NULL, &chain_b, NULL, NULL);
  uint64_t before = accel_runtime_loop_busy_ns(rt, 0);
  atomic_store(&chain_left, 20);
  accel_msg m = msg_make(MSG_FIRST_LOCAL, 20);
  CHECK_OK(accel_tell(rt, c, &m));
  TEST_WAIT_FOR(atomic_load(&chain_left) == 0, 1);
  CHECK_GE(busy_at_least(rt, before + 20000000ull) - before, 20000000ull);
  accel_runtime_stop(rt);
  CHECK_OK(accel_runtime_join(rt));
  accel_runtime_destroy(rt);
}

/* A turn that holds the loop 60 ms counts at least that; the 300 ms after it, which the loop
 * spends polling (runtime-loop-spin runs this with a spin of 100 ms) or asleep, add less than
 * 30 ms: a count of the loop's time rather than its turns' would add the spin's 100 (the empty
 * turns of a spin are short: its time goes to libuv's polls between them). */
TEST(busy_time_counts_turns_with_work_not_waits) {
  accel_runtime *rt = runtime_started();
  accel_ref s = spawn_ok(rt, NULL, &sleepy_b, NULL, NULL);
  ask_and_wait(rt, s, 0);
  uint64_t before = accel_runtime_loop_busy_ns(rt, 0);
  ask_and_wait(rt, s, 60);
  uint64_t after = busy_at_least(rt, before + 60000000ull);
  CHECK_GE(after - before, 60000000ull);
  test_sleep_ms(300);
  uint64_t idle = accel_runtime_loop_busy_ns(rt, 0) - after;
  const char *spin = getenv("ACCEL_SPIN_US");
  printf("# 300 ms without work (ACCEL_SPIN_US %s) added %.3f ms of busy time\n",
         spin ? spin : "unset", (double)idle * 1e-6);
  CHECK_LT(idle, 30000000ull);
  CHECK_EQ(accel_runtime_loop_busy_ns(rt, 1), 0); /* one loop: no loop 1 */
  CHECK_EQ(accel_runtime_loop_busy_ns(NULL, 0), 0);
  accel_runtime_stop(rt);
  CHECK_OK(accel_runtime_join(rt));
  accel_runtime_destroy(rt);
}

/* ---- idle ---- */

static double process_cpu_s(void) {
  struct rusage ru;
  CHECK_EQ(getrusage(RUSAGE_SELF, &ru), 0);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec * 1e-6;
}

/* A started runtime with an actor and nothing to do sleeps in its poll: over two seconds the
 * process uses at most 50 ms of CPU (a spinning loop would use about 2000; under valgrind,
 * whose own start-up may spill into the window, 500). */
TEST(an_idle_runtime_uses_no_cpu) {
  accel_runtime *rt = runtime_started();
  accel_ref s = spawn_ok(rt, NULL, &sleepy_b, NULL, NULL);
  ask_and_wait(rt, s, 0);
  test_sleep_ms(200);
  double t0 = process_cpu_s();
  test_sleep_ms(2000);
  double used = process_cpu_s() - t0;
  printf("# idle runtime: %.1f ms of CPU in 2 s\n", used * 1e3);
  CHECK(used < (test_under_valgrind() ? 0.5 : 0.05));
  accel_runtime_stop(rt);
  CHECK_OK(accel_runtime_join(rt));
  accel_runtime_destroy(rt);
}

static const test_case tests[] = {
    TEST_CASE(run_on_the_calling_thread_until_an_actor_stops_it),
    TEST_CASE(run_on_the_calling_thread_until_another_thread_stops_it),
    TEST_CASE(own_thread_start_stop_join_and_foreign_spawn),
    TEST_CASE(foreign_spawn_with_failing_start_returns_its_code),
    TEST_CASE(spawns_from_many_threads_at_once),
    TEST_CASE(small_ref_table_runs_out_then_reuses_slots),
    TEST_CASE(after_shutdown_sends_and_spawns_are_refused),
    TEST_CASE(longest_stall_is_measured_and_reset),
    TEST_CASE(busy_time_counts_turns_with_work_not_waits),
    TEST_CASE(busy_time_counts_turns_back_to_back),
    TEST_CASE(an_idle_runtime_uses_no_cpu),
};

TEST_MAIN(tests)
