/* Sessions through the daemon: data round trips, handles scoped to their session, limits, a
 * client killed with SIGKILL, many ops in flight from one client, several clients at once,
 * and several clients through a device fault. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "util.h"

static char out[1 << 16];

TEST(write_read_round_trip) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  td_client c;
  td_client_open(&c, d.url);
  proto_welcome w;
  CHECK_OK(td_hello(&c, &w));
  CHECK_EQ(w.version, PROTO_VERSION);
  CHECK_GE(w.device_count, 1);
  CHECK_GT(w.limits.max_message, 0);
  enum { N = 100000 };
  static uint32_t src[N], dst[N];
  for (uint32_t i = 0; i < N; i++)
    src[i] = i * 2654435761u;
  uint64_t h = td_handle(1, 1);
  CHECK_OK(td_create(&c, h, ACCEL_U32, N));
  CHECK_OK(td_write_u32(&c, h, src, N));
  CHECK_OK(td_read_u32(&c, h, dst, N));
  CHECK_EQ(memcmp(src, dst, sizeof src), 0);
  CHECK_OK(td_fill(&c, h, 7));
  CHECK_OK(td_read_u32(&c, h, dst, 16));
  CHECK_EQ(dst[15], 7);
  CHECK_EQ(td_status_field(&d, "sessions"), 1);
  CHECK_EQ(td_status_field(&d, "buffers"), 1);
  CHECK_GE(td_status_field(&d, "host_mem_used"), N * 4);
  CHECK_OK(td_destroy(&c, h));
  CHECK_ERR(td_fill(&c, h, 1), ACCEL_ESTALE);
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* Another session's handle, a destroyed one, one never made: all ACCEL_ESTALE. */
TEST(handles_are_scoped_to_their_session) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  td_client a, b;
  td_client_open(&a, d.url);
  td_client_open(&b, d.url);
  CHECK_OK(td_hello(&a, NULL));
  CHECK_OK(td_hello(&b, NULL));
  uint64_t h = td_handle(3, 5);
  CHECK_OK(td_create(&a, h, ACCEL_U32, 64));
  CHECK_OK(td_fill(&a, h, 42));
  CHECK_ERR(td_fill(&b, h, 1), ACCEL_ESTALE);               /* foreign */
  CHECK_ERR(td_fill(&a, td_handle(3, 6), 1), ACCEL_ESTALE); /* wrong generation */
  CHECK_ERR(td_fill(&a, td_handle(4, 5), 1), ACCEL_ESTALE); /* never made */
  uint32_t v[4];
  CHECK_ERR(td_read_u32(&b, h, v, 4), ACCEL_ESTALE);
  CHECK_OK(td_read_u32(&a, h, v, 4));
  CHECK_EQ(v[3], 42);
  CHECK_EQ(td_status_field(&d, "sessions"), 2);
  td_client_close(&a);
  td_client_close(&b);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(session_limits_are_errors_not_stalls) {
  td_daemon d;
  td_prepare(&d);
  td_write_config(&d, "[limits]\nmax_buffers = 4\nmax_memory = 4096\n");
  td_start(&d, NULL);
  td_client c;
  td_client_open(&c, d.url);
  proto_welcome w;
  CHECK_OK(td_hello(&c, &w));
  CHECK_EQ(w.limits.max_buffers, 4);
  CHECK_EQ(w.limits.max_memory, 4096);
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 512));
  CHECK_ERR(td_create(&c, td_handle(2, 1), ACCEL_U32, 1024), ACCEL_ENOMEM);
  CHECK_OK(td_create(&c, td_handle(2, 1), ACCEL_U32, 512));
  CHECK_ERR(td_create(&c, td_handle(4, 1), ACCEL_U32, 1), ACCEL_EINVAL); /* slot >= 4 */
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* A create refused for memory leaves its handle marked: its ops get the create's error
 * (ENOMEM, not ESTALE), and its destroy succeeds and clears the mark. From then on the handle
 * is stale like any destroyed one (a second destroy too), and its slot takes a new create. */
