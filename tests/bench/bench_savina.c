/* bench-savina: programs of the Savina actor benchmark suite on accel's runtime (one loop),
 * each run with the loop's in-turn hops (ACCEL_TURN_HOPS, default) and without them
 * (ACCEL_TURN_HOPS=0: a woken actor waits for the next turn, one loop iteration per hop, as
 * before), in the same process; the ratio is the gain.
 *   pingpong    two actors pass one message back and forth (round trips/s);
 *   threadring  503 actors in a ring pass one token around (hops/s);
 *   counting    one actor sends N messages to another, which counts them (messages/s);
 *   fork-join   200 k actors spawned (default options), one message each (actors/s);
 *   big         120 actors ping random peers and answer with pongs (pongs/s);
 *   ask         a plain thread asks an actor and waits, one round trip at a time;
 *   trapezoid   compute-bound: an integral in 10 M pieces split over 100 actors, each running
 *               its slice as blocking work (libuv's pool), summed by a master (pieces/s).
 * Every program checks its own result (the count a run must reach; the trapezoid's area
 * against a float64 sum) and fails otherwise.
 * With --caf PATH (tests/bench/caf/savina-caf) each program runs against the same program on
 * CAF 0.17, with CAF's default scheduler and with one worker thread; the ratios are accel's
 * rate over CAF's.
 * Usage: bench-savina [--quick] [--caf PATH] [--only PROGRAM] */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accel/runtime.h"

enum { MSG_GO = ACCEL_MSG_USER, MSG_PING, MSG_TOKEN, MSG_COUNT };

typedef struct run {
  accel_future *done; /* completed with the count reached */
  uint64_t target;
} run;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void die(const char *what, int rc) {
  fprintf(stderr, "bench-savina: %s: %s\n", what, accel_err_name(rc));
  exit(1);
}

static void finish(run *r, uint64_t reached) {
  accel_future_complete(r->done, 0, (void *)(uintptr_t)reached, NULL);
}

/* ---- pingpong: the pinger sends arg = rounds left; the ponger answers each ---- */

typedef struct pinger {
  run *r;
  accel_ref peer;
  uint64_t rounds;
} pinger;

static int ping_start(accel_actor *self, void *state, void *arg) {
  ((pinger *)state)->r = arg;
  return 0;
}

static int ping_receive(accel_actor *self, void *state, accel_msg *msg) {
  pinger *p = state;
  accel_runtime *rt = accel_actor_runtime(self);
  if (msg->type == MSG_GO) {
    p->peer = *(accel_ref *)msg->data;
    return 0;
  }
  if (msg->type == MSG_PING && ++p->rounds == p->r->target) {
    finish(p->r, p->rounds);
    return 0;
  }
  return accel_tell(rt, p->peer, &(accel_msg){.type = MSG_PING});
}

static int pong_receive(accel_actor *self, void *state, accel_msg *msg) {
  return accel_tell(accel_actor_runtime(self), msg->sender, &(accel_msg){.type = MSG_PING});
}

static const accel_behavior pinger_b = {
    .name = "pinger", .state_size = sizeof(pinger), .start = ping_start, .receive = ping_receive};
static const accel_behavior ponger_b = {.name = "ponger", .receive = pong_receive};

/* ---- threadring: each actor passes the token (arg: hops left) to the next ---- */

typedef struct ring_node {
  run *r;
  accel_ref next;
} ring_node;

static int ring_start(accel_actor *self, void *state, void *arg) {
  ((ring_node *)state)->r = arg;
  return 0;
}

static int ring_receive(accel_actor *self, void *state, accel_msg *msg) {
  ring_node *n = state;
  if (msg->type == MSG_GO) {
    n->next = *(accel_ref *)msg->data;
    return 0;
  }
  if (msg->arg == 0) {
    finish(n->r, n->r->target);
    return 0;
  }
  return accel_tell(accel_actor_runtime(self), n->next,
                    &(accel_msg){.type = MSG_TOKEN, .arg = msg->arg - 1});
}

static const accel_behavior ring_b = {
    .name = "ring", .state_size = sizeof(ring_node), .start = ring_start, .receive = ring_receive};

/* ---- counting: the producer sends in bursts the mailbox takes, the counter counts ---- */

typedef struct counter {
  run *r;
  uint64_t seen;
} counter;

