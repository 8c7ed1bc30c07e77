/* accel — benchmarks of acceld, the daemon (docs/PERFORMANCE.md, "Daemon").
 *
 * Ratios against floors measured in the same run, repetitions alternating between the
 * variants (the machines are shared and noisy); tables report medians over repetitions. The
 * daemon is the real acceld, started here on a private ipc:// socket (its own local transport)
 * and a loopback tcp:// one (the same stream over TCP; tls+tcp:// is nng's).
 *
 *   1. round trip, one request in flight:
 *        socketpair   40 bytes to an echo process over a Unix socketpair, 32 back (the floor)
 *        daemon-ping  a CONTROL PING (40 bytes) answered by acceld's server actor (32 back)
 *        daemon-op    libaccel: a fill of a 1-element buffer on the CPU device, then a wait
 *                     on its future: session, device, kernel actor, CPU queue and back
 *        embedded-op  the same op in this process
 *      Target: daemon-op / socketpair <= 2.
 *   2. pipelined tiny ops: N fills of a 1-element buffer issued back to back (not waited for,
 *      not batched by the caller), then accel_finish; through acceld (ipc://, tcp:// and,
 *      when the openssl CLI can make certificates, tls+tcp://) versus embedded, and the floor
 *      of a raw TCP socket over loopback: N requests of a fill's size (96 bytes), one write
 *      each, answered by a forked peer with 32 bytes each (one write per read, as acceld
 *      batches its replies). Targets: ipc:// / embedded >= 0.5, tcp:// / ipc:// >= 0.5.
 *   3. 1 GiB written and read back: through acceld from accel_host_alloc memory (shared with
 *      the daemon) and from malloc'd memory (staging; chunks over tcp:// and tls+tcp://),
 *      embedded, a memcpy of 1 GiB in this process (the floor of the local paths) and the same
 *      bytes over a raw loopback TCP socket to and from a forked peer with plain write/read
 *      into a buffer of its own (the floor of tcp://). Target: tcp:// / raw TCP >= 0.7.
 *   4. sgemm n = 1024 through the daemon versus embedded.
 *
 * Usage: bench-daemon [--quick] [--reps N] [--iters N] [--ops N] [--mib N] [--acceld PATH]
 * Exit status 0 unless a benchmark itself broke (a failed call, wrong data). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#if BENCH_MBEDCRYPTO
#include <mbedtls/chachapoly.h>
#endif
#include "proto/local.h"
#include "proto/wire.h"

#define REQ_BYTES 40 /* a PING frame */
#define REP_BYTES 32 /* its reply */
#define MAX_REPS 64

typedef struct bench_opts {
  int reps, iters;
  long ops;
  size_t mib;
  const char *acceld;
} bench_opts;

static char dir[64], ipc_url[128], tcp_url[128], tls_url[128];
static pid_t daemon_pid, echo_pid;
typedef struct bulk {
  double write_s, read_s;
} bulk;

static bool have_tls; /* certificates made: acceld also listens on tls_url */

