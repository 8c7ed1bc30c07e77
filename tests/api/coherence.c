/* api-coherence: buffers live on several memory nodes and data moves only when an op needs it
 * where it is not valid (docs/ARCHITECTURE.md "Buffers and coherence"). Every test asserts the
 * transfer counters (accel_transfer_stats_get) exactly, as deltas over a fresh context:
 *   host_to_device / device_to_host / device_to_device  bytes between memory nodes
 *   written / read                                        bytes from / to the caller's memory
 * Between two devices of a backend with peer copies (cpu, cuda) the data moves once, device to
 * device; between others it goes through the host (one device->host, one host->device). No
 * op here copies inside a device, so device_to_device counts peer copies only. A read of data that
 * is valid only on a device goes straight to the caller (it counts as `read`, not as a move
 * between nodes). Every test also checks the data, so a counter that is right by accident with
 * wrong bytes still fails. */
#include <math.h>

#include "api_util.h"

/* Expected totals since the context opened. */
typedef struct moved {
  uint64_t h2d, d2h, d2d, written, read;
} moved;

static void expect(accel_ctx *ctx, const char *where, moved want) {
  accel_transfer_stats s;
  CHECK_OK(accel_finish(ctx, -1)); /* every op issued so far is done and counted */
  stats(ctx, &s);
  if (s.host_to_device != want.h2d || s.device_to_host != want.d2h ||
      s.device_to_device != want.d2d || s.written != want.written || s.read != want.read)
    TEST_FAIL("%s: moved h2d %" PRIu64 " d2h %" PRIu64 " d2d %" PRIu64 " written %" PRIu64
              " read %" PRIu64 "; want h2d %" PRIu64 " d2h %" PRIu64 " d2d %" PRIu64
              " written %" PRIu64 " read %" PRIu64,
              where, s.host_to_device, s.device_to_host, s.device_to_device, s.written, s.read,
              want.h2d, want.d2h, want.d2d, want.written, want.read);
}

/* Runs an op that puts its future in the local `f`, and waits for it. */
#define SYNC(call)                                                                                 \
  do {                                                                                             \
    f = NULL;                                                                                      \
    CHECK_OK(call);                                                                                \
    WAIT_OK(f);                                                                                    \
  } while (0)

static void check_floats(const char *what, const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof got[i]) != 0)
      TEST_FAIL("%s[%zu] = %.9g, want %.9g", what, i, (double)got[i], (double)want[i]);
}

static float ref_sigmoid(float x) {
  return (float)(1.0 / (1.0 + exp(-(double)x)));
}

/* sigmoid within a few ulp (the data checks here are about which bytes, not about accuracy). */
static void check_sigmoid(const char *what, const float *got, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float want = ref_sigmoid(x[i]);
    if (!(fabsf(got[i] - want) <= 4e-7f))
      TEST_FAIL("%s[%zu] = %.9g, want sigmoid(%.9g) = %.9g", what, i, (double)got[i], (double)x[i],
                (double)want);
  }
}

TEST(fresh_context_moved_nothing) {
  accel_ctx *ctx = ctx_open(NULL);
  expect(ctx, "fresh context", (moved){0});
  accel_close(ctx);
}

