/* The local transport under hostile and careless peers: raw connects, half-written headers,
 * silent clients, connect/close storms, clients that die with replies in flight, a second
 * daemon on the same socket, peers outside the allowlist, a client that never reads. After
 * each, a well-behaved client is served, what the peer held is back to its baseline, the
 * event is in the log, and SIGTERM ends the daemon cleanly. The byte budgets, exactly: at
 * least two frames, reading paused past it (local), unacknowledged replies counted and a pipe
 * refused past twice it (nng); replies the window holds back freed at hang-up and at stop. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "proto/local.h"
#include "util.h"

/* The configuration of tests that give none: a silent peer is never cut during a test. */
#define UNCUT "[daemon]\nfirst_frame_timeout_ms = 3600000\n"

/* The CPU backend only: these tests measure the daemon's memory against its byte budgets,
 * and an OpenCL device (PoCL) compiling its kernels with LLVM on a cold cache grows it by
 * hundreds of MiB of its own. */
static void start(td_daemon *d, const char *config) {
  td_prepare(d);
  CHECK_EQ(chmod(d->dir, 0755), 0); /* other users reach the socket (the allowlist tests) */
  td_write_config(d, config ? config : UNCUT);
  td_start(d, "--backends", "cpu", NULL);
}

static void wait_log(td_daemon *d, const char *text) {
  TEST_WAIT_FOR(strstr(td_log(d), text) != NULL, 20);
}

/* Waits until the status field is at most `want` (sessions and buffers go asynchronously). */
static void wait_field(td_daemon *d, const char *key, long want) {
  TEST_WAIT_FOR(td_status_field(d, key) <= want, 50);
}

/* The daemon's descriptors once connections that just ended are closed on its side. */
static int settled_fds(td_daemon *d) {
  wait_field(d, "connections", 1); /* accelctl asking */
  test_sleep_ms(100);
  return td_open_fds(d->pid);
}

static void wait_fds(td_daemon *d, int want) {
  TEST_WAIT_FOR(td_open_fds(d->pid) <= want, 50);
}

static long rss_kb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &kb) == 1)
      break;
  fclose(f);
  return kb;
}

static const char *path_of(td_daemon *d) {
  return proto_local_path(d->url);
}

static void stop(td_daemon *d) {
  CHECK_EQ(td_stop(d), 0);
  td_cleanup(d);
}

TEST(raw_connect_and_close) {
  td_daemon d;
  start(&d, NULL);
  int fd = proto_local_connect(path_of(&d));
  CHECK(fd >= 0);
  close(fd);
  td_served(&d);
  wait_log(&d, ": closed");
  stop(&d);
}

TEST(half_written_header) {
  td_daemon d;
  start(&d, NULL);
  int fd = proto_local_connect(path_of(&d));
  CHECK(fd >= 0);
  uint8_t head[10] = {0x41, 0x43, 0x43, 0x31, 1, 0}; /* the magic and a version, then silence */
  CHECK_OK(proto_local_send(fd, head, sizeof head, -1));
  td_served(&d);
  close(fd);
  wait_log(&d, "closed mid-frame");
  td_served(&d);
  stop(&d);
}

TEST(silent_client_does_not_block_others) {
  td_daemon d;
  start(&d, NULL);
  int fds[64];
  for (int i = 0; i < 64; i++)
    CHECK((fds[i] = proto_local_connect(path_of(&d))) >= 0);
  td_served(&d);
  for (int i = 0; i < 64; i++)
    close(fds[i]);
  wait_field(&d, "connections", 1); /* accelctl asking */
  stop(&d);
}

/* A peer that connects and never sends a whole frame is closed after first_frame_timeout_ms,
 * with a log line; one that spoke in time stays. */
TEST(silent_client_is_closed_after_the_first_frame_timeout) {
  td_daemon d;
  start(&d, "[daemon]\nfirst_frame_timeout_ms = 300\n");
  td_client quiet, talker;
  td_client_open(&quiet, d.url);
  td_client_open(&talker, d.url);
  CHECK_OK(td_hello(&talker, NULL));
  nng_msg *m;
  CHECK_EQ(td_recv(&quiet, &m, TD_FOREVER), NNG_ECLOSED);
  wait_log(&d, "no frame in time: closed");
  test_sleep_ms(400);
  CHECK_OK(td_control(&talker, PROTO_CTL_PING, 0)); /* still served */
  td_client_close(&quiet);
  td_client_close(&talker);
  stop(&d);
}

