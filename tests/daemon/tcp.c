/* tcp://: acceld's own stream over TCP (server/server_tcp.c, proto/tcp.c, the tcp link of
 * clients/remote_local.c), against a real acceld:
 * - libaccel moves data both ways, large transfers included, with nothing shared (no
 *   descriptors cross TCP), and `accelctl clients` names the transport;
 * - a client that pipelines far past the daemon's ops in flight per connection without
 *   reading is paused, not refused: every op is answered OK, in order;
 * - libaccel's send queue (clients/remote_send_queue.c) is bounded: with the daemon stopped, a
 *   thread issuing fills blocks once the sockets and the queue are full, and goes on when the
 *   daemon does (every fill answered, the last one's value read back); if the daemon dies
 *   instead, the blocked sender is released, the fills fail with ACCEL_ECLOSED, and
 *   accel_finish and accel_close return;
 * - a control request after the daemon left is ACCEL_ECLOSED, not a wait for ever;
 * - a peer that sends bytes that are not frames is closed; the daemon serves the next;
 * - shared memory is refused over tcp:// (no descriptor can come with SHM_ATTACH);
 * - listening: an address in use, a URL without a port, a port past 65535 stop the daemon
 *   with the URL in its log. */
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "accel/accel.h"
#include "proto/tcp.h"
#include "util.h"

/* A daemon on the CPU backend with its ipc:// socket and tcp:// (written to url). */
static void start_tcp(td_daemon *d, char *url, size_t len) {
  td_prepare(d);
  snprintf(url, len, "tcp://127.0.0.1:%d", td_free_port());
  td_start(d, "--listen", url, "--allow-plain-tcp", "--backends", "cpu", NULL);
}

/* start_tcp, and a raw client connected there and welcomed. */
static void start_with_client(td_daemon *d, td_client *c) {
  char url[64];
  start_tcp(d, url, sizeof url);
  td_client_open(c, url);
  CHECK_OK(td_hello(c, NULL));
}

static uint32_t next_random(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 33);
}

TEST(libaccel_moves_data_over_tcp) {
  enum { COUNT = 5 << 20 }; /* 20 MiB: more than one frame of the default max_message */
  td_daemon d;
  char url[64];
  start_tcp(&d, url, sizeof url);
  uint32_t *in = malloc(COUNT * sizeof *in), *out = malloc(COUNT * sizeof *out);
  CHECK(in != NULL && out != NULL);
  uint64_t seed = (uint64_t)getpid();
  for (size_t i = 0; i < COUNT; i++)
    in[i] = next_random(&seed);
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, url));
  accel_buffer b;
  accel_future *f;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_U32, COUNT, &b));
  CHECK_OK(accel_write(ctx, b, 0, in, COUNT, NULL));
  CHECK_OK(accel_read(ctx, b, 0, out, COUNT, &f));
  CHECK_OK(accel_future_wait(f, -1));
  accel_future_release(f);
  CHECK(memcmp(in, out, COUNT * sizeof *in) == 0);
  CHECK_OK(accel_fill_u32(ctx, 0, b, 0x5a5a5a5a, NULL));
  CHECK_OK(accel_read(ctx, b, COUNT - 4, out, 4, &f));
  CHECK_OK(accel_future_wait(f, -1));
  accel_future_release(f);
  for (int i = 0; i < 4; i++)
    CHECK_EQ(out[i], 0x5a5a5a5au);
  char report[4096];
  CHECK_EQ(td_ctl(report, sizeof report, "--url", d.url, "clients", NULL), 0);
  if (strstr(report, " tcp ") == NULL)
    TEST_FAIL("no tcp client in `accelctl clients`:\n%s", report);
  CHECK_OK(accel_buffer_destroy(ctx, b));
  accel_close(ctx);
  CHECK(strstr(td_log(&d), ": connected (127.0.0.1:") != NULL); /* the peer's address */
  free(in);
  free(out);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* 4000 fills sent back to back before any reply is read: far past the 32 ops a connection
 * may have in flight, so the daemon stops reading it (and the client's socket fills) rather
 * than refusing; once read, every reply is there, OK and in order. */
TEST(pipelined_ops_past_the_limit_are_paused_not_refused) {
  enum { OPS = 4000 };
  td_daemon d;
  td_client c;
  start_with_client(&d, &c);
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 16));
  for (uint64_t i = 0; i < OPS; i++) {
    proto_out o;
    proto_out_init(&o);
    td_encode_fill(&o, 1000 + i, td_handle(1, 1), (uint32_t)i);
    td_send_raw(&c, o.data, o.len, 1000 + i);
    proto_out_free(&o);
  }
  for (uint64_t i = 0; i < OPS; i++) {
    nng_msg *m;
    CHECK_EQ(td_recv(&c, &m, TD_FOREVER), 0);
    CHECK_OK(td_reply_status(m, 1000 + i, NULL));
    nng_msg_free(m);
  }
  uint32_t out[16];
  CHECK_OK(td_read_u32(&c, td_handle(1, 1), out, 16));
  CHECK_EQ(out[15], (uint32_t)(OPS - 1));
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* ---- libaccel's send queue at its bound ---- */

