/* api-faults: device faults through the test-only fault injection (docs/ARCHITECTURE.md "Faults").
 *
 *   - without fault_injection=1 in the URL, accel_inject_fault is refused (ACCEL_EPERM);
 *   - with ops in flight, a fault completes every one of them with ACCEL_EDEVLOST or success
 *     (none hangs: the watchdog would name the test); an op that succeeded produced correct
 *     data;
 *   - the device restarts (restarts == 1, state back to 0 after a wait loop);
 *   - buffers that also had a valid host copy survive, bit for bit; buffers whose only copy was
 *     on the device report ACCEL_EDATALOST on their next use (and keep doing so until they are
 *     overwritten whole); later ops succeed;
 *   - past the restart intensity (max_restarts=2, a third fault) the device is quarantined
 *     (state 2): its ops fail with ACCEL_EDEVLOST, while the other device keeps working.
 * Device states (accel_device_info.state): 0 serving, 1 restarting, 2 quarantined. */
#include <math.h>

#include "api_util.h"

/* C = A B for n x n column-major matrices, in double. */
static void ref_gemm(const float *a, const float *b, double *c, size_t n) {
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < n; i++) {
      double s = 0;
      for (size_t l = 0; l < n; l++)
        s += (double)a[i + l * n] * b[l + j * n];
      c[i + j * n] = s;
    }
}

static void check_gemm(const char *what, const float *got, const double *want, size_t n) {
  for (size_t i = 0; i < n * n; i++)
    if (!(fabs(got[i] - want[i]) <= 2.0 * (double)(n + 2) * 1.2e-7 * (double)n))
      TEST_FAIL("%s[%zu] = %.9g, want %.9g", what, i, (double)got[i], want[i]);
}

static int inject(accel_ctx *ctx, accel_device dev) {
  return accel_inject_fault(ctx, dev);
}

TEST(inject_refused_without_opt_in) {
  accel_ctx *ctx = ctx_open(NULL);
  CHECK_ERR(inject(ctx, 0), ACCEL_EPERM);
  accel_close(ctx);
  ctx = ctx_open("embedded:?fault_injection=0");
  CHECK_ERR(inject(ctx, 0), ACCEL_EPERM);
  struct accel_device_info info;
  CHECK_OK(accel_device_info(ctx, 0, &info));
  CHECK_EQ(info.state, 0);
  CHECK_EQ(info.restarts, 0);
  accel_close(ctx);
}

/* A fault with a pipeline of large sgemms (blas), sigmoids waiting on them (nn) and reads of
 * the results (mem) in flight. */
