/* api-ordering: ops on the same buffer keep the order they were issued in (read-after-write,
 * write-after-read, write-after-write) across kernel actors (mem, blas, rng, nn) and devices,
 * while independent ops run concurrently. The ops are fire-and-forget (f = NULL), issued back
 * to back without waiting; accel_finish() must return 0, and the results are checked at the
 * end against a sequential reference. Sizes are large enough that work on one queue takes
 * long next to issuing the next op, so a missing dependency shows up as wrong data.
 * Fresh random inputs each run; the seed is printed, ACCEL_TEST_SEED=<seed> replays it. */
#include <math.h>

#include "api_util.h"

static void check_near(const char *what, size_t i, double got, double want, double tol) {
  if (!(fabs(got - want) <= tol))
    TEST_FAIL("%s[%zu] = %.9g, want %.9g (tolerance %.3g)", what, i, got, want, tol);
}

static double sigmoid(double x) {
  return 1.0 / (1.0 + exp(-x));
}

/* rng (rng actor) -> sgemm (blas) -> sigmoid in place (nn) -> read (mem) -> fill (mem, after the
 * read: write-after-read) -> read; and the input matrix read back in between. */
TEST(chain_across_kernel_actors) {
  accel_ctx *ctx = ctx_open(NULL);
  size_t n = (size_t)test_scaled(384, 96);
  float *b = rnd_floats(n * n, -1, 1), *ha = xmalloc(n * n * 4);
  float *c1 = xmalloc(n * n * 4), *c2 = xmalloc(n * n * 4);
  accel_buffer A = buf_new(ctx, ACCEL_F32, n * n), B = buf_new(ctx, ACCEL_F32, n * n);
  accel_buffer C = buf_new(ctx, ACCEL_F32, n * n);
  accel_rng spec = {.dist = ACCEL_DIST_UNIFORM, .seed = rnd64()};
  CHECK_OK(accel_write(ctx, B, 0, b, n * n, NULL));
  CHECK_OK(accel_rng_fill(ctx, 0, A, &spec, NULL));
  CHECK_OK(accel_read(ctx, A, 0, ha, n * n, NULL));
  CHECK_OK(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f / (float)n, A, n, B, n,
                       0.0f, C, n, NULL));
  CHECK_OK(accel_sigmoid(ctx, 0, C, C, NULL));
  CHECK_OK(accel_read(ctx, C, 0, c1, n * n, NULL));
  CHECK_OK(accel_fill_f32(ctx, 0, C, 7.0f, NULL));
  CHECK_OK(accel_read(ctx, C, 0, c2, n * n, NULL));
  CHECK_OK(accel_finish(ctx, -1));
  for (size_t i = 0; i < n * n; i++)
    if (!(ha[i] > 0.0f && ha[i] <= 1.0f))
      TEST_FAIL("A[%zu] = %g: not a uniform draw (read before the fill finished?)", i,
                (double)ha[i]);
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < n; i++) {
      double s = 0;
      for (size_t l = 0; l < n; l++)
        s += (double)ha[i + l * n] * b[l + j * n];
      check_near("sigmoid(A B / n)", i + j * n, c1[i + j * n], sigmoid(s / (double)n), 1e-5);
    }
  for (size_t i = 0; i < n * n; i++)
    check_near("C after the fill", i, c2[i], 7.0, 0);
  accel_close(ctx);
  free(b);
  free(ha);
  free(c1);
  free(c2);
}

/* write, read, overwrite, read — on the host, and with the buffer's data on a device (the read
 * and the overwrite then run there). */