static int counter_start(accel_actor *self, void *state, void *arg) {
  ((counter *)state)->r = arg;
  return 0;
}

/* MSG_COUNT: one more; the producer is told every 512 so that it sends the next burst. */
static int counter_receive(accel_actor *self, void *state, accel_msg *msg) {
  counter *c = state;
  if (msg->type != MSG_COUNT)
    return 0;
  if (++c->seen == c->r->target) {
    finish(c->r, c->seen);
    return 0;
  }
  if (c->seen % 512 == 0)
    return accel_tell(accel_actor_runtime(self), msg->sender, &(accel_msg){.type = MSG_GO});
  return 0;
}

typedef struct producer {
  run *r;
  accel_ref to;
  uint64_t sent;
} producer;

static int producer_start(accel_actor *self, void *state, void *arg) {
  ((producer *)state)->r = arg;
  return 0;
}

static int producer_receive(accel_actor *self, void *state, accel_msg *msg) {
  producer *p = state;
  if (msg->type == MSG_GO && msg->data != NULL) { /* the link, before the run */
    p->to = *(accel_ref *)msg->data;
    return 0;
  }
  accel_runtime *rt = accel_actor_runtime(self);
  for (int i = 0; i < 512 && p->sent < p->r->target; i++, p->sent++) {
    int rc = accel_tell(rt, p->to, &(accel_msg){.type = MSG_COUNT});
    if (rc != 0)
      return rc;
  }
  return 0;
}

static const accel_behavior counter_b = {.name = "counter",
                                         .state_size = sizeof(counter),
                                         .start = counter_start,
                                         .receive = counter_receive};
static const accel_behavior producer_b = {.name = "producer",
                                          .state_size = sizeof(producer),
                                          .start = producer_start,
                                          .receive = producer_receive};

/* ---- fork-join (Savina fjcreation): spawn N actors, one message each; each computes a
 * little, tells the driver and stops itself ---- */

enum { MSG_FJ = MSG_COUNT + 1, MSG_FJ_DONE, MSG_BIG_PING, MSG_BIG_PONG, MSG_BIG_DONE, MSG_SLICE };

static int fj_worker_receive(accel_actor *self, void *state, accel_msg *msg) {
  double sint = sin(37.2); /* Savina's performComputation(37.2) */
  if (sint * sint <= 0.0)
    return -1;
  accel_runtime *rt = accel_actor_runtime(self);
  int rc = accel_tell(rt, msg->sender, &(accel_msg){.type = MSG_FJ_DONE});
  if (rc == 0)
    rc = accel_stop(rt, accel_self(self));
  return rc;
}

static const accel_behavior fj_worker_b = {.name = "fj", .receive = fj_worker_receive};

typedef struct fj_driver {
  run *r;
  uint64_t done;
} fj_driver;

static int fj_driver_start(accel_actor *self, void *state, void *arg) {
  ((fj_driver *)state)->r = arg;
  return 0;
}

/* MSG_GO: spawns the workers with the default options (mailbox bound 1024) and tells each. */
static int fj_driver_receive(accel_actor *self, void *state, accel_msg *msg) {
  fj_driver *d = state;
  accel_runtime *rt = accel_actor_runtime(self);
  if (msg->type == MSG_FJ_DONE) {
    if (++d->done == d->r->target)
      finish(d->r, d->done);
    return 0;
  }
  for (uint64_t i = 0; i < d->r->target; i++) {
    accel_ref w;
    int rc = accel_spawn(rt, NULL, &fj_worker_b, NULL, NULL, &w);
    if (rc == 0)
      rc = accel_tell(rt, w, &(accel_msg){.type = MSG_FJ});
    if (rc != 0)
      die("fork-join spawn and tell", rc);
  }
  return 0;
}

static const accel_behavior fj_driver_b = {.name = "fj-driver",
                                           .state_size = sizeof(fj_driver),
                                           .start = fj_driver_start,
                                           .receive = fj_driver_receive};

/* ---- big (Savina big): W actors; each sends `pings` pings to random peers, one at a time,
 * and answers every ping with a pong; the sink counts the actors that finished ---- */

#define BIG_ACTORS 120

typedef struct big_setup {
  run *r;
  uint64_t pings; /* per actor */
  accel_ref peers[BIG_ACTORS];
  accel_ref sink;
  uint64_t pongs; /* all actors' pongs received (the sink's sum) */
} big_setup;

