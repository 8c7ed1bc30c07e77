/* Several loops per runtime (accel_runtime_opts.loops): top-level actors spawned from outside
 * go to the loops in turn and children stay on their parent's loop; an actor's callbacks,
 * timers and work completions run on one thread, never two at once, however many loops send
 * to it; each sender's messages arrive in order; monitors, links, stops and sends that wait
 * for room work across loops; a walk sees every loop's actors; a runtime stopped while its
 * loops exchange messages stops every actor and loses no payload; the option's limits. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

enum {
  MSG_WHERE = MSG_FIRST_LOCAL, /* arg: slot in `seen` to write the thread to */
  MSG_SEQ,                     /* arg: sender index << 32 | sequence number */
  MSG_BLAST,                   /* arg: target index; send SEQS messages to it */
  MSG_FAIL,
  MSG_WATCH,
  MSG_LINK,
  MSG_WALK,
  MSG_PASS, /* a token with a counted payload, handed round a ring */
  MSG_TIMER,
  MSG_WORK_DONE,
  MSG_SPAWN_CHILD,
  MSG_SPAWN_ON,      /* arg: accel_spawn_opts.loop for a top-level spawn from this loop */
  MSG_SPAWN_CHILD_ON /* arg: accel_spawn_opts.loop for a child of the receiver */
};

#define LOOPS 4
#define ACTORS 16

static accel_runtime *new_runtime(uint32_t loops) {
  accel_runtime *rt = NULL;
  accel_runtime_opts o = {.loops = loops};
  CHECK_OK(accel_runtime_create(&rt, &o));
  CHECK_EQ(accel_runtime_loops(rt), loops);
  return rt;
}

/* ---- where actors run ---- */

static pthread_t seen[ACTORS * 2];
static gate answered;

typedef struct placed {
  accel_ref child;
} placed;

static int spawned_on_rc[LOOPS + 1];       /* MSG_SPAWN_ON's results, by the loop asked for */
static int spawned_child_on_rc[LOOPS + 1]; /* MSG_SPAWN_CHILD_ON's */

static int placed_receive(accel_actor *self, void *state, accel_msg *msg) {
  placed *p = state;
  if (msg->type == MSG_SPAWN_ON || msg->type == MSG_SPAWN_CHILD_ON) {
    extern const accel_behavior placed_b;
    accel_spawn_opts o = {.loop = (uint32_t)msg->arg};
    bool child = msg->type == MSG_SPAWN_CHILD_ON;
    int rc = accel_spawn(accel_actor_runtime(self), child ? self : NULL, &placed_b, NULL, &o, NULL);
    (child ? spawned_child_on_rc : spawned_on_rc)[msg->arg] = rc;
    gate_signal(&answered);
    return 0;
  }
  if (msg->type == MSG_SPAWN_CHILD) {
    p->child = ACCEL_REF_NONE;
    extern const accel_behavior placed_b;
    CHECK_OK(accel_spawn(accel_actor_runtime(self), self, &placed_b, NULL, NULL, &p->child));
    CHECK_OK(tell_arg(accel_actor_runtime(self), p->child, MSG_WHERE, msg->arg));
    return 0;
  }
  CHECK_EQ(msg->type, MSG_WHERE);
  seen[msg->arg] = pthread_self();
  gate_signal(&answered);
  return 0;
}

const accel_behavior placed_b = {
    .name = "placed", .state_size = sizeof(placed), .receive = placed_receive};

static unsigned distinct_threads(const pthread_t *t, unsigned n) {
  unsigned distinct = 0;
  for (unsigned i = 0; i < n; i++) {
    unsigned j = 0;
    while (j < i && !pthread_equal(t[i], t[j]))
      j++;
    distinct += j == i;
  }
  return distinct;
}

