/* The worker link's rings (backends/worker/ring.h) at their edges: frames in order across the
 * wrap and longer than the ring, a sleeping reader woken, a writer waiting for room, descriptors
 * meeting their frames, positions a hostile peer wrote, the end after the last frame, a
 * channel shut under its reader, the region sealed. Both ends live in this process, over one
 * region and a socketpair, as acceld and a worker do over theirs. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "backends/worker/wire.h"

typedef struct pair {
  bw_rings rings;
  bw_chan w, r; /* the writer's end (acceld's of cmd) and the reader's (the worker's) */
  bw_reader reader;
} pair;

static void pair_open(pair *p, uint64_t fd_types) {
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  CHECK(bw_rings_create(&p->rings));
  p->w = bw_chan_socket(sv[0]);
  p->r = bw_chan_socket(sv[1]);
  bw_chan_ring(&p->w, &p->rings, false);
  bw_chan_ring(&p->r, &p->rings, false);
  CHECK(bw_reader_init_chan(&p->reader, &p->r, fd_types));
}

/* The cmd direction's positions, which both ends of the pair use. */
static bw_ring_ctl *ctl_of(pair *p) {
  return p->w.ring.ctl;
}

static void pair_close(pair *p) {
  bw_reader_fini(&p->reader);
  bw_chan_close(&p->w);
  bw_chan_close(&p->r);
  bw_rings_unmap(&p->rings);
}

/* Frame i: its length and its bytes, known to both sides. */
static uint32_t frame_len(uint32_t i) {
  static const uint32_t lens[] = {0, 1, 7, 100, 4096, 65535, 65536, 70000, 300000, 3u << 20};
  return lens[i % (sizeof lens / sizeof lens[0])] + i % 13;
}

static uint8_t frame_byte(uint32_t i, uint32_t k) {
  return (uint8_t)(i * 31u + k * 7u + (k >> 8));
}

typedef struct writer_job {
  bw_chan *c;
  uint32_t frames;
  bool ok;
} writer_job;

static void *write_frames(void *arg) {
  writer_job *j = arg;
  j->ok = true;
  for (uint32_t i = 0; i < j->frames && j->ok; i++) {
    uint32_t len = frame_len(i);
    uint8_t *b = malloc(len ? len : 1);
    for (uint32_t k = 0; k < len; k++)
      b[k] = frame_byte(i, k);
    j->ok = bw_chan_send(j->c, BW_REPLY, i, b, len, NULL, 0, NULL, 0);
    free(b);
  }
  return NULL;
}

/* Reads frame i and checks every byte. */
static void expect_frame(pair *p, uint32_t i) {
  _Alignas(16) char buf[256];
  bw_hdr h;
  void *body;
  int passed;
  CHECK(bw_reader_next(&p->reader, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME));
  CHECK_EQ(h.type, BW_REPLY);
  CHECK_EQ(h.tag, i);
  CHECK_EQ(h.len, frame_len(i));
  CHECK_EQ(passed, -1);
  const uint8_t *b = body;
  for (uint32_t k = 0; k < h.len; k++)
    if (b[k] != frame_byte(i, k))
      TEST_FAIL("frame %u byte %u: %u, expected %u", i, k, b[k], frame_byte(i, k));
  if (body != buf)
    free(body);
}

/* The reader finds no frame more: the end, or an error. */
static void expect_end(pair *p) {
  _Alignas(16) char buf[64];
  bw_hdr h;
  void *body;
  int passed;
  CHECK(!bw_reader_next(&p->reader, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME));
}

TEST(frames_arrive_whole_and_in_order_across_the_wrap) {
  pair p;
  pair_open(&p, 0);
  enum { FRAMES = 60 }; /* six of 3 MiB: three times the ring each */
  writer_job j = {.c = &p.w, .frames = FRAMES};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, write_frames, &j), 0);
  for (uint32_t i = 0; i < FRAMES; i++)
    expect_frame(&p, i);
  pthread_join(t, NULL);
  CHECK(j.ok);
  CHECK_GT(p.r.ring.pos, 4 * BW_RING_CMD_BYTES); /* it went round several times */
  CHECK_EQ(p.r.ring.pos, p.w.ring.pos);
  pair_close(&p);
}

/* bw_reader_ready: false on an empty ring, true with bytes in the ring, and with frames the
 * reader's buffer holds though the ring is empty (one read took two frames). */
