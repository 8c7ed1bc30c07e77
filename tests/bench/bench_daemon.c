/* accel — benchmarks of acceld, the daemon (docs/PERFORMANCE.md, "Daemon").
 *
 * Ratios against peers measured in the same run, repetitions alternating between them (the
 * machines are shared and noisy); tables report medians over repetitions. The daemon is the
 * real acceld, started here on a private ipc:// socket; every peer server is a process of its
 * own too, as the daemon is.
 *
 *   1. round trip, one request in flight, over ipc:// (40 bytes there, 32 back):
 *        daemon-ping  a CONTROL PING answered by acceld's server actor
 *        daemon-op    a fill of a 1-element buffer: session, device, kernel actor, CPU queue
 *        nng-echo     a raw req0 client and a raw rep0 echo server (blocking recv/send)
 *        socketpair   write/read to an echo process over a Unix socketpair
 *      Target: daemon-ping / nng-echo <= 1.2.
 *   2. pipelined tiny ops (fills of 64-element buffers), 1024 in flight per client, from 1
 *      and from 4 clients (each its own socket and session; reply batching and the ack window
 *      on), one request frame per message and 64 per message; beside them the same ops in
 *      embedded mode (accel_fill_u32, fire-and-forget, then accel_finish).
 *   3. sgemm n = 1024 through the daemon (libaccel's remote transport) versus embedded mode.
 *
 * Usage: bench-daemon [--quick] [--reps N] [--iters N] [--ops N] [--acceld PATH]
 *   --quick      fewer repetitions (well under a minute)
 *   --reps N     measured repetitions (default 9, quick 5)
 *   --iters N    round trips per repetition and variant (default 4000, quick 1000)
 *   --ops N      pipelined ops per client per repetition (default 40000, quick 10000)
 *   --acceld P   the daemon (default: $ACCELD, which meson sets)
 * Exit status 0 unless a benchmark itself broke (a wrong or missing reply, a failed call). */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#include "proto/wire.h"

/* A PING frame is 40 bytes (header + command, arg), its reply 32 (header + status): every
 * peer moves the same bytes. */
#define REQ_BYTES 40
#define REP_BYTES 32

typedef struct bench_opts {
  int reps, iters;
  long ops;
  const char *acceld;
} bench_opts;

static char dir[64], daemon_url[128], echo_url[128];
static pid_t children[4];
static int nchildren;

static void die(const char *what) {
  fprintf(stderr, "bench-daemon: %s\n", what);
  for (int i = 0; i < nchildren; i++)
    kill(children[i], SIGKILL);
  exit(1);
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {0, (long)ms * 1000000L};
  nanosleep(&ts, NULL);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- peer processes (started before this process touches nng: nng does not fork) ---- */

static void spawn(char *const argv[]) {
  pid_t pid = fork();
  if (pid < 0)
    die("fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execv(argv[0], argv);
    _exit(127);
  }
  children[nchildren++] = pid;
}

/* --echo-server URL: a raw rep0 socket that sends every request back. */
static int echo_server(const char *url) {
  nng_socket s;
  if (nng_rep0_open_raw(&s) != 0 || nng_listen(s, url, NULL, 0) != 0)
    return 1;
  for (;;) {
    nng_msg *m;
    if (nng_recvmsg(s, &m, 0) != 0)
      return 1;
    nng_msg_chop(m, nng_msg_len(m) - REP_BYTES);
    if (nng_sendmsg(s, m, 0) != 0)
      return 1;
  }
}

static void socketpair_echo(int fd) {
  char buf[REQ_BYTES];
  for (;;) {
    size_t got = 0;
    while (got < REQ_BYTES) {
      ssize_t n = read(fd, buf + got, REQ_BYTES - got);
      if (n <= 0)
        _exit(0);
      got += (size_t)n;
    }
    if (write(fd, buf, REP_BYTES) != REP_BYTES)
      _exit(0);
  }
}

static int start_socketpair(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
    die("socketpair");
  pid_t pid = fork();
  if (pid < 0)
    die("fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(sv[0]);
    socketpair_echo(sv[1]);
  }
  children[nchildren++] = pid;
  close(sv[1]);
  return sv[0];
}

static void start_peers(const bench_opts *o, const char *self) {
  snprintf(dir, sizeof dir, "/tmp/accel-bench-daemon-XXXXXX");
  if (mkdtemp(dir) == NULL)
    die("mkdtemp");
  snprintf(daemon_url, sizeof daemon_url, "ipc://%s/acceld.sock", dir);
  snprintf(echo_url, sizeof echo_url, "ipc://%s/echo.sock", dir);
  char conf[128];
  snprintf(conf, sizeof conf, "%s/acceld.conf", dir);
  FILE *f = fopen(conf, "w");
  if (f == NULL)
    die("config");
  fputs("[daemon]\nlog_level = warn\n", f);
  fclose(f);
  char *d_argv[] = {(char *)o->acceld, "--foreground", "--config", conf, "--listen",
                    daemon_url, NULL};
  char *e_argv[] = {(char *)self, "--echo-server", echo_url, NULL};
  spawn(d_argv);
  spawn(e_argv);
}

static void stop_peers(void) {
  for (int i = 0; i < nchildren; i++) {
    kill(children[i], SIGTERM);
    waitpid(children[i], NULL, 0);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "bench-daemon: could not remove %s\n", dir);
}

/* ---- a raw req0 client ---- */

static nng_socket dial(const char *url) {
  nng_socket s;
  if (nng_req0_open_raw(&s) != 0)
    die("socket");
  nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 0);
  nng_socket_set_int(s, NNG_OPT_RECVBUF, 8192);
  nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 20000);
  for (int i = 0; nng_dial(s, url, NULL, 0) != 0; i++) { /* the peer may still be starting */
    if (i == 500)
      die("cannot reach a peer");
    sleep_ms(10);
  }
  return s;
}