/* About 38 MiB of frames: far past loopback's socket buffers (at most 4 MiB each way with
 * Debian's tcp_wmem and tcp_rmem) and the queue's 1 MiB. */
#define FLOOD_FILLS 400000

typedef struct flooder {
  accel_ctx *ctx;
  accel_buffer b;
  atomic_long issued;
  int first_error; /* the first call that failed, or 0 */
} flooder;

static void *flood(void *arg) {
  flooder *f = arg;
  for (long i = 0; i < FLOOD_FILLS; i++) {
    int rc = accel_fill_u32(f->ctx, 0, f->b, (uint32_t)i, NULL);
    if (rc != 0) {
      f->first_error = rc;
      break;
    }
    atomic_fetch_add(&f->issued, 1);
  }
  return NULL;
}

/* A daemon stopped (SIGSTOP) and a thread flooding it with fills until it blocks: once it has
 * issued some, the issued count stays put over three spans of 300 ms, short of FLOOD_FILLS. */
static void flood_until_blocked(td_daemon *d, flooder *f, pthread_t *t) {
  char url[64];
  start_tcp(d, url, sizeof url);
  *f = (flooder){0};
  CHECK_OK(accel_open(&f->ctx, url));
  CHECK_OK(accel_buffer_create(f->ctx, ACCEL_U32, 1, &f->b));
  CHECK_OK(accel_finish(f->ctx, -1));
  td_signal(d, SIGSTOP);
  CHECK_EQ(pthread_create(t, NULL, flood, f), 0);
  TEST_WAIT_FOR(atomic_load(&f->issued) > 0, 30);
  long last = -1, now;
  for (int still = 0; still < 3;) {
    now = atomic_load(&f->issued);
    still = now == last ? still + 1 : 0;
    last = now;
    test_sleep_ms(300);
  }
  CHECK_LT(now, FLOOD_FILLS); /* blocked: the queue is bounded */
  CHECK_GT(now, 1000);        /* and it gathered fills meanwhile */
}

