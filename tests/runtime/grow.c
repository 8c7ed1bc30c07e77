/* Growth: a mailbox starts with a small ring and grows up to its bound (order kept across
 * growth, the bound exact at the limit and one past it, several producer threads, a growth
 * that finds no memory), and the ref table grows in chunks up to max_actors (at the limit and
 * one past it, senders on other threads while it grows). */
#include <sched.h>

#include "runtime/rt.h"
#include "util.h"

enum {
  MSG_SEQ = MSG_FIRST_LOCAL, /* arg = sequence number (or producer << 32 | sequence) */
  MSG_DONE,
};

static int kick_on_start(accel_actor *self, void *state, void *arg) {
  tell_self(self, MSG_KICK, 0);
  return 0;
}

/* Cells a live actor's mailbox holds now, from the loop thread. */
static size_t cells_of(accel_runtime *rt, accel_ref r) {
  accel_actor *cell = rt_resolve_local(rt, r);
  CHECK(cell != NULL);
  return rt_mailbox_cells(&cell->mailbox);
}

/* ---- one sink checks the order; it tells its parent after `expect` messages ---- */

typedef struct seq_sink {
  uint64_t next, expect;
} seq_sink;

static int seq_sink_receive(accel_actor *self, void *state, accel_msg *msg) {
  seq_sink *s = state;
  CHECK_EQ(msg->type, MSG_SEQ);
  CHECK_EQ(msg->arg, s->next);
  if (msg->data != NULL) { /* the first message of a round: how many come in it */
    s->expect = s->next + ((counted *)msg->data)->value;
  }
  if (++s->next == s->expect)
    CHECK_OK(tell_arg(accel_actor_runtime(self), accel_parent(self), MSG_DONE, s->next));
  return 0;
}

static const accel_behavior seq_sink_b = {
    .name = "sink", .state_size = sizeof(seq_sink), .receive = seq_sink_receive};

/* Sends `n` numbered messages from `first` (the first one says how many) while the sink cannot
 * run (we are in a callback on its loop), then one more that must be refused. */
static void fill_exactly(accel_runtime *rt, accel_ref to, uint64_t first, uint32_t n) {
  for (uint64_t i = first; i < first + n; i++) {
    accel_msg m = msg_make(MSG_SEQ, i);
    if (i == first) {
      m.data = counted_new(n);
      m.drop = counted_drop;
    }
    CHECK_OK(accel_tell(rt, to, &m));
  }
  accel_runtime_stats before = stats_of(rt);
  CHECK_ERR(tell_arg(rt, to, MSG_SEQ, first + n), ACCEL_EBUSY);
  CHECK_EQ(stats_of(rt).busy_refusals - before.busy_refusals, 1);
}

/* ---- order across growth; the bound at the limit and one past it ---- */

typedef struct grow_driver {
  accel_ref sink;
  int rounds;
  size_t cells_new, cells_full, cells_drained;
} grow_driver;

static grow_driver grown;
enum { GROW_CAP = 1024 };

static int grow_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  if (msg->type == MSG_KICK) {
    accel_spawn_opts opts = {.mailbox_capacity = GROW_CAP};
    grown.sink = spawn_ok(rt, self, &seq_sink_b, NULL, &opts);
    grown.cells_new = cells_of(rt, grown.sink);
    fill_exactly(rt, grown.sink, 0, GROW_CAP);
    grown.cells_full = cells_of(rt, grown.sink);
  } else if (msg->type == MSG_DONE && ++grown.rounds == 1) {
    CHECK_EQ(msg->arg, GROW_CAP);
    grown.cells_drained = cells_of(rt, grown.sink);   /* the outgrown rings are freed */
    fill_exactly(rt, grown.sink, GROW_CAP, GROW_CAP); /* the grown ring alone: exact again */
  } else if (msg->type == MSG_DONE) {
    CHECK_EQ(msg->arg, 2 * GROW_CAP);
    stop_runtime_from(self);
  }
  return 0;
}