static void send_bytes(nng_socket s, const void *p, size_t n) {
  nng_msg *m;
  if (nng_msg_alloc(&m, 0) != 0 || nng_msg_header_append_u32(m, 0x80000001u) != 0 ||
      nng_msg_append(m, p, n) != 0 || nng_sendmsg(s, m, 0) != 0)
    die("send");
}

static nng_msg *recv_msg(nng_socket s) {
  nng_msg *m;
  if (nng_recvmsg(s, &m, 0) != 0)
    die("no reply");
  return m;
}

/* Sends a frame and checks that the reply is a REPLY with status 0. */
static void call_ok(nng_socket s, const proto_out *o) {
  send_bytes(s, o->data, o->len);
  nng_msg *m = recv_msg(s);
  proto_header h;
  int32_t status = -1;
  proto_bytes data;
  const uint8_t *p = nng_msg_body(m);
  if (proto_decode_header(p, nng_msg_len(m), UINT32_MAX, &h) == 0 && h.type == PROTO_REPLY)
    proto_decode_reply(p + PROTO_HEADER_SIZE, h.body_len, &status, &data);
  else if (h.type == PROTO_WELCOME)
    status = 0;
  nng_msg_free(m);
  if (status != 0)
    die("a call failed");
}

static void hello(nng_socket s, uint32_t caps) {
  proto_out o;
  proto_hello h = {.version = PROTO_VERSION, .capabilities = caps, .name = "bench-daemon"};
  proto_out_init(&o);
  proto_encode_hello(&o, 1, &h);
  call_ok(s, &o);
  proto_out_free(&o);
}

static void encode_fill(proto_out *o, uint64_t id, uint64_t handle) {
  dev_op op = {.h = {.kind = DEV_OP_FILL, .device = 0}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle};
  op.u.fill.value = 7;
  proto_out_init(o);
  if (proto_encode_op(o, id, &op, (proto_bytes){NULL, 0}) != 0)
    die("encode");
}