/* max_connections at once, at the limit and one past: the one past hears ACCEL_EBUSY in a
 * REPLY about the connection (request id 0) and is closed; the others are served. */
TEST(max_connections_at_the_limit_and_one_past) {
  td_daemon d;
  start(&d, "[daemon]\nmax_connections = 4\n");
  wait_log(&d, ": closed"); /* the start's own ping (accelctl) is gone: no other connection */
  td_check_max_connections(&d, 4);
  settled_fds(&d);
  td_served(&d);
  stop(&d);
}

TEST(connect_close_storm) {
  td_daemon d;
  start(&d, NULL);
  int fds0 = settled_fds(&d);
  long n = test_scaled(1000, 100);
  for (long i = 0; i < n; i++) {
    int fd = proto_local_connect(path_of(&d));
    CHECK(fd >= 0);
    close(fd);
    if (i % 250 == 0)
      td_served(&d);
  }
  td_served(&d);
  wait_field(&d, "connections", 1); /* accelctl asking */
  wait_fds(&d, fds0);
  stop(&d);
}

/* One client process: HELLO, a buffer, a fill and reads in flight, then it exits (or closes)
 * without waiting for any reply. */
static void dying_client(const char *url, int i) {
  td_client c;
  td_client_open(&c, url);
  CHECK_OK(td_hello(&c, NULL));
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 1 << 14));
  proto_out o;
  proto_out_init(&o);
  td_encode_fill(&o, 7, td_handle(1, 1), (uint32_t)i);
  dev_op op = {.h = {.kind = DEV_OP_READ, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = td_handle(1, 1), .count = 1 << 14};
  op.u.read.bytes = 4 << 14;
  for (uint64_t id = 8; id < 16; id++)
    CHECK_OK(proto_encode_op(&o, id, &op, (proto_bytes){NULL, 0}));
  td_send_raw(&c, o.data, o.len, 7);
  proto_out_free(&o);
  if (i % 2)
    td_client_close(&c);
  _exit(0);
}

TEST(clients_dying_with_replies_in_flight) {
  td_daemon d;
  start(&d, NULL);
  td_served(&d);
  int fds0 = settled_fds(&d);
  long mem0 = td_status_field(&d, "host_mem_used");
  long n = test_scaled(2000, 200), batch = 50;
  for (long i = 0; i < n; i += batch) {
    for (long k = 0; k < batch; k++) {
      pid_t pid = fork();
      CHECK(pid >= 0);
      if (pid == 0)
        dying_client(d.url, (int)(i + k));
    }
    for (long k = 0; k < batch; k++)
      CHECK(wait(NULL) > 0);
    if (i % 500 == 0)
      td_served(&d);
  }
  td_served(&d);
  wait_field(&d, "sessions", 0);
  wait_field(&d, "buffers", 0);
  wait_field(&d, "connections", 1); /* accelctl asking */
  CHECK_EQ(td_status_field(&d, "host_mem_used"), mem0);
  wait_fds(&d, fds0);
  stop(&d);
}

TEST(second_daemon_on_the_same_path_is_refused) {
  td_daemon d;
  start(&d, NULL);
  td_daemon second = d; /* same directory, socket and config */
  second.pid = 0;
  snprintf(second.log, sizeof second.log, "%s/second.log", d.dir);
  CHECK_NE(td_start_expect_exit(&second, NULL), 0);
  char want[256];
  snprintf(want, sizeof want, "address in use by another acceld (%s)", path_of(&d));
  CHECK(strstr(td_log(&second), want) != NULL);
  td_served(&d);
  stop(&d);
}

TEST(stale_socket_file_is_replaced) {
  td_daemon d;
  td_prepare(&d);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0); /* a socket file with nobody behind it */
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path_of(&d));
  CHECK_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  close(fd);
  td_start(&d, NULL);
  wait_log(&d, "removing a stale socket file");
  td_served(&d);
  stop(&d);
}

/* A peer outside the allowlist hears ACCEL_EPERM (a REPLY about the connection) and is
 * closed; the daemon logs who it was. Needs root, to connect as another user. */
