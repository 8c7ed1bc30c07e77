/* Mailboxes and refs: tell delivers the message and its ownership; order per sender (an actor,
 * a thread, several threads); fairness between busy actors (throughput); backpressure (a full
 * mailbox refuses with EBUSY and keeps nothing); stale refs (stopped, restarted, NONE, made up)
 * are dead letters; messages pending in an incarnation that ends are dropped and their asks
 * complete with ESTALE. */
#include "util.h"

enum {
  MSG_TAKE = MSG_FIRST_LOCAL, /* the receiver takes msg->data */
  MSG_LEAVE,                  /* the receiver leaves msg->data to the runtime */
  MSG_SEQ,                    /* arg = sequence number (or producer << 32 | sequence) */
  MSG_FAIL,
  MSG_PING,
  MSG_DONE,
  MSG_RESTARTED,
};

static int kick_on_start(accel_actor *self, void *state, void *arg) {
  tell_self(self, MSG_KICK, 0);
  return 0;
}

static void tell_parent(accel_actor *self, uint32_t type, uint64_t arg) {
  CHECK_OK(tell_arg(accel_actor_runtime(self), accel_parent(self), type, arg));
}

/* ---- delivery and ownership ---- */

static accel_ref delivery_driver;
static int delivery_received;

static int delivery_receive(accel_actor *self, void *state, accel_msg *msg) {
  CHECK(ref_eq(msg->sender, delivery_driver));
  CHECK(msg->reply == NULL);
  CHECK(accel_msg_take_reply(msg) == NULL);
  CHECK_OK(accel_reply(msg, 0, NULL, NULL)); /* a no-op for a tell */
  CHECK_EQ(msg->flags, 0x55);
  CHECK_EQ(msg->arg, 7);
  CHECK(msg->data != NULL);
  CHECK_EQ(((counted *)msg->data)->value, 7);
  CHECK(msg->drop == counted_drop);
  if (msg->type == MSG_TAKE) {
    counted_free(msg->data);
    msg->data = NULL;
  }
  if (++delivery_received == 2)
    tell_parent(self, MSG_DONE, 0);
  return 0;
}

static const accel_behavior delivery_b = {.name = "delivery", .receive = delivery_receive};

static int delivery_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  if (msg->type == MSG_DONE) {
    stop_runtime_from(self);
    return 0;
  }
  accel_ref r = spawn_ok(rt, self, &delivery_b, NULL, NULL);
  delivery_driver = accel_self(self);
  accel_msg m = msg_make(MSG_TAKE, 7);
  m.flags = 0x55;
  m.data = counted_new(7);
  m.drop = counted_drop;
  CHECK_OK(accel_tell(rt, r, &m));
  m.type = MSG_LEAVE;
  m.data = counted_new(7);
  CHECK_OK(accel_tell(rt, r, &m));
  return 0;
}

static const accel_behavior delivery_driver_b = {
    .name = "driver", .start = kick_on_start, .receive = delivery_driver_receive};

TEST(tell_delivers_fields_and_data_ownership) {
  counted_reset();
  delivery_received = 0;
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &delivery_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_EQ(delivery_received, 2);
  CHECK_EQ(counted_dropped(), 1); /* only the data the receiver left */
  CHECK_EQ(counted_live(), 0);
}

/* ---- a tell from a thread that is not an actor ---- */

static gate foreign_gate;

static int foreign_receive(accel_actor *self, void *state, accel_msg *msg) {
  CHECK(ref_eq(msg->sender, ACCEL_REF_NONE));
  CHECK_EQ(msg->type, MSG_PING);
  CHECK_EQ(msg->arg, 99);
  CHECK(msg->data == NULL);
  gate_signal(&foreign_gate);
  return 0;
}

static const accel_behavior foreign_b = {.name = "foreign", .receive = foreign_receive};

TEST(tell_from_a_thread_has_no_sender) {
  gate_init(&foreign_gate);
  accel_runtime *rt = runtime_started();
  accel_ref r = spawn_ok(rt, NULL, &foreign_b, NULL, NULL);
  accel_msg m = msg_make(MSG_PING, 99);
  m.sender = (accel_ref){5, 5}; /* the runtime fills it in */
  CHECK_OK(accel_tell(rt, r, &m));
  CHECK_EQ(gate_wait(&foreign_gate, 1, 20000), 0);
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&foreign_gate);
}

