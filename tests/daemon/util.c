/* Helpers of the daemon tests (util.h). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "util.h"

#include <unistd.h>

#include "proto/local.h"
#include "proto/local_rings.h"
#include "proto/stream.h"
#include "proto/tcp.h"

static const char *binary(const char *env) {
  const char *p = getenv(env);
  if (p == NULL || *p == '\0')
    TEST_FAIL("%s is not set (meson sets it; run through meson test)", env);
  return p;
}

/* ---- processes ---- */

/* In a forked child: die with the test, send stdout and stderr to `fd`, exec argv. */
static void __attribute__((noreturn)) exec_child(int fd, char **argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  dup2(fd, 1);
  dup2(fd, 2);
  execv(argv[0], argv);
  _exit(127);
}

/* Collects NULL-terminated variadic arguments after `first` fixed ones into argv. */
static int collect(char **argv, int n, int max, va_list ap) {
  for (const char *a; n < max - 1 && (a = va_arg(ap, const char *)) != NULL;)
    argv[n++] = (char *)a;
  argv[n] = NULL;
  return n;
}

int td_ctl(char *out, size_t len, const char *arg, ...) {
  char *argv[32] = {(char *)binary("ACCELCTL"), (char *)arg};
  va_list ap;
  va_start(ap, arg);
  collect(argv, 2, 32, ap);
  va_end(ap);
  int fds[2];
  CHECK_EQ(pipe(fds), 0);
  pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    exec_child(fds[1], argv);
  }
  close(fds[1]);
  size_t got = 0;
  for (ssize_t n; (n = read(fds[0], out + got, len - 1 - got)) > 0 && got < len - 1;)
    got += (size_t)n;
  out[got] = '\0';
  char sink[256];
  while (read(fds[0], sink, sizeof sink) > 0) {
  }
  close(fds[0]);
  int status;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void td_served(td_daemon *d) {
  td_client c;
  td_client_open(&c, d->url);
  CHECK_OK(td_hello(&c, NULL));
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 4));
  uint32_t v[4] = {1, 2, 3, 4}, back[4] = {0};
  CHECK_OK(td_write_u32(&c, td_handle(1, 1), v, 4));
  CHECK_OK(td_read_u32(&c, td_handle(1, 1), back, 4));
  CHECK_EQ(memcmp(v, back, sizeof v), 0);
  td_client_close(&c);
}

int td_open_fds(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  DIR *dp = opendir(path);
  CHECK(dp != NULL);
  int n = 0;
  for (struct dirent *e; (e = readdir(dp)) != NULL;)
    n += e->d_name[0] != '.';
  closedir(dp);
  return n;
}

