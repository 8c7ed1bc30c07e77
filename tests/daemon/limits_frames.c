/* What a local client can make acceld hold while frames arrive, and for how long
 * (server/server_local.c): bytes of partly received frames across connections
 * (max_partial_bytes: later frames wait their turn, unread; one larger than it all is
 * ELIMIT), a peer that stops or trickles inside a frame (frame_idle_timeout_ms,
 * min_frame_rate), a peer that hangs up mid-frame, a frame over max_message, and new clients
 * at the descriptor limit (ACCEL_EBUSY, not a silent close). Every wait here is bounded by
 * what the property itself allows, a few seconds at most. */
#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "proto/local.h"
#include "util.h"

enum { MIB = 1 << 20 };

static void start(td_daemon *d, const char *config) {
  td_prepare(d);
  td_write_config(d, config);
  td_start(d, "--backends", "cpu", NULL);
}

static void stop(td_daemon *d) {
  CHECK_EQ(td_stop(d), 0);
  td_cleanup(d);
}

/* Whether the daemon reports `want` sessions within `ms` (they go asynchronously). */
static bool sessions_within(td_daemon *d, long want, int ms) {
  for (uint64_t t0 = test_now_ms(); td_status_field(d, "sessions") != want; test_sleep_ms(20))
    if (test_now_ms() - t0 > (uint64_t)ms)
      return false;
  return true;
}

/* The log is written before the peer sees the event, but may lag a little in the file. */
static void expect_log(td_daemon *d, const char *text) {
  for (uint64_t t0 = test_now_ms(); strstr(td_log(d), text) == NULL; test_sleep_ms(20))
    if (test_now_ms() - t0 > 3000)
      TEST_FAIL("no \"%s\" in the daemon's log within 3 s:\n%s", text, td_log(d));
}

static int count_in_log(td_daemon *d, const char *text) {
  int n = 0;
  for (const char *p = td_log(d); (p = strstr(p, text)) != NULL; p += strlen(text))
    n++;
  return n;
}

static long rss_kb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &kb) == 1)
      break;
  fclose(f);
  return kb;
}

/* A CONTROL frame of `total` bytes with request id `id`: a ping followed by zeros, which the
 * daemon answers ACCEL_EPROTO (trailing bytes) once it has it whole. Malloc'd. */
static uint8_t *control_frame(size_t total, uint64_t id) {
  uint8_t *buf = calloc(1, total);
  CHECK(buf != NULL);
  proto_out o;
  proto_control_req req = {PROTO_CTL_PING, 0};
  proto_out_init(&o);
  CHECK_OK(proto_encode_control(&o, id, &req));
  CHECK_LE(o.len, total);
  memcpy(buf, o.data, o.len);
  proto_out_free(&o);
  uint32_t body = (uint32_t)(total - PROTO_HEADER_SIZE);
  for (int i = 0; i < 4; i++)
    buf[12 + i] = (uint8_t)(body >> (8 * i));
  return buf;
}

/* The status of the next frame, a REPLY to `id`, within `ms`; fails otherwise. */
static int reply_within(td_client *c, uint64_t id, int ms) {
  nng_msg *m;
  int rv = td_recv(c, &m, ms);
  if (rv != 0)
    TEST_FAIL("no reply to %llu within %d ms: %s", (unsigned long long)id, ms, nng_strerror(rv));
  int status = td_reply_status(m, id, NULL);
  nng_msg_free(m);
  return status;
}

/* Sends what the socket takes now of bytes [*sent, len) without blocking. */
static void push(int fd, const uint8_t *bytes, size_t len, size_t *sent) {
  while (*sent < len) {
    ssize_t n = send(fd, bytes + *sent, len - *sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0)
      return;
    *sent += (size_t)n;
  }
}

typedef struct sender {
  td_client c;
  size_t sent, len; /* of frame */
} sender;

static int senders_done(const sender *s, int n) {
  int done = 0;
  for (int i = 0; i < n; i++)
    done += s[i].sent == s[i].len;
  return done;
}

/* Pushes every sender's bytes until all are sent or none moved for 300 ms (at most `ms` in
 * all); how many have sent all they meant to. */
