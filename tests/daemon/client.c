/* libaccel's remote client against a daemon that goes away: every pending op completes with
 * ACCEL_ECLOSED (or had completed before), accel_finish returns, later ops fail with
 * ACCEL_ECLOSED, and closing the context does not hang. */
#include <signal.h>

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

TEST(lost_daemon_fails_pending_ops) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, d.url));
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

static const test_case tests[] = {
    TEST_CASE(lost_daemon_fails_pending_ops),
};

TEST_MAIN(tests)
