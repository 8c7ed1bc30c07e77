/* libaccel's nng link (clients/remote_nng.c) at its bounds, against a real acceld on
 * tls+tcp:// (nng's transport; tcp:// is acceld's own stream, tests/daemon/tcp.c):
 * - it keeps at most WELCOME's max_in_flight ops unanswered (an nng pipe cannot be paused, so
 *   the daemon would refuse more with ACCEL_EBUSY): that many calls return at once, the next
 *   one waits for an answer, and none is refused;
 * - a sender waiting for room is released when the daemon dies, and every op fails with
 *   ACCEL_ECLOSED;
 * - frames sent while a message is in flight are gathered into the next one, never more than
 *   the daemon's max_message (nng closes a connection whose message is larger than that plus
 *   64 bytes): frames that fill it exactly, and frames four of which would pass that.
 *
 * The daemon is stopped (SIGSTOP) while ops are issued, so nothing is answered meanwhile: a
 * call that returns then did not wait for an answer, one that has not returned after a while
 * waits (a bug would return at once). */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "accel/accel.h"
#include "util.h"

/* One fill issued on a thread of its own, to see whether the call waits. */
typedef struct issuer {
  accel_ctx *ctx;
  accel_buffer b;
  accel_future *f;
  int rc;
  atomic_bool returned;
} issuer;

static void *issue_fill(void *arg) {
  issuer *is = arg;
  is->rc = accel_fill_u32(is->ctx, 0, is->b, 7, &is->f);
  atomic_store(&is->returned, true);
  return NULL;
}

#define MAX_IN_FLIGHT 16

/* A daemon with max_in_flight = 16, stopped; MAX_IN_FLIGHT fills sent (they return: the
 * daemon is stopped), and a thread issuing one more, which waits: no answer can have come. */
static void window_full(td_daemon *d, accel_ctx **ctx, accel_buffer *b, accel_future **f,
                        issuer *is, pthread_t *t) {
  char url[64];
  td_start_nng(d, "[limits]\nmax_in_flight = 16\n", url, sizeof url);
  *ctx = NULL;
  CHECK_OK(accel_open(ctx, url));
  CHECK_OK(accel_buffer_create(*ctx, ACCEL_U32, 1, b));
  CHECK_OK(accel_finish(*ctx, -1));
  td_signal(d, SIGSTOP);
  for (int i = 0; i < MAX_IN_FLIGHT; i++)
    CHECK_OK(accel_fill_u32(*ctx, 0, *b, (uint32_t)i, &f[i]));
  *is = (issuer){.ctx = *ctx, .b = *b};
  CHECK_EQ(pthread_create(t, NULL, issue_fill, is), 0);
  test_sleep_ms(300);
  CHECK(!atomic_load(&is->returned));
}

/* At the limit: MAX_IN_FLIGHT fills return while the daemon is stopped. One past: the next
 * waits until the daemon answers. Every op then succeeds (without the client's bound, the
 * 17th is sent and refused with ACCEL_EBUSY). */