TEST(top_level_actors_spread_and_children_stay_with_their_parent) {
  gate_init(&answered);
  accel_runtime *rt = new_runtime(LOOPS);
  CHECK_OK(accel_runtime_start(rt));
  accel_ref refs[ACTORS];
  for (unsigned i = 0; i < ACTORS; i++)
    refs[i] = spawn_ok(rt, NULL, &placed_b, NULL, NULL);
  for (unsigned i = 0; i < ACTORS; i++) {
    CHECK_OK(tell_arg(rt, refs[i], MSG_WHERE, i));
    CHECK_OK(tell_arg(rt, refs[i], MSG_SPAWN_CHILD, ACTORS + i));
  }
  CHECK_OK(gate_wait(&answered, 2 * ACTORS, 10000));
  CHECK_EQ(distinct_threads(seen, ACTORS), LOOPS); /* round-robin over every loop */
  for (unsigned i = 0; i < ACTORS; i++) {
    CHECK(pthread_equal(seen[i], seen[ACTORS + i])); /* the child runs where its parent does */
    CHECK(pthread_equal(seen[i], seen[(i + LOOPS) % ACTORS])); /* the same loop, in turn */
  }
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&answered);
}

/* accel_spawn_opts.loop: two actors per loop spawned before the loops run, one per loop from
 * outside after, each on the loop named; past the last loop refused. */
TEST(top_level_actors_go_to_the_loop_their_options_name) {
  gate_init(&answered);
  accel_runtime *rt = new_runtime(LOOPS);
  accel_ref refs[3 * LOOPS];
  for (uint32_t i = 0; i < 2 * LOOPS; i++)
    refs[i] = spawn_ok(rt, NULL, &placed_b, NULL, &(accel_spawn_opts){.loop = i % LOOPS + 1});
  CHECK_OK(accel_runtime_start(rt));
  for (uint32_t i = 2 * LOOPS; i < 3 * LOOPS; i++)
    refs[i] = spawn_ok(rt, NULL, &placed_b, NULL, &(accel_spawn_opts){.loop = i % LOOPS + 1});
  accel_ref none = ACCEL_REF_NONE;
  CHECK_ERR(accel_spawn(rt, NULL, &placed_b, NULL, &(accel_spawn_opts){.loop = LOOPS + 1}, &none),
            ACCEL_EINVAL);
  for (unsigned i = 0; i < 3 * LOOPS; i++)
    CHECK_OK(tell_arg(rt, refs[i], MSG_WHERE, i));
  CHECK_OK(gate_wait(&answered, 3 * LOOPS, 10000));
  CHECK_EQ(distinct_threads(seen, LOOPS), LOOPS);
  for (unsigned i = LOOPS; i < 3 * LOOPS; i++)
    CHECK(pthread_equal(seen[i], seen[i % LOOPS])); /* the loop named, whenever spawned */
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&answered);
}

/* From a loop thread: onto its own loop, yes; onto another, ACCEL_EINVAL (no loop waits for
 * another's spawn); a child naming a loop other than its parent's, ACCEL_EINVAL. */
TEST(a_loop_spawns_on_its_own_loop_only) {
  gate_init(&answered);
  accel_runtime *rt = new_runtime(2);
  accel_ref a = spawn_ok(rt, NULL, &placed_b, NULL, &(accel_spawn_opts){.loop = 1});
  CHECK_OK(accel_runtime_start(rt));
  spawned_on_rc[1] = spawned_on_rc[2] = spawned_child_on_rc[1] = spawned_child_on_rc[2] = 1;
  CHECK_OK(tell_arg(rt, a, MSG_SPAWN_ON, 1));
  CHECK_OK(tell_arg(rt, a, MSG_SPAWN_ON, 2));
  CHECK_OK(tell_arg(rt, a, MSG_SPAWN_CHILD_ON, 1));
  CHECK_OK(tell_arg(rt, a, MSG_SPAWN_CHILD_ON, 2));
  CHECK_OK(gate_wait(&answered, 4, 10000));
  CHECK_OK(spawned_on_rc[1]);
  CHECK_ERR(spawned_on_rc[2], ACCEL_EINVAL);
  CHECK_OK(spawned_child_on_rc[1]);                /* a child names its parent's loop: yes */
  CHECK_ERR(spawned_child_on_rc[2], ACCEL_EINVAL); /* another: no */
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&answered);
}

/* ---- one thread at a time, each sender's order ---- */

#define SEQS ((uint32_t)test_scaled(test_under_valgrind() ? 1250 : 5000, 100)) /* per sender */

typedef struct sink {
  uint64_t next[ACTORS];
  uint64_t received;
} sink;

static atomic_int inside;          /* callbacks of the sink running now */
static atomic_ulong sink_overlaps; /* times two ran at once */
static atomic_ulong sink_disorder; /* messages out of their sender's order */
static accel_ref the_sink;
static gate sink_done;

