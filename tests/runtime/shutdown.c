/* Shutdown under load: producer threads hammer tells and asks (some answered at once, some
 * deferred by the actor and completed later or by its stop hook) while accel_runtime_stop
 * happens. Nothing hangs; every ask that was accepted completes (0 or an error); every `then`
 * registered runs once; every payload is received or dropped, exactly once (no leak under
 * LSan/valgrind). Also: foreign spawns racing the shutdown return instead of hanging. */
#include "util.h"

enum { MSG_TELL = MSG_FIRST_LOCAL, MSG_ASK_NOW, MSG_ASK_DEFER };
enum { ECHOES = 3, PRODUCERS = 4, MAX_DEFERRED = 64 };

static atomic_long received, thens_registered, thens_ran;

/* ---- the echo actor ---- */

typedef struct echo_state {
  accel_future *deferred[MAX_DEFERRED];
  int n_deferred;
  int timer_on;
} echo_state;

static void complete_all(echo_state *s, int status) {
  for (int i = 0; i < s->n_deferred; i++) {
    CHECK_OK(accel_future_complete(s->deferred[i], status, NULL, NULL));
    accel_future_release(s->deferred[i]);
  }
  s->n_deferred = 0;
}

static void defer(accel_actor *self, echo_state *s, accel_msg *msg) {
  uint64_t id;
  if (s->n_deferred == MAX_DEFERRED) {
    CHECK_OK(accel_reply(msg, 0, NULL, NULL));
    return;
  }
  s->deferred[s->n_deferred++] = accel_msg_take_reply(msg);
  if (!s->timer_on)
    CHECK_OK(accel_timer_start(self, 1, 1, MSG_TICK, 0, &id));
  s->timer_on = 1;
}

static int echo_receive(accel_actor *self, void *state, accel_msg *msg) {
  echo_state *s = state;
  atomic_fetch_add(&received, 1);
  switch (msg->type) {
  case MSG_TELL:
    counted_free(msg->data);
    msg->data = NULL;
    return 0;
  case MSG_ASK_NOW:
    CHECK_OK(accel_reply(msg, 0, counted_new(msg->arg), counted_drop));
    return 0;
  case MSG_ASK_DEFER:
    defer(self, s, msg);
    return 0;
  case MSG_TICK:
    complete_all(s, 0);
    return 0;
  }
  TEST_FAIL("unexpected message %u", msg->type);
}

static void echo_stop(accel_actor *self, void *state) {
  complete_all(state, ACCEL_ECANCELED);
}

static const accel_behavior echo_b = {
    .name = "echo", .state_size = sizeof(echo_state), .receive = echo_receive, .stop = echo_stop};

/* ---- producers ---- */

typedef struct producer {
  accel_runtime *rt;
  const accel_ref *echoes;
  atomic_int *quit;
  accel_future **futures;
  size_t n_futures, cap_futures;
  int index;
  pthread_t thread;
} producer;

static int status_explained(int status);

static void on_then(accel_future *f, int status, void *arg) {
  CHECK(status_explained(status));
  atomic_fetch_add(&thens_ran, 1);
}

static void keep_future(producer *p, accel_future *f) {
  if (p->n_futures == p->cap_futures) {
    p->cap_futures = p->cap_futures ? 2 * p->cap_futures : 1024;
    p->futures = realloc(p->futures, p->cap_futures * sizeof *p->futures);
    CHECK(p->futures != NULL);
  }
  if (p->n_futures % 7 == 0) {
    CHECK_OK(accel_future_then(f, on_then, NULL));
    atomic_fetch_add(&thens_registered, 1);
  }
  p->futures[p->n_futures++] = f;
}

/* One send; returns its code. The payload of a refused tell is freed here. */
static int send_one(producer *p, uint64_t i) {
  accel_ref to = p->echoes[i % ECHOES];
  uint32_t type = MSG_TELL + (uint32_t)(i % 3);
  accel_msg m = msg_make(type, i);
  accel_future *f = NULL;
  if (type == MSG_TELL) {
    m.data = counted_new(i);
    m.drop = counted_drop;
    int rc = accel_tell(p->rt, to, &m);
    if (rc != 0)
      counted_free(m.data);
    return rc;
  }
  int rc = accel_ask(p->rt, to, &m, &f);
  if (rc == 0)
    keep_future(p, f);
  return rc;
}