#define OK(x)                                                                                      \
  do {                                                                                             \
    int rc_ = (x);                                                                                 \
    if (rc_ != 0) {                                                                                \
      fprintf(stderr, "%s:%d: %s = %s\n", __FILE__, __LINE__, #x, accel_err_name(rc_));            \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static void die(const char *what) {
  fprintf(stderr, "bench-daemon: %s\n", what);
  exit(1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
  double s[MAX_REPS];
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  return s[n / 2];
}

/* ---- the daemon and the echo process ---- */

/* A CA and a certificate for "localhost" made with the openssl CLI in `dir`, and a config
 * that gives them to acceld; false (and tls+tcp:// is left out) if openssl cannot. */
static bool make_tls_config(void) {
  char cmd[2048];
  const char *keygen = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
  snprintf(cmd, sizeof cmd,
           "cd %s && openssl req -x509 %s -keyout ca.key -out ca.pem -days 2 -subj '/CN=bench CA' "
           ">openssl.log 2>&1 && printf 'subjectAltName=DNS:localhost\n' > server.ext && "
           "openssl req %s -keyout server.key -out server.csr -subj '/CN=localhost' "
           ">>openssl.log 2>&1 && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
           "-CAcreateserial -days 2 -extfile server.ext -out server.pem >>openssl.log 2>&1 && "
           "printf '[security]\ntls_cert = %s/server.pem\ntls_key = %s/server.key\n' > "
           "acceld.conf",
           dir, keygen, keygen, dir, dir);
  if (system(cmd) != 0)
    return false;
  snprintf(cmd, sizeof cmd, "%s/ca.pem", dir);
  setenv("ACCEL_TLS_CA", cmd, 1);
  setenv("ACCEL_TLS_SERVER_NAME", "localhost", 1);
  return true;
}

static void start_daemon(const bench_opts *o) {
  snprintf(dir, sizeof dir, "/tmp/accel-bench-XXXXXX");
  if (mkdtemp(dir) == NULL)
    die("mkdtemp");
  int port = 20000 + (int)(getpid() % 20000);
  snprintf(ipc_url, sizeof ipc_url, "ipc://%s/acceld.sock", dir);
  snprintf(tcp_url, sizeof tcp_url, "tcp://127.0.0.1:%d", port);
  snprintf(tls_url, sizeof tls_url, "tls+tcp://127.0.0.1:%d", port + 1);
  have_tls = make_tls_config();
  daemon_pid = fork();
  if (daemon_pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char log[128], conf[128];
    snprintf(log, sizeof log, "%s/acceld.log", dir);
    snprintf(conf, sizeof conf, "%s/acceld.conf", dir);
    if (freopen(log, "w", stderr) == NULL)
      _exit(127);
    if (have_tls)
      execl(o->acceld, o->acceld, "--foreground", "--config", conf, "--listen", ipc_url, "--listen",
            tcp_url, "--listen", tls_url, "--allow-plain-tcp", "--log-level", "warn", (char *)NULL);
    else
      execl(o->acceld, o->acceld, "--foreground", "--listen", ipc_url, "--listen", tcp_url,
            "--allow-plain-tcp", "--log-level", "warn", (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 1200; i++) { /* 60 s: a cold GPU host takes seconds to bring up CUDA */
    if (waitpid(daemon_pid, NULL, WNOHANG) == daemon_pid) {
      fprintf(stderr, "bench-daemon: acceld exited; its log: %s/acceld.log\n", dir);
      die("acceld did not start");
    }
    accel_ctx *probe;
    if (accel_open(&probe, ipc_url) == 0) {
      accel_close(probe);
      return;
    }
    usleep(50000);
  }
  fprintf(stderr, "bench-daemon: its log: %s/acceld.log\n", dir);
  die("acceld did not start");
}

static int start_echo(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
    die("socketpair");
  echo_pid = fork();
  if (echo_pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(sv[0]);
    char buf[REQ_BYTES];
    while (recv(sv[1], buf, sizeof buf, MSG_WAITALL) == REQ_BYTES)
      if (send(sv[1], buf, REP_BYTES, 0) != REP_BYTES)
        break;
    _exit(0);
  }
  close(sv[1]);
  return sv[0];
}

static void stop_all(void) {
  if (daemon_pid > 0) {
    kill(daemon_pid, SIGTERM);
    waitpid(daemon_pid, NULL, 0);
  }
  if (echo_pid > 0) {
    kill(echo_pid, SIGKILL);
    waitpid(echo_pid, NULL, 0);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "bench-daemon: could not remove %s\n", dir);
}

/* ---- raw TCP over loopback (the floors of tcp://) ---- */

/* A connected pair of loopback TCP sockets, with TCP_NODELAY as nng sets it. */
static void tcp_pair(int fd[2]) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
      getsockname(l, (struct sockaddr *)&a, &alen) != 0)
    die("raw tcp listen");
  fd[0] = socket(AF_INET, SOCK_STREAM, 0);
  if (fd[0] < 0 || connect(fd[0], (struct sockaddr *)&a, sizeof a) != 0 ||
      (fd[1] = accept(l, NULL, NULL)) < 0)
    die("raw tcp connect");
  close(l);
  for (int i = 0; i < 2; i++)
    setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t k = write(fd, c, n);
    if (k <= 0)
      die("raw tcp write");
    c += k, n -= (size_t)k;
  }
}

static void read_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n > 0) {
    ssize_t k = read(fd, c, n);
    if (k <= 0)
      die("raw tcp read");
    c += k, n -= (size_t)k;
  }
}

