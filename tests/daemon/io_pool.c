/* acceld's I/O threads (server/io_pool.h) on their own, over socketpairs: bytes and
 * descriptors cross in order, writes are reported once each in order, a full ring stops the
 * thread and taking bytes resumes it, the end comes after the last byte, a peer that stops
 * reading holds writes until the close cancels them, descriptors past the bound end the
 * stream, and the thread count is bounded. Also in suite 'threads' (ThreadSanitizer in CI). */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "server/io_pool.h"
#include "test.h"

typedef struct side {
  srv_iost *st;
  uint8_t *got; /* bytes read */
  size_t got_len, got_cap;
  int end; /* the stream's end, once read */
  uint32_t readable_calls;
  nng_msg *written[4096]; /* reported, in order */
  int wstatus[4096];
  uint32_t nwritten;
  bool closed;
  bool take; /* whether readable takes bytes */
} side;

static void on_readable(srv_iost *st, void *data) {
  side *s = data;
  s->readable_calls++;
  while (s->take) {
    if (s->got_len == s->got_cap) {
      s->got_cap = s->got_cap ? s->got_cap * 2 : 4096;
      s->got = realloc(s->got, s->got_cap);
      CHECK(s->got != NULL);
    }
    ssize_t n = srv_iost_read(st, s->got + s->got_len, s->got_cap - s->got_len);
    if (n == 0)
      return;
    if (n < 0) {
      s->end = (int)n;
      return;
    }
    s->got_len += (size_t)n;
  }
}

static void on_written(srv_iost *st, void *data, nng_msg *m, int status) {
  side *s = data;
  CHECK_LT(s->nwritten, 4096);
  s->written[s->nwritten] = m;
  s->wstatus[s->nwritten++] = status;
}

static void on_closed(void *data) {
  side *s = data;
  CHECK(!s->closed);
  s->closed = true;
}

static const srv_iost_ops ops = {
    .readable = on_readable, .written = on_written, .closed = on_closed};

/* A write written at once (1) is reported here, as the queued ones are by `written`. */
static void write_msg(side *s, nng_msg *m) {
  int rc = srv_iost_write(s->st, m, 0);
  CHECK(rc == 0 || rc == 1);
  if (rc == 1)
    on_written(s->st, s, m, 0);
}

typedef struct rig {
  uv_loop_t loop;
  srv_iopool *io;
  int peer; /* the other end of the socketpair */
  side s;
} rig;

