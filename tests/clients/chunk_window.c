/* clients-chunk-window: the transfer window of chunked transfers (clients/chunk.c), counted
 * exactly. A context of the embedded mode gets a transport of the test's in front of its own:
 * chunks (the WRITEs and READs it is handed) are held, not run, and answered by the test one
 * at a time, oldest first, each only once the sender has had the time to overrun the window;
 * everything else goes through. The most chunks held at once must be exactly the window:
 * CHUNK_WINDOW where chunks are small enough, and fewer where the bytes bound it (no more
 * than twice max_op_bytes in flight: the daemon's smallest budget per connection). */
#include <pthread.h>

#include "accel/accel.h"
#include "clients/chunk.h"
#include "clients/ctx.h"
#include "test.h"

/* How long the sender is given to send a chunk it should not: it sends at once when a
 * completion frees the window, so a sender that overruns it has done so long before. */
#define OVERRUN_MS 20
#define WAIT_MS 10000 /* for a chunk the window lets out; far more than it ever takes */

typedef struct holder {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  const client_transport *inner;
  dev_call *held[64]; /* in the order sent */
  unsigned nheld, most, sent;
  uint64_t next_first; /* where the next chunk should start (chunks go in order) */
  size_t max_op_bytes;
  bool disorder; /* a chunk out of order or larger than one op may carry */
} holder;

static holder h = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static client_transport fake;

static size_t op_bytes(const dev_op *op) {
  return op->h.kind == DEV_OP_WRITE ? op->u.write.bytes : op->u.read.bytes;
}

/* The transport's send_op, on the transfer's sender thread (chunks) or the caller's. */
static int hold_or_pass(accel_ctx *ctx, dev_call *call) {
  const dev_op *op = &call->op;
  if (op->h.kind != DEV_OP_WRITE && op->h.kind != DEV_OP_READ)
    return h.inner->send_op(ctx, call);
  pthread_mutex_lock(&h.mu);
  h.disorder |= op->bufs[0].offset != h.next_first || op_bytes(op) > h.max_op_bytes ||
                h.nheld == sizeof h.held / sizeof h.held[0];
  h.next_first = op->bufs[0].offset + op->bufs[0].count;
  if (h.nheld < sizeof h.held / sizeof h.held[0])
    h.held[h.nheld++] = call;
  h.most = h.nheld > h.most ? h.nheld : h.most;
  h.sent++;
  pthread_cond_broadcast(&h.cv);
  pthread_mutex_unlock(&h.mu);
  return 0;
}

/* Waits until `want` chunks are held (or more: a window overrun). */
static void wait_held(unsigned want) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += WAIT_MS / 1000;
  pthread_mutex_lock(&h.mu);
  while (h.nheld < want)
    if (pthread_cond_timedwait(&h.cv, &h.mu, &until) != 0)
      TEST_FAIL("%u chunks held after %d ms, %u expected (%u sent)", h.nheld, WAIT_MS, want,
                h.sent);
  pthread_mutex_unlock(&h.mu);
}

/* Answers the oldest chunk held, as the transport would: its future, then its count. */
static void answer_oldest(accel_ctx *ctx) {
  pthread_mutex_lock(&h.mu);
  CHECK_GT(h.nheld, 0);
  dev_call *call = h.held[0];
  memmove(h.held, h.held + 1, --h.nheld * sizeof h.held[0]);
  pthread_mutex_unlock(&h.mu);
  accel_future_complete(call->future, 0, NULL, NULL);
  accel_future_release(call->future);
  dev_call_free(call);
  client_op_done(ctx, 0);
}

/* A context of the embedded mode whose transfers are split at max_op_bytes and held. */
static accel_ctx *open_held(size_t max_op_bytes) {
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, "embedded:?backends=cpu"));
  pthread_mutex_lock(&h.mu);
  h.inner = ctx->tp;
  h.nheld = h.most = h.sent = 0;
  h.next_first = 0;
  h.max_op_bytes = max_op_bytes;
  h.disorder = false;
  pthread_mutex_unlock(&h.mu);
  fake = *ctx->tp;
  fake.send_op = hold_or_pass;
  ctx->tp = &fake;
  ctx->max_op_bytes = max_op_bytes;
  return ctx;
}

