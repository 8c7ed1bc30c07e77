/* The link between acceld and a device worker (backends/worker/), at its edges:
 *   - framing: a frame at the limit a receiver takes and one byte past it; a descriptor that
 *     travels with a frame;
 *   - the staging region's pages: every page taken, a taker that waits until one comes back;
 *   - a hostile or broken worker: a worker runs clients' kernels, so what it sends is read as
 *     a client's bytes are. This executable stands in for accel-device (the proxy starts it
 *     as its worker: argv[0] "accel-device") and, per ACCEL_TEST_HOSTILE, answers the open
 *     with a reply too short, a frame one byte past the limit, one exactly at it, or by dying.
 *     The proxy must fail the open with a clear error, never crash or take the memory a
 *     frame claims.
 * The real worker is exercised by backend-conformance-workers and daemon-device-faults. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "accel/runtime.h"
#include "backends/cpu/backend_cpu.h"
#include "backends/worker/proxy.h"
#include "runtime/spin.h"

/* ---- the stand-in worker ---- */

static void write_frame(int fd, uint16_t type, uint64_t tag, const void *body, uint32_t len) {
  bw_hdr h = {.len = len, .type = type, .tag = tag};
  if (write(fd, &h, sizeof h) != (ssize_t)sizeof h || (len && write(fd, body, len) != len))
    _exit(3);
}

/* Reads the first call (the open) and answers it as `mode` says, through the rings acceld
 * passed as a worker does. */
static int hostile_worker(const char *mode) {
  bw_hdr h;
  _Alignas(16) char buf[4096];
  void *body;
  int passed;
  bw_rings rings;
  bw_chan cmd = bw_chan_socket(BW_FD_CMD), note = bw_chan_socket(BW_FD_NOTE);
  if (!bw_rings_map(&rings, BW_FD_RINGS))
    return 1;
  bw_chan_ring(&cmd, &rings, false);
  bw_chan_ring(&note, &rings, true);
  bw_reader r;
  if (!bw_reader_init_chan(&r, &cmd, 0) ||
      !bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME))
    return 1;
  if (strcmp(mode, "die") == 0)
    _exit(9);
  if (strcmp(mode, "short") == 0) {
    if (!bw_chan_send(&note, BW_REPLY, h.tag, "\1", 1, NULL, 0, NULL, 0)) /* < a bw_reply */
      _exit(3);
  } else {
    uint32_t len = strcmp(mode, "past") == 0 ? BW_MAX_NOTE + 1 : BW_MAX_NOTE;
    char *reply = calloc(1, len);
    bw_reply rep = {.status = ACCEL_ENOENT};
    memcpy(reply, &rep, sizeof rep);
    /* One past the limit: acceld stops reading at the header, and this write ends with us. */
    (void)bw_chan_send(&note, BW_REPLY, h.tag, reply, len, NULL, 0, NULL, 0);
    free(reply);
  }
  while (bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME))
    if (body != buf) /* until the proxy lets go */
      free(body);
  bw_reader_fini(&r);
  bw_rings_unmap(&rings);
  return 0;
}

/* ---- through the proxy ---- */

static char self_path[4096];

static int open_with(const char *mode) {
  setenv("ACCEL_TEST_HOSTILE", mode, 1);
  bw_configure(&(bw_options){.helper = self_path});
  const be_ops *proxy = bw_proxy_ops(&be_cpu_ops);
  be_device *d = NULL;
  int rc = proxy->open(0, NULL, &d);
  if (rc == 0)
    proxy->close(d);
  return rc;
}

TEST(a_reply_too_short_fails_the_open) {
  CHECK_ERR(open_with("short"), ACCEL_EDEVLOST);
}

TEST(a_frame_one_past_the_limit_ends_the_link) {
  CHECK_ERR(open_with("past"), ACCEL_EDEVLOST);
}

TEST(a_frame_at_the_limit_is_read) {
  CHECK_ERR(open_with("at"), ACCEL_ENOENT); /* the reply's own status: it was read whole */
}

TEST(a_worker_dying_mid_call_fails_the_call) {
  CHECK_ERR(open_with("die"), ACCEL_EDEVLOST);
}

TEST(no_worker_at_all_is_a_clear_error) {
  bw_configure(&(bw_options){.helper = "/nonexistent/accel-device"});
  const be_ops *proxy = bw_proxy_ops(&be_cpu_ops);
  be_device *d = NULL;
  CHECK_ERR(proxy->open(0, NULL, &d), ACCEL_ESYS);
}

/* ---- framing ---- */

TEST(frames_at_the_limit_and_one_past) {
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  enum { MAX = 1000 };
  char *big = calloc(1, MAX + 1), buf[64];
  CHECK(big != NULL);
  CHECK(bw_send(sv[0], BW_REPLY, 7, big, MAX, NULL, 0, NULL, 0));
  CHECK(bw_send(sv[0], BW_REPLY, 8, big, MAX + 1, NULL, 0, NULL, 0));
  bw_hdr h;
  void *body;
  int passed;
  bw_reader r; /* how both ends read their channels */
  CHECK(bw_reader_init(&r, sv[1], 0));
  CHECK(bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, MAX));
  CHECK_EQ(h.tag, 7);
  CHECK_EQ(h.len, MAX);
  free(body);
  CHECK(!bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, MAX)); /* one past: refused */
  bw_reader_fini(&r);
  free(big);
  close(sv[0]);
  close(sv[1]);
}

