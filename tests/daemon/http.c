/* acceld's HTTP endpoint (/metrics, /healthz) under hostile clients, over real sockets: half
 * a request closed after header_timeout_ms, connections past max_connections closed as they
 * come, 1100 half-open connections that neither exhaust the daemon's descriptors nor stop a
 * local client, request heads over max_header_bytes refused (431), a client that never reads
 * its response reset after write_timeout_ms, each limit at the limit and one past; the
 * address given with no host bound to loopback; methods, paths and malformed requests
 * answered 405, 404, 400 and 505; random bytes never hurt it. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "util.h"

typedef struct endpoint {
  td_daemon d;
  int port;
} endpoint;

/* The daemon with `metrics` as its [metrics] section after the listen line, and `cpus` CPU
 * devices. */
static void start(endpoint *e, const char *metrics, int cpus) {
  char conf[1024];
  e->port = td_free_port();
  td_prepare(&e->d);
  snprintf(conf, sizeof conf,
           "[devices]\ncpu_devices = %d\n[metrics]\nlisten = http://127.0.0.1:%d\n%s\n", cpus,
           e->port, metrics ? metrics : "");
  td_write_config(&e->d, conf);
  td_start(&e->d, "--backends", "cpu", NULL);
}

static void stop(endpoint *e) {
  CHECK_EQ(td_stop(&e->d), 0);
  td_cleanup(&e->d);
}

static void wait_log(td_daemon *d, const char *text) {
  TEST_WAIT_FOR(strstr(td_log(d), text) != NULL, 20);
}

/* A connection to 127.0.0.1:port; a receive buffer of rcvbuf bytes if > 0 (a small window:
 * the kernel takes little of a response the client does not read). -1 if the daemon reset
 * it before connect() returned (a refusal, on loopback). */
static int try_connect(int port, int rcvbuf) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(fd, 0);
  if (rcvbuf > 0)
    CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf), 0);
  struct timeval tv = {.tv_sec = 5}; /* bounds a connect to a listener that stopped accepting */
  CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv), 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
    return fd;
  if (errno != ECONNRESET)
    TEST_FAIL("connect to the metrics port: %s", strerror(errno));
  close(fd);
  return -1;
}

static int connect_to(int port, int rcvbuf) {
  int fd = try_connect(port, rcvbuf);
  CHECK_GE(fd, 0);
  return fd;
}

/* false if the daemon closed the connection first */
static bool try_send(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0)
      return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

static void send_all(int fd, const char *p, size_t n) {
  CHECK(try_send(fd, p, n));
}

/* Reads until the daemon closes; what arrived (NUL-terminated) is in buf, its length is
 * returned. Fails the test if nothing ends it within 10 s. */
static size_t read_to_end(int fd, char *buf, size_t cap) {
  size_t got = 0;
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1)
      TEST_FAIL("no end of the response within 10 s (%zu bytes so far)", got);
    ssize_t n = recv(fd, buf + got, cap - 1 - got, 0);
    if (n <= 0)
      break;
    got += (size_t)n;
    CHECK_LT(got, cap - 1);
  }
  buf[got] = '\0';
  return got;
}

/* Sends `request` on a fresh connection (then shuts the sending side if half_close) and
 * returns the response's status (0: none, the connection closed first); the whole response
 * in buf. */
static int exchange_as(int port, const char *request, size_t len, bool half_close, char *buf,
                       size_t cap) {
  int fd = try_connect(port, 0);
  buf[0] = '\0';
  if (fd >= 0 && try_send(fd, request, len)) {
    if (half_close)
      shutdown(fd, SHUT_WR);
    read_to_end(fd, buf, cap);
  }
  if (fd >= 0)
    close(fd);
  int code = 0;
  return sscanf(buf, "HTTP/1.1 %d ", &code) == 1 ? code : 0;
}

static int exchange(int port, const char *request, size_t len, char *buf, size_t cap) {
  return exchange_as(port, request, len, false, buf, cap);
}

static int ask(int port, const char *request, char *buf, size_t cap) {
  return exchange(port, request, strlen(request), buf, cap);
}

