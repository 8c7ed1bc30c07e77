/* libaccel's remote client against a daemon that goes away: every pending op completes with
 * ACCEL_ECLOSED (or had completed before), accel_finish returns, later ops fail with
 * ACCEL_ECLOSED, and closing the context does not hang. And who reads the replies
 * (clients/remote_local_read.c): a waiting thread reads its own while the receiver's watch is
 * off; many threads waiting at once, timed waits that give up, and callbacks nobody waits for
 * all get their answers; a waiter reading when the daemon dies hears ECLOSED. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "accel/accel.h"
#include "util.h"

enum { N = 256, OPS = 64 };

static void issue_work(accel_ctx *ctx, accel_buffer a, accel_buffer c, accel_future **reads,
                       float *out) {
  for (int i = 0; i < OPS; i++) {
    CHECK_OK(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, N, N, N, 1.0f, a, N, a, N, 1.0f, c,
                         N, NULL));
    CHECK_OK(accel_read(ctx, c, 0, out + (size_t)i * 4, 4, &reads[i]));
  }
}

/* A daemon of its own, and a context connected to it. */
static accel_ctx *started(td_daemon *d) {
  td_prepare(d);
  td_start(d, NULL);
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, d->url));
  return ctx;
}

TEST(lost_daemon_fails_pending_ops) {
  td_daemon d;
  accel_ctx *ctx = started(&d);
  accel_buffer a, c;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, (size_t)N * N, &a));
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, (size_t)N * N, &c));
  accel_rng r = {.dist = ACCEL_DIST_UNIFORM, .seed = 7};
  CHECK_OK(accel_rng_fill(ctx, 0, a, &r, NULL));
  CHECK_OK(accel_fill_f32(ctx, 0, c, 0.5f, NULL));
  static accel_future *reads[OPS];
  static float out[OPS * 4];
  issue_work(ctx, a, c, reads, out);
  td_signal(&d, SIGKILL);
  td_wait(&d);
  int closed = 0, done = 0;
  for (int i = 0; i < OPS; i++) {
    /* Each completes, done or closed: a hang is the watchdog's (no limit that a busy machine
     * could reach first). */
    int st = accel_future_wait(reads[i], -1);
    CHECK(st == 0 || st == ACCEL_ECLOSED);
    closed += st == ACCEL_ECLOSED;
    done += st == 0;
    accel_future_release(reads[i]);
  }
  printf("# %d reads done before the daemon died, %d closed\n", done, closed);
  int fin = accel_finish(ctx, -1);
  CHECK(fin == 0 || fin == ACCEL_ECLOSED);
  accel_future *f = NULL;
  int rc = accel_fill_f32(ctx, 0, c, 1.0f, &f);
  if (rc == 0) { /* sent before the loss was noticed: it fails in its future */
    CHECK_ERR(accel_future_wait(f, -1), ACCEL_ECLOSED);
    accel_future_release(f);
  } else {
    CHECK_ERR(rc, ACCEL_ECLOSED);
  }
  accel_close(ctx);
  td_cleanup(&d);
}

/* ---- a sender blocked on a daemon that stopped reading ---- */

typedef struct flooder {
  accel_ctx *ctx;
  accel_buffer b;
  atomic_long sent;
  int rc;
} flooder;

static void *flood(void *arg) {
  flooder *f = arg;
  for (long i = 0; i < 10 * 1000 * 1000; i++) {
    f->rc = accel_fill_u32(f->ctx, 0, f->b, (uint32_t)i, NULL);
    if (f->rc != 0)
      break;
    atomic_fetch_add(&f->sent, 1);
  }
  return NULL;
}

/* A daemon that stops reading (SIGSTOP) fills the link (its socket, or its shared ring, where
 * the sender waits for room in memory); when it then dies, the blocked sender returns
 * ACCEL_ECLOSED. */
TEST(a_sender_blocked_on_a_stopped_daemon_returns_when_it_dies) {
  td_daemon d;
  accel_ctx *ctx = started(&d);
  flooder f = {.ctx = ctx};
  CHECK_OK(accel_buffer_create(ctx, ACCEL_U32, 1, &f.b));
  CHECK_OK(accel_finish(ctx, -1));
  td_signal(&d, SIGSTOP);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, flood, &f), 0);
  long last = -1;
  while (atomic_load(&f.sent) != last) { /* until the link is full: the sender waits */
    last = atomic_load(&f.sent);
    usleep(300 * 1000);
  }
  printf("# %ld ops sent before the link filled\n", last);
  CHECK_GT(last, 0);
  td_signal(&d, SIGKILL);
  td_wait(&d);
  pthread_join(t, NULL); /* a sender that never returns is the watchdog's */
  CHECK_ERR(f.rc, ACCEL_ECLOSED);
  accel_close(ctx);
  td_cleanup(&d);
}

/* ---- many waiters ---- */

typedef struct waiter {
  accel_ctx *ctx;
  int index, failures;
} waiter;

/* Fills its own buffer and reads it back, 200 times, waiting for each; every fourth round
 * first gives a timed wait of 0 or 1 ms a chance to give up. */