/* A forked peer on fd[1]; the parent keeps fd[0]. */
static pid_t fork_peer(int fd[2], void (*serve)(int fd, size_t arg), size_t arg) {
  tcp_pair(fd);
  pid_t pid = fork();
  if (pid < 0)
    die("fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(fd[0]);
    serve(fd[1], arg);
    _exit(0);
  }
  close(fd[1]);
  return pid;
}

static void reap(pid_t pid, int fd) {
  close(fd);
  waitpid(pid, NULL, 0);
}

/* Bulk peer: 'W' takes `bytes` into its buffer and answers one byte; 'R' sends the buffer. */
static void bulk_peer(int fd, size_t bytes) {
  char *buf = malloc(bytes), cmd;
  if (buf == NULL)
    _exit(1);
  memset(buf, 0, bytes);
  while (read(fd, &cmd, 1) == 1) {
    if (cmd == 'W') {
      read_all(fd, buf, bytes);
      write_all(fd, &cmd, 1);
    } else {
      write_all(fd, buf, bytes);
    }
  }
}

static bulk raw_tcp_bulk(const uint32_t *src, uint32_t *dst, size_t bytes, int reps) {
  int fd[2];
  pid_t peer = fork_peer(fd, bulk_peer, bytes);
  double w[MAX_REPS], r[MAX_REPS];
  for (int i = -1; i < reps; i++) { /* -1: warm-up, and the data checked */
    char cmd = 'W';
    double t0 = now_s();
    write_all(fd[0], &cmd, 1);
    write_all(fd[0], src, bytes);
    read_all(fd[0], &cmd, 1);
    double t1 = now_s();
    cmd = 'R';
    write_all(fd[0], &cmd, 1);
    read_all(fd[0], dst, bytes);
    double t2 = now_s();
    if (i == -1 && memcmp(src, dst, bytes) != 0)
      die("raw tcp data came back wrong");
    if (i >= 0)
      w[i] = t1 - t0, r[i] = t2 - t1;
  }
  reap(peer, fd[0]);
  return (bulk){median(w, reps), median(r, reps)};
}

/* Pipeline peer: answers each whole request of RAW_REQ bytes with RAW_REP bytes, the answers
 * to what one read brought in one write (acceld batches its replies per loop turn). */
#define RAW_REQ 96 /* a fill's OP frame */
#define RAW_REP 32 /* its REPLY */

static void pipeline_peer(int fd, size_t unused) {
  static char in[1 << 16], out[(sizeof in / RAW_REQ + 1) * RAW_REP];
  size_t have = 0;
  for (;;) {
    ssize_t k = read(fd, in + have, sizeof in - have);
    if (k <= 0)
      return;
    have += (size_t)k;
    size_t n = have / RAW_REQ;
    memset(out, 1, n * RAW_REP);
    write_all(fd, out, n * RAW_REP);
    memmove(in, in + n * RAW_REQ, have - n * RAW_REQ);
    have -= n * RAW_REQ;
  }
}

typedef struct pipe_sender {
  int fd;
  long ops;
} pipe_sender;

static void *send_requests(void *arg) {
  pipe_sender *p = arg;
  char req[RAW_REQ] = {0};
  for (long i = 0; i < p->ops; i++)
    write_all(p->fd, req, sizeof req);
  return NULL;
}

/* Requests per second: one thread writes them one by one, this one reads the answers. */
static double raw_tcp_ops_per_s(int fd, long ops) {
  static char buf[1 << 16];
  pipe_sender ps = {fd, ops};
  pthread_t t;
  double t0 = now_s();
  if (pthread_create(&t, NULL, send_requests, &ps) != 0)
    die("pthread_create");
  for (size_t left = (size_t)ops * RAW_REP; left > 0;) {
    ssize_t k = read(fd, buf, left < sizeof buf ? left : sizeof buf);
    if (k <= 0)
      die("raw tcp pipeline");
    left -= (size_t)k;
  }
  pthread_join(t, NULL);
  return (double)ops / (now_s() - t0);
}

/* ---- 1. round trips ---- */

static double socketpair_us(int fd, int iters) {
  char buf[REQ_BYTES] = {0};
  double t0 = now_s();
  for (int i = 0; i < iters; i++)
    if (send(fd, buf, REQ_BYTES, 0) != REQ_BYTES ||
        recv(fd, buf, REP_BYTES, MSG_WAITALL) != REP_BYTES)
      die("socketpair echo");
  return (now_s() - t0) / iters * 1e6;
}