TEST(fault_with_ops_in_flight) {
  accel_ctx *ctx = ctx_open("embedded:?fault_injection=1");
  size_t n = (size_t)test_scaled(512, 128);
  enum { OPS = 10 };
  float *a = rnd_floats(n * n, -1, 1), *b = rnd_floats(n * n, -1, 1), *h = rnd_floats(n, -1, 1);
  double *want = xmalloc(n * n * sizeof *want);
  ref_gemm(a, b, want, n);
  accel_buffer A = buf_from(ctx, ACCEL_F32, a, n * n), B = buf_from(ctx, ACCEL_F32, b, n * n);
  accel_buffer H = buf_from(ctx, ACCEL_F32, h, n); /* host data, only read on the device */
  accel_buffer C[OPS], S[OPS], HS = buf_new(ctx, ACCEL_F32, n);
  accel_future *fg[OPS], *fs[OPS], *fr[OPS];
  float *out[OPS];
  CHECK_OK(accel_relu(ctx, 0, HS, H, NULL)); /* H now valid on the host and the device */
  CHECK_OK(accel_finish(ctx, -1));
  /* Every replica the loop below uses exists first (a write makes the host's, a fill the
   * device's, a gemm A's and B's there), so that its ops are planned and on the device at once,
   * not held while a worker allocates their memory: the fault meets them in flight. */
  accel_buffer warm = buf_new(ctx, ACCEL_F32, n * n);
  CHECK_OK(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, B, n, 0.0f,
                       warm, n, NULL));
  float *zeros = calloc(n * n, sizeof *zeros);
  CHECK(zeros != NULL);
  for (int i = 0; i < OPS; i++) {
    C[i] = buf_from(ctx, ACCEL_F32, zeros, n * n);
    S[i] = buf_new(ctx, ACCEL_F32, n * n);
    CHECK_OK(accel_fill(ctx, 0, C[i], 0.0, NULL));
    CHECK_OK(accel_fill(ctx, 0, S[i], 0.0, NULL));
  }
  CHECK_OK(accel_finish(ctx, -1));
  free(zeros);
  for (int i = 0; i < OPS; i++) {
    out[i] = xmalloc(n * n * 4);
    CHECK_OK(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, B, n, 0.0f,
                         C[i], n, &fg[i]));
    CHECK_OK(accel_sigmoid(ctx, 0, S[i], C[i], &fs[i]));
    CHECK_OK(accel_read(ctx, C[i], 0, out[i], n * n, &fr[i]));
    CHECK_OK(accel_sgemm(ctx, 0, ACCEL_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, B, n, 0.0f, S[i],
                         n, NULL)); /* fire-and-forget, overwriting S[i] after the sigmoid */
  }
  CHECK_OK(inject(ctx, 0));
  int lost = 0, ok = 0;
  for (int i = 0; i < OPS; i++) {
    int st[3] = {fut_status(fg[i]), fut_status(fs[i]), fut_status(fr[i])};
    for (int j = 0; j < 3; j++) {
      if (st[j] != 0 && st[j] != ACCEL_EDEVLOST)
        TEST_FAIL("op %d.%d in flight during the fault: %s, want OK or EDEVLOST", i, j,
                  accel_err_name(st[j]));
      lost += st[j] != 0;
      ok += st[j] == 0;
    }
    if (st[2] == 0) /* the read got through before the fault: its data is right */
      check_gemm("C read before the fault", out[i], want, n);
  }
  printf("# in flight during the fault: %d ok, %d device lost\n", ok, lost);
  int frc = accel_finish(ctx, -1);
  if (frc != 0)
    CHECK_ERR(frc, ACCEL_EDEVLOST);
  CHECK_OK(accel_finish(ctx, -1)); /* the first error is reported once */

  struct accel_device_info info;
  device_wait(ctx, 0, 0, 1, &info);
  CHECK_EQ(info.restarts, 1);
  CHECK_EQ(info.state, 0);

  /* Host data survives: A, B (written by the client, only read on the device) and H. */
  float *back = xmalloc(n * n * 4);
  read_sync(ctx, A, 0, back, n * n);
  CHECK(memcmp(back, a, n * n * 4) == 0);
  read_sync(ctx, H, 0, back, n);
  CHECK(memcmp(back, h, n * 4) == 0);
  /* Device-only data is lost: every C and S, whether its producer finished or not. */
  for (int i = 0; i < OPS; i++) {
    accel_future *f = NULL;
    CHECK_OK(accel_read(ctx, C[i], 0, back, n * n, &f));
    CHECK_ERR(fut_status(f), ACCEL_EDATALOST);
    CHECK_OK(accel_relu(ctx, 0, S[i], S[i], &f));
    CHECK_ERR(fut_status(f), ACCEL_EDATALOST);
    CHECK_OK(accel_read(ctx, S[i], 0, back, 1, &f)); /* still lost: the data is gone */
    CHECK_ERR(fut_status(f), ACCEL_EDATALOST);
  }
  int frc2 = accel_finish(ctx, -1); /* the first error since the last finish, if it counts
                                     * ops with futures too */
  if (frc2 != 0)
    CHECK_ERR(frc2, ACCEL_EDATALOST);

  /* Later ops succeed: on the surviving inputs, and on a lost buffer written whole again. */
  accel_future *f = NULL;
  CHECK_OK(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, B, n, 0.0f,
                       C[0], n, &f));
  WAIT_OK(f);
  read_sync(ctx, C[0], 0, back, n * n);
  check_gemm("C after the restart", back, want, n);
  write_sync(ctx, S[1], 0, a, n * n);
  read_sync(ctx, S[1], 0, back, n * n);
  CHECK(memcmp(back, a, n * n * 4) == 0);
  CHECK_OK(accel_sigmoid(ctx, 0, HS, H, &f));
  WAIT_OK(f);
  read_sync(ctx, HS, 0, back, n);
  for (size_t i = 0; i < n; i++)
    CHECK(fabsf(back[i] - (float)(1.0 / (1.0 + exp(-(double)h[i])))) <= 1e-6f);
  CHECK_OK(accel_device_info(ctx, 0, &info));
  CHECK_EQ(info.restarts, 1);
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
  for (int i = 0; i < OPS; i++)
    free(out[i]);
  free(a);
  free(b);
  free(h);
  free(want);
  free(back);
}