TEST(a_descriptor_travels_with_its_frame) {
  int sv[2], pipefd[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CHECK_EQ(pipe(pipefd), 0);
  uint64_t payload = 0x1122334455667788ull;
  CHECK(bw_send_fd(sv[0], BW_SHARE, 3, &payload, sizeof payload, pipefd[1]));
  CHECK(bw_send(sv[0], BW_UNSHARE, 4, &payload, sizeof payload, NULL, 0, NULL, 0));
  bw_hdr h;
  char buf[64];
  void *body;
  int passed = -1;
  CHECK(bw_recv_fd(sv[1], &h, buf, sizeof buf, &body, &passed));
  CHECK_EQ(h.type, BW_SHARE);
  CHECK_GE(passed, 0);
  CHECK_EQ(memcmp(body, &payload, sizeof payload), 0);
  CHECK_EQ(write(passed, "x", 1), 1); /* the same pipe: it reads back on the other end */
  char c = 0;
  CHECK_EQ(read(pipefd[0], &c, 1), 1);
  CHECK_EQ(c, 'x');
  close(passed);
  CHECK(bw_recv_fd(sv[1], &h, buf, sizeof buf, &body, &passed));
  CHECK_EQ(h.type, BW_UNSHARE);
  CHECK_EQ(passed, -1); /* none came with this one */
  close(pipefd[0]);
  close(pipefd[1]);
  close(sv[0]);
  close(sv[1]);
}

/* A reader polls for the next frame for the spin time before it sleeps (wire.c read_first;
 * worker-link-spin runs this with ACCEL_SPIN_US=2000, worker-link with the machine's
 * default). Whatever it catches polling and whatever comes after it slept must read alike:
 * a frame already there, a header split by a pause, a descriptor, a frame long after the
 * spin, then the end. */
typedef struct late_writer {
  int fd, pass;
} late_writer;

static void *write_late(void *arg) {
  late_writer *w = arg;
  uint64_t v = 2;
  bw_hdr h = {.len = sizeof v, .type = BW_UNSHARE, .tag = 2};
  bool ok = write(w->fd, &h, 5) == 5; /* half a header, then the rest 300 us later */
  usleep(300);
  ok = ok && write(w->fd, (char *)&h + 5, sizeof h - 5) == (ssize_t)(sizeof h - 5);
  ok = ok && write(w->fd, &v, sizeof v) == (ssize_t)sizeof v;
  usleep(500);
  v = 3;
  ok = ok && bw_send_fd(w->fd, BW_SHARE, 3, &v, sizeof v, w->pass);
  usleep(20000); /* past the spin: the reader sleeps in its read */
  v = 4;
  ok = ok && bw_send(w->fd, BW_UNSHARE, 4, &v, sizeof v, NULL, 0, NULL, 0);
  close(w->fd);
  return ok ? w : NULL;
}

/* The next frame, by bw_recv_fd or through the reader r. */
static void expect_frame(int fd, bw_reader *r, uint64_t tag, bool with_fd, int pipe_read) {
  bw_hdr h;
  _Alignas(16) char buf[64];
  void *body;
  int passed = -1;
  CHECK(r ? bw_reader_next(r, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME)
          : bw_recv_fd(fd, &h, buf, sizeof buf, &body, &passed));
  CHECK_EQ(h.tag, tag);
  CHECK_EQ(h.len, sizeof(uint64_t));
  uint64_t v;
  memcpy(&v, body, sizeof v);
  CHECK_EQ(v, tag);
  CHECK_EQ(passed >= 0, with_fd);
  if (passed >= 0) {
    char c = 0;
    CHECK_EQ(write(passed, "y", 1), 1);
    CHECK_EQ(read(pipe_read, &c, 1), 1);
    CHECK_EQ(c, 'y');
    close(passed);
  }
}

static void read_alike(bool buffered) {
  int sv[2], pipefd[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CHECK_EQ(pipe(pipefd), 0);
  uint64_t caught = bw_frames_caught_polling(), one = 1;
  CHECK(bw_send(sv[0], BW_UNSHARE, 1, &one, sizeof one, NULL, 0, NULL, 0)); /* there at once */
  late_writer w = {sv[0], pipefd[1]};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, write_late, &w), 0);
  bw_reader reader, *r = buffered ? &reader : NULL;
  CHECK(!buffered || bw_reader_init(r, sv[1], BW_TYPE_BIT(BW_SHARE)));
  expect_frame(sv[1], r, 1, false, pipefd[0]);
  expect_frame(sv[1], r, 2, false, pipefd[0]);
  expect_frame(sv[1], r, 3, true, pipefd[0]);
  expect_frame(sv[1], r, 4, false, pipefd[0]);
  bw_hdr h;
  _Alignas(16) char buf[16];
  void *body;
  int passed;
  CHECK(!(r ? bw_reader_next(r, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME)
            : bw_recv(sv[1], &h, buf, sizeof buf, &body))); /* the end */
  if (r)
    bw_reader_fini(r);
  void *ok;
  CHECK_EQ(pthread_join(t, &ok), 0);
  CHECK(ok != NULL);
  /* The first frame was there before the read: caught polling whenever there is a spin. */
  uint64_t polled = bw_frames_caught_polling() - caught;
  if (rt_spin_ns() == 0)
    CHECK_EQ(polled, 0);
  else
    CHECK_GE(polled, 1);
  close(pipefd[0]);
  close(pipefd[1]);
  close(sv[1]);
}