int td_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_GE(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

long td_status_field(td_daemon *d, const char *key) {
  static char out[1 << 16];
  /* A long timeout: the tests that poll the status do so while the daemon is busy (large
   * transfers on a loaded 2-core machine); whether it answers fast is tested elsewhere. */
  int rc = td_ctl(out, sizeof out, "--url", d->url, "--timeout", "30000", "status", "--json", NULL);
  if (rc != 0)
    TEST_FAIL("accelctl status exited with %d: %s\nthe daemon's log:\n%s", rc, out, td_log(d));
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(out, pat);
  return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

/* ---- the daemon ---- */

void td_prepare(td_daemon *d) {
  memset(d, 0, sizeof *d);
  snprintf(d->dir, sizeof d->dir, "/tmp/accel-daemon-test-XXXXXX");
  CHECK(mkdtemp(d->dir) != NULL);
  snprintf(d->url, sizeof d->url, "ipc://%s/acceld.sock", d->dir);
  snprintf(d->log, sizeof d->log, "%s/acceld.log", d->dir);
  snprintf(d->conf, sizeof d->conf, "%s/acceld.conf", d->dir);
  td_write_config(d, "");
}

/* ACCEL_TEST_IO_THREADS=N: the daemon serves local sockets on N I/O threads (the suites run
 * again so, whatever the host's default), unless the test sets io_threads itself; and
 * ACCEL_TEST_SHARDS=N: on N shards (else one: `auto` would give a host of 16 cores or more
 * several, and some answers differ with them), unless it sets shards. Appended: a section may
 * repeat, and the lines a test's config errors name stay where they are. */
void td_write_config(td_daemon *d, const char *text) {
  FILE *f = fopen(d->conf, "w");
  CHECK(f != NULL);
  fputs(text, f);
  const char *io = getenv("ACCEL_TEST_IO_THREADS");
  if (io != NULL && strstr(text, "io_threads") == NULL)
    fprintf(f, "\n[daemon]\nio_threads = %s\n", io);
  const char *shards = getenv("ACCEL_TEST_SHARDS"); /* else one, whatever the host's cores */
  if (strstr(text, "shards") == NULL)
    fprintf(f, "\n[daemon]\nshards = %s\n", shards != NULL && *shards ? shards : "1");
  fclose(f);
}

static pid_t spawn_daemon(td_daemon *d, va_list ap) {
  char *argv[40] = {
      (char *)binary("ACCELD"), "--foreground", "--config", d->conf, "--listen", d->url};
  collect(argv, 6, 40, ap);
  int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  CHECK_GE(fd, 0);
  pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0)
    exec_child(fd, argv);
  close(fd);
  return pid;
}

static bool pings(td_daemon *d) {
  char out[512];
  return td_ctl(out, sizeof out, "--url", d->url, "--timeout", "1000", "ping", NULL) == 0;
}

void td_start(td_daemon *d, ...) {
  va_list ap;
  va_start(ap, d);
  d->pid = spawn_daemon(d, ap);
  va_end(ap);
  for (uint64_t t0 = test_now_ms(); !pings(d); test_sleep_ms(20)) {
    int status;
    if (waitpid(d->pid, &status, WNOHANG) == d->pid)
      TEST_FAIL("acceld exited (status %d) before serving:\n%s", status, td_log(d));
    if (test_now_ms() - t0 > 60000 * (test_under_valgrind() ? 10 : 1))
      TEST_FAIL("acceld did not answer ping within 60 s:\n%s", td_log(d));
  }
}

int td_start_expect_exit(td_daemon *d, ...) {
  va_list ap;
  va_start(ap, d);
  d->pid = spawn_daemon(d, ap);
  va_end(ap);
  return td_wait(d);
}

void td_signal(td_daemon *d, int sig) {
  CHECK_GT(d->pid, 0);
  CHECK_EQ(kill(d->pid, sig), 0);
}

/* No limit of its own (a drain may take its whole timeout on a busy machine): a daemon that
 * never exits is the watchdog's, and dies with the test. Its log is shown once it is late. */
int td_wait(td_daemon *d) {
  if (d->pid <= 0)
    return -1;
  int status = 0;
  bool shown = false;
  test_waiting_for_ = "acceld to exit";
  for (uint64_t t0 = test_now_ms(); waitpid(d->pid, &status, WNOHANG) != d->pid;
       test_sleep_ms(10)) {
    if (!shown && test_now_ms() - t0 > 15000) {
      fprintf(stderr, "acceld has not exited after 15 s (still waiting); its log:\n%s\n",
              td_log(d));
      shown = true;
    }
  }
  test_waiting_for_ = NULL;
  d->pid = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int td_stop(td_daemon *d) {
  if (d->pid <= 0)
    return -1;
  kill(d->pid, SIGTERM);
  int status = td_wait(d);
  if (status != 0) { /* why, for the test's log: the daemon's own, gone with its directory */
    const char *log = td_log(d);
    size_t n = strlen(log);
    fprintf(stderr, "acceld exited with status %d; the end of its log:\n%s\n", status,
            log + (n > 8192 ? n - 8192 : 0));
  }
  return status;
}

const char *td_log(td_daemon *d) {
  static char buf[1 << 16];
  FILE *f = fopen(d->log, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f)
    fclose(f);
  buf[n] = '\0';
  return buf;
}

void td_cleanup(td_daemon *d) {
  char cmd[160];
  if (d->pid > 0)
    td_stop(d);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
  CHECK_EQ(system(cmd), 0);
}

/* ---- TLS ---- */

static char certs[64]; /* the directory of PEM files, made once */

static void __attribute__((format(printf, 1, 2))) shell(const char *fmt, ...) {
  char cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  if (system(cmd) != 0)
    TEST_FAIL("command failed (is the openssl CLI installed? scripts/deps):\n%s", cmd);
}

/* key NAME, certificate NAME.pem signed by CA (NULL: self-signed, a CA) with extensions. */
static void make_cert(const char *name, const char *ca, const char *subject, const char *ext) {
  const char *keygen = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
  if (ca == NULL) {
    shell("cd %s && openssl req -x509 %s -keyout %s.key -out %s.pem -days 2 -subj '%s' "
          ">>openssl.log 2>&1",
          certs, keygen, name, name, subject);
    return;
  }
  shell("cd %s && printf '%%s\\n' '%s' > %s.ext && "
        "openssl req %s -keyout %s.key -out %s.csr -subj '%s' >>openssl.log 2>&1 && "
        "openssl x509 -req -in %s.csr -CA %s.pem -CAkey %s.key -CAcreateserial -days 2 "
        "-extfile %s.ext -out %s.pem >>openssl.log 2>&1",
        certs, ext, name, keygen, name, name, subject, name, ca, ca, name, name);
}

static void remove_certs(void) {
  if (certs[0] != '\0')
    shell("rm -rf '%s'", certs);
}

void td_tls_certs(void) {
  if (certs[0] != '\0')
    return;
  /* the trailing six capitals are the pattern mkdtemp replaces with a unique name */
  snprintf(certs, sizeof certs, "/tmp/accel-tls-test-XXXXXX");
  CHECK(mkdtemp(certs) != NULL);
  atexit(remove_certs); /* not after a failed check (abort): the files help then */
  make_cert("ca", NULL, "/CN=accel test CA", NULL);
  make_cert("other-ca", NULL, "/CN=some other CA", NULL);
  make_cert("server", "ca", "/CN=localhost",
            "subjectAltName=DNS:localhost,DNS:127.0.0.1,IP:127.0.0.1\n"
            "extendedKeyUsage=serverAuth");
  make_cert("client", "ca", "/CN=accel test client", "extendedKeyUsage=clientAuth");
  make_cert("rogue", "other-ca", "/CN=accel test client", "extendedKeyUsage=clientAuth");
}

const char *td_tls_pem(const char *file) {
  static char paths[8][128];
  static int next;
  char *p = paths[next++ % 8];
  td_tls_certs();
  snprintf(p, sizeof paths[0], "%s/%s", certs, file);
  return p;
}

void td_start_nng(td_daemon *d, const char *config, char *url, size_t len) {
  char text[2048];
  td_tls_certs();
  td_prepare(d);
  snprintf(text, sizeof text, "%s\n[security]\ntls_cert = %s\ntls_key = %s\n", config,
           td_tls_pem("server.pem"), td_tls_pem("server.key"));
  td_write_config(d, text);
  snprintf(url, len, "tls+tcp://127.0.0.1:%d", td_free_port());
  CHECK_EQ(setenv("ACCEL_TLS_CA", td_tls_pem("ca.pem"), 1), 0); /* for libaccel's clients */
  CHECK_EQ(setenv("ACCEL_TLS_SERVER_NAME", "localhost", 1), 0);
  td_start(d, "--listen", url, "--backends", "cpu", NULL);
}

/* The raw client's dial: tls+tcp:// verifies the daemon against the test CA. */
static int dial_nng(nng_socket sock, const char *url) {
  if (strncmp(url, "tls+", 4) != 0)
    return nng_dial(sock, url, NULL, 0);
  nng_dialer d;
  nng_tls_config *cfg = NULL;
  int rv = nng_dialer_create(&d, sock, url);
  if (rv == 0)
    rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT);
  if (rv == 0)
    rv = nng_tls_config_ca_file(cfg, td_tls_pem("ca.pem"));
  if (rv == 0)
    rv = nng_tls_config_server_name(cfg, "localhost");
  if (rv == 0)
    rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
  if (cfg)
    nng_tls_config_free(cfg);
  return rv == 0 ? nng_dialer_start(d, 0) : rv;
}

/* ---- the protocol ---- */

/* ipc:// and tcp:// URLs reach the daemon's own stream transport (frames back to back, over
 * a Unix socket or TCP); tls+tcp:// reaches nng's. Received frames are handed out as nng messages
 * either way. */
static atomic_bool nng_close_abandoned; /* nng_fini would wait for it forever */

static void nng_fini_unless_stuck(void) {
  if (!atomic_load(&nng_close_abandoned))
    nng_fini();
}

static void *nng_closer(void *arg) {
  nng_socket *s = arg;
  nng_close(*s);
  free(s);
  return NULL;
}

/* nng 1.5.2 (Debian 12) can hang in nng_close() when the peer dropped the connection with
 * sends in flight (as libaccel, clients/remote_nng.c): it runs on a thread of its own, abandoned
 * after 2 s. These tests are about the daemon, which is idle by then. */
static void nng_close_bounded(nng_socket sock) {
  nng_socket *s = malloc(sizeof *s);
  CHECK(s != NULL);
  *s = sock;
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, nng_closer, s), 0);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 2;
  if (pthread_timedjoin_np(t, NULL, &until) != 0) {
    fprintf(stderr, "# nng_close did not return in 2 s (nng 1.5.2): abandoned\n");
    atomic_store(&nng_close_abandoned, true);
    pthread_detach(t);
  }
}

