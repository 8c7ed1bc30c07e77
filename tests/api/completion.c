/* api-completion: the three completion strategies give the same, correct results, whether set
 * for the context (URL `completion=callback|sync|poll`) or per op (accel_set_completion); and
 * op futures behave as runtime.h says: wait, poll (ACCEL_EAGAIN while pending), then (exactly
 * one call, counted after the loop has ended), release before completion.
 *
 * "Pending" is made certain, not likely: a test holds the context's loop thread (api_util.h,
 * loop_hold) so that no op can progress, looks at its futures, then lets go. */
#include <math.h>
#include <stdatomic.h>

#include "api_util.h"

/* A small workload through every kernel actor, with futures and fire-and-forget mixed; checks
 * its results. */
static void workload(accel_ctx *ctx, accel_device dev) {
  const size_t n = 96;
  float *a = rnd_floats(n * n, -1, 1), *b = rnd_floats(n * n, -1, 1);
  float *c = xmalloc(n * n * 4), *s = xmalloc(n * n * 4);
  uint32_t bits[8];
  accel_buffer A = buf_new(ctx, ACCEL_F32, n * n), B = buf_new(ctx, ACCEL_F32, n * n);
  accel_buffer C = buf_new(ctx, ACCEL_F32, n * n), R = buf_new(ctx, ACCEL_U32, 8);
  accel_future *f[6] = {0};
  accel_rng spec = {.dist = ACCEL_DIST_BITS, .seed = 0};
  CHECK_OK(accel_write(ctx, A, 0, a, n * n, &f[0]));
  CHECK_OK(accel_write(ctx, B, 0, b, n * n, NULL));
  CHECK_OK(accel_sgemm(ctx, dev, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, B, n, 0.0f, C,
                       n, &f[1]));
  CHECK_OK(accel_sigmoid(ctx, dev, C, C, &f[2]));
  CHECK_OK(accel_read(ctx, C, 0, c, n * n, &f[3]));
  CHECK_OK(accel_rng_fill(ctx, dev, R, &spec, &f[4]));
  CHECK_OK(accel_read(ctx, R, 0, bits, 8, &f[5]));
  for (int i = 5; i >= 0; i--) /* out of order on purpose */
    WAIT_OK(f[i]);
  CHECK_OK(accel_finish(ctx, -1));
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < n; i++) {
      double acc = 0;
      for (size_t l = 0; l < n; l++)
        acc += (double)a[i + l * n] * b[l + j * n];
      s[i + j * n] = (float)(1.0 / (1.0 + exp(-acc)));
      if (!(fabsf(c[i + j * n] - s[i + j * n]) <= 1e-5f))
        TEST_FAIL("sigmoid(A B)[%zu,%zu] = %.9g, want %.9g", i, j, (double)c[i + j * n],
                  (double)s[i + j * n]);
    }
  /* Philox4x32-10 of counter 0, key 0 (Random123 kat_vectors). */
  CHECK_EQ(bits[0], 0x6627e8d5u);
  CHECK_EQ(bits[3], 0x9b00dbd8u);
  CHECK_OK(accel_buffer_destroy(ctx, A));
  CHECK_OK(accel_buffer_destroy(ctx, B));
  CHECK_OK(accel_buffer_destroy(ctx, C));
  CHECK_OK(accel_buffer_destroy(ctx, R));
  free(a);
  free(b);
  free(c);
  free(s);
}

TEST(context_strategies) {
  static const char *const urls[] = {"embedded:?completion=callback", "embedded:?completion=sync",
                                     "embedded:?completion=poll",
                                     "embedded:?completion=poll&cpu_devices=2"};
  for (size_t u = 0; u < sizeof urls / sizeof urls[0]; u++) {
    accel_ctx *ctx = ctx_open(urls[u]);
    for (accel_device d = 0; d < accel_device_count(ctx); d++)
      workload(ctx, d);
    workload(ctx, ACCEL_DEVICE_ANY);
    accel_close(ctx);
  }
}

/* Per-op strategies, in a context of each default; the setting is per thread and stays until
 * changed (DEFAULT goes back to the device's). */
TEST(per_op_strategies) {
  static const char *const urls[] = {NULL, "embedded:?completion=sync",
                                     "embedded:?completion=poll"};
  for (size_t u = 0; u < 3; u++) {
    accel_ctx *ctx = ctx_open(urls[u]);
    for (int how = ACCEL_COMPLETION_CALLBACK; how <= ACCEL_COMPLETION_POLL; how++) {
      CHECK_OK(accel_set_completion(ctx, (accel_completion)how));
      workload(ctx, 0);
    }
    CHECK_OK(accel_set_completion(ctx, ACCEL_COMPLETION_DEFAULT));
    workload(ctx, 0);
    accel_close(ctx);
  }
}

