/* accel — benchmarks of the actor runtime.
 *
 * Every figure is compared with a floor measured in the same run, because the machines are
 * shared and noisy (docs/PERFORMANCE.md, docs/DECISIONS.md "Measured floors"):
 *
 *   1. same-loop tell -> receive throughput: a producer actor tells a consumer actor on the
 *      same loop M messages, window flow control (the consumer acks every capacity/4 messages,
 *      the producer never has more than `capacity` unacked messages out, so the mailbox never
 *      refuses a send). Target: >= 5e6 msg/s. Context floor: the same window pattern through a
 *      plain single-threaded ring buffer with an indirect call per message.
 *   2. cross-thread ask round trip: a non-loop thread does accel_ask + accel_future_wait to an
 *      actor that replies at once. Floor: a thread does uv_async_send to a loop on another
 *      thread whose async callback signals a mutex/condvar back. Target: <= 1.3x the floor.
 *
 * Each benchmark runs `warmup` discarded repetitions, then `reps` measured ones; runtime and
 * floor repetitions alternate so that noise hits both alike. The table reports medians.
 *
 * Usage: bench-runtime [--json] [--quick] [--reps N] [--warmup N] [--messages N] [--iters N]
 *                      [--mailbox N] [--throughput N] [--only tell|ask] [--pin split|same]
 * The same knobs can be set from the environment: ACCEL_BENCH_REPS, ACCEL_BENCH_WARMUP,
 * ACCEL_BENCH_MESSAGES, ACCEL_BENCH_ITERS, ACCEL_BENCH_MAILBOX, ACCEL_BENCH_THROUGHPUT,
 * ACCEL_BENCH_QUICK=1, ACCEL_BENCH_JSON=1, ACCEL_BENCH_PIN=split|same (argv wins).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "accel/runtime.h"

#define TARGET_TELL_MSGS_PER_S 5e6
#define TARGET_ASK_RATIO 1.3

/* ----------------------------------------------------------------------------------------
 * Options */

enum { PIN_NONE = 0, PIN_SPLIT, PIN_SAME };
static const char *const pin_names[] = {"none", "split", "same"};

typedef struct bench_opts {
  int json;
  int run_tell, run_ask; /* --only tell|ask: run one benchmark (for profiling) */
  int pin;               /* benchmark 2's threads: PIN_NONE, PIN_SPLIT or PIN_SAME */
  uint32_t reps;
  uint32_t warmup;
  uint64_t messages;   /* per repetition of benchmark 1 */
  uint32_t iters;      /* round trips per repetition of benchmark 2 */
  uint32_t mailbox;    /* consumer mailbox capacity (power of two) */
  uint32_t throughput; /* messages per turn; 0: runtime default */
} bench_opts;

static void die(const char *what, int err) {
  fprintf(stderr, "bench-runtime: %s: %s (%d)\n", what, accel_strerror(err), err);
  exit(2);
}

static uint64_t parse_u64(const char *name, const char *s) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-') {
    fprintf(stderr, "bench-runtime: %s wants a non-negative integer, got '%s'\n", name, s);
    exit(2);
  }
  return (uint64_t)v;
}

static uint32_t round_pow2(uint64_t v) {
  uint32_t p = 4;
  while (p < v && p < (1u << 30))
    p <<= 1;
  return p;
}

static void opts_quick(bench_opts *o) {
  o->reps = 3;
  o->warmup = 1;
  o->messages = 500000;
  o->iters = 5000;
}

static void opts_defaults(bench_opts *o) {
  memset(o, 0, sizeof *o);
  o->run_tell = o->run_ask = 1;
  o->reps = 7;
  o->warmup = 1;
  o->messages = 2000000;
  o->iters = 20000;
  o->mailbox = 1024; /* the runtime's default */
}

/* One named knob: its env variable, its flag and where it goes. */
typedef struct knob {
  const char *flag;
  const char *env;
  uint64_t *u64;
  uint32_t *u32;
} knob;