static const char *body_of(const char *response) {
  const char *b = strstr(response, "\r\n\r\n");
  CHECK(b != NULL);
  return b + 4;
}

static long content_length(const char *response) {
  const char *h = strstr(response, "Content-Length: ");
  CHECK(h != NULL);
  return strtol(h + 16, NULL, 10);
}

#define GET_METRICS "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"

/* A GET /metrics that succeeds: 200, the Prometheus type, the body of its Content-Length. */
static void scrape(int port) {
  static char buf[1 << 20];
  CHECK_EQ(ask(port, GET_METRICS, buf, sizeof buf), 200);
  CHECK(strstr(buf, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != NULL);
  CHECK_EQ((long)strlen(body_of(buf)), content_length(buf));
  CHECK(strstr(body_of(buf), "\naccel_up 1\n") != NULL);
}

/* Milliseconds until the daemon ends the connection (EOF or reset), or -1 if it is still
 * open after limit_ms. Bytes that arrive meanwhile are dropped. */
static long closed_within(int fd, long limit_ms) {
  uint64_t t0 = test_now_ms();
  for (;;) {
    long left = limit_ms - (long)(test_now_ms() - t0);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, left > 0 ? (int)left : 0) == 0)
      return -1;
    char sink[4096];
    ssize_t n = recv(fd, sink, sizeof sink, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET))
      return (long)(test_now_ms() - t0);
  }
}

static bool still_open(int fd) {
  return closed_within(fd, 0) < 0;
}

/* The TCP state of a socket, without reading from it (TCP_ESTABLISHED while open, TCP_CLOSE
 * once reset). */
static int tcp_state(int fd) {
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  CHECK_EQ(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
  return ti.tcpi_state;
}

/* ---- the header timeout ---- */

/* header_timeout_ms = 500: a request whose head is whole 100 ms after connecting is
 * answered; one that stops halfway is closed no sooner than 500 ms and well before the 10 s
 * this waits; the event is logged. */
TEST(half_a_request_is_closed_after_the_header_timeout) {
  endpoint e;
  start(&e, "header_timeout_ms = 500\n", 1);
  static const char half[] = "GET /metrics HTTP/1.1\r\nHost: loc";
  uint64_t t0 = test_now_ms();
  int slow = connect_to(e.port, 0), in_time = connect_to(e.port, 0);
  send_all(slow, half, sizeof half - 1);
  send_all(in_time, half, sizeof half - 1);
  test_sleep_ms(100);
  send_all(in_time, "alhost\r\n\r\n", 10);
  static char buf[1 << 16];
  read_to_end(in_time, buf, sizeof buf);
  CHECK_EQ(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17), 0);
  long waited = closed_within(slow, 10000);
  CHECK_GE(waited, 0);
  CHECK_GE((long)(test_now_ms() - t0), 450); /* libuv's clock may lag the connect a little */
  wait_log(&e.d, "closed with no whole request within header_timeout_ms");
  close(slow);
  close(in_time);
  scrape(e.port);
  stop(&e);
}

/* ---- the connection cap ---- */

/* max_connections = 4: four silent connections stay open (the fourth, at the limit, is
 * served when it asks); the fifth is closed at once, long before the header timeout (ten
 * minutes); once one of the four has gone a new scrape succeeds; the refusal is logged. */
TEST(connections_past_the_cap_are_closed_at_once) {
  endpoint e;
  start(&e, "max_connections = 4\nheader_timeout_ms = 600000\n", 1);
  int fd[5];
  for (int i = 0; i < 4; i++)
    fd[i] = connect_to(e.port, 0);
  test_sleep_ms(100);             /* accepted, all four */
  fd[4] = try_connect(e.port, 0); /* refused: reset, perhaps before connect() returned */
  CHECK(fd[4] < 0 || closed_within(fd[4], 5000) >= 0);
  wait_log(&e.d, "1 connections refused past max_connections");
  for (int i = 0; i < 4; i++)
    CHECK(still_open(fd[i]));
  static char buf[1 << 16];
  send_all(fd[3], GET_METRICS, sizeof GET_METRICS - 1);
  read_to_end(fd[3], buf, sizeof buf);
  CHECK_EQ(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17), 0);
  close(fd[3]); /* answered, and gone: room for one again once the daemon has seen it go */
  fd[3] = -1;
  TEST_WAIT_FOR(ask(e.port, GET_METRICS, buf, sizeof buf) == 200, 20);
  for (int i = 0; i < 5; i++)
    if (fd[i] >= 0)
      close(fd[i]);
  scrape(e.port);
  stop(&e);
}