static int push_all(sender *s, int n, const uint8_t *frame, int ms) {
  uint64_t t0 = test_now_ms(), moved = t0;
  while (senders_done(s, n) < n && test_now_ms() - moved < 300 &&
         test_now_ms() - t0 < (uint64_t)ms) {
    for (int i = 0; i < n; i++) {
      size_t before = s[i].sent;
      push(s[i].c.fd, frame, s[i].len, &s[i].sent);
      if (s[i].sent != before)
        moved = test_now_ms();
    }
    test_sleep_ms(5);
  }
  return senders_done(s, n);
}

/* ---- the budget across connections ---- */

/* Twelve clients each send all but the last byte of a 4 MiB frame; the budget holds two
 * such frames. Exactly two are read whole (the others wait, unread: their sockets fill),
 * the daemon grows by the budget, not by 48 MiB, and a well-behaved client is served
 * meanwhile. As the two finish, the next two are read. Before the budget every frame was
 * allocated and read as it came. */
TEST(partial_frames_across_connections_are_bounded_by_the_budget) {
  enum { N = 12, FRAME = 4 * MIB };
  td_daemon d;
  start(&d, "[limits]\nmax_message = 4M\nmax_partial_bytes = 8M\n");
  uint8_t *frame = control_frame(FRAME, 7);
  sender s[N];
  for (int i = 0; i < N; i++) {
    td_client_open(&s[i].c, d.url);
    CHECK_OK(td_hello(&s[i].c, NULL));
    s[i] = (sender){.c = s[i].c, .len = FRAME - 1};
  }
  td_served(&d);
  long rss0 = rss_kb(d.pid);
  int done = push_all(s, N, frame, 5000);
  long grown_mb = (rss_kb(d.pid) - rss0) / 1024;
  fprintf(stderr, "# %d of %d frames read while the others wait; daemon grew %ld MiB\n", done, N,
          grown_mb);
  CHECK_EQ(done, 2);
  CHECK_LT(grown_mb, 8 + 16); /* the budget, and slack for the allocator */
  td_served(&d);
  for (int i = 0; i < N; i++)
    if (s[i].sent == s[i].len) { /* the last byte: the frame is whole, answered, released */
      s[i].len = FRAME;
      push(s[i].c.fd, frame, s[i].len, &s[i].sent);
      CHECK_ERR(reply_within(&s[i].c, 7, 3000), ACCEL_EPROTO);
    }
  CHECK_EQ(push_all(s, N, frame, 5000), 4); /* the next two in line got their room */
  for (int i = 0; i < N; i++)
    td_client_close(&s[i].c);
  free(frame);
  CHECK(sessions_within(&d, 0, 3000));
  td_served(&d);
  stop(&d);
}

/* A frame of exactly max_partial_bytes is read and answered; one byte more could never fit:
 * ELIMIT (with its request id) and the connection closed, at once. Before, it was allocated
 * and waited for its body. */
TEST(a_frame_at_the_budget_and_one_byte_over) {
  td_daemon d;
  start(&d, "[limits]\nmax_message = 4M\nmax_partial_bytes = 1M\n");
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  uint8_t *frame = control_frame(MIB, 8);
  td_send_raw(&c, frame, MIB, 8);
  CHECK_ERR(reply_within(&c, 8, 5000), ACCEL_EPROTO);
  CHECK_OK(td_control(&c, PROTO_CTL_PING, 0)); /* still served */
  free(frame);
  frame = control_frame(MIB + 1, 9);
  td_send_raw(&c, frame, PROTO_HEADER_SIZE, 9); /* the header says it all */
  free(frame);
  CHECK_ERR(reply_within(&c, 9, 3000), ACCEL_ELIMIT);
  nng_msg *m;
  CHECK_EQ(td_recv(&c, &m, 3000), NNG_ECLOSED);
  td_client_close(&c);
  expect_log(&d, "frame over max_partial_bytes");
  td_served(&d);
  stop(&d);
}

/* One client holds the whole budget with all but the last byte of its frame; a second's
 * frame waits, unread. The first hangs up: within a second its session is gone and its room
 * is the second's, whose frame is then read and answered. */