static double ping_us(int fd, int iters) {
  proto_out o;
  proto_control_req ping = {PROTO_CTL_PING, 0};
  proto_out_init(&o);
  if (proto_encode_control(&o, 1, &ping) != 0)
    die("encode ping");
  uint8_t *buf = NULL;
  size_t cap = 0;
  double t0 = now_s();
  for (int i = 0; i < iters; i++)
    if (proto_local_send(fd, o.data, o.len, -1) != 0 ||
        proto_local_recv_frame(fd, &buf, &cap, 1 << 20, 10000) != REP_BYTES)
      die("daemon ping");
  double us = (now_s() - t0) / iters * 1e6;
  free(buf);
  proto_out_free(&o);
  return us;
}

static double op_us(accel_ctx *ctx, accel_buffer b, int iters) {
  double t0 = now_s();
  for (int i = 0; i < iters; i++) {
    accel_future *f;
    OK(accel_fill_u32(ctx, 0, b, (uint32_t)i, &f));
    OK(accel_future_wait(f, 10000));
    accel_future_release(f);
  }
  return (now_s() - t0) / iters * 1e6;
}

static void bench_round_trips(const bench_opts *o, accel_ctx *remote, accel_ctx *local) {
  int pair = start_echo(), ping = proto_local_connect(proto_local_path(ipc_url));
  if (ping < 0)
    die("connect");
  accel_buffer rb, lb;
  OK(accel_buffer_create(remote, ACCEL_U32, 1, &rb));
  OK(accel_buffer_create(local, ACCEL_U32, 1, &lb));
  double sp[MAX_REPS], pg[MAX_REPS], op[MAX_REPS], em[MAX_REPS];
  op_us(remote, rb, o->iters / 4); /* warm-up */
  op_us(local, lb, o->iters / 4);
  for (int r = 0; r < o->reps; r++) {
    sp[r] = socketpair_us(pair, o->iters);
    pg[r] = ping_us(ping, o->iters);
    op[r] = op_us(remote, rb, o->iters);
    em[r] = op_us(local, lb, o->iters);
  }
  double msp = median(sp, o->reps), mpg = median(pg, o->reps), mop = median(op, o->reps),
         mem = median(em, o->reps);
  printf("\n== 1. round trip, one request in flight (median of %d x %d) ==\n", o->reps, o->iters);
  printf("%-34s %9.1f us\n", "socketpair echo (floor)", msp);
  printf("%-34s %9.1f us   %.2fx socketpair\n", "daemon PING (ipc://)", mpg, mpg / msp);
  printf("%-34s %9.1f us   %.2fx socketpair   (target <= 2)\n", "daemon 1-element fill op", mop,
         mop / msp);
  printf("%-34s %9.1f us   %.2fx socketpair\n", "embedded 1-element fill op", mem, mem / msp);
  OK(accel_buffer_destroy(remote, rb));
  OK(accel_buffer_destroy(local, lb));
  close(ping);
  close(pair);
}

/* ---- 2. pipelined tiny ops ---- */

/* As a client that issues freely does: a full queue (ACCEL_EBUSY at the call) is retried. */
static double fills_per_s(accel_ctx *ctx, accel_buffer b, long ops) {
  double t0 = now_s();
  for (long i = 0; i < ops; i++) {
    int rc;
    while ((rc = accel_fill_u32(ctx, 0, b, (uint32_t)i, NULL)) == ACCEL_EBUSY)
      sched_yield();
    OK(rc);
  }
  OK(accel_finish(ctx, -1));
  return (double)ops / (now_s() - t0);
}

enum { P_EMB, P_IPC, P_TCP, P_TLS, P_N };