TEST(peer_outside_the_allowlist_is_refused) {
  if (geteuid() != 0)
    TEST_SKIP("needs root to connect as another user");
  td_daemon d;
  start(&d, "[daemon]\nsocket_mode = 0666\n");
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0)
      _exit(3);
    td_client c;
    td_client_open(&c, d.url);
    proto_out o;
    proto_hello h = {.version = PROTO_VERSION, .name = "outsider"};
    proto_out_init(&o);
    if (proto_encode_hello(&o, 5, &h) != 0)
      _exit(5);
    if (proto_local_send(c.fd, o.data, o.len, -1) != 0) {
      /* may fail: the daemon may have closed already; its refusal is read below */
    }
    nng_msg *m;
    int rv = td_recv(&c, &m, TD_FOREVER);
    _exit(rv == 0 && td_reply_status(m, 0, NULL) == ACCEL_EPERM ? 0 : 4);
  }
  int status;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  CHECK(WIFEXITED(status));
  CHECK_EQ(WEXITSTATUS(status), 0);
  wait_log(&d, "refused: not in allow_users/allow_groups (uid 65534");
  td_served(&d);
  stop(&d);
}

/* The same user, listed explicitly, is let in. */
TEST(allow_users_lets_a_listed_user_in) {
  if (geteuid() != 0)
    TEST_SKIP("needs root to connect as another user");
  td_daemon d;
  start(&d, "[daemon]\nsocket_mode = 0666\n[security]\nallow_users = 65534\n");
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0)
      _exit(3);
    td_client c;
    td_client_open(&c, d.url);
    _exit(td_hello(&c, NULL) == 0 ? 0 : 4);
  }
  int status;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  CHECK(WIFEXITED(status));
  CHECK_EQ(WEXITSTATUS(status), 0);
  stop(&d);
}

/* A client that asks for reads and never takes the replies: the daemon stops reading from it
 * once the replies it holds pass the connection's budget (max_memory here), so its memory
 * stays bounded; other clients are served meanwhile. */
TEST(client_that_never_reads_is_bounded) {
  td_daemon d;
  start(&d, "[limits]\nmax_memory = 67108864\n");
  td_served(&d);
  long rss0 = rss_kb(d.pid);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello_caps(&c, PROTO_CAP_BATCH, NULL));
  uint32_t count = 1 << 18; /* 1 MiB per read */
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, count));
  dev_op op = {.h = {.kind = DEV_OP_READ, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = td_handle(1, 1), .count = count};
  op.u.read.bytes = 4ull * count;
  long sent = 0;
  for (uint64_t id = 1000; id < 1000 + 4096; id++) { /* 4 GiB of replies asked for */
    proto_out o;
    proto_out_init(&o);
    CHECK_OK(proto_encode_op(&o, id, &op, (proto_bytes){NULL, 0}));
    /* never blocking: the daemon may stop reading us */
    ssize_t len = (ssize_t)o.len, n = send(c.fd, o.data, o.len, MSG_DONTWAIT | MSG_NOSIGNAL);
    proto_out_free(&o);
    if (n != len)
      break; /* the daemon stopped reading us (a partial frame is fine: we close) */
    sent++;
  }
  test_sleep_ms(500);
  td_served(&d);
  long grown_mb = (rss_kb(d.pid) - rss0) / 1024;
  fprintf(stderr, "# sent %ld reads of 1 MiB unread; daemon grew %ld MiB\n", sent, grown_mb);
  CHECK_LT(sent, 4096);
  CHECK_LT(grown_mb, 3 * 64 + 64); /* the budget for requests and replies, and slack */
  td_client_close(&c);
  wait_field(&d, "sessions", 0);
  td_served(&d);
  stop(&d);
}

/* Over nng (tls+tcp://) a client that asks for acknowledged batches and never acknowledges: the
 * replies it has not acknowledged count against its budget, so further reads are ACCEL_EBUSY
 * and the daemon's memory stays bounded (it reached 2.4-3.9 GB before). */