static void *fill_and_read(void *arg) {
  waiter *w = arg;
  accel_buffer b;
  if (accel_buffer_create(w->ctx, ACCEL_F32, 64, &b) != 0) {
    w->failures++;
    return NULL;
  }
  for (int round = 0; round < 200; round++) {
    float value = (float)(w->index * 1000 + round), out[64];
    accel_future *fill = NULL, *read = NULL;
    w->failures += accel_fill_f32(w->ctx, 0, b, value, &fill) != 0;
    w->failures += accel_read(w->ctx, b, 0, out, 64, &read) != 0;
    if (round % 4 == 0) {
      int st = accel_future_wait(read, round % 8 == 0 ? 0 : 1);
      w->failures += st != 0 && st != ACCEL_ETIMEDOUT && st != ACCEL_EAGAIN;
    }
    w->failures += accel_future_wait(read, -1) != 0 || accel_future_wait(fill, -1) != 0;
    for (int i = 0; i < 64; i++)
      w->failures += out[i] != value;
    accel_future_release(fill);
    accel_future_release(read);
  }
  w->failures += accel_buffer_destroy(w->ctx, b) != 0;
  return NULL;
}

static void count_done(accel_future *f, int status, void *arg) {
  (void)f;
  atomic_fetch_add((atomic_int *)arg, status == 0 ? 1 : 1000);
}

/* Eight threads of one context wait at once, while callbacks of ops nobody waits for count
 * their completions. */
TEST(many_waiters_on_one_context_all_answered) {
  td_daemon d;
  accel_ctx *ctx = started(&d);
  accel_buffer side;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, 64, &side));
  atomic_int called = 0;
  enum { THREADS = 8, UNWAITED = 100 };
  pthread_t t[THREADS];
  waiter w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (waiter){.ctx = ctx, .index = i};
    CHECK_EQ(pthread_create(&t[i], NULL, fill_and_read, &w[i]), 0);
  }
  for (int i = 0; i < UNWAITED; i++) {
    accel_future *f = NULL;
    CHECK_OK(accel_fill_f32(ctx, 0, side, (float)i, &f));
    CHECK_OK(accel_future_then(f, count_done, &called));
    accel_future_release(f);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ(w[i].failures, 0);
  }
  TEST_WAIT_FOR(atomic_load(&called) >= UNWAITED, 20);
  CHECK_EQ(atomic_load(&called), UNWAITED); /* each once, each successful (a failure adds 1000) */
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* A daemon and a context with `gemms` products c = a a (a all ones, N x N) queued on device 0:
 * work that takes a while, whose result is known (c's elements are N). */
static accel_ctx *queue_gemms(td_daemon *d, accel_buffer *c, int gemms) {
  accel_ctx *ctx = started(d);
  accel_buffer a;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, (size_t)N * N, &a));
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, (size_t)N * N, c));
  CHECK_OK(accel_fill_f32(ctx, 0, a, 1.0f, NULL));
  for (int i = 0; i < gemms; i++)
    CHECK_OK(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, N, N, N, 1.0f, a, N, a, N, 0.0f,
                         *c, N, NULL));
  return ctx;
}

/* A timed wait gives up while its op runs: the answer still comes, with nobody waiting. */
TEST(a_timed_wait_that_gives_up_leaves_the_reply_to_the_receiver) {
  td_daemon d;
  accel_buffer c;
  accel_ctx *ctx = queue_gemms(&d, &c, OPS); /* long enough that a 1 ms wait gives up */
  float out[4] = {0};
  accel_future *f = NULL;
  CHECK_OK(accel_read(ctx, c, 0, out, 4, &f));
  CHECK_ERR(accel_future_wait(f, 1), ACCEL_ETIMEDOUT);
  TEST_WAIT_FOR(accel_future_poll(f) != ACCEL_EAGAIN, 60);
  CHECK_OK(accel_future_poll(f));
  CHECK_EQ(out[0], (float)N);
  accel_future_release(f);
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

typedef struct long_wait {
  accel_future *f;
  atomic_int status; /* 1 while waiting */
  atomic_bool started;
} long_wait;

static void *wait_long(void *arg) {
  long_wait *lw = arg;
  atomic_store(&lw->started, true);
  atomic_store(&lw->status, accel_future_wait(lw->f, -1));
  return NULL;
}

/* A thread waiting for its reply when the daemon is killed hears the end: ECLOSED (or its
 * answer, if it came first), without hanging. */
TEST(a_waiter_reading_when_the_daemon_dies_hears_eclosed) {
  td_daemon d;
  accel_buffer c;
  accel_ctx *ctx = queue_gemms(&d, &c, 8 * OPS); /* seconds of work on a 2-core machine */
  float out[4];
  long_wait lw = {.status = 1};
  CHECK_OK(accel_read(ctx, c, 0, out, 4, &lw.f));
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, wait_long, &lw), 0);
  TEST_WAIT_FOR(atomic_load(&lw.started), 20);
  test_sleep_ms(20);                    /* in the wait by now */
  CHECK_EQ(atomic_load(&lw.status), 1); /* the kill comes while it waits */
  td_signal(&d, SIGKILL);
  td_wait(&d);
  TEST_WAIT_FOR(atomic_load(&lw.status) != 1, 20);
  pthread_join(t, NULL);
  int st = atomic_load(&lw.status);
  CHECK(st == 0 || st == ACCEL_ECLOSED);
  accel_future_release(lw.f);
  accel_close(ctx);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(lost_daemon_fails_pending_ops),
    TEST_CASE(a_sender_blocked_on_a_stopped_daemon_returns_when_it_dies),
    TEST_CASE(many_waiters_on_one_context_all_answered),
    TEST_CASE(a_timed_wait_that_gives_up_leaves_the_reply_to_the_receiver),
    TEST_CASE(a_waiter_reading_when_the_daemon_dies_hears_eclosed),
};

TEST_MAIN(tests)
