/* bench-savina: programs of the Savina actor benchmark suite on accel's runtime (one loop),
 * each run with the loop's in-turn hops (ACCEL_TURN_HOPS, default) and without them
 * (ACCEL_TURN_HOPS=0: a woken actor waits for the next turn, one loop iteration per hop, as
 * before), in the same process; the ratio is the gain.
 *   pingpong    two actors pass one message back and forth (round trips/s);
 *   threadring  503 actors in a ring pass one token around (hops/s);
 *   counting    one actor sends N messages to another, which counts them (messages/s).
 * Every program checks its own result (the count a run must reach) and fails otherwise.
 * Usage: bench-savina [--quick] */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* ---- driving one program ---- */

typedef enum { PINGPONG, THREADRING, COUNTING } program;

#define RING 503

static void spawn(accel_runtime *rt, const accel_behavior *b, run *r, accel_ref *out) {
  accel_spawn_opts o = {.mailbox_capacity = 1024};
  int rc = accel_spawn(rt, NULL, b, r, &o, out);
  if (rc != 0)
    die("accel_spawn", rc);
}

static void tell_ref(accel_runtime *rt, accel_ref to, uint32_t type, uint64_t arg, accel_ref *ref) {
  int rc = accel_tell(rt, to, &(accel_msg){.type = type, .arg = arg, .data = ref});
  if (rc != 0)
    die("accel_tell", rc);
}

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
  }
}

/* The message that starts the run (from this thread: the loop runs). */
static void kick(accel_runtime *rt, program p, run *r, accel_ref *refs) {
  if (p == PINGPONG)
    tell_ref(rt, refs[0], MSG_TOKEN, 0, NULL);
  else if (p == THREADRING)
    tell_ref(rt, refs[0], MSG_TOKEN, r->target, NULL);
  else
    tell_ref(rt, refs[1], MSG_GO, 0, NULL);
}

/* One run in a fresh runtime; its rate in units per second. */
static double run_once(program p, uint64_t target, const char *hops) {
  setenv("ACCEL_TURN_HOPS", hops, 1);
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
  uint64_t reached = (uint64_t)(uintptr_t)accel_future_value(r.done);
  if (reached != target) {
    fprintf(stderr, "bench-savina: reached %llu of %llu\n", (unsigned long long)reached,
            (unsigned long long)target);
    exit(1);
  }
  accel_future_release(r.done);
  accel_runtime_stop(rt);
  accel_runtime_join(rt);
  accel_runtime_destroy(rt);
  return (double)target / s;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of `reps` runs, alternating the two modes so that drift hits both alike. */
static void compare(const char *name, const char *unit, program p, uint64_t target, int reps) {
  double on[9], off[9];
  for (int i = 0; i < reps; i++) {
    off[i] = run_once(p, target, "0");
    on[i] = run_once(p, target, "1024");
  }
  qsort(on, (size_t)reps, sizeof on[0], cmp);
  qsort(off, (size_t)reps, sizeof off[0], cmp);
  double a = on[reps / 2], b = off[reps / 2];
  printf("| %-10s | %12.0f | %12.0f | %5.2f | %s |\n", name, a, b, a / b, unit);
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  if (argc > 1 && !quick) {
    fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
    return 2;
  }
  int reps = quick ? 3 : 7;
  uint64_t scale = quick ? 10 : 1;
  printf("# bench-savina: one loop; median of %d runs each; in-turn hops (1024) vs none (0)\n",
         reps);
  printf("| program | hops in turn /s | hops 0 /s | ratio | unit |\n|---|---|---|---|---|\n");
  compare("pingpong", "round trips", PINGPONG, 200000 / scale, reps);
  compare("threadring", "hops", THREADRING, 2000000 / scale, reps);
  compare("counting", "messages", COUNTING, 4000000 / scale, reps);
  return 0;
}