TEST(a_failed_create_is_marked_until_destroyed) {
  td_daemon d;
  td_prepare(&d);
  td_write_config(&d, "[limits]\nmax_memory = 4096\n");
  td_start(&d, NULL);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  uint64_t h = td_handle(1, 1);
  CHECK_ERR(td_create(&c, h, ACCEL_U32, 2048), ACCEL_ENOMEM);
  CHECK_ERR(td_fill(&c, h, 7), ACCEL_ENOMEM);
  CHECK_OK(td_destroy(&c, h));
  CHECK_ERR(td_fill(&c, h, 7), ACCEL_ESTALE);
  CHECK_ERR(td_destroy(&c, h), ACCEL_ESTALE);
  CHECK_OK(td_create(&c, td_handle(1, 2), ACCEL_U32, 512));
  CHECK_OK(td_fill(&c, td_handle(1, 2), 7));
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* ---- a client in a process of its own, to be killed ---- */

/* The holder: connects, makes buffers, leaves an op in flight, says so on fd, then waits to be
 * killed. It runs in a fresh exec of this program (nng does not survive fork), picked up
 * before main by this constructor. */
__attribute__((constructor)) static void holder_main(void) {
  const char *url = getenv("TD_HOLDER_URL"), *fd_s = getenv("TD_HOLDER_FD");
  if (url == NULL || fd_s == NULL)
    return;
  int nbufs = atoi(getenv("TD_HOLDER_BUFS")), fd = atoi(fd_s);
  td_client c;
  td_client_open(&c, url);
  CHECK_OK(td_hello(&c, NULL));
  static uint32_t data[4096];
  for (int i = 1; i <= nbufs; i++) {
    CHECK_OK(td_create(&c, td_handle((uint32_t)i, 1), ACCEL_U32, 4096));
    CHECK_OK(td_write_u32(&c, td_handle((uint32_t)i, 1), data, 4096));
  }
  proto_out o; /* an op in flight when the kill comes: its reply goes nowhere */
  proto_out_init(&o);
  td_encode_fill(&o, 999, td_handle(1, 1), 1);
  td_send_raw(&c, o.data, o.len, 999);
  (void)!write(fd, "x", 1);
  const char *flood = getenv("TD_HOLDER_FLOOD"); /* then that many more, replies unread */
  for (long j = 0; flood && j < atol(flood); j++) {
    proto_out_free(&o);
    proto_out_init(&o);
    td_encode_fill(&o, 1000 + (uint64_t)j, td_handle((uint32_t)(j % nbufs) + 1, 1), (uint32_t)j);
    td_send_raw(&c, o.data, o.len, 1000 + (uint64_t)j); /* blocks once acceld stops reading */
  }
  for (;;)
    pause();
}

static pid_t holder_flooding(td_daemon *d, int nbufs, long flood) {
  int fds[2];
  CHECK_EQ(pipe(fds), 0);
  pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0) {
    char fd_s[16], n_s[16];
    snprintf(fd_s, sizeof fd_s, "%d", fds[1]);
    snprintf(n_s, sizeof n_s, "%d", nbufs);
    setenv("TD_HOLDER_URL", d->url, 1);
    setenv("TD_HOLDER_FD", fd_s, 1);
    setenv("TD_HOLDER_BUFS", n_s, 1);
    if (flood > 0) {
      char f_s[24];
      snprintf(f_s, sizeof f_s, "%ld", flood);
      setenv("TD_HOLDER_FLOOD", f_s, 1);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execl("/proc/self/exe", "holder", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  char b;
  CHECK_EQ(read(fds[0], &b, 1), 1);
  close(fds[0]);
  return pid;
}

static pid_t holder(td_daemon *d, int nbufs) {
  return holder_flooding(d, nbufs, 0);
}

/* Waits until the status field is `want` (sessions and buffers go asynchronously). */
static void wait_field(td_daemon *d, const char *key, long want) {
  TEST_WAIT_FOR(td_status_field(d, key) == want, 20);
}

/* Every session, buffer and byte of host memory the clients held goes; acceld still answers,
 * then stops cleanly. */
static void nothing_left_then_stop(td_daemon *d) {
  wait_field(d, "sessions", 0);
  wait_field(d, "buffers", 0);
  wait_field(d, "host_mem_used", 0);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d->url, "ping", NULL), 0);
  CHECK_EQ(td_stop(d), 0);
  td_cleanup(d);
}

TEST(killed_client_frees_its_session_and_buffers) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  pid_t pid = holder(&d, 8);
  CHECK_EQ(td_status_field(&d, "sessions"), 1);
  CHECK_EQ(td_status_field(&d, "buffers"), 8);
  CHECK_EQ(kill(pid, SIGKILL), 0);
  CHECK_EQ(waitpid(pid, NULL, 0), pid);
  nothing_left_then_stop(&d);
}