static const accel_behavior grow_driver_b = {
    .name = "driver", .start = kick_on_start, .receive = grow_driver_receive};

TEST(a_mailbox_grows_to_its_bound_in_order) {
  counted_reset();
  memset(&grown, 0, sizeof grown);
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &grow_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_EQ(grown.rounds, 2);
  CHECK_EQ(grown.cells_new, RT_MAILBOX_FIRST);
  /* 16 + 32 + ... + 1024 while the older rings still hold their messages */
  CHECK_EQ(grown.cells_full, 2 * GROW_CAP - RT_MAILBOX_FIRST);
  CHECK_EQ(grown.cells_drained, GROW_CAP);
  CHECK_EQ(counted_live(), 0);
}

/* Each asked bound holds exactly that many (rounded up to a power of two), below, at and
 * above the first ring's size. */
static const uint32_t bounds[] = {2, 8, 16, 17, 32, 33, 1000, 4096};
enum { N_BOUNDS = sizeof bounds / sizeof bounds[0] };
static uint32_t held[N_BOUNDS];

static int sponge_receive(accel_actor *self, void *state, accel_msg *msg) {
  return 0;
}

static const accel_behavior sponge_b = {.name = "sponge", .receive = sponge_receive};

static int bounds_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  for (int i = 0; i < N_BOUNDS; i++) {
    accel_spawn_opts opts = {.mailbox_capacity = bounds[i]};
    accel_ref r = spawn_ok(rt, self, &sponge_b, NULL, &opts);
    int rc;
    while ((rc = tell_arg(rt, r, MSG_SEQ, held[i])) == 0 && held[i] <= 8192)
      held[i]++;
    CHECK_ERR(rc, ACCEL_EBUSY);
  }
  stop_runtime_from(self);
  return 0;
}

static const accel_behavior bounds_driver_b = {
    .name = "driver", .start = kick_on_start, .receive = bounds_driver_receive};

TEST(a_growing_mailbox_holds_exactly_its_bound) {
  memset(held, 0, sizeof held);
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &bounds_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  static const uint32_t want[N_BOUNDS] = {2, 8, 16, 32, 32, 64, 1024, 4096};
  for (int i = 0; i < N_BOUNDS; i++)
    if (held[i] != want[i])
      TEST_FAIL("bound %u held %u messages, expected %u", bounds[i], held[i], want[i]);
}

/* ---- a growth that finds no memory ---- */

static atomic_int fail_next; /* the next allocation of accel's fails */
static atomic_long failed;

static void *fa_malloc(size_t n) {
  if (atomic_exchange(&fail_next, 0)) {
    atomic_fetch_add(&failed, 1);
    return NULL;
  }
  return malloc(n);
}

static void *fa_calloc(size_t c, size_t n) {
  if (atomic_exchange(&fail_next, 0)) {
    atomic_fetch_add(&failed, 1);
    return NULL;
  }
  return calloc(c, n);
}

static void *fa_realloc(void *p, size_t n) {
  return realloc(p, n);
}

typedef struct nomem_driver {
  accel_ref sink;
  int done;
} nomem_driver;

/* Fills to `to` (the bound), with the growths at `at` and 2 * `at` failing once first: ENOMEM
 * to that sender, the message still its own, then the same send passes. */
static void fill_with_a_failed_growth(accel_runtime *rt, accel_ref sink, uint64_t at, uint64_t to) {
  for (uint64_t i = 0; i < to; i++) {
    accel_msg m = msg_make(MSG_SEQ, i);
    if (i == 0) {
      m.data = counted_new(to);
      m.drop = counted_drop;
    }
    if (i == at || i == 2 * at) {
      accel_msg again = m;
      again.data = counted_new(i);
      again.drop = counted_drop;
      atomic_store(&fail_next, 1);
      CHECK_ERR(accel_tell(rt, sink, &again), ACCEL_ENOMEM);
      CHECK_EQ(atomic_load(&failed), 1);
      CHECK_EQ(counted_dropped(), 0); /* refused: still ours */
      counted_free(again.data);
      atomic_store(&failed, 0);
    }
    CHECK_OK(accel_tell(rt, sink, &m));
  }
  CHECK_ERR(tell_arg(rt, sink, MSG_SEQ, to), ACCEL_EBUSY);
}

