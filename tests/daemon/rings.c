/* The local link's shared rings (proto/local_rings.h) from outside, by hand: a region offered
 * with the HELLO is taken where an I/O thread serves the connection, frames then go both ways
 * through it (larger than the rings too), and a client that writes nonsense into it, or dies
 * half-way through a frame, loses its own connection and nothing else. Run with I/O threads
 * (ACCEL_TEST_IO_THREADS, tests/daemon/meson.build). */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/local.h"
#include "proto/local_rings.h"
#include "test.h"
#include "util.h"

static void start(td_daemon *d) {
  td_prepare(d);
  td_write_config(d, "[daemon]\nfirst_frame_timeout_ms = 3600000\n");
  td_start(d, "--backends", "cpu", NULL);
}

/* A PING through the client's up ring, published each `piece` bytes (0: once), or only its
 * first half (a client gone mid-frame); its request id. */
static uint64_t send_ping(td_client *c, size_t piece, bool half) {
  proto_out o;
  proto_out_init(&o);
  uint64_t id = c->next_id++;
  proto_control_req req = {PROTO_CTL_PING, 0};
  CHECK_OK(proto_encode_control(&o, id, &req));
  td_send_rings(c, o.data, half ? o.len / 2 : o.len, piece);
  proto_out_free(&o);
  return id;
}

/* A client on rings, and a bystander on its socket, both welcomed. */
static void two_clients(td_daemon *d, td_client *c, td_client *bystander) {
  td_client_open(bystander, d->url);
  CHECK_OK(td_hello(bystander, NULL));
  td_client_open(c, d->url);
  CHECK(td_hello_rings(c) & PROTO_CAP_RINGS);
  CHECK(c->rings != NULL);
}

TEST(an_offered_region_is_taken_and_carries_frames_both_ways) {
  td_daemon d;
  start(&d);
  td_client c, b;
  two_clients(&d, &c, &b);
  /* 40 bytes up, 32 down: round the 256 KiB rings twice, frames straddling the wrap at every
   * offset; 200 in flight at a time. */
  for (int batch = 0; batch < 100; batch++) {
    uint64_t first = c.next_id;
    for (int i = 0; i < 200; i++)
      (void)send_ping(&c, 0, false);
    for (uint64_t id = first; id < c.next_id; id++) { /* answered in order: one session */
      nng_msg *m;
      CHECK_OK(td_recv(&c, &m, TD_FOREVER));
      CHECK_OK(td_reply_status(m, id, NULL));
      nng_msg_free(m);
    }
  }
  CHECK_GT(c.up.pos, 2 * (uint64_t)PROTO_RINGS_UP_BYTES);
  CHECK_GT(c.down.pos, 2 * (uint64_t)PROTO_RINGS_DOWN_BYTES);
  td_client_close(&c);
  td_client_close(&b);
  td_cleanup(&d);
}

/* A write and a read of 1 MiB, four times each ring's size: the daemon takes the request in
 * pieces as room comes, and puts the reply in as the client makes room (its writer waits
 * for room and is rung). The frame also goes in 1-byte pieces, each published alone. */
TEST(frames_larger_than_the_rings_go_in_pieces) {
  enum { N = 256 * 1024 };
  td_daemon d;
  start(&d);
  td_client c, b;
  two_clients(&d, &c, &b);
  uint32_t *src = malloc(N * 4), *dst = malloc(N * 4);
  for (uint32_t i = 0; i < N; i++)
    src[i] = i * 2654435761u;
  uint64_t h = td_handle(1, 1);
  CHECK_OK(td_create(&c, h, ACCEL_U32, N));
  CHECK_OK(td_write_u32(&c, h, src, N));
  CHECK_OK(td_read_u32(&c, h, dst, N));
  CHECK_EQ(memcmp(src, dst, N * 4), 0);
  uint64_t id = send_ping(&c, 1, false); /* a byte at a time */
  nng_msg *m;
  CHECK_OK(td_recv(&c, &m, TD_FOREVER));
  CHECK_OK(td_reply_status(m, id, NULL));
  nng_msg_free(m);
  CHECK_OK(td_control(&b, PROTO_CTL_PING, 0));
  free(src);
  free(dst);
  td_client_close(&c);
  td_client_close(&b);
  td_cleanup(&d);
}