/* Counts a MSG_SEQ (sender << 32 | number) against its sender's last; opens the gate at the
 * `total`-th. */
static void sink_take(sink *s, const accel_msg *msg, uint64_t total) {
  CHECK_EQ(msg->type, MSG_SEQ);
  uint32_t from = (uint32_t)(msg->arg >> 32), seq = (uint32_t)msg->arg;
  if (seq != s->next[from])
    atomic_fetch_add(&sink_disorder, 1);
  s->next[from] = seq + 1;
  if (++s->received == total)
    gate_signal(&sink_done);
}

static int sink_receive(accel_actor *self, void *state, accel_msg *msg) {
  if (atomic_fetch_add(&inside, 1) != 0)
    atomic_fetch_add(&sink_overlaps, 1);
  sink_take(state, msg, (uint64_t)SEQS * ACTORS);
  atomic_fetch_sub(&inside, 1);
  return 0;
}

static const accel_behavior sink_b = {
    .name = "sink", .state_size = sizeof(sink), .receive = sink_receive};

/* Sends SEQS numbered messages to the sink, a slice per turn (a full mailbox: next turn). */
typedef struct blaster {
  uint32_t index, sent;
} blaster;

static int blaster_receive(accel_actor *self, void *state, accel_msg *msg) {
  blaster *b = state;
  CHECK_EQ(msg->type, MSG_BLAST);
  b->index = (uint32_t)msg->arg;
  accel_runtime *rt = accel_actor_runtime(self);
  for (unsigned n = 0; n < 256 && b->sent < SEQS; n++) {
    accel_msg m = msg_make(MSG_SEQ, (uint64_t)b->index << 32 | b->sent);
    int rc = accel_tell(rt, the_sink, &m);
    if (rc == ACCEL_EBUSY)
      break;
    CHECK_OK(rc);
    b->sent++;
  }
  if (b->sent < SEQS)
    tell_self(self, MSG_BLAST, b->index);
  return 0;
}

static const accel_behavior blaster_b = {
    .name = "blaster", .state_size = sizeof(blaster), .receive = blaster_receive};

TEST(one_actor_fed_by_every_loop_runs_on_one_thread_in_each_senders_order) {
  gate_init(&sink_done);
  atomic_store(&sink_overlaps, 0);
  atomic_store(&sink_disorder, 0);
  accel_runtime *rt = new_runtime(LOOPS);
  accel_spawn_opts small = {.mailbox_capacity = 256}; /* full at times: refusals, retries */
  the_sink = spawn_ok(rt, NULL, &sink_b, NULL, &small);
  accel_ref b[ACTORS];
  for (unsigned i = 0; i < ACTORS; i++)
    b[i] = spawn_ok(rt, NULL, &blaster_b, NULL, NULL);
  CHECK_OK(accel_runtime_start(rt));
  for (unsigned i = 0; i < ACTORS; i++)
    CHECK_OK(tell_arg(rt, b[i], MSG_BLAST, i));
  CHECK_OK(gate_wait(&sink_done, 1, 60000));
  CHECK_EQ(atomic_load(&sink_overlaps), 0);
  CHECK_EQ(atomic_load(&sink_disorder), 0);
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&sink_done);
}

/* ---- monitors, links, stops, sends that wait, across loops ---- */

static gate got;

typedef struct watcher {
  accel_ref target;
  uint64_t id;
} watcher;

static int watcher_receive(accel_actor *self, void *state, accel_msg *msg) {
  watcher *w = state;
  switch (msg->type) {
  case MSG_WATCH:
    w->target = (accel_ref){(uint32_t)(msg->arg >> 32), (uint32_t)msg->arg};
    events_add("watch:%s", accel_err_name(accel_monitor(self, w->target, &w->id)));
    break;
  case MSG_LINK:
    w->target = (accel_ref){(uint32_t)(msg->arg >> 32), (uint32_t)msg->arg};
    events_add("link:%s", accel_err_name(accel_link(self, w->target)));
    break;
  case ACCEL_MSG_DOWN:
    CHECK(ref_eq(msg->sender, w->target));
    CHECK_EQ(msg->arg, w->id);
    events_add("down:%s", accel_err_name(accel_down_reason(msg)));
    break;
  case MSG_FAIL:
    return ACCEL_EIO;
  default:
    break;
  }
  gate_signal(&got);
  return 0;
}