/* ---- user modules and the end of a session ---- */

/* A MODULE_LOAD of OpenCL C for every device that takes it, made unique by `salt` so that it
 * is built from source (a build in progress for a while). */
static void encode_load(proto_out *o, uint64_t id, uint64_t handle, uint64_t salt) {
  static char src[256];
  snprintf(src, sizeof src,
           "__kernel void k(__global uint *v) { v[get_global_id(0)] += 1; } /* %llx */\n",
           (unsigned long long)salt);
  dev_op op = {.h = {.kind = DEV_OP_MODULE_LOAD, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle};
  op.u.module.source = ACCEL_SOURCE_OPENCL;
  op.u.module.code = src;
  op.u.module.len = strlen(src);
  proto_out_init(o);
  CHECK_OK(proto_encode_op(o, id, &op, (proto_bytes){NULL, 0}));
}

/* A client that loads a module and goes away before the build is done (its session ends with
 * the build in flight, the load and the ops held behind it): the daemon keeps serving, the
 * session and its buffers go, and a new client builds the same way. Without an OpenCL device
 * the loads answer ACCEL_ENOTSUP at once, and the test shows only the session's end. */
TEST(client_gone_during_a_module_build) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  uint64_t salt = test_now_ns();
  for (int i = 0; i < 5; i++) {
    td_client c;
    td_client_open(&c, d.url);
    CHECK_OK(td_hello(&c, NULL));
    CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 1024));
    proto_out o;
    encode_load(&o, c.next_id, td_handle(2, 1), salt + (uint64_t)i);
    td_send_raw(&c, o.data, o.len, c.next_id++);
    proto_out_free(&o);
    proto_out_init(&o);
    td_encode_fill(&o, c.next_id, td_handle(1, 1), 7); /* held behind the build */
    td_send_raw(&c, o.data, o.len, c.next_id++);
    proto_out_free(&o);
    td_client_close(&c); /* without waiting for either */
  }
  wait_field(&d, "sessions", 0);
  wait_field(&d, "buffers", 0);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  proto_out o;
  uint64_t id = c.next_id++;
  encode_load(&o, id, td_handle(2, 1), salt + 99);
  /* Not td_call's 10 s: this build may queue behind the five abandoned ones, each a compile
   * from source that took seconds under the sanitizers on a loaded 2-core machine (a CI run
   * once got no reply within 10 s). */
  td_send_raw(&c, o.data, o.len, id);
  proto_out_free(&o);
  nng_msg *m = NULL;
  CHECK_EQ(td_recv(&c, &m, 60000 * (test_under_valgrind() ? 10 : 1)), 0);
  int rc = td_reply_status(m, id, NULL);
  nng_msg_free(m);
  CHECK(rc == 0 || rc == ACCEL_ENOTSUP);
  td_client_close(&c);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "ping", NULL), 0);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* ---- many ops in flight from one client ---- */