static int nomem_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  nomem_driver *d = state;
  accel_runtime *rt = accel_actor_runtime(self);
  if (msg->type == MSG_KICK) {
    accel_spawn_opts opts = {.mailbox_capacity = 64};
    d->sink = spawn_ok(rt, self, &seq_sink_b, NULL, &opts);
    fill_with_a_failed_growth(rt, d->sink, RT_MAILBOX_FIRST, 64); /* 16 -> 32 -> 64 */
  } else if (msg->type == MSG_DONE && ++d->done == 1) {
    CHECK_EQ(msg->arg, 64); /* every message queued before the failures arrived, in order */
    stop_runtime_from(self);
  }
  return 0;
}

static const accel_behavior nomem_driver_b = {.name = "driver",
                                              .state_size = sizeof(nomem_driver),
                                              .start = kick_on_start,
                                              .receive = nomem_driver_receive};

TEST(a_growth_without_memory_refuses_that_send_and_loses_nothing) {
  counted_reset();
  atomic_store(&fail_next, 0);
  atomic_store(&failed, 0);
  CHECK_OK(accel_replace_allocator(fa_malloc, fa_realloc, fa_calloc, free));
  accel_runtime *rt = runtime_new();
  spawn_ok(rt, NULL, &nomem_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_OK(accel_replace_allocator(NULL, NULL, NULL, NULL));
  CHECK_EQ(counted_live(), 0);
}

/* ---- several producer threads while the mailbox grows and drains ---- */

enum { PRODUCERS = 4, CONC_CAP = 4096 };

typedef struct conc_sink {
  uint64_t next[PRODUCERS];
  uint64_t total, expected;
  size_t max_used, max_cells;
  gate done;
} conc_sink;

static int conc_sink_receive(accel_actor *self, void *state, accel_msg *msg) {
  conc_sink *s = *(conc_sink **)state;
  if (msg->type == MSG_DONE) /* the refill's, after the producers */
    return 0;
  uint64_t p = msg->arg >> 32, seq = msg->arg & 0xFFFFFFFFu;
  CHECK_LT(p, PRODUCERS);
  CHECK_EQ(seq, s->next[p]);
  s->next[p]++;
  size_t used = rt_mailbox_used(&self->mailbox), cells = rt_mailbox_cells(&self->mailbox);
  CHECK_LE(used, CONC_CAP);
  CHECK_LE(cells, 2 * CONC_CAP);
  s->max_used = used > s->max_used ? used : s->max_used;
  s->max_cells = cells > s->max_cells ? cells : s->max_cells;
  if (s->total % 997 == 0)
    sched_yield(); /* a slow consumer now and then: the producers fill the mailbox */
  if (++s->total == s->expected)
    gate_signal(&s->done);
  return 0;
}

static int conc_sink_start(accel_actor *self, void *state, void *arg) {
  *(conc_sink **)state = arg;
  return 0;
}

static const accel_behavior conc_sink_b = {.name = "sink",
                                           .state_size = sizeof(conc_sink *),
                                           .start = conc_sink_start,
                                           .receive = conc_sink_receive};

typedef struct producer {
  accel_runtime *rt;
  accel_ref to;
  uint32_t index, count;
  pthread_t thread;
} producer;

static void *produce(void *arg) {
  producer *p = arg;
  for (uint32_t i = 0; i < p->count; i++) {
    accel_msg m = msg_make(MSG_SEQ, (uint64_t)p->index << 32 | i);
    CHECK_OK(tell_retry(p->rt, p->to, &m, NULL));
  }
  return NULL;
}

/* On the loop, after the run: the sink cannot run while this fills its mailbox, which must
 * hold its whole bound again (every cell blocked during growth was unblocked). */
typedef struct refill {
  accel_task task; /* first: the task pointer is the refill */
  accel_runtime *rt;
  accel_ref to;
  uint32_t held;
  gate done;
} refill;

static void refill_task(accel_task *t) {
  refill *r = (refill *)t;
  while (tell_arg(r->rt, r->to, MSG_DONE, 0) == 0 && r->held <= 2 * CONC_CAP)
    r->held++;
  gate_signal(&r->done);
}

TEST(producer_threads_keep_their_order_while_the_mailbox_grows) {
  uint32_t per = (uint32_t)test_scaled(20000, 2000);
  conc_sink s = {.expected = (uint64_t)PRODUCERS * per};
  gate_init(&s.done);
  accel_runtime *rt = runtime_started();
  accel_spawn_opts opts = {.mailbox_capacity = CONC_CAP, .throughput = 16};
  accel_ref to = spawn_ok(rt, NULL, &conc_sink_b, &s, &opts);
  producer ps[PRODUCERS];
  for (int i = 0; i < PRODUCERS; i++) {
    ps[i] = (producer){.rt = rt, .to = to, .index = (uint32_t)i, .count = per};
    CHECK_EQ(pthread_create(&ps[i].thread, NULL, produce, &ps[i]), 0);
  }
  for (int i = 0; i < PRODUCERS; i++)
    CHECK_EQ(pthread_join(ps[i].thread, NULL), 0);
  TEST_WAIT_FOR(gate_wait(&s.done, 1, 100) == 0, 1);
  refill r = {.rt = rt, .to = to};
  gate_init(&r.done);
  accel_post(rt, &r.task, refill_task);
  TEST_WAIT_FOR(gate_wait(&r.done, 1, 100) == 0, 1);
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&r.done);
  printf("# most queued %zu, most cells %zu\n", s.max_used, s.max_cells);
  CHECK_EQ(r.held, CONC_CAP);
  for (int i = 0; i < PRODUCERS; i++)
    CHECK_EQ(s.next[i], per);
  CHECK_GT(s.max_cells, RT_MAILBOX_FIRST); /* it grew: the test saw growth under load */
  gate_destroy(&s.done);
}