/* While the loop is held, nothing completes: poll says EAGAIN, a zero or short wait times out,
 * accel_finish times out; once it lets go, everything completes with status 0 and poll and
 * wait keep returning it. */
TEST(future_pending_then_done) {
  EMBEDDED_ONLY();
  accel_ctx *ctx = ctx_open(NULL);
  uint32_t v[64], out[64];
  for (int i = 0; i < 64; i++)
    v[i] = rnd32() | 1;
  accel_buffer b = buf_new(ctx, ACCEL_U32, 64);
  loop_gate g;
  loop_hold(ctx, &g);
  accel_future *fw = NULL, *fr = NULL;
  CHECK_OK(accel_write(ctx, b, 0, v, 64, &fw));
  CHECK_OK(accel_read(ctx, b, 0, out, 64, &fr));
  CHECK_ERR(accel_future_poll(fw), ACCEL_EAGAIN);
  CHECK_ERR(accel_future_poll(fr), ACCEL_EAGAIN);
  CHECK_ERR(accel_future_wait(fr, 0), ACCEL_ETIMEDOUT);
  CHECK_ERR(accel_future_wait(fr, 5), ACCEL_ETIMEDOUT);
  CHECK(accel_future_value(fr) == NULL);
  CHECK_ERR(accel_finish(ctx, 5), ACCEL_ETIMEDOUT);
  CHECK_ERR(accel_future_poll(fr), ACCEL_EAGAIN);
  loop_release(&g);
  CHECK_OK(accel_future_wait(fr, -1));
  CHECK_OK(accel_future_poll(fr));
  CHECK_OK(accel_future_wait(fr, 0));
  CHECK_OK(accel_future_wait(fw, -1)); /* issued first, so done first */
  CHECK_OK(accel_future_poll(fw));
  for (int i = 0; i < 64; i++)
    CHECK_EQ(out[i], v[i]);
  accel_future_release(fw);
  accel_future_release(fr);
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
  gate_destroy(&g);
}

/* `then` callbacks: one per future, exactly once, on the loop thread, with the op's status and
 * the future itself; registered while pending or after completion. Counted again after the
 * context (and its loop) has ended: no late or second call. */
typedef struct then_count {
  atomic_int calls, bad_status, bad_future, on_loop;
  accel_future *expect[64];
  accel_ctx *ctx;
  sem_t done;
} then_count;

typedef struct then_arg {
  then_count *tc;
  int index;
} then_arg;

static void count_cb(accel_future *f, int status, void *arg) {
  then_arg *ta = arg;
  then_count *tc = ta->tc;
  atomic_fetch_add(&tc->calls, 1);
  if (status != 0)
    atomic_fetch_add(&tc->bad_status, 1);
  if (f != tc->expect[ta->index])
    atomic_fetch_add(&tc->bad_future, 1);
  if (accel_runtime_on_loop(accel_ctx_runtime(tc->ctx)))
    atomic_fetch_add(&tc->on_loop, 1);
  sem_post(&tc->done);
}

TEST(future_then_counted) {
  EMBEDDED_ONLY();
  accel_ctx *ctx = ctx_open(NULL);
  enum { N = 48 };
  static then_count tc;
  then_arg args[N];
  memset(&tc, 0, sizeof tc);
  tc.ctx = ctx;
  CHECK_EQ(sem_init(&tc.done, 0, 0), 0);
  accel_buffer b[N];
  float v = 1.5f;
  loop_gate g;
  loop_hold(ctx, &g);
  for (int i = 0; i < N; i++) { /* half registered while certainly pending */
    b[i] = buf_new(ctx, ACCEL_F32, 1000);
    accel_future *f = NULL;
    CHECK_OK(i % 3 ? accel_fill_f32(ctx, i % 2 ? ACCEL_DEVICE_ANY : 0, b[i], v, &f)
                   : accel_write(ctx, b[i], 0, &v, 1, &f));
    tc.expect[i] = f;
    args[i] = (then_arg){&tc, i};
    if (i < N / 2) {
      CHECK_OK(accel_future_then(f, count_cb, &args[i]));
      CHECK_ERR(accel_future_then(f, count_cb, &args[i]), ACCEL_EALREADY);
    }
  }
  CHECK_EQ(atomic_load(&tc.calls), 0);
  loop_release(&g);
  for (int i = N / 2; i < N; i++) { /* the rest after completion */
    CHECK_OK(accel_future_wait(tc.expect[i], -1));
    CHECK_OK(accel_future_then(tc.expect[i], count_cb, &args[i]));
    CHECK_ERR(accel_future_then(tc.expect[i], count_cb, &args[i]), ACCEL_EALREADY);
  }
  for (int i = 0; i < N; i++)
    while (sem_wait(&tc.done) != 0) {
    }
  for (int i = 0; i < N; i++)
    accel_future_release(tc.expect[i]);
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
  CHECK_EQ(atomic_load(&tc.calls), N);
  CHECK_EQ(atomic_load(&tc.bad_status), 0);
  CHECK_EQ(atomic_load(&tc.bad_future), 0);
  CHECK_EQ(atomic_load(&tc.on_loop), N);
  sem_destroy(&tc.done);
  gate_destroy(&g);
}

