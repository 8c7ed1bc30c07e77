/* Many producers: 8 threads send 100k tells each (ACCEL_TEST_SCALE scales it) round-robin to
 * 3 actors with small mailboxes, retrying on EBUSY. Each actor checks every producer's sequence
 * arrives in order; totals and busy refusals are exact. Then asks from several threads with a
 * window of futures in flight, each reply matched to its question. */
#include "util.h"

enum { MSG_SEQ = MSG_FIRST_LOCAL, MSG_QUESTION };
enum { PRODUCERS = 8, SINKS = 3 };

/* ---- tells ---- */

typedef struct sink {
  int index;
  uint64_t next[PRODUCERS]; /* the next sequence number expected from each producer */
  uint64_t total, expected;
  gate *done;
} sink;

static int sink_start(accel_actor *self, void *state, void *arg) {
  *(sink **)state = arg;
  return 0;
}

static int sink_receive(accel_actor *self, void *state, accel_msg *msg) {
  sink *s = *(sink **)state;
  uint64_t producer = msg->arg >> 32, seq = msg->arg & 0xFFFFFFFFu;
  if (producer >= PRODUCERS || seq != s->next[producer])
    TEST_FAIL("sink %d: producer %" PRIu64 " sent %" PRIu64 ", expected %" PRIu64, s->index,
              producer, seq, producer < PRODUCERS ? s->next[producer] : 0);
  s->next[producer] += SINKS;
  if (++s->total == s->expected)
    gate_signal(s->done);
  return 0;
}

static const accel_behavior sink_b = {
    .name = "sink", .state_size = sizeof(sink *), .start = sink_start, .receive = sink_receive};

typedef struct producer {
  accel_runtime *rt;
  const accel_ref *sinks;
  uint32_t index, count;
  uint64_t busy;
  pthread_t thread;
} producer;

static void *produce(void *arg) {
  producer *p = arg;
  for (uint32_t i = 0; i < p->count; i++) {
    accel_msg m = msg_make(MSG_SEQ, (uint64_t)p->index << 32 | i);
    CHECK_OK(tell_retry(p->rt, p->sinks[i % SINKS], &m, &p->busy));
  }
  return NULL;
}

/* Messages of one producer that go to sink `s`: i in [0, count) with i % SINKS == s. */
static uint64_t share_of(uint32_t count, int s) {
  return count / SINKS + ((uint32_t)s < count % SINKS);
}

static void setup_sinks(accel_runtime *rt, sink *sinks, accel_ref *refs, gate *done,
                        uint32_t per_producer) {
  for (int s = 0; s < SINKS; s++) {
    sinks[s] = (sink){.index = s, .done = done};
    sinks[s].expected = PRODUCERS * share_of(per_producer, s);
    for (int p = 0; p < PRODUCERS; p++)
      sinks[s].next[p] = (uint64_t)s;
    accel_spawn_opts opts = {.mailbox_capacity = 256};
    refs[s] = spawn_ok(rt, NULL, &sink_b, &sinks[s], &opts);
  }
}

TEST(many_producers_keep_order_and_totals) {
  uint32_t per_producer = (uint32_t)test_scaled(100000, 300);
  static sink sinks[SINKS];
  static producer ps[PRODUCERS];
  accel_ref refs[SINKS];
  gate done;
  gate_init(&done);
  accel_runtime *rt = runtime_started();
  setup_sinks(rt, sinks, refs, &done, per_producer);
  accel_runtime_stats before = stats_of(rt);
  uint64_t t0 = test_now_ns(), busy = 0;
  for (uint32_t i = 0; i < PRODUCERS; i++) {
    ps[i] = (producer){.rt = rt, .sinks = refs, .index = i, .count = per_producer};
    CHECK_EQ(pthread_create(&ps[i].thread, NULL, produce, &ps[i]), 0);
  }
  for (int i = 0; i < PRODUCERS; i++) {
    CHECK_EQ(pthread_join(ps[i].thread, NULL), 0);
    busy += ps[i].busy;
  }
  CHECK_EQ(gate_wait(&done, SINKS, 60000), 0);
  double secs = (double)(test_now_ns() - t0) / 1e9;
  accel_runtime_stats after;
  runtime_stop_then_destroy(rt, &after);
  uint64_t total = 0;
  for (int s = 0; s < SINKS; s++) {
    CHECK_EQ(sinks[s].total, sinks[s].expected);
    total += sinks[s].total;
  }
  CHECK_EQ(total, (uint64_t)PRODUCERS * per_producer);
  CHECK_EQ(after.busy_refusals - before.busy_refusals, busy);
  CHECK_GE(after.messages_received - before.messages_received, total);
  CHECK_EQ(after.dead_letters - before.dead_letters, 0);
  printf("# %" PRIu64 " messages in %.2f s (%.0f/s), %" PRIu64 " busy refusals\n", total, secs,
         (double)total / secs, busy);
  gate_destroy(&done);
}