TEST(write_read_overwrite_read) {
  accel_ctx *ctx = ctx_open(NULL);
  size_t n = (size_t)test_scaled(1 << 20, 1 << 16);
  for (int on_device = 0; on_device < 2; on_device++) {
    uint32_t *d1 = xmalloc(n * 4), *d2 = xmalloc(n * 4), *o1 = xmalloc(n * 4);
    uint32_t *o2 = xmalloc(n * 4), *o3 = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) {
      d1[i] = rnd32() | 1;
      d2[i] = ~d1[i];
    }
    accel_buffer X = buf_new(ctx, ACCEL_U32, n), Y = buf_new(ctx, ACCEL_U32, n);
    CHECK_OK(accel_write(ctx, X, 0, d1, n, NULL));
    if (on_device) { /* X's data moves to device 0 (a copy there), then lives only there */
      CHECK_OK(accel_copy(ctx, 0, Y, 0, X, 0, n, NULL));
      CHECK_OK(accel_copy(ctx, 0, X, 0, Y, 0, n, NULL));
    }
    CHECK_OK(accel_read(ctx, X, 0, o1, n, NULL));
    CHECK_OK(accel_write(ctx, X, 0, d2, n, NULL));
    CHECK_OK(accel_read(ctx, X, 0, o2, n, NULL));
    CHECK_OK(accel_write(ctx, X, n / 2, d1, n - n / 2, NULL)); /* and a partial one */
    CHECK_OK(accel_read(ctx, X, 0, o3, n, NULL));
    CHECK_OK(accel_finish(ctx, -1));
    for (size_t i = 0; i < n; i++) {
      if (o1[i] != d1[i] || o2[i] != d2[i])
        TEST_FAIL("%s: element %zu: first read 0x%08" PRIx32 " (want 0x%08" PRIx32 "), second "
                  "0x%08" PRIx32 " (want 0x%08" PRIx32 ")",
                  on_device ? "device" : "host", i, o1[i], d1[i], o2[i], d2[i]);
      uint32_t want3 = i < n / 2 ? d2[i] : d1[i - n / 2];
      if (o3[i] != want3)
        TEST_FAIL("after the partial overwrite: element %zu = 0x%08" PRIx32 ", want 0x%08" PRIx32,
                  i, o3[i], want3);
    }
    CHECK_OK(accel_buffer_destroy(ctx, X));
    CHECK_OK(accel_buffer_destroy(ctx, Y));
    free(d1);
    free(d2);
    free(o1);
    free(o2);
    free(o3);
  }
  accel_close(ctx);
}

/* Two devices in turns on the same two buffers: y += a_i x (blas) and x = tanh(y) (nn),
 * alternating devices, so every step needs the other device's result. */
TEST(two_devices_in_turns) {
  accel_ctx *ctx = ctx_open("embedded:?cpu_devices=2");
  size_t n = (size_t)test_scaled(1 << 18, 1 << 14);
  const int steps = 24;
  float *x0 = rnd_floats(n, -1, 1), *y0 = rnd_floats(n, -1, 1);
  float *xo = xmalloc(n * 4), *yo = xmalloc(n * 4), a[24];
  accel_buffer X = buf_new(ctx, ACCEL_F32, n), Y = buf_new(ctx, ACCEL_F32, n);
  CHECK_OK(accel_write(ctx, X, 0, x0, n, NULL));
  CHECK_OK(accel_write(ctx, Y, 0, y0, n, NULL));
  for (int s = 0; s < steps; s++) {
    accel_device dev = s % 2;
    a[s] = rnd_float(0.25f, 1.0f) * (rnd64() & 1 ? 1.0f : -1.0f);
    if (s % 3 == 2)
      CHECK_OK(accel_tanh(ctx, dev, X, Y, NULL));
    else
      CHECK_OK(accel_saxpy(ctx, dev, n, a[s], X, Y, NULL));
  }
  CHECK_OK(accel_read(ctx, X, 0, xo, n, NULL));
  CHECK_OK(accel_read(ctx, Y, 0, yo, n, NULL));
  CHECK_OK(accel_finish(ctx, -1));
  for (size_t i = 0; i < n; i++) {
    double x = x0[i], y = y0[i];
    for (int s = 0; s < steps; s++) {
      if (s % 3 == 2)
        x = tanh(y);
      else
        y += a[s] * x;
    }
    check_near("x", i, xo[i], x, 1e-4);
    check_near("y", i, yo[i], y, 1e-4);
  }
  accel_close(ctx);
  free(x0);
  free(y0);
  free(xo);
  free(yo);
}

/* Write-after-write and write-after-read across devices and actors: a long rng fill on device
 * 0 then a short fill on device 1 (the fill must win); an sgemm on device 0 reading A, then A
 * overwritten on device 1 (the sgemm must see the old A). */