/* ---- the mailbox alone: growth racing with the consumer, cycle after cycle ---- */

enum { RACE_CAP = 64, RACE_MSGS = 200 };

typedef struct race {
  rt_mailbox mb;
  pthread_barrier_t start, end;
  atomic_bool quit;
  uint64_t got; /* the consumer's count in the cycle */
} race;

/* One cycle: the producer pushes RACE_MSGS (retrying refusals) while the consumer pops them
 * in order; both meet at `end`, and the main thread checks the bound with nobody popping. */
static void *race_consumer(void *arg) {
  race *r = arg;
  for (;;) {
    pthread_barrier_wait(&r->start);
    if (atomic_load(&r->quit))
      return NULL;
    accel_msg m;
    for (r->got = 0; r->got < RACE_MSGS;) {
      if (rt_mailbox_pop(&r->mb, &m)) {
        CHECK_EQ(m.arg, r->got);
        r->got++;
      } else {
        sched_yield(); /* valgrind runs one thread at a time: a pure spin would starve it */
      }
    }
    pthread_barrier_wait(&r->end);
  }
}

static void *race_producer(void *arg) {
  race *r = arg;
  for (;;) {
    pthread_barrier_wait(&r->start);
    if (atomic_load(&r->quit))
      return NULL;
    for (uint64_t i = 0; i < RACE_MSGS; i++) {
      accel_msg m = {.type = MSG_SEQ, .arg = i};
      int rc;
      while ((rc = rt_mailbox_push(&r->mb, &m)) == ACCEL_EBUSY)
        sched_yield();
      CHECK_OK(rc);
    }
    pthread_barrier_wait(&r->end);
  }
}