static void rig_open(rig *r, uint32_t threads) {
  memset(r, 0, sizeof *r);
  CHECK_EQ(uv_loop_init(&r->loop), 0);
  CHECK_OK(srv_iopool_start(&r->io, &r->loop, threads));
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  CHECK_EQ(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
  r->peer = sv[1];
  r->s.take = true;
  r->s.st = srv_iost_new();
  CHECK(r->s.st != NULL);
  srv_iost_start(r->s.st, r->io, sv[0], &ops, &r->s);
  srv_iost_want_read(r->s.st, true);
}

/* Runs the loop until cond holds (the watchdog ends a test that never gets there). */
#define RUN_UNTIL(r, cond)                                                                         \
  do {                                                                                             \
    while (!(cond))                                                                                \
      uv_run(&(r)->loop, UV_RUN_ONCE);                                                             \
  } while (0)

static void rig_close(rig *r) {
  if (!r->s.closed) {
    srv_iost_close(r->s.st);
    RUN_UNTIL(r, r->s.closed);
  }
  for (uint32_t i = 0; i < r->s.nwritten; i++)
    nng_msg_free(r->s.written[i]);
  srv_iopool_stop(r->io);
  uv_run(&r->loop, UV_RUN_DEFAULT); /* the pool's handle closes */
  CHECK_EQ(uv_loop_close(&r->loop), 0);
  if (r->peer >= 0)
    close(r->peer);
  free(r->s.got);
}

static void writes_in_order(uint32_t threads);

static uint8_t pattern(size_t i) {
  return (uint8_t)(i * 131 + (i >> 9));
}

typedef struct writer {
  int fd;
  size_t bytes;
  _Atomic size_t done; /* written so far */
} writer;

/* Writes `bytes` of the pattern in uneven pieces, blocking. */
static void *write_pattern(void *arg) {
  writer *w = arg;
  uint8_t buf[7001];
  for (size_t at = 0; at < w->bytes;) {
    size_t n = 1 + (at * 7) % sizeof buf;
    if (n > w->bytes - at)
      n = w->bytes - at;
    for (size_t i = 0; i < n; i++)
      buf[i] = pattern(at + i);
    ssize_t k = write(w->fd, buf, n);
    CHECK_GT(k, 0);
    at += (size_t)k;
    atomic_store(&w->done, at);
  }
  return NULL;
}

/* More than the ring many times over, from a writing thread: every byte once, in order, and
 * the end (EOF) only after the last. */
static void bytes_in_order(uint32_t threads) {
  rig r;
  rig_open(&r, threads);
  writer w = {.fd = r.peer, .bytes = (size_t)test_scaled(8 << 20, 1 << 20)};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, write_pattern, &w), 0);
  RUN_UNTIL(&r, r.s.got_len == w.bytes);
  pthread_join(t, NULL);
  for (size_t i = 0; i < w.bytes; i++)
    if (r.s.got[i] != pattern(i))
      TEST_FAIL("byte %zu: %u, not %u", i, r.s.got[i], pattern(i));
  close(r.peer);
  r.peer = -1;
  RUN_UNTIL(&r, r.s.end != 0);
  CHECK_EQ(r.s.end, UV_EOF);
  CHECK_EQ(r.s.got_len, w.bytes);
  rig_close(&r);
}

TEST(bytes_cross_in_order_and_the_end_comes_last) {
  bytes_in_order(2);
}

/* No threads: the loop serves the stream itself, through the same hand-offs. */
TEST(with_no_threads_the_loop_serves_bytes_and_writes_itself) {
  bytes_in_order(0);
  writes_in_order(0);
}

/* While the loop does not want bytes, the thread reads ahead up to the ring and stops; turning
 * reading on delivers them, and taking them lets the thread read the rest. */
TEST(a_full_ring_stops_the_thread_and_taking_bytes_resumes_it) {
  rig r;
  rig_open(&r, 1);
  srv_iost_want_read(r.s.st, false);
  writer w = {.fd = r.peer, .bytes = 16 * SRV_IOST_RING}; /* more than the ring and the socket */
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, write_pattern, &w), 0);
  while (srv_iost_buffered(r.s.st) < SRV_IOST_RING)
    uv_run(&r.loop, UV_RUN_NOWAIT);
  test_sleep_ms(30);
  uv_run(&r.loop, UV_RUN_NOWAIT);
  CHECK_EQ(r.s.readable_calls, 0);
  CHECK_LT(atomic_load(&w.done), w.bytes); /* the writer waits: nothing took more bytes */
  srv_iost_want_read(r.s.st, true);
  RUN_UNTIL(&r, r.s.got_len == w.bytes);
  pthread_join(t, NULL);
  for (size_t i = 0; i < w.bytes; i++)
    if (r.s.got[i] != pattern(i))
      TEST_FAIL("byte %zu differs", i);
  rig_close(&r);
}

static nng_msg *msg_of(size_t len, uint32_t seed) {
  nng_msg *m;
  CHECK_EQ(nng_msg_alloc(&m, len), 0);
  uint8_t *p = nng_msg_body(m);
  for (size_t i = 0; i < len; i++)
    p[i] = (uint8_t)(seed + i);
  return m;
}

typedef struct reader {
  int fd;
  size_t bytes;
  uint8_t *buf;
} reader;

static void *read_all(void *arg) {
  reader *rd = arg;
  for (size_t at = 0; at < rd->bytes;) {
    ssize_t k = read(rd->fd, rd->buf + at, rd->bytes - at);
    CHECK_GT(k, 0);
    at += (size_t)k;
  }
  return NULL;
}