static void register_nng_fini(void) {
  if (atexit(nng_fini_unless_stuck) != 0)
    fprintf(stderr, "# atexit failed: nng's threads may outlive the test\n");
}

void td_client_open(td_client *c, const char *url) {
  static pthread_once_t fini_once = PTHREAD_ONCE_INIT;
  /* nng's threads end before exit (valgrind counts them otherwise); clients open on many
   * threads at once */
  pthread_once(&fini_once, register_nng_fini);
  memset(c, 0, sizeof *c);
  c->next_id = 100;
  c->fd = -1;
  const char *path = proto_local_path(url), *why = "";
  if (path) {
    c->fd = proto_local_connect(path);
    CHECK(c->fd >= 0);
    return;
  }
  if (proto_tcp_url(url)) {
    c->fd = proto_tcp_connect(url, 10000, &why);
    if (c->fd < 0)
      TEST_FAIL("%s: %s", url, why);
    return;
  }
  CHECK_EQ(nng_req0_open_raw(&c->sock), 0);
  nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, 0); /* no limit: big reads */
  nng_socket_set_int(c->sock, NNG_OPT_RECVBUF, 8192);
  CHECK_EQ(dial_nng(c->sock, url), 0);
}

void td_client_close(td_client *c) {
  if (c->fd >= 0) {
    close(c->fd);
    c->fd = -1;
  } else {
    nng_close_bounded(c->sock);
  }
  free(c->rbuf);
  c->rbuf = NULL;
  c->rcap = 0;
  if (c->rings != NULL)
    munmap(c->rings, PROTO_RINGS_BYTES);
  c->rings = NULL;
}