TEST(growth_racing_the_consumer_keeps_order_and_the_whole_bound) {
  race r;
  atomic_init(&r.quit, false);
  CHECK_EQ(pthread_barrier_init(&r.start, NULL, 3), 0);
  CHECK_EQ(pthread_barrier_init(&r.end, NULL, 3), 0);
  pthread_t c, p;
  CHECK_EQ(pthread_create(&c, NULL, race_consumer, &r), 0);
  CHECK_EQ(pthread_create(&p, NULL, race_producer, &r), 0);
  long cycles = test_scaled(2000, 100);
  for (long k = 0; k < cycles; k++) {
    CHECK_OK(rt_mailbox_init(&r.mb, RACE_CAP));
    pthread_barrier_wait(&r.start);
    pthread_barrier_wait(&r.end);
    CHECK_EQ(r.got, RACE_MSGS);
    uint32_t fits = 0; /* the consumer waits: exactly the bound fits, whatever the race left */
    while (rt_mailbox_push(&r.mb, &(accel_msg){.arg = fits}) == 0 && fits <= 2 * RACE_CAP)
      fits++;
    if (fits != RACE_CAP)
      TEST_FAIL("cycle %ld: the mailbox held %u after growing, bound %u", k, fits, RACE_CAP);
    rt_mailbox_destroy(&r.mb);
  }
  atomic_store(&r.quit, true);
  pthread_barrier_wait(&r.start);
  CHECK_EQ(pthread_join(c, NULL), 0);
  CHECK_EQ(pthread_join(p, NULL), 0);
  pthread_barrier_destroy(&r.start);
  pthread_barrier_destroy(&r.end);
}

/* ---- the ref table ---- */

enum { TABLE_MAX = 2500 }; /* three chunks, the last one partial */

typedef struct table_driver {
  uint32_t spawned;
  int refusal, again;
  uint64_t live;
} table_driver;

static table_driver tbl;

static int table_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  accel_spawn_opts opts = {.mailbox_capacity = 2};
  int rc;
  accel_ref r;
  while ((rc = accel_spawn(rt, self, &sponge_b, NULL, &opts, &r)) == 0)
    tbl.spawned++;
  tbl.refusal = rc;
  tbl.again = accel_spawn(rt, self, &sponge_b, NULL, &opts, &r);
  tbl.live = stats_of(rt).actors_live;
  stop_runtime_from(self);
  return 0;
}

static const accel_behavior table_driver_b = {
    .name = "driver", .start = kick_on_start, .receive = table_driver_receive};

TEST(the_ref_table_grows_to_max_actors_and_no_further) {
  memset(&tbl, 0, sizeof tbl);
  accel_runtime *rt;
  accel_runtime_opts o = {.max_actors = TABLE_MAX};
  CHECK_OK(accel_runtime_create(&rt, &o));
  uint32_t roots = accel_runtime_loops(rt); /* one per loop (ACCEL_LOOPS) */
  spawn_ok(rt, NULL, &table_driver_b, NULL, NULL);
  runtime_run_then_destroy(rt, NULL);
  CHECK_EQ(tbl.spawned, TABLE_MAX - 1 - roots); /* the roots and the driver hold a slot each */
  CHECK_EQ(tbl.live, TABLE_MAX);                /* at the limit */
  CHECK_ERR(tbl.refusal, ACCEL_ELIMIT);         /* one past it */
  CHECK_ERR(tbl.again, ACCEL_ELIMIT);
}