TEST(frames_read_alike_polling_and_after_sleeping) {
  read_alike(false);
}

TEST(frames_read_alike_through_a_reader_polling_and_after_sleeping) {
  read_alike(true);
}

/* ---- the buffered reader (wire.c bw_reader): what both ends read frames with ---- */

/* The tag's byte repeated len times: a body each frame can be checked by. */
static void put_frame(uint8_t *to, uint16_t type, uint64_t tag, uint32_t len) {
  uint8_t *body = malloc(len ? len : 1);
  memset(body, (int)(tag & 0xff), len);
  bw_frame_put(to, type, tag, body, len, NULL, 0, NULL, 0);
  free(body);
}

static void expect_read(bw_reader *r, uint16_t type, uint64_t tag, uint32_t len, int *passed) {
  _Alignas(16) char buf[64];
  bw_hdr h;
  void *body;
  CHECK(bw_reader_next(r, &h, buf, sizeof buf, &body, passed, BW_MAX_FRAME));
  CHECK_EQ(h.type, type);
  CHECK_EQ(h.tag, tag);
  CHECK_EQ(h.len, len);
  CHECK((len <= sizeof buf) == (body == buf)); /* copied when it fits, else its own memory */
  for (uint32_t i = 0; i < len; i++)
    if (((uint8_t *)body)[i] != (uint8_t)(tag & 0xff))
      CHECK_EQ(((uint8_t *)body)[i], (uint8_t)(tag & 0xff));
  if (body != buf)
    free(body);
}

/* Which pipe a passed descriptor is: it writes a byte the test reads from the pipe's end. */
static bool is_pipe(int passed, int pipe_read) {
  char c = 0;
  return passed >= 0 && write(passed, "z", 1) == 1 && read(pipe_read, &c, 1) == 1 && c == 'z';
}

/* Three frames written at once come in one read: the socket is empty after the first. */
TEST(a_reader_takes_what_the_socket_holds_in_one_read) {
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  uint8_t out[3 * (sizeof(bw_hdr) + 40)];
  size_t at = 0;
  for (uint64_t tag = 1; tag <= 3; tag++) {
    uint32_t len = (uint32_t)(10 * tag + 3); /* odd sizes: later bodies start unaligned */
    put_frame(out + at, BW_UNSHARE, tag, len);
    at += bw_frame_len(len, 0, 0);
  }
  CHECK_EQ(write(sv[0], out, at), (ssize_t)at);
  bw_reader r;
  CHECK(bw_reader_init(&r, sv[1], BW_TYPE_BIT(BW_SHARE)));
  int passed, pending = -1;
  expect_read(&r, BW_UNSHARE, 1, 13, &passed);
  CHECK_EQ(passed, -1);
  CHECK_EQ(ioctl(sv[1], FIONREAD, &pending), 0);
  CHECK_EQ(pending, 0); /* the other two are in the reader's buffer */
  expect_read(&r, BW_UNSHARE, 2, 23, &passed);
  expect_read(&r, BW_UNSHARE, 3, 33, &passed);
  close(sv[0]);
  bw_hdr h;
  char buf[16];
  void *body;
  CHECK(!bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME)); /* the end */
  bw_reader_fini(&r);
  close(sv[1]);
}

/* Descriptors go to the BW_SHARE frames they came with, in order, even when one read brings
 * frames before and after them; a frame longer than the buffer reads whole; other frames get
 * none. */
typedef struct share_writer {
  int fd, pipe_a, pipe_b;
  uint32_t big;
} share_writer;

static void *write_shares(void *arg) {
  share_writer *w = arg;
  uint8_t five[8], six[8], small[sizeof(bw_hdr) + 5];
  memset(five, 5, sizeof five);
  memset(six, 6, sizeof six);
  put_frame(small, BW_UNSHARE, 4, 5);
  bool ok = write(w->fd, small, sizeof small) == (ssize_t)sizeof small;
  ok = ok && bw_send_fd(w->fd, BW_SHARE, 5, five, sizeof five, w->pipe_a);
  ok = ok && write(w->fd, small, sizeof small) == (ssize_t)sizeof small; /* tag 4 again */
  ok = ok && bw_send_fd(w->fd, BW_SHARE, 6, six, sizeof six, w->pipe_b);
  uint8_t *big = malloc(bw_frame_len(w->big, 0, 0));
  ok = ok && big != NULL;
  if (ok)
    put_frame(big, BW_UNSHARE, 8, w->big);
  ok = ok && write(w->fd, big, bw_frame_len(w->big, 0, 0)) == (ssize_t)bw_frame_len(w->big, 0, 0);
  free(big);
  ok = ok && write(w->fd, small, sizeof small) == (ssize_t)sizeof small;
  close(w->fd);
  return ok ? w : NULL;
}