/* ---- shared rings ---- */

static void short_nap(void) {
  struct timespec d = {0, 20000};
  nanosleep(&d, NULL);
}

void td_send_rings(td_client *c, const void *bytes, size_t len, size_t piece) {
  const uint8_t *p = bytes;
  size_t since = 0;
  uint64_t deadline = test_now_ms() + 10000 * (test_under_valgrind() ? 10 : 1);
  while (len > 0) {
    uint64_t room = rt_ring_room(&c->up);
    CHECK(room != UINT64_MAX);
    if (room == 0) { /* the daemon takes what is there, and makes room */
      CHECK(rt_ring_publish(&c->up, c->fd));
      CHECK(test_now_ms() < deadline);
      short_nap();
      continue;
    }
    size_t k = room < len ? (size_t)room : len;
    if (piece != 0 && k > piece - since)
      k = piece - since;
    rt_ring_put(&c->up, p, k);
    p += k;
    len -= k;
    since += k;
    if (piece != 0 && since == piece) {
      CHECK(rt_ring_publish(&c->up, c->fd));
      since = 0;
    }
  }
  CHECK(rt_ring_publish(&c->up, c->fd));
}

/* n bytes from the down ring into p by the deadline: 0, NNG_ETIMEDOUT, or NNG_ECLOSED once
 * the socket ended with the ring empty. */