typedef struct collector {
  td_client *c;
  bool acks; /* PROTO_CAP_ACK: report received messages */
  long expect, failed;
  _Atomic long got; /* read by the sender for its window */
  uint32_t messages;
} collector;

static void send_ack(td_client *c, uint32_t received) {
  proto_out o;
  proto_control_req req = {PROTO_CTL_ACK, received};
  proto_out_init(&o);
  CHECK_OK(proto_encode_control(&o, 1, &req));
  td_send_raw(c, o.data, o.len, 1);
  proto_out_free(&o);
}

/* Counts the replies in one message (several frames with PROTO_CAP_BATCH). */
static void count_frames(collector *k, const uint8_t *p, size_t len) {
  for (size_t n; (n = proto_next_frame(p, len)) > 0; p += n, len -= n) {
    proto_header h;
    int32_t status;
    proto_bytes data;
    if (proto_decode_header(p, n, UINT32_MAX, &h) != 0 ||
        proto_decode_reply(p + PROTO_HEADER_SIZE, h.body_len, &status, &data) != 0 || status != 0)
      k->failed++;
    k->got++;
  }
  k->failed += len != 0; /* bytes left over: not whole frames */
}

static void *collect_replies(void *arg) {
  collector *k = arg;
  while (k->got < k->expect) {
    nng_msg *m;
    if (td_recv(k->c, &m, TD_FOREVER) != 0)
      break;
    count_frames(k, nng_msg_body(m), nng_msg_len(m));
    nng_msg_free(m);
    if (k->acks && ++k->messages % PROTO_ACK_EVERY == 0)
      send_ack(k->c, k->messages);
  }
  return NULL;
}

/* Sends ops fills, `per_msg` frames per message (several need PROTO_CAP_BATCH), at most
 * 2048 ahead of the replies (the session's max_in_flight would answer EBUSY past 8192). */
static void send_fills(td_client *c, collector *k, long ops, int per_msg, uint32_t bufs) {
  for (long i = 0; i < ops; i += per_msg) {
    while (i - atomic_load(&k->got) > 2048)
      test_sleep_ms(1);
    proto_out o;
    proto_out_init(&o);
    for (long j = i; j < i + per_msg && j < ops; j++)
      td_encode_fill(&o, 1000 + (uint64_t)j, td_handle((uint32_t)(j % bufs) + 1, 1), (uint32_t)j);
    td_send_raw(c, o.data, o.len, 1000 + (uint64_t)i);
    proto_out_free(&o);
  }
}

static void pipeline(td_daemon *d, uint32_t caps, long ops, int per_msg) {
  td_client c;
  td_client_open(&c, d->url);
  proto_welcome w;
  CHECK_OK(td_hello_caps(&c, caps, &w));
  CHECK_EQ(w.capabilities, caps);
  enum { BUFS = 16 };
  for (uint32_t i = 1; i <= BUFS; i++)
    CHECK_OK(td_create(&c, td_handle(i, 1), ACCEL_U32, 64));
  collector k = {.c = &c, .acks = (caps & PROTO_CAP_ACK) != 0, .expect = ops};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, collect_replies, &k), 0);
  send_fills(&c, &k, k.expect, per_msg, BUFS);
  pthread_join(t, NULL);
  CHECK_EQ(k.got, k.expect);
  CHECK_EQ(k.failed, 0);
  td_client_close(&c);
}

/* Thousands of small ops sent without waiting; every one gets its reply. The client takes
 * batching and the ack window: nng's raw rep0 would drop replies past 64 queued per pipe. */
TEST(pipelined_ops_all_answered) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  long ops = test_scaled(20000, 500);
  pipeline(&d, PROTO_CAP_BATCH | PROTO_CAP_ACK, ops, 1);
  pipeline(&d, PROTO_CAP_BATCH | PROTO_CAP_ACK, ops, 50); /* requests batched too */
  pipeline(&d, PROTO_CAP_ACK, test_scaled(2000, 200), 1); /* the window alone */
  CHECK_GE(td_status_field(&d, "ops_completed"), 2 * ops);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* ---- several clients at once ---- */