static void knob_set(const knob *k, const char *name, const char *val) {
  uint64_t v = parse_u64(name, val);
  if (k->u64)
    *k->u64 = v;
  else
    *k->u32 = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static void usage(void) {
  fprintf(stderr, "usage: bench-runtime [--json] [--quick] [--reps N] [--warmup N] "
                  "[--messages N] [--iters N]\n"
                  "                     [--mailbox N] [--throughput N] [--only tell|ask] "
                  "[--pin split|same]\n");
}

static int parse_pin(const char *s) {
  for (int k = 0; k < 3; k++)
    if (strcmp(s, pin_names[k]) == 0)
      return k;
  fprintf(stderr, "bench-runtime: --pin wants none, split or same, got '%s'\n", s);
  exit(2);
}

static void parse_only(bench_opts *o, const char *s) {
  o->run_tell = strcmp(s, "tell") == 0;
  o->run_ask = strcmp(s, "ask") == 0;
  if (!o->run_tell && !o->run_ask) {
    usage();
    exit(2);
  }
}

static int env_flag(const char *name) {
  const char *v = getenv(name);
  return v && strcmp(v, "0") != 0;
}

/* The numeric knobs: flag, environment variable, destination. */
#define BENCH_KNOBS(o)                                                                             \
  {                                                                                                \
    {"--reps", "ACCEL_BENCH_REPS", NULL, &(o)->reps},                                              \
        {"--warmup", "ACCEL_BENCH_WARMUP", NULL, &(o)->warmup},                                    \
        {"--messages", "ACCEL_BENCH_MESSAGES", &(o)->messages, NULL},                              \
        {"--iters", "ACCEL_BENCH_ITERS", NULL, &(o)->iters},                                       \
        {"--mailbox", "ACCEL_BENCH_MAILBOX", NULL, &(o)->mailbox},                                 \
        {"--throughput", "ACCEL_BENCH_THROUGHPUT", NULL, &(o)->throughput},                        \
  }

/* Sizes first (--quick or ACCEL_BENCH_QUICK), then the environment, then the other flags. */
static void opts_from_env(bench_opts *o, int argc, char **argv) {
  const knob knobs[] = BENCH_KNOBS(o);
  int quick = env_flag("ACCEL_BENCH_QUICK");
  for (int i = 1; i < argc; i++)
    quick |= strcmp(argv[i], "--quick") == 0;
  if (quick)
    opts_quick(o);
  o->json = env_flag("ACCEL_BENCH_JSON");
  if (getenv("ACCEL_BENCH_PIN"))
    o->pin = parse_pin(getenv("ACCEL_BENCH_PIN"));
  for (size_t k = 0; k < sizeof knobs / sizeof knobs[0]; k++)
    if (getenv(knobs[k].env))
      knob_set(&knobs[k], knobs[k].env, getenv(knobs[k].env));
}

/* Handles argv[i] (and its value); returns how many arguments it used. */
static int opts_flag(bench_opts *o, const char *flag, const char *value) {
  const knob knobs[] = BENCH_KNOBS(o);
  if (strcmp(flag, "--quick") == 0)
    return 1;
  if (strcmp(flag, "--json") == 0) {
    o->json = 1;
    return 1;
  }
  if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
    usage();
    exit(0);
  }
  if (value == NULL) {
    usage();
    exit(2);
  }
  if (strcmp(flag, "--pin") == 0)
    o->pin = parse_pin(value);
  else if (strcmp(flag, "--only") == 0)
    parse_only(o, value);
  else {
    size_t k = 0;
    while (k < sizeof knobs / sizeof knobs[0] && strcmp(flag, knobs[k].flag) != 0)
      k++;
    if (k == sizeof knobs / sizeof knobs[0]) {
      usage();
      exit(2);
    }
    knob_set(&knobs[k], flag, value);
  }
  return 2;
}

static void opts_parse(bench_opts *o, int argc, char **argv) {
  opts_from_env(o, argc, argv);
  for (int i = 1; i < argc;)
    i += opts_flag(o, argv[i], i + 1 < argc ? argv[i + 1] : NULL);
  if (o->reps == 0 || o->messages == 0 || o->iters == 0) {
    fprintf(stderr, "bench-runtime: reps, messages and iters must be at least 1\n");
    exit(2);
  }
  o->mailbox = round_pow2(o->mailbox);
}

/* ----------------------------------------------------------------------------------------
 * Time and statistics */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time of the calling thread: unlike wall time it does not count the time the thread
 * spent preempted by other tenants of a shared machine. */
static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A throughput measured both ways, in messages per second. */
typedef struct rate {
  double wall; /* messages / elapsed wall time */
  double cpu;  /* messages / CPU time of the thread that did all the work */
} rate;