/* Transfers of counts[] floats (WRITEs, or READs), issued back to back into one buffer, in
 * chunks of `chunk` floats, with a window of `want` chunks: each time the window is full (or
 * every chunk left is out), the sender is given the time to overrun it, then the oldest chunk
 * is answered. Returns the most chunks held at once. */
static unsigned most_in_flight(size_t max_op_bytes, bool read, const size_t *counts, int n,
                               size_t chunk, unsigned want) {
  accel_ctx *ctx = open_held(max_op_bytes);
  size_t total = 0, chunks = 0;
  for (int i = 0; i < n; i++) {
    total += counts[i];
    chunks += (counts[i] + chunk - 1) / chunk;
  }
  float *mem = calloc(total, sizeof *mem); /* never touched: the chunks are not run */
  CHECK(mem != NULL);
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, total, &b));
  accel_future *f[8];
  CHECK_LE(n, 8);
  for (size_t i = 0, at = 0; i < (size_t)n; at += counts[i++])
    CHECK_OK(read ? accel_read(ctx, b, at, mem + at, counts[i], &f[i])
                  : accel_write(ctx, b, at, mem + at, counts[i], &f[i]));
  for (size_t left = chunks; left > 0; left--) {
    wait_held(left < want ? (unsigned)left : want);
    test_sleep_ms(OVERRUN_MS);
    answer_oldest(ctx);
  }
  for (int i = 0; i < n; i++) {
    CHECK_OK(accel_future_wait(f[i], WAIT_MS));
    accel_future_release(f[i]);
  }
  CHECK_OK(accel_finish(ctx, WAIT_MS));
  pthread_mutex_lock(&h.mu);
  CHECK(!h.disorder);
  CHECK_EQ(h.sent, chunks);
  unsigned most = h.most;
  pthread_mutex_unlock(&h.mu);
  CHECK_OK(accel_buffer_destroy(ctx, b));
  accel_close(ctx);
  free(mem);
  printf("# %zu chunks of %zu bytes (max_op_bytes %zu): at most %u in flight\n", chunks,
         chunk * sizeof(float), max_op_bytes, most);
  return most;
}

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* Chunks of max_op_bytes (64 KiB) each: two in flight make twice max_op_bytes, so the bytes
 * bound the window to 2, below CHUNK_WINDOW. Two writes back to back (5.5 and 3 chunks) share
 * the one window. */
TEST(bytes_bound_the_window_to_two_chunks) {
  size_t chunk = 64 * KIB / 4, counts[] = {5 * chunk + chunk / 2, 3 * chunk};
  CHECK_EQ(most_in_flight(64 * KIB, false, counts, 2, chunk, 2), 2);
}

/* max_op_bytes of 24 MiB: chunks of CHUNK_MAX_BYTES (16 MiB), three of them within twice
 * max_op_bytes. Reads this time. */
TEST(bytes_bound_the_window_to_three_chunks) {
  size_t chunk = CHUNK_MAX_BYTES / 4, counts[] = {6 * chunk + 5};
  CHECK_EQ(most_in_flight(24 * MIB, true, counts, 1, chunk, 3), 3);
}

/* max_op_bytes of 64 MiB: chunks of 16 MiB, of which twice max_op_bytes would allow eight:
 * CHUNK_WINDOW bounds the window. */
TEST(chunk_window_bounds_small_chunks) {
  size_t chunk = CHUNK_MAX_BYTES / 4, counts[] = {7 * chunk};
  CHECK_EQ(most_in_flight(64 * MIB, false, counts, 1, chunk, CHUNK_WINDOW), CHUNK_WINDOW);
}

static const test_case tests[] = {
    TEST_CASE(bytes_bound_the_window_to_two_chunks),
    TEST_CASE(bytes_bound_the_window_to_three_chunks),
    TEST_CASE(chunk_window_bounds_small_chunks),
};

TEST_MAIN(tests)