static void watcher_stop(accel_actor *self, void *state) {
  events_add("stopped:%s", accel_actor_name(self));
  gate_signal(&got);
}

static const accel_behavior watcher_b = {.name = "watcher",
                                         .state_size = sizeof(watcher),
                                         .receive = watcher_receive,
                                         .stop = watcher_stop};

static uint64_t ref_arg(accel_ref r) {
  return (uint64_t)r.slot << 32 | r.gen;
}

/* Two actors on different loops (a runtime of two loops, spawned from outside: in turn). */
static accel_runtime *pair(accel_ref *a, accel_ref *b, const accel_spawn_opts *opts) {
  events_reset();
  gate_init(&got);
  accel_runtime *rt = new_runtime(2);
  *a = spawn_ok(rt, NULL, &watcher_b, NULL, opts);
  *b = spawn_ok(rt, NULL, &watcher_b, NULL, opts);
  CHECK_OK(accel_runtime_start(rt));
  return rt;
}

TEST(a_monitor_on_another_loop_gets_down_with_the_reason) {
  accel_ref a, b;
  accel_runtime *rt = pair(&a, &b, NULL);
  CHECK_OK(tell_arg(rt, a, MSG_WATCH, ref_arg(b)));
  CHECK_OK(gate_wait(&got, 1, 5000));
  CHECK_OK(tell_arg(rt, b, MSG_FAIL, 0)); /* restarted: the incarnation watched ends */
  CHECK_OK(gate_wait(&got, 3, 5000));     /* watch, b's stop hook, the DOWN */
  CHECK_STR_EQ(events_with_prefix("down"), "down:EIO");
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&got);
}

TEST(a_link_across_loops_fails_both_and_a_stop_from_outside_ends_one) {
  accel_ref a, b;
  accel_runtime *rt = pair(&a, &b, NULL);
  CHECK_OK(tell_arg(rt, a, MSG_LINK, ref_arg(b)));
  CHECK_OK(gate_wait(&got, 1, 5000));
  CHECK_OK(tell_arg(rt, b, MSG_FAIL, 0));
  CHECK_OK(gate_wait(&got, 3, 5000)); /* link, and both stop hooks (both restart) */
  CHECK_STR_EQ(events_with_prefix("stopped"), "stopped:watcher stopped:watcher");
  /* Both restarted: new incarnations, so the old refs are stale. */
  TEST_WAIT_FOR(tell_arg(rt, a, MSG_WALK, 0) == ACCEL_ESTALE, 1);
  TEST_WAIT_FOR(tell_arg(rt, b, MSG_WALK, 0) == ACCEL_ESTALE, 1);
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&got);
}

TEST(a_stop_from_another_loop_runs_the_stop_hook_on_the_actors_own) {
  accel_ref a, b;
  accel_runtime *rt = pair(&a, &b, NULL);
  CHECK_OK(accel_stop(rt, b));
  CHECK_OK(gate_wait(&got, 1, 5000));
  CHECK_STR_EQ(events_get(), "stopped:watcher");
  CHECK_ERR(tell_arg(rt, b, MSG_WALK, 0), ACCEL_ESTALE);
  CHECK_OK(tell_arg(rt, a, MSG_WATCH, ref_arg(b))); /* watching it now: ESTALE */
  CHECK_OK(gate_wait(&got, 2, 5000));
  CHECK_STR_EQ(events_get(), "stopped:watcher watch:ESTALE");
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&got);
}

/* accel_tell_wait from actors of every loop into one small mailbox: all arrive, in order. */
typedef struct waiter_sender {
  uint32_t index;
} waiter_sender;

static int waiting_sender_receive(accel_actor *self, void *state, accel_msg *msg) {
  CHECK_EQ(msg->type, MSG_BLAST);
  accel_runtime *rt = accel_actor_runtime(self);
  for (uint32_t seq = 0; seq < SEQS / 10; seq++) {
    accel_msg m = msg_make(MSG_SEQ, msg->arg << 32 | seq);
    CHECK_OK(accel_tell_wait(rt, the_sink, &m, NULL));
  }
  return 0;
}

