/* supervised — a tour of accel's actor runtime, in one program you can copy.
 *
 * A supervisor actor (one-for-one: at most 3 restarts in 5 s, with a backoff) runs two worker
 * children. main() runs the loop on the runtime's own thread and, from its own thread:
 *   1. starts the runtime and asks the supervisor for its workers' refs;
 *   2. asks a worker for a sum and waits on the future;
 *   3. asks again and gets the answer in a `then` callback on the loop;
 *   4. asks again and polls the future;
 *   5. tells a worker to fail: the supervisor restarts it, the old ref goes stale, and the
 *      supervisor's accel_child() gives the new one;
 *   6. asks for a sum that is computed as blocking work on a worker thread (accel_work_submit);
 *   7. asks the supervisor for an alarm, which a runtime timer delivers;
 *   8. stops the runtime.
 * It checks every result and exits 0 only if all were as expected. Lines marked [loop] are
 * printed by actors on the loop thread; the others by main.
 *
 * Build: meson compile -C build supervised; run: build/examples/supervised
 * (ACCEL_LOG=info shows the runtime's own log lines too). */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/runtime.h"

/* ---- messages ------------------------------------------------------------------------- */

enum {
  MSG_SUM = ACCEL_MSG_USER, /* worker: arg = n; replies 1 + 2 + ... + n (a uint64_t) */
  MSG_SLOW_SUM,             /* worker: the same, computed as blocking work off the loop */
  MSG_SLOW_SUM_DONE,        /* worker: the blocking work finished (sent by the runtime) */
  MSG_FAIL,                 /* worker: fail on purpose */
  MSG_WHERE,                /* supervisor: arg = worker number; replies its current ref */
  MSG_ALARM,                /* supervisor: arg = delay in ms; replies when the timer fires */
  MSG_ALARM_RING            /* supervisor: the timer fired (sent by the runtime) */
};