/* ---- order from one actor ---- */

enum { ACTOR_BURST = 1000 };
static uint64_t seq_expected;

static int seq_receive(accel_actor *self, void *state, accel_msg *msg) {
  CHECK_EQ(msg->type, MSG_SEQ);
  CHECK_EQ(msg->arg, seq_expected);
  if (++seq_expected == ACTOR_BURST)
    stop_runtime_from(self);
  return 0;
}

static const accel_behavior seq_b = {.name = "seq", .receive = seq_receive};

static int burst_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  accel_spawn_opts opts = {.mailbox_capacity = 1024, .throughput = 7};
  accel_ref r = spawn_ok(rt, self, &seq_b, NULL, &opts);
  for (uint64_t i = 0; i < ACTOR_BURST; i++)
    CHECK_OK(tell_arg(rt, r, MSG_SEQ, i));
  return 0;
}

static const accel_behavior burst_driver_b = {
    .name = "driver", .start = kick_on_start, .receive = burst_driver_receive};

TEST(order_from_one_actor_is_kept) {
  seq_expected = 0;
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &burst_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_EQ(seq_expected, ACTOR_BURST);
}

/* ---- order per producer thread, several threads, a small mailbox ---- */

enum { MAX_PRODUCERS = 8 };

typedef struct order_sink {
  uint64_t next[MAX_PRODUCERS];
  uint64_t total, expected_total;
  gate done;
} order_sink;

static int order_sink_receive(accel_actor *self, void *state, accel_msg *msg) {
  order_sink *sink = *(order_sink **)state;
  uint64_t producer = msg->arg >> 32, seq = msg->arg & 0xFFFFFFFFu;
  CHECK_LT(producer, MAX_PRODUCERS);
  CHECK_EQ(seq, sink->next[producer]);
  sink->next[producer]++;
  if (++sink->total == sink->expected_total)
    gate_signal(&sink->done);
  return 0;
}

static int order_sink_start(accel_actor *self, void *state, void *arg) {
  *(order_sink **)state = arg;
  return 0;
}

static const accel_behavior order_sink_b = {.name = "sink",
                                            .state_size = sizeof(order_sink *),
                                            .start = order_sink_start,
                                            .receive = order_sink_receive};

typedef struct producer {
  accel_runtime *rt;
  accel_ref to;
  uint32_t index;
  uint32_t count;
  uint64_t busy;
  pthread_t thread;
} producer;

static void *produce_in_order(void *arg) {
  producer *p = arg;
  for (uint32_t i = 0; i < p->count; i++) {
    accel_msg m = msg_make(MSG_SEQ, (uint64_t)p->index << 32 | i);
    CHECK_OK(tell_retry(p->rt, p->to, &m, &p->busy));
  }
  return NULL;
}

static void run_producers(accel_runtime *rt, accel_ref to, producer *ps, int n, uint32_t count) {
  for (int i = 0; i < n; i++) {
    ps[i] = (producer){.rt = rt, .to = to, .index = (uint32_t)i, .count = count};
    CHECK_EQ(pthread_create(&ps[i].thread, NULL, produce_in_order, &ps[i]), 0);
  }
  for (int i = 0; i < n; i++)
    CHECK_EQ(pthread_join(ps[i].thread, NULL), 0);
}

static void check_order_from_threads(int n_producers, uint32_t per_producer, uint32_t capacity) {
  order_sink sink = {.expected_total = (uint64_t)n_producers * per_producer};
  producer ps[MAX_PRODUCERS];
  uint64_t busy = 0;
  gate_init(&sink.done);
  accel_runtime *rt = runtime_started();
  accel_spawn_opts opts = {.mailbox_capacity = capacity};
  accel_ref to = spawn_ok(rt, NULL, &order_sink_b, &sink, &opts);
  accel_runtime_stats before = stats_of(rt);
  run_producers(rt, to, ps, n_producers, per_producer);
  CHECK_EQ(gate_wait(&sink.done, 1, 30000), 0);
  accel_runtime_stats after;
  runtime_stop_then_destroy(rt, &after);
  for (int i = 0; i < n_producers; i++) {
    CHECK_EQ(sink.next[i], per_producer);
    busy += ps[i].busy;
  }
  CHECK_EQ(sink.total, sink.expected_total);
  CHECK_EQ(after.busy_refusals - before.busy_refusals, busy);
  CHECK_GE(after.messages_received - before.messages_received, sink.expected_total);
  gate_destroy(&sink.done);
}