static const accel_behavior waiting_sender_b = {.name = "waiting",
                                                .receive = waiting_sender_receive};

static int counting_sink_receive(accel_actor *self, void *state, accel_msg *msg) {
  sink_take(state, msg, (uint64_t)(SEQS / 10) * LOOPS);
  return 0;
}

static const accel_behavior counting_sink_b = {
    .name = "sink", .state_size = sizeof(sink), .receive = counting_sink_receive};

TEST(sends_that_wait_for_room_across_loops_all_arrive_in_order) {
  gate_init(&sink_done);
  atomic_store(&sink_disorder, 0);
  accel_runtime *rt = new_runtime(LOOPS);
  accel_spawn_opts tiny = {.mailbox_capacity = 4};
  the_sink = spawn_ok(rt, NULL, &counting_sink_b, NULL, &tiny);
  accel_ref s[LOOPS];
  for (unsigned i = 0; i < LOOPS; i++)
    s[i] = spawn_ok(rt, NULL, &waiting_sender_b, NULL, NULL);
  CHECK_OK(accel_runtime_start(rt));
  for (unsigned i = 0; i < LOOPS; i++)
    CHECK_OK(tell_arg(rt, s[i], MSG_BLAST, i));
  CHECK_OK(gate_wait(&sink_done, 1, 60000));
  CHECK_EQ(atomic_load(&sink_disorder), 0);
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&sink_done);
}

/* ---- a walk sees every loop ---- */

static atomic_uint walked;

static void count_visit(const accel_actor_view *v, void *arg) {
  atomic_fetch_add(&walked, 1);
}

static int walker_receive(accel_actor *self, void *state, accel_msg *msg) {
  CHECK_OK(accel_runtime_walk(accel_actor_runtime(self), count_visit, NULL));
  gate_signal(&got);
  return 0;
}

static const accel_behavior walker_b = {.name = "walker", .receive = walker_receive};

TEST(a_walk_sees_the_actors_of_every_loop) {
  gate_init(&got);
  atomic_store(&walked, 0);
  accel_runtime *rt = new_runtime(LOOPS);
  accel_ref w = spawn_ok(rt, NULL, &walker_b, NULL, NULL);
  for (unsigned i = 1; i < ACTORS; i++)
    spawn_ok(rt, NULL, &placed_b, NULL, NULL);
  CHECK_OK(accel_runtime_start(rt));
  CHECK_OK(tell_arg(rt, w, MSG_WALK, 0));
  CHECK_OK(gate_wait(&got, 1, 5000));
  CHECK_EQ(atomic_load(&walked), 1 + ACTORS); /* the root and every top-level actor */
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&got);
}

/* ---- timers and work complete on the actor's loop ---- */

static pthread_t timer_thread, work_thread, own_thread;

static int work_fn(void *data) {
  return 7;
}

static int timed_receive(accel_actor *self, void *state, accel_msg *msg) {
  switch (msg->type) {
  case MSG_KICK:
    own_thread = pthread_self();
    CHECK_OK(accel_timer_start(self, 1, 0, MSG_TIMER, 0, NULL));
    CHECK_OK(accel_work_submit(self, work_fn, NULL, NULL, MSG_WORK_DONE));
    return 0;
  case MSG_TIMER:
    timer_thread = pthread_self();
    break;
  case MSG_WORK_DONE:
    CHECK_EQ(msg->arg, 7);
    work_thread = pthread_self();
    break;
  default:
    return 0;
  }
  gate_signal(&got);
  return 0;
}

static const accel_behavior timed_b = {.name = "timed", .receive = timed_receive};

TEST(timers_and_work_complete_on_the_actors_own_loop) {
  gate_init(&got);
  accel_runtime *rt = new_runtime(LOOPS);
  accel_ref t[LOOPS];
  for (unsigned i = 0; i < LOOPS; i++)
    t[i] = spawn_ok(rt, NULL, &timed_b, NULL, NULL); /* the last is on loop LOOPS - 1 */
  CHECK_OK(accel_runtime_start(rt));
  CHECK_OK(tell_arg(rt, t[LOOPS - 1], MSG_KICK, 0));
  CHECK_OK(gate_wait(&got, 2, 5000));
  CHECK(pthread_equal(timer_thread, own_thread));
  CHECK(pthread_equal(work_thread, own_thread));
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&got);
}