TEST(a_full_send_queue_blocks_the_sender_until_the_daemon_reads) {
  td_daemon d;
  flooder f;
  pthread_t t;
  flood_until_blocked(&d, &f, &t);
  td_signal(&d, SIGCONT);
  CHECK_EQ(pthread_join(t, NULL), 0);
  CHECK_OK(f.first_error);
  CHECK_OK(accel_finish(f.ctx, -1));
  uint32_t v = 0;
  accel_future *r;
  CHECK_OK(accel_read(f.ctx, f.b, 0, &v, 1, &r));
  CHECK_OK(accel_future_wait(r, -1));
  accel_future_release(r);
  CHECK_EQ(v, (uint32_t)(FLOOD_FILLS - 1)); /* every fill ran, in order */
  accel_close(f.ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(a_sender_blocked_on_a_full_queue_is_released_when_the_daemon_dies) {
  td_daemon d;
  flooder f;
  pthread_t t;
  flood_until_blocked(&d, &f, &t);
  td_signal(&d, SIGKILL);
  CHECK_EQ(pthread_join(t, NULL), 0); /* released */
  CHECK_ERR(f.first_error, ACCEL_ECLOSED);
  CHECK_ERR(accel_finish(f.ctx, -1), ACCEL_ECLOSED);
  accel_close(f.ctx);
  td_wait(&d);
  td_cleanup(&d);
}

/* After the daemon is gone, a control request (accel_device_info) is ACCEL_ECLOSED at once:
 * over TCP the first write after the peer closed still succeeds, and the request used to wait
 * for an answer nobody would give. Both transports of the stream. */
static void control_after_the_daemon_left(bool over_tcp) {
  td_daemon d;
  char url[64];
  start_tcp(&d, url, sizeof url);
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, over_tcp ? url : d.url));
  struct accel_device_info info;
  CHECK_OK(accel_device_info(ctx, 0, &info));
  CHECK_EQ(td_stop(&d), 0);
  test_sleep_ms(200); /* the receiver sees the end */
  CHECK_ERR(accel_device_info(ctx, 0, &info), ACCEL_ECLOSED);
  accel_close(ctx);
  td_cleanup(&d);
}

TEST(a_control_after_the_daemon_left_is_eclosed) {
  control_after_the_daemon_left(true);
  control_after_the_daemon_left(false);
}

TEST(a_peer_sending_garbage_is_closed_and_others_are_served) {
  td_daemon d;
  char url[64];
  start_tcp(&d, url, sizeof url);
  td_client bad;
  td_client_open(&bad, url);
  static const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK_EQ(write(bad.fd, junk, sizeof junk - 1), (ssize_t)(sizeof junk - 1));
  nng_msg *m = NULL;
  int rv = td_recv(&bad, &m, 10000);
  CHECK(rv != 0 && rv != NNG_ETIMEDOUT); /* closed, not left hanging */
  td_client_close(&bad);
  td_client good;
  td_client_open(&good, url);
  CHECK_OK(td_hello(&good, NULL));
  CHECK_OK(td_create(&good, td_handle(1, 1), ACCEL_U32, 4));
  td_client_close(&good);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* SHM_ATTACH needs a descriptor passed with it: over TCP none can come. */
TEST(shared_memory_is_refused_over_tcp) {
  td_daemon d;
  td_client c;
  start_with_client(&d, &c);
  CHECK_ERR(td_control(&c, PROTO_CTL_SHM_ATTACH, 1), ACCEL_ENOTSUP);
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 4)); /* the connection goes on */
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* acceld refuses to start on `url` (with allow_plain_tcp), and its log says `want` about it. */
static void refused_listen(const char *url, const char *want) {
  td_daemon d;
  td_prepare(&d);
  CHECK_EQ(td_start_expect_exit(&d, "--listen", url, "--allow-plain-tcp", NULL), 1);
  if (strstr(td_log(&d), want) == NULL)
    TEST_FAIL("expected \"%s\" in the log:\n%s", want, td_log(&d));
  td_cleanup(&d);
}

TEST(listening_errors_name_the_url) {
  td_daemon d;
  char url[64], want[128];
  start_tcp(&d, url, sizeof url);
  snprintf(want, sizeof want, "cannot listen on %s: bind: Address already in use", url);
  refused_listen(url, want); /* a second daemon on the first one's port */
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
  refused_listen("tcp://127.0.0.1", "cannot listen on tcp://127.0.0.1: not tcp://HOST:PORT");
  refused_listen("tcp://127.0.0.1:65536",
                 "cannot listen on tcp://127.0.0.1:65536: not tcp://HOST:PORT");
}

/* Whether this host has IPv6 on its loopback (a CI container may not). */
static bool has_ipv6_loopback(void) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
  if (fd >= 0)
    close(fd);
  return ok;
}

/* A listener on every address ("*" as the host) is one dual-stack IPv6 socket (IPV6_V6ONLY
 * off) that takes IPv4 clients too: accelctl reaches it through tcp4:// and, where the host
 * has IPv6, tcp6://. */