typedef struct worker {
  const char *url;
  int index, failures;
  int rounds;             /* 0: 20 */
  atomic_int *done_round; /* if not NULL: rounds done so far by every worker together */
} worker;

static void *client_work(void *arg) {
  worker *w = arg;
  td_client c;
  td_client_open(&c, w->url);
  static _Thread_local uint32_t src[1024], dst[1024];
  w->failures += td_hello(&c, NULL) != 0;
  uint64_t h = td_handle(1, (uint32_t)w->index + 1);
  w->failures += td_create(&c, h, ACCEL_U32, 1024) != 0;
  for (int round = 0; round < (w->rounds ? w->rounds : 20); round++) {
    for (int i = 0; i < 1024; i++)
      src[i] = (uint32_t)(w->index * 100000 + round * 1024 + i);
    w->failures += td_write_u32(&c, h, src, 1024) != 0;
    w->failures += td_read_u32(&c, h, dst, 1024) != 0;
    w->failures += memcmp(src, dst, sizeof src) != 0;
    if (w->done_round)
      atomic_fetch_add(w->done_round, 1);
  }
  td_client_close(&c);
  return NULL;
}

/* A daemon to start whose local sockets are served by three I/O threads. */
static void prepare_io_threads(td_daemon *d) {
  td_prepare(d);
  td_write_config(d, "[daemon]\nio_threads = 3\n");
}

/* Served by three I/O threads: each client's bytes and replies stay its own whichever thread
 * serves its socket (also under ThreadSanitizer, suite 'threads'). */
TEST(concurrent_clients_see_their_own_data) {
  td_daemon d;
  prepare_io_threads(&d);
  td_start(&d, "--cpu-devices", "2", NULL);
  CHECK(strstr(td_log(&d), "(3 I/O threads)") != NULL);
  enum { CLIENTS = 8 };
  pthread_t t[CLIENTS];
  worker w[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) {
    w[i] = (worker){.url = d.url, .index = i};
    CHECK_EQ(pthread_create(&t[i], NULL, client_work, &w[i]), 0);
  }
  for (int i = 0; i < CLIENTS; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ(w[i].failures, 0);
  }
  wait_field(&d, "sessions", 0);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* Three clients flooding fills without reading a reply are killed while eight others run:
 * the eight see only their own data, the dead ones' sessions, buffers and memory go (three
 * I/O threads; also under ThreadSanitizer, suite 'threads'). */
TEST(clients_killed_mid_flight_cost_the_others_nothing) {
  td_daemon d;
  prepare_io_threads(&d);
  td_start(&d, NULL);
  enum { KILLED = 3, CLIENTS = 8 };
  pid_t kids[KILLED];
  for (int i = 0; i < KILLED; i++)
    kids[i] = holder_flooding(&d, 2, 20000);
  pthread_t t[CLIENTS];
  worker w[CLIENTS];
  atomic_int rounds = 0;
  for (int i = 0; i < CLIENTS; i++) {
    w[i] = (worker){.url = d.url, .index = i, .rounds = 1000, .done_round = &rounds};
    CHECK_EQ(pthread_create(&t[i], NULL, client_work, &w[i]), 0);
  }
  TEST_WAIT_FOR(atomic_load(&rounds) >= CLIENTS, 20); /* all under way */
  /* The kills come while the eight still have rounds to go. */
  int at_kill = atomic_load(&rounds);
  for (int i = 0; i < KILLED; i++) {
    CHECK_EQ(kill(kids[i], SIGKILL), 0);
    CHECK_EQ(waitpid(kids[i], NULL, 0), kids[i]);
  }
  for (int i = 0; i < CLIENTS; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ(w[i].failures, 0);
  }
  CHECK_LT(at_kill, CLIENTS * 1000);
  nothing_left_then_stop(&d);
}

/* ---- a device fault while many clients run ---- */