/* ---- a stop while the loops exchange messages ---- */

#define RING 64

static accel_ref ring[RING];
static atomic_ulong ring_stops, ring_passes;

typedef struct ring_node {
  uint32_t index;
} ring_node;

static int ring_start(accel_actor *self, void *state, void *arg) {
  ((ring_node *)state)->index = (uint32_t)(uintptr_t)arg;
  return 0;
}

static int ring_receive(accel_actor *self, void *state, accel_msg *msg) {
  ring_node *n = state;
  CHECK_EQ(msg->type, MSG_PASS);
  atomic_fetch_add(&ring_passes, 1);
  accel_msg m = {.type = MSG_PASS, .data = msg->data, .drop = counted_drop};
  msg->data = NULL; /* handed on: ours no longer */
  int rc = accel_tell(accel_actor_runtime(self), ring[(n->index + 1) % RING], &m);
  if (rc != 0)
    counted_drop(m.data); /* closing, or full: the token ends here */
  return 0;
}

static void ring_stop(accel_actor *self, void *state) {
  atomic_fetch_add(&ring_stops, 1);
}

static const accel_behavior ring_b = {.name = "ring",
                                      .state_size = sizeof(ring_node),
                                      .start = ring_start,
                                      .receive = ring_receive,
                                      .stop = ring_stop};

TEST(a_stop_while_loops_exchange_messages_stops_everyone_and_loses_nothing) {
  counted_reset();
  atomic_store(&ring_stops, 0);
  atomic_store(&ring_passes, 0);
  accel_runtime *rt = new_runtime(LOOPS);
  for (uintptr_t i = 0; i < RING; i++)
    ring[i] = spawn_ok(rt, NULL, &ring_b, (void *)i, NULL);
  CHECK_OK(accel_runtime_start(rt));
  for (unsigned i = 0; i < RING; i += 2) {
    accel_msg m = {.type = MSG_PASS, .data = counted_new(i), .drop = counted_drop};
    CHECK_OK(accel_tell(rt, ring[i], &m));
  }
  TEST_WAIT_FOR(atomic_load(&ring_passes) > 20000, 1);
  runtime_stop_then_destroy(rt, NULL);
  CHECK_EQ(atomic_load(&ring_stops), RING);
  CHECK_EQ(counted_live(), 0); /* every token freed: dropped in a mailbox or by its holder */
}

/* ---- actors move to the loop they talk to ---- */

#define ROUNDS 2000

typedef struct talker {
  accel_ref peer;
  uint32_t rounds;
  bool busy;  /* spin ~100 us a turn: long turns do not move */
  bool timer; /* holds a timer: tied to its loop */
} talker;

static pthread_t last_thread[2];
static atomic_uint talk_done;

static void spin_us(unsigned us) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do
    clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < (long)us);
}

/* arg: the peer's ref and which side; MSG_PASS bounces ROUNDS times. */
static int talker_receive(accel_actor *self, void *state, accel_msg *msg) {
  talker *t = state;
  if (msg->type == MSG_KICK) {
    t->peer = (accel_ref){(uint32_t)(msg->arg >> 32), (uint32_t)msg->arg};
    t->busy = msg->flags & 1;
    t->timer = msg->flags & 2;
    if (t->timer)
      CHECK_OK(accel_timer_start(self, 60000, 0, MSG_TIMER, 0, NULL));
    gate_signal(&got);
    return 0;
  }
  if (msg->type != MSG_PASS)
    return 0;
  last_thread[msg->arg & 1] = pthread_self();
  if (t->busy)
    spin_us(100);
  if (++t->rounds >= ROUNDS / 2) {
    if (t->rounds == ROUNDS / 2) {
      atomic_fetch_add(&talk_done, 1);
      gate_signal(&got);
    }
    if (atomic_load(&talk_done) == 2)
      return 0;
  }
  return accel_tell(accel_actor_runtime(self), t->peer,
                    &(accel_msg){.type = MSG_PASS, .arg = msg->arg + 1});
}

static const accel_behavior talker_b = {
    .name = "talker", .state_size = sizeof(talker), .receive = talker_receive};