TEST(a_reader_gives_descriptors_to_their_frames) {
  int sv[2], a[2], b[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CHECK_EQ(pipe(a), 0);
  CHECK_EQ(pipe(b), 0);
  share_writer w = {sv[0], a[1], b[1], (uint32_t)BW_READER_BYTES * 3 + 17};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, write_shares, &w), 0);
  usleep(20000); /* let it all wait in the socket: reads then take several frames at once */
  bw_reader r;
  CHECK(bw_reader_init(&r, sv[1], BW_TYPE_BIT(BW_SHARE)));
  int passed;
  expect_read(&r, BW_UNSHARE, 4, 5, &passed);
  CHECK_EQ(passed, -1);
  expect_read(&r, BW_SHARE, 5, 8, &passed);
  CHECK(is_pipe(passed, a[0]));
  close(passed);
  expect_read(&r, BW_UNSHARE, 4, 5, &passed);
  CHECK_EQ(passed, -1);
  expect_read(&r, BW_SHARE, 6, 8, &passed);
  CHECK(is_pipe(passed, b[0]));
  close(passed);
  expect_read(&r, BW_UNSHARE, 8, w.big, &passed); /* past the buffer: the rest read straight */
  expect_read(&r, BW_UNSHARE, 4, 5, &passed);
  void *ok;
  CHECK_EQ(pthread_join(t, &ok), 0);
  CHECK(ok != NULL);
  bw_reader_fini(&r);
  close(sv[1]);
  for (int i = 0; i < 2; i++) {
    close(a[i]);
    close(b[i]);
  }
}

/* Frames of every size, straddling the buffer's end (what is left moves to its start) and
 * around its size (64 KiB - 16, 64 KiB, 64 KiB + 1), all waiting in the socket at once. */
enum { MOVING_FRAMES = 400 };

static uint32_t moving_len(int i) {
  if (i >= 50 && i < 53)
    return (uint32_t)BW_READER_BYTES - 16 + (uint32_t)(i == 51) * 16 + (uint32_t)(i == 52) * 17;
  return (uint32_t)((i * 37 + 11) % 1500);
}

static void *write_moving(void *arg) {
  int fd = *(int *)arg;
  bool ok = true;
  uint8_t *f = malloc(bw_frame_len(BW_READER_BYTES + 17, 0, 0));
  for (int i = 0; i < MOVING_FRAMES && ok && f; i++) {
    size_t n = bw_frame_len(moving_len(i), 0, 0);
    put_frame(f, BW_UNSHARE, (uint64_t)i, moving_len(i));
    ok = write(fd, f, n) == (ssize_t)n;
  }
  free(f);
  close(fd);
  return ok && f ? arg : NULL;
}

TEST(a_reader_moves_what_is_left_when_its_buffer_ends) {
  int sv[2], passed;
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, write_moving, &sv[0]), 0);
  usleep(20000); /* the socket full: reads fill the buffer to its end */
  bw_reader r;
  CHECK(bw_reader_init(&r, sv[1], BW_TYPE_BIT(BW_SHARE)));
  for (int i = 0; i < MOVING_FRAMES; i++)
    expect_read(&r, BW_UNSHARE, (uint64_t)i, moving_len(i), &passed);
  void *ok;
  CHECK_EQ(pthread_join(t, &ok), 0);
  CHECK(ok != NULL);
  bw_reader_fini(&r);
  close(sv[1]);
}

/* Limits: a frame one past `max` is refused, one at it read; a stream that ends mid-frame is
 * the end; descriptors that came with frames that take none (more than BW_READER_FDS of them)
 * are closed, never given to a later BW_SHARE; a BW_SHARE whose descriptor never came gets
 * none, not the next one's; no descriptor leaks. */
static int open_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 4096; fd++)
    n += fcntl(fd, F_GETFD) >= 0;
  return n;
}