TEST(nng_client_that_never_acknowledges_is_bounded) {
  td_daemon d;
  char tcp[64];
  td_start_nng(&d, "[limits]\nmax_memory = 67108864\n", tcp, sizeof tcp);
  long rss0 = rss_kb(d.pid);
  td_client c;
  td_client_open(&c, tcp);
  CHECK_OK(td_hello_caps(&c, PROTO_CAP_BATCH | PROTO_CAP_ACK, NULL));
  uint32_t count = 1 << 18; /* 1 MiB per read */
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, count));
  dev_op op = {.h = {.kind = DEV_OP_READ, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = td_handle(1, 1), .count = count};
  op.u.read.bytes = 4ull * count;
  for (uint64_t id = 1000; id < 1000 + 2048; id++) { /* 2 GiB of replies asked for */
    proto_out o;
    proto_out_init(&o);
    CHECK_OK(proto_encode_op(&o, id, &op, (proto_bytes){NULL, 0}));
    td_send_raw(&c, o.data, o.len, id);
    proto_out_free(&o);
  }
  test_sleep_ms(1000);
  td_served(&d);
  long grown_mb = (rss_kb(d.pid) - rss0) / 1024;
  fprintf(stderr, "# 2048 reads of 1 MiB, never acknowledged; daemon grew %ld MiB\n", grown_mb);
  CHECK_LT(grown_mb, 3 * 128 + 64); /* requests' and replies' budgets, and slack */
  td_client_close(&c);
  td_served(&d);
  stop(&d);
}

static int fill_on(td_client *c, uint64_t handle, int32_t device) {
  dev_op op = {.h = {.kind = DEV_OP_FILL, .device = device}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle};
  proto_out o;
  uint64_t id = c->next_id++;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, id, &op, (proto_bytes){NULL, 0}));
  return td_call(c, &o, id);
}

/* Device indices are checked against the daemon's devices before placement (0x7fffffff once
 * overflowed a signed int there). */
TEST(device_index_at_the_limit_and_one_past) {
  td_daemon d;
  start(&d, "[devices]\ncpu_devices = 2\nbackends = cpu\n"); /* no GPU or OpenCL device */
  td_client c;
  td_client_open(&c, d.url);
  proto_welcome w;
  CHECK_OK(td_hello(&c, &w));
  CHECK_EQ(w.device_count, 2);
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 16));
  CHECK_OK(fill_on(&c, td_handle(1, 1), 1));                /* the last device */
  CHECK_ERR(fill_on(&c, td_handle(1, 1), 2), ACCEL_EINVAL); /* one past */
  CHECK_ERR(fill_on(&c, td_handle(1, 1), 0x7fffffff), ACCEL_EINVAL);
  CHECK_OK(fill_on(&c, td_handle(1, 1), ACCEL_DEVICE_ANY));
  td_client_close(&c);
  stop(&d);
}

static int read_claiming(td_client *c, uint64_t handle, uint64_t count, uint64_t bytes) {
  dev_op op = {.h = {.kind = DEV_OP_READ, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle, .count = count};
  op.u.read.bytes = bytes;
  proto_out o;
  uint64_t id = c->next_id++;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, id, &op, (proto_bytes){NULL, 0}));
  return td_call(c, &o, id);
}

/* A READ names its bytes (acceld sizes the reply by them before the buffer is known): they
 * must be count x the buffer's element size, one byte more or less is refused, and a claim
 * past the frame limit is ELIMIT at once. F64 and F16 buffers are read whole. */
TEST(read_bytes_must_be_the_buffers) {
  td_daemon d;
  start(&d, "");
  td_client c;
  td_client_open(&c, d.url);
  proto_welcome w;
  CHECK_OK(td_hello(&c, &w));
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_F64, 100));
  CHECK_OK(td_create(&c, td_handle(2, 1), ACCEL_F16, 100));
  CHECK_OK(read_claiming(&c, td_handle(1, 1), 100, 800));
  CHECK_ERR(read_claiming(&c, td_handle(1, 1), 100, 799), ACCEL_EINVAL);
  CHECK_ERR(read_claiming(&c, td_handle(1, 1), 100, 801), ACCEL_EINVAL);
  CHECK_ERR(read_claiming(&c, td_handle(1, 1), 100, 400), ACCEL_EINVAL); /* 4-byte sized */
  CHECK_OK(read_claiming(&c, td_handle(2, 1), 100, 200));
  CHECK_ERR(read_claiming(&c, td_handle(2, 1), 100, 400), ACCEL_EINVAL);
  CHECK_ERR(read_claiming(&c, td_handle(1, 1), 100, (uint64_t)w.limits.max_message), ACCEL_ELIMIT);
  td_client_close(&c);
  stop(&d);
}

typedef struct writer {
  int fd;
  uint32_t count;
  atomic_long sent;
} writer;

/* Sends 256 writes of count elements (1 GiB at 4 MiB each), blocking, never waiting for
 * replies; stops when the socket is shut down. */