/* Two top-level actors spawned from outside (so on loops 0 and 1) play ping-pong; flags: 1 busy
 * turns, 2 the second holds a timer, 4 both spawned on those loops by name (accel_spawn_opts
 * .loop). Returns the moves counted. */
static uint64_t ping_pong(uint32_t flags, bool *same_thread) {
  gate_init(&got);
  atomic_store(&talk_done, 0);
  /* Short turns count as short even under valgrind, whose turns run 50x slower; the busy turns
   * (100 us of wall time) stay long against the default bound. */
  if (!(flags & 1))
    setenv("ACCEL_MOVE_TURN_CYCLES", "1000000000", 1);
  accel_runtime *rt = new_runtime(2);
  unsetenv("ACCEL_MOVE_TURN_CYCLES");
  bool named = flags & 4;
  accel_ref a = spawn_ok(rt, NULL, &talker_b, NULL, named ? &(accel_spawn_opts){.loop = 1} : NULL);
  accel_ref b = spawn_ok(rt, NULL, &talker_b, NULL, named ? &(accel_spawn_opts){.loop = 2} : NULL);
  CHECK_OK(accel_runtime_start(rt));
  accel_msg ka = {.type = MSG_KICK, .arg = ref_arg(b), .flags = flags & 1};
  accel_msg kb = {.type = MSG_KICK, .arg = ref_arg(a), .flags = flags & 3};
  CHECK_OK(accel_tell(rt, a, &ka));
  CHECK_OK(accel_tell(rt, b, &kb));
  CHECK_OK(gate_wait(&got, 2, 5000));
  CHECK_OK(tell_arg(rt, a, MSG_PASS, 0));
  CHECK_OK(gate_wait(&got, 4, 60000));
  *same_thread = pthread_equal(last_thread[0], last_thread[1]);
  accel_runtime_stats st;
  runtime_stop_then_destroy(rt, &st);
  gate_destroy(&got);
  return st.moves;
}

TEST(a_conversation_across_loops_moves_to_one) {
  bool same;
  uint64_t moves = ping_pong(0, &same);
  CHECK(moves >= 1);
  CHECK(same); /* the last exchanges ran on one thread */
}

TEST(actors_with_long_turns_or_a_timer_stay_where_they_are) {
  bool same;
  CHECK_EQ(ping_pong(1, &same), 0); /* 100 us turns: computing, spread pays */
  CHECK(!same);
  CHECK_EQ(ping_pong(2, &same), 1); /* b holds a timer: a moves to b, not b to a */
  CHECK(same);
}

TEST(actors_spawned_on_a_named_loop_never_move) {
  bool same;
  CHECK_EQ(ping_pong(4, &same), 0); /* short turns, as in a_conversation_across_loops_... */
  CHECK(!same);
}

TEST(move_after_0_keeps_every_actor_where_it_was_spawned) {
  setenv("ACCEL_MOVE_AFTER", "0", 1);
  bool same;
  uint64_t moves = ping_pong(0, &same);
  unsetenv("ACCEL_MOVE_AFTER");
  CHECK_EQ(moves, 0);
  CHECK(!same);
}

/* A stop and waiting sends posted to an actor's old loop follow it to its new one. */
TEST(stops_and_waiting_sends_follow_an_actor_that_moved) {
  bool same;
  (void)same;
  gate_init(&got);
  atomic_store(&talk_done, 0);
  events_reset();
  setenv("ACCEL_MOVE_TURN_CYCLES", "1000000000", 1); /* every turn short, even under valgrind */
  accel_runtime *rt = new_runtime(2);
  unsetenv("ACCEL_MOVE_TURN_CYCLES");
  accel_ref a = spawn_ok(rt, NULL, &talker_b, NULL, NULL);
  accel_ref b = spawn_ok(rt, NULL, &watcher_b, NULL, NULL); /* its stop hook logs */
  CHECK_OK(accel_runtime_start(rt));
  accel_msg ka = {.type = MSG_KICK, .arg = ref_arg(b)};
  CHECK_OK(accel_tell(rt, a, &ka));
  CHECK_OK(gate_wait(&got, 1, 5000));
  /* b hears only from a's loop: it moves there on a turn the coin agrees. */
  TEST_WAIT_FOR(((void)tell_arg(rt, a, MSG_PASS, 0), stats_of(rt).moves >= 1), 1);
  for (int i = 0; i < 100; i++) {
    accel_msg m = msg_make(MSG_WALK, 0);
    CHECK_OK(accel_tell_wait(rt, b, &m, NULL));
  }
  CHECK_OK(accel_stop(rt, b));
  TEST_WAIT_FOR(strcmp(events_with_prefix("stopped"), "stopped:watcher") == 0, 1);
  CHECK_ERR(tell_arg(rt, b, MSG_WALK, 0), ACCEL_ESTALE);
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&got);
}