TEST(max_actors_has_a_hard_bound) {
  accel_runtime *rt = NULL;
  accel_runtime_opts o = {.max_actors = RT_MAX_ACTORS_LIMIT};
  CHECK_OK(accel_runtime_create(&rt, &o));
  accel_runtime_destroy(rt);
  o.max_actors = RT_MAX_ACTORS_LIMIT + 1;
  CHECK_ERR(accel_runtime_create(&rt, &o), ACCEL_EINVAL);
}

/* A thread sends to every ref made so far, and to slots past the table, while the loop adds
 * chunks: every send to a live actor arrives, every other one is a dead letter. */
enum { SPAWNS = 3000 };

static accel_ref table_refs[SPAWNS];
static atomic_uint table_made;
static atomic_bool table_stop;
static atomic_ullong table_received;

static int count_receive(accel_actor *self, void *state, accel_msg *msg) {
  atomic_fetch_add(&table_received, 1);
  return 0;
}

static const accel_behavior count_b = {.name = "count", .receive = count_receive};

typedef struct sender {
  accel_runtime *rt;
  uint64_t sent, stale;
} sender;

static void *send_around(void *arg) {
  sender *s = arg;
  uint32_t i = 0;
  while (!atomic_load(&table_stop)) {
    uint32_t made = atomic_load(&table_made);
    int rc;
    if (made > 0) {
      rc = accel_tell(s->rt, table_refs[i++ % made], &(accel_msg){.type = MSG_SEQ});
      if (rc == 0)
        s->sent++;
      else
        CHECK_ERR(rc, ACCEL_EBUSY);
    }
    /* A slot past the ones made, in a chunk that may not exist yet: never a crash. */
    accel_ref past = {made + 3 + (i++ % (2 * RT_SLOT_CHUNK)), 1};
    rc = accel_tell(s->rt, past, &(accel_msg){.type = MSG_SEQ});
    CHECK(rc == ACCEL_ESTALE || rc == 0 || rc == ACCEL_EBUSY);
    s->sent += rc == 0; /* the slot of an actor made since: it counts too */
    s->stale += rc == ACCEL_ESTALE;
  }
  return NULL;
}

TEST(senders_on_other_threads_while_the_table_grows) {
  atomic_store(&table_made, 0);
  atomic_store(&table_stop, false);
  atomic_store(&table_received, 0);
  accel_runtime *rt = runtime_started();
  sender s = {.rt = rt};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, send_around, &s), 0);
  uint32_t n = (uint32_t)test_scaled(SPAWNS, 1100);
  accel_spawn_opts opts = {.mailbox_capacity = 4};
  for (uint32_t i = 0; i < n; i++) {
    table_refs[i] = spawn_ok(rt, NULL, &count_b, NULL, &opts);
    atomic_store(&table_made, i + 1);
  }
  atomic_store(&table_stop, true);
  CHECK_EQ(pthread_join(t, NULL), 0);
  TEST_WAIT_FOR(atomic_load(&table_received) == s.sent, 1);
  runtime_stop_then_destroy(rt, NULL);
  printf("# %llu delivered, %llu stale\n", (unsigned long long)s.sent, (unsigned long long)s.stale);
  CHECK_GT(s.sent, 0);
  CHECK_GT(s.stale, 0);
}

static const test_case tests[] = {
    TEST_CASE(a_mailbox_grows_to_its_bound_in_order),
    TEST_CASE(a_growing_mailbox_holds_exactly_its_bound),
    TEST_CASE(a_growth_without_memory_refuses_that_send_and_loses_nothing),
    TEST_CASE(producer_threads_keep_their_order_while_the_mailbox_grows),
    TEST_CASE(growth_racing_the_consumer_keeps_order_and_the_whole_bound),
    TEST_CASE(the_ref_table_grows_to_max_actors_and_no_further),
    TEST_CASE(max_actors_has_a_hard_bound),
    TEST_CASE(senders_on_other_threads_while_the_table_grows),
};

TEST_MAIN(tests)