static void *write_flood(void *arg) {
  writer *w = arg;
  uint32_t *data = calloc(w->count, 4);
  CHECK(data != NULL);
  dev_op op = {.h = {.kind = DEV_OP_WRITE, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = td_handle(3, 1), .count = w->count};
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 2000, &op, (proto_bytes){(const uint8_t *)data, w->count * 4u}));
  for (int i = 0; i < 256 && proto_local_send(w->fd, o.data, o.len, -1) == 0; i++)
    atomic_fetch_add(&w->sent, 1);
  proto_out_free(&o);
  free(data);
  return NULL;
}

/* `reps` sgemms C = A * B of n x n floats on device 0: a second or more of work on a CPU
 * device, all writing C. */
static void slow_sgemm(td_client *c, int64_t n, int reps) {
  for (uint32_t slot = 1; slot <= 3; slot++)
    CHECK_OK(td_create(c, td_handle(slot, 1), ACCEL_F32, (uint64_t)(n * n)));
  CHECK_OK(td_fill(c, td_handle(1, 1), 0x3f800000u));
  CHECK_OK(td_fill(c, td_handle(2, 1), 0x3f800000u));
  dev_op op = {.h = {.kind = DEV_OP_GEMM, .device = 0}, .nbufs = 3};
  for (uint32_t i = 0; i < 3; i++)
    op.bufs[i] = (dev_op_buf){.handle = td_handle(i + 1, 1), .count = (uint64_t)(n * n)};
  op.u.gemm = (be_gemm_args){
      .m = n, .n = n, .k = n, .alpha = 1, .beta = 0, .lda = n, .ldb = n, .ldc = n, .batch = 1};
  proto_out o;
  proto_out_init(&o);
  for (int i = 0; i < reps; i++)
    CHECK_OK(proto_encode_op(&o, 1900 + (uint64_t)i, &op, (proto_bytes){NULL, 0}));
  td_send_raw(c, o.data, o.len, 1900); /* their replies are never read */
  proto_out_free(&o);
}

/* Writes hold their bytes until they run. Writes queued behind long sgemms on the same
 * buffer pile up until they pass the connection's budget (max_memory, 64 MiB here); then the daemon
 * stops reading that client, so its memory stays bounded (without the pause, 1 GiB of writes would
 * be taken in) and others are served. When the sgemms are done the writes flow again. */
TEST(pipelined_large_writes_are_bounded) {
  td_daemon d;
  start(&d, "[limits]\nmax_memory = 67108864\nmax_message = 8388608\n");
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  slow_sgemm(&c, 2048, 8);
  long rss0 = rss_kb(d.pid), peak = 0;
  writer w = {.fd = c.fd, .count = 1 << 20}; /* into C (slot 3), behind the sgemm */
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, write_flood, &w), 0);
  for (int i = 0; i < 10; i++, test_sleep_ms(50)) {
    long grown = rss_kb(d.pid) - rss0;
    peak = grown > peak ? grown : peak;
  }
  long sent = atomic_load(&w.sent);
  td_served(&d);
  fprintf(stderr, "# %ld of 256 writes of 4 MiB taken behind the sgemm; daemon grew %ld MiB\n",
          sent, peak / 1024);
  CHECK_LT(sent, 256);
  /* the matrices (48 MiB on device 0, C's host replica 16 MiB), the budget, and slack for
   * the allocator (freed frames it keeps: 300-400 MiB more seen on a 2-core machine loaded
   * by parallel builds and a sanitizer run); without the pause it would be 1 GiB and more,
   * and `sent` above already counts the writes taken in */
  CHECK_LT(peak / 1024, 64 + 64 + 640);
  CHECK_EQ(pthread_join(t, NULL), 0); /* the sgemm ends, the writes flow again */
  CHECK_EQ(atomic_load(&w.sent), 256);
  td_client_close(&c);
  td_served(&d);
  stop(&d);
}

/* ---- byte budgets, exactly ---- */