/* Messages of many sizes, some over the socket's buffer, written whole and in order, each
 * reported once with status 0, in the order given. */
static void writes_in_order(uint32_t threads) {
  rig r;
  rig_open(&r, threads);
  enum { N = 600 };
  nng_msg *ms[N];
  size_t total = 0;
  for (uint32_t i = 0; i < N; i++) {
    size_t len = i % 97 == 0 ? 300000 : 1 + (i * 37) % 3000;
    ms[i] = msg_of(len, i);
    total += len;
  }
  reader rd = {.fd = r.peer, .bytes = total, .buf = malloc(total)};
  CHECK(rd.buf != NULL);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, read_all, &rd), 0);
  for (uint32_t i = 0; i < N; i++) {
    write_msg(&r.s, ms[i]);
    if (i % 50 == 0)
      uv_run(&r.loop, UV_RUN_NOWAIT); /* reports come while more are queued */
  }
  RUN_UNTIL(&r, r.s.nwritten == N);
  pthread_join(t, NULL);
  size_t at = 0;
  for (uint32_t i = 0; i < N; i++) {
    CHECK(r.s.written[i] == ms[i]);
    CHECK_EQ(r.s.wstatus[i], 0);
    CHECK(memcmp(rd.buf + at, nng_msg_body(ms[i]), nng_msg_len(ms[i])) == 0);
    at += nng_msg_len(ms[i]);
  }
  CHECK_EQ(srv_iost_write_pending(r.s.st), 0);
  free(rd.buf);
  rig_close(&r);
}

TEST(writes_leave_in_order_and_are_reported_once_each) {
  writes_in_order(2);
}

/* Writes over the socket's buffer (each queued after the loop's first piece: a command to the
 * thread), posted with pauses around the thread's spin time (30 µs in `daemon-io-pool-short-
 * spin`), so that some reach it spinning, with no wake-up (`has_inbox`), and some as it falls
 * asleep: every one reaches the peer whole and in order and is reported (a lost command
 * hangs the test until its watchdog). */
TEST(commands_posted_as_the_thread_falls_asleep_all_arrive) {
  rig r;
  rig_open(&r, 1);
  enum { LEN = 300000 };
  uint32_t n = (uint32_t)test_scaled(200, 40);
  nng_msg **ms = malloc(sizeof *ms * n);
  reader rd = {.fd = r.peer, .bytes = (size_t)n * LEN, .buf = malloc((size_t)n * LEN)};
  CHECK(ms != NULL && rd.buf != NULL);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, read_all, &rd), 0);
  unsigned seed = 7;
  for (uint32_t i = 0; i < n; i++) {
    ms[i] = msg_of(LEN, i);
    write_msg(&r.s, ms[i]);
    struct timespec pause = {0, (long)(rand_r(&seed) % 80) * 1000};
    nanosleep(&pause, NULL);
    uv_run(&r.loop, UV_RUN_NOWAIT);
  }
  RUN_UNTIL(&r, r.s.nwritten == n);
  pthread_join(t, NULL);
  for (uint32_t i = 0; i < n; i++) {
    CHECK(r.s.written[i] == ms[i]);
    CHECK_EQ(r.s.wstatus[i], 0);
    CHECK(memcmp(rd.buf + (size_t)i * LEN, nng_msg_body(ms[i]), LEN) == 0);
  }
  free(rd.buf);
  free(ms);
  rig_close(&r);
}

/* A peer that never reads: the socket fills, writes wait (not reported), and the close
 * cancels them (UV_ECANCELED), each reported once, then `closed`; a write after the close is
 * refused. */
