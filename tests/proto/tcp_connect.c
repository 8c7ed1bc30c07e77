/* The tcp:// client's connect (proto/tcp.c proto_tcp_connect):
 *   - to a listener that takes it: a blocking, close-on-exec descriptor with TCP_NODELAY;
 *   - to a port nobody listens on: ECONNREFUSED, at once;
 *   - to a listener whose accept queue is full (the kernel then drops the SYNs, so the
 *     connect hangs as toward a host that vanished): ETIMEDOUT after the timeout, also while
 *     signals keep interrupting the wait every 20 ms; a wait that restarted its time at each
 *     interruption never ended;
 *   - URLs that are not tcp:// with a host: EINVAL. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "../tcp_listener.h"
#include "../test.h"
#include "proto/tcp.h"

static void url_of(char *url, size_t cap, int port) {
  snprintf(url, cap, "tcp://127.0.0.1:%d", port);
}

TEST(connects_to_a_listener) {
  int port, ls = tcp_listener(8, &port);
  char url[64];
  url_of(url, sizeof url, port);
  const char *why = NULL;
  int fd = proto_tcp_connect(url, 2000, &why);
  CHECK_GE(fd, 0);
  CHECK_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  int on = 0;
  socklen_t len = sizeof on;
  CHECK_EQ(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &len), 0);
  CHECK_NE(on, 0);
  close(fd);
  close(ls);
}

TEST(a_closed_port_is_refused_at_once) {
  int port, ls = tcp_listener(8, &port);
  close(ls); /* the port is free now: nobody listens */
  char url[64];
  url_of(url, sizeof url, port);
  const char *why = NULL;
  uint64_t t0 = test_now_ns();
  CHECK_EQ(proto_tcp_connect(url, 5000, &why), ACCEL_ECLOSED);
  CHECK_EQ(errno, ECONNREFUSED);
  CHECK(why != NULL && why[0] != '\0');
  CHECK_LT(test_now_ns() - t0, 2000000000ull);
}

static void on_alarm(int sig) {
  (void)sig;
}

static void times_out(bool with_signals) {
  int port, ls = tcp_listener(0, &port), held[4];
  tcp_fill_queue(port, held, 4);
  struct sigaction sa = {.sa_handler = on_alarm}, old; /* no SA_RESTART: poll gets EINTR */
  struct itimerval every = {{0, 20000}, {0, 20000}}, off = {{0, 0}, {0, 0}};
  if (with_signals) {
    CHECK_EQ(sigaction(SIGALRM, &sa, &old), 0);
    CHECK_EQ(setitimer(ITIMER_REAL, &every, NULL), 0);
  }
  char url[64];
  url_of(url, sizeof url, port);
  const char *why = NULL;
  uint64_t t0 = test_now_ns();
  int rc = proto_tcp_connect(url, 300, &why);
  int err = errno;
  uint64_t ms = (test_now_ns() - t0) / 1000000u;
  if (with_signals) {
    CHECK_EQ(setitimer(ITIMER_REAL, &off, NULL), 0);
    CHECK_EQ(sigaction(SIGALRM, &old, NULL), 0);
  }
  printf("# connect to a full queue%s: %s after %llu ms\n",
         with_signals ? ", signals every 20 ms" : "", why ? why : "?", (unsigned long long)ms);
  CHECK_EQ(rc, ACCEL_ECLOSED);
  CHECK_EQ(err, ETIMEDOUT);
  CHECK_GE(ms, 280u);
  CHECK_LT(ms, 3000u);
  for (int i = 0; i < 4; i++)
    close(held[i]);
  close(ls);
}

TEST(a_full_accept_queue_times_out) {
  times_out(false);
}

TEST(signals_do_not_extend_the_timeout) {
  times_out(true);
}

TEST(only_tcp_urls_with_a_host) {
  const char *bad[] = {"ipc:///tmp/x",  "tcp://:5000", "tcp://*:5000",  "tcp://host",
                       "tls+tcp://h:1", "tcp://h:0",   "tcp://h:65536", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *why = NULL;
    CHECK_EQ(proto_tcp_connect(bad[i], 100, &why), ACCEL_EINVAL);
    CHECK(why != NULL);
  }
}

static const test_case tests[] = {
    TEST_CASE(connects_to_a_listener),        TEST_CASE(a_closed_port_is_refused_at_once),
    TEST_CASE(a_full_accept_queue_times_out), TEST_CASE(signals_do_not_extend_the_timeout),
    TEST_CASE(only_tcp_urls_with_a_host),
};

TEST_MAIN(tests)