/* One READ of the first `count` u32 of `handle`. */
static void encode_read(proto_out *o, uint64_t id, uint64_t handle, uint32_t count) {
  dev_op op = {.h = {.kind = DEV_OP_READ, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle, .count = count};
  op.u.read.bytes = 4ull * count;
  CHECK_OK(proto_encode_op(o, id, &op, (proto_bytes){NULL, 0}));
}

/* n such reads, ids first.., sent in one write: the daemon takes them in one go. */
static void send_reads(td_client *c, uint64_t first, int n, uint64_t handle, uint32_t count) {
  proto_out o;
  proto_out_init(&o);
  for (int i = 0; i < n; i++)
    encode_read(&o, first + (uint64_t)i, handle, count);
  td_send_raw(c, o.data, o.len, first);
  proto_out_free(&o);
}

/* The statuses of the replies to requests first.., in whatever order they come. */
static void statuses(td_client *c, uint64_t first, int n, int status[]) {
  for (int i = 0; i < n; i++) {
    nng_msg *m;
    CHECK_EQ(td_recv(c, &m, TD_FOREVER), 0);
    proto_header h;
    CHECK_OK(proto_decode_header(nng_msg_body(m), nng_msg_len(m), UINT32_MAX, &h));
    CHECK(h.request_id >= first && h.request_id < first + (uint64_t)n);
    status[h.request_id - first] = td_reply_status(m, h.request_id, NULL);
    nng_msg_free(m);
  }
}

/* The budget is at least two frames, whatever max_memory says (docs/PROTOCOL.md: a chunked
 * transfer keeps two max_op_bytes in flight, and they must never be refused for their size):
 * two reads of a whole frame each, sent together, are both served. */
TEST(the_budget_holds_two_frames_whatever_max_memory_says) {
  td_daemon d;
  start(&d, "[limits]\nmax_message = 65536\nmax_memory = 65536\n");
  uint32_t count = (65536 - PROTO_REPLY_HEAD_SIZE) / 4; /* a reply of one whole frame */
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, count));
  int status[2];
  send_reads(&c, 500, 2, td_handle(1, 1), count);
  statuses(&c, 500, 2, status);
  CHECK_OK(status[0]);
  CHECK_OK(status[1]);
  td_client_close(&c);
  stop(&d);
}

/* A local connection is not read while its unwritten replies pass its budget, and is read
 * again once they drain below half. Four reads of 4 MiB, all admitted (16 MiB fit the budget
 * of 16 MiB + 64), whose replies the client leaves unread, hold 4 x (4 MiB + 32): reading
 * pauses. Two more reads, sent then, are taken only once the client has read the first
 * replies, and are served; read at once, they would find the replies still held and be
 * EBUSY. The status round trip on another connection orders it: by the time the daemon
 * answers it, its loop has seen our bytes (sent before that connection was made). */
TEST(local_reading_pauses_past_the_budget) {
  td_daemon d;
  start(&d, "[limits]\nmax_message = 4194336\nmax_memory = 16777280\n");
  uint32_t count = 1u << 20; /* 4 MiB: the socket never takes a whole reply */
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, count));
  long done = td_status_field(&d, "ops_completed");
  send_reads(&c, 600, 4, td_handle(1, 1), count);
  TEST_WAIT_FOR(td_status_field(&d, "ops_completed") >= done + 4, 20);
  send_reads(&c, 604, 2, td_handle(1, 1), count);
  td_status_field(&d, "connections"); /* the round trip */
  int status[6];
  statuses(&c, 600, 6, status);
  for (int i = 0; i < 6; i++)
    CHECK_OK(status[i]);
  td_client_close(&c);
  stop(&d);
}

/* Over nng with acknowledgements a reply counts against the budget until acknowledged, and a
 * read is EBUSY when it would pass it. Reads of 1 MiB one at a time, each answered, none
 * acknowledged, with a budget of 8 MiB: the seventh is served (6 replies of 1 MiB + 32 and
 * the WELCOME held, 1 MiB asked), the eighth is EBUSY. */
TEST(nng_unacknowledged_replies_count_against_reads) {
  td_daemon d;
  char tcp[64];
  td_start_nng(&d, "[limits]\nmax_memory = 8388608\nmax_message = 2097152\n", tcp, sizeof tcp);
  td_client c;
  td_client_open(&c, tcp);
  CHECK_OK(td_hello_caps(&c, PROTO_CAP_ACK, NULL));
  uint32_t count = 1 << 18; /* 1 MiB */
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, count));
  uint32_t *back = malloc(4ull * count);
  CHECK(back != NULL);
  for (int i = 0; i < 7; i++)
    CHECK_OK(td_read_u32(&c, td_handle(1, 1), back, count));
  CHECK_ERR(td_read_u32(&c, td_handle(1, 1), back, count), ACCEL_EBUSY);
  free(back);
  td_client_close(&c);
  stop(&d);
}