TEST(order_from_one_thread_is_kept) {
  check_order_from_threads(1, (uint32_t)test_scaled(20000, 500), 64);
}

TEST(order_per_producer_thread_is_kept) {
  check_order_from_threads(4, (uint32_t)test_scaled(10000, 200), 64);
}

TEST(tiny_mailbox_loses_nothing_and_counts_refusals) {
  check_order_from_threads(3, (uint32_t)test_scaled(3000, 100), 4);
}

/* ---- fairness: two busy actors take turns of at most `throughput` messages ---- */

enum { FAIR_MAX = 512 };
static int fair_log[2 * FAIR_MAX];
static int fair_len, fair_total;

static int fair_receive(accel_actor *self, void *state, accel_msg *msg) {
  CHECK_LT(fair_len, 2 * FAIR_MAX);
  fair_log[fair_len++] = (int)msg->arg;
  if (fair_len == fair_total)
    stop_runtime_from(self);
  return 0;
}

static const accel_behavior fair_b = {.name = "fair", .receive = fair_receive};

typedef struct fair_setup {
  uint32_t throughput;
  int per_actor;
} fair_setup;

static int fair_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  const fair_setup *setup = *(const fair_setup **)state;
  accel_runtime *rt = accel_actor_runtime(self);
  accel_spawn_opts opts = {.throughput = setup->throughput, .mailbox_capacity = FAIR_MAX};
  accel_ref a = spawn_ok(rt, self, &fair_b, NULL, &opts);
  accel_ref b = spawn_ok(rt, self, &fair_b, NULL, &opts);
  for (int i = 0; i < setup->per_actor; i++)
    CHECK_OK(tell_arg(rt, a, MSG_SEQ, 0));
  for (int i = 0; i < setup->per_actor; i++)
    CHECK_OK(tell_arg(rt, b, MSG_SEQ, 1));
  return 0;
}

static int fair_driver_start(accel_actor *self, void *state, void *arg) {
  *(const fair_setup **)state = arg;
  return kick_on_start(self, state, arg);
}

static const accel_behavior fair_driver_b = {.name = "driver",
                                             .state_size = sizeof(fair_setup *),
                                             .start = fair_driver_start,
                                             .receive = fair_driver_receive};

/* No run of one actor is longer than `throughput` while the other still has messages. */
static void check_turns(uint32_t throughput, int per_actor) {
  int left[2] = {per_actor, per_actor}, run = 0, runs = 0;
  for (int i = 0; i < fair_len; i++) {
    int who = fair_log[i];
    run = (i > 0 && fair_log[i - 1] == who) ? run + 1 : 1;
    runs += run == 1;
    left[who]--;
    if (left[1 - who] > 0 && run > (int)throughput)
      TEST_FAIL("actor %d ran %d messages in a row (throughput %u) at %d", who, run, throughput, i);
  }
  CHECK_EQ(left[0], 0);
  CHECK_EQ(left[1], 0);
  CHECK_GE(runs, 2 * (per_actor / (int)throughput) - 1);
}

/* `throughput` goes into the spawn options; `turn` is the longest run allowed. */
static void check_fairness(uint32_t throughput, uint32_t turn, int per_actor) {
  fair_setup setup = {.throughput = throughput, .per_actor = per_actor};
  fair_len = 0;
  fair_total = 2 * per_actor;
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &fair_driver_b, &setup, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_EQ(fair_len, fair_total);
  check_turns(turn, per_actor);
}

TEST(busy_actors_take_turns_of_throughput) {
  check_fairness(4, 4, 40);
}
TEST(throughput_one_alternates) {
  check_fairness(1, 1, 30);
}
/* A zeroed option means the default, 64, not "unbounded". */
TEST(zero_throughput_means_the_default_64) {
  check_fairness(0, 64, 300);
}

/* ---- backpressure: capacity 4 ---- */

static int bp_received;

static int bp_receive(accel_actor *self, void *state, accel_msg *msg) {
  CHECK_EQ(msg->arg, (uint64_t)bp_received);
  if (++bp_received % 4 == 0)
    tell_parent(self, MSG_DONE, (uint64_t)bp_received);
  return 0;
}