TEST(a_region_that_is_not_sealed_is_declined) {
  td_daemon d;
  start(&d);
  td_client c;
  td_client_open(&c, d.url);
  int fd = memfd_create("not-sealed", MFD_CLOEXEC);
  CHECK_GE(fd, 0);
  CHECK_EQ(ftruncate(fd, PROTO_RINGS_BYTES), 0); /* the right size, but it could shrink */
  CHECK_EQ(td_hello_passing(&c, fd) & PROTO_CAP_RINGS, 0u);
  close(fd);
  CHECK_OK(td_control(&c, PROTO_CTL_PING, 0)); /* the socket, as without rings */
  td_client_close(&c);
  td_cleanup(&d);
}

TEST(a_region_of_another_size_is_declined) {
  td_daemon d;
  start(&d);
  td_client c;
  td_client_open(&c, d.url);
  int fd = memfd_create("small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  CHECK_GE(fd, 0);
  CHECK_EQ(ftruncate(fd, PROTO_RINGS_BYTES - 4096), 0); /* one page short, sealed */
  CHECK_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  CHECK_EQ(td_hello_passing(&c, fd) & PROTO_CAP_RINGS, 0u);
  close(fd);
  CHECK_OK(td_control(&c, PROTO_CTL_PING, 0));
  td_client_close(&c);
  td_cleanup(&d);
}

/* The ring's tail at the limit (a full ring of frames) is read; one past it ends the
 * connection, and only that one. */
TEST(a_tail_past_the_ring_ends_that_connection_only) {
  td_daemon d;
  start(&d);
  td_client c, b;
  two_clients(&d, &c, &b);
  CHECK_OK(td_control(&c, PROTO_CTL_PING, 0));
  c.up.pos += (uint64_t)PROTO_RINGS_UP_BYTES + 1; /* one past what a writer can have written */
  (void)rt_ring_publish(&c.up, c.fd);             /* it may have closed by the bell */
  nng_msg *m;
  CHECK_EQ(td_recv(&c, &m, TD_FOREVER), NNG_ECLOSED); /* the end, nothing else */
  TEST_WAIT_FOR(strstr(td_log(&d), "a shared ring position it cannot have written") != NULL, 20);
  CHECK_OK(td_control(&b, PROTO_CTL_PING, 0));
  td_client_close(&c);
  td_client_close(&b);
  td_cleanup(&d);
}

TEST(a_head_past_the_ring_ends_that_connection_only) {
  td_daemon d;
  start(&d);
  td_client c, b;
  two_clients(&d, &c, &b);
  atomic_store(&c.down.ctl->head, (uint64_t)PROTO_RINGS_DOWN_BYTES * 3); /* never written */
  (void)send_ping(&c, 0, false);
  char byte;
  TEST_WAIT_FOR(recv(c.fd, &byte, 1, MSG_DONTWAIT) == 0, 20); /* bells, then the end */
  CHECK_OK(td_control(&b, PROTO_CTL_PING, 0));
  td_client_close(&c);
  td_client_close(&b);
  td_cleanup(&d);
}

/* Half a frame in the ring, then the client is gone: the daemon reads what came and ends the
 * connection (its session too), serving the others. */
TEST(a_client_gone_half_way_through_a_frame) {
  td_daemon d;
  start(&d);
  td_client c, b;
  two_clients(&d, &c, &b);
  (void)send_ping(&c, 0, true);
  td_client_close(&c);
  TEST_WAIT_FOR(td_status_field(&d, "connections") == 2, 20); /* the bystander, accelctl */
  CHECK_OK(td_control(&b, PROTO_CTL_PING, 0));
  td_client_close(&b);
  td_cleanup(&d);
}

/* Descriptors passed on the socket with no frame to take them (counted in `passes`, as a
 * client does): 8 wait (a client attaching regions from 8 threads at once), the 9th ends the
 * connection, as over the socket alone. */
static int pass_fds(td_client *c, int n) {
  int fd = memfd_create("pass", MFD_CLOEXEC);
  CHECK_GE(fd, 0);
  for (int i = 0; i < n; i++) {
    static const uint8_t pass = 'F';
    if (proto_local_send(c->fd, &pass, 1, fd) != 0)
      break;
    atomic_fetch_add(&c->up.ctl->passes, 1);
  }
  close(fd);
  return 0;
}

TEST(descriptors_without_frames_at_the_limit_and_one_past) {
  td_daemon d;
  start(&d);
  td_client c, b;
  two_clients(&d, &c, &b);
  CHECK_OK(pass_fds(&c, 8));
  CHECK_OK(td_control(&b, PROTO_CTL_PING, 0)); /* a round trip on the daemon's loop */
  CHECK_OK(td_control(&c, PROTO_CTL_PING, 0)); /* still served */
  td_client_close(&c);
  td_client_open(&c, d.url);
  CHECK(td_hello_rings(&c) & PROTO_CAP_RINGS);
  CHECK_OK(pass_fds(&c, 9));
  nng_msg *m;
  CHECK_EQ(td_recv(&c, &m, TD_FOREVER), NNG_ECLOSED);
  TEST_WAIT_FOR(strstr(td_log(&d), "descriptors it did not announce") != NULL, 20);
  CHECK_OK(td_control(&b, PROTO_CTL_PING, 0));
  td_client_close(&c);
  td_client_close(&b);
  td_cleanup(&d);
}

/* Bytes on the socket beside the rings are bells: a client that sends them by the megabyte
 * (to keep an I/O thread reading) loses its connection, and the thread serves the others. */
TEST(a_flood_of_bells_ends_that_connection_only) {
  td_daemon d;
  start(&d);
  td_client c, b;
  two_clients(&d, &c, &b);
  static uint8_t junk[64 << 10];
  memset(junk, 'B', sizeof junk);
  for (int i = 0; i < 1024; i++) /* 64 MiB at most: it ends well before */
    if (send(c.fd, junk, sizeof junk, MSG_NOSIGNAL) < 0)
      break;
  nng_msg *m;
  CHECK_EQ(td_recv(&c, &m, TD_FOREVER), NNG_ECLOSED);
  TEST_WAIT_FOR(strstr(td_log(&d), "bytes beside its shared rings") != NULL, 20);
  CHECK_OK(td_control(&b, PROTO_CTL_PING, 0));
  td_client_close(&c);
  td_client_close(&b);
  td_cleanup(&d);
}

/* n fills of h, each waited for, then a read: every fill answered, the buffer holding the
 * last value (the op after a reply sees the work the reply announced). */
static void fills_then_read(td_client *c, uint64_t h, int n) {
  uint32_t got[64];
  for (int i = 0; i < n; i++)
    CHECK_OK(td_fill(c, h, (uint32_t)i + 7));
  CHECK_OK(td_read_u32(c, h, got, 64));
  for (int i = 0; i < 64; i++)
    CHECK_EQ(got[i], (uint32_t)n + 6);
}

/* Fills of h by a client that says it sleeps on its socket, each waited for, its bell taken
 * (the flag cleared: a late bell would take it from the next op otherwise). */
static void sleeping_fills(td_client *c, uint64_t h, int n) {
  for (int i = 0; i < n; i++) {
    atomic_store(&c->down.ctl->reader_sleeps, 1);
    CHECK_OK(td_fill(c, h, (uint32_t)i));
    TEST_WAIT_FOR(atomic_load(&c->down.ctl->reader_sleeps) == 0, 20);
  }
}

/* A client that polls its ring (its down ring's reader_sleeps 0: take_ring naps and never
 * waits on the socket) gets a status reply from the thread that saw the fill done, before
 * the loop finished it; a sleeping one too while its stream's I/O thread spins (which rings
 * it), and from the loop, with its bell, while that thread sleeps (the bell would be a system
 * call on the completing thread); with ACCEL_EARLY_REPLIES=0 none leaves early. A client
 * that leaves with its op in flight leaves the daemon as it was. */
/* start() with ACCEL_SPIN_US=us in the daemon's environment (the suite's own value kept). */
static void start_spinning(td_daemon *d, const char *us) {
  const char *was = getenv("ACCEL_SPIN_US");
  char keep[32];
  snprintf(keep, sizeof keep, "%s", was ? was : "");
  CHECK_EQ(setenv("ACCEL_SPIN_US", us, 1), 0);
  start(d);
  CHECK_EQ(was ? setenv("ACCEL_SPIN_US", keep, 1) : unsetenv("ACCEL_SPIN_US"), 0);
}

TEST(status_replies_to_a_polling_client_leave_as_the_work_ends) {
  td_daemon d;
  start_spinning(&d, "200000"); /* its threads spin 0.2 s after work */
  td_client c, b;
  two_clients(&d, &c, &b);
  atomic_store(&c.down.ctl->reader_sleeps, 0);
  uint64_t h = td_handle(1, 1);
  CHECK_OK(td_create(&c, h, ACCEL_U32, 64));
  fills_then_read(&c, h, 200);
  long early = td_status_field(&d, "replies_early");
  CHECK_EQ(early, 200); /* each fill's; the create and the read carry no device completion */
  TEST_WAIT_FOR(td_status_field(&d, "light_clients") == 0, 20); /* counted back to none */
  /* One more polling fill first: its thread, perhaps asleep after the status queries above,
   * spins again, so the sleeping fills right after meet it awake. */
  CHECK_OK(td_fill(&c, h, 7));
  sleeping_fills(&c, h, 50); /* early too, rung by the spinning thread */
  CHECK_EQ(td_status_field(&d, "replies_early"), early + 51);
  TEST_WAIT_FOR(td_status_field(&d, "light_clients") == 0, 20);
  atomic_store(&c.down.ctl->reader_sleeps, 0);
  proto_out o;
  proto_out_init(&o);
  td_encode_fill(&o, c.next_id++, h, 1);
  td_send_rings(&c, o.data, o.len, 0);
  proto_out_free(&o);
  td_client_close(&c); /* the reply has nowhere to go */
  CHECK_OK(td_control(&b, PROTO_CTL_PING, 0));
  TEST_WAIT_FOR(td_status_field(&d, "ops_in_flight") == 0, 20);
  td_client_close(&b);
  td_cleanup(&d);

  start_spinning(&d, "0"); /* its threads sleep as soon as they can */
  two_clients(&d, &c, &b);
  CHECK_OK(td_create(&c, h, ACCEL_U32, 64));
  sleeping_fills(&c, h, 50); /* from the loop, rung */
  /* Nearly all: the fill may end before its I/O thread, done handing it on, has gone to
   * sleep (a slow machine, ThreadSanitizer); replies rung from the completing thread would
   * make it 50. */
  CHECK(td_status_field(&d, "replies_early") <= 5);
  td_client_close(&c);
  td_client_close(&b);
  td_cleanup(&d);

  CHECK_EQ(setenv("ACCEL_EARLY_REPLIES", "0", 1), 0);
  start(&d);
  CHECK_EQ(unsetenv("ACCEL_EARLY_REPLIES"), 0);
  two_clients(&d, &c, &b);
  atomic_store(&c.down.ctl->reader_sleeps, 0);
  CHECK_OK(td_create(&c, h, ACCEL_U32, 64));
  fills_then_read(&c, h, 50);
  CHECK_EQ(td_status_field(&d, "replies_early"), 0);
  td_client_close(&c);
  td_client_close(&b);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(status_replies_to_a_polling_client_leave_as_the_work_ends),
    TEST_CASE(a_flood_of_bells_ends_that_connection_only),
    TEST_CASE(descriptors_without_frames_at_the_limit_and_one_past),
    TEST_CASE(an_offered_region_is_taken_and_carries_frames_both_ways),
    TEST_CASE(frames_larger_than_the_rings_go_in_pieces),
    TEST_CASE(a_region_that_is_not_sealed_is_declined),
    TEST_CASE(a_region_of_another_size_is_declined),
    TEST_CASE(a_tail_past_the_ring_ends_that_connection_only),
    TEST_CASE(a_head_past_the_ring_ends_that_connection_only),
    TEST_CASE(a_client_gone_half_way_through_a_frame),
};

TEST_MAIN(tests)