/* ---- asks with a window of futures in flight ---- */

enum { ASKERS = 4, WINDOW = 32 };

static int answer_receive(accel_actor *self, void *state, accel_msg *msg) {
  CHECK_EQ(msg->type, MSG_QUESTION);
  CHECK_OK(accel_reply(msg, 0, (void *)(uintptr_t)(msg->arg + 1), NULL));
  return 0;
}

static const accel_behavior answer_b = {.name = "answer", .receive = answer_receive};

typedef struct asker {
  accel_runtime *rt;
  accel_ref to;
  uint64_t base, count;
  pthread_t thread;
} asker;

static accel_future *ask_retrying(asker *a, uint64_t arg) {
  accel_msg m = msg_make(MSG_QUESTION, arg);
  accel_future *f = NULL;
  unsigned streak = 0;
  int rc;
  while ((rc = accel_ask(a->rt, a->to, &m, &f)) == ACCEL_EBUSY)
    pause_after_busy(&streak);
  CHECK_OK(rc);
  return f;
}

static void drain_window(accel_future **window, const uint64_t *args, int n) {
  for (int i = 0; i < n; i++) {
    CHECK_OK(accel_future_wait(window[i], 30000));
    CHECK_PTR_EQ(accel_future_value(window[i]), (void *)(uintptr_t)(args[i] + 1));
    accel_future_release(window[i]);
  }
}

static void *ask_in_windows(void *arg) {
  asker *a = arg;
  accel_future *window[WINDOW];
  uint64_t args[WINDOW];
  int n = 0;
  for (uint64_t i = 0; i < a->count; i++) {
    args[n] = a->base + i;
    window[n] = ask_retrying(a, args[n]);
    if (++n == WINDOW) {
      drain_window(window, args, n);
      n = 0;
    }
  }
  drain_window(window, args, n);
  return NULL;
}

TEST(asks_from_many_threads_with_futures_in_flight) {
  static asker askers[ASKERS];
  uint64_t per_asker = (uint64_t)test_scaled(20000, 200);
  accel_runtime *rt = runtime_started();
  accel_spawn_opts opts = {.mailbox_capacity = 64};
  accel_ref to = spawn_ok(rt, NULL, &answer_b, NULL, &opts);
  uint64_t t0 = test_now_ns();
  for (int i = 0; i < ASKERS; i++) {
    askers[i] = (asker){.rt = rt, .to = to, .base = (uint64_t)i << 40, .count = per_asker};
    CHECK_EQ(pthread_create(&askers[i].thread, NULL, ask_in_windows, &askers[i]), 0);
  }
  for (int i = 0; i < ASKERS; i++)
    CHECK_EQ(pthread_join(askers[i].thread, NULL), 0);
  double secs = (double)(test_now_ns() - t0) / 1e9;
  runtime_stop_then_destroy(rt, NULL);
  printf("# %" PRIu64 " asks in %.2f s (%.0f/s)\n", ASKERS * per_asker, secs,
         (double)(ASKERS * per_asker) / secs);
}

static const test_case tests[] = {
    TEST_CASE(many_producers_keep_order_and_totals),
    TEST_CASE(asks_from_many_threads_with_futures_in_flight),
};

TEST_MAIN(tests)