TEST(a_peer_that_stops_reading_holds_writes_until_the_close_cancels_them) {
  rig r;
  rig_open(&r, 1);
  enum { N = 64 };
  for (uint32_t i = 0; i < N; i++)
    write_msg(&r.s, msg_of(256 << 10, i));
  test_sleep_ms(50);
  uv_run(&r.loop, UV_RUN_NOWAIT);
  CHECK_LT(r.s.nwritten, N); /* 16 MiB cannot all fit the socket */
  CHECK_GT(srv_iost_write_pending(r.s.st), 0);
  srv_iost_close(r.s.st);
  nng_msg *late = msg_of(10, 0);
  CHECK_ERR(srv_iost_write(r.s.st, late, 0), ACCEL_ECLOSED);
  nng_msg_free(late);
  RUN_UNTIL(&r, r.s.closed);
  CHECK_EQ(r.s.nwritten, N);
  bool cancelled = false;
  for (uint32_t i = 0; i < N; i++) {
    if (r.s.wstatus[i] == UV_ECANCELED)
      cancelled = true;
    else
      CHECK(!cancelled && r.s.wstatus[i] == 0); /* done ones first, in order */
  }
  CHECK(cancelled);
  rig_close(&r);
}

/* A write to a peer that left fails (on the loop's own write: ACCEL_ESYS) and m stays the
 * caller's; the stream still closes cleanly. */
TEST(a_write_to_a_peer_that_left_fails) {
  rig r;
  rig_open(&r, 1);
  close(r.peer);
  r.peer = -1;
  RUN_UNTIL(&r, r.s.end != 0); /* the loop has heard of the end: nothing queued, not busy */
  nng_msg *m = msg_of(100, 1);
  CHECK_ERR(srv_iost_write(r.s.st, m, 0), ACCEL_ESYS);
  nng_msg_free(m);
  CHECK_EQ(r.s.nwritten, 0);
  rig_close(&r);
}

static int open_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 4096; fd++)
    n += fcntl(fd, F_GETFD) != -1;
  return n;
}

/* Sends one byte with `count` copies of a descriptor. */
static void send_fds(int sock, int fd, int count) {
  int fds[SRV_IOST_FDS_MAX + 1];
  for (int i = 0; i < count; i++)
    fds[i] = fd;
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof fds)];
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  uint8_t byte = 'x';
  struct iovec iov = {&byte, 1};
  struct msghdr mh = {.msg_iov = &iov,
                      .msg_iovlen = 1,
                      .msg_control = ctl.buf,
                      .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)count)};
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)count);
  memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)count);
  CHECK_EQ(sendmsg(sock, &mh, 0), 1);
}

/* Descriptors are queued before their bytes show, in order. The thread reads no further while
 * SRV_IOST_FDS_AHEAD of them wait, and taking them resumes it; more in one message than a
 * read takes ends the stream with UV_EPROTO after its byte; every descriptor is closed. */
TEST(descriptors_come_before_their_bytes_and_read_ahead_stops_at_the_bound) {
  int before = open_fds();
  rig r;
  rig_open(&r, 1);
  int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
  CHECK_GE(probe, 0);
  send_fds(r.peer, probe, 1);
  RUN_UNTIL(&r, r.s.got_len == 1);
  CHECK_EQ(srv_iost_fds_pending(r.s.st), 1);
  int got = srv_iost_take_fd(r.s.st);
  CHECK_GE(got, 0);
  CHECK(got != probe);
  close(got);
  CHECK_EQ(srv_iost_take_fd(r.s.st), -1);
  for (int i = 0; i < 4; i++)
    send_fds(r.peer, probe, SRV_IOST_FDS_AHEAD / 2); /* twice the bound in all */
  RUN_UNTIL(&r, r.s.got_len == 3);
  test_sleep_ms(30);
  uv_run(&r.loop, UV_RUN_NOWAIT);
  CHECK_EQ(r.s.got_len, 3); /* stopped at the bound: two messages wait in the socket */
  CHECK_EQ(srv_iost_fds_pending(r.s.st), SRV_IOST_FDS_AHEAD);
  for (int i = 0; i < SRV_IOST_FDS_AHEAD; i++)
    close(srv_iost_take_fd(r.s.st));
  RUN_UNTIL(&r, r.s.got_len == 5); /* taking them resumed it */
  CHECK_EQ(srv_iost_fds_pending(r.s.st), SRV_IOST_FDS_AHEAD);
  for (int i = 0; i < SRV_IOST_FDS_AHEAD; i++)
    close(srv_iost_take_fd(r.s.st));
  send_fds(r.peer, probe, SRV_IOST_FDS_AHEAD + 1); /* more than one read takes */
  RUN_UNTIL(&r, r.s.end != 0);
  CHECK_EQ(r.s.end, UV_EPROTO);
  CHECK_EQ(r.s.got_len, 6); /* its byte came first */
  rig_close(&r);
  close(probe);
  CHECK_EQ(open_fds(), before); /* the socket and every queued descriptor closed */
}