typedef struct faulted {
  const char *url;
  int index;
  atomic_bool *fault_seen; /* set once the device served again after the fault */
  int failures, lost;      /* unexpected results; ops answered EDEVLOST or EDATALOST */
  int rounds_after;        /* whole rounds done once the device served again */
} faulted;

/* One round: the client's own pattern written and read back (its host copy survives a device
 * restart), then a fill read back. Any status but success or a device's loss is a failure, and
 * so is any data that is not the client's own. */
static void fault_round(td_client *c, faulted *w, uint64_t h, uint32_t round) {
  static _Thread_local uint32_t src[256], dst[256];
  for (int i = 0; i < 256; i++)
    src[i] = (uint32_t)w->index << 24 | round << 8 | (uint32_t)i;
  int rc = td_write_u32(c, h, src, 256);
  if (rc == 0 && (rc = td_read_u32(c, h, dst, 256)) == 0)
    w->failures += memcmp(src, dst, sizeof src) != 0;
  uint32_t value = (uint32_t)w->index * 1000u + round;
  if (rc == 0 && (rc = td_fill(c, h, value)) == 0 && (rc = td_read_u32(c, h, dst, 256)) == 0)
    for (int i = 0; i < 256; i++)
      w->failures += dst[i] != value;
  if (rc == ACCEL_EDEVLOST || rc == ACCEL_EDATALOST)
    w->lost++;
  else if (rc != 0)
    w->failures++;
}

static void *client_through_a_fault(void *arg) {
  faulted *w = arg;
  td_client c;
  td_client_open(&c, w->url);
  w->failures += td_hello(&c, NULL) != 0;
  uint64_t h = td_handle(1, (uint32_t)w->index + 1);
  w->failures += td_create(&c, h, ACCEL_U32, 256) != 0;
  for (uint32_t round = 0; w->rounds_after < 10 && round < 1000000; round++) {
    bool after = atomic_load(w->fault_seen);
    int before = w->failures + w->lost;
    fault_round(&c, w, h, round & 0xffff);
    if (after && w->failures + w->lost == before)
      w->rounds_after++;
  }
  td_client_close(&c);
  return NULL;
}

/* Eight clients on three I/O threads keep writing, filling and reading while their device
 * faults and restarts: each sees its own data or a device's loss, never another status or
 * another client's bytes; all go on once the device serves again; no session is left (also
 * under ThreadSanitizer, suite 'threads'). */
TEST(a_device_fault_while_many_clients_run) {
  td_daemon d;
  prepare_io_threads(&d);
  td_start(&d, "--enable-fault-injection", NULL);
  enum { CLIENTS = 8 };
  atomic_bool fault_seen = false;
  pthread_t t[CLIENTS];
  faulted w[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) {
    w[i] = (faulted){.url = d.url, .index = i, .fault_seen = &fault_seen};
    CHECK_EQ(pthread_create(&t[i], NULL, client_through_a_fault, &w[i]), 0);
  }
  test_sleep_ms(100);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "inject-fault", "--device", "0", NULL), 0);
  TEST_WAIT_FOR(td_status_field(&d, "restarts") >= 1, 30);
  atomic_store(&fault_seen, true);
  for (int i = 0; i < CLIENTS; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ(w[i].failures, 0);
    CHECK_EQ(w[i].rounds_after, 10);
  }
  wait_field(&d, "sessions", 0);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(write_read_round_trip),
    TEST_CASE(handles_are_scoped_to_their_session),
    TEST_CASE(session_limits_are_errors_not_stalls),
    TEST_CASE(a_failed_create_is_marked_until_destroyed),
    TEST_CASE(killed_client_frees_its_session_and_buffers),
    TEST_CASE(client_gone_during_a_module_build),
    TEST_CASE(pipelined_ops_all_answered),
    TEST_CASE(concurrent_clients_see_their_own_data),
    TEST_CASE(clients_killed_mid_flight_cost_the_others_nothing),
    TEST_CASE(a_device_fault_while_many_clients_run),
};

TEST_MAIN(tests)