static int take_ring(td_client *c, uint8_t *p, size_t n, uint64_t deadline) {
  while (n > 0) {
    uint64_t have = rt_ring_avail(&c->down);
    CHECK(have != UINT64_MAX);
    if (have > 0) {
      uint64_t k = have < n ? have : n;
      rt_ring_take(&c->down, p, k);
      (void)rt_ring_wake(c->fd, &c->down.ctl->writer_waits);
      p += k;
      n -= (size_t)k;
      continue;
    }
    char b[64];
    ssize_t r = recv(c->fd, b, sizeof b, MSG_DONTWAIT); /* bells, or the end */
    if (r == 0 && rt_ring_avail(&c->down) == 0)
      return NNG_ECLOSED;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return NNG_ECLOSED;
    if (deadline != 0 && test_now_ms() >= deadline)
      return NNG_ETIMEDOUT;
    short_nap();
  }
  return 0;
}

static int recv_rings(td_client *c, nng_msg **m, int timeout_ms) {
  uint64_t deadline = timeout_ms < 0 ? 0 : test_now_ms() + (uint64_t)timeout_ms;
  uint8_t head[PROTO_HEADER_SIZE];
  int rv = take_ring(c, head, sizeof head, deadline);
  if (rv != 0)
    return rv;
  size_t len = 0;
  uint64_t id = 0;
  CHECK_EQ(proto_stream_scan(head, sizeof head, UINT32_MAX, &len, &id), PROTO_SCAN_FRAME);
  CHECK_EQ(nng_msg_alloc(m, len), 0);
  memcpy(nng_msg_body(*m), head, sizeof head);
  rv = take_ring(c, (uint8_t *)nng_msg_body(*m) + sizeof head, len - sizeof head, deadline);
  if (rv != 0)
    nng_msg_free(*m);
  return rv;
}

uint32_t td_hello_passing(td_client *c, int fd) {
  proto_out o;
  proto_hello h = {.version = PROTO_VERSION, .capabilities = PROTO_CAP_RINGS};
  snprintf(h.name, sizeof h.name, "rings-test");
  proto_out_init(&o);
  uint64_t id = c->next_id++;
  CHECK_OK(proto_encode_hello(&o, id, &h));
  CHECK_OK(proto_local_send(c->fd, o.data, o.len, fd));
  proto_out_free(&o);
  nng_msg *m;
  CHECK_OK(td_recv(c, &m, TD_FOREVER)); /* on the socket: the rings are not taken yet */
  proto_header hd;
  const uint8_t *p = nng_msg_body(m);
  CHECK_OK(proto_decode_header(p, nng_msg_len(m), UINT32_MAX, &hd));
  CHECK_EQ(hd.type, PROTO_WELCOME);
  proto_welcome w;
  CHECK_OK(proto_decode_welcome(p + PROTO_HEADER_SIZE, hd.body_len, &w));
  nng_msg_free(m);
  return w.capabilities;
}