TEST(waw_and_war_across_devices) {
  accel_ctx *ctx = ctx_open("embedded:?cpu_devices=2");
  size_t big = (size_t)test_scaled(1 << 21, 1 << 16), n = (size_t)test_scaled(256, 64);
  float *out = xmalloc(big * 4), *a = rnd_floats(n * n, -1, 1), *b = rnd_floats(n * n, -1, 1);
  accel_buffer R = buf_new(ctx, ACCEL_F32, big);
  accel_rng spec = {.dist = ACCEL_DIST_NORMAL, .seed = rnd64(), .stddev = 1};
  CHECK_OK(accel_rng_fill(ctx, 0, R, &spec, NULL));
  CHECK_OK(accel_fill_f32(ctx, 1, R, 5.0f, NULL));
  CHECK_OK(accel_read(ctx, R, 0, out, big, NULL));
  accel_buffer A = buf_new(ctx, ACCEL_F32, n * n), B = buf_new(ctx, ACCEL_F32, n * n);
  accel_buffer C = buf_new(ctx, ACCEL_F32, n * n);
  float *c = xmalloc(n * n * 4), *ao = xmalloc(n * n * 4);
  CHECK_OK(accel_write(ctx, A, 0, a, n * n, NULL));
  CHECK_OK(accel_write(ctx, B, 0, b, n * n, NULL));
  CHECK_OK(accel_sgemm(ctx, 0, ACCEL_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n,
                       NULL));
  CHECK_OK(accel_fill_f32(ctx, 1, A, 0.0f, NULL));
  CHECK_OK(accel_read(ctx, C, 0, c, n * n, NULL));
  CHECK_OK(accel_read(ctx, A, 0, ao, n * n, NULL));
  CHECK_OK(accel_finish(ctx, -1));
  for (size_t i = 0; i < big; i++)
    check_near("R after rng fill then fill", i, out[i], 5.0, 0);
  for (size_t i = 0; i < n * n; i++)
    check_near("A after the fill", i, ao[i], 0.0, 0);
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < n; i++) {
      double s = 0, mag = 0;
      for (size_t l = 0; l < n; l++) {
        s += (double)a[l + i * n] * b[l + j * n];
        mag += fabs((double)a[l + i * n] * b[l + j * n]);
      }
      check_near("A^T B", i + j * n, c[i + j * n], s, 2.0 * (double)(n + 2) * 1.2e-7 * mag);
    }
  accel_close(ctx);
  free(out);
  free(a);
  free(b);
  free(c);
  free(ao);
}

/* The same hazards on one device, where reader and writer share a replica but run on
 * different kernel actors: an sgemm (blas) reading A and B, then A filled (mem) and B refilled
 * by the generator (rng) — the sgemm must see the old A and B; a long rng fill, then a fill
 * (mem) — the fill must win. */
TEST(war_and_waw_on_one_device) {
  accel_ctx *ctx = ctx_open(NULL);
  size_t n = (size_t)test_scaled(384, 96), big = (size_t)test_scaled(1 << 21, 1 << 16);
  float *a = rnd_floats(n * n, -1, 1), *b = rnd_floats(n * n, -1, 1);
  float *c = xmalloc(n * n * 4), *ao = xmalloc(n * n * 4), *out = xmalloc(big * 4);
  accel_buffer A = buf_new(ctx, ACCEL_F32, n * n), B = buf_new(ctx, ACCEL_F32, n * n);
  accel_buffer C = buf_new(ctx, ACCEL_F32, n * n), R = buf_new(ctx, ACCEL_F32, big);
  accel_rng uni = {.dist = ACCEL_DIST_UNIFORM, .seed = rnd64()};
  accel_rng nrm = {.dist = ACCEL_DIST_NORMAL, .seed = rnd64(), .stddev = 1};
  CHECK_OK(accel_write(ctx, A, 0, a, n * n, NULL));
  CHECK_OK(accel_write(ctx, B, 0, b, n * n, NULL));
  CHECK_OK(accel_sgemm(ctx, 0, ACCEL_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n,
                       NULL));
  CHECK_OK(accel_fill_f32(ctx, 0, A, 0.0f, NULL));
  CHECK_OK(accel_rng_fill(ctx, 0, B, &uni, NULL));
  CHECK_OK(accel_rng_fill(ctx, 0, R, &nrm, NULL));
  CHECK_OK(accel_fill_f32(ctx, 0, R, 5.0f, NULL));
  CHECK_OK(accel_read(ctx, C, 0, c, n * n, NULL));
  CHECK_OK(accel_read(ctx, A, 0, ao, n * n, NULL));
  CHECK_OK(accel_read(ctx, R, 0, out, big, NULL));
  CHECK_OK(accel_finish(ctx, -1));
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < n; i++) {
      double s = 0, mag = 0;
      for (size_t l = 0; l < n; l++) {
        s += (double)a[l + i * n] * b[l + j * n];
        mag += fabs((double)a[l + i * n] * b[l + j * n]);
      }
      check_near("A^T B (then A and B overwritten)", i + j * n, c[i + j * n], s,
                 2.0 * (double)(n + 2) * 1.2e-7 * mag);
    }
  for (size_t i = 0; i < n * n; i++)
    check_near("A after the fill", i, ao[i], 0.0, 0);
  for (size_t i = 0; i < big; i++)
    check_near("R after an rng fill then a fill", i, out[i], 5.0, 0);
  accel_close(ctx);
  free(a);
  free(b);
  free(c);
  free(ao);
  free(out);
}

/* Many independent chains at once (write -> op on device d -> op on the other -> read), and
 * the same from several threads at once, each on its own buffers. */