/* ---- the option ---- */

TEST(the_number_of_loops_is_bounded_and_the_environment_sets_the_default) {
  struct rlimit r;
  CHECK_OK(getrlimit(RLIMIT_NOFILE, &r));
  r.rlim_cur = r.rlim_max; /* three descriptors per loop */
  CHECK_OK(setrlimit(RLIMIT_NOFILE, &r));
  accel_runtime *rt = NULL;
  accel_runtime_opts o = {.loops = 256};
  CHECK_OK(accel_runtime_create(&rt, &o)); /* at the limit */
  CHECK_EQ(accel_runtime_loops(rt), 256);
  accel_runtime_destroy(rt);
  o.loops = 257;
  CHECK_ERR(accel_runtime_create(&rt, &o), ACCEL_EINVAL); /* one past it */
  const char *before = getenv("ACCEL_LOOPS");
  char *saved = before ? strdup(before) : NULL;
  setenv("ACCEL_LOOPS", "3", 1);
  CHECK_OK(accel_runtime_create(&rt, NULL));
  CHECK_EQ(accel_runtime_loops(rt), 3);
  accel_runtime_destroy(rt);
  setenv("ACCEL_LOOPS", "257", 1); /* out of range: the default */
  CHECK_OK(accel_runtime_create(&rt, NULL));
  CHECK_EQ(accel_runtime_loops(rt), 1);
  accel_runtime_destroy(rt);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  uint32_t per_core = cores > 256 ? 256 : (uint32_t)cores;
  setenv("ACCEL_LOOPS", "cores", 1);
  CHECK_OK(accel_runtime_create(&rt, NULL));
  CHECK_EQ(accel_runtime_loops(rt), per_core);
  accel_runtime_destroy(rt);
  o.loops = ACCEL_LOOPS_PER_CORE;
  CHECK_OK(accel_runtime_create(&rt, &o));
  CHECK_EQ(accel_runtime_loops(rt), per_core);
  accel_runtime_destroy(rt);
  if (saved)
    setenv("ACCEL_LOOPS", saved, 1);
  else
    unsetenv("ACCEL_LOOPS");
  free(saved);
}

static const test_case tests[] = {
    TEST_CASE(top_level_actors_spread_and_children_stay_with_their_parent),
    TEST_CASE(top_level_actors_go_to_the_loop_their_options_name),
    TEST_CASE(a_loop_spawns_on_its_own_loop_only),
    TEST_CASE(one_actor_fed_by_every_loop_runs_on_one_thread_in_each_senders_order),
    TEST_CASE(a_monitor_on_another_loop_gets_down_with_the_reason),
    TEST_CASE(a_link_across_loops_fails_both_and_a_stop_from_outside_ends_one),
    TEST_CASE(a_stop_from_another_loop_runs_the_stop_hook_on_the_actors_own),
    TEST_CASE(sends_that_wait_for_room_across_loops_all_arrive_in_order),
    TEST_CASE(a_walk_sees_the_actors_of_every_loop),
    TEST_CASE(timers_and_work_complete_on_the_actors_own_loop),
    TEST_CASE(a_stop_while_loops_exchange_messages_stops_everyone_and_loses_nothing),
    TEST_CASE(a_conversation_across_loops_moves_to_one),
    TEST_CASE(actors_with_long_turns_or_a_timer_stay_where_they_are),
    TEST_CASE(actors_spawned_on_a_named_loop_never_move),
    TEST_CASE(move_after_0_keeps_every_actor_where_it_was_spawned),
    TEST_CASE(stops_and_waiting_sends_follow_an_actor_that_moved),
    TEST_CASE(the_number_of_loops_is_bounded_and_the_environment_sets_the_default),
};

TEST_MAIN(tests)