TEST(max_in_flight_ops_are_sent_and_one_more_waits_for_an_answer) {
  td_daemon d;
  accel_ctx *ctx;
  accel_buffer b;
  accel_future *f[MAX_IN_FLIGHT];
  issuer is;
  pthread_t t;
  window_full(&d, &ctx, &b, f, &is, &t);
  td_signal(&d, SIGCONT);
  pthread_join(t, NULL);
  CHECK_OK(is.rc);
  for (int i = 0; i < MAX_IN_FLIGHT; i++) {
    CHECK_OK(accel_future_wait(f[i], -1));
    accel_future_release(f[i]);
  }
  CHECK_OK(accel_future_wait(is.f, -1));
  accel_future_release(is.f);
  uint32_t v = 0;
  CHECK_OK(accel_read(ctx, b, 0, &v, 1, NULL));
  CHECK_OK(accel_finish(ctx, -1));
  CHECK_EQ(v, 7); /* the last fill ran last */
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* A sender waiting for room when the daemon dies returns (ACCEL_ECLOSED, or 0 with its future
 * failing so), and every op in flight fails with ACCEL_ECLOSED. */
TEST(a_sender_waiting_for_room_is_released_when_the_daemon_dies) {
  td_daemon d;
  accel_ctx *ctx;
  accel_buffer b;
  accel_future *f[MAX_IN_FLIGHT];
  issuer is;
  pthread_t t;
  window_full(&d, &ctx, &b, f, &is, &t);
  td_signal(&d, SIGKILL);
  td_wait(&d);
  pthread_join(t, NULL); /* a hang here is the watchdog's */
  if (is.rc == 0) {
    CHECK_ERR(accel_future_wait(is.f, -1), ACCEL_ECLOSED);
    accel_future_release(is.f);
  } else {
    CHECK_ERR(is.rc, ACCEL_ECLOSED);
  }
  for (int i = 0; i < MAX_IN_FLIGHT; i++) {
    CHECK_ERR(accel_future_wait(f[i], -1), ACCEL_ECLOSED);
    accel_future_release(f[i]);
  }
  CHECK_ERR(accel_finish(ctx, -1), ACCEL_ECLOSED);
  accel_close(ctx);
  td_cleanup(&d);
}

/* WRITE frames of `data` bytes each (24 header + 32 op head + 32 buffer + 8 payload + data),
 * with max_message = 64 KiB, issued while the daemon is stopped for 300 ms: 32 MiB in all,
 * more than loopback's socket buffers hold, so they wait in the client and are gathered (the
 * sender waits too once the next message is full, until the daemon goes on). */
#define MAX_MESSAGE 65536
#define WRITE_FRAME(data) (96 + (data))
#define WRITES 2048

static void *continue_later(void *arg) {
  test_sleep_ms(300);
  td_signal(arg, SIGCONT);
  return NULL;
}

static void gathered_writes(size_t data) {
  td_daemon d;
  char url[64];
  td_start_nng(&d, "[limits]\nmax_message = 64K\n", url, sizeof url);
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, url));
  size_t n = data / 4;
  accel_buffer b;
  uint32_t *src = malloc(WRITES * n * 4), *dst = calloc(WRITES * n, 4);
  CHECK(src != NULL && dst != NULL);
  for (size_t i = 0; i < WRITES * n; i++)
    src[i] = (uint32_t)(i * 2654435761u) | 1u;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_U32, WRITES * n, &b));
  CHECK_OK(accel_finish(ctx, -1));
  td_signal(&d, SIGSTOP);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, continue_later, &d), 0);
  static accel_future *f[WRITES];
  for (size_t i = 0; i < WRITES; i++)
    CHECK_OK(accel_write(ctx, b, i * n, src + i * n, n, &f[i]));
  pthread_join(t, NULL);
  for (int i = 0; i < WRITES; i++) {
    CHECK_OK(accel_future_wait(f[i], -1)); /* a message over the limit: ECLOSED */
    accel_future_release(f[i]);
  }
  CHECK_OK(accel_read(ctx, b, 0, dst, WRITES * n, NULL)); /* in chunks */
  CHECK_OK(accel_finish(ctx, -1));
  CHECK(memcmp(src, dst, WRITES * n * 4) == 0);
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
  free(src);
  free(dst);
}

/* Four frames fill max_message exactly: they may leave as one message. */
TEST(gathered_frames_fill_max_message_exactly) {
  size_t data = MAX_MESSAGE / 4 - WRITE_FRAME(0);
  CHECK_EQ(4 * WRITE_FRAME(data), MAX_MESSAGE);
  gathered_writes(data);
}

/* Four frames five elements larger each would pass max_message, and by more than the 64
 * bytes the daemon's nng allows beyond it (so a message of four would close the connection):
 * three at most per message. */
TEST(gathered_frames_past_max_message_are_split) {
  size_t data = MAX_MESSAGE / 4 - WRITE_FRAME(0) + 20;
  CHECK_GT(4 * WRITE_FRAME(data), MAX_MESSAGE + 64);
  gathered_writes(data);
}

static const test_case tests[] = {
    TEST_CASE(max_in_flight_ops_are_sent_and_one_more_waits_for_an_answer),
    TEST_CASE(a_sender_waiting_for_room_is_released_when_the_daemon_dies),
    TEST_CASE(gathered_frames_fill_max_message_exactly),
    TEST_CASE(gathered_frames_past_max_message_are_split),
};

TEST_MAIN(tests)