typedef struct big_actor {
  big_setup *b;
  uint64_t left, rng;
  uint64_t pongs; /* its own: the actors may run on several loops */
} big_actor;

static int big_start(accel_actor *self, void *state, void *arg) {
  big_actor *a = state;
  a->b = arg;
  a->left = a->b->pings;
  a->rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)accel_self(self).slot << 17);
  return 0;
}

static uint32_t big_random(big_actor *a) { /* xorshift64 */
  a->rng ^= a->rng << 13;
  a->rng ^= a->rng >> 7;
  a->rng ^= a->rng << 17;
  return (uint32_t)(a->rng % BIG_ACTORS);
}

static int big_receive(accel_actor *self, void *state, accel_msg *msg) {
  big_actor *a = state;
  accel_runtime *rt = accel_actor_runtime(self);
  if (msg->type == MSG_BIG_PING)
    return accel_tell(rt, msg->sender, &(accel_msg){.type = MSG_BIG_PONG});
  if (msg->type == MSG_BIG_PONG)
    a->pongs++;
  if (a->left == 0)
    return accel_tell(rt, a->b->sink, &(accel_msg){.type = MSG_BIG_DONE, .arg = a->pongs});
  a->left--;
  return accel_tell(rt, a->b->peers[big_random(a)], &(accel_msg){.type = MSG_BIG_PING});
}

static const accel_behavior big_b = {
    .name = "big", .state_size = sizeof(big_actor), .start = big_start, .receive = big_receive};

static int big_sink_receive(accel_actor *self, void *state, accel_msg *msg) {
  big_setup *b = *(big_setup **)state;
  uint64_t *finished = (uint64_t *)((big_setup **)state + 1);
  b->pongs += msg->arg;
  if (++*finished == BIG_ACTORS)
    finish(b->r, b->pongs);
  return 0;
}

static int big_sink_start(accel_actor *self, void *state, void *arg) {
  *(big_setup **)state = arg;
  return 0;
}

static const accel_behavior big_sink_b = {.name = "big-sink",
                                          .state_size = sizeof(big_setup *) + sizeof(uint64_t),
                                          .start = big_sink_start,
                                          .receive = big_sink_receive};

/* ---- trapezoid (Savina trapezoid): the integral of Savina's fx over [1, 5] in n pieces,
 * split over W actors; each runs its slice as blocking work (accel_work_submit: libuv's
 * pool, so the slices use every core) and sends the partial area to the master ---- */

#define TRAP_WORKERS 100
#define TRAP_LEFT 1.0
#define TRAP_RIGHT 5.0

static double fx(double x) {
  double a = sin(pow(x, 3) - 1);
  double b = x + 1;
  double c = a / b;
  double d = sqrt(1 + exp(sqrt(2 * x)));
  return c * d;
}

typedef struct slice {
  double left, step, area;
  uint64_t pieces;
} slice;

static double slice_area(double left, double step, uint64_t pieces) {
  double area = 0;
  for (uint64_t i = 0; i < pieces; i++) {
    double l = left + (double)i * step;
    area += 0.5 * (fx(l) + fx(l + step)) * step;
  }
  return area;
}

static int slice_work(void *data) {
  slice *s = data;
  s->area = slice_area(s->left, s->step, s->pieces);
  return 0;
}

typedef struct trap_master {
  run *r;
  double area;
  int parts;
} trap_master;

static accel_ref trap_master_ref;
static double trap_area; /* the master's sum, read after the run */

static accel_ref trap_workers[TRAP_WORKERS];

/* With one loop a slice runs on libuv's pool (blocking work, the cores in parallel); with
 * several loops (spread over them: spawned from outside) in the worker's own turn, as CAF's
 * workers compute in their handlers. */
static int trap_worker_receive(accel_actor *self, void *state, accel_msg *msg) {
  accel_runtime *rt = accel_actor_runtime(self);
  if (msg->type == MSG_GO && accel_runtime_loops(rt) > 1)
    slice_work(msg->data);
  if (msg->type == MSG_SLICE || accel_runtime_loops(rt) > 1) { /* done: the area to the master */
    slice *s = msg->data;
    accel_msg m = {.type = MSG_SLICE, .data = s, .drop = free}; /* freed after the master's turn */
    msg->data = NULL;
    return accel_tell(rt, trap_master_ref, &m);
  }
  slice *s = msg->data; /* MSG_GO: our slice */
  msg->data = NULL;
  return accel_work_submit(self, slice_work, s, free, MSG_SLICE);
}