/* After a fault the device's memory node starts empty: host data used there again is copied
 * over again (once), data that was only there is lost. */
TEST(restart_drops_device_replicas) {
  accel_ctx *ctx = ctx_open("embedded:?fault_injection=1");
  size_t n = 4096, bytes = n * 4;
  float *x = rnd_floats(n, -1, 1), *out = xmalloc(bytes);
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), Y = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  CHECK_OK(accel_relu(ctx, 0, Y, X, &f));
  WAIT_OK(f);
  accel_transfer_stats s0, s1;
  stats(ctx, &s0);
  CHECK_EQ(s0.host_to_device, bytes);
  CHECK_OK(inject(ctx, 0));
  struct accel_device_info info;
  device_wait(ctx, 0, 0, 1, &info);
  CHECK_OK(accel_relu(ctx, 0, Y, X, &f));
  WAIT_OK(f);
  stats(ctx, &s1);
  CHECK_EQ(s1.host_to_device - s0.host_to_device, bytes);
  CHECK_EQ(s1.device_to_host, s0.device_to_host);
  read_sync(ctx, Y, 0, out, n);
  for (size_t i = 0; i < n; i++)
    CHECK(out[i] == (x[i] > 0 ? x[i] : 0.0f));
  accel_close(ctx);
  free(x);
  free(out);
}

/* A fault on one device leaves the other's data and work alone. */
TEST(fault_on_one_device_spares_the_other) {
  accel_ctx *ctx = ctx_open("embedded:?fault_injection=1&cpu_devices=2");
  size_t n = 4096;
  float *x = rnd_floats(n, -1, 1), *out = xmalloc(n * 4);
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, n);
  accel_buffer Y0 = buf_new(ctx, ACCEL_F32, n), Y1 = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  CHECK_OK(accel_relu(ctx, 0, Y0, X, &f));
  WAIT_OK(f);
  CHECK_OK(accel_relu(ctx, 1, Y1, X, &f));
  WAIT_OK(f);
  CHECK_OK(inject(ctx, 1));
  struct accel_device_info info;
  device_wait(ctx, 1, 0, 1, &info);
  CHECK_OK(accel_device_info(ctx, 0, &info));
  CHECK_EQ(info.restarts, 0);
  CHECK_EQ(info.state, 0);
  read_sync(ctx, Y0, 0, out, n); /* only on device 0: intact */
  for (size_t i = 0; i < n; i++)
    CHECK(out[i] == (x[i] > 0 ? x[i] : 0.0f));
  CHECK_OK(accel_read(ctx, Y1, 0, out, n, &f)); /* only on device 1: lost */
  CHECK_ERR(fut_status(f), ACCEL_EDATALOST);
  accel_close(ctx);
  free(x);
  free(out);
}