TEST(a_reader_says_whether_frames_wait) {
  pair p;
  pair_open(&p, 0);
  CHECK(!bw_reader_ready(&p.reader));
  writer_job j = {.c = &p.w, .frames = 2};
  write_frames(&j);
  CHECK(j.ok);
  CHECK(bw_reader_ready(&p.reader)); /* in the ring */
  expect_frame(&p, 0);
  CHECK_EQ(rt_ring_avail(&p.r.ring), 0); /* both came in one read */
  CHECK(bw_reader_ready(&p.reader));     /* the second, in the buffer */
  expect_frame(&p, 1);
  CHECK(!bw_reader_ready(&p.reader));
  pair_close(&p);
}

typedef struct reader_job {
  pair *p;
  uint32_t frames;
} reader_job;

static void *read_frames(void *arg) {
  reader_job *j = arg;
  for (uint32_t i = 0; i < j->frames; i++)
    expect_frame(j->p, i);
  return NULL;
}

TEST(a_reader_asleep_on_an_empty_ring_is_woken) {
  pair p;
  pair_open(&p, 0);
  reader_job rj = {.p = &p, .frames = 2};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, read_frames, &rj), 0);
  /* Its flag says it sleeps in poll(2) (after its spin): only the writer's bell wakes it. */
  TEST_WAIT_FOR(atomic_load(&ctl_of(&p)->reader_sleeps) == 1, 1);
  writer_job j = {.c = &p.w, .frames = 2};
  write_frames(&j);
  CHECK(j.ok);
  pthread_join(t, NULL);
  CHECK_EQ(atomic_load(&ctl_of(&p)->reader_sleeps), 0);
  pair_close(&p);
}

/* The time a reader waited for frames is its idle time, in the region for the other process,
 * counted while it still waits: frames already there cost none; once the reader waits, 80 ms
 * later at least 80 ms are counted (polling, then asleep where ACCEL_SPIN_US is 0, polling 2 ms
 * first in the -spin run), never more than the read took. The note direction's, which nobody
 * read, stays 0. */
TEST(a_reader_counts_its_waits_as_idle_time) {
  pair p;
  pair_open(&p, 0);
  CHECK_EQ(bw_rings_reader_idle_ns(&p.rings, false, test_now_ns()), 0);
  writer_job j = {.c = &p.w, .frames = 3};
  write_frames(&j);
  CHECK(j.ok);
  for (uint32_t i = 0; i < 3; i++)
    expect_frame(&p, i);
  CHECK_EQ(bw_rings_reader_idle_ns(&p.rings, false, test_now_ns()), 0); /* each was there */
  uint64_t t0 = test_now_ns();
  reader_job rj = {.p = &p, .frames = 1};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, read_frames, &rj), 0);
  TEST_WAIT_FOR(bw_rings_reader_idle_ns(&p.rings, false, test_now_ns()) > 0, 5); /* it waits */
  test_sleep_ms(80);
  uint64_t waiting = bw_rings_reader_idle_ns(&p.rings, false, test_now_ns());
  j.frames = 1;
  write_frames(&j);
  CHECK(j.ok);
  pthread_join(t, NULL);
  uint64_t took = test_now_ns() - t0;
  uint64_t idle = bw_rings_reader_idle_ns(&p.rings, false, test_now_ns());
  printf("# 80 ms into the wait: %.3f ms idle; the read took %.3f ms, %.3f ms of it idle\n",
         (double)waiting * 1e-6, (double)took * 1e-6, (double)idle * 1e-6);
  CHECK_GE(waiting, 80000000ull);
  CHECK_GE(idle, waiting);
  CHECK_LE(idle, took);
  CHECK_EQ(bw_rings_reader_idle_ns(&p.rings, true, test_now_ns()), 0);
  pair_close(&p);
}

TEST(a_writer_waits_for_room_and_goes_on_when_it_comes) {
  pair p;
  pair_open(&p, 0);
  enum { FRAMES = 10 }; /* frame 9 is 3 MiB: more than the ring holds */
  writer_job j = {.c = &p.w, .frames = FRAMES};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, write_frames, &j), 0);
  bw_ring_ctl *ctl = ctl_of(&p);
  TEST_WAIT_FOR(atomic_load(&ctl->writer_waits) == 1, 1); /* full: asleep for room */
  CHECK_EQ(atomic_load(&ctl->tail) - atomic_load(&ctl->head), BW_RING_CMD_BYTES);
  for (uint32_t i = 0; i < FRAMES; i++)
    expect_frame(&p, i);
  pthread_join(t, NULL);
  CHECK(j.ok);
  pair_close(&p);
}