static const accel_behavior trap_worker_b = {.name = "trap", .receive = trap_worker_receive};

static int trap_master_start(accel_actor *self, void *state, void *arg) {
  ((trap_master *)state)->r = arg;
  return 0;
}

static int trap_master_receive(accel_actor *self, void *state, accel_msg *msg) {
  trap_master *t = state;
  accel_runtime *rt = accel_actor_runtime(self);
  if (msg->type == MSG_SLICE) {
    t->area += ((slice *)msg->data)->area;
    if (++t->parts == TRAP_WORKERS) {
      trap_area = t->area;
      finish(t->r, t->r->target);
    }
    return 0;
  }
  uint64_t n = t->r->target, per = n / TRAP_WORKERS;
  double step = (TRAP_RIGHT - TRAP_LEFT) / (double)n;
  for (int i = 0; i < TRAP_WORKERS; i++) {
    accel_ref w = trap_workers[i];
    slice *s = malloc(sizeof *s);
    int rc = 0;
    if (s == NULL)
      die("trapezoid slice", ACCEL_ENOMEM);
    uint64_t first = (uint64_t)i * per;
    *s = (slice){.left = TRAP_LEFT + (double)first * step,
                 .step = step,
                 .pieces = i == TRAP_WORKERS - 1 ? n - first : per};
    rc = accel_tell(rt, w, &(accel_msg){.type = MSG_GO, .data = s, .drop = free});
    if (rc != 0)
      die("trapezoid tell", rc);
  }
  return 0;
}

static const accel_behavior trap_master_b = {.name = "trap-master",
                                             .state_size = sizeof(trap_master),
                                             .start = trap_master_start,
                                             .receive = trap_master_receive};

/* ---- ask: a plain thread asks an actor and waits for each answer ---- */

static int echo_receive(accel_actor *self, void *state, accel_msg *msg) {
  return accel_reply(msg, 0, (void *)(uintptr_t)(msg->arg + 1), NULL);
}

static const accel_behavior echo_b = {.name = "echo", .receive = echo_receive};

static void ask_rounds(accel_runtime *rt, accel_ref echo, run *r) {
  uint64_t i = 0;
  for (; i < r->target; i++) {
    accel_future *f;
    int rc = accel_ask(rt, echo, &(accel_msg){.type = MSG_PING, .arg = i}, &f);
    if (rc == 0)
      rc = accel_future_wait(f, -1);
    if (rc != 0)
      die("ask", rc);
    if ((uint64_t)(uintptr_t)accel_future_value(f) != i + 1)
      die("ask: a wrong answer", ACCEL_EIO);
    accel_future_release(f);
  }
  finish(r, i);
}

/* ---- driving one program ---- */

typedef enum { PINGPONG, THREADRING, COUNTING, FORKJOIN, BIG, ASK, TRAPEZOID, N_PROGRAMS } program;

static const char *const program_names[N_PROGRAMS] = {
    "pingpong", "threadring", "counting", "fork-join", "big", "ask", "trapezoid"};

#define RING 503

static void spawn_cap(accel_runtime *rt, const accel_behavior *b, void *arg, uint32_t capacity,
                      accel_ref *out) {
  accel_spawn_opts o = {.mailbox_capacity = capacity};
  int rc = accel_spawn(rt, NULL, b, arg, &o, out);
  if (rc != 0)
    die("accel_spawn", rc);
}

static void spawn_arg(accel_runtime *rt, const accel_behavior *b, void *arg, accel_ref *out) {
  spawn_cap(rt, b, arg, 1024, out);
}

static void spawn(accel_runtime *rt, const accel_behavior *b, run *r, accel_ref *out) {
  spawn_arg(rt, b, r, out);
}

static void tell_ref(accel_runtime *rt, accel_ref to, uint32_t type, uint64_t arg, accel_ref *ref) {
  int rc = accel_tell(rt, to, &(accel_msg){.type = type, .arg = arg, .data = ref});
  if (rc != 0)
    die("accel_tell", rc);
}

static big_setup big;

/* Spawns the program's actors and links them, before the loop runs; refs[] must outlive the
 * run (messages point at them). */
