/* The local transport's buffered reader, client side (proto/local.c proto_reader_try_next,
 * with proto_wait_readable between reads, as the client's readers use them):
 *   - frames split anywhere by the writer (a header in two pieces, a body in many) come out
 *     whole, several frames taken by one read come out one by one, then the end;
 *   - bytes that are not a frame of ours are EPROTO;
 *   - a reader asleep waiting for a reply is not woken each time the peer takes the bytes
 *     its own socket sent: a Unix socket tells its waiters when it has room to write again,
 *     and a reader asleep in recv(2) wakes for that too. The client's receiver shares its
 *     socket with the client's requests, so that was one more wake-up per op (and a wake-up
 *     the daemon's thread paid for). Counted with the thread's voluntary context switches. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../test.h"
#include "proto/local.h"
#include "proto/wire.h"

/* The next frame, asleep in proto_wait_readable while none is whole. */
static long long next_frame(proto_reader *rd, int fd, const uint8_t **frame) {
  for (;;) {
    long long n = proto_reader_try_next(rd, fd, 1 << 20, frame);
    if (n != ACCEL_EAGAIN)
      return n;
    int rc = proto_wait_readable(fd, -1);
    if (rc != 0)
      return rc;
  }
}

static void control_frame(proto_out *o, uint64_t id, uint64_t arg) {
  proto_out_init(o);
  proto_control_req c = {PROTO_CTL_PING, arg};
  CHECK_EQ(proto_encode_control(o, id, &c), 0);
}

static void expect_control(proto_reader *rd, int fd, uint64_t id, uint64_t arg) {
  const uint8_t *frame;
  long long n = next_frame(rd, fd, &frame);
  CHECK_GT(n, 0);
  proto_header h;
  CHECK_EQ(proto_decode_header(frame, (size_t)n, 1 << 20, &h), 0);
  CHECK_EQ(h.request_id, id);
  proto_control_req c;
  CHECK_EQ(proto_decode_control(frame + PROTO_HEADER_SIZE, h.body_len, &c), 0);
  CHECK_EQ(c.arg, arg);
}

typedef struct dribbler {
  int fd;
  const uint8_t *bytes;
  size_t len;
} dribbler;

/* Writes the bytes a few at a time, with pauses: the reader sees every split. */
static void *dribble(void *arg) {
  dribbler *d = arg;
  for (size_t at = 0; at < d->len;) {
    size_t n = d->len - at < 5 ? d->len - at : 5;
    if (write(d->fd, d->bytes + at, n) != (ssize_t)n)
      return NULL;
    at += n;
    usleep(200);
  }
  shutdown(d->fd, SHUT_WR);
  return d;
}

TEST(split_frames_read_whole_then_the_end) {
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  proto_out a, b;
  control_frame(&a, 1, 111);
  control_frame(&b, 2, 222);
  uint8_t both[256];
  CHECK_LE(a.len + b.len, sizeof both);
  memcpy(both, a.data, a.len);
  memcpy(both + a.len, b.data, b.len);
  dribbler d = {sv[0], both, a.len + b.len};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, dribble, &d), 0);
  proto_reader rd = {0};
  expect_control(&rd, sv[1], 1, 111);
  expect_control(&rd, sv[1], 2, 222);
  const uint8_t *frame;
  CHECK_EQ(next_frame(&rd, sv[1], &frame), ACCEL_ECLOSED);
  void *ok;
  CHECK_EQ(pthread_join(t, &ok), 0);
  CHECK(ok != NULL);
  proto_reader_free(&rd);
  proto_out_free(&a);
  proto_out_free(&b);
  close(sv[0]);
  close(sv[1]);
}

TEST(frames_in_one_read_come_one_by_one_and_garbage_is_eproto) {
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  for (uint64_t i = 1; i <= 3; i++) {
    proto_out o;
    control_frame(&o, i, i * 10);
    CHECK_EQ(write(sv[0], o.data, o.len), (ssize_t)o.len);
    proto_out_free(&o);
  }
  uint8_t junk[PROTO_HEADER_SIZE];
  memset(junk, 0x5a, sizeof junk);
  CHECK_EQ(write(sv[0], junk, sizeof junk), (ssize_t)sizeof junk);
  proto_reader rd = {0};
  for (uint64_t i = 1; i <= 3; i++)
    expect_control(&rd, sv[1], i, i * 10);
  const uint8_t *frame;
  CHECK_EQ(next_frame(&rd, sv[1], &frame), ACCEL_EPROTO);
  proto_reader_free(&rd);
  close(sv[0]);
  close(sv[1]);
}

/* ---- no wake-up for the room to write ---- */

typedef struct sleeper {
  int fd;
  _Atomic pid_t tid;
  long long got;
} sleeper;

static void *read_one(void *arg) {
  sleeper *s = arg;
  atomic_store(&s->tid, (pid_t)syscall(SYS_gettid));
  proto_reader rd = {0};
  const uint8_t *frame;
  s->got = next_frame(&rd, s->fd, &frame);
  proto_reader_free(&rd);
  return NULL;
}

/* The thread's voluntary context switches so far (each is a sleep it woke from). */
static long voluntary_switches(pid_t tid) {
  char path[64], line[128];
  snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
  FILE *f = fopen(path, "r");
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
      break;
  if (f)
    fclose(f);
  return v;
}

TEST(a_sleeping_reader_is_not_woken_when_its_own_bytes_are_taken) {
  enum { SENDS = 200 };
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  sleeper s = {.fd = sv[1]};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, read_one, &s), 0);
  while (atomic_load(&s.tid) == 0)
    usleep(100);
  usleep(20000); /* asleep in its read by now */
  long before = voluntary_switches(atomic_load(&s.tid));
  CHECK_GE(before, 0);
  /* The reader's socket sends (as a client's requests go out while its receiver waits) and
   * the peer takes each send before the next: room to write comes back 200 times. */
  char c = 'r', got;
  for (int i = 0; i < SENDS; i++) {
    CHECK_EQ(write(sv[1], &c, 1), 1);
    CHECK_EQ(read(sv[0], &got, 1), 1);
    usleep(50);
  }
  long after = voluntary_switches(atomic_load(&s.tid));
  proto_out o;
  control_frame(&o, 9, 99);
  CHECK_EQ(write(sv[0], o.data, o.len), (ssize_t)o.len);
  CHECK_EQ(pthread_join(t, NULL), 0);
  CHECK_EQ(s.got, (long long)o.len);
  /* In recv(2) it woke once per send taken (about 200); in poll(2) for POLLIN, never. */
  CHECK_LT(after - before, SENDS / 10);
  proto_out_free(&o);
  close(sv[0]);
  close(sv[1]);
}

static const test_case tests[] = {
    TEST_CASE(split_frames_read_whole_then_the_end),
    TEST_CASE(frames_in_one_read_come_one_by_one_and_garbage_is_eproto),
    TEST_CASE(a_sleeping_reader_is_not_woken_when_its_own_bytes_are_taken),
};

int main(int argc, char **argv) {
  return test_main_(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