/* A pipe's write end passed with a frame: the reader's descriptor must be that pipe. */
static void expect_fd_frame(pair *p, uint64_t tag, int pipe_read) {
  _Alignas(16) char buf[64];
  bw_hdr h;
  void *body;
  int passed;
  CHECK(bw_reader_next(&p->reader, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME));
  CHECK_EQ(h.tag, tag);
  CHECK_GE(passed, 0);
  char c = (char)('a' + tag);
  CHECK_EQ(write(passed, &c, 1), 1);
  char got = 0;
  CHECK_EQ(read(pipe_read, &got, 1), 1);
  CHECK_EQ(got, c);
  close(passed);
}

TEST(descriptors_meet_their_frames) {
  pair p;
  pair_open(&p, BW_TYPE_BIT(BW_SHARE));
  int a[2], b[2];
  CHECK_EQ(pipe(a), 0);
  CHECK_EQ(pipe(b), 0);
  uint64_t v = 9;
  CHECK(bw_chan_send_fd(&p.w, BW_SHARE, 0, &v, sizeof v, a[1]));
  CHECK(bw_chan_send(&p.w, BW_UNSHARE, 1, &v, sizeof v, NULL, 0, NULL, 0));
  CHECK(bw_chan_send_fd(&p.w, BW_SHARE, 2, &v, sizeof v, b[1]));
  close(a[1]);
  close(b[1]);
  expect_fd_frame(&p, 0, a[0]);
  _Alignas(16) char buf[64];
  bw_hdr h;
  void *body;
  int passed;
  CHECK(bw_reader_next(&p.reader, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME));
  CHECK_EQ(h.type, BW_UNSHARE);
  CHECK_EQ(passed, -1); /* a type that takes none */
  expect_fd_frame(&p, 2, b[0]);
  close(a[0]);
  close(b[0]);
  pair_close(&p);
}

TEST(a_position_past_the_ring_ends_the_channel) {
  pair p;
  pair_open(&p, 0);
  bw_ring_ctl *ctl = ctl_of(&p);
  /* A tail the ring can hold is read; one past it is a peer that lies. */
  atomic_store(&ctl->tail, BW_RING_CMD_BYTES + 1);
  expect_end(&p);
  /* The writer's side: a head ahead of what it wrote. */
  atomic_store(&ctl->head, 5);
  CHECK(!bw_chan_send(&p.w, BW_REPLY, 1, NULL, 0, NULL, 0, NULL, 0));
  pair_close(&p);
}

/* The writer's room against a head the reader wrote: the ring exactly full waits for room,
 * one byte more than the ring is a lie that ends the channel. */
TEST(a_head_at_the_limit_waits_and_one_past_ends_the_channel) {
  pair p;
  pair_open(&p, 0);
  bw_ring_ctl *ctl = ctl_of(&p);
  writer_job j = {.c = &p.w, .frames = 3};
  write_frames(&j); /* some bytes in: the positions are not both 0 */
  CHECK(j.ok);
  uint64_t pos = p.w.ring.pos;
  atomic_store(&ctl->head, pos - BW_RING_CMD_BYTES); /* full: a reader that read nothing */
  writer_job more = {.c = &p.w, .frames = 1};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, write_frames, &more), 0);
  TEST_WAIT_FOR(atomic_load(&ctl->writer_waits) == 1, 1);
  for (uint32_t i = 0; i < 3; i++) /* the reader makes room, bells the writer */
    expect_frame(&p, i);
  pthread_join(t, NULL);
  CHECK(more.ok);
  expect_frame(&p, 0);
  atomic_store(&ctl->head, p.w.ring.pos - BW_RING_CMD_BYTES - 1);
  CHECK(!bw_chan_send(&p.w, BW_REPLY, 9, NULL, 0, NULL, 0, NULL, 0));
  pair_close(&p);
}

/* A hostile reader that says it sleeps before every frame gets a bell per frame; a socket full
 * of bells it never reads stops none of the writes (a bell pending is a bell), and every
 * frame still arrives, in order. */