static uint64_t sum_to(uint64_t n) {
  uint64_t sum = 0;
  for (uint64_t i = 1; i <= n; i++)
    sum += i;
  return sum;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Answers an ask with a copy of `value`, which the future then owns (and frees). A tell has
 * no future: nothing to do. An error goes back to the asker; the actor itself carries on. */
static int reply_copy(accel_msg *msg, const void *value, size_t size) {
  if (!msg->reply)
    return 0;
  void *copy = malloc(size);
  if (!copy) {
    accel_reply(msg, ACCEL_ENOMEM, NULL, NULL);
    return 0;
  }
  memcpy(copy, value, size);
  if (accel_reply(msg, 0, copy, free) < 0)
    free(copy);
  return 0;
}

/* ---- the worker ----------------------------------------------------------------------- */

typedef struct worker_conf {
  const char *name;
} worker_conf;

static worker_conf worker_confs[] = {{"worker-1"}, {"worker-2"}};
enum { NWORKERS = sizeof worker_confs / sizeof worker_confs[0] };

typedef struct worker {
  const worker_conf *conf;
} worker;

/* One blocking job: the ask's future travels with it, and is completed when the job is done
 * (or cancelled if the worker is gone by then). */
typedef struct sum_job {
  uint64_t n, result;
  accel_future *reply;
} sum_job;

static int sum_job_run(void *data) { /* on a worker thread: blocking is fine here */
  sum_job *job = data;
  sleep_ms(20); /* stands in for a blocking call: a file, a device, a socket */
  job->result = sum_to(job->n);
  return 0;
}

static void sum_job_cancel(void *data) { /* the worker stopped before the job came back */
  sum_job *job = data;
  accel_future_complete(job->reply, ACCEL_ECANCELED, NULL, NULL);
  accel_future_release(job->reply);
  free(job);
}

static int worker_slow_sum(accel_actor *self, accel_msg *msg) {
  sum_job *job = calloc(1, sizeof *job);
  if (!job) {
    accel_reply(msg, ACCEL_ENOMEM, NULL, NULL);
    return 0;
  }
  job->n = msg->arg;
  job->reply = accel_msg_take_reply(msg); /* we complete it later, when the work is done */
  if (!job->reply) {                      /* a tell: nobody waits for the answer */
    free(job);
    return 0;
  }
  int rc = accel_work_submit(self, sum_job_run, job, sum_job_cancel, MSG_SLOW_SUM_DONE);
  if (rc < 0) { /* the job never runs: answer now */
    accel_future_complete(job->reply, rc, NULL, NULL);
    accel_future_release(job->reply);
    free(job);
  }
  return 0;
}

static int worker_slow_sum_done(accel_msg *msg) {
  sum_job *job = msg->data;
  msg->data = NULL; /* ours now: the runtime must not drop it */
  uint64_t *value = malloc(sizeof *value);
  int status = (int)(int64_t)msg->arg; /* sum_job_run's return value */
  if (value)
    *value = job->result;
  else
    status = ACCEL_ENOMEM;
  accel_future_complete(job->reply, status, value, free);
  accel_future_release(job->reply);
  free(job);
  return 0;
}

static int worker_start(accel_actor *self, void *state, void *arg) {
  worker *w = state;
  w->conf = arg;
  accel_ref me = accel_self(self);
  printf("    [loop] %s started as ref {%" PRIu32 ", %" PRIu32 "}\n", w->conf->name, me.slot,
         me.gen);
  return 0;
}

static int worker_receive(accel_actor *self, void *state, accel_msg *msg) {
  worker *w = state;
  switch (msg->type) {
  case MSG_SUM: {
    uint64_t sum = sum_to(msg->arg);
    return reply_copy(msg, &sum, sizeof sum);
  }
  case MSG_SLOW_SUM:
    return worker_slow_sum(self, msg);
  case MSG_SLOW_SUM_DONE:
    return worker_slow_sum_done(msg);
  case MSG_FAIL:
    printf("    [loop] %s fails on purpose\n", w->conf->name);
    return ACCEL_EFAILED; /* a failure: the supervisor decides what happens next */
  default:                /* not ours: say so, but an unknown message is no failure */
    accel_reply(msg, ACCEL_ENOTSUP, NULL, NULL);
    return 0;
  }
}

static void worker_post_restart(accel_actor *self, void *state, int reason) {
  (void)self;
  worker *w = state;
  printf("    [loop] %s restarted after %s\n", w->conf->name, accel_err_name(reason));
}

static const accel_behavior worker_behavior = {
    .name = "worker",
    .state_size = sizeof(worker),
    .start = worker_start,
    .receive = worker_receive,
    .post_restart = worker_post_restart,
};

/* ---- the supervisor ------------------------------------------------------------------- */

typedef struct supervisor {
  accel_future *alarm; /* the pending MSG_ALARM ask, if any */
} supervisor;

static int supervisor_start(accel_actor *self, void *state, void *arg) {
  (void)state, (void)arg;
  accel_runtime *rt = accel_actor_runtime(self);
  for (int i = 0; i < NWORKERS; i++) {
    accel_spawn_opts opts = {.name = worker_confs[i].name, .mailbox_capacity = 64};
    int rc = accel_spawn(rt, self, &worker_behavior, &worker_confs[i], &opts, NULL);
    if (rc < 0)
      return rc;
  }
  return 0;
}

/* Refs change on restart; the supervisor always knows the current one by name. */
static int supervisor_where(accel_actor *self, accel_msg *msg) {
  if (msg->arg < 1 || msg->arg > NWORKERS) {
    accel_reply(msg, ACCEL_EINVAL, NULL, NULL);
    return 0;
  }
  accel_ref ref;
  int rc = accel_child(self, worker_confs[msg->arg - 1].name, &ref);
  if (rc < 0) { /* e.g. between two incarnations: pass the error on */
    accel_reply(msg, rc, NULL, NULL);
    return 0;
  }
  return reply_copy(msg, &ref, sizeof ref);
}

static int supervisor_alarm(accel_actor *self, supervisor *s, accel_msg *msg) {
  if (s->alarm) {
    accel_reply(msg, ACCEL_EBUSY, NULL, NULL);
    return 0;
  }
  uint64_t timer_id;
  int rc = accel_timer_start(self, msg->arg, 0, MSG_ALARM_RING, 0, &timer_id);
  if (rc < 0) {
    accel_reply(msg, rc, NULL, NULL);
    return 0;
  }
  s->alarm = accel_msg_take_reply(msg);
  return 0;
}

static void supervisor_ring(supervisor *s, int status) {
  if (!s->alarm)
    return;
  accel_future_complete(s->alarm, status, NULL, NULL);
  accel_future_release(s->alarm);
  s->alarm = NULL;
}

static int supervisor_receive(accel_actor *self, void *state, accel_msg *msg) {
  supervisor *s = state;
  switch (msg->type) {
  case MSG_WHERE:
    return supervisor_where(self, msg);
  case MSG_ALARM:
    return supervisor_alarm(self, s, msg);
  case MSG_ALARM_RING:
    supervisor_ring(s, 0);
    return 0;
  default:
    accel_reply(msg, ACCEL_ENOTSUP, NULL, NULL);
    return 0;
  }
}

static void supervisor_stop(accel_actor *self, void *state) {
  (void)self;
  supervisor_ring(state, ACCEL_ECANCELED); /* nobody is left to ring a pending alarm */
}

static const accel_behavior supervisor_behavior = {
    .name = "supervisor",
    .state_size = sizeof(supervisor),
    .start = supervisor_start,
    .receive = supervisor_receive,
    .stop = supervisor_stop,
};

static const accel_supervision supervision = {
    .strategy = ACCEL_ONE_FOR_ONE, /* a failed worker is restarted alone */
    .max_restarts = 3,             /* at most 3 restarts ... */
    .within_ms = 5000,             /* ... in 5 s, else the supervisor gives up and escalates */
    .backoff_initial_ms = 10,      /* wait 10 ms before a restart, doubling each time */
    .backoff_max_ms = 200,
    .on_limit = ACCEL_LIMIT_ESCALATE,
};

/* ---- main: the client side ------------------------------------------------------------ */

static int failures;

static void check(bool ok, const char *what) {
  printf("  %s  %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok)
    failures++;
}

static void step(int n, const char *title) {
  printf("\nstep %d: %s\n", n, title);
}

/* Asks and waits for the answer; returns the future's status, *out the future (or NULL). */
static int ask_wait(accel_runtime *rt, accel_ref to, uint32_t type, uint64_t arg,
                    accel_future **out) {
  accel_msg msg = {.type = type, .arg = arg};
  *out = NULL;
  int rc = accel_ask(rt, to, &msg, out);
  if (rc < 0)
    return rc;
  return accel_future_wait(*out, 5000);
}

/* Asks for a u64 and waits; returns the status. */
static int ask_u64(accel_runtime *rt, accel_ref to, uint32_t type, uint64_t arg, uint64_t *value) {
  accel_future *f;
  int rc = ask_wait(rt, to, type, arg, &f);
  if (rc == 0)
    *value = *(uint64_t *)accel_future_value(f);
  if (f)
    accel_future_release(f);
  return rc;
}

/* Asks the supervisor for worker `n`'s current ref. */
static int where(accel_runtime *rt, accel_ref sup, int n, accel_ref *ref) {
  accel_future *f;
  int rc = ask_wait(rt, sup, MSG_WHERE, (uint64_t)n, &f);
  if (rc == 0)
    *ref = *(accel_ref *)accel_future_value(f);
  if (f)
    accel_future_release(f);
  return rc;
}

static bool same_ref(accel_ref a, accel_ref b) {
  return a.slot == b.slot && a.gen == b.gen;
}

static void step_wait(accel_runtime *rt, accel_ref w1) {
  step(2, "ask worker-1 for 1 + ... + 100, wait on the future");
  uint64_t sum = 0;
  int rc = ask_u64(rt, w1, MSG_SUM, 100, &sum);
  printf("  worker-1 says %" PRIu64 " (%s)\n", sum, accel_err_name(rc));
  check(rc == 0 && sum == 5050, "sum(100) == 5050");
}

/* Runs on the loop thread when the ask completes; hands the result to main through a future
 * of our own (the promise side of the API). */
static void on_sum(accel_future *f, int status, void *arg) {
  accel_future *done = arg;
  printf("    [loop] then-callback: status %s\n", accel_err_name(status));
  uint64_t *value = NULL;
  if (status == 0) {
    value = malloc(sizeof *value);
    if (value)
      *value = *(uint64_t *)accel_future_value(f);
    else
      status = ACCEL_ENOMEM;
  }
  if (accel_future_complete(done, status, value, free) < 0)
    free(value);
}

static void step_then(accel_runtime *rt, accel_ref w2) {
  step(3, "ask worker-2 for 1 + ... + 1000, answer in a then-callback");
  accel_future *done = NULL, *f = NULL;
  accel_msg msg = {.type = MSG_SUM, .arg = 1000};
  int rc = accel_future_create(rt, &done);
  if (rc == 0)
    rc = accel_ask(rt, w2, &msg, &f);
  if (rc == 0) {
    rc = accel_future_then(f, on_sum, done);
    accel_future_release(f); /* the callback holds its own reference */
  }
  if (rc == 0)
    rc = accel_future_wait(done, 5000);
  uint64_t sum = rc == 0 ? *(uint64_t *)accel_future_value(done) : 0;
  printf("  the callback got %" PRIu64 " (%s)\n", sum, accel_err_name(rc));
  check(rc == 0 && sum == 500500, "sum(1000) == 500500, delivered by the callback");
  if (done)
    accel_future_release(done);
}

static void step_poll(accel_runtime *rt, accel_ref w1) {
  step(4, "ask worker-1 for 1 + ... + 10, poll the future");
  accel_future *f = NULL;
  accel_msg msg = {.type = MSG_SUM, .arg = 10};
  int rc = accel_ask(rt, w1, &msg, &f);
  int polls = 0;
  if (rc == 0) {
    while ((rc = accel_future_poll(f)) == ACCEL_EAGAIN && polls < 5000) {
      polls++; /* a real program does something useful here */
      sleep_ms(1);
    }
  }
  uint64_t sum = rc == 0 ? *(uint64_t *)accel_future_value(f) : 0;
  printf("  after %d polls: %" PRIu64 " (%s)\n", polls, sum, accel_err_name(rc));
  check(rc == 0 && sum == 55, "sum(10) == 55, by polling");
  if (f)
    accel_future_release(f);
}

/* Waits until the supervisor names a new incarnation of worker `n` (not `old`). Until the
 * restart (after the backoff) accel_child has no live child to name and says so (EAGAIN). */
static int wait_restart(accel_runtime *rt, accel_ref sup, int n, accel_ref old, accel_ref *fresh) {
  int rc = ACCEL_ETIMEDOUT;
  for (int tries = 0; tries < 400; tries++) {
    rc = where(rt, sup, n, fresh);
    if (rc == 0 && !same_ref(*fresh, old))
      return 0;
    sleep_ms(5);
  }
  return rc < 0 ? rc : ACCEL_ETIMEDOUT;
}

static accel_ref step_fail(accel_runtime *rt, accel_ref sup, accel_ref old) {
  step(5, "tell worker-1 to fail; its supervisor restarts it");
  printf("  (the runtime logs the failure as a warning on stderr)\n");
  accel_future *f;
  int rc = ask_wait(rt, old, MSG_FAIL, 0, &f);
  if (f)
    accel_future_release(f);
  printf("  the ask completed with %s\n", accel_err_name(rc));
  check(rc == ACCEL_EFAILED, "the failing ask completes with EFAILED");

  accel_ref fresh = ACCEL_REF_NONE;
  rc = wait_restart(rt, sup, 1, old, &fresh);
  printf("  worker-1 was {%" PRIu32 ", %" PRIu32 "}, is now {%" PRIu32 ", %" PRIu32 "}\n", old.slot,
         old.gen, fresh.slot, fresh.gen);
  check(rc == 0, "accel_child() names the new incarnation");

  accel_msg msg = {.type = MSG_SUM, .arg = 1};
  rc = accel_tell(rt, old, &msg);
  printf("  a tell to the old ref: %s\n", accel_err_name(rc));
  check(rc == ACCEL_ESTALE, "the old ref is stale");

  uint64_t sum = 0;
  rc = ask_u64(rt, fresh, MSG_SUM, 100, &sum);
  check(rc == 0 && sum == 5050, "the new incarnation answers: sum(100) == 5050");
  return fresh;
}

static void step_work(accel_runtime *rt, accel_ref w2) {
  step(6, "ask worker-2 for 1 + ... + 1000000, computed as blocking work");
  uint64_t sum = 0;
  int rc = ask_u64(rt, w2, MSG_SLOW_SUM, 1000000, &sum);
  printf("  worker-2 says %" PRIu64 " (%s)\n", sum, accel_err_name(rc));
  check(rc == 0 && sum == UINT64_C(500000500000), "sum(1000000) == 500000500000");
}

static void step_timer(accel_runtime *rt, accel_ref sup) {
  step(7, "ask the supervisor for an alarm in 100 ms (a runtime timer)");
  double t0 = now_ms();
  accel_future *f;
  int rc = ask_wait(rt, sup, MSG_ALARM, 100, &f);
  double elapsed = now_ms() - t0;
  if (f)
    accel_future_release(f);
  printf("  the alarm rang after %.1f ms (%s)\n", elapsed, accel_err_name(rc));
  check(rc == 0 && elapsed >= 95.0, "the alarm rang after about 100 ms");
}

static void step_stop(accel_runtime *rt) {
  step(8, "stop the runtime");
  accel_runtime_stop(rt);
  int rc = accel_runtime_join(rt);
  accel_runtime_stats st;
  accel_runtime_get_stats(rt, &st);
  printf("  spawned %" PRIu64 " actors, %" PRIu64 " messages, %" PRIu64 " failure(s), %" PRIu64
         " restart(s), %" PRIu64 " dead letter(s)\n",
         st.actors_spawned, st.messages_received, st.failures, st.restarts, st.dead_letters);
  check(rc == 0, "the loop thread exited");
  check(st.failures == 1 && st.restarts == 1, "one failure, one restart");
  check(st.dead_letters >= 1, "the tell to the stale ref counted as a dead letter");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* the loop thread prints too: keep lines in order */
  step(1, "start the runtime: a supervisor with two workers, the loop on its own thread");

  accel_runtime *rt;
  int rc = accel_runtime_create(&rt, NULL);
  if (rc < 0) {
    fprintf(stderr, "accel_runtime_create: %s\n", accel_strerror(rc));
    return 1;
  }
  /* Before the loop runs, spawning is immediate. */
  accel_ref sup;
  accel_spawn_opts opts = {.name = "supervisor", .supervision = &supervision};
  rc = accel_spawn(rt, NULL, &supervisor_behavior, NULL, &opts, &sup);
  if (rc == 0)
    rc = accel_runtime_start(rt); /* the loop now runs on the runtime's own thread */
  if (rc < 0) {
    fprintf(stderr, "start: %s\n", accel_strerror(rc));
    accel_runtime_destroy(rt);
    return 1;
  }

  accel_ref w1 = ACCEL_REF_NONE, w2 = ACCEL_REF_NONE;
  rc = where(rt, sup, 1, &w1);
  if (rc == 0)
    rc = where(rt, sup, 2, &w2);
  check(rc == 0, "the supervisor names its two workers");
  step_wait(rt, w1);
  step_then(rt, w2);
  step_poll(rt, w1);
  w1 = step_fail(rt, sup, w1);
  step_work(rt, w2);
  step_timer(rt, sup);
  step_stop(rt);
  accel_runtime_destroy(rt);

  printf("\n%s: %d check(s) failed\n", failures ? "FAILED" : "all steps passed", failures);
  return failures ? 1 : 0;
}