TEST(a_reader_at_its_limits) {
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  uint8_t f[sizeof(bw_hdr) + 32];
  put_frame(f, BW_UNSHARE, 9, 32);
  CHECK_EQ(write(sv[0], f, sizeof f), (ssize_t)sizeof f);
  put_frame(f, BW_UNSHARE, 10, 32);
  CHECK_EQ(write(sv[0], f, sizeof f), (ssize_t)sizeof f);
  bw_reader r;
  CHECK(bw_reader_init(&r, sv[1], BW_TYPE_BIT(BW_SHARE)));
  bw_hdr h;
  _Alignas(16) char buf[64];
  void *body;
  int passed;
  CHECK(bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, 32));  /* at the limit */
  CHECK(!bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, 31)); /* one past it */
  bw_reader_fini(&r);
  close(sv[0]);
  close(sv[1]);

  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CHECK_EQ(write(sv[0], f, sizeof f - 1), (ssize_t)sizeof f - 1); /* one byte short */
  close(sv[0]);
  CHECK(bw_reader_init(&r, sv[1], BW_TYPE_BIT(BW_SHARE)));
  CHECK(!bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME));
  bw_reader_fini(&r);
  close(sv[1]);

  int before = open_fds(), pa[2], pb[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CHECK_EQ(pipe(pa), 0);
  CHECK_EQ(pipe(pb), 0);
  uint64_t v = 1;
  for (int i = 0; i < BW_READER_FDS + 3; i++) /* descriptors no frame takes: UNSHAREs' */
    CHECK(bw_send_fd(sv[0], BW_UNSHARE, 11, &v, sizeof v, pa[1]));
  CHECK(bw_send(sv[0], BW_SHARE, 12, &v, sizeof v, NULL, 0, NULL, 0)); /* its descriptor lost */
  CHECK(bw_send_fd(sv[0], BW_SHARE, 13, &v, sizeof v, pb[1]));
  close(sv[0]);
  CHECK(bw_reader_init(&r, sv[1], BW_TYPE_BIT(BW_SHARE)));
  for (int i = 0; i < BW_READER_FDS + 3; i++) {
    CHECK(bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME));
    CHECK_EQ(h.tag, 11);
    CHECK_EQ(passed, -1);
  }
  CHECK(bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME));
  CHECK_EQ(h.tag, 12);
  CHECK_EQ(passed, -1); /* none: not a stray, not the next frame's */
  CHECK(bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME));
  CHECK_EQ(h.tag, 13);
  CHECK(is_pipe(passed, pb[0]));
  close(passed);
  CHECK(!bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME));
  bw_reader_fini(&r);
  close(sv[1]);

  /* A reader that takes no descriptors (acceld's, of a worker's notes) closes one at once. */
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CHECK(bw_send_fd(sv[0], BW_SHARE, 14, &v, sizeof v, pa[1]));
  CHECK(bw_reader_init(&r, sv[1], 0));
  int open_now = open_fds();
  CHECK(bw_reader_next(&r, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME));
  CHECK_EQ(passed, -1);
  CHECK_EQ(open_fds(), open_now); /* the one that came was closed at once, before fini */
  bw_reader_fini(&r);
  close(sv[0]);
  close(sv[1]);
  for (int i = 0; i < 2; i++) {
    close(pa[i]);
    close(pb[i]);
  }
  CHECK_EQ(open_fds(), before);
}

/* ---- staging pages ---- */

typedef struct taker {
  bw_link *l;
  size_t off;
  bool ok;
} taker;

static void *take_one(void *arg) {
  taker *t = arg;
  pthread_mutex_lock(&t->l->mu);
  t->ok = bw_stage_take(t->l, BW_STAGE_PAGE, &t->off);
  pthread_mutex_unlock(&t->l->mu);
  return NULL;
}

TEST(a_full_staging_region_waits_for_a_page) {
  bw_link l = {.stage_fd = -1};
  pthread_mutex_init(&l.mu, NULL);
  pthread_cond_init(&l.cv, NULL);
  CHECK(bw_stage_init(&l, 4 * BW_STAGE_PAGE));
  /* Sealed: a worker cannot shrink it under acceld's mapping (the next copy would SIGBUS). */
  CHECK_EQ(ftruncate(l.stage_fd, BW_STAGE_PAGE), -1);
  CHECK_EQ(errno, EPERM);
  size_t off[4];
  pthread_mutex_lock(&l.mu);
  CHECK(bw_stage_take(&l, 2 * BW_STAGE_PAGE, &off[0]));
  CHECK(bw_stage_take(&l, BW_STAGE_PAGE, &off[1]));
  CHECK(bw_stage_take(&l, 1, &off[2])); /* the last page: the region is full */
  pthread_mutex_unlock(&l.mu);
  CHECK_EQ(off[0], 0);
  CHECK_EQ(off[2], 3 * BW_STAGE_PAGE);
  taker t = {.l = &l};
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, take_one, &t), 0);
  test_sleep_ms(50);
  CHECK(!t.ok); /* still waiting */
  pthread_mutex_lock(&l.mu);
  bw_stage_give(&l, off[1], BW_STAGE_PAGE);
  pthread_cond_broadcast(&l.cv);
  pthread_mutex_unlock(&l.mu);
  pthread_join(th, NULL);
  CHECK(t.ok);
  CHECK_EQ(t.off, off[1]);
  pthread_mutex_lock(&l.mu);
  l.dead = true; /* a taker of a gone worker gives up */
  CHECK(!bw_stage_take(&l, BW_STAGE_PAGE, &off[3]));
  pthread_mutex_unlock(&l.mu);
  bw_stage_fini(&l);
}

/* ---- a holding host function's ack, while calls back up ---- */