static void bench_pipelined(const bench_opts *o, accel_ctx *ctxs[P_N]) {
  accel_buffer b[P_N];
  double rate[P_N][MAX_REPS], raw[MAX_REPS];
  int fd[2];
  pid_t peer = fork_peer(fd, pipeline_peer, 0);
  raw_tcp_ops_per_s(fd[0], o->ops / 10);
  for (int k = 0; k < P_N; k++) {
    if (ctxs[k] == NULL)
      continue;
    OK(accel_buffer_create(ctxs[k], ACCEL_U32, 1, &b[k]));
    fills_per_s(ctxs[k], b[k], o->ops / 10);
  }
  for (int r = 0; r < o->reps; r++) {
    raw[r] = raw_tcp_ops_per_s(fd[0], o->ops);
    for (int k = 0; k < P_N; k++)
      if (ctxs[k])
        rate[k][r] = fills_per_s(ctxs[k], b[k], o->ops);
  }
  reap(peer, fd[0]);
  double m[P_N], mraw = median(raw, o->reps);
  for (int k = 0; k < P_N; k++) {
    if (ctxs[k] == NULL)
      continue;
    m[k] = median(rate[k], o->reps);
    OK(accel_buffer_destroy(ctxs[k], b[k]));
  }
  printf("\n== 2. pipelined 1-element fills, %ld per repetition, then accel_finish ==\n", o->ops);
  printf("%-34s %9.1f kops/s\n", "raw TCP request/reply (floor)", mraw / 1e3);
  printf("%-34s %9.1f kops/s\n", "embedded", m[P_EMB] / 1e3);
  printf("%-34s %9.1f kops/s   %.2fx embedded   (target >= 0.5)\n", "through acceld, ipc://",
         m[P_IPC] / 1e3, m[P_IPC] / m[P_EMB]);
  printf("%-34s %9.1f kops/s   %.2fx ipc://   (target >= 0.5)   %.2fx raw TCP\n",
         "through acceld, tcp://", m[P_TCP] / 1e3, m[P_TCP] / m[P_IPC], m[P_TCP] / mraw);
  if (ctxs[P_TLS])
    printf("%-34s %9.1f kops/s   %.2fx ipc://   %.2fx tcp://\n", "through acceld, tls+tcp://",
           m[P_TLS] / 1e3, m[P_TLS] / m[P_IPC], m[P_TLS] / m[P_TCP]);
  else
    printf("%-34s not measured (no certificates: openssl CLI?)\n", "through acceld, tls+tcp://");
}

/* ---- 3. bulk data ---- */

static void fill_pattern(uint32_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint32_t)(i * 2654435761u) | 1u;
}

static bulk transfer(accel_ctx *ctx, uint32_t *src, uint32_t *dst, size_t n, int reps) {
  accel_buffer b;
  OK(accel_buffer_create(ctx, ACCEL_U32, n, &b));
  double w[MAX_REPS], r[MAX_REPS];
  for (int i = -1; i < reps; i++) { /* -1: warm-up (first touch of every page) */
    double t0 = now_s();
    OK(accel_write(ctx, b, 0, src, n, NULL));
    OK(accel_finish(ctx, -1));
    double t1 = now_s();
    OK(accel_read(ctx, b, 0, dst, n, NULL));
    OK(accel_finish(ctx, -1));
    double t2 = now_s();
    if (i == -1 && memcmp(src, dst, n * 4) != 0)
      die("bulk data came back wrong");
    if (i >= 0)
      w[i] = t1 - t0, r[i] = t2 - t1;
  }
  OK(accel_buffer_destroy(ctx, b));
  return (bulk){median(w, reps), median(r, reps)};
}

static double memcpy_s(uint32_t *dst, const uint32_t *src, size_t bytes, int reps) {
  double t[MAX_REPS];
  memcpy(dst, src, bytes);
  for (int i = 0; i < reps; i++) {
    double t0 = now_s();
    memcpy(dst, src, bytes);
    t[i] = now_s() - t0;
  }
  return median(t, reps);
}

static void row(const char *what, double bytes, bulk b, bulk emb, double mc) {
  printf("%-40s write %6.2f GB/s (%.2fx emb, %.2fx memcpy)  read %6.2f GB/s (%.2fx emb, "
         "%.2fx memcpy)\n",
         what, bytes / b.write_s / 1e9, emb.write_s / b.write_s, mc / b.write_s,
         bytes / b.read_s / 1e9, emb.read_s / b.read_s, mc / b.read_s);
}

static void tcp_row(const char *what, double bytes, bulk b, bulk raw) {
  printf("%-40s write %6.2f GB/s (%.2fx raw TCP)  read %6.2f GB/s (%.2fx raw TCP)%s\n", what,
         bytes / b.write_s / 1e9, raw.write_s / b.write_s, bytes / b.read_s / 1e9,
         raw.read_s / b.read_s, raw.write_s == b.write_s ? "" : "   (target >= 0.7)");
}