uint32_t td_hello_rings(td_client *c) {
  uint8_t *base;
  int fd = proto_rings_create(&base);
  CHECK_GE(fd, 0);
  uint32_t caps = td_hello_passing(c, fd);
  close(fd);
  if (!(caps & PROTO_CAP_RINGS)) {
    munmap(base, PROTO_RINGS_BYTES);
    return caps;
  }
  c->rings = base;
  proto_rings_view(base, true, &c->up, &c->down);
  return caps;
}

void td_send_raw(td_client *c, const void *bytes, size_t len, uint64_t id) {
  if (c->rings != NULL) {
    td_send_rings(c, bytes, len, 0);
    return;
  }
  if (c->fd >= 0) {
    CHECK_EQ(proto_local_send(c->fd, bytes, len, -1), 0);
    return;
  }
  nng_msg *m;
  CHECK_EQ(nng_msg_alloc(&m, 0), 0);
  CHECK_EQ(nng_msg_header_append_u32(m, (uint32_t)id | 0x80000000u), 0);
  CHECK_EQ(nng_msg_append(m, bytes, len), 0);
  CHECK_EQ(nng_sendmsg(c->sock, m, 0), 0);
}

static int recv_local(td_client *c, nng_msg **m, int timeout_ms) {
  long long n = proto_local_recv_frame(c->fd, &c->rbuf, &c->rcap, UINT32_MAX - 64, timeout_ms);
  if (n == ACCEL_ETIMEDOUT)
    return NNG_ETIMEDOUT;
  if (n < 0)
    return NNG_ECLOSED;
  CHECK_EQ(nng_msg_alloc(m, (size_t)n), 0);
  memcpy(nng_msg_body(*m), c->rbuf, (size_t)n);
  return 0;
}

static int recv_any(td_client *c, nng_msg **m, int timeout_ms) {
  if (c->rings != NULL)
    return recv_rings(c, m, timeout_ms);
  if (c->fd >= 0)
    return recv_local(c, m, timeout_ms);
  CHECK_EQ(nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO,
                             timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms),
           0);
  return nng_recvmsg(c->sock, m, 0);
}

int td_recv(td_client *c, nng_msg **m, int timeout_ms) {
  if (timeout_ms < 0)
    test_waiting_for_ = "a frame or the end of a connection to the daemon";
  int rv = recv_any(c, m, timeout_ms);
  test_waiting_for_ = NULL;
  return rv;
}

int td_reply_status(nng_msg *m, uint64_t id, proto_bytes *data) {
  proto_header h;
  proto_bytes ignored;
  int32_t status;
  const uint8_t *p = nng_msg_body(m);
  CHECK_OK(proto_decode_header(p, nng_msg_len(m), UINT32_MAX, &h));
  CHECK_EQ(h.type, PROTO_REPLY);
  CHECK_EQ(h.request_id, id);
  CHECK_OK(proto_decode_reply(p + PROTO_HEADER_SIZE, h.body_len, &status, data ? data : &ignored));
  return status;
}

static nng_msg *call_msg(td_client *c, proto_out *frame, uint64_t id) {
  CHECK_OK(frame->err);
  td_send_raw(c, frame->data, frame->len, id);
  proto_out_free(frame);
  nng_msg *m;
  int rv = td_recv(c, &m, 10000 * (test_under_valgrind() ? 10 : 1));
  if (rv != 0)
    TEST_FAIL("no reply to request %llu: %s", (unsigned long long)id, nng_strerror(rv));
  return m;
}

int td_call(td_client *c, proto_out *frame, uint64_t id) {
  nng_msg *m = call_msg(c, frame, id);
  int status = td_reply_status(m, id, NULL);
  nng_msg_free(m);
  return status;
}