static void create(nng_socket s, uint64_t handle, uint64_t count) {
  dev_op op = {.h = {.kind = DEV_OP_BUFFER_CREATE, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle, .count = count};
  op.u.create.dtype = ACCEL_U32;
  proto_out o;
  proto_out_init(&o);
  proto_encode_op(&o, 2, &op, (proto_bytes){NULL, 0});
  call_ok(s, &o);
  proto_out_free(&o);
}

/* ---- 1. round trips ---- */

typedef struct rt_ctx {
  nng_socket daemon, echo;
  int pair_fd;
  proto_out ping, fill;
} rt_ctx;

/* Microseconds per round trip of `frame` over s, `iters` times. */
static double nng_round_trips(nng_socket s, const proto_out *frame, int iters) {
  double t0 = now_us();
  for (int i = 0; i < iters; i++) {
    send_bytes(s, frame->data, frame->len);
    nng_msg *m = recv_msg(s);
    if (nng_msg_len(m) != REP_BYTES)
      die("unexpected reply size");
    nng_msg_free(m);
  }
  return (now_us() - t0) / iters;
}

static double pair_round_trips(int fd, int iters) {
  char buf[REQ_BYTES] = {1};
  double t0 = now_us();
  for (int i = 0; i < iters; i++) {
    if (write(fd, buf, REQ_BYTES) != REQ_BYTES)
      die("socketpair write");
    for (size_t got = 0; got < REP_BYTES;) {
      ssize_t n = read(fd, buf + got, REP_BYTES - got);
      if (n <= 0)
        die("socketpair read");
      got += (size_t)n;
    }
  }
  return (now_us() - t0) / iters;
}

static void rt_setup(rt_ctx *x) {
  x->daemon = dial(daemon_url);
  x->echo = dial(echo_url);
  hello(x->daemon, 0);
  create(x->daemon, (uint64_t)1 << 32 | 1, 1);
  proto_control_req ping = {PROTO_CTL_PING, 0};
  proto_out_init(&x->ping);
  proto_encode_control(&x->ping, 3, &ping);
  encode_fill(&x->fill, 4, (uint64_t)1 << 32 | 1);
}

static void bench_round_trips(const bench_opts *o, rt_ctx *x) {
  enum { PING, OP, ECHO, PAIR, N };
  static const char *const names[N] = {"daemon-ping", "daemon-op", "nng-echo", "socketpair"};
  double *v[N];
  for (int k = 0; k < N; k++)
    v[k] = calloc((size_t)o->reps, sizeof(double));
  for (int r = -1; r < o->reps; r++) { /* r = -1: warm-up */
    double ping = nng_round_trips(x->daemon, &x->ping, o->iters);
    double op = nng_round_trips(x->daemon, &x->fill, o->iters);
    double echo = nng_round_trips(x->echo, &x->ping, o->iters);
    double pair = pair_round_trips(x->pair_fd, o->iters);
    if (r < 0)
      continue;
    v[PING][r] = ping, v[OP][r] = op, v[ECHO][r] = echo, v[PAIR][r] = pair;
  }
  double med[N];
  for (int k = 0; k < N; k++)
    med[k] = median(v[k], o->reps);
  printf("\n1. round trip over ipc:// (%d reps x %d round trips, median of rep means)\n",
         o->reps, o->iters);
  printf("  %-12s %10s %12s %14s\n", "variant", "us/trip", "/ nng-echo", "/ socketpair");
  for (int k = 0; k < N; k++)
    printf("  %-12s %10.1f %12.2f %14.2f\n", names[k], med[k], med[k] / med[ECHO],
           med[k] / med[PAIR]);
  printf("  target: daemon-ping / nng-echo <= 1.2: %s\n",
         med[PING] / med[ECHO] <= 1.2 ? "met" : "MISSED");
  for (int k = 0; k < N; k++)
    free(v[k]);
}

/* ---- 2. pipelined throughput ---- */

typedef struct pipe_client {
  nng_socket s;
  long ops, received, failed;
  uint32_t messages;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  long window;
  int batch; /* frames per message */
} pipe_client;

static void send_ack(nng_socket s, uint32_t received) {
  proto_out o;
  proto_control_req req = {PROTO_CTL_ACK, received};
  proto_out_init(&o);
  proto_encode_control(&o, 5, &req);
  send_bytes(s, o.data, o.len);
  proto_out_free(&o);
}

static long count_frames(const uint8_t *p, size_t len, long *failed) {
  long n = 0;
  for (size_t f; (f = proto_next_frame(p, len)) > 0; p += f, len -= f, n++) {
    int32_t status = -1;
    proto_bytes data;
    proto_decode_reply(p + PROTO_HEADER_SIZE, f - PROTO_HEADER_SIZE, &status, &data);
    *failed += status != 0;
  }
  return n;
}

static void *pipe_receiver(void *arg) {
  pipe_client *c = arg;
  while (c->received < c->ops) {
    nng_msg *m = recv_msg(c->s);
    long n = count_frames(nng_msg_body(m), nng_msg_len(m), &c->failed);
    nng_msg_free(m);
    if (++c->messages % PROTO_ACK_EVERY == 0)
      send_ack(c->s, c->messages);
    pthread_mutex_lock(&c->mu);
    c->received += n;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
  }
  return NULL;
}

/* Sends the ops `batch` frames per message (PROTO_CAP_BATCH), never more than the window
 * ahead of the replies. */
static void *pipe_sender(void *arg) {
  pipe_client *c = arg;
  pthread_t rx;
  proto_out f;
  encode_fill(&f, 9, (uint64_t)1 << 32 | 1);
  uint8_t *batch = malloc(f.len * (size_t)c->batch);
  for (int i = 0; i < c->batch; i++)
    memcpy(batch + f.len * (size_t)i, f.data, f.len);
  pthread_create(&rx, NULL, pipe_receiver, c);
  for (long i = 0; i < c->ops; i += c->batch) {
    long n = c->ops - i < c->batch ? c->ops - i : c->batch;
    pthread_mutex_lock(&c->mu);
    while (i + n - c->received > c->window)
      pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    send_bytes(c->s, batch, f.len * (size_t)n);
  }
  pthread_join(rx, NULL);
  free(batch);
  proto_out_free(&f);
  return NULL;
}

/* Ops per second with `n` clients at once, `batch` ops per message. */
static double pipelined(pipe_client *cl, int n, long ops, int batch) {
  pthread_t t[4];
  for (int i = 0; i < n; i++) {
    cl[i].batch = batch;
    cl[i].ops = ops; /* `messages` carries on: the daemon counts per connection */
    cl[i].received = cl[i].failed = 0;
  }
  double t0 = now_us();
  for (int i = 0; i < n; i++)
    pthread_create(&t[i], NULL, pipe_sender, &cl[i]);
  for (int i = 0; i < n; i++)
    pthread_join(t[i], NULL);
  double secs = (now_us() - t0) / 1e6;
  for (int i = 0; i < n; i++)
    if (cl[i].failed)
      die("a pipelined op failed");
  return (double)ops * n / secs;
}

/* The same fills in embedded mode: fire-and-forget, then accel_finish (a full session
 * mailbox, ACCEL_EBUSY, is waited out the same way). */
static double embedded_fills(accel_ctx *ctx, accel_buffer b, long ops) {
  double t0 = now_us();
  for (long i = 0; i < ops; i++) {
    int rc = accel_fill_u32(ctx, 0, b, 7, NULL);
    if (rc == ACCEL_EBUSY && accel_finish(ctx, -1) == 0)
      rc = accel_fill_u32(ctx, 0, b, 7, NULL);
    if (rc != 0)
      die("accel_fill_u32");
  }
  if (accel_finish(ctx, -1) != 0)
    die("accel_finish");
  return (double)ops / ((now_us() - t0) / 1e6);
}

static void bench_pipelined(const bench_opts *o) {
  pipe_client cl[4];
  for (int i = 0; i < 4; i++) {
    memset(&cl[i], 0, sizeof cl[i]);
    cl[i].s = dial(daemon_url);
    cl[i].window = 1024;
    pthread_mutex_init(&cl[i].mu, NULL);
    pthread_cond_init(&cl[i].cv, NULL);
    hello(cl[i].s, PROTO_CAP_BATCH | PROTO_CAP_ACK);
    create(cl[i].s, (uint64_t)1 << 32 | 1, 64);
  }
  accel_ctx *ctx;
  accel_buffer b;
  if (accel_open(&ctx, "embedded:") != 0 || accel_buffer_create(ctx, ACCEL_U32, 64, &b) != 0)
    die("embedded context");
  enum { ONE, FOUR, ONE_B, FOUR_B, EMB, N };
  static const char *const names[N] = {"daemon, 1 client", "daemon, 4 clients",
                                       "daemon, 1 client, x64", "daemon, 4 clients, x64",
                                       "embedded, 1 thread"};
  double *v[N];
  for (int k = 0; k < N; k++)
    v[k] = calloc((size_t)o->reps, sizeof(double));
  for (int r = -1; r < o->reps; r++) {
    double x[N] = {pipelined(cl, 1, o->ops, 1), pipelined(cl, 4, o->ops / 4, 1),
                   pipelined(cl, 1, o->ops, 64), pipelined(cl, 4, o->ops / 4, 64),
                   embedded_fills(ctx, b, o->ops)};
    for (int k = 0; r >= 0 && k < N; k++)
      v[k][r] = x[k];
  }
  printf("\n2. pipelined tiny ops (fill, 64 elements), 1024 in flight per client, %ld ops\n"
         "   (x64: 64 request frames per message; replies are batched in every case)\n",
         o->ops);
  double med[N];
  for (int k = 0; k < N; k++)
    med[k] = median(v[k], o->reps);
  printf("  %-24s %12s %12s\n", "", "kops/s", "/ embedded");
  for (int k = 0; k < N; k++)
    printf("  %-24s %12.1f %12.2f\n", names[k], med[k] / 1e3, med[k] / med[EMB]);
  for (int k = 0; k < N; k++)
    free(v[k]);
  accel_close(ctx);
  for (int i = 0; i < 4; i++)
    nng_close(cl[i].s);
}

/* ---- 3. sgemm ---- */

/* GFLOP/s of k sgemm of n x n through ctx (buffers written once). */
static double sgemm_rate(accel_ctx *ctx, accel_buffer a, accel_buffer b, accel_buffer c, int n,
                         int k) {
  double t0 = now_us();
  for (int i = 0; i < k; i++)
    if (accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, (size_t)n, (size_t)n, (size_t)n,
                    1.0f, a, (size_t)n, b, (size_t)n, 0.0f, c, (size_t)n, NULL) != 0)
      die("accel_sgemm");
  if (accel_finish(ctx, -1) != 0)
    die("accel_finish (sgemm)");
  return 2.0 * n * n * (double)n * k / ((now_us() - t0) * 1e3);
}