static int count(const char *text, const char *what) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what))
    n++;
  return n;
}

/* 1100 connections each sending half a request, with the daemon's descriptors limited to
 * 1024 as a service manager would (nng's HTTP server held one each: every descriptor gone,
 * no local client could connect). The default cap (64) holds the daemon's descriptors to its
 * baseline plus 64; a local client connects and runs an op meanwhile; the refusals are a
 * line or two of log, not a thousand; once the half requests time out a scrape succeeds. */
TEST(half_open_flood_leaves_the_daemon_serving) {
  struct rlimit old;
  CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  if (old.rlim_max != RLIM_INFINITY && old.rlim_max < 1200)
    TEST_SKIP("the hard descriptor limit is below 1200");
  struct rlimit daemons = {.rlim_cur = 1024, .rlim_max = old.rlim_max};
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &daemons), 0); /* acceld inherits it */
  endpoint e;
  start(&e, "header_timeout_ms = 1500\n", 1);
  struct rlimit mine = {
      .rlim_cur = old.rlim_max == RLIM_INFINITY || old.rlim_max > 4096 ? 4096 : old.rlim_max,
      .rlim_max = old.rlim_max};
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &mine), 0);
  scrape(e.port);
  int base = td_open_fds(e.d.pid);
  enum { FLOOD = 1100 };
  static int fds[FLOOD];
  static const char half[] = "GET /metrics HTTP/1.1\r\n";
  for (int i = 0; i < FLOOD; i++) {
    fds[i] = try_connect(e.port, 0);
    if (fds[i] >= 0) /* refused ones are reset, some before connect() returned */
      (void)!send(fds[i], half, sizeof half - 1, MSG_NOSIGNAL);
  }
  CHECK_LE(td_open_fds(e.d.pid), base + 64 + 4);
  td_served(&e.d);
  CHECK_LE(td_open_fds(e.d.pid), base + 64 + 4);
  wait_log(&e.d, "connections refused past max_connections");
  CHECK_LE(count(td_log(&e.d), "refused past max_connections"), 2);
  for (int i = 0; i < FLOOD; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  static char buf[1 << 16];
  TEST_WAIT_FOR(ask(e.port, GET_METRICS, buf, sizeof buf) == 200, 20);
  scrape(e.port);
  td_served(&e.d);
  stop(&e);
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
}

/* ---- the size of a request's head ---- */

/* A GET /healthz whose head is exactly `len` bytes (padded with a header). */
static void padded_request(char *req, size_t len) {
  static const char start[] = "GET /healthz HTTP/1.1\r\nX-Pad: ", end[] = "\r\n\r\n";
  size_t pad = len - (sizeof start - 1) - (sizeof end - 1);
  memcpy(req, start, sizeof start - 1);
  memset(req + sizeof start - 1, 'p', pad);
  memcpy(req + sizeof start - 1 + pad, end, sizeof end);
  CHECK_EQ(strlen(req), len);
}

/* max_header_bytes = 256: a head of 256 bytes is answered, one of 257 gets 431 (logged), and
 * so does a head with no end at all. */
TEST(heads_over_max_header_bytes_are_refused) {
  endpoint e;
  start(&e, "max_header_bytes = 256\n", 1);
  char req[512];
  static char buf[1 << 16];
  padded_request(req, 256);
  CHECK_EQ(ask(e.port, req, buf, sizeof buf), 200);
  CHECK_STR_EQ(body_of(buf), "ok\n");
  padded_request(req, 257);
  CHECK_EQ(ask(e.port, req, buf, sizeof buf), 431);
  memset(req, 'a', 400);
  CHECK_EQ(exchange(e.port, req, 400, buf, sizeof buf), 431);
  wait_log(&e.d, "requests over max_header_bytes (431)");
  scrape(e.port);
  stop(&e);
}

