/* Helpers shared by the public-API tests (tests/api): a seeded input generator, contexts and
 * buffers set up with checks, synchronous write/read, waiting on futures, and a gate that
 * holds the context's loop thread so that ops stay pending for as long as a test needs.
 *
 * Everything here fails the test (tests/test.h) instead of returning an error, except where
 * the return code is the point. Only the public headers are used: these tests see accel as a
 * client does.
 *
 * Inputs are fresh each run: api_seed() takes the seed from ACCEL_TEST_SEED or else from the
 * clock, and prints it, so that a failure can be replayed with ACCEL_TEST_SEED=<seed>. */
#ifndef ACCEL_TESTS_API_UTIL_H
#define ACCEL_TESTS_API_UTIL_H

#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "accel/accel.h"
#include "daemon_mode.h"

/* ---- seeded inputs (splitmix64: small, good enough for test data) ---- */

static uint64_t api_rng_state;
static bool api_rng_seeded;

/* Seeds the generator (the first rnd64() does it if no test did) and prints the seed. */
static inline uint64_t api_seed(void) {
  const char *s = getenv("ACCEL_TEST_SEED");
  uint64_t fresh = (uint64_t)time(NULL) * 1000003u ^ test_now_ns() ^ (uint64_t)getpid() << 40;
  uint64_t seed = s != NULL ? strtoull(s, NULL, 0) : fresh;
  api_rng_state = seed;
  api_rng_seeded = true;
  printf("# seed %" PRIu64 " (rerun with ACCEL_TEST_SEED=%" PRIu64 ")\n", seed, seed);
  fflush(stdout);
  return seed;
}

static inline uint64_t rnd64(void) {
  if (!api_rng_seeded)
    api_seed();
  uint64_t z = (api_rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline uint32_t rnd32(void) {
  return (uint32_t)(rnd64() >> 32);
}

/* Uniform in [lo, hi]. */
static inline size_t rnd_range(size_t lo, size_t hi) {
  return lo + (size_t)(rnd64() % (uint64_t)(hi - lo + 1));
}

/* Uniform float in [lo, hi). */
static inline float rnd_float(float lo, float hi) {
  return lo + (hi - lo) * (float)((double)(rnd64() >> 40) / (double)(1ull << 24));
}

/* A float in [lo, hi) that is never zero: inputs are never zeros, so a kernel that writes
 * nothing (the buffer reads as zeros) cannot pass. */
static inline float rnd_nonzero(float lo, float hi) {
  float v;
  do
    v = rnd_float(lo, hi);
  while (v == 0.0f);
  return v;
}

/* n such floats, malloc'd (free them). */
static inline float *rnd_floats(size_t n, float lo, float hi) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  CHECK(p != NULL);
  for (size_t i = 0; i < n; i++)
    p[i] = rnd_nonzero(lo, hi);
  return p;
}

static inline void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  CHECK(p != NULL);
  return p;
}

/* ---- contexts, buffers, futures ---- */

/* Appends `key=value` to url's query unless it sets key already; buf holds the result. */
static inline const char *test_url_param_(const char *url, const char *key, const char *value,
                                          char *buf, size_t len) {
  if (value == NULL || *value == '\0' || (url && strstr(url, key)))
    return url;
  const char *base = url ? url : "embedded:";
  int n = snprintf(buf, len, "%s%s%s%s", base, strchr(base, '?') ? "&" : "?", key, value);
  if (n < 0 || (size_t)n >= len)
    TEST_FAIL("test URL too long: %s", base);
  return buf;
}

/* ACCEL_TEST_BACKENDS=LIST runs a suite with the backends of LIST first (devices are numbered
 * in its order: "opencl,cpu" makes device 0 the first OpenCL device), unless the URL names
 * its own backends; ACCEL_TEST_COMPLETION=HOW with that completion strategy unless the URL
 * names one. Returns the URL to open (a static buffer, or url itself). */
static inline const char *test_url_(const char *url) {
  static _Thread_local char buf[2][512];
  url = test_url_param_(url, "backends=", getenv("ACCEL_TEST_BACKENDS"), buf[0], sizeof buf[0]);
  return test_url_param_(url, "completion=", getenv("ACCEL_TEST_COMPLETION"), buf[1],
                         sizeof buf[1]);
}

static inline accel_ctx *ctx_open(const char *url) {
  url = test_url_(url);
  if (test_daemon_mode())
    return daemon_mode_open(url);
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, url));
  CHECK(ctx != NULL);
  return ctx;
}

/* CPU devices come first; other backends' devices (a GPU) may follow them. */
static inline int cpu_device_count(accel_ctx *ctx) {
  int n = 0;
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    CHECK_OK(accel_device_info(ctx, d, &info));
    n += strcmp(info.backend, "cpu") == 0;
  }
  return n;
}