TEST(a_peer_hanging_up_mid_frame_releases_its_room_at_once) {
  td_daemon d;
  start(&d, "[limits]\nmax_message = 4M\nmax_partial_bytes = 1M\n");
  uint8_t *frame = control_frame(MIB, 10);
  sender s[2];
  for (int i = 0; i < 2; i++) {
    td_client_open(&s[i].c, d.url);
    CHECK_OK(td_hello(&s[i].c, NULL));
    s[i] = (sender){.c = s[i].c, .len = i == 0 ? MIB - 1 : MIB};
  }
  CHECK_EQ(push_all(&s[0], 1, frame, 5000), 1);
  CHECK_EQ(push_all(&s[1], 1, frame, 5000), 0); /* waits for room */
  CHECK_EQ(td_status_field(&d, "sessions"), 2);
  uint64_t t0 = test_now_ms();
  td_client_close(&s[0].c);
  CHECK_EQ(push_all(&s[1], 1, frame, 1000), 1);
  CHECK_ERR(reply_within(&s[1].c, 10, 1000), ACCEL_EPROTO);
  CHECK(sessions_within(&d, 1, 1000));
  fprintf(stderr, "# room released and the waiting frame answered in %llu ms\n",
          (unsigned long long)(test_now_ms() - t0));
  expect_log(&d, "closed mid-frame");
  td_client_close(&s[1].c);
  free(frame);
  stop(&d);
}

/* Exactly max_message + 1: ELIMIT with the frame's request id, then the connection closes,
 * without reading the body (garbage.c's oversized_frames_are_refused, bounded). */
TEST(a_frame_one_byte_over_max_message_is_elimit_and_closed) {
  td_daemon d;
  start(&d, "[limits]\nmax_message = 1M\n");
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  uint8_t *frame = control_frame(MIB + 1, 11);
  td_send_raw(&c, frame, PROTO_HEADER_SIZE, 11);
  free(frame);
  CHECK_ERR(reply_within(&c, 11, 3000), ACCEL_ELIMIT);
  nng_msg *m;
  CHECK_EQ(td_recv(&c, &m, 3000), NNG_ECLOSED);
  td_client_close(&c);
  expect_log(&d, "frame over max_message");
  stop(&d);
}

/* ---- stalls and trickles inside a frame ---- */

/* Sends `len` bytes of `frame` after a HELLO, then nothing: the connection must be closed
 * frame_idle_timeout_ms (300) later, not before, and its session go (one other stays). */
static void stalled_after(td_daemon *d, const uint8_t *frame, size_t len) {
  td_client c;
  td_client_open(&c, d->url);
  CHECK_OK(td_hello(&c, NULL));
  td_send_raw(&c, frame, len, 12);
  uint64_t t0 = test_now_ms();
  nng_msg *m;
  CHECK_EQ(td_recv(&c, &m, 3000), NNG_ECLOSED);
  uint64_t ms = test_now_ms() - t0;
  fprintf(stderr, "# %zu bytes then silence: closed after %llu ms\n", len, (unsigned long long)ms);
  CHECK_GE(ms, 250); /* the timer's own granularity */
  td_client_close(&c);
  CHECK(sessions_within(d, 1, 2000));
}

/* Ops for 200 ms (whole frames: each arms and disarms the watch; its timer runs on), then
 * part of a frame and silence: the close still comes frame_idle_timeout_ms after the last
 * byte, not when a timer started for an earlier frame fires. */
TEST(a_stall_after_busy_frames_is_timed_from_its_last_byte) {
  td_daemon d;
  start(&d, "[limits]\nframe_idle_timeout_ms = 300\nmin_frame_rate = 0\nmax_message = 4M\n");
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 16));
  uint32_t v[16] = {0};
  for (uint64_t t0 = test_now_ms(); test_now_ms() - t0 < 200;)
    CHECK_OK(td_write_u32(&c, td_handle(1, 1), v, 16));
  uint8_t *small = control_frame(1024, 12);
  td_send_raw(&c, small, 100, 12);
  free(small);
  uint64_t t0 = test_now_ms();
  nng_msg *m;
  CHECK_EQ(td_recv(&c, &m, 3000), NNG_ECLOSED);
  uint64_t ms = test_now_ms() - t0;
  fprintf(stderr, "# busy 200 ms, then 100 bytes and silence: closed after %llu ms\n",
          (unsigned long long)ms);
  CHECK_GE(ms, 250);
  td_client_close(&c);
  stop(&d);
}