/* Written from the host, then computed on device 0: one host->device copy, then none. */
TEST(write_then_compute_moves_once) {
  accel_ctx *ctx = ctx_open(NULL);
  size_t n = rnd_range(1000, 50000), bytes = n * 4;
  float *x = rnd_floats(n, -4, 4), *y = xmalloc(bytes), *z = xmalloc(bytes);
  accel_buffer X = buf_new(ctx, ACCEL_F32, n), Y = buf_new(ctx, ACCEL_F32, n);
  accel_buffer Z = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  write_sync(ctx, X, 0, x, n);
  expect(ctx, "after the write", (moved){.written = bytes});
  SYNC(accel_sigmoid(ctx, 0, Y, X, &f));
  expect(ctx, "first op on device 0", (moved){.h2d = bytes, .written = bytes});
  SYNC(accel_relu(ctx, 0, Z, X, &f));    /* X is valid there now */
  SYNC(accel_tanh(ctx, 0, Y, Y, &f));    /* in place on device data */
  SYNC(accel_sigmoid(ctx, 0, Z, Y, &f)); /* device data as input */
  expect(ctx, "more ops on device 0", (moved){.h2d = bytes, .written = bytes});
  read_sync(ctx, X, 0, y, n); /* valid on the host: no move */
  check_floats("X", y, x, n);
  expect(ctx, "reading host data", (moved){.h2d = bytes, .written = bytes, .read = bytes});
  read_sync(ctx, Z, 0, z, n); /* valid only on the device: straight to the caller */
  read_sync(ctx, Z, 0, z, n);
  expect(ctx, "reading device data twice",
         (moved){.h2d = bytes, .written = bytes, .read = 3 * bytes});
  for (size_t i = 0; i < n; i++) /* Z = sigmoid(tanh(sigmoid(x))) */
    x[i] = ref_sigmoid((float)tanh((double)ref_sigmoid(x[i])));
  for (size_t i = 0; i < n; i++)
    if (!(fabsf(z[i] - x[i]) <= 1e-6f))
      TEST_FAIL("Z[%zu] = %.9g, want %.9g", i, (double)z[i], (double)x[i]);
  accel_close(ctx);
  free(x);
  free(y);
  free(z);
}

/* sgemm: A and B come over once; C comes over only when its old contents matter (beta != 0
 * or C is larger than the m x n it computes). */
TEST(sgemm_moves_only_what_it_reads) {
  accel_ctx *ctx = ctx_open(NULL);
  const size_t m = 48, n = 40, k = 32;
  float *a = rnd_floats(m * k, -1, 1), *b = rnd_floats(k * n, -1, 1);
  float *c = rnd_floats(m * n + 8, -1, 1), *out = xmalloc(m * n * 4);
  accel_buffer A = buf_from(ctx, ACCEL_F32, a, m * k), B = buf_from(ctx, ACCEL_F32, b, k * n);
  accel_buffer C0 = buf_from(ctx, ACCEL_F32, c, m * n), C1 = buf_from(ctx, ACCEL_F32, c, m * n);
  accel_buffer C2 = buf_from(ctx, ACCEL_F32, c, m * n + 8);
  moved want = {.written = (m * k + k * n + 3 * m * n + 8) * 4};
  expect(ctx, "after the writes", want);
  accel_future *f = NULL;
  SYNC(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, m, n, k, 1.0f, A, m, B, k, 0.0f, C0, m,
                   &f));
  want.h2d += (m * k + k * n) * 4; /* beta = 0 over all of C0: its contents are not needed */
  expect(ctx, "sgemm, beta = 0", want);
  SYNC(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, m, n, k, 1.0f, A, m, B, k, 1.0f, C1, m,
                   &f));
  want.h2d += m * n * 4; /* beta = 1: C1 is read */
  expect(ctx, "sgemm, beta = 1", want);
  SYNC(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, m, n, k, 1.0f, A, m, B, k, 0.0f, C2, m,
                   &f));
  want.h2d += (m * n + 8) * 4; /* C2 is longer than m x n: the tail must survive */
  expect(ctx, "sgemm, beta = 0 into a longer C", want);
  read_sync(ctx, C2, m * n, out, 8);
  check_floats("C2 beyond m x n", out, c + m * n, 8);
  read_sync(ctx, C0, 0, out, m * n);
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < m; i++) {
      double s = 0;
      for (size_t l = 0; l < k; l++)
        s += (double)a[i + l * m] * b[l + j * k];
      if (!(fabs(out[i + j * m] - s) <= 1e-4))
        TEST_FAIL("C0[%zu,%zu] = %.9g, want %.9g", i, j, (double)out[i + j * m], s);
    }
  accel_close(ctx);
  free(a);
  free(b);
  free(c);
  free(out);
}

/* Whether data moves straight from device a to device b (backend.h, copy_peer): two devices
 * of the cpu backend, or of the cuda one. */
static bool peers(accel_ctx *ctx, accel_device a, accel_device b) {
  struct accel_device_info ia, ib;
  CHECK_OK(accel_device_info(ctx, a, &ia));
  CHECK_OK(accel_device_info(ctx, b, &ib));
  return strcmp(ia.backend, ib.backend) == 0 &&
         (strcmp(ia.backend, "cpu") == 0 || strcmp(ia.backend, "cuda") == 0);
}