int td_hello(td_client *c, proto_welcome *w) {
  return td_hello_caps(c, 0, w);
}

int td_hello_caps(td_client *c, uint32_t caps, proto_welcome *w) {
  return td_hello_as(c, caps, "daemon-test", w);
}

int td_hello_as(td_client *c, uint32_t caps, const char *name, proto_welcome *w) {
  proto_out o;
  uint64_t id = c->next_id++;
  proto_hello h = {.version = PROTO_VERSION, .capabilities = caps};
  snprintf(h.name, sizeof h.name, "%s", name);
  proto_out_init(&o);
  CHECK_OK(proto_encode_hello(&o, id, &h));
  nng_msg *m = call_msg(c, &o, id);
  proto_header hd;
  const uint8_t *p = nng_msg_body(m);
  CHECK_OK(proto_decode_header(p, nng_msg_len(m), UINT32_MAX, &hd));
  int status = 0;
  if (hd.type == PROTO_WELCOME) {
    proto_welcome tmp;
    CHECK_OK(proto_decode_welcome(p + PROTO_HEADER_SIZE, hd.body_len, w ? w : &tmp));
  } else {
    status = td_reply_status(m, id, NULL);
  }
  nng_msg_free(m);
  return status;
}

int td_control(td_client *c, uint32_t command, uint64_t arg) {
  proto_out o;
  uint64_t id = c->next_id++;
  proto_control_req req = {command, arg};
  proto_out_init(&o);
  CHECK_OK(proto_encode_control(&o, id, &req));
  return td_call(c, &o, id);
}

int td_control_data(td_client *c, uint32_t command, uint64_t arg, char *out, size_t cap,
                    size_t *len) {
  proto_out o;
  uint64_t id = c->next_id++;
  proto_control_req req = {command, arg};
  proto_out_init(&o);
  CHECK_OK(proto_encode_control(&o, id, &req));
  nng_msg *m = call_msg(c, &o, id);
  proto_bytes data = {0};
  int status = td_reply_status(m, id, &data);
  *len = data.len < cap ? data.len : cap - 1;
  memcpy(out, data.data, *len);
  out[*len] = '\0';
  nng_msg_free(m);
  return status;
}

static int op_call(td_client *c, dev_op *op, proto_bytes data) {
  proto_out o;
  uint64_t id = c->next_id++;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, id, op, data));
  return td_call(c, &o, id);
}