static const accel_behavior bp_b = {.name = "bp", .receive = bp_receive};

static void fill_and_refuse(accel_actor *self, accel_ref r, uint64_t first) {
  accel_runtime *rt = accel_actor_runtime(self);
  for (uint64_t i = first; i < first + 4; i++)
    CHECK_OK(tell_arg(rt, r, MSG_SEQ, i));
  accel_runtime_stats before = stats_of(rt);
  accel_msg m = msg_make(MSG_SEQ, 999);
  m.data = counted_new(999);
  m.drop = counted_drop;
  CHECK_ERR(accel_tell(rt, r, &m), ACCEL_EBUSY);
  CHECK_EQ(counted_dropped(), 0); /* refused: still ours */
  counted_free(m.data);
  m.data = NULL;
  accel_future *f = NULL;
  CHECK_ERR(accel_ask(rt, r, &m, &f), ACCEL_EBUSY);
  CHECK_EQ(stats_of(rt).busy_refusals - before.busy_refusals, 2);
}

static int bp_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_ref *r = state;
  if (msg->type == MSG_KICK) {
    accel_spawn_opts opts = {.mailbox_capacity = 3}; /* rounded up to 4 */
    *r = spawn_ok(accel_actor_runtime(self), self, &bp_b, NULL, &opts);
    fill_and_refuse(self, *r, 0);
  } else if (msg->type == MSG_DONE && msg->arg == 4) {
    fill_and_refuse(self, *r, 4); /* drained: room for 4 again */
  } else if (msg->type == MSG_DONE) {
    stop_runtime_from(self);
  }
  return 0;
}

static const accel_behavior bp_driver_b = {.name = "driver",
                                           .state_size = sizeof(accel_ref),
                                           .start = kick_on_start,
                                           .receive = bp_driver_receive};

TEST(full_mailbox_refuses_with_ebusy) {
  counted_reset();
  bp_received = 0;
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &bp_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_EQ(bp_received, 8);
  CHECK_EQ(counted_live(), 0);
}

/* ---- capacity is rounded up to a power of two ---- */

typedef struct capacity_case {
  uint32_t asked, holds;
} capacity_case;

static const capacity_case capacities[] = {{2, 2}, {5, 8}, {8, 8}, {17, 32}, {100, 128}};
enum { N_CAPACITIES = sizeof capacities / sizeof capacities[0] };
static uint32_t accepted[N_CAPACITIES];

static int ignore_receive(accel_actor *self, void *state, accel_msg *msg) {
  return 0;
}

static const accel_behavior sponge_b = {.name = "sponge", .receive = ignore_receive};

static uint32_t tells_until_busy(accel_runtime *rt, accel_ref r) {
  uint32_t n = 0;
  int rc;
  while ((rc = tell_arg(rt, r, MSG_SEQ, n)) == 0 && n < 1000)
    n++;
  CHECK_ERR(rc, ACCEL_EBUSY);
  return n;
}

static int capacity_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  for (int i = 0; i < N_CAPACITIES; i++) {
    accel_spawn_opts opts = {.mailbox_capacity = capacities[i].asked};
    accepted[i] = tells_until_busy(rt, spawn_ok(rt, self, &sponge_b, NULL, &opts));
  }
  stop_runtime_from(self);
  return 0;
}

static const accel_behavior capacity_driver_b = {
    .name = "driver", .start = kick_on_start, .receive = capacity_driver_receive};

TEST(capacity_is_rounded_up_to_a_power_of_two) {
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &capacity_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  for (int i = 0; i < N_CAPACITIES; i++)
    if (accepted[i] != capacities[i].holds)
      TEST_FAIL("capacity %u held %u messages, expected %u", capacities[i].asked, accepted[i],
                capacities[i].holds);
}

/* ---- stale refs ---- */

static int stale_checks;

static void check_dead_letter(accel_runtime *rt, accel_ref stale) {
  accel_runtime_stats before = stats_of(rt);
  accel_msg m = msg_make(MSG_PING, 0);
  m.data = counted_new(1);
  m.drop = counted_drop;
  CHECK_ERR(accel_tell(rt, stale, &m), ACCEL_ESTALE);
  CHECK_EQ(counted_dropped(), 0); /* refused: still ours */
  counted_free(m.data);
  m.data = NULL;
  CHECK_EQ(stats_of(rt).dead_letters - before.dead_letters, 1);
  accel_future *f = NULL;
  CHECK_ERR(accel_ask(rt, stale, &m, &f), ACCEL_ESTALE);
  CHECK_EQ(stats_of(rt).dead_letters - before.dead_letters, 2);
  CHECK_ERR(accel_stop(rt, stale), ACCEL_ESTALE);
  stale_checks++;
}