TEST(a_reader_that_always_says_it_sleeps_costs_bells_only) {
  pair p;
  pair_open(&p, 0);
  bw_ring_ctl *ctl = ctl_of(&p);
  enum { SMALL = 20000 };
  for (uint32_t i = 0; i < SMALL; i++) {
    atomic_store(&ctl->reader_sleeps, 1);
    uint32_t v = i;
    CHECK(bw_chan_send(&p.w, BW_REPLY, i, &v, sizeof v, NULL, 0, NULL, 0));
  }
  int queued = 0;
  CHECK_EQ(ioctl(p.r.fd, FIONREAD, &queued), 0);
  CHECK_GT(queued, 100); /* the bells: many, as many as the socket took */
  for (uint32_t i = 0; i < SMALL; i++) {
    _Alignas(16) char buf[64];
    bw_hdr h;
    void *body;
    int passed;
    CHECK(bw_reader_next(&p.reader, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME));
    uint32_t v;
    CHECK_EQ(h.tag, i);
    CHECK_EQ(h.len, sizeof v);
    memcpy(&v, body, sizeof v);
    CHECK_EQ(v, i);
  }
  pair_close(&p);
}

TEST(the_end_comes_after_the_last_frame) {
  pair p;
  pair_open(&p, 0);
  writer_job j = {.c = &p.w, .frames = 4};
  write_frames(&j);
  CHECK(j.ok);
  shutdown(p.w.fd, SHUT_RDWR); /* the peer's exit, as the reader sees it */
  for (uint32_t i = 0; i < 4; i++)
    expect_frame(&p, i);
  expect_end(&p);
  pair_close(&p);
}

static void *read_until_end(void *arg) {
  pair *p = arg;
  _Alignas(16) char buf[64];
  bw_hdr h;
  void *body;
  int passed;
  while (bw_reader_next(&p->reader, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME))
    if (body != buf)
      free(body);
  return NULL;
}

TEST(a_channel_shut_here_ends_its_reader) {
  pair p;
  pair_open(&p, 0);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, read_until_end, &p), 0);
  test_sleep_ms(20); /* polling or asleep: either way it must return */
  bw_chan_shutdown(&p.r, SHUT_RD);
  pthread_join(t, NULL);
  pair_close(&p);
}

TEST(a_writer_waiting_for_room_sees_the_reader_go) {
  pair p;
  pair_open(&p, 0);
  writer_job j = {.c = &p.w, .frames = 10}; /* more than the ring: it waits */
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, write_frames, &j), 0);
  bw_ring_ctl *ctl = ctl_of(&p);
  TEST_WAIT_FOR(atomic_load(&ctl->writer_waits) == 1, 1);
  close(p.r.fd); /* the reader's process is gone */
  p.r.fd = -1;
  pthread_join(t, NULL);
  CHECK(!j.ok);
  pair_close(&p);
}

/* More descriptors than the reader's queue holds arrive while it sleeps: the queue takes 16
 * and the rest wait in the socket, each still meeting its own frame. The reader is a process
 * stopped while the writer sends everything, so that its one drain finds all of it. */
enum { MANY_FDS = BW_RING_FDS + 4 };

static int read_shares(pair *p) {
  for (uint32_t i = 0; i < MANY_FDS; i++) {
    _Alignas(16) char buf[64];
    bw_hdr h;
    void *body;
    int passed;
    if (!bw_reader_next(&p->reader, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME) ||
        h.tag != i || passed < 0)
      return 1;
    if (i == 0 && p->r.nfds != BW_RING_FDS - 1)
      return 2; /* the queue was full when the first frame took its descriptor */
    char c = (char)i;
    if (write(passed, &c, 1) != 1)
      return 3;
    close(passed);
  }
  return 0;
}

TEST(descriptors_past_the_queue_wait_in_the_socket) {
  pair p;
  pair_open(&p, BW_TYPE_BIT(BW_SHARE));
  pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0)
    _exit(read_shares(&p));
  TEST_WAIT_FOR(atomic_load(&ctl_of(&p)->reader_sleeps) == 1, 1);
  CHECK_EQ(kill(pid, SIGSTOP), 0);
  int st;
  CHECK_EQ(waitpid(pid, &st, WUNTRACED), pid);
  int pipes[MANY_FDS][2];
  uint64_t v = 1;
  for (uint32_t i = 0; i < MANY_FDS; i++) {
    CHECK_EQ(pipe(pipes[i]), 0);
    CHECK(bw_chan_send_fd(&p.w, BW_SHARE, i, &v, sizeof v, pipes[i][1]));
    close(pipes[i][1]);
  }
  CHECK_EQ(kill(pid, SIGCONT), 0);
  CHECK_EQ(waitpid(pid, &st, 0), pid);
  CHECK(WIFEXITED(st));
  CHECK_EQ(WEXITSTATUS(st), 0);
  for (uint32_t i = 0; i < MANY_FDS; i++) {
    char c = 0;
    CHECK_EQ(read(pipes[i][0], &c, 1), 1);
    CHECK_EQ(c, (char)i); /* frame i wrote into pipe i: each descriptor met its frame */
    close(pipes[i][0]);
  }
  pair_close(&p);
}