int td_create(td_client *c, uint64_t handle, accel_dtype dtype, uint64_t count) {
  dev_op op = {.h = {.kind = DEV_OP_BUFFER_CREATE, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle, .count = count};
  op.u.create.dtype = dtype;
  return op_call(c, &op, (proto_bytes){NULL, 0});
}

int td_destroy(td_client *c, uint64_t handle) {
  dev_op op = {.h = {.kind = DEV_OP_BUFFER_DESTROY, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle};
  return op_call(c, &op, (proto_bytes){NULL, 0});
}

int td_write_u32(td_client *c, uint64_t handle, const uint32_t *src, uint64_t count) {
  dev_op op = {.h = {.kind = DEV_OP_WRITE, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle, .count = count};
  return op_call(c, &op, (proto_bytes){(const uint8_t *)src, count * 4});
}

int td_read_u32(td_client *c, uint64_t handle, uint32_t *dst, uint64_t count) {
  dev_op op = {.h = {.kind = DEV_OP_READ, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle, .count = count};
  op.u.read.bytes = count * 4;
  proto_out o;
  uint64_t id = c->next_id++;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, id, &op, (proto_bytes){NULL, 0}));
  nng_msg *m = call_msg(c, &o, id);
  proto_bytes data;
  int status = td_reply_status(m, id, &data);
  if (status == 0) {
    CHECK_EQ(data.len, count * 4);
    memcpy(dst, data.data, data.len);
  }
  nng_msg_free(m);
  return status;
}

void td_encode_fill(proto_out *o, uint64_t id, uint64_t handle, uint32_t value) {
  dev_op op = {.h = {.kind = DEV_OP_FILL, .device = 0}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle};
  op.u.fill.value = value;
  CHECK_OK(proto_encode_op(o, id, &op, (proto_bytes){NULL, 0}));
}

int td_fill(td_client *c, uint64_t handle, uint32_t value) {
  proto_out o;
  uint64_t id = c->next_id++;
  proto_out_init(&o);
  td_encode_fill(&o, id, handle, value);
  return td_call(c, &o, id);
}

void td_encode_sgemm(proto_out *o, uint64_t id, uint64_t a, uint64_t b, uint64_t c, int64_t n) {
  dev_op op = {.h = {.kind = DEV_OP_GEMM, .device = 0}, .nbufs = 3};
  op.bufs[0] = (dev_op_buf){.handle = a};
  op.bufs[1] = (dev_op_buf){.handle = b};
  op.bufs[2] = (dev_op_buf){.handle = c};
  op.u.gemm = (be_gemm_args){
      .m = n, .n = n, .k = n, .alpha = 1.0, .beta = 1.0, .lda = n, .ldb = n, .ldc = n, .batch = 1};
  CHECK_OK(proto_encode_op(o, id, &op, (proto_bytes){NULL, 0}));
}

int td_answers_ok_or_closed(td_client *c, int ops) {
  int ok = 0;
  for (int i = 0; i < ops; i++) {
    nng_msg *m;
    CHECK_EQ(td_recv(c, &m, TD_FOREVER), 0); /* answered, whatever happened */
    proto_header h;
    CHECK_OK(proto_decode_header(nng_msg_body(m), nng_msg_len(m), UINT32_MAX, &h));
    int rc = td_reply_status(m, h.request_id, NULL);
    CHECK(rc == 0 || rc == ACCEL_ECLOSED);
    ok += rc == 0;
    nng_msg_free(m);
  }
  return ok;
}

void td_check_max_connections(td_daemon *d, int max) {
  enum { MOST = 16 };
  CHECK_LT(max, MOST);
  td_client c[MOST];
  for (int i = 0; i < max; i++) {
    td_client_open(&c[i], d->url);
    CHECK_OK(td_hello(&c[i], NULL)); /* accepted, in order */
  }
  td_client_open(&c[max], d->url);
  nng_msg *m;
  CHECK_EQ(td_recv(&c[max], &m, TD_FOREVER), 0);
  CHECK_ERR(td_reply_status(m, 0, NULL), ACCEL_EBUSY);
  nng_msg_free(m);
  CHECK_EQ(td_recv(&c[max], &m, TD_FOREVER), NNG_ECLOSED);
  TEST_WAIT_FOR(strstr(td_log(d), "refused: max_connections reached") != NULL, 20);
  for (int i = 0; i < max; i++)
    CHECK_OK(td_control(&c[i], PROTO_CTL_PING, 0));
  for (int i = 0; i <= max; i++)
    td_client_close(&c[i]);
  /* Room again once the daemon has seen them go (until then even accelctl is refused). */
  char out[256];
  TEST_WAIT_FOR(td_ctl(out, sizeof out, "--url", d->url, "ping", NULL) == 0, 20);
}

const char *td_http_get(int port, const char *path) {
  static char text[1 << 20];
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_GE(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  char req[128];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                   path);
  CHECK_EQ(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
  size_t got = 0;
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, 10000), 1);
    ssize_t k = recv(fd, text + got, sizeof text - 1 - got, 0);
    if (k <= 0)
      break;
    got += (size_t)k;
    CHECK_LT(got, sizeof text - 1);
  }
  text[got] = '\0';
  close(fd);
  const char *body = strstr(text, "\r\n\r\n");
  CHECK(body != NULL);
  return body + 4;
}