static int pinger_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_FAIL)
    return ACCEL_EIO;
  tell_parent(self, MSG_PING, 0);
  return 0;
}

static void pinger_post_restart(accel_actor *self, void *state, int reason) {
  tell_parent(self, MSG_RESTARTED, 0);
}

static const accel_behavior pinger_b = {
    .name = "pinger", .receive = pinger_receive, .post_restart = pinger_post_restart};

typedef struct stale_driver {
  accel_ref stopped, restarted;
  int exits, pongs;
} stale_driver;

static void stale_maybe_done(accel_actor *self, stale_driver *d) {
  if (d->exits == 1 && d->pongs == 1)
    stop_runtime_from(self);
}

static void stale_kick(accel_actor *self, stale_driver *d) {
  accel_runtime *rt = accel_actor_runtime(self);
  accel_spawn_opts stop_opts = {.name = "to-stop"}, restart_opts = {.name = "to-restart"};
  check_dead_letter(rt, ACCEL_REF_NONE);
  check_dead_letter(rt, (accel_ref){0xFFFFFFF0u, 1});
  d->stopped = spawn_ok(rt, self, &pinger_b, NULL, &stop_opts);
  check_dead_letter(rt, (accel_ref){d->stopped.slot, d->stopped.gen + 1});
  CHECK_OK(accel_stop(rt, d->stopped));
  d->restarted = spawn_ok(rt, self, &pinger_b, NULL, &restart_opts);
  CHECK_OK(tell_arg(rt, d->restarted, MSG_FAIL, 0));
}

static void stale_after_restart(accel_actor *self, stale_driver *d) {
  accel_runtime *rt = accel_actor_runtime(self);
  accel_ref now = ACCEL_REF_NONE;
  CHECK_OK(accel_child(self, "to-restart", &now));
  CHECK(!ref_eq(now, d->restarted));
  check_dead_letter(rt, d->restarted);
  CHECK_OK(tell_arg(rt, now, MSG_PING, 0)); /* the new ref works; it pings back */
}

static int stale_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  stale_driver *d = state;
  if (msg->type == MSG_KICK)
    stale_kick(self, d);
  else if (msg->type == MSG_RESTARTED)
    stale_after_restart(self, d);
  else if (msg->type == MSG_PING && ++d->pongs == 1)
    stale_maybe_done(self, d);
  else
    TEST_FAIL("unexpected message %u", msg->type);
  return 0;
}

static void stale_driver_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  stale_driver *d = state;
  CHECK(ref_eq(child, d->stopped));
  CHECK_EQ(reason, 0);
  d->exits++;
  accel_ref found;
  CHECK_ERR(accel_child(self, "to-stop", &found), ACCEL_ENOENT);
  check_dead_letter(accel_actor_runtime(self), d->stopped);
  stale_maybe_done(self, d);
}

static const accel_behavior stale_driver_b = {.name = "driver",
                                              .state_size = sizeof(stale_driver),
                                              .start = kick_on_start,
                                              .receive = stale_driver_receive,
                                              .child_exit = stale_driver_child_exit};

TEST(stale_refs_are_dead_letters) {
  counted_reset();
  stale_checks = 0;
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &stale_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_EQ(stale_checks, 5);
  CHECK_EQ(counted_live(), 0);
}

/* ---- messages pending in an incarnation that ends ---- */

enum { PENDING_TELLS = 10, PENDING_ASKS = 3 };

typedef struct pending_record {
  int received;  /* payload messages the target received */
  int asks_done; /* then callbacks run */
  int ask_status[16];
  int restarted;
} pending_record;

static pending_record pend;

static int pending_target_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->type == MSG_FAIL)
    return ACCEL_EIO;
  pend.received++;
  return 0;
}

static void pending_target_post_restart(accel_actor *self, void *state, int reason) {
  tell_parent(self, MSG_RESTARTED, 0);
}

static const accel_behavior pending_target_b = {.name = "target",
                                                .receive = pending_target_receive,
                                                .post_restart = pending_target_post_restart};