/* ---- the write timeout ---- */

/* One op of `kind` on buffer h of device dev. */
static void op_on(td_client *c, uint32_t kind, int32_t dev, uint64_t h) {
  static const uint32_t zeros[4];
  dev_op op = {.h = {.kind = kind, .device = dev}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = h, .count = 4};
  proto_bytes data = {NULL, 0};
  if (kind == DEV_OP_BUFFER_CREATE)
    op.u.create.dtype = ACCEL_U32;
  else if (kind == DEV_OP_WRITE)
    data = (proto_bytes){(const uint8_t *)zeros, sizeof zeros};
  else if (kind == DEV_OP_READ)
    op.u.read.bytes = sizeof zeros;
  proto_out o;
  uint64_t id = c->next_id++;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, id, &op, data));
  CHECK_OK(td_call(c, &o, id));
}

/* Ops of five kinds on each of 8 devices: a latency histogram each, a metrics text of tens
 * of KiB, larger than the kernel holds for a client that does not read. */
static size_t grow_metrics(endpoint *e) {
  static const uint32_t kinds[] = {DEV_OP_BUFFER_CREATE, DEV_OP_FILL, DEV_OP_WRITE, DEV_OP_READ,
                                   DEV_OP_BUFFER_DESTROY};
  td_client c;
  td_client_open(&c, e->d.url);
  CHECK_OK(td_hello(&c, NULL));
  for (int32_t dev = 0; dev < 8; dev++)
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
      op_on(&c, kinds[k], dev, td_handle((uint32_t)dev + 1, 1));
  td_client_close(&c);
  static char buf[1 << 20];
  CHECK_EQ(ask(e->port, GET_METRICS, buf, sizeof buf), 200);
  return strlen(body_of(buf));
}

/* write_timeout_ms = 1000, a metrics text larger than the kernel's buffers: a client with a
 * small window that reads nothing is still connected at 500 ms and reset by 5 s, no sooner
 * than 1 s after asking (logged); one that starts reading 300 ms after asking gets the whole
 * response. */
TEST(a_client_that_never_reads_is_reset_after_the_write_timeout) {
  endpoint e;
  start(&e, "write_timeout_ms = 1000\n", 8);
  size_t size = grow_metrics(&e);
  CHECK_GT(size, 32u << 10); /* over twice what the kernel holds (HTTP_SNDBUF, 2 KiB here) */
  int idle = connect_to(e.port, 2048), slow = connect_to(e.port, 2048);
  uint64_t t0 = test_now_ms();
  send_all(idle, GET_METRICS, sizeof GET_METRICS - 1);
  send_all(slow, GET_METRICS, sizeof GET_METRICS - 1);
  test_sleep_ms(300);
  static char buf[1 << 20];
  read_to_end(slow, buf, sizeof buf);
  CHECK_EQ(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17), 0);
  CHECK_EQ((long)strlen(body_of(buf)), content_length(buf));
  uint64_t half = t0 + 500, now = test_now_ms();
  if (now < half)
    test_sleep_ms((unsigned)(half - now));
  CHECK_EQ(tcp_state(idle), TCP_ESTABLISHED);
  while (tcp_state(idle) == TCP_ESTABLISHED && test_now_ms() - t0 < 5000)
    test_sleep_ms(10);
  CHECK_EQ(tcp_state(idle), TCP_CLOSE); /* reset, not left to drain */
  CHECK_GE((long)(test_now_ms() - t0), 950);
  wait_log(&e.d, "reset with the response not taken within write_timeout_ms");
  close(idle);
  close(slow);
  scrape(e.port);
  stop(&e);
}

/* ---- where it listens ---- */

/* The local address of the listening TCP socket on `port`, from /proc/net/tcp (hex, as the
 * kernel writes it: 0100007F is 127.0.0.1), or "" if none. */