/* A peer that sends, then closes with our replies unread: the socket has an error (reset),
 * and still every byte it sent comes before the end. Both with a thread and on the loop. */
static void bytes_before_a_reset(uint32_t threads) {
  rig r;
  rig_open(&r, threads);
  for (int i = 0; i < 5; i++) { /* the stream is watched before the peer's bytes come */
    uv_run(&r.loop, UV_RUN_NOWAIT);
    test_sleep_ms(1);
  }
  write_msg(&r.s, msg_of(100, 7)); /* never read by the peer */
  RUN_UNTIL(&r, r.s.nwritten == 1);
  writer w = {.fd = r.peer, .bytes = 30000};
  (void)write_pattern(&w);
  close(r.peer);
  r.peer = -1;
  RUN_UNTIL(&r, r.s.end != 0);
  CHECK_EQ(r.s.got_len, w.bytes);
  for (size_t i = 0; i < w.bytes; i++)
    if (r.s.got[i] != pattern(i))
      TEST_FAIL("byte %zu differs", i);
  if (r.s.end != UV_EOF && r.s.end != UV_ECONNRESET) /* the socket's own end, not the poll's */
    TEST_FAIL("ended %s", uv_err_name(r.s.end));
  rig_close(&r);
}

TEST(a_peer_that_closes_with_replies_unread_still_delivers_its_bytes) {
  for (int i = 0; i < 20; i++) {
    bytes_before_a_reset(0);
    bytes_before_a_reset(1);
  }
}

/* A write queued behind a full socket fails when the peer goes: reported once, with an error
 * status, and the close that follows reports nothing twice. */
TEST(a_queued_write_to_a_peer_that_left_is_reported_failed) {
  rig r;
  rig_open(&r, 1);
  int rc;
  uint32_t n = 0;
  do { /* fill the socket until a write has to wait for the thread */
    nng_msg *m = msg_of(256 << 10, n++);
    rc = srv_iost_write(r.s.st, m, 0);
    CHECK(rc == 0 || rc == 1);
    if (rc == 1)
      on_written(r.s.st, &r.s, m, 0);
    CHECK_LT(n, 1000);
  } while (rc == 1);
  close(r.peer);
  r.peer = -1;
  RUN_UNTIL(&r, r.s.nwritten == n);
  CHECK_LT(r.s.wstatus[n - 1], 0);
  CHECK(r.s.wstatus[n - 1] != UV_ECANCELED);
  rig_close(&r);
  CHECK_EQ(r.s.nwritten, n);
}

/* Started, written and closed at once (a refused peer): the reply reaches the peer before the
 * end. */
TEST(a_reply_written_just_before_the_close_reaches_the_peer) {
  for (uint32_t threads = 0; threads < 2; threads++) {
    rig r;
    rig_open(&r, threads);
    srv_iost_close(r.s.st);
    nng_msg *late = msg_of(8, 0);
    CHECK_ERR(srv_iost_write(r.s.st, late, 0), ACCEL_ECLOSED);
    nng_msg_free(late);
    rig_close(&r);
    rig_open(&r, threads);
    nng_msg *m = msg_of(40, 3);
    int rc = srv_iost_write(r.s.st, m, 0);
    if (rc == 1)
      nng_msg_free(m);
    srv_iost_close(r.s.st);
    RUN_UNTIL(&r, r.s.closed);
    uint8_t buf[64];
    ssize_t k = read(r.peer, buf, sizeof buf);
    CHECK_EQ(k, 40);
    CHECK_EQ(read(r.peer, buf, sizeof buf), 0); /* then the end */
    rig_close(&r);
  }
}

