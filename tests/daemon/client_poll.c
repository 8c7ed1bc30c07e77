/* A client's waiting thread polls the socket before it sleeps (clients/remote_local_read.c),
 * unless its waits of late outlast the polling twice over; the polling comes back when they
 * shorten. Run with ACCEL_SPIN_US=5000 (meson: daemon-client-poll-backoff): the polling then
 * shows as the waiting thread's CPU time. Long waits are made by stopping acceld (SIGSTOP)
 * for 40 ms while an op is out. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "accel/accel.h"
#include "util.h"

enum { STOPPED_MS = 40, SPIN_US = 5000 };

static double thread_cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void *resume_later(void *arg) {
  td_daemon *d = arg;
  struct timespec pause = {.tv_nsec = STOPPED_MS * 1000000L};
  nanosleep(&pause, NULL);
  td_signal(d, SIGCONT);
  return NULL;
}

/* One fill waited for, acceld stopped meanwhile if `stop`: the waiting thread's CPU ms. */
static double wait_one(td_daemon *d, accel_ctx *ctx, accel_buffer b, bool stop) {
  pthread_t t;
  if (stop) {
    td_signal(d, SIGSTOP);
    CHECK_EQ(pthread_create(&t, NULL, resume_later, d), 0);
  }
  accel_future *f = NULL;
  CHECK_OK(accel_fill_f32(ctx, 0, b, 1.0f, &f));
  double before = thread_cpu_ms();
  CHECK_OK(accel_future_wait(f, -1));
  double used = thread_cpu_ms() - before;
  accel_future_release(f);
  if (stop)
    pthread_join(t, NULL);
  return used;
}

TEST(waiters_stop_polling_when_waits_outlast_it_and_start_again) {
  const char *env = getenv("ACCEL_SPIN_US");
  CHECK(env != NULL && atoi(env) == SPIN_US); /* what the CPU times below rest on */
  char spin[16];
  snprintf(spin, sizeof spin, "%s", env);
  /* acceld and its device worker without it: their threads would poll 5 ms per op too and
   * take CPU from the waiter measured here. The client reads it once, at its first use. */
  td_daemon d;
  td_prepare(&d);
  CHECK_EQ(unsetenv("ACCEL_SPIN_US"), 0);
  td_start(&d, NULL);
  CHECK_EQ(setenv("ACCEL_SPIN_US", spin, 1), 0);
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, d.url));
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, 16, &b));
  (void)wait_one(&d, ctx, b, false); /* the buffer made on the device */

  /* The first long wait polls for the whole spin time (less if the thread is descheduled). */
  double first = wait_one(&d, ctx, b, true);
  CHECK_GE(first, SPIN_US / 1000.0 / 4);
  /* Waits of 40 ms against a polling of 5 ms: after a few, no polling at all. */
  for (int i = 0; i < 12; i++)
    (void)wait_one(&d, ctx, b, true);
  double late = 0;
  for (int i = 0; i < 4; i++)
    late += wait_one(&d, ctx, b, true);
  CHECK_LT(late, SPIN_US / 1000.0 / 2); /* four waits that polled would use about 20 ms */

  /* Short waits bring it back: 60 quick fills take the mean far below 10 ms. */
  for (int i = 0; i < 60; i++)
    (void)wait_one(&d, ctx, b, false);
  double again = wait_one(&d, ctx, b, true);
  CHECK_GE(again, SPIN_US / 1000.0 / 4);

  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(waiters_stop_polling_when_waits_outlast_it_and_start_again),
};
TEST_MAIN(tests)