static void sgemm_setup(accel_ctx *ctx, accel_buffer bufs[3], const float *data, int n) {
  for (int i = 0; i < 3; i++)
    if (accel_buffer_create(ctx, ACCEL_F32, (size_t)n * n, &bufs[i]) != 0 ||
        accel_write(ctx, bufs[i], 0, data, (size_t)n * n, NULL) != 0)
      die("sgemm buffers");
  if (accel_finish(ctx, -1) != 0)
    die("sgemm setup");
}

static void bench_sgemm(const bench_opts *o) {
  enum { n = 1024 };
  int k = o->reps > 5 ? 8 : 4;
  float *data = malloc(sizeof(float) * n * n);
  for (size_t i = 0; i < (size_t)n * n; i++)
    data[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  accel_ctx *emb, *rem;
  accel_buffer be[3], br[3];
  if (accel_open(&emb, "embedded:") != 0 || accel_open(&rem, daemon_url) != 0)
    die("accel_open (sgemm)");
  sgemm_setup(emb, be, data, n);
  sgemm_setup(rem, br, data, n);
  double *ve = calloc((size_t)o->reps, sizeof(double));
  double *vr = calloc((size_t)o->reps, sizeof(double));
  for (int r = -1; r < o->reps; r++) {
    double e = sgemm_rate(emb, be[0], be[1], be[2], n, k);
    double d = sgemm_rate(rem, br[0], br[1], br[2], n, k);
    if (r >= 0)
      ve[r] = e, vr[r] = d;
  }
  double e = median(ve, o->reps), d = median(vr, o->reps);
  printf("\n3. sgemm n = %d (%d per rep, then accel_finish)\n", n, k);
  printf("  embedded %8.1f GFLOP/s\n  daemon   %8.1f GFLOP/s   daemon / embedded = %.3f\n", e,
         d, d / e);
  accel_close(rem);
  accel_close(emb);
  free(ve), free(vr), free(data);
}

/* ---- main ---- */

static int parse(int argc, char **argv, bench_opts *o) {
  bool quick = getenv("ACCEL_BENCH_QUICK") != NULL;
  for (int i = 1; i < argc; i++)
    quick |= strcmp(argv[i], "--quick") == 0;
  *o = (bench_opts){.reps = quick ? 5 : 9, .iters = quick ? 1000 : 4000,
                    .ops = quick ? 10000 : 40000, .acceld = getenv("ACCELD")};
  for (int i = 1; i < argc; i++) {
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--quick"))
      continue;
    if (next && !strcmp(argv[i], "--reps"))
      o->reps = atoi(argv[++i]);
    else if (next && !strcmp(argv[i], "--iters"))
      o->iters = atoi(argv[++i]);
    else if (next && !strcmp(argv[i], "--ops"))
      o->ops = atol(argv[++i]);
    else if (next && !strcmp(argv[i], "--acceld"))
      o->acceld = argv[++i];
    else
      return 2;
  }
  return o->reps > 0 && o->iters > 0 && o->ops >= 4 && o->acceld ? 0 : 2;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--echo-server") == 0)
    return echo_server(argv[2]);
  bench_opts o;
  if (parse(argc, argv, &o) != 0) {
    fprintf(stderr, "usage: bench-daemon [--quick] [--reps N] [--iters N] [--ops N] "
                    "[--acceld PATH]   (or set ACCELD)\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  rt_ctx x;
  x.pair_fd = start_socketpair();
  start_peers(&o, "/proc/self/exe");
  printf("bench-daemon: acceld %s, %ld CPU(s)\n", o.acceld, sysconf(_SC_NPROCESSORS_ONLN));
  rt_setup(&x);
  bench_round_trips(&o, &x);
  nng_close(x.daemon);
  nng_close(x.echo);
  bench_pipelined(&o);
  bench_sgemm(&o);
  stop_peers();
  return 0;
}