#if BENCH_MBEDCRYPTO
/* Seconds for one core to seal `bytes` in TLS's largest records (16 KiB) with mbedTLS's
 * ChaCha20-Poly1305, the suite nng's TLS and mbedTLS 2.28 agree on by default (perf shows
 * mbedtls_chacha20_update in acceld): each side of a tls+tcp:// transfer does this (or its
 * opening) to every byte, so no transport of them moves faster. Median of reps. */
static double cipher_s(const uint32_t *src, uint32_t *dst, size_t bytes, int reps) {
  enum { RECORD = 16384 };
  unsigned char key[32] = {1}, nonce[12] = {2}, tag[16];
  mbedtls_chachapoly_context c;
  mbedtls_chachapoly_init(&c);
  if (mbedtls_chachapoly_setkey(&c, key) != 0)
    die("mbedtls_chachapoly_setkey");
  const unsigned char *in = (const unsigned char *)src;
  unsigned char *out = (unsigned char *)dst;
  double t[MAX_REPS];
  for (int i = 0; i < reps; i++) {
    double t0 = now_s();
    for (size_t at = 0; at < bytes; at += RECORD) {
      size_t n = bytes - at < RECORD ? bytes - at : RECORD;
      nonce[0] = (unsigned char)(at / RECORD); /* a fresh nonce per record, as TLS's */
      if (mbedtls_chachapoly_encrypt_and_tag(&c, n, nonce, NULL, 0, in + at, out + at, tag) != 0)
        die("mbedtls_chachapoly_encrypt_and_tag");
    }
    t[i] = now_s() - t0;
  }
  mbedtls_chachapoly_free(&c);
  return median(t, reps);
}

/* The tls row against the cipher's floor too. */
static void cipher_rows(double bytes, double cipher, bulk tls) {
  printf("%-40s %6.2f GB/s (the floor of tls+tcp://)\n", "ChaCha20-Poly1305, one core (mbedTLS)",
         bytes / cipher / 1e9);
  if (tls.write_s > 0)
    printf("%-40s write %.2fx, read %.2fx the cipher's floor\n", "acceld tls+tcp://",
           cipher / tls.write_s, cipher / tls.read_s);
}
#endif

static void bench_bulk(const bench_opts *o, accel_ctx *ctxs[P_N]) {
  size_t bytes = o->mib << 20, n = bytes / 4;
  int reps = o->reps < 3 ? o->reps : 3;
  accel_ctx *ipc = ctxs[P_IPC];
  uint32_t *src = malloc(bytes), *dst = malloc(bytes), *hsrc, *hdst;
  if (src == NULL || dst == NULL)
    die("out of memory");
  OK(accel_host_alloc(ipc, bytes, (void **)&hsrc));
  OK(accel_host_alloc(ipc, bytes, (void **)&hdst));
  fill_pattern(src, n);
  fill_pattern(hsrc, n);
  double mc = memcpy_s(dst, src, bytes, reps);
  bulk raw = raw_tcp_bulk(src, dst, bytes, reps);
  bulk emb = transfer(ctxs[P_EMB], src, dst, n, reps);
  bulk shared = transfer(ipc, hsrc, hdst, n, reps);
  bulk staged = transfer(ipc, src, dst, n, reps);
  bulk chunked = transfer(ctxs[P_TCP], src, dst, n, reps);
  bulk tls = ctxs[P_TLS] ? transfer(ctxs[P_TLS], src, dst, n, reps) : (bulk){0, 0};
  printf("\n== 3. %zu MiB written and read back (median of %d) ==\n", o->mib, reps);
  printf("%-40s %6.2f GB/s\n", "memcpy in this process (floor)", (double)bytes / mc / 1e9);
  row("embedded", (double)bytes, emb, emb, mc);
  row("acceld ipc://, accel_host_alloc memory", (double)bytes, shared, emb, mc);
  row("acceld ipc://, malloc memory (staging)", (double)bytes, staged, emb, mc);
  tcp_row("raw TCP socket, write/read (floor)", (double)bytes, raw, raw);
  tcp_row("acceld tcp://, malloc memory (chunks)", (double)bytes, chunked, raw);
  if (ctxs[P_TLS])
    tcp_row("acceld tls+tcp://, malloc memory", (double)bytes, tls, raw);
#if BENCH_MBEDCRYPTO
  cipher_rows((double)bytes, cipher_s(src, dst, bytes, reps), tls);
#endif
  OK(accel_host_free(ipc, hsrc));
  OK(accel_host_free(ipc, hdst));
  free(src);
  free(dst);
}