/* max_restarts=2: two faults are restarted, the third quarantines device 0. Its ops then fail
 * with ACCEL_EDEVLOST in their futures; device 1 (and ACCEL_DEVICE_ANY) keeps working. */
TEST(restart_intensity_quarantines) {
  accel_ctx *ctx = ctx_open("embedded:?fault_injection=1&max_restarts=2&cpu_devices=2");
  size_t n = (size_t)test_scaled(128, 64);
  float *a = rnd_floats(n * n, -1, 1), *b = rnd_floats(n * n, -1, 1);
  float *out = xmalloc(n * n * 4);
  double *want = xmalloc(n * n * sizeof *want);
  ref_gemm(a, b, want, n);
  accel_buffer A = buf_from(ctx, ACCEL_F32, a, n * n), B = buf_from(ctx, ACCEL_F32, b, n * n);
  accel_buffer C = buf_new(ctx, ACCEL_F32, n * n), D1 = buf_new(ctx, ACCEL_F32, n * n);
  accel_future *f = NULL;
  CHECK_OK(accel_sgemm(ctx, 1, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, B, n, 0.0f, D1,
                       n, &f)); /* data that lives on device 1 only */
  WAIT_OK(f);
  struct accel_device_info info;
  for (uint32_t r = 1; r <= 2; r++) {
    CHECK_OK(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, B, n, 0.0f, C,
                         n, NULL));
    CHECK_OK(inject(ctx, 0));
    device_wait(ctx, 0, 0, r, &info);
    CHECK_EQ(info.restarts, r);
  }
  CHECK_OK(inject(ctx, 0));
  device_wait(ctx, 0, 2, 0, &info);
  CHECK_EQ(info.state, 2);
  CHECK_EQ(info.restarts, 2);
  int rc = accel_finish(ctx, -1);
  if (rc != 0)
    CHECK_ERR(rc, ACCEL_EDEVLOST);

  /* Ops sent to the quarantined device: the call takes them, the future says device lost. */
  CHECK_OK(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, B, n, 0.0f, C,
                       n, &f));
  CHECK_ERR(fut_status(f), ACCEL_EDEVLOST);
  CHECK_OK(accel_fill_f32(ctx, 0, C, 1.0f, &f));
  CHECK_ERR(fut_status(f), ACCEL_EDEVLOST);
  CHECK_OK(accel_relu(ctx, 0, C, A, NULL));
  CHECK_ERR(accel_finish(ctx, -1), ACCEL_EDEVLOST);

  /* The other device keeps working, and keeps its data. */
  read_sync(ctx, D1, 0, out, n * n);
  check_gemm("device 1 data after device 0's quarantine", out, want, n);
  CHECK_OK(accel_sgemm(ctx, 1, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, B, n, 0.0f, C,
                       n, &f));
  WAIT_OK(f);
  read_sync(ctx, C, 0, out, n * n);
  check_gemm("sgemm on device 1", out, want, n);
  CHECK_OK(accel_sgemm(ctx, ACCEL_DEVICE_ANY, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n,
                       B, n, 0.0f, C, n, &f));
  WAIT_OK(f);
  read_sync(ctx, C, 0, out, n * n);
  check_gemm("sgemm on any device", out, want, n);
  CHECK_OK(accel_device_info(ctx, 1, &info));
  CHECK_EQ(info.state, 0);
  CHECK_EQ(info.restarts, 0);
  CHECK_OK(accel_device_info(ctx, 0, &info));
  CHECK_EQ(info.state, 2);
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
  free(a);
  free(b);
  free(out);
  free(want);
}

static const test_case tests[] = {
    TEST_CASE(inject_refused_without_opt_in), TEST_CASE(fault_with_ops_in_flight),
    TEST_CASE(restart_drops_device_replicas), TEST_CASE(fault_on_one_device_spares_the_other),
    TEST_CASE(restart_intensity_quarantines),
};

TEST_MAIN(tests)