/* The frames in one message from the daemon (batched replies), 0 if none came in timeout_ms;
 * the message's bytes are added to *bytes. */
static int frames_received(td_client *c, int timeout_ms, long *bytes) {
  nng_msg *m;
  if (td_recv(c, &m, timeout_ms) != 0)
    return 0;
  int n = 0;
  const uint8_t *p = nng_msg_body(m);
  *bytes += (long)nng_msg_len(m);
  for (size_t len = nng_msg_len(m), f; len > 0 && (f = proto_next_frame(p, len)) > 0; len -= f) {
    p += f;
    n++;
  }
  nng_msg_free(m);
  return n;
}

/* The bytes of replies the daemon held when it refused a pipe, as its log says; -1 before. */
static long refused_at_bytes(td_daemon *d) {
  const char *log = td_log(d), *at = strstr(log, " bytes of replies not taken: refused");
  if (at == NULL)
    return -1;
  while (at > log && at[-1] >= '0' && at[-1] <= '9')
    at--;
  return strtol(at, NULL, 10);
}

/* The WELCOME's size: unacknowledged, it is in the daemon's books like any reply. */
static long welcome_bytes(const proto_welcome *w) {
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_welcome(&o, 0, w));
  long n = (long)o.len;
  proto_out_free(&o);
  return n;
}

/* nng 1.5.2 (Debian 12) leaks a message that its pipe is handing to the transport as the pipe
 * closes (the send aio, closed by the pipe's close, refuses it and nothing frees it): a client
 * that hangs up while the daemon's replies are on their way makes acceld's LeakSanitizer fail
 * now and then. The nng tests hang up only once they have taken all that the daemon gave nng. */

/* An nng client whose replies pile up unacknowledged past twice its budget is refused: its
 * later frames are dropped unread. The budget is 8 KiB here (two frames of 4 KiB); 1100 pings
 * in batches make 34 KiB of replies: past twice the budget, short of 8 times it. The client
 * takes what comes (never acknowledging) until the daemon logs the refusal, then the rest of
 * the replies made before it (the bytes the log names, all within the window): some replies
 * never come. Refused only past 8 times the budget, the daemon would answer them all. */
TEST(nng_client_refused_past_twice_its_budget) {
  enum { BATCHES = 11, PINGS = 100 }; /* 100 pings of 40 bytes: one message under 4096 */
  td_daemon d;
  char tcp[64];
  td_start_nng(&d, "[limits]\nmax_message = 4096\nmax_memory = 4096\n", tcp, sizeof tcp);
  td_client c;
  td_client_open(&c, tcp);
  proto_welcome w;
  CHECK_OK(td_hello_caps(&c, PROTO_CAP_BATCH | PROTO_CAP_ACK, &w));
  for (int b = 0; b < BATCHES; b++) {
    proto_out o;
    proto_out_init(&o);
    for (int i = 0; i < PINGS; i++) {
      proto_control_req req = {PROTO_CTL_PING, 0};
      CHECK_OK(proto_encode_control(&o, 1000 + (uint64_t)(b * PINGS + i), &req));
    }
    td_send_raw(&c, o.data, o.len, 1000 + (uint64_t)(b * PINGS));
    proto_out_free(&o);
  }
  int got = 0;
  long held, taken = welcome_bytes(&w);
  test_waiting_for_ = "the refusal in the daemon's log";
  while ((held = refused_at_bytes(&d)) < 0 && got < BATCHES * PINGS)
    got += frames_received(&c, 50, &taken);
  test_waiting_for_ = "the replies made before the refusal";
  while (taken < held)
    got += frames_received(&c, 50, &taken);
  test_waiting_for_ = NULL;
  fprintf(stderr, "# %d of %d pings answered before the refusal\n", got, BATCHES * PINGS);
  CHECK_LT(got, BATCHES * PINGS);
  CHECK_EQ(taken, held);
  td_client_close(&c);
  stop(&d);
}

/* A REPLY frame from a client (the daemon's own type): answered ACCEL_EPROTO and counted in
 * frames_bad, after every frame sent before it on that connection. */