/* One move of `bytes` from a device to another: a peer copy, or through the host. */
static void moved_between(moved *m, bool peer, uint64_t bytes) {
  if (peer) {
    m->d2d += bytes;
  } else {
    m->d2h += bytes;
    m->h2d += bytes;
  }
}

/* Data written on device 0 and used by an op on device 1 moves once (device to device between
 * peers, else device->host and host->device); after that it is valid everywhere it went, and
 * using it again on either device or reading it moves nothing. Written again on device 1, it
 * moves back once. */
TEST(two_devices_move_once_each_way) {
  accel_ctx *ctx = ctx_open("embedded:?cpu_devices=2");
  CHECK_EQ(cpu_device_count(ctx), 2);
  size_t n = rnd_range(1000, 50000), bytes = n * 4;
  float *x = rnd_floats(n, -4, 4), *out = xmalloc(bytes), *sx = xmalloc(bytes);
  accel_buffer X = buf_new(ctx, ACCEL_F32, n), Y = buf_new(ctx, ACCEL_F32, n);
  accel_buffer Z = buf_new(ctx, ACCEL_F32, n), W = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  write_sync(ctx, X, 0, x, n);
  SYNC(accel_sigmoid(ctx, 0, Y, X, &f)); /* Y: written on device 0 only */
  moved want = {.h2d = bytes, .written = bytes};
  expect(ctx, "Y computed on device 0", want);
  bool peer = peers(ctx, 0, 1);
  SYNC(accel_relu(ctx, 1, Z, Y, &f));
  moved_between(&want, peer, bytes);
  expect(ctx, "Y used on device 1", want);
  SYNC(accel_relu(ctx, 1, W, Y, &f));
  SYNC(accel_tanh(ctx, 0, W, Y, &f));
  read_sync(ctx, Y, 0, out, n);
  want.read += bytes;
  expect(ctx, "Y used again on both devices and read", want);
  check_sigmoid("Y", out, x, n);
  memcpy(sx, out, bytes);
  read_sync(ctx, Z, 0, out, n); /* relu(sigmoid) = sigmoid: valid only on device 1 */
  want.read += bytes;
  check_floats("Z", out, sx, n);
  /* Y rewritten in place on device 1: valid there only; device 0 needs it back once. */
  SYNC(accel_sigmoid(ctx, 1, Y, Y, &f));
  expect(ctx, "Y rewritten on device 1", want);
  SYNC(accel_relu(ctx, 0, W, Y, &f));
  moved_between(&want, peer, bytes);
  expect(ctx, "Y used on device 0 again", want);
  SYNC(accel_relu(ctx, 0, Z, Y, &f));
  SYNC(accel_relu(ctx, 1, Z, Y, &f));
  expect(ctx, "and used again on both", want);
  read_sync(ctx, W, 0, out, n);
  want.read += bytes;
  check_sigmoid("W", out, sx, n);
  /* Data valid on the host and on device 0, used on device 1: one copy, from device 0 between
   * peers (another device before the host), else from the host. */
  SYNC(accel_relu(ctx, 1, W, X, &f));
  if (peer)
    want.d2d += bytes;
  else
    want.h2d += bytes;
  expect(ctx, "host data on the second device", want);
  accel_close(ctx);
  free(x);
  free(out);
  free(sx);
}

/* A write into data that lives only on a device lands there, partial or whole: nothing else
 * moves, and the next op there finds the buffer in place. */