/* Half a header, half a small frame's body, half a large frame's body (its room released:
 * a frame of the whole budget is read right after). A client quiet between frames stays. */
TEST(a_peer_silent_inside_a_frame_is_closed_after_the_idle_timeout) {
  td_daemon d;
  start(&d, "[limits]\nframe_idle_timeout_ms = 300\nmin_frame_rate = 0\nmax_partial_bytes = 1M\n"
            "max_message = 4M\n"); /* no minimum rate: idleness alone */
  td_client quiet;
  td_client_open(&quiet, d.url);
  CHECK_OK(td_hello(&quiet, NULL));
  uint8_t *frame = control_frame(MIB, 12);
  stalled_after(&d, frame, 10);
  stalled_after(&d, frame, PROTO_HEADER_SIZE);
  uint8_t *small = control_frame(1024, 12);
  stalled_after(&d, small, 100);
  free(small);
  stalled_after(&d, frame, 300 << 10);
  CHECK_EQ(count_in_log(&d, "no byte for 300 ms inside a frame"), 4);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  td_send_raw(&c, frame, MIB, 12);
  CHECK_ERR(reply_within(&c, 12, 3000), ACCEL_EPROTO);
  td_client_close(&c);
  free(frame);
  CHECK_OK(td_control(&quiet, PROTO_CTL_PING, 0)); /* idle between frames for over a second */
  td_client_close(&quiet);
  stop(&d);
}

/* A byte every 50 ms is never idle for 400 ms, but a large frame must come at 1 MiB/s at
 * least over each 400 ms: the trickler is closed within a span or two. */
TEST(a_large_frame_trickled_below_the_minimum_rate_is_closed) {
  td_daemon d;
  start(&d, "[limits]\nframe_idle_timeout_ms = 400\nmin_frame_rate = 1M\nmax_message = 4M\n");
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  uint8_t *frame = control_frame(MIB, 13);
  size_t sent = 128 << 10;
  td_send_raw(&c, frame, sent, 13);
  uint64_t t0 = test_now_ms();
  nng_msg *m;
  int rv = NNG_ETIMEDOUT;
  while (rv == NNG_ETIMEDOUT && test_now_ms() - t0 < 3000) {
    if (send(c.fd, frame + sent, 1, MSG_NOSIGNAL) == 1)
      sent++;
    rv = td_recv(&c, &m, 50);
  }
  fprintf(stderr, "# trickled %zu bytes; closed after %llu ms\n", sent,
          (unsigned long long)(test_now_ms() - t0));
  CHECK_EQ(rv, NNG_ECLOSED);
  td_client_close(&c);
  free(frame);
  expect_log(&d, "frame arriving below min_frame_rate");
  td_served(&d);
  stop(&d);
}

/* ---- the descriptor limit ---- */

/* Starts acceld through a shell that sets its descriptor limits first (soft, hard). */
static void start_with_nofile(td_daemon *d, int soft, int hard) {
  td_prepare(d);
  char wrapper[160], saved[512];
  snprintf(wrapper, sizeof wrapper, "%s/acceld-nofile", d->dir);
  snprintf(saved, sizeof saved, "%s", getenv("ACCELD"));
  FILE *f = fopen(wrapper, "w");
  CHECK(f != NULL);
  fprintf(f, "#!/bin/sh\nulimit -S -n %d && ulimit -H -n %d && exec '%s' \"$@\"\n", soft, hard,
          saved);
  fclose(f);
  CHECK_EQ(chmod(wrapper, 0755), 0);
  CHECK_EQ(setenv("ACCELD", wrapper, 1), 0);
  td_start(d, "--backends", "cpu", NULL);
  CHECK_EQ(setenv("ACCELD", saved, 1), 0);
}

/* A new connection's first answer to its HELLO: 0 (WELCOME), the status of a REPLY about the
 * connection (request id 0), or 1 if it was closed unanswered. */