TEST(a_listener_on_every_address_serves_ipv4_and_ipv6) {
  td_daemon d;
  td_prepare(&d);
  int port = td_free_port();
  char any[64], v4[64], v6[64], out[4096];
  snprintf(any, sizeof any, "tcp://*:%d", port);
  snprintf(v4, sizeof v4, "tcp4://127.0.0.1:%d", port);
  snprintf(v6, sizeof v6, "tcp6://[::1]:%d", port);
  td_start(&d, "--listen", any, "--allow-plain-tcp", "--backends", "cpu", NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", v4, "ping", NULL), 0);
  if (has_ipv6_loopback())
    CHECK_EQ(td_ctl(out, sizeof out, "--url", v6, "ping", NULL), 0);
  else
    printf("# no IPv6 on this host's loopback: only the IPv4 client was checked\n");
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* proto_tcp_parse at its limits: ports 1 and 65535 (0 and 65536 not), a host of
 * PROTO_TCP_HOST_MAX - 1 bytes (one more not), brackets for IPv6, "*" for any. */
TEST(tcp_urls_at_their_limits) {
  proto_tcp_addr a;
  CHECK_OK(proto_tcp_parse("tcp://127.0.0.1:1", &a));
  CHECK(strcmp(a.host, "127.0.0.1") == 0 && strcmp(a.port, "1") == 0);
  CHECK_OK(proto_tcp_parse("tcp6://[::1]:65535", &a));
  CHECK(strcmp(a.host, "::1") == 0 && strcmp(a.port, "65535") == 0);
  CHECK_OK(proto_tcp_parse("tcp://*:80", &a));
  CHECK(a.host[0] == '\0');
  CHECK_ERR(proto_tcp_parse("tcp://h:0", &a), ACCEL_EINVAL);
  CHECK_ERR(proto_tcp_parse("tcp://h:65536", &a), ACCEL_EINVAL);
  CHECK_ERR(proto_tcp_parse("tcp://h:80/x", &a), ACCEL_EINVAL);
  CHECK_ERR(proto_tcp_parse("tcp://::1:80", &a), ACCEL_EINVAL);
  CHECK_ERR(proto_tcp_parse("tcp://[::1]80", &a), ACCEL_EINVAL);
  CHECK_ERR(proto_tcp_parse("tls+tcp://h:80", &a), ACCEL_EINVAL);
  char url[PROTO_TCP_HOST_MAX + 32];
  memcpy(url, "tcp://", 6);
  memset(url + 6, 'h', PROTO_TCP_HOST_MAX - 1);
  strcpy(url + 6 + PROTO_TCP_HOST_MAX - 1, ":80");
  CHECK_OK(proto_tcp_parse(url, &a));
  CHECK_EQ(strlen(a.host), (size_t)PROTO_TCP_HOST_MAX - 1);
  memset(url + 6, 'h', PROTO_TCP_HOST_MAX);
  strcpy(url + 6 + PROTO_TCP_HOST_MAX, ":80");
  CHECK_ERR(proto_tcp_parse(url, &a), ACCEL_EINVAL);
}

static const test_case tests[] = {
    TEST_CASE(libaccel_moves_data_over_tcp),
    TEST_CASE(pipelined_ops_past_the_limit_are_paused_not_refused),
    TEST_CASE(a_full_send_queue_blocks_the_sender_until_the_daemon_reads),
    TEST_CASE(a_sender_blocked_on_a_full_queue_is_released_when_the_daemon_dies),
    TEST_CASE(a_control_after_the_daemon_left_is_eclosed),
    TEST_CASE(a_peer_sending_garbage_is_closed_and_others_are_served),
    TEST_CASE(shared_memory_is_refused_over_tcp),
    TEST_CASE(listening_errors_name_the_url),
    TEST_CASE(a_listener_on_every_address_serves_ipv4_and_ipv6),
    TEST_CASE(tcp_urls_at_their_limits),
};

TEST_MAIN(tests)