/* ---- 4. sgemm ---- */

static double sgemm_s(accel_ctx *ctx, int n, int reps) {
  accel_buffer a, b, c;
  OK(accel_buffer_create(ctx, ACCEL_F32, (size_t)n * n, &a));
  OK(accel_buffer_create(ctx, ACCEL_F32, (size_t)n * n, &b));
  OK(accel_buffer_create(ctx, ACCEL_F32, (size_t)n * n, &c));
  OK(accel_fill_f32(ctx, 0, a, 0.5f, NULL));
  OK(accel_fill_f32(ctx, 0, b, 0.25f, NULL));
  double t[MAX_REPS];
  for (int i = -1; i < reps; i++) {
    double t0 = now_s();
    OK(accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n,
                   NULL));
    OK(accel_finish(ctx, -1));
    if (i >= 0)
      t[i] = now_s() - t0;
  }
  OK(accel_buffer_destroy(ctx, a));
  OK(accel_buffer_destroy(ctx, b));
  OK(accel_buffer_destroy(ctx, c));
  return median(t, reps);
}

static void bench_sgemm(const bench_opts *o, accel_ctx *ipc, accel_ctx *local) {
  int n = 1024;
  double d = sgemm_s(ipc, n, o->reps), e = sgemm_s(local, n, o->reps);
  printf("\n== 4. sgemm n=%d on the CPU device (median of %d) ==\n", n, o->reps);
  printf("%-34s %9.2f ms\n%-34s %9.2f ms   %.2fx embedded speed\n", "embedded", e * 1e3,
         "through acceld", d * 1e3, e / d);
}

/* ---- main ---- */

static int parse(int argc, char **argv, bench_opts *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quick")) {
      o->reps = 5, o->iters = 1000, o->ops = 20000, o->mib = 256;
    } else if (v && !strcmp(a, "--reps")) {
      o->reps = atoi(v), i++;
    } else if (v && !strcmp(a, "--iters")) {
      o->iters = atoi(v), i++;
    } else if (v && !strcmp(a, "--ops")) {
      o->ops = atol(v), i++;
    } else if (v && !strcmp(a, "--mib")) {
      o->mib = strtoul(v, NULL, 10), i++;
    } else if (v && !strcmp(a, "--acceld")) {
      o->acceld = v, i++;
    } else {
      return -1;
    }
  }
  o->reps = o->reps < 1 ? 1 : o->reps > MAX_REPS ? MAX_REPS : o->reps;
  return o->acceld && o->iters > 0 && o->ops > 0 && o->mib > 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  bench_opts o = {.reps = 9, .iters = 4000, .ops = 100000, .mib = 1024, .acceld = getenv("ACCELD")};
  if (parse(argc, argv, &o) != 0) {
    fprintf(stderr, "usage: bench-daemon [--quick] [--reps N] [--iters N] [--ops N] "
                    "[--mib N] [--acceld PATH]   (or set ACCELD)\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  start_daemon(&o);
  accel_ctx *ctxs[P_N] = {NULL};
  OK(accel_open(&ctxs[P_IPC], ipc_url));
  OK(accel_open(&ctxs[P_TCP], tcp_url));
  OK(accel_open(&ctxs[P_EMB], NULL));
  if (have_tls)
    OK(accel_open(&ctxs[P_TLS], tls_url));
  printf("# bench-daemon: %d reps; acceld at %s, %s and %s; %ld CPU(s)\n", o.reps, ipc_url, tcp_url,
         have_tls ? tls_url : "(no tls+tcp://)", sysconf(_SC_NPROCESSORS_ONLN));
  bench_round_trips(&o, ctxs[P_IPC], ctxs[P_EMB]);
  bench_pipelined(&o, ctxs);
  bench_bulk(&o, ctxs);
  bench_sgemm(&o, ctxs[P_IPC], ctxs[P_EMB]);
  for (int k = 0; k < P_N; k++)
    if (ctxs[k])
      accel_close(ctxs[k]);
  stop_all();
  return 0;
}