static int hello_answer(int fd) {
  proto_out o;
  proto_hello h = {.version = PROTO_VERSION, .name = "nofile"};
  proto_out_init(&o);
  CHECK_OK(proto_encode_hello(&o, 5, &h));
  if (proto_local_send(fd, o.data, o.len, -1) != 0) {
    /* refused before the HELLO was in: the answer is read below */
  }
  proto_out_free(&o);
  uint8_t *buf = NULL;
  size_t cap = 0;
  long long n = proto_local_recv_frame(fd, &buf, &cap, 1 << 20, 5000);
  CHECK_NE(n, ACCEL_ETIMEDOUT);
  int answer = 1;
  proto_header hd;
  if (n > 0) {
    CHECK_OK(proto_decode_header(buf, (size_t)n, UINT32_MAX, &hd));
    if (hd.type == PROTO_WELCOME) {
      answer = 0;
    } else {
      proto_bytes data;
      int32_t status;
      CHECK_EQ(hd.request_id, 0);
      CHECK_OK(proto_decode_reply(buf + PROTO_HEADER_SIZE, hd.body_len, &status, &data));
      answer = status;
    }
  }
  free(buf);
  return answer;
}

/* Whether a new client gets a WELCOME within 3 s (once the daemon has seen others leave). */
static bool welcomed_within_3s(td_daemon *d) {
  for (uint64_t t0 = test_now_ms(); test_now_ms() - t0 < 3000; test_sleep_ms(20)) {
    int fd = proto_local_connect(proto_local_path(d->url));
    CHECK_GE(fd, 0);
    int answer = hello_answer(fd);
    close(fd);
    if (answer == 0)
      return true;
  }
  return false;
}

/* acceld raises its soft limit (48) to the hard one (96) and says so; clients connect until
 * its descriptors run out, and the next ones hear ACCEL_EBUSY (libuv's own handling closed
 * them unanswered), with one log line for a burst; once some leave, a client gets in again. */
TEST(at_the_descriptor_limit_a_new_client_hears_ebusy) {
  enum { SOFT = 48, HARD = 96, MAX = 200 };
  td_daemon d;
  start_with_nofile(&d, SOFT, HARD);
  expect_log(&d, "descriptors: at most 96 (RLIMIT_NOFILE)");
  int fds[MAX], n = 0, answer = 0;
  while (n < MAX && answer == 0) {
    fds[n] = proto_local_connect(proto_local_path(d.url));
    CHECK_GE(fds[n], 0);
    answer = hello_answer(fds[n++]);
  }
  fprintf(stderr, "# %d clients served, the next one answered %d\n", n - 1, answer);
  if (answer == 1)
    TEST_FAIL("client %d was closed with no answer at the descriptor limit", n);
  CHECK_ERR(answer, ACCEL_EBUSY);
  CHECK_GT(n - 1, SOFT);         /* more than the soft limit could have held */
  for (int i = 0; i < 10; i++) { /* a burst of refusals: one line (or two, across a second) */
    int fd = proto_local_connect(proto_local_path(d.url));
    CHECK_GE(fd, 0);
    CHECK_ERR(hello_answer(fd), ACCEL_EBUSY);
    close(fd);
  }
  expect_log(&d, "at the descriptor limit (RLIMIT_NOFILE 96)");
  CHECK_LE(count_in_log(&d, "at the descriptor limit"), 2);
  for (int i = 0; i < n; i++)
    close(fds[i]);
  CHECK(welcomed_within_3s(&d));
  td_served(&d);
  stop(&d);
}

static const test_case tests[] = {
    TEST_CASE(partial_frames_across_connections_are_bounded_by_the_budget),
    TEST_CASE(a_frame_at_the_budget_and_one_byte_over),
    TEST_CASE(a_peer_hanging_up_mid_frame_releases_its_room_at_once),
    TEST_CASE(a_frame_one_byte_over_max_message_is_elimit_and_closed),
    TEST_CASE(a_peer_silent_inside_a_frame_is_closed_after_the_idle_timeout),
    TEST_CASE(a_stall_after_busy_frames_is_timed_from_its_last_byte),
    TEST_CASE(a_large_frame_trickled_below_the_minimum_rate_is_closed),
    TEST_CASE(at_the_descriptor_limit_a_new_client_hears_ebusy),
};

TEST_MAIN(tests)