/* Two streams on one thread: each gets its own bytes. */
TEST(streams_sharing_a_thread_keep_their_bytes_apart) {
  rig a, b;
  rig_open(&a, 1);
  memset(&b, 0, sizeof b);
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  CHECK_EQ(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
  b.peer = sv[1];
  b.s.take = true;
  b.s.st = srv_iost_new();
  CHECK(b.s.st != NULL);
  srv_iost_start(b.s.st, a.io, sv[0], &ops, &b.s);
  srv_iost_want_read(b.s.st, true);
  writer wa = {.fd = a.peer, .bytes = 1 << 20}, wb = {.fd = b.peer, .bytes = 1 << 20};
  pthread_t ta, tb;
  CHECK_EQ(pthread_create(&ta, NULL, write_pattern, &wa), 0);
  CHECK_EQ(pthread_create(&tb, NULL, write_pattern, &wb), 0);
  RUN_UNTIL(&a, a.s.got_len == wa.bytes && b.s.got_len == wb.bytes);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  for (size_t i = 0; i < wa.bytes; i++)
    if (a.s.got[i] != pattern(i) || b.s.got[i] != pattern(i))
      TEST_FAIL("byte %zu differs", i);
  srv_iost_close(b.s.st);
  RUN_UNTIL(&a, b.s.closed);
  close(b.peer);
  free(b.s.got);
  rig_close(&a);
}

TEST(the_thread_count_is_bounded) {
  uv_loop_t loop;
  CHECK_EQ(uv_loop_init(&loop), 0);
  srv_iopool *io = NULL;
  CHECK_ERR(srv_iopool_start(&io, &loop, SRV_IOPOOL_THREADS_MAX + 1), ACCEL_EINVAL);
  CHECK_OK(srv_iopool_start(&io, &loop, SRV_IOPOOL_THREADS_MAX));
  CHECK_EQ(srv_iopool_threads(io), SRV_IOPOOL_THREADS_MAX);
  srv_iopool_stop(io);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_EQ(uv_loop_close(&loop), 0);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  uint32_t d = srv_iopool_default_threads();
  if (cores < SRV_IOPOOL_MIN_CORES)
    CHECK_EQ(d, 0);
  else
    CHECK(d >= 1 && d <= 8 && d == (cores / 8 > 8 ? 8 : cores / 8));
}

static const test_case tests[] = {
    TEST_CASE(bytes_cross_in_order_and_the_end_comes_last),
    TEST_CASE(a_full_ring_stops_the_thread_and_taking_bytes_resumes_it),
    TEST_CASE(writes_leave_in_order_and_are_reported_once_each),
    TEST_CASE(commands_posted_as_the_thread_falls_asleep_all_arrive),
    TEST_CASE(a_peer_that_stops_reading_holds_writes_until_the_close_cancels_them),
    TEST_CASE(a_write_to_a_peer_that_left_fails),
    TEST_CASE(descriptors_come_before_their_bytes_and_read_ahead_stops_at_the_bound),
    TEST_CASE(a_peer_that_closes_with_replies_unread_still_delivers_its_bytes),
    TEST_CASE(a_queued_write_to_a_peer_that_left_is_reported_failed),
    TEST_CASE(a_reply_written_just_before_the_close_reaches_the_peer),
    TEST_CASE(streams_sharing_a_thread_keep_their_bytes_apart),
    TEST_CASE(with_no_threads_the_loop_serves_bytes_and_writes_itself),
    TEST_CASE(the_thread_count_is_bounded),
};
TEST_MAIN(tests)
