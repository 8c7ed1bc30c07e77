/* The tcp:// client's connect (proto/tcp.c proto_tcp_connect):
 *   - to a listener that takes it: a blocking, close-on-exec descriptor with TCP_NODELAY;
 *   - to a port nobody listens on: ECONNREFUSED, at once;
 *   - to a listener whose accept queue is full (the kernel then drops the SYNs, so the
 *     connect hangs as toward a host that vanished): ETIMEDOUT after the timeout, also while
 *     signals keep interrupting the wait every 20 ms; a wait that restarted its time at each
 *     interruption never ended;
 *   - URLs that are not tcp:// with a host: EINVAL;
 *   - a name whose lookup outlasts the timeout: ETIMEDOUT at the timeout (the lookup's thread
 *     ends later and frees its result); one in time connects; localhost resolves. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdatomic.h>
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

/* ---- the name's lookup ---- */

/* A resolver that takes `slow_ms` for a name (a numeric address answers at once, as the
 * system's does) and then finds 127.0.0.1. */
static atomic_int slow_ms;
static int slow_resolver(const char *host, const char *port, const struct addrinfo *hints,
                         struct addrinfo **out) {
  if (hints->ai_flags & AI_NUMERICHOST)
    return getaddrinfo(host, port, hints, out);
  test_sleep_ms((uint64_t)atomic_load(&slow_ms));
  return getaddrinfo("127.0.0.1", port, hints, out);
}

static void lookups_end(void) {
  for (int i = 0; i < 500 && proto_tcp_lookups_running() > 0; i++)
    test_sleep_ms(10);
  CHECK_EQ(proto_tcp_lookups_running(), 0); /* the thread ended, its lookup freed */
}

/* A listener, and url naming it by a name the slow resolver takes `ms` to find. */
static int slow_name_for_a_listener(int ms, char *url, size_t cap) {
  int port, ls = tcp_listener(8, &port);
  snprintf(url, cap, "tcp://slow.example:%d", port);
  atomic_store(&slow_ms, ms);
  proto_tcp_set_resolver(slow_resolver, NULL);
  return ls;
}

/* Every lookup's thread has ended; the system's resolver again; the listener closed. */
static void slow_name_done(int ls) {
  lookups_end();
  proto_tcp_set_resolver(NULL, NULL);
  close(ls);
}

/* A resolver that does not answer in time: the connect ends at the timeout all the same (it
 * took the resolver's own timeouts, 5 s and more, before); the lookup's thread ends later and
 * frees what it found. */
TEST(a_slow_lookup_ends_at_the_timeout) {
  char url[96];
  int ls = slow_name_for_a_listener(1500, url, sizeof url);
  const char *why = NULL;
  uint64_t t0 = test_now_ns();
  int rc = proto_tcp_connect(url, 300, &why);
  int err = errno;
  uint64_t ms = (test_now_ns() - t0) / 1000000u;
  printf("# a lookup of 1500 ms under a timeout of 300 ms: %s after %llu ms\n", why,
         (unsigned long long)ms);
  CHECK_EQ(rc, ACCEL_ECLOSED);
  CHECK_EQ(err, ETIMEDOUT);
  CHECK(strstr(why, "lookup") != NULL);
  CHECK_GE(ms, 280u);
  CHECK_LT(ms, 1200u);
  CHECK_EQ(proto_tcp_lookups_running(), 1); /* still at it */
  slow_name_done(ls);
}

/* A lookup within the timeout connects; its time counts against the same timeout. */
TEST(a_lookup_in_time_connects) {
  char url[96];
  int ls = slow_name_for_a_listener(50, url, sizeof url);
  const char *why = NULL;
  int fd = proto_tcp_connect(url, 5000, &why);
  CHECK_GE(fd, 0);
  close(fd);
  slow_name_done(ls);
}

/* The system's resolver through the lookup's thread: a name, not an address (an address
 * starts no thread). */
TEST(a_name_is_looked_up_on_a_thread) {
  int port, ls = tcp_listener(8, &port);
  char url[96];
  snprintf(url, sizeof url, "tcp4://localhost:%d", port);
  const char *why = NULL;
  int started = proto_tcp_lookups_started();
  int fd = proto_tcp_connect(url, 5000, &why);
  if (fd < 0)
    TEST_FAIL("localhost did not resolve: %s", why);
  close(fd);
  CHECK_EQ(proto_tcp_lookups_started(), started + 1);
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  fd = proto_tcp_connect(url, 5000, &why);
  CHECK_GE(fd, 0);
  close(fd);
  CHECK_EQ(proto_tcp_lookups_started(), started + 1);
  lookups_end();
  close(ls);
}

/* A resolver failing with a system error on the lookup's thread: the error its thread saw,
 * not whatever errno the caller had. */
static int failing_resolver(const char *host, const char *port, const struct addrinfo *hints,
                            struct addrinfo **out) {
  if (hints->ai_flags & AI_NUMERICHOST)
    return getaddrinfo(host, port, hints, out);
  errno = EMFILE;
  return EAI_SYSTEM;
}

TEST(a_lookup_error_is_the_resolvers) {
  proto_tcp_set_resolver(failing_resolver, NULL);
  const char *why = NULL;
  errno = ETIMEDOUT; /* the caller's: must not show */
  CHECK_EQ(proto_tcp_connect("tcp://failing.example:80", 2000, &why), ACCEL_ECLOSED);
  CHECK_EQ(errno, EMFILE);
  CHECK_EQ(strcmp(why, strerror(EMFILE)), 0);
  lookups_end();
  proto_tcp_set_resolver(NULL, NULL);
}

static const test_case tests[] = {
    TEST_CASE(a_slow_lookup_ends_at_the_timeout),
    TEST_CASE(a_lookup_in_time_connects),
    TEST_CASE(a_name_is_looked_up_on_a_thread),
    TEST_CASE(a_lookup_error_is_the_resolvers),
    TEST_CASE(connects_to_a_listener),
    TEST_CASE(a_closed_port_is_refused_at_once),
    TEST_CASE(a_full_accept_queue_times_out),
    TEST_CASE(signals_do_not_extend_the_timeout),
    TEST_CASE(only_tcp_urls_with_a_host),
};

TEST_MAIN(tests)