static void *produce(void *arg) {
  producer *p = arg;
  unsigned streak = 0;
  for (uint64_t i = (uint64_t)p->index; !atomic_load(p->quit); i += PRODUCERS) {
    int rc = send_one(p, i);
    if (rc == ACCEL_ECLOSED)
      break;
    if (rc == ACCEL_EBUSY)
      pause_after_busy(&streak);
    else if (rc != 0 && rc != ACCEL_ESTALE) /* ESTALE: the echo stopped in the shutdown */
      TEST_FAIL("send returned %s", accel_err_name(rc));
  }
  return NULL;
}

/* Every accepted ask completed with 0 or an error the shutdown explains. */
static int status_explained(int status) {
  return status == 0 || status == ACCEL_ESTALE || status == ACCEL_ECANCELED ||
         status == ACCEL_ECLOSED;
}

/* Every accepted ask completed with 0 or an error a stop explains. `wait_ms` < 0: poll only
 * (the loop has exited, so nothing can still complete them). */
static void check_and_release_futures(producer *p, int64_t wait_ms) {
  for (size_t i = 0; i < p->n_futures; i++) {
    int status = wait_ms < 0 ? accel_future_poll(p->futures[i])
                             : accel_future_wait(p->futures[i], wait_ms);
    if (status == ACCEL_EAGAIN || status == ACCEL_ETIMEDOUT)
      TEST_FAIL("producer %d: future %zu never completed", p->index, i);
    if (!status_explained(status))
      TEST_FAIL("future completed with %s", accel_err_name(status));
    accel_future_release(p->futures[i]);
  }
  free(p->futures);
}

/* ---- one round ---- */

typedef struct round_setup {
  long wait_for_received; /* messages received before the stop */
  int loop_on_main;       /* run the loop on this thread, stopped by another */
} round_setup;

typedef struct round {
  const round_setup *setup;
  accel_runtime *rt;
  accel_ref echoes[ECHOES];
  producer producers[PRODUCERS];
  atomic_int quit;
} round;

static void start_producers(round *r) {
  for (int i = 0; i < PRODUCERS; i++) {
    producer *p = &r->producers[i];
    *p = (producer){.rt = r->rt, .echoes = r->echoes, .quit = &r->quit, .index = i};
    CHECK_EQ(pthread_create(&p->thread, NULL, produce, p), 0);
  }
}

static void wait_for_progress(long want) {
  uint64_t deadline = test_now_ms() + 10000;
  while (atomic_load(&received) < want && test_now_ms() < deadline)
    test_sleep_ms(1);
}

static void *stop_after_progress(void *arg) {
  round *r = arg;
  wait_for_progress(r->setup->wait_for_received);
  accel_runtime_stop(r->rt);
  return NULL;
}

static void run_and_stop(round *r) {
  pthread_t stopper;
  if (r->setup->loop_on_main) {
    CHECK_EQ(pthread_create(&stopper, NULL, stop_after_progress, r), 0);
    CHECK_OK(accel_runtime_run(r->rt));
    CHECK_EQ(pthread_join(stopper, NULL), 0);
  } else {
    CHECK_OK(accel_runtime_start(r->rt));
    stop_after_progress(r);
    CHECK_OK(accel_runtime_join(r->rt));
  }
}

static void run_round(const round_setup *setup) {
  static round r;
  memset(&r, 0, sizeof r);
  r.setup = setup;
  counted_reset();
  atomic_store(&received, 0);
  atomic_store(&thens_registered, 0);
  atomic_store(&thens_ran, 0);
  r.rt = runtime_new();
  for (int i = 0; i < ECHOES; i++) {
    accel_spawn_opts opts = {.mailbox_capacity = 64};
    r.echoes[i] = spawn_ok(r.rt, NULL, &echo_b, NULL, &opts);
  }
  start_producers(&r);
  run_and_stop(&r); /* returns once the loop has exited */
  atomic_store(&r.quit, 1);
  for (int i = 0; i < PRODUCERS; i++)
    CHECK_EQ(pthread_join(r.producers[i].thread, NULL), 0);
  for (int i = 0; i < PRODUCERS; i++)
    check_and_release_futures(&r.producers[i], -1);
  accel_runtime_destroy(r.rt);
  CHECK_EQ(atomic_load(&thens_ran), atomic_load(&thens_registered));
  CHECK_EQ(counted_live(), 0);
}

TEST(stop_at_once_under_load) {
  static const round_setup setup = {.wait_for_received = 0};
  run_round(&setup);
}