static void send_stray_reply(td_client *c, uint64_t id) {
  uint8_t frame[PROTO_REPLY_HEAD_SIZE];
  CHECK_OK(proto_encode_reply_head(frame, id, 0, 0));
  td_send_raw(c, frame, sizeof frame, id);
}

/* acceld started over tls+tcp:// (nng) with `config`, and a client with acknowledgements that sends
 * 100 pings, one message each, and never acknowledges: the daemon hands nng the WELCOME and 47
 * replies (its window of 48) and holds the other 53 and the stray frame's answer. Returns once the
 * client has taken those 47 and the daemon has read everything the client sent: nothing is on its
 * way either way. */
static void hold_replies(td_daemon *d, td_client *c, const char *config) {
  enum { PINGS = 100 };
  char tcp[64];
  td_start_nng(d, config, tcp, sizeof tcp);
  td_client_open(c, tcp);
  CHECK_OK(td_hello_caps(c, PROTO_CAP_ACK, NULL));
  long bad = td_status_field(d, "frames_bad");
  for (int i = 0; i < PINGS; i++) {
    proto_out o;
    proto_control_req req = {PROTO_CTL_PING, 0};
    proto_out_init(&o);
    CHECK_OK(proto_encode_control(&o, 1000 + (uint64_t)i, &req));
    td_send_raw(c, o.data, o.len, 1000 + (uint64_t)i);
    proto_out_free(&o);
  }
  send_stray_reply(c, 1000 + PINGS);
  TEST_WAIT_FOR(td_status_field(d, "frames_bad") > bad, 20);
  nng_msg *m;
  for (uint64_t i = 0; i + 1 < PROTO_ACK_WINDOW; i++) {
    CHECK_EQ(td_recv(c, &m, 10000), 0);
    CHECK_OK(td_reply_status(m, 1000 + i, NULL));
    nng_msg_free(m);
  }
  CHECK_EQ(td_recv(c, &m, 200), NNG_ETIMEDOUT); /* the rest wait for an acknowledgement */
}

/* Replies held back by the window are freed when their client hangs up (acceld's
 * LeakSanitizer fails the stop otherwise). */
TEST(nng_replies_held_back_are_freed_when_the_client_hangs_up) {
  td_daemon d;
  td_client c;
  hold_replies(&d, &c, "");
  td_client_close(&c);
  wait_field(&d, "connections", 1); /* accelctl asking */
  stop(&d);
}

/* ... and when the daemon stops with the client still there: the drain cannot empty a queue
 * nobody acknowledges, so it ends at its timeout and the stop drops them. */
TEST(nng_replies_held_back_are_freed_when_the_daemon_stops) {
  td_daemon d;
  td_client c;
  hold_replies(&d, &c, "[daemon]\ndrain_timeout_ms = 200\n");
  CHECK_EQ(td_stop(&d), 0);
  CHECK(strstr(td_log(&d), "drain timed out") != NULL);
  td_client_close(&c);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(raw_connect_and_close),
    TEST_CASE(half_written_header),
    TEST_CASE(silent_client_does_not_block_others),
    TEST_CASE(silent_client_is_closed_after_the_first_frame_timeout),
    TEST_CASE(max_connections_at_the_limit_and_one_past),
    TEST_CASE(connect_close_storm),
    TEST_CASE(clients_dying_with_replies_in_flight),
    TEST_CASE(second_daemon_on_the_same_path_is_refused),
    TEST_CASE(stale_socket_file_is_replaced),
    TEST_CASE(peer_outside_the_allowlist_is_refused),
    TEST_CASE(allow_users_lets_a_listed_user_in),
    TEST_CASE(client_that_never_reads_is_bounded),
    TEST_CASE(nng_client_that_never_acknowledges_is_bounded),
    TEST_CASE(device_index_at_the_limit_and_one_past),
    TEST_CASE(read_bytes_must_be_the_buffers),
    TEST_CASE(pipelined_large_writes_are_bounded),
    TEST_CASE(the_budget_holds_two_frames_whatever_max_memory_says),
    TEST_CASE(local_reading_pauses_past_the_budget),
    TEST_CASE(nng_unacknowledged_replies_count_against_reads),
    TEST_CASE(nng_client_refused_past_twice_its_budget),
    TEST_CASE(nng_replies_held_back_are_freed_when_the_client_hangs_up),
    TEST_CASE(nng_replies_held_back_are_freed_when_the_daemon_stops),
};

TEST_MAIN(tests)