/* Releasing a future before its op completes: the op still runs (its effects are there), a
 * registered `then` still runs once, and nothing leaks (ASan, valgrind). */
static atomic_int released_calls;
static sem_t released_sem;

static void released_cb(accel_future *f, int status, void *arg) {
  (void)f;
  if (status == 0 && arg == &released_calls)
    atomic_fetch_add(&released_calls, 1);
  sem_post(&released_sem);
}

TEST(future_release_before_completion) {
  EMBEDDED_ONLY();
  accel_ctx *ctx = ctx_open(NULL);
  CHECK_EQ(sem_init(&released_sem, 0, 0), 0);
  atomic_store(&released_calls, 0);
  float v[256], out[256];
  for (int i = 0; i < 256; i++)
    v[i] = rnd_nonzero(-1, 1);
  accel_buffer b = buf_new(ctx, ACCEL_F32, 256), c = buf_new(ctx, ACCEL_F32, 256);
  loop_gate g;
  loop_hold(ctx, &g);
  accel_future *f1 = NULL, *f2 = NULL, *f3 = NULL;
  CHECK_OK(accel_write(ctx, b, 0, v, 256, &f1));
  CHECK_OK(accel_relu(ctx, 0, c, b, &f2));
  CHECK_OK(accel_future_then(f2, released_cb, &released_calls));
  CHECK_OK(accel_read(ctx, c, 0, out, 256, &f3));
  CHECK_ERR(accel_future_poll(f1), ACCEL_EAGAIN);
  accel_future_release(f1); /* pending, never looked at again */
  accel_future_release(f2); /* pending, with a `then` */
  loop_release(&g);
  WAIT_OK(f3);
  while (sem_wait(&released_sem) != 0) {
  }
  for (int i = 0; i < 256; i++)
    CHECK(out[i] == (v[i] > 0 ? v[i] : 0.0f));
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
  CHECK_EQ(atomic_load(&released_calls), 1);
  sem_destroy(&released_sem);
  gate_destroy(&g);
}

/* Blocking calls from the loop thread (inside a `then` callback) refuse with EDEADLK instead
 * of stalling every actor. */
typedef struct on_loop_result {
  accel_ctx *ctx;
  accel_future *pending;
  atomic_int finish_rc, wait_rc;
  sem_t done;
} on_loop_result;

static void blocking_from_loop_cb(accel_future *f, int status, void *arg) {
  on_loop_result *r = arg;
  (void)f;
  (void)status;
  atomic_store(&r->finish_rc, accel_finish(r->ctx, -1));
  atomic_store(&r->wait_rc, accel_future_wait(r->pending, -1));
  sem_post(&r->done);
}

TEST(blocking_on_the_loop_refused) {
  EMBEDDED_ONLY();
  accel_ctx *ctx = ctx_open(NULL);
  static on_loop_result r;
  r.ctx = ctx;
  CHECK_EQ(sem_init(&r.done, 0, 0), 0);
  accel_buffer b = buf_new(ctx, ACCEL_U32, 16);
  loop_gate g;
  loop_hold(ctx, &g);
  accel_future *first = NULL;
  CHECK_OK(accel_fill_u32(ctx, 0, b, 3, &first));
  CHECK_OK(accel_fill_u32(ctx, 0, b, 4, &r.pending)); /* still pending when `first` is done */
  CHECK_OK(accel_future_then(first, blocking_from_loop_cb, &r));
  loop_release(&g);
  while (sem_wait(&r.done) != 0) {
  }
  CHECK_ERR(atomic_load(&r.finish_rc), ACCEL_EDEADLK);
  int wrc = atomic_load(&r.wait_rc);
  if (wrc != 0) /* 0 only if the second fill had finished by then */
    CHECK_ERR(wrc, ACCEL_EDEADLK);
  WAIT_OK(first);
  WAIT_OK(r.pending);
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
  sem_destroy(&r.done);
  gate_destroy(&g);
}

static const test_case tests[] = {
    TEST_CASE(context_strategies),
    TEST_CASE(per_op_strategies),
    TEST_CASE(future_pending_then_done),
    TEST_CASE(future_then_counted),
    TEST_CASE(future_release_before_completion),
    TEST_CASE(blocking_on_the_loop_refused),
};

TEST_MAIN(tests)