static void set_up(accel_runtime *rt, program p, run *r, accel_ref *refs) {
  switch (p) {
  case PINGPONG:
    spawn(rt, &pinger_b, r, &refs[0]);
    spawn(rt, &ponger_b, r, &refs[1]);
    tell_ref(rt, refs[0], MSG_GO, 0, &refs[1]);
    break;
  case THREADRING:
    for (int i = 0; i < RING; i++)
      spawn(rt, &ring_b, r, &refs[i]);
    for (int i = 0; i < RING; i++)
      tell_ref(rt, refs[i], MSG_GO, 0, &refs[(i + 1) % RING]);
    break;
  case COUNTING:
    spawn(rt, &counter_b, r, &refs[0]);
    spawn(rt, &producer_b, r, &refs[1]);
    tell_ref(rt, refs[1], MSG_GO, 0, &refs[0]);
    break;
  case FORKJOIN: /* every worker's answer may queue at once: the driver's bound is N (its
                  * mailbox grows only as far as the answers do) */
    spawn_cap(rt, &fj_driver_b, r, (uint32_t)r->target, &refs[0]);
    break;
  case BIG:
    big = (big_setup){.r = r, .pings = r->target / BIG_ACTORS};
    spawn_arg(rt, &big_sink_b, &big, &big.sink);
    for (int i = 0; i < BIG_ACTORS; i++)
      spawn_arg(rt, &big_b, &big, &big.peers[i]);
    break;
  case ASK:
    spawn(rt, &echo_b, r, &refs[0]);
    break;
  case TRAPEZOID:
    spawn(rt, &trap_master_b, r, &refs[0]);
    trap_master_ref = refs[0];
    for (int i = 0; i < TRAP_WORKERS; i++) /* from here: over every loop */
      spawn(rt, &trap_worker_b, r, &trap_workers[i]);
    break;
  default:
    break;
  }
}

/* The message that starts the run (from this thread: the loop runs). */
static void kick(accel_runtime *rt, program p, run *r, accel_ref *refs) {
  if (p == PINGPONG)
    tell_ref(rt, refs[0], MSG_TOKEN, 0, NULL);
  else if (p == THREADRING)
    tell_ref(rt, refs[0], MSG_TOKEN, r->target, NULL);
  else if (p == BIG)
    for (int i = 0; i < BIG_ACTORS; i++)
      tell_ref(rt, big.peers[i], MSG_GO, 0, NULL);
  else if (p == ASK)
    ask_rounds(rt, refs[0], r);
  else if (p == COUNTING)
    tell_ref(rt, refs[1], MSG_GO, 0, NULL);
  else
    tell_ref(rt, refs[0], MSG_GO, 0, NULL);
}

static double trapezoid_reference(uint64_t n) {
  static uint64_t done_for;
  static double area;
  if (done_for != n) {
    area = slice_area(TRAP_LEFT, (TRAP_RIGHT - TRAP_LEFT) / (double)n, n);
    done_for = n;
  }
  return area;
}

/* What a run must reach: the count, and for trapezoid the area against a float64 sum in one
 * piece (relative 1e-9: the sums differ only in the order of additions). */
static void check_result(program p, uint64_t target, uint64_t reached) {
  uint64_t want = p == BIG ? target / BIG_ACTORS * BIG_ACTORS : target;
  if (reached != want) {
    fprintf(stderr, "bench-savina: %s reached %llu of %llu\n", program_names[p],
            (unsigned long long)reached, (unsigned long long)want);
    exit(1);
  }
  if (p == TRAPEZOID) {
    double ref = trapezoid_reference(target);
    if (!(fabs(trap_area - ref) <= 1e-9 * fabs(ref))) {
      fprintf(stderr, "bench-savina: trapezoid area %.17g, reference %.17g\n", trap_area, ref);
      exit(1);
    }
  }
}

static const char *loops_arg = "1"; /* --loops: the runtime's loops (ACCEL_LOOPS) */