static void stop_when_all_seen(accel_runtime *rt) {
  if (pend.asks_done == PENDING_ASKS && pend.restarted)
    accel_runtime_stop(rt);
}

static void on_pending_ask(accel_future *f, int status, void *arg) {
  accel_runtime *rt = arg;
  CHECK_EQ(accel_runtime_on_loop(rt), 1);
  pend.ask_status[pend.asks_done++] = status;
  stop_when_all_seen(rt);
}

static void send_payloads_and_asks(accel_runtime *rt, accel_ref to) {
  for (int i = 0; i < PENDING_TELLS; i++) {
    accel_msg m = msg_make(MSG_SEQ, (uint64_t)i);
    m.data = counted_new((uint64_t)i);
    m.drop = counted_drop;
    CHECK_OK(accel_tell(rt, to, &m));
  }
  for (int i = 0; i < PENDING_ASKS; i++) {
    accel_msg m = msg_make(MSG_SEQ, 100);
    accel_future *f = NULL;
    CHECK_OK(accel_ask(rt, to, &m, &f));
    CHECK_OK(accel_future_then(f, on_pending_ask, rt));
    accel_future_release(f);
  }
}

static int pending_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  if (msg->type == MSG_KICK) {
    accel_ref target = spawn_ok(rt, self, &pending_target_b, NULL, NULL);
    CHECK_OK(tell_arg(rt, target, MSG_FAIL, 0)); /* it fails first; the rest is pending */
    send_payloads_and_asks(rt, target);
  } else if (msg->type == MSG_RESTARTED) {
    pend.restarted = 1;
    stop_when_all_seen(rt);
  }
  return 0;
}

static const accel_behavior pending_driver_b = {
    .name = "driver", .start = kick_on_start, .receive = pending_driver_receive};

TEST(pending_messages_of_a_failed_incarnation_are_dropped) {
  counted_reset();
  memset(&pend, 0, sizeof pend);
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &pending_driver_b, NULL, NULL);
  accel_runtime_stats stats;
  runtime_run_then_destroy(rt, &stats);
  CHECK_EQ(pend.received, 0);
  CHECK_EQ(counted_dropped(), PENDING_TELLS);
  CHECK_EQ(counted_live(), 0);
  CHECK_EQ(pend.asks_done, PENDING_ASKS);
  for (int i = 0; i < PENDING_ASKS; i++)
    CHECK_ERR(pend.ask_status[i], ACCEL_ESTALE);
  CHECK_GE(stats.dead_letters, PENDING_TELLS + PENDING_ASKS);
}

/* ---- a stop races with pending messages: each is received or dropped, exactly once ---- */

enum { RACE_TELLS = 50, RACE_ASKS = 5 };

static int race_received[RACE_TELLS], race_dropped[RACE_TELLS];
static int race_ask_status[RACE_ASKS], race_asks_done, race_exited;

typedef struct race_payload {
  int index;
} race_payload;

static void race_drop(void *data) {
  race_payload *p = data;
  race_dropped[p->index]++;
  free(p);
}

static int race_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (msg->data != NULL) {
    race_payload *p = msg->data;
    race_received[p->index]++;
    free(p);
    msg->data = NULL;
  }
  return 0;
}

static const accel_behavior race_b = {.name = "race", .receive = race_receive};

static void race_maybe_done(accel_runtime *rt) {
  if (race_exited && race_asks_done == RACE_ASKS)
    accel_runtime_stop(rt);
}

static void on_race_ask(accel_future *f, int status, void *arg) {
  race_ask_status[race_asks_done++] = status;
  race_maybe_done(arg);
}

static void race_send_all(accel_runtime *rt, accel_ref to) {
  for (int i = 0; i < RACE_TELLS; i++) {
    accel_msg m = msg_make(MSG_SEQ, 0);
    race_payload *p = malloc(sizeof *p);
    CHECK(p != NULL);
    p->index = i;
    m.data = p;
    m.drop = race_drop;
    CHECK_OK(accel_tell(rt, to, &m));
    if (i % 10 == 9) {
      accel_msg question = msg_make(MSG_PING, 0);
      accel_future *f = NULL;
      CHECK_OK(accel_ask(rt, to, &question, &f));
      CHECK_OK(accel_future_then(f, on_race_ask, rt));
      accel_future_release(f);
    }
  }
}