/* The worker's side: once the proxy's calls have filled the cmd socket (its sender blocked
 * in the middle of a frame), the completion of a holding host function; then no call read
 * until its ack has come (a real worker's thread sits in a driver call while the stream waits for
 * that function), then every call read until the proxy lets go. */
typedef struct held_worker {
  int cmd, note, ack;
  int proxy_cmd; /* the proxy's end of cmd */
  uint64_t tag;
  atomic_int acked;
  size_t calls;
} held_worker;

static void *held_worker_run(void *arg) {
  held_worker *w = arg;
  struct pollfd full = {.fd = w->proxy_cmd, .events = POLLOUT};
  while (poll(&full, 1, 0) == 1) /* until the proxy's calls fill the socket: it blocks */
    test_sleep_ms(1);
  bw_reply ok = {0};
  write_frame(w->note, BW_DONE, w->tag, &ok, sizeof ok);
  bw_hdr h;
  char buf[256];
  void *body;
  if (bw_recv(w->ack, &h, buf, sizeof buf, &body) && h.type == BW_ACK && h.tag == w->tag)
    atomic_store(&w->acked, 1);
  while (bw_recv(w->cmd, &h, buf, sizeof buf, &body)) {
    w->calls++;
    if (body != buf)
      free(body);
  }
  return NULL;
}

static void note_ran(void *arg, int status) {
  atomic_store((atomic_int *)arg, status == 0 ? 1 : -1);
}

/* Calls fill the cmd socket and block while the worker waits for an ack: the ack must still
 * go out (on its own socket, under its own lock), or the proxy and the worker wait for each
 * other for good (the watchdog fails the test). */
TEST(an_ack_goes_out_while_calls_back_up) {
  int cmd[2], note[2], ack[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, cmd), 0);
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, note), 0);
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, ack), 0);
  bw_link *l = NULL;
  CHECK_OK(bw_link_adopt(&be_cpu_ops, cmd[0], note[0], ack[0], -1, 1 << 20, &l));
  atomic_int ran = 0;
  pthread_mutex_lock(&l->mu);
  uint64_t tag = bw_pending_add(
      l, &(bw_pending){.kind = BW_P_CALLBACK, .hold = true, .fn = note_ran, .arg = &ran});
  pthread_mutex_unlock(&l->mu);
  CHECK_GT(tag, 0);
  held_worker w = {.cmd = cmd[1], .note = note[1], .ack = ack[1], .proxy_cmd = cmd[0], .tag = tag};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, held_worker_run, &w), 0);
  static char call[64 << 10]; /* 2 MiB of calls: far past what a socket holds */
  enum { CALLS = 32 };
  for (int i = 0; i < CALLS; i++)
    CHECK(bw_link_send(l, BW_FILL, 0, call, sizeof call, NULL, 0, NULL, 0));
  CHECK_EQ(atomic_load(&ran), 1);
  CHECK_EQ(atomic_load(&w.acked), 1);
  shutdown(cmd[0], SHUT_WR); /* the worker reads to the end */
  CHECK_EQ(pthread_join(t, NULL), 0);
  CHECK_EQ(w.calls, (size_t)CALLS);
  close(cmd[1]); /* the worker's ends: the link's reader sees the end */
  close(note[1]);
  close(ack[1]);
  bw_link_end(l);
}

/* ---- commands a loop thread sends go out together at the end of its iteration ---- */

enum { CORK_BIG = 4000, CORK_MANY = 20 }; /* 20 frames of 4 KiB: past the 16 KiB cork */

typedef struct cork_case {
  accel_task task;
  bw_link *l;
  int worker_cmd;        /* the worker's end of cmd */
  bool held_back;        /* nothing readable after 16 frames from the loop's callback */
  bool flushed_at_limit; /* the 17th sent the 16 out (and itself) */
  bool direct_went;      /* another thread's frame went out at once, the cork's before it */
  bool held_again;       /* 18, 19 held after that */
  uint64_t next_tag;
  atomic_bool done;
} cork_case;

static bool readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, 0) == 1;
}

static void *send_from_another_thread(void *arg) {
  cork_case *c = arg;
  c->direct_went = bw_link_send(c->l, BW_FILL, c->next_tag, NULL, 0, NULL, 0, NULL, 0) &&
                   readable(c->worker_cmd);
  return NULL;
}

static bool send_small(cork_case *c) {
  return bw_link_send(c->l, BW_FILL, ++c->next_tag, NULL, 0, NULL, 0, NULL, 0);
}

/* Reads what the worker's end holds now, to keep the readability checks meaningful; the frames
 * read are counted in `taken`. */
static size_t take_all(int fd) {
  size_t taken = 0;
  char buf[64 << 10];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
    taken += (size_t)n;
  return taken;
}

static size_t cork_taken; /* bytes cork_on_loop took off the worker's end */