TEST(writes_over_device_data) {
  accel_ctx *ctx = ctx_open(NULL);
  size_t n = rnd_range(1000, 50000), bytes = n * 4, off = rnd_range(0, n - 10);
  float *part = rnd_floats(10, 1, 2), *whole = rnd_floats(n, 1, 2), *out = xmalloc(bytes);
  accel_buffer B = buf_new(ctx, ACCEL_F32, n), D = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  SYNC(accel_fill_f32(ctx, 0, B, 0.75f, &f)); /* whole-buffer fill: nothing moves */
  expect(ctx, "fill on device 0", (moved){0});
  /* A buffer that lives on a device only is written there: nothing else moves. */
  write_sync(ctx, B, off, part, 10);
  moved want = {.written = 40};
  expect(ctx, "partial write over device data", want);
  SYNC(accel_relu(ctx, 0, D, B, &f)); /* relu of positive data: the data itself */
  expect(ctx, "B used on device 0 again", want);
  read_sync(ctx, D, 0, out, n);
  want.read += bytes;
  for (size_t i = 0; i < n; i++)
    CHECK(out[i] == (i >= off && i < off + 10 ? part[i - off] : 0.75f));
  SYNC(accel_fill_f32(ctx, 0, B, 0.25f, &f));
  write_sync(ctx, B, 0, whole, n); /* whole: the device data is not needed */
  want.written += bytes;
  expect(ctx, "whole write over device data", want);
  read_sync(ctx, B, 0, out, n);
  want.read += bytes;
  expect(ctx, "read after the whole write", want);
  check_floats("B", out, whole, n);
  SYNC(accel_relu(ctx, 0, D, B, &f));
  expect(ctx, "B used on device 0 after the whole write", want);
  accel_close(ctx);
  free(part);
  free(whole);
  free(out);
}

/* A write into data valid on the host and on a device lands on the device, as it would if the
 * device alone held it: the next op there moves nothing (landing on the host would copy the
 * buffer across again), and a read takes it from the device. */
TEST(a_write_over_data_on_host_and_device_lands_on_the_device) {
  accel_ctx *ctx = ctx_open(NULL);
  size_t n = rnd_range(1000, 50000), bytes = n * 4, off = rnd_range(0, n - 10);
  float *x = rnd_floats(n, 1, 2), *part = rnd_floats(10, 3, 4), *out = xmalloc(bytes);
  accel_buffer X = buf_new(ctx, ACCEL_F32, n), Y = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  write_sync(ctx, X, 0, x, n);
  SYNC(accel_relu(ctx, 0, Y, X, &f)); /* X valid on the host and on device 0 */
  moved want = {.h2d = bytes, .written = bytes};
  expect(ctx, "X used on device 0", want);
  write_sync(ctx, X, off, part, 10);
  want.written += 40;
  expect(ctx, "partial write", want);
  SYNC(accel_relu(ctx, 0, Y, X, &f));
  expect(ctx, "X used on device 0 after the write", want);
  memcpy(x + off, part, 40);
  read_sync(ctx, Y, 0, out, n);
  check_floats("relu(X) after the partial write", out, x, n);
  read_sync(ctx, X, 0, out, n); /* from the device, straight to the caller */
  check_floats("X after the partial write", out, x, n);
  want.read += 2 * bytes;
  expect(ctx, "reads", want);
  accel_close(ctx);
  free(x);
  free(part);
  free(out);
}

/* A buffer never written has no bytes to move: ops that read it see zeros, nothing is copied. */
TEST(never_written_moves_nothing) {
  accel_ctx *ctx = ctx_open(NULL);
  size_t n = rnd_range(1000, 50000), bytes = n * 4;
  float *out = xmalloc(bytes);
  accel_buffer X = buf_new(ctx, ACCEL_F32, n), Y = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  SYNC(accel_sigmoid(ctx, 0, Y, X, &f));
  expect(ctx, "op on a never-written buffer", (moved){0});
  read_sync(ctx, Y, 0, out, n);
  expect(ctx, "read of its result", (moved){.read = bytes});
  for (size_t i = 0; i < n; i++)
    CHECK(out[i] == 0.5f);
  accel_close(ctx);
  free(out);
}

static const test_case tests[] = {
    TEST_CASE(fresh_context_moved_nothing),
    TEST_CASE(write_then_compute_moves_once),
    TEST_CASE(sgemm_moves_only_what_it_reads),
    TEST_CASE(two_devices_move_once_each_way),
    TEST_CASE(writes_over_device_data),
    TEST_CASE(never_written_moves_nothing),
    TEST_CASE(a_write_over_data_on_host_and_device_lands_on_the_device),
};

TEST_MAIN(tests)