/* One run in a fresh runtime of `loops` loops; its rate in units per second. */
static double run_loops(program p, uint64_t target, const char *hops, const char *loops) {
  setenv("ACCEL_TURN_HOPS", hops, 1);
  setenv("ACCEL_LOOPS", loops, 1);
  accel_runtime *rt;
  int rc = accel_runtime_create(&rt, NULL);
  if (rc != 0)
    die("accel_runtime_create", rc);
  static accel_ref refs[RING];
  run r = {.target = target};
  if ((rc = accel_future_create(rt, &r.done)) != 0)
    die("accel_future_create", rc);
  set_up(rt, p, &r, refs);
  if ((rc = accel_runtime_start(rt)) != 0)
    die("accel_runtime_start", rc);
  uint64_t t0 = now_ns();
  kick(rt, p, &r, refs);
  if ((rc = accel_future_wait(r.done, 120000)) != 0)
    die("the run", rc);
  double s = (double)(now_ns() - t0) * 1e-9;
  check_result(p, target, (uint64_t)(uintptr_t)accel_future_value(r.done));
  accel_future_release(r.done);
  accel_runtime_stop(rt);
  accel_runtime_join(rt);
  accel_runtime_destroy(rt);
  return (double)target / s;
}

static double run_once(program p, uint64_t target, const char *hops) {
  return run_loops(p, target, hops, loops_arg);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof v[0], cmp);
  return v[n / 2];
}

/* The median of `reps` runs, alternating the two modes so that drift hits both alike. */
static void compare(const char *name, const char *unit, program p, uint64_t target, int reps) {
  double on[9], off[9];
  for (int i = 0; i < reps; i++) {
    off[i] = run_once(p, target, "0");
    on[i] = run_once(p, target, "1024");
  }
  double a = median(on, reps), b = median(off, reps);
  printf("| %-10s | %12.0f | %12.0f | %5.2f | %s |\n", name, a, b, a / b, unit);
}

/* ---- trapezoid's floor: the same slices on plain threads ---- */

typedef struct trap_thread {
  pthread_t t;
  uint64_t n;      /* all pieces */
  int first, step; /* the slices this thread computes: first, first + step, ... */
  double area;
} trap_thread;

static void *trap_thread_main(void *arg) {
  trap_thread *tt = arg;
  uint64_t per = tt->n / TRAP_WORKERS;
  double step = (TRAP_RIGHT - TRAP_LEFT) / (double)tt->n;
  for (int i = tt->first; i < TRAP_WORKERS; i += tt->step) {
    uint64_t first = (uint64_t)i * per;
    uint64_t pieces = i == TRAP_WORKERS - 1 ? tt->n - first : per;
    tt->area += slice_area(TRAP_LEFT + (double)first * step, step, pieces);
  }
  return NULL;
}

/* The 100 slices dealt round-robin to `threads` plain threads; pieces per second. */
static double trap_threads_once(uint64_t n, int threads) {
  trap_thread tt[256];
  uint64_t t0 = now_ns();
  for (int i = 0; i < threads; i++) {
    tt[i] = (trap_thread){.n = n, .first = i, .step = threads};
    if (pthread_create(&tt[i].t, NULL, trap_thread_main, &tt[i]) != 0)
      die("pthread_create", ACCEL_ESYS);
  }
  double area = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(tt[i].t, NULL);
    area += tt[i].area;
  }
  double s = (double)(now_ns() - t0) * 1e-9;
  if (area == 0)
    die("trapezoid threads: no area", ACCEL_EIO);
  return (double)n / s;
}

/* --loops N without --caf: N loops against one, alternating. */
static void compare_loops(const char *name, const char *unit, program p, uint64_t target,
                          int reps) {
  double many[9], one[9];
  for (int i = 0; i < reps; i++) {
    one[i] = run_loops(p, target, "1024", "1");
    many[i] = run_loops(p, target, "1024", loops_arg);
  }
  double a = median(many, reps), b = median(one, reps);
  printf("| %-10s | %12.0f | %12.0f | %5.2f | %s |\n", name, a, b, a / b, unit);
  if (p != TRAPEZOID)
    return;
  /* The hardware's own scaling, in the same run: the slices on N plain threads and on one. */
  int n = strcmp(loops_arg, "cores") == 0 ? (int)sysconf(_SC_NPROCESSORS_ONLN) : atoi(loops_arg);
  if (n < 1)
    return;
  double raw[9], raw1[9];
  for (int i = 0; i < reps; i++) {
    raw1[i] = trap_threads_once(target, 1);
    raw[i] = trap_threads_once(target, n > 256 ? 256 : n);
  }
  double r = median(raw, reps), r1 = median(raw1, reps);
  printf("# trapezoid on plain threads: %d threads %.0f /s, 1 thread %.0f /s (%.2fx); "
         "accel %d loops / %d threads %.2f, speed-up over 1 thread %.2fx\n",
         n, r, r1, r / r1, n, n, a / r, a / r1);
}