static void cork_on_loop(accel_task *t) {
  cork_case *c = (cork_case *)t;
  static char big[CORK_BIG];
  bool ok = true;
  for (int i = 0; i < 16; i++) /* tags 1..16: gathered, as many as a cork takes */
    ok = ok && send_small(c);
  c->held_back = ok && !readable(c->worker_cmd);
  ok = ok && send_small(c); /* 17: the cork is full, so 1..16 go out, then 17 */
  c->flushed_at_limit = ok && readable(c->worker_cmd);
  cork_taken = take_all(c->worker_cmd);
  ok = ok && send_small(c) && send_small(c); /* 18, 19: held */
  c->held_again = ok && !readable(c->worker_cmd);
  ++c->next_tag; /* 20: from another thread, straight out after 18 and 19 */
  pthread_t th;
  if (pthread_create(&th, NULL, send_from_another_thread, c) == 0)
    pthread_join(th, NULL);
  for (int i = 0; i < CORK_MANY; i++) /* 21..40: big ones, past the cork's bytes */
    ok = ok && bw_link_send(c->l, BW_FILL, ++c->next_tag, big, sizeof big, NULL, 0, NULL, 0);
  ok = ok && send_small(c); /* 41: goes at the iteration's end, nothing else wakes the loop */
  c->held_back = c->held_back && ok;
  atomic_store(&c->done, true);
}

/* The worker reads frames tagged first..last, in that order, each within 10 s. */
static void expect_tags(int fd, uint64_t first, uint64_t last) {
  for (uint64_t tag = first; tag <= last; tag++) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, 10000), 1);
    bw_hdr h;
    static char buf[CORK_BIG];
    void *body;
    CHECK(bw_recv(fd, &h, buf, sizeof buf, &body));
    CHECK_EQ(h.tag, tag);
    CHECK_EQ(h.type, BW_FILL);
  }
}

static void link_pair(int cmd[2], int note[2], int ack[2], bw_link **l) {
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, cmd), 0);
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, note), 0);
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, ack), 0);
  int big = 1 << 20; /* everything a test sends fits: its reader may look only at the end */
  CHECK_EQ(setsockopt(cmd[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big), 0);
  CHECK_OK(bw_link_adopt(&be_cpu_ops, cmd[0], note[0], ack[0], -1, 1 << 20, l));
}

TEST(frames_from_a_loop_go_out_together_at_the_end_of_its_iteration) {
  int cmd[2], note[2], ack[2];
  bw_link *l = NULL;
  link_pair(cmd, note, ack, &l);
  /* Off the loop, a frame goes out at once. */
  CHECK(bw_link_send(l, BW_FILL, 99, NULL, 0, NULL, 0, NULL, 0));
  CHECK(readable(cmd[1]));
  expect_tags(cmd[1], 99, 99);

  accel_runtime *rt = NULL;
  CHECK_OK(accel_runtime_create(&rt, NULL));
  CHECK_OK(accel_runtime_start(rt));
  cork_case c = {.l = l, .worker_cmd = cmd[1]};
  accel_post(rt, &c.task, cork_on_loop);
  TEST_WAIT_FOR(atomic_load(&c.done), 10);   /* the checks in it read the socket alone */
  CHECK_EQ(cork_taken, 17 * sizeof(bw_hdr)); /* 1..17, all header */
  /* Then every later frame comes, in the order sent: 18 and 19 flushed ahead of the other
   * thread's 20, the cork emptied when full, 41 at the iteration's end. */
  expect_tags(cmd[1], 18, 41);
  accel_runtime_stop(rt);
  CHECK_OK(accel_runtime_join(rt));
  accel_runtime_destroy(rt);
  CHECK(c.held_back);
  CHECK(c.flushed_at_limit);
  CHECK(c.held_again);
  CHECK(c.direct_went);
  CHECK(!readable(cmd[1])); /* nothing sent twice */
  close(cmd[1]);
  close(note[1]);
  close(ack[1]);
  bw_link_end(l);
}

/* A link that closes while its cork holds frames writes them first; the flush the loop had
 * queued then finds the link closed and lets its memory go (ASan: no use after free). */
typedef struct closing_case {
  accel_task task;
  bw_link *l;
  bool corked;
  atomic_bool done;
} closing_case;

static void close_on_loop(accel_task *t) {
  closing_case *c = (closing_case *)t;
  c->corked = bw_link_send(c->l, BW_FILL, 7, NULL, 0, NULL, 0, NULL, 0);
  /* Inside the iteration, so the queued flush runs after. It returns once the link's reader
   * ended: when the test, having read frame 7 and the end, closes the worker's note end. */
  bw_link_end(c->l);
  atomic_store(&c->done, true);
}

TEST(a_link_closed_with_frames_in_its_cork_writes_them_first) {
  int cmd[2], note[2], ack[2];
  bw_link *l = NULL;
  link_pair(cmd, note, ack, &l);
  accel_runtime *rt = NULL;
  CHECK_OK(accel_runtime_create(&rt, NULL));
  CHECK_OK(accel_runtime_start(rt));
  closing_case c = {.l = l};
  accel_post(rt, &c.task, close_on_loop);
  expect_tags(cmd[1], 7, 7);
  char byte;
  CHECK_EQ(recv(cmd[1], &byte, 1, 0), 0); /* then the end: the link shut cmd down */
  close(note[1]);
  TEST_WAIT_FOR(atomic_load(&c.done), 10);
  CHECK(c.corked);
  accel_runtime_stop(rt);
  CHECK_OK(accel_runtime_join(rt));
  accel_runtime_destroy(rt);
  close(cmd[1]);
  close(ack[1]);
}