/* A writer killed while it waits for room: everything it wrote is still read, then the end. */
TEST(a_writer_gone_while_it_waited_leaves_what_it_wrote) {
  pair p;
  pair_open(&p, 0);
  pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0) {
    writer_job j = {.c = &p.w, .frames = 10}; /* frame 9 (3 MiB) cannot fit */
    write_frames(&j);
    _exit(0);
  }
  close(p.w.fd); /* the writer's end lives in the writer only */
  p.w.fd = -1;
  TEST_WAIT_FOR(atomic_load(&ctl_of(&p)->writer_waits) == 1, 1);
  CHECK_EQ(kill(pid, SIGKILL), 0);
  CHECK_EQ(waitpid(pid, NULL, 0), pid);
  for (uint32_t i = 0; i < 9; i++)
    expect_frame(&p, i);
  expect_end(&p);
  pair_close(&p);
}

/* Descriptors sent for frames that never come fill the reader's queue while the ring stays
 * empty: the channel ends rather than the reader spinning on a socket that stays readable. */
TEST(descriptors_without_frames_end_the_channel) {
  pair p;
  pair_open(&p, BW_TYPE_BIT(BW_SHARE));
  int fds[2];
  CHECK_EQ(pipe(fds), 0);
  for (int i = 0; i <= BW_RING_FDS; i++)
    CHECK(bw_chan_pass(&p.w, &fds[1], 1));
  expect_end(&p);
  CHECK_EQ(p.r.nfds, (uint32_t)BW_RING_FDS); /* held until the channel closes them */
  close(fds[0]);
  close(fds[1]);
  pair_close(&p);
}

TEST(the_region_is_sealed_and_checked) {
  bw_rings r;
  CHECK(bw_rings_create(&r));
  CHECK_EQ(ftruncate(r.fd, 4096), -1); /* no peer can shrink it under the other's mapping */
  CHECK_EQ(errno, EPERM);
  bw_rings m;
  CHECK(bw_rings_map(&m, dup(r.fd)));
  CHECK_EQ(m.bytes, r.bytes);
  bw_rings_unmap(&m);
  bw_rings_unmap(&r);
  int small = memfd_create("small", MFD_CLOEXEC);
  CHECK_GE(small, 0);
  CHECK_EQ(ftruncate(small, 4096), 0);
  CHECK(!bw_rings_map(&m, small)); /* not the size of a link's rings */
  bw_rings_unmap(&m);
}

static const test_case tests[] = {
    TEST_CASE(frames_arrive_whole_and_in_order_across_the_wrap),
    TEST_CASE(a_reader_says_whether_frames_wait),
    TEST_CASE(a_reader_asleep_on_an_empty_ring_is_woken),
    TEST_CASE(a_reader_counts_its_waits_as_idle_time),
    TEST_CASE(a_writer_waits_for_room_and_goes_on_when_it_comes),
    TEST_CASE(descriptors_meet_their_frames),
    TEST_CASE(a_position_past_the_ring_ends_the_channel),
    TEST_CASE(the_end_comes_after_the_last_frame),
    TEST_CASE(a_channel_shut_here_ends_its_reader),
    TEST_CASE(a_writer_waiting_for_room_sees_the_reader_go),
    TEST_CASE(descriptors_past_the_queue_wait_in_the_socket),
    TEST_CASE(a_writer_gone_while_it_waited_leaves_what_it_wrote),
    TEST_CASE(descriptors_without_frames_end_the_channel),
    TEST_CASE(the_region_is_sealed_and_checked),
    TEST_CASE(a_head_at_the_limit_waits_and_one_past_ends_the_channel),
    TEST_CASE(a_reader_that_always_says_it_sleeps_costs_bells_only),
};

TEST_MAIN(tests)