/* The index of the k-th device of the cpu backend. */
static inline accel_device cpu_dev(accel_ctx *ctx, int k) {
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    CHECK_OK(accel_device_info(ctx, d, &info));
    if (strcmp(info.backend, "cpu") == 0 && k-- == 0)
      return d;
  }
  TEST_FAIL("no cpu device %d", k);
  return -1;
}

static inline accel_buffer buf_new(accel_ctx *ctx, accel_dtype dtype, size_t count) {
  accel_buffer b = 0;
  CHECK_OK(accel_buffer_create(ctx, dtype, count, &b));
  CHECK(b != 0);
  return b;
}

/* Waits for f (forever: a hang is the watchdog's to report), releases it, returns its status. */
static inline int fut_status(accel_future *f) {
  CHECK(f != NULL);
  int rc = accel_future_wait(f, -1);
  accel_future_release(f);
  return rc;
}

#define WAIT_OK(f) CHECK_OK(fut_status(f))

static inline void write_sync(accel_ctx *ctx, accel_buffer b, size_t off, const void *src,
                              size_t count) {
  accel_future *f = NULL;
  CHECK_OK(accel_write(ctx, b, off, src, count, &f));
  WAIT_OK(f);
}

static inline void read_sync(accel_ctx *ctx, accel_buffer b, size_t off, void *dst, size_t count) {
  accel_future *f = NULL;
  CHECK_OK(accel_read(ctx, b, off, dst, count, &f));
  WAIT_OK(f);
}

/* A new buffer holding a copy of `src`. */
static inline accel_buffer buf_from(accel_ctx *ctx, accel_dtype dtype, const void *src,
                                    size_t count) {
  accel_buffer b = buf_new(ctx, dtype, count);
  write_sync(ctx, b, 0, src, count);
  return b;
}

static inline void stats(accel_ctx *ctx, accel_transfer_stats *s) {
  memset(s, 0xA5, sizeof *s);
  CHECK_OK(accel_transfer_stats_get(ctx, s));
}

/* The context's transfer counters once every op issued so far is done. */
static inline accel_transfer_stats moved_now(accel_ctx *ctx) {
  accel_transfer_stats s;
  CHECK_OK(accel_finish(ctx, -1));
  stats(ctx, &s);
  return s;
}

/* Whether Z is valid on device d now: an op there reading it moves nothing. */
static inline bool valid_on(accel_ctx *ctx, accel_device d, accel_buffer Z, accel_buffer scratch) {
  accel_transfer_stats before = moved_now(ctx);
  accel_future *f = NULL;
  CHECK_OK(accel_relu(ctx, d, scratch, Z, &f));
  WAIT_OK(f);
  accel_transfer_stats after = moved_now(ctx);
  return after.host_to_device == before.host_to_device &&
         after.device_to_device == before.device_to_device;
}

/* Waits until device `dev` reports `state` with at least `restarts` restarts (a wait loop, not
 * a timing assertion: a device that never gets there is the watchdog's to report). */
static inline void device_wait(accel_ctx *ctx, accel_device dev, int state, uint32_t restarts,
                               struct accel_device_info *out) {
  for (;;) {
    CHECK_OK(accel_device_info(ctx, dev, out));
    if (out->state == state && out->restarts >= restarts)
      return;
    test_sleep_ms(1);
  }
}

/* ---- holding the loop ----
 * A `then` callback runs on the context's loop thread; one that waits on a semaphore holds the
 * loop, and with it every op of the context (all of them pass through the loop's actors), so a
 * test can look at futures that are certainly still pending. Tests only: real callbacks must
 * never block. */
typedef struct loop_gate {
  sem_t entered, release;
} loop_gate;

static inline void gate_cb_(accel_future *f, int status, void *arg) {
  loop_gate *g = arg;
  (void)f;
  (void)status;
  sem_post(&g->entered);
  while (sem_wait(&g->release) != 0) {
  }
}

/* Returns once the loop thread is held. */
static inline void loop_hold(accel_ctx *ctx, loop_gate *g) {
  CHECK_EQ(sem_init(&g->entered, 0, 0), 0);
  CHECK_EQ(sem_init(&g->release, 0, 0), 0);
  accel_future *f = NULL;
  CHECK_OK(accel_future_create(accel_ctx_runtime(ctx), &f));
  CHECK_OK(accel_future_then(f, gate_cb_, g));
  CHECK_OK(accel_future_complete(f, 0, NULL, NULL));
  accel_future_release(f);
  while (sem_wait(&g->entered) != 0) {
  }
}

static inline void loop_release(loop_gate *g) {
  sem_post(&g->release);
}

/* After the context is closed (the callback has certainly returned). */
static inline void gate_destroy(loop_gate *g) {
  sem_destroy(&g->entered);
  sem_destroy(&g->release);
}

/* A pointer that no accel call may write: the out-future of a call that fails. */
#define FUT_SENTINEL ((accel_future *)(uintptr_t)0x5e11)

#endif