static void listen_address(int port, char *out, size_t len) {
  FILE *f = fopen("/proc/net/tcp", "r");
  CHECK(f != NULL);
  char line[512], want[16];
  snprintf(want, sizeof want, ":%04X", port);
  out[0] = '\0';
  while (fgets(line, sizeof line, f)) {
    char local[64], remote[64], state[8];
    if (sscanf(line, "%*s %63s %63s %7s", local, remote, state) == 3 && !strcmp(state, "0A") &&
        strstr(local, want) == local + 8)
      snprintf(out, len, "%.8s", local);
  }
  fclose(f);
}

/* --metrics PREFIX PORT SUFFIX */
static void bound_as(const char *prefix, const char *suffix, const char *want_hex) {
  td_daemon d;
  char flag[64], where[16];
  int port = td_free_port();
  snprintf(flag, sizeof flag, "%s%d%s", prefix, port, suffix);
  td_prepare(&d);
  td_start(&d, "--backends", "cpu", "--metrics", flag, NULL);
  listen_address(port, where, sizeof where);
  if (strcmp(where, want_hex) != 0)
    TEST_FAIL("--metrics %s: listening on %s, not %s", flag, where, want_hex);
  static char buf[1 << 16];
  CHECK_EQ(ask(port, GET_METRICS, buf, sizeof buf), 200);
  if (strcmp(want_hex, "0100007F") != 0)
    wait_log(&d, "not a loopback address");
  else
    CHECK(strstr(td_log(&d), "not a loopback address") == NULL);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* A port alone (PORT, :PORT, http://:PORT) is served on 127.0.0.1; a host given is honoured,
 * the wildcard 0.0.0.0 included, with a warning. */
TEST(default_bind_is_loopback) {
  bound_as("", "", "0100007F");
  bound_as(":", "", "0100007F");
  bound_as("http://:", "", "0100007F");
  bound_as("http://127.0.0.1:", "", "0100007F");
  bound_as("http://0.0.0.0:", "/", "00000000");
}

/* Listen addresses that are not one, and limits out of range: refused at start, naming the
 * flag or the file's line. */
TEST(bad_listen_addresses_and_limits_are_refused) {
  static const char *const bad[] = {"ftp://127.0.0.1:1", "http://127.0.0.1", "http://:0",
                                    "http://:65536",     "http://a b:80",    "80x",
                                    "http://[::1:80",    "http://x:80/y"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    td_daemon d;
    td_prepare(&d);
    CHECK_EQ(td_start_expect_exit(&d, "--metrics", bad[i], NULL), 1);
    char want[64];
    snprintf(want, sizeof want, "--metrics %s:", bad[i]);
    if (strstr(td_log(&d), want) == NULL)
      TEST_FAIL("'%s' not refused as expected:\n%s", bad[i], td_log(&d));
    td_cleanup(&d);
  }
  static const char *const limits[] = {"max_connections = 0",   "max_connections = 4097",
                                       "header_timeout_ms = 0", "write_timeout_ms = soon",
                                       "max_header_bytes = 63", "max_header_bytes = 2M"};
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
    td_daemon d;
    char conf[128];
    td_prepare(&d);
    snprintf(conf, sizeof conf, "[metrics]\n%s\n", limits[i]);
    td_write_config(&d, conf);
    CHECK_EQ(td_start_expect_exit(&d, NULL), 1);
    if (strstr(td_log(&d), "acceld.conf:2: [metrics]") == NULL)
      TEST_FAIL("'%s' not refused as expected:\n%s", limits[i], td_log(&d));
    td_cleanup(&d);
  }
}

/* ---- what requests get ---- */

typedef struct http_case {
  const char *request;
  int code;
} http_case;

static const http_case cases[] = {
    {"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200},
    {"GET /livez HTTP/1.1\r\n\r\n", 200},
    {"GET /readyz HTTP/1.1\r\n\r\n", 200},
    {"GET /readyz/ HTTP/1.1\r\n\r\n", 404},
    {"GET /live HTTP/1.1\r\n\r\n", 404},
    {"GET /healthz HTTP/1.0\r\n\r\n", 200},
    {"GET /healthz?probe=1 HTTP/1.1\r\n\r\n", 200},
    {"GET http://localhost:1/healthz HTTP/1.1\r\n\r\n", 200}, /* absolute-form */
    {"GET /healthz HTTP/1.1\n\n", 200},                       /* bare LF line ends */
    {"\r\nGET /healthz HTTP/1.1\r\n\r\n", 200},               /* an empty line first */
    {"GET /healthz HTTP/1.1\r\nX-Empty:\r\nX-Tab: a\tb\r\n\r\n", 200},
    {"GET /nothing-here HTTP/1.1\r\n\r\n", 404},
    {"GET /metrics/ HTTP/1.1\r\n\r\n", 404},
    {"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405},
    {"DELETE /healthz HTTP/1.1\r\n\r\n", 405},
    {"get /healthz HTTP/1.1\r\n\r\n", 405}, /* methods are case-sensitive */
    {"OPTIONS * HTTP/1.1\r\n\r\n", 405},
    {"GET /healthz HTTP/2.0\r\n\r\n", 505},
    {"GET /healthz HTTP/1.1 \r\n\r\n", 400},
    {"GET  /healthz HTTP/1.1\r\n\r\n", 400},
    {"GET /healthz\r\n\r\n", 400},
    {"GET healthz HTTP/1.1\r\n\r\n", 400},
    {"GET /healthz HTTP/1.x\r\n\r\n", 400},
    {"GET /healthz http/1.1\r\n\r\n", 400},
    {"G(T /healthz HTTP/1.1\r\n\r\n", 400},
    {"GET /healthz HTTP/1.1\r\nNo colon here\r\n\r\n", 400},
    {"GET /healthz HTTP/1.1\r\nName : value\r\n\r\n", 400},
    {"GET /healthz HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400}, /* obs-fold */
    {"GET /healthz HTTP/1.1\r\nA: b\rc\r\n\r\n", 400},         /* a bare CR */
    {"GET /heal\x01thz HTTP/1.1\r\n\r\n", 400},
    {"GET /healthz HTTP/1.1\r\nA: \x7f\r\n\r\n", 400},
    {":\r\n\r\n", 400},
};

/* The samples of `metric` in a scrape: how many, and the value of client="name" (-1: none). */
static int client_series(const char *text, const char *metric, const char *name, long *value) {
  char key[160];
  int n = 0;
  *value = -1;
  snprintf(key, sizeof key, "%s{client=\"%s\"} ", metric, name);
  for (const char *line = text; line && *line;
       line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
    if (strncmp(line, metric, strlen(metric)) == 0 && line[strlen(metric)] == '{')
      n++;
    if (strncmp(line, key, strlen(key)) == 0)
      *value = strtol(line + strlen(key), NULL, 10);
  }
  return n;
}

/* Sessions summed per client name, at most SRV_METRICS_CLIENTS (32) names and "other": forty
 * clients with forty names make 33 series, the last eight sessions under client="other". */
TEST(per_client_series_are_bounded) {
  enum { CLIENTS = 40, NAMES = 32 };
  endpoint e;
  start(&e, NULL, 1);
  static td_client c[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) {
    char name[32];
    snprintf(name, sizeof name, "client-%02d", i);
    td_client_open(&c[i], e.d.url);
    CHECK_OK(td_hello_as(&c[i], 0, name, NULL));
  }
  static char buf[1 << 20];
  CHECK_EQ(ask(e.port, GET_METRICS, buf, sizeof buf), 200);
  long v;
  CHECK_EQ(client_series(buf, "accel_client_sessions", "client-00", &v), NAMES + 1);
  CHECK_EQ(v, 1);
  client_series(buf, "accel_client_sessions", "client-31", &v);
  CHECK_EQ(v, 1); /* the 32nd name: still its own */
  client_series(buf, "accel_client_sessions", "client-32", &v);
  CHECK_EQ(v, -1); /* the 33rd: summed under "other" */
  client_series(buf, "accel_client_sessions", "other", &v);
  CHECK_EQ(v, CLIENTS - NAMES);
  CHECK_EQ(client_series(buf, "accel_client_buffers", "other", &v), NAMES + 1);
  for (int i = 0; i < CLIENTS; i++)
    td_client_close(&c[i]);
  stop(&e);
}

/* Each case on its own connection; a control byte (NUL) in a header too; HEAD gets the
 * headers of GET and no body; every answer closes the connection. */
TEST(methods_paths_and_malformed_requests) {
  endpoint e;
  start(&e, NULL, 1);
  static char buf[1 << 20], get[1 << 20];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int code = ask(e.port, cases[i].request, buf, sizeof buf);
    if (code != cases[i].code)
      TEST_FAIL("case %zu %.40s: %d, expected %d:\n%s", i, cases[i].request, code, cases[i].code,
                buf);
    CHECK(strstr(buf, "\r\nConnection: close\r\n") != NULL);
    CHECK_EQ((long)strlen(body_of(buf)), content_length(buf));
    CHECK_EQ(strstr(buf, "\r\nAllow: GET, HEAD\r\n") != NULL, code == 405);
  }
  static const char nul[] = "GET /healthz HTTP/1.1\r\nA: \0\r\n\r\n";
  CHECK_EQ(exchange(e.port, nul, sizeof nul - 1, buf, sizeof buf), 400);
  CHECK_EQ(ask(e.port, "HEAD /metrics HTTP/1.1\r\n\r\n", buf, sizeof buf), 200);
  CHECK_STR_EQ(body_of(buf), "");
  CHECK_EQ(ask(e.port, GET_METRICS, get, sizeof get), 200);
  CHECK_GT(content_length(buf), 1000);
  CHECK_LE(content_length(buf) - content_length(get), 16); /* the uptime may have grown */
  CHECK_GE(content_length(buf) - content_length(get), -16);
  wait_log(&e.d, "malformed requests (400)");
  scrape(e.port);
  stop(&e);
}

/* Random heads (bytes, and mutations of a good request) each get an answer or a close, and
 * the daemon serves afterwards. */
TEST(random_requests_never_hurt_it) {
  endpoint e;
  start(&e, "header_timeout_ms = 200\nmax_header_bytes = 512\n", 1);
  static char buf[1 << 16];
  unsigned seed = 12345;
  long rounds = test_scaled(300, 30);
  for (long r = 0; r < rounds; r++) {
    char req[600];
    size_t n = (size_t)(rand_r(&seed) % 560) + 1;
    if (r % 2 == 0) {
      for (size_t i = 0; i < n; i++)
        req[i] = (char)(rand_r(&seed) & 0xff);
    } else {
      static const char good[] = GET_METRICS;
      n = sizeof good - 1;
      memcpy(req, good, n);
      for (int k = 0; k < 3; k++)
        req[rand_r(&seed) % n] = (char)(rand_r(&seed) & 0xff);
    }
    int code = exchange_as(e.port, req, n, true, buf, sizeof buf);
    CHECK(code == 0 || code == 200 || code == 400 || code == 404 || code == 405 || code == 431 ||
          code == 505);
  }
  scrape(e.port);
  td_served(&e.d);
  stop(&e);
}

static const test_case tests[] = {
    TEST_CASE(per_client_series_are_bounded),
    TEST_CASE(half_a_request_is_closed_after_the_header_timeout),
    TEST_CASE(connections_past_the_cap_are_closed_at_once),
    TEST_CASE(half_open_flood_leaves_the_daemon_serving),
    TEST_CASE(heads_over_max_header_bytes_are_refused),
    TEST_CASE(a_client_that_never_reads_is_reset_after_the_write_timeout),
    TEST_CASE(default_bind_is_loopback),
    TEST_CASE(bad_listen_addresses_and_limits_are_refused),
    TEST_CASE(methods_paths_and_malformed_requests),
    TEST_CASE(random_requests_never_hurt_it),
};

TEST_MAIN(tests)