static rate rate_of(uint64_t messages, uint64_t wall_ns, uint64_t cpu_ns) {
  rate r = {(double)messages * 1e9 / (double)(wall_ns ? wall_ns : 1),
            (double)messages * 1e9 / (double)(cpu_ns ? cpu_ns : 1)};
  return r;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Sorts in place; the value at fraction q (0..1) of the sorted array. */
static double quantile_d(double *v, size_t n, double q) {
  qsort(v, n, sizeof *v, cmp_double);
  size_t i = (size_t)(q * (double)(n - 1) + 0.5);
  return v[i];
}

static double quantile_u64(uint64_t *v, size_t n, double q) {
  qsort(v, n, sizeof *v, cmp_u64);
  size_t i = (size_t)(q * (double)(n - 1) + 0.5);
  return (double)v[i];
}

/* The median, min and max of one series of repetitions. */
typedef struct summary {
  double median, min, max;
} summary;

static summary summarize(const double *v, size_t n) {
  double *tmp = malloc(n * sizeof *tmp);
  if (!tmp)
    die("malloc", ACCEL_ENOMEM);
  memcpy(tmp, v, n * sizeof *tmp);
  summary s = {quantile_d(tmp, n, 0.5), tmp[0], tmp[n - 1]};
  free(tmp);
  return s;
}

/* ----------------------------------------------------------------------------------------
 * CPU pinning (benchmark 2 only). Unpinned, the scheduler of a small machine may put the
 * asking thread and the loop thread on one CPU or on two, and a round trip costs about twice
 * as much across CPUs; --pin makes the case explicit. split: the asking thread on the first
 * CPU of the process's affinity mask, both loop threads on the second. same: every thread on
 * the first. Loop threads inherit the mask of the thread that creates them: pin_loop_side()
 * before creating one, pin_client_side() after. Unpinned, these do nothing. */

static int pin_cpus[2] = {-1, -1};

static void pin_init(int mode) {
  cpu_set_t set;
  int n = 0;
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return;
  for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
    if (CPU_ISSET(c, &set))
      pin_cpus[n++] = c;
  if (mode == PIN_SAME) {
    pin_cpus[1] = pin_cpus[0];
  } else if (n < 2) {
    fprintf(stderr, "bench-runtime: --pin split needs two CPUs; running unpinned\n");
    pin_cpus[0] = pin_cpus[1] = -1;
  }
}

static void pin_self(int which) {
  cpu_set_t set;
  if (pin_cpus[which] < 0)
    return;
  CPU_ZERO(&set);
  CPU_SET(pin_cpus[which], &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
    fprintf(stderr, "bench-runtime: pinning to CPU %d failed\n", pin_cpus[which]);
}

static void pin_loop_side(void) {
  pin_self(1);
}

static void pin_client_side(void) {
  pin_self(0);
}

/* ----------------------------------------------------------------------------------------
 * 1. Same-loop tell -> receive throughput */

enum {
  MSG_GO = ACCEL_MSG_USER + 1, /* to the producer, an ask: arg = messages to send */
  MSG_DATA,                    /* producer -> consumer, arg = sequence number */
  MSG_ACK,                     /* consumer -> producer, arg = messages received so far */
  MSG_ECHO                     /* benchmark 2: reply at once */
};

typedef struct tput_ctx {
  accel_ref producer, consumer;
  uint64_t total;     /* messages in this repetition */
  uint64_t window;    /* most unacked messages the producer has out */
  uint64_t ack_every; /* the consumer acks every this many messages */
  uint64_t sent, acked, received;
  uint64_t out_of_order, refused, send_errors;
  uint64_t t_start, t_end;     /* wall clock, on the loop thread */
  uint64_t cpu_start, cpu_end; /* the loop thread's CPU time */
  accel_future *done;          /* the GO ask, completed by the consumer after the last message */
} tput_ctx;

typedef struct ctx_state {
  tput_ctx *ctx;
} ctx_state;

static int ctx_start(accel_actor *self, void *state, void *arg) {
  (void)self;
  ((ctx_state *)state)->ctx = arg;
  return 0;
}

/* Sends DATA until the window is full or everything is out. A refusal (which the window
 * should prevent) stops the burst; the next ack resumes it. */
static void producer_pump(accel_runtime *rt, tput_ctx *c) {
  accel_msg m = {.type = MSG_DATA};
  while (c->sent < c->total && c->sent - c->acked < c->window) {
    m.arg = c->sent;
    int rc = accel_tell(rt, c->consumer, &m);
    if (rc == ACCEL_EBUSY) {
      c->refused++;
      return;
    }
    if (rc != 0) {
      c->send_errors++;
      return;
    }
    c->sent++;
  }
}

static int producer_receive(accel_actor *self, void *state, accel_msg *msg) {
  tput_ctx *c = ((ctx_state *)state)->ctx;
  if (msg->type == MSG_GO) {
    c->done = accel_msg_take_reply(msg);
    c->total = msg->arg;
    c->sent = c->acked = c->received = 0;
    c->t_start = now_ns();
    c->cpu_start = thread_cpu_ns();
  } else if (msg->type == MSG_ACK) {
    c->acked = msg->arg;
  }
  producer_pump(accel_actor_runtime(self), c);
  return 0;
}

static void consumer_finish(tput_ctx *c) {
  c->t_end = now_ns();
  c->cpu_end = thread_cpu_ns();
  accel_future_complete(c->done, 0, NULL, NULL);
  accel_future_release(c->done);
  c->done = NULL;
}

static int consumer_receive(accel_actor *self, void *state, accel_msg *msg) {
  tput_ctx *c = ((ctx_state *)state)->ctx;
  if (msg->arg != c->received)
    c->out_of_order++;
  c->received++;
  if (c->received == c->total) {
    consumer_finish(c);
  } else if (c->received % c->ack_every == 0) {
    accel_msg ack = {.type = MSG_ACK, .arg = c->received};
    if (accel_tell(accel_actor_runtime(self), c->producer, &ack) != 0)
      c->send_errors++;
  }
  return 0;
}

static const accel_behavior producer_behavior = {
    .name = "bench-producer",
    .state_size = sizeof(ctx_state),
    .start = ctx_start,
    .receive = producer_receive,
};

static const accel_behavior consumer_behavior = {
    .name = "bench-consumer",
    .state_size = sizeof(ctx_state),
    .start = ctx_start,
    .receive = consumer_receive,
};

typedef struct tput_bench {
  accel_runtime *rt;
  tput_ctx ctx;
} tput_bench;

static void tput_setup(tput_bench *b, const bench_opts *o) {
  accel_spawn_opts so = {.mailbox_capacity = o->mailbox, .throughput = o->throughput};
  int rc = accel_runtime_create(&b->rt, NULL);
  if (rc)
    die("accel_runtime_create", rc);
  memset(&b->ctx, 0, sizeof b->ctx);
  b->ctx.window = o->mailbox;
  b->ctx.ack_every = o->mailbox / 4;
  rc = accel_spawn(b->rt, NULL, &consumer_behavior, &b->ctx, &so, &b->ctx.consumer);
  if (rc)
    die("spawn consumer", rc);
  /* The producer's mailbox holds at most window/ack_every = 4 acks (plus GO). */
  rc = accel_spawn(b->rt, NULL, &producer_behavior, &b->ctx, &so, &b->ctx.producer);
  if (rc)
    die("spawn producer", rc);
  rc = accel_runtime_start(b->rt); /* never pinned: the raw ring runs on the main thread */
  if (rc)
    die("accel_runtime_start", rc);
}

/* One repetition: messages per second, measured on the loop from GO to the last receive. */
static rate tput_run(tput_bench *b, uint64_t messages) {
  accel_future *f = NULL;
  accel_msg go = {.type = MSG_GO, .arg = messages};
  int rc = accel_ask(b->rt, b->ctx.producer, &go, &f);
  if (rc)
    die("ask producer", rc);
  rc = accel_future_wait(f, 120000);
  if (rc)
    die("wait for the throughput run", rc);
  accel_future_release(f);
  if (b->ctx.out_of_order || b->ctx.send_errors || b->ctx.received != messages) {
    fprintf(stderr,
            "bench-runtime: throughput run broken: received %" PRIu64 "/%" PRIu64
            ", out of order %" PRIu64 ", send errors %" PRIu64 "\n",
            b->ctx.received, messages, b->ctx.out_of_order, b->ctx.send_errors);
    exit(3);
  }
  return rate_of(messages, b->ctx.t_end - b->ctx.t_start, b->ctx.cpu_end - b->ctx.cpu_start);
}

static void runtime_teardown(accel_runtime *rt) {
  accel_runtime_stop(rt);
  int rc = accel_runtime_join(rt);
  if (rc)
    die("accel_runtime_join", rc);
  accel_runtime_destroy(rt);
}

/* The context floor: the same window/ack pattern, one thread, a plain power-of-two ring of
 * accel_msg with release/acquire indices (what an SPSC mailbox costs at the least) and one
 * indirect call per message, as a receive would be. No scheduling, no refs, no wake-ups. */
typedef struct raw_ring {
  accel_msg *slots;
  uint64_t mask;
  _Atomic uint64_t head, tail;
} raw_ring;

typedef struct raw_consumer {
  uint64_t received, out_of_order;
} raw_consumer;

static int raw_receive(raw_consumer *c, const accel_msg *m) {
  if (m->arg != c->received)
    c->out_of_order++;
  c->received++;
  return 0;
}

/* volatile: keeps the call indirect, like the runtime's call through the behaviour table. */
static int (*volatile raw_receive_fn)(raw_consumer *, const accel_msg *) = raw_receive;

static int raw_push(raw_ring *r, const accel_msg *m) {
  uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
  if (t - atomic_load_explicit(&r->head, memory_order_acquire) > r->mask)
    return ACCEL_EBUSY;
  r->slots[t & r->mask] = *m;
  atomic_store_explicit(&r->tail, t + 1, memory_order_release);
  return 0;
}

static int raw_pop(raw_ring *r, accel_msg *m) {
  uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  if (h == atomic_load_explicit(&r->tail, memory_order_acquire))
    return ACCEL_EAGAIN;
  *m = r->slots[h & r->mask];
  atomic_store_explicit(&r->head, h + 1, memory_order_release);
  return 0;
}

static rate raw_ring_run(uint64_t messages, uint32_t capacity) {
  raw_ring r = {.mask = capacity - 1};
  raw_consumer c = {0};
  accel_msg m = {.type = MSG_DATA}, got;
  uint64_t sent = 0;
  r.slots = calloc(capacity, sizeof *r.slots);
  if (!r.slots)
    die("calloc", ACCEL_ENOMEM);
  uint64_t t0 = now_ns(), cpu0 = thread_cpu_ns();
  while (c.received < messages) {
    while (sent < messages && sent - c.received < capacity) { /* the producer's turn */
      m.arg = sent;
      if (raw_push(&r, &m) != 0)
        break;
      sent++;
    }
    while (raw_pop(&r, &got) == 0) /* the consumer's turn */
      raw_receive_fn(&c, &got);
  }
  uint64_t t1 = now_ns(), cpu1 = thread_cpu_ns();
  free(r.slots);
  if (c.out_of_order)
    die("raw ring out of order", ACCEL_EFAILED);
  return rate_of(messages, t1 - t0, cpu1 - cpu0);
}

/* ----------------------------------------------------------------------------------------
 * 2. Cross-thread ask round trip */

static int echo_receive(accel_actor *self, void *state, accel_msg *msg) {
  (void)self;
  (void)state;
  return accel_reply(msg, 0, NULL, NULL) == 0 ? 0 : ACCEL_EFAILED;
}

static const accel_behavior echo_behavior = {
    .name = "bench-echo",
    .receive = echo_receive,
};

typedef struct ask_bench {
  accel_runtime *rt;
  accel_ref echo;
} ask_bench;

static void ask_setup(ask_bench *b) {
  int rc = accel_runtime_create(&b->rt, NULL);
  if (rc)
    die("accel_runtime_create", rc);
  rc = accel_spawn(b->rt, NULL, &echo_behavior, NULL, NULL, &b->echo);
  if (rc)
    die("spawn echo", rc);
  pin_loop_side();
  rc = accel_runtime_start(b->rt);
  if (rc)
    die("accel_runtime_start", rc);
  pin_client_side();
}

/* One repetition: iters round trips from this (non-loop) thread; samples[i] in ns. */
static void ask_run(void *ctx, uint64_t *samples, uint32_t iters) {
  ask_bench *b = ctx;
  accel_msg m = {.type = MSG_ECHO};
  for (uint32_t i = 0; i < iters; i++) {
    accel_future *f = NULL;
    m.arg = i;
    uint64_t t0 = now_ns();
    int rc = accel_ask(b->rt, b->echo, &m, &f);
    if (rc)
      die("ask echo", rc);
    rc = accel_future_wait(f, 10000);
    uint64_t t1 = now_ns();
    if (rc)
      die("wait echo", rc);
    accel_future_release(f);
    samples[i] = t1 - t0;
  }
}

/* The raw libuv floor: a loop on its own thread; the client does uv_async_send and waits on a
 * condvar that the async callback signals. What any cross-thread request/reply over libuv
 * costs at the least: one wake-up of the loop and one of the waiting thread. */
typedef struct uv_floor {
  uv_loop_t loop;
  uv_async_t ping, quit;
  uv_thread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t requests, replies; /* under mu */
} uv_floor;

static void floor_ping_cb(uv_async_t *h) {
  uv_floor *fl = h->data;
  pthread_mutex_lock(&fl->mu);
  if (fl->replies != fl->requests) {
    fl->replies = fl->requests;
    pthread_cond_signal(&fl->cv);
  }
  pthread_mutex_unlock(&fl->mu);
}

static void floor_close_cb(uv_handle_t *h) {
  (void)h;
}

static void floor_quit_cb(uv_async_t *h) {
  uv_floor *fl = h->data;
  uv_close((uv_handle_t *)&fl->ping, floor_close_cb);
  uv_close((uv_handle_t *)&fl->quit, floor_close_cb);
}

static void floor_thread(void *arg) {
  uv_floor *fl = arg;
  uv_run(&fl->loop, UV_RUN_DEFAULT);
}

static void floor_setup(uv_floor *fl) {
  memset(fl, 0, sizeof *fl);
  if (uv_loop_init(&fl->loop) || uv_async_init(&fl->loop, &fl->ping, floor_ping_cb) ||
      uv_async_init(&fl->loop, &fl->quit, floor_quit_cb))
    die("libuv floor init", ACCEL_ESYS);
  fl->ping.data = fl->quit.data = fl;
  pthread_mutex_init(&fl->mu, NULL);
  pthread_cond_init(&fl->cv, NULL);
  pin_loop_side();
  if (uv_thread_create(&fl->thread, floor_thread, fl))
    die("libuv floor thread", ACCEL_ESYS);
  pin_client_side();
}

static void floor_run(void *ctx, uint64_t *samples, uint32_t iters) {
  uv_floor *fl = ctx;
  for (uint32_t i = 0; i < iters; i++) {
    uint64_t t0 = now_ns();
    pthread_mutex_lock(&fl->mu);
    uint64_t want = ++fl->requests;
    pthread_mutex_unlock(&fl->mu);
    uv_async_send(&fl->ping);
    pthread_mutex_lock(&fl->mu);
    while (fl->replies != want)
      pthread_cond_wait(&fl->cv, &fl->mu);
    pthread_mutex_unlock(&fl->mu);
    samples[i] = now_ns() - t0;
  }
}

static void floor_teardown(uv_floor *fl) {
  uv_async_send(&fl->quit);
  uv_thread_join(&fl->thread);
  uv_loop_close(&fl->loop);
  pthread_mutex_destroy(&fl->mu);
  pthread_cond_destroy(&fl->cv);
}

/* ----------------------------------------------------------------------------------------
 * Driver */

typedef struct results {
  summary tell, raw, tell_cpu, raw_cpu, ask_us, floor_us;
  double ask_p99_us, floor_p99_us; /* medians over reps of each rep's p99 */
  double ask_cpu_us, floor_cpu_us; /* medians over reps of process CPU time per round trip */
  accel_runtime_stats tell_stats;
} results;

/* Four series per repetition: {runtime, raw ring} x {wall, CPU}. */
typedef struct tell_series {
  double *v[4];
} tell_series;

static void bench_tell(const bench_opts *o, results *res) {
  tput_bench b;
  tell_series ser;
  for (int k = 0; k < 4; k++)
    if (!(ser.v[k] = calloc(o->reps, sizeof(double))))
      die("calloc", ACCEL_ENOMEM);
  tput_setup(&b, o);
  for (uint32_t i = 0; i < o->warmup; i++) {
    tput_run(&b, o->messages);
    raw_ring_run(o->messages, o->mailbox);
  }
  for (uint32_t i = 0; i < o->reps; i++) {
    rate t = tput_run(&b, o->messages), r = raw_ring_run(o->messages, o->mailbox);
    ser.v[0][i] = t.wall;
    ser.v[1][i] = t.cpu;
    ser.v[2][i] = r.wall;
    ser.v[3][i] = r.cpu;
  }
  accel_runtime_get_stats(b.rt, &res->tell_stats);
  res->tell_stats.busy_refusals += b.ctx.refused;
  runtime_teardown(b.rt);
  res->tell = summarize(ser.v[0], o->reps);
  res->tell_cpu = summarize(ser.v[1], o->reps);
  res->raw = summarize(ser.v[2], o->reps);
  res->raw_cpu = summarize(ser.v[3], o->reps);
  for (int k = 0; k < 4; k++)
    free(ser.v[k]);
}

/* One side of benchmark 2 (the runtime or its floor): per repetition, the median and p99
 * round trip and the CPU time the whole process used per round trip (both threads: it shows
 * a loop that spins instead of sleeping), all in microseconds. */
typedef struct rtt_series {
  void (*run)(void *ctx, uint64_t *samples, uint32_t iters);
  void *ctx;
  double *med, *p99, *cpu;
} rtt_series;

static uint64_t process_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void rtt_alloc(rtt_series *s, uint32_t reps) {
  s->med = calloc(reps, sizeof(double));
  s->p99 = calloc(reps, sizeof(double));
  s->cpu = calloc(reps, sizeof(double));
  if (!s->med || !s->p99 || !s->cpu)
    die("calloc", ACCEL_ENOMEM);
}

static void rtt_free(rtt_series *s) {
  free(s->med);
  free(s->p99);
  free(s->cpu);
}

/* Runs one repetition; stores its figures at index i unless i < 0 (a warm-up). */
static void rtt_rep(rtt_series *s, uint64_t *samples, uint32_t iters, long i) {
  uint64_t cpu0 = process_cpu_ns();
  s->run(s->ctx, samples, iters);
  uint64_t cpu1 = process_cpu_ns();
  if (i < 0)
    return;
  s->med[i] = quantile_u64(samples, iters, 0.5) / 1e3;
  s->p99[i] = quantile_u64(samples, iters, 0.99) / 1e3;
  s->cpu[i] = (double)(cpu1 - cpu0) / iters / 1e3;
}

static void bench_ask(const bench_opts *o, results *res) {
  ask_bench b;
  uv_floor fl;
  rtt_series ask = {.run = ask_run, .ctx = &b}, flo = {.run = floor_run, .ctx = &fl};
  uint64_t *samples = calloc(o->iters, sizeof *samples);
  if (!samples)
    die("calloc", ACCEL_ENOMEM);
  rtt_alloc(&ask, o->reps);
  rtt_alloc(&flo, o->reps);
  ask_setup(&b);
  floor_setup(&fl);
  for (uint32_t i = 0; i < o->warmup; i++) {
    rtt_rep(&ask, samples, o->iters, -1);
    rtt_rep(&flo, samples, o->iters, -1);
  }
  for (uint32_t i = 0; i < o->reps; i++) {
    rtt_rep(&ask, samples, o->iters, (long)i);
    rtt_rep(&flo, samples, o->iters, (long)i);
  }
  floor_teardown(&fl);
  runtime_teardown(b.rt);
  res->ask_us = summarize(ask.med, o->reps);
  res->floor_us = summarize(flo.med, o->reps);
  res->ask_p99_us = summarize(ask.p99, o->reps).median;
  res->floor_p99_us = summarize(flo.p99, o->reps).median;
  res->ask_cpu_us = summarize(ask.cpu, o->reps).median;
  res->floor_cpu_us = summarize(flo.cpu, o->reps).median;
  rtt_free(&ask);
  rtt_free(&flo);
  free(samples);
}

static const char *verdict(int ok) {
  return ok ? "met" : "MISSED";
}

static void print_rate_row(const char *name, const summary *x) {
  printf("%-34s %10.2f M %10.2f M %10.2f M  msg/s\n", name, x->median / 1e6, x->min / 1e6,
         x->max / 1e6);
}

static void print_tell_table(const results *r) {
  double wall = r->tell.median / TARGET_TELL_MSGS_PER_S;
  double cpu = r->tell_cpu.median / TARGET_TELL_MSGS_PER_S;
  print_rate_row("same-loop tell->receive, wall", &r->tell);
  print_rate_row("same-loop tell->receive, loop CPU", &r->tell_cpu);
  print_rate_row("  raw ring push/pop, wall", &r->raw);
  print_rate_row("  raw ring push/pop, CPU", &r->raw_cpu);
  printf("  -> tell / 5e6 msg/s, wall        %8.2fx (target >= 1.00x): %s\n", wall,
         verdict(wall >= 1.0));
  printf("  -> tell / 5e6 msg/s, loop CPU    %8.2fx (target >= 1.00x): %s\n", cpu,
         verdict(cpu >= 1.0));
  printf("  -> tell / raw ring, wall (CPU)   %8.3fx (%.3fx) (context only)\n",
         r->tell.median / r->raw.median, r->tell_cpu.median / r->raw_cpu.median);
  printf("  runtime stats: received %" PRIu64 ", busy refusals %" PRIu64 ", dead letters %" PRIu64
         "\n",
         r->tell_stats.messages_received, r->tell_stats.busy_refusals, r->tell_stats.dead_letters);
}

static void print_ask_table(const results *r) {
  double ratio = r->ask_us.median / r->floor_us.median;
  printf("%-34s %9.2f us %9.2f us %9.2f us  p99 %.2f us, CPU %.2f us/rt\n",
         "cross-thread ask round trip", r->ask_us.median, r->ask_us.min, r->ask_us.max,
         r->ask_p99_us, r->ask_cpu_us);
  printf("%-34s %9.2f us %9.2f us %9.2f us  p99 %.2f us, CPU %.2f us/rt\n",
         "  libuv async+condvar floor", r->floor_us.median, r->floor_us.min, r->floor_us.max,
         r->floor_p99_us, r->floor_cpu_us);
  printf("  -> ask / floor                   %8.2fx (target <= %.2fx): %s\n", ratio,
         TARGET_ASK_RATIO, verdict(ratio <= TARGET_ASK_RATIO));
}

static void print_table(const bench_opts *o, const results *r) {
  printf("accel runtime benchmarks: %u reps (+%u warm-up), medians; %" PRIu64
         " msgs/rep, %u round trips/rep, mailbox %u, throughput %u%s%s%s\n\n",
         o->reps, o->warmup, o->messages, o->iters, o->mailbox, o->throughput,
         o->throughput ? "" : " (default)", o->pin ? ", pin " : "",
         o->pin ? pin_names[o->pin] : "");
  printf("%-34s %12s %12s %12s\n", "benchmark", "median", "min", "max");
  if (o->run_tell)
    print_tell_table(r);
  if (o->run_ask)
    print_ask_table(r);
}

static void print_summary_json(const char *name, const summary *s, const char *unit) {
  printf("    \"%s\": {\"median\": %.6g, \"min\": %.6g, \"max\": %.6g, \"unit\": \"%s\"},\n", name,
         s->median, s->min, s->max, unit);
}

static const char *json_bool(int v) {
  return v ? "true" : "false";
}

static void print_tell_json(const results *r) {
  double wall = r->tell.median / TARGET_TELL_MSGS_PER_S;
  double cpu = r->tell_cpu.median / TARGET_TELL_MSGS_PER_S;
  print_summary_json("tell_same_loop", &r->tell, "msg/s");
  print_summary_json("tell_same_loop_cpu", &r->tell_cpu, "msg/s");
  print_summary_json("raw_ring", &r->raw, "msg/s");
  print_summary_json("raw_ring_cpu", &r->raw_cpu, "msg/s");
  printf("    \"tell_vs_target\": %.4f,\n    \"tell_target_met\": %s,\n", wall,
         json_bool(wall >= 1.0));
  printf("    \"tell_cpu_vs_target\": %.4f,\n    \"tell_cpu_target_met\": %s,\n", cpu,
         json_bool(cpu >= 1.0));
  printf("    \"tell_vs_raw_ring\": %.4f,\n", r->tell.median / r->raw.median);
  printf("    \"tell_cpu_vs_raw_ring_cpu\": %.4f,\n", r->tell_cpu.median / r->raw_cpu.median);
  printf("    \"tell_busy_refusals\": %" PRIu64 ",\n", r->tell_stats.busy_refusals);
}

static void print_ask_json(const results *r) {
  double ratio = r->ask_us.median / r->floor_us.median;
  print_summary_json("ask_round_trip", &r->ask_us, "us");
  print_summary_json("uv_async_condvar_floor", &r->floor_us, "us");
  printf("    \"ask_round_trip_p99_us\": %.6g,\n    \"uv_floor_p99_us\": %.6g,\n", r->ask_p99_us,
         r->floor_p99_us);
  printf("    \"ask_cpu_us_per_rt\": %.6g,\n    \"uv_floor_cpu_us_per_rt\": %.6g,\n", r->ask_cpu_us,
         r->floor_cpu_us);
  printf("    \"ask_vs_floor\": %.4f,\n    \"ask_target_met\": %s,\n", ratio,
         json_bool(ratio <= TARGET_ASK_RATIO));
}

static void print_json(const bench_opts *o, const results *r) {
  printf("{\n  \"options\": {\"reps\": %u, \"warmup\": %u, \"messages\": %" PRIu64
         ", \"iters\": %u, \"mailbox\": %u, \"throughput\": %u, \"pin\": \"%s\"},\n",
         o->reps, o->warmup, o->messages, o->iters, o->mailbox, o->throughput, pin_names[o->pin]);
  printf("  \"targets\": {\"tell_msgs_per_s\": %.0f, \"ask_vs_floor_max\": %.2f},\n",
         TARGET_TELL_MSGS_PER_S, TARGET_ASK_RATIO);
  printf("  \"results\": {\n");
  if (o->run_tell)
    print_tell_json(r);
  if (o->run_ask)
    print_ask_json(r);
  printf("    \"complete\": %s\n  }\n}\n", json_bool(o->run_tell && o->run_ask));
}

int main(int argc, char **argv) {
  bench_opts o;
  results r;
  memset(&r, 0, sizeof r);
  opts_defaults(&o);
  opts_parse(&o, argc, argv);
  if (o.pin)
    pin_init(o.pin);
  if (o.run_tell)
    bench_tell(&o, &r);
  if (o.run_ask)
    bench_ask(&o, &r);
  if (o.json)
    print_json(&o, &r);
  else
    print_table(&o, &r);
  return 0;
}