typedef struct chain {
  accel_ctx *ctx;
  size_t n;
  int count;
  uint64_t seed;
  int ndev;
} chain;

static void *run_chains(void *arg) {
  chain *c = arg;
  size_t count = (size_t)c->count;
  float **in = xmalloc(count * sizeof *in), **out = xmalloc(count * sizeof *out);
  accel_buffer *x = xmalloc(count * sizeof *x), *y = xmalloc(count * sizeof *y);
  uint64_t st = c->seed;
  for (int i = 0; i < c->count; i++) {
    in[i] = xmalloc(c->n * 4);
    out[i] = xmalloc(c->n * 4);
    for (size_t j = 0; j < c->n; j++) {
      st = st * 6364136223846793005ull + 1442695040888963407ull;
      in[i][j] = (float)((double)(st >> 40) / (double)(1ull << 24)) * 8.0f - 4.0f;
    }
    x[i] = buf_new(c->ctx, ACCEL_F32, c->n);
    y[i] = buf_new(c->ctx, ACCEL_F32, c->n);
  }
  for (int i = 0; i < c->count; i++) {
    accel_device d = i % c->ndev, e = (i + 1) % c->ndev;
    CHECK_OK(accel_write(c->ctx, x[i], 0, in[i], c->n, NULL));
    CHECK_OK(accel_sigmoid(c->ctx, d, y[i], x[i], NULL));
    CHECK_OK(accel_saxpy(c->ctx, e, c->n, -1.0f, x[i], y[i], NULL)); /* y = sigmoid(x) - x */
    CHECK_OK(accel_read(c->ctx, y[i], 0, out[i], c->n, NULL));
  }
  for (int i = 0; i < c->count; i++) {
    accel_future *f = NULL; /* a read with a future after the fire-and-forget chain */
    float last = 0;
    CHECK_OK(accel_read(c->ctx, y[i], c->n - 1, &last, 1, &f));
    WAIT_OK(f);
    check_near("last element", (size_t)i, last, sigmoid(in[i][c->n - 1]) - in[i][c->n - 1], 1e-6);
  }
  for (int i = 0; i < c->count; i++) {
    for (size_t j = 0; j < c->n; j++)
      check_near("sigmoid(x) - x", j, out[i][j], sigmoid(in[i][j]) - in[i][j], 1e-6);
    CHECK_OK(accel_buffer_destroy(c->ctx, x[i]));
    CHECK_OK(accel_buffer_destroy(c->ctx, y[i]));
    free(in[i]);
    free(out[i]);
  }
  free(in);
  free(out);
  free(x);
  free(y);
  return NULL;
}

TEST(many_independent_chains) {
  accel_ctx *ctx = ctx_open("embedded:?cpu_devices=2");
  chain c = {ctx, (size_t)test_scaled(20000, 2000), (int)test_scaled(64, 16), rnd64(), 2};
  run_chains(&c);
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
}

TEST(chains_from_several_threads) {
  accel_ctx *ctx = ctx_open("embedded:?cpu_devices=2");
  enum { THREADS = 4 };
  pthread_t th[THREADS];
  chain c[THREADS];
  for (int t = 0; t < THREADS; t++) {
    c[t] = (chain){ctx, (size_t)test_scaled(10000, 1000), (int)test_scaled(24, 6), rnd64(), 2};
    CHECK_EQ(pthread_create(&th[t], NULL, run_chains, &c[t]), 0);
  }
  for (int t = 0; t < THREADS; t++)
    CHECK_EQ(pthread_join(th[t], NULL), 0);
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
}

/* accel_finish with nothing in flight returns 0 at once, again and again. */
TEST(finish_when_idle) {
  accel_ctx *ctx = ctx_open(NULL);
  CHECK_OK(accel_finish(ctx, -1));
  CHECK_OK(accel_finish(ctx, 0));
  accel_buffer b = buf_new(ctx, ACCEL_U32, 4);
  CHECK_OK(accel_fill_u32(ctx, 0, b, 1, NULL));
  CHECK_OK(accel_finish(ctx, -1));
  CHECK_OK(accel_finish(ctx, 0));
  accel_close(ctx);
}

static const test_case tests[] = {
    TEST_CASE(chain_across_kernel_actors),  TEST_CASE(write_read_overwrite_read),
    TEST_CASE(two_devices_in_turns),        TEST_CASE(waw_and_war_across_devices),
    TEST_CASE(war_and_waw_on_one_device),   TEST_CASE(many_independent_chains),
    TEST_CASE(chains_from_several_threads), TEST_CASE(finish_when_idle),
};

TEST_MAIN(tests)