/* A loop thread that waits for staging pages first writes its cork: the copies whose
 * completions give pages back may be in it (else the loop waits for itself). */
typedef struct pages_case {
  accel_task task;
  bw_link *l;
  bool took;
  atomic_bool done;
} pages_case;

typedef struct page_giver {
  bw_link *l;
  int worker_cmd;
  size_t off; /* the page it gives back once the frame came */
  bool saw_frame;
} page_giver;

static void *give_page_after_frame(void *arg) {
  page_giver *g = arg;
  struct pollfd p = {.fd = g->worker_cmd, .events = POLLIN};
  g->saw_frame = poll(&p, 1, 10000) == 1;
  pthread_mutex_lock(&g->l->mu);
  bw_stage_give(g->l, g->off, BW_STAGE_PAGE);
  pthread_cond_broadcast(&g->l->cv);
  pthread_mutex_unlock(&g->l->mu);
  return NULL;
}

static void take_page_on_loop(accel_task *t) {
  pages_case *c = (pages_case *)t;
  size_t off;
  c->took = bw_link_send(c->l, BW_FILL, 5, NULL, 0, NULL, 0, NULL, 0); /* corked: a copy */
  pthread_mutex_lock(&c->l->mu);
  c->took = c->took && bw_stage_take(c->l, BW_STAGE_PAGE, &off); /* waits for the giver */
  pthread_mutex_unlock(&c->l->mu);
  atomic_store(&c->done, true);
}

/* mu held. Takes a page if one is free, without waiting. */
static bool first_free_page(bw_link *l, size_t *off) {
  for (size_t i = 0; i < l->stage_pages; i++)
    if (!l->page_used[i]) {
      l->page_used[i] = 1;
      *off = i * BW_STAGE_PAGE;
      return true;
    }
  return false;
}

TEST(a_loop_waiting_for_staging_pages_writes_its_cork_first) {
  int cmd[2], note[2], ack[2];
  bw_link *l = NULL;
  link_pair(cmd, note, ack, &l);
  size_t offs[64], n = 0;
  pthread_mutex_lock(&l->mu);
  while (n < 64 && first_free_page(l, &offs[n]))
    n++;
  pthread_mutex_unlock(&l->mu);
  CHECK_GT(n, 0);
  page_giver g = {.l = l, .worker_cmd = cmd[1], .off = offs[0]};
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, give_page_after_frame, &g), 0);
  accel_runtime *rt = NULL;
  CHECK_OK(accel_runtime_create(&rt, NULL));
  CHECK_OK(accel_runtime_start(rt));
  pages_case c = {.l = l};
  accel_post(rt, &c.task, take_page_on_loop);
  TEST_WAIT_FOR(atomic_load(&c.done), 10);
  pthread_join(th, NULL);
  CHECK(g.saw_frame);
  CHECK(c.took);
  expect_tags(cmd[1], 5, 5);
  accel_runtime_stop(rt);
  CHECK_OK(accel_runtime_join(rt));
  accel_runtime_destroy(rt);
  close(cmd[1]);
  close(note[1]);
  close(ack[1]);
  bw_link_end(l);
}

static const test_case tests[] = {
    TEST_CASE(a_loop_waiting_for_staging_pages_writes_its_cork_first),
    TEST_CASE(frames_from_a_loop_go_out_together_at_the_end_of_its_iteration),
    TEST_CASE(a_link_closed_with_frames_in_its_cork_writes_them_first),
    TEST_CASE(frames_at_the_limit_and_one_past),
    TEST_CASE(a_descriptor_travels_with_its_frame),
    TEST_CASE(frames_read_alike_polling_and_after_sleeping),
    TEST_CASE(frames_read_alike_through_a_reader_polling_and_after_sleeping),
    TEST_CASE(a_reader_moves_what_is_left_when_its_buffer_ends),
    TEST_CASE(a_reader_takes_what_the_socket_holds_in_one_read),
    TEST_CASE(a_reader_gives_descriptors_to_their_frames),
    TEST_CASE(a_reader_at_its_limits),
    TEST_CASE(a_full_staging_region_waits_for_a_page),
    TEST_CASE(a_reply_too_short_fails_the_open),
    TEST_CASE(a_frame_one_past_the_limit_ends_the_link),
    TEST_CASE(a_frame_at_the_limit_is_read),
    TEST_CASE(a_worker_dying_mid_call_fails_the_call),
    TEST_CASE(no_worker_at_all_is_a_clear_error),
    TEST_CASE(an_ack_goes_out_while_calls_back_up),
};

int main(int argc, char **argv) {
  const char *mode = getenv("ACCEL_TEST_HOSTILE");
  if (strcmp(argv[0], "accel-device") == 0 && mode != NULL)
    return hostile_worker(mode);
  ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
  if (n <= 0)
    return 1;
  self_path[n] = '\0';
  return test_main_(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