/* ---- against CAF: the same programs in tests/bench/caf/savina_caf.cpp ---- */

/* One run of the CAF program (threads 0: CAF's default scheduler); its rate. */
static double caf_once(const char *caf, program p, uint64_t target, int threads) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s %llu %d", caf, program_names[p], (unsigned long long)target,
           threads);
  FILE *f = popen(cmd, "r");
  double rate = 0;
  if (f == NULL || fscanf(f, "%lf", &rate) != 1 || pclose(f) != 0 || !(rate > 0)) {
    fprintf(stderr, "bench-savina: %s failed\n", cmd);
    exit(1);
  }
  return rate;
}

typedef struct row {
  program p;
  const char *unit;
  uint64_t target; /* at full scale */
} row;

static const row rows[] = {
    {PINGPONG, "round trips", 200000}, {THREADRING, "hops", 2000000},
    {COUNTING, "messages", 4000000},   {FORKJOIN, "actors", 200000},
    {BIG, "pongs", 1920000},           {ASK, "round trips", 200000},
    {TRAPEZOID, "pieces", 10000000},
};

/* Per row, alternating: accel, CAF default, CAF on one thread; medians and ratios. */
static void against_caf(const char *caf, const char *only, int reps, uint64_t scale) {
  printf("# bench-savina --caf: medians of %d runs each, alternating; ratio = accel / CAF; "
         "accel on %s loop(s)\n",
         reps, loops_arg);
  printf("| program | accel /s | CAF default /s | accel/CAF | CAF 1 thread /s | accel/CAF-1 | unit "
         "|\n|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const row *w = &rows[i];
    if (only && strcmp(only, program_names[w->p]) != 0)
      continue;
    uint64_t target = w->target / scale;
    double a[9], c[9], c1[9];
    for (int k = 0; k < reps; k++) {
      a[k] = run_once(w->p, target, "1024");
      c[k] = caf_once(caf, w->p, target, 0);
      c1[k] = caf_once(caf, w->p, target, 1);
    }
    double ma = median(a, reps), mc = median(c, reps), mc1 = median(c1, reps);
    printf("| %-10s | %12.0f | %12.0f | %5.2f | %12.0f | %5.2f | %s |\n", program_names[w->p], ma,
           mc, ma / mc, mc1, ma / mc1, w->unit);
    fflush(stdout);
  }
}

static void usage(const char *argv0) {
  fprintf(stderr, "usage: %s [--quick] [--caf PATH] [--only PROGRAM] [--loops N]\n", argv0);
  exit(2);
}

int main(int argc, char **argv) {
  bool quick = false;
  const char *caf = NULL, *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (strcmp(argv[i], "--caf") == 0 && i + 1 < argc)
      caf = argv[++i];
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (strcmp(argv[i], "--loops") == 0 && i + 1 < argc)
      loops_arg = argv[++i];
    else
      usage(argv[0]);
  }
  int reps = quick ? 3 : 7;
  uint64_t scale = quick ? 10 : 1;
  if (caf != NULL) {
    against_caf(caf, only, reps, scale);
    return 0;
  }
  if (strcmp(loops_arg, "1") != 0) {
    printf("# bench-savina --loops %s: median of %d runs each; %s loops vs one\n", loops_arg, reps,
           loops_arg);
    printf("| program | %s loops /s | 1 loop /s | ratio | unit |\n|---|---|---|---|---|\n",
           loops_arg);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
      if (only == NULL || strcmp(only, program_names[rows[i].p]) == 0)
        compare_loops(program_names[rows[i].p], rows[i].unit, rows[i].p, rows[i].target / scale,
                      reps);
    return 0;
  }
  printf("# bench-savina: one loop; median of %d runs each; in-turn hops (1024) vs none (0)\n",
         reps);
  printf("| program | hops in turn /s | hops 0 /s | ratio | unit |\n|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (only == NULL || strcmp(only, program_names[rows[i].p]) == 0)
      compare(program_names[rows[i].p], rows[i].unit, rows[i].p, rows[i].target / scale, reps);
  return 0;
}