static int race_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  accel_spawn_opts opts = {.throughput = 1};
  accel_ref target = spawn_ok(rt, self, &race_b, NULL, &opts);
  race_send_all(rt, target);
  CHECK_OK(accel_stop(rt, target));
  return 0;
}

static void race_driver_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  CHECK_EQ(reason, 0);
  race_exited++;
  race_maybe_done(accel_actor_runtime(self));
}

static const accel_behavior race_driver_b = {.name = "driver",
                                             .start = kick_on_start,
                                             .receive = race_driver_receive,
                                             .child_exit = race_driver_child_exit};

/* The received messages are a prefix of what was sent, the rest was dropped. */
static void check_received_prefix(const int *received, const int *dropped, int n) {
  int prefix = 0;
  while (prefix < n && received[prefix] == 1)
    prefix++;
  for (int i = 0; i < n; i++) {
    CHECK_EQ(received[i] + dropped[i], 1);
    CHECK_EQ(received[i], i < prefix);
  }
}

TEST(stop_with_pending_messages_drops_each_once) {
  memset(race_received, 0, sizeof race_received);
  memset(race_dropped, 0, sizeof race_dropped);
  race_asks_done = race_exited = 0;
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &race_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  check_received_prefix(race_received, race_dropped, RACE_TELLS);
  CHECK_EQ(race_exited, 1);
  CHECK_EQ(race_asks_done, RACE_ASKS);
  for (int i = 0; i < RACE_ASKS; i++)
    CHECK(race_ask_status[i] == 0 || race_ask_status[i] == ACCEL_ESTALE);
}

/* ---- runtime shutdown with messages pending ---- */

static int shutdown_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  accel_ref target = spawn_ok(rt, self, &race_b, NULL, NULL);
  race_send_all(rt, target);
  accel_runtime_stop(rt);
  return 0;
}

static const accel_behavior shutdown_driver_b = {
    .name = "driver", .start = kick_on_start, .receive = shutdown_driver_receive};

TEST(shutdown_drops_pending_messages_before_run_returns) {
  memset(race_received, 0, sizeof race_received);
  memset(race_dropped, 0, sizeof race_dropped);
  race_asks_done = race_exited = 0;
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &shutdown_driver_b, NULL, NULL);
  CHECK_OK(accel_runtime_run(rt));
  check_received_prefix(race_received, race_dropped, RACE_TELLS);
  accel_runtime_destroy(rt);
  check_received_prefix(race_received, race_dropped, RACE_TELLS);
}

TEST(destroy_without_run_drops_pending_messages) {
  counted_reset();
  accel_runtime *rt = runtime_new();
  accel_ref r = spawn_ok(rt, NULL, &pinger_b, NULL, NULL);
  for (int i = 0; i < 5; i++) {
    accel_msg m = msg_make(MSG_SEQ, (uint64_t)i);
    m.data = counted_new((uint64_t)i);
    m.drop = counted_drop;
    CHECK_OK(accel_tell(rt, r, &m));
  }
  accel_runtime_destroy(rt);
  CHECK_EQ(counted_dropped(), 5);
  CHECK_EQ(counted_live(), 0);
}

static const test_case tests[] = {
    TEST_CASE(tell_delivers_fields_and_data_ownership),
    TEST_CASE(tell_from_a_thread_has_no_sender),
    TEST_CASE(order_from_one_actor_is_kept),
    TEST_CASE(order_from_one_thread_is_kept),
    TEST_CASE(order_per_producer_thread_is_kept),
    TEST_CASE(tiny_mailbox_loses_nothing_and_counts_refusals),
    TEST_CASE(busy_actors_take_turns_of_throughput),
    TEST_CASE(throughput_one_alternates),
    TEST_CASE(zero_throughput_means_the_default_64),
    TEST_CASE(full_mailbox_refuses_with_ebusy),
    TEST_CASE(capacity_is_rounded_up_to_a_power_of_two),
    TEST_CASE(stale_refs_are_dead_letters),
    TEST_CASE(pending_messages_of_a_failed_incarnation_are_dropped),
    TEST_CASE(stop_with_pending_messages_drops_each_once),
    TEST_CASE(shutdown_drops_pending_messages_before_run_returns),
    TEST_CASE(destroy_without_run_drops_pending_messages),
};

TEST_MAIN(tests)