TEST(stop_after_some_traffic) {
  static round_setup setup;
  setup.wait_for_received = test_scaled(2000, 100);
  run_round(&setup);
}

TEST(stop_after_more_traffic) {
  static round_setup setup;
  setup.wait_for_received = test_scaled(20000, 500);
  run_round(&setup);
}

TEST(loop_on_main_stopped_by_another_thread_under_load) {
  static round_setup setup;
  setup.wait_for_received = test_scaled(5000, 200);
  setup.loop_on_main = 1;
  run_round(&setup);
}

TEST(repeated_rounds) {
  static round_setup setup;
  for (int i = 0; i < 10; i++) {
    setup.wait_for_received = i * test_scaled(300, 10);
    run_round(&setup);
  }
}

/* ---- sends racing the stop of their target (the runtime keeps running) ---- */

TEST(sends_racing_the_stop_of_their_target) {
  static round r;
  static const round_setup setup = {.wait_for_received = 0};
  memset(&r, 0, sizeof r);
  r.setup = &setup;
  counted_reset();
  atomic_store(&received, 0);
  atomic_store(&thens_registered, 0);
  atomic_store(&thens_ran, 0);
  r.rt = runtime_started();
  for (int i = 0; i < ECHOES; i++) {
    accel_spawn_opts opts = {.mailbox_capacity = 64};
    r.echoes[i] = spawn_ok(r.rt, NULL, &echo_b, NULL, &opts);
  }
  start_producers(&r);
  for (int i = 0; i < ECHOES; i++) {
    wait_for_progress((i + 1) * test_scaled(1000, 50));
    CHECK_OK(accel_stop(r.rt, r.echoes[i]));
  }
  test_sleep_ms(20); /* producers now meet stale refs */
  atomic_store(&r.quit, 1);
  for (int i = 0; i < PRODUCERS; i++)
    CHECK_EQ(pthread_join(r.producers[i].thread, NULL), 0);
  for (int i = 0; i < PRODUCERS; i++)
    check_and_release_futures(&r.producers[i], 20000); /* the loop still runs */
  runtime_stop_then_destroy(r.rt, NULL);
  CHECK_EQ(atomic_load(&thens_ran), atomic_load(&thens_registered));
  CHECK_EQ(counted_live(), 0);
}

/* ---- foreign spawns racing the shutdown ---- */

static atomic_int spawner_done;

static void *spawn_until_refused(void *arg) {
  accel_runtime *rt = arg;
  for (;;) {
    accel_ref ref = ACCEL_REF_NONE;
    int rc = accel_spawn(rt, NULL, &echo_b, NULL, NULL, &ref);
    if (rc != 0) {
      CHECK(rc == ACCEL_ECLOSED || rc == ACCEL_ESTALE);
      break;
    }
    rc = accel_stop(rt, ref);
    CHECK(rc == 0 || rc == ACCEL_ECLOSED || rc == ACCEL_ESTALE);
  }
  atomic_fetch_add(&spawner_done, 1);
  return NULL;
}

TEST(foreign_spawns_racing_shutdown_return) {
  enum { SPAWNERS = 3 };
  for (int round_no = 0; round_no < 5; round_no++) {
    pthread_t th[SPAWNERS];
    atomic_store(&spawner_done, 0);
    accel_runtime *rt = runtime_started();
    for (int i = 0; i < SPAWNERS; i++)
      CHECK_EQ(pthread_create(&th[i], NULL, spawn_until_refused, rt), 0);
    test_sleep_ms((unsigned)(round_no * 3));
    accel_runtime_stop(rt);
    CHECK_OK(accel_runtime_join(rt));
    for (int i = 0; i < SPAWNERS; i++)
      CHECK_EQ(pthread_join(th[i], NULL), 0); /* hangs here if a spawn waits forever */
    CHECK_EQ(atomic_load(&spawner_done), SPAWNERS);
    accel_runtime_destroy(rt);
  }
}

static const test_case tests[] = {
    TEST_CASE(stop_at_once_under_load),
    TEST_CASE(stop_after_some_traffic),
    TEST_CASE(stop_after_more_traffic),
    TEST_CASE(loop_on_main_stopped_by_another_thread_under_load),
    TEST_CASE(repeated_rounds),
    TEST_CASE(sends_racing_the_stop_of_their_target),
    TEST_CASE(foreign_spawns_racing_shutdown_return),
};

TEST_MAIN(tests)
