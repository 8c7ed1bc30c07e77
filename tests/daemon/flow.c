/* Flow control of a client that pipelines ops, at its exact bounds: a local connection is not
 * read while it has 32 ops in flight (server_local.c, LINK_MAX_OPS), and an nng connection,
 * which cannot be paused alone, has the writes that would pass its request-byte budget
 * refused with ACCEL_EBUSY (server_ops.c, admit). While other connections have ops in flight,
 * a local connection's frames are taken a few per turn (LINK_FRAMES_PER_TURN): the rest
 * still come, in later turns.
 *
 * The ops stay in flight behind a blocker: sgemms on the daemon's CPU device, run on one
 * OpenBLAS thread (seconds of work even on a fast core), which every later op of a test waits
 * for because it touches their output. What a test looks at happens within a fraction of a
 * second of sending; the daemon is then killed, so the blocker is never waited for. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "proto/local.h"
#include "util.h"

/* The daemon's pause threshold (server_local.c LINK_MAX_OPS). */
#define MAX_OPS 32
/* The blockers: sgemms of n x n floats. Over nng, BLOCK_REPS of BLOCK_N (2 Gflop each: 16 ms
 * on one AVX-512 core at 130 Gflop/s, 16 s in all); locally, where they count among the 32
 * ops in flight, LOCAL_REPS of LOCAL_N (54 Gflop each: 0.4 s, 10 s in all). A test looks for
 * about a second. */
#define BLOCK_N 1024
#define BLOCK_REPS 1024
#define LOCAL_N 3072
#define LOCAL_REPS 24
#define A_ td_handle(1, 1)
#define B_ td_handle(2, 1)
#define C_ td_handle(3, 1) /* the sgemms' output: the ops of the tests wait for them */

/* A daemon on the CPU backend alone, its OpenBLAS on one thread, with `config`, listening
 * on its socket (tcp NULL) or also on a tls+tcp:// URL (nng's transport) written to tcp. */
static void start(td_daemon *d, const char *config, char *tcp, size_t len) {
  setenv("OPENBLAS_NUM_THREADS", "1", 1); /* inherited by the daemon */
  setenv("OMP_NUM_THREADS", "1", 1);
  if (tcp != NULL) {
    td_start_nng(d, config, tcp, len);
    return;
  }
  td_prepare(d);
  td_write_config(d, config);
  td_start(d, "--backends", "cpu", NULL);
}

/* The blocker ends with the daemon: nothing waits for it. */
static void kill_daemon(td_daemon *d) {
  td_signal(d, SIGKILL);
  CHECK_EQ(td_wait(d), 128 + SIGKILL);
  td_cleanup(d);
}

/* Buffers A, B, C of n x n floats in slots slot.. (A and B ones). */
static void gemm_buffers(td_client *c, uint32_t slot, uint64_t n) {
  for (uint32_t i = 0; i < 3; i++)
    CHECK_OK(td_create(c, td_handle(slot + i, 1), ACCEL_F32, n * n));
  CHECK_OK(td_fill(c, td_handle(slot, 1), 0x3f800000u));
  CHECK_OK(td_fill(c, td_handle(slot + 1, 1), 0x3f800000u));
}

/* `reps` sgemms C = A B of gemm_buffers(slot) sent in one write without waiting (request
 * ids first..). */
static void send_gemms(td_client *c, uint32_t slot, uint64_t n, int reps, uint64_t first) {
  uint64_t h[3] = {td_handle(slot, 1), td_handle(slot + 1, 1), td_handle(slot + 2, 1)};
  dev_op op = {.h = {.kind = DEV_OP_GEMM, .device = 0}, .nbufs = 3};
  for (int i = 0; i < 3; i++)
    op.bufs[i] = (dev_op_buf){.handle = h[i], .count = n * n};
  int64_t s = (int64_t)n;
  op.u.gemm = (be_gemm_args){
      .m = s, .n = s, .k = s, .alpha = 1, .beta = 0, .lda = s, .ldb = s, .ldc = s, .batch = 1};
  proto_out o;
  proto_out_init(&o);
  for (int i = 0; i < reps; i++)
    CHECK_OK(proto_encode_op(&o, first + (uint64_t)i, &op, (proto_bytes){NULL, 0}));
  td_send_raw(c, o.data, o.len, first);
  proto_out_free(&o);
}

/* The blocker: buffers A_, B_, C_ and `reps` sgemms of n x n (request ids 1000..). Returns the
 * daemon's ops_completed from before the sgemms. */
static long block(td_daemon *d, td_client *c, uint64_t n, int reps) {
  gemm_buffers(c, 1, n);
  long base = td_status_field(d, "ops_completed");
  send_gemms(c, 1, n, reps, 1000);
  return base;
}

/* ---- a local connection: reading pauses at 32 ops in flight ---- */

typedef struct sender {
  int fd;
  proto_out frames;
  atomic_bool done; /* every byte went into the socket */
} sender;

/* Blocking: returns once the daemon took every byte, or is gone. */
static void *send_all(void *arg) {
  sender *s = arg;
  if (proto_local_send(s->fd, s->frames.data, s->frames.len, -1) == 0)
    atomic_store(&s->done, true);
  return NULL;
}

/* The daemon's op counters, all from one status (read one by one, an op that ends between
 * two reads would be counted twice). */
typedef struct counts {
  long in_flight, completed, failed;
} counts;

static long field(const char *json, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(json, pat);
  CHECK(p != NULL);
  return strtol(p + strlen(pat), NULL, 10);
}

static counts op_counts(td_daemon *d) {
  static char out[1 << 16];
  int rc = td_ctl(out, sizeof out, "--url", d->url, "--timeout", "30000", "status", "--json", NULL);
  if (rc != 0)
    TEST_FAIL("accelctl status exited with %d: %s", rc, out);
  return (counts){field(out, "ops_in_flight"), field(out, "ops_completed"),
                  field(out, "ops_failed")};
}

/* Ops the daemon has taken from us since `base` (its ops_completed before the blocker): those
 * in flight and those done. */
static long taken(td_daemon *d, long base, long *in_flight) {
  counts n = op_counts(d);
  *in_flight = n.in_flight;
  return n.in_flight + n.completed - base;
}

/* 12288 fills of C pipelined behind the blocker (1.2 MB of frames): the daemon takes them
 * until 32 ops (the blocker's included) are in flight, then stops reading, and the client's
 * socket fills: it can never send them all while the blocker runs. Sampled for a second from
 * the moment 32 were taken, the ops in flight are never more than 32. Without the pause the
 * daemon reads every fill at once (up to the session's 8192 in flight, the rest EBUSY): more
 * than 32 in flight, and the sending ends. */
TEST(local_reading_pauses_at_32_ops_in_flight) {
  enum { FILLS = 12288 };
  td_daemon d;
  start(&d, "", NULL, 0);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  long base = block(&d, &c, LOCAL_N, LOCAL_REPS);
  sender s = {.fd = c.fd};
  proto_out_init(&s.frames);
  for (int i = 0; i < FILLS; i++)
    td_encode_fill(&s.frames, 5000 + (uint64_t)i, C_, (uint32_t)i);
  CHECK_OK(s.frames.err);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, send_all, &s), 0);
  long in_flight, most = 0, ops;
  for (uint64_t t0 = test_now_ms(); (ops = taken(&d, base, &in_flight)) < MAX_OPS;) {
    most = in_flight > most ? in_flight : most;
    if (atomic_load(&s.done) || test_now_ms() - t0 > 10000)
      TEST_FAIL("%ld ops taken (%ld in flight), %s", ops, in_flight,
                atomic_load(&s.done) ? "every fill sent" : "none for 10 s");
  }
  for (uint64_t t0 = test_now_ms(); test_now_ms() - t0 < 1000;) {
    most = in_flight > most ? in_flight : most;
    taken(&d, base, &in_flight);
  }
  counts now = op_counts(&d);
  long done = now.completed - now.failed - base;
  bool all_sent = atomic_load(&s.done);
  fprintf(stderr, "# at most %ld ops in flight; %ld ops done; %s\n", most, done,
          all_sent ? "every fill sent" : "the client's socket is full");
  CHECK_LE(most, MAX_OPS);
  CHECK(!all_sent);
  CHECK_LT(done, LOCAL_REPS); /* the blocker ran all along: no fill could finish */

  kill_daemon(&d); /* the sender returns once its socket is closed */
  CHECK_EQ(pthread_join(t, NULL), 0);
  proto_out_free(&s.frames);
  td_client_close(&c);
}

/* Two clients: `a` with the blocker in flight (so `b`'s turns are short), `b` beside it. */
static void start_beside_blocker(td_daemon *d, const char *config, td_client *a, td_client *b) {
  start(d, config, NULL, 0);
  td_client_open(a, d->url);
  td_client_open(b, d->url);
  CHECK_OK(td_hello(a, NULL));
  CHECK_OK(td_hello(b, NULL));
  (void)block(d, a, LOCAL_N, LOCAL_REPS);
}

/* ---- short turns: a connection's frames a few at a time, every one taken ---- */

/* b sends 200 fills of a buffer of its own in one write (over the 32-op pause, too): every
 * one is answered, in order, and the buffer holds the last value. */
static void fills_all_answered(td_client *b) {
  enum { FILLS = 200 };
  uint64_t x = td_handle(9, 1);
  CHECK_OK(td_create(b, x, ACCEL_U32, 1));
  proto_out o;
  proto_out_init(&o);
  for (int i = 0; i < FILLS; i++)
    td_encode_fill(&o, 5000 + (uint64_t)i, x, (uint32_t)i + 1);
  CHECK_OK(o.err);
  td_send_raw(b, o.data, o.len, 5000);
  proto_out_free(&o);
  for (int i = 0; i < FILLS; i++) {
    nng_msg *m;
    int rv = td_recv(b, &m, 10000 * (test_under_valgrind() ? 10 : 1));
    if (rv != 0)
      TEST_FAIL("fill %d of %d not answered: %s", i, FILLS, nng_strerror(rv));
    CHECK_OK(td_reply_status(m, 5000 + (uint64_t)i, NULL));
    nng_msg_free(m);
  }
  uint32_t v = 0;
  CHECK_OK(td_read_u32(b, x, &v, 1));
  CHECK_EQ(v, (uint32_t)FILLS);
}

/* While one client's blocker is in flight, another sends 200 fills of its own buffer in one
 * write (over the 32-op pause, too): the daemon makes a few frames of them per turn, so each
 * later turn must come by itself, also after a pause ends. Every fill is answered, in order,
 * and the buffer holds the last value; the blocker is still in flight at the end (the turns
 * were short all along). */
TEST(short_turns_take_every_frame) {
  td_daemon d;
  td_client a, b;
  start_beside_blocker(&d, "", &a, &b);
  fills_all_answered(&b);
  CHECK_GE(td_status_field(&d, "ops_in_flight"), 1); /* the blocker's */
  kill_daemon(&d);
  td_client_close(&a);
  td_client_close(&b);
}

/* Frames of every size up to the staging buffer's (64 KiB), sent in one burst while short
 * turns leave some of them in the buffer: the rest of a turn stays where it is and moves to
 * the buffer's start once the room after it is under half (server_local.c read_target), so frames
 * straddle the buffer's end and the move's threshold both ways. b writes 48 buffers of 1 to
 * 63 KiB, each its own pattern, in one write of 1.5 MiB: every write is answered once, with
 * success, and every buffer reads back whole. */
TEST(writes_of_every_size_cross_the_staging_buffer_whole) {
  enum { WRITES = 48 };
  td_daemon d;
  td_client a, b;
  start_beside_blocker(&d, "", &a, &b);
  uint64_t words[WRITES];
  proto_out o;
  proto_out_init(&o);
  for (uint32_t i = 0; i < WRITES; i++) {
    words[i] = (1024u + (i * 37u % 63u) * 1024u) / 4; /* 1 KiB .. 63 KiB, scattered */
    uint64_t h = td_handle(20 + i, 1);
    CHECK_OK(td_create(&b, h, ACCEL_U32, words[i]));
    uint32_t *data = malloc(words[i] * 4);
    CHECK(data != NULL);
    for (uint64_t k = 0; k < words[i]; k++)
      data[k] = i * 1000003u + (uint32_t)k;
    dev_op op = {.h = {.kind = DEV_OP_WRITE, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
    op.bufs[0] = (dev_op_buf){.handle = h, .count = words[i]};
    CHECK_OK(
        proto_encode_op(&o, 7000 + i, &op, (proto_bytes){(const uint8_t *)data, words[i] * 4}));
    free(data);
  }
  td_send_raw(&b, o.data, o.len, 7000);
  proto_out_free(&o);
  bool answered[WRITES] = {false};
  for (uint32_t i = 0; i < WRITES; i++) {
    nng_msg *m;
    int rv = td_recv(&b, &m, 10000 * (test_under_valgrind() ? 10 : 1));
    if (rv != 0)
      TEST_FAIL("write %u of %d not answered: %s", i, WRITES, nng_strerror(rv));
    proto_header h;
    proto_bytes none;
    int32_t st;
    const uint8_t *p = nng_msg_body(m);
    CHECK_OK(proto_decode_header(p, nng_msg_len(m), UINT32_MAX, &h));
    CHECK_OK(proto_decode_reply(p + PROTO_HEADER_SIZE, h.body_len, &st, &none));
    CHECK_EQ(h.type, PROTO_REPLY);
    CHECK_OK(st);
    uint64_t k = h.request_id - 7000; /* writes to different buffers end in any order */
    CHECK(k < WRITES && !answered[k]);
    answered[k] = true;
    nng_msg_free(m);
  }
  for (uint32_t i = 0; i < WRITES; i++) {
    uint32_t *back = malloc(words[i] * 4);
    CHECK(back != NULL);
    CHECK_OK(td_read_u32(&b, td_handle(20 + i, 1), back, words[i]));
    for (uint64_t k = 0; k < words[i]; k++)
      if (back[k] != i * 1000003u + (uint32_t)k)
        TEST_FAIL("buffer %u word %llu: %u", i, (unsigned long long)k, back[k]);
    free(back);
  }
  kill_daemon(&d);
  td_client_close(&a);
  td_client_close(&b);
}

/* Waits (5 s at most, 50 under valgrind) until status says `want` light clients: the status
 * comes on a connection of its own, so it can be answered before the loop has made a frame
 * another connection just sent. */
static void await_light(td_daemon *d, long want) {
  uint64_t t0 = test_now_ms(), limit = test_under_valgrind() ? 50000 : 5000;
  long got;
  while ((got = td_status_field(d, "light_clients")) != want) {
    if (test_now_ms() - t0 > limit)
      TEST_FAIL("%ld light clients, %ld expected", got, want);
    usleep(1000);
  }
}

/* The same beside a light client: c waits for its one sgemm (queued behind a's running one:
 * 0.4 s and more), so b's frames are taken one a turn (server_local.c frames_per_turn) while
 * it does; every fill is answered, in order. a, with its sgemms, is not light. */
TEST(one_frame_turns_beside_a_light_client_take_every_frame) {
  td_daemon d;
  td_client a, b, c;
  start_beside_blocker(&d, "", &a, &b);
  await_light(&d, 0); /* a, with 24 sgemms in flight */
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  gemm_buffers(&c, 20, LOCAL_N);
  send_gemms(&c, 20, LOCAL_N, 1, 9000);
  await_light(&d, 1);
  fills_all_answered(&b);
  kill_daemon(&d);
  td_client_close(&a);
  td_client_close(&b);
  td_client_close(&c);
}

/* Whole frames waiting for the connection's next turn are the daemon's doing, not an idle
 * peer: with a frame idle timeout of 100 ms, 5 sgemms of LOCAL_N sent at once (4 made in the
 * first turn, the last in the next; none done before 0.4 s) and 300 ms later the connection
 * still answers a PING, first. A timer left armed by the first turn closed it after 100 ms
 * ("no byte for 100 ms inside a frame"). */
TEST(frames_waiting_for_a_turn_are_not_idle_time) {
  td_daemon d;
  td_client a, b;
  start_beside_blocker(&d, "[limits]\nframe_idle_timeout_ms = 100\n", &a, &b);
  gemm_buffers(&b, 20, LOCAL_N);
  send_gemms(&b, 20, LOCAL_N, 5, 7000);
  usleep(300 * 1000);
  CHECK_OK(td_control(&b, PROTO_CTL_PING, 0));
  CHECK(strstr(td_log(&d), "inside a frame") == NULL);
  kill_daemon(&d);
  td_client_close(&a);
  td_client_close(&b);
}

/* Frames and their descriptors in one sendmsg: 13 SHM_ATTACH frames, each with a sealed memfd
 * (more than the 8 descriptors a connection may have ahead of its frames). Made 4 a turn,
 * the others' descriptors wait with them; every attach is answered, none refused as
 * descriptors the client did not announce (the check once counted them before their frames
 * were made). */
TEST(descriptors_of_frames_waiting_for_a_turn_are_announced) {
  enum { N = 13 };
  td_daemon d;
  td_client a, b;
  start_beside_blocker(&d, "", &a, &b);
  int fds[N];
  proto_out o;
  proto_out_init(&o);
  for (int i = 0; i < N; i++) {
    fds[i] = memfd_create("flow-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(fds[i] >= 0);
    CHECK_EQ(ftruncate(fds[i], 4096), 0);
    CHECK_EQ(fcntl(fds[i], F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL), 0);
    proto_control_req req = {PROTO_CTL_SHM_ATTACH, 100 + (uint64_t)i};
    CHECK_OK(proto_encode_control(&o, 8000 + (uint64_t)i, &req));
  }
  CHECK_OK(o.err);
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * N)];
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  struct iovec iov = {o.data, o.len};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int) * N);
  memcpy(CMSG_DATA(cm), fds, sizeof fds);
  CHECK_EQ(sendmsg(b.fd, &mh, MSG_NOSIGNAL), (ssize_t)o.len);
  proto_out_free(&o);
  for (int i = 0; i < N; i++) {
    nng_msg *m;
    int rv = td_recv(&b, &m, 10000 * (test_under_valgrind() ? 10 : 1));
    if (rv != 0)
      TEST_FAIL("attach %d of %d not answered: %s\n%s", i, N, nng_strerror(rv), td_log(&d));
    CHECK_OK(td_reply_status(m, 8000 + (uint64_t)i, NULL));
    nng_msg_free(m);
  }
  for (int i = 0; i < N; i++)
    close(fds[i]);
  kill_daemon(&d);
  td_client_close(&a);
  td_client_close(&b);
}

/* ---- an nng connection: writes past the request-byte budget are refused ---- */

/* The status of the reply to `id` if it comes before the reply to `last` (whose status must
 * be 0), else 1. Replies come batched (PROTO_CAP_BATCH): several frames in a message. */
static int status_before(td_client *c, uint64_t id, uint64_t last) {
  int status = 1;
  for (;;) {
    nng_msg *m;
    int rv = td_recv(c, &m, 10000); /* the PING's reply comes at once: ops do not delay it */
    if (rv != 0)
      TEST_FAIL("no reply to request %llu: %s", (unsigned long long)last, nng_strerror(rv));
    const uint8_t *p = nng_msg_body(m);
    for (size_t len = nng_msg_len(m), n; len > 0; p += n, len -= n) {
      CHECK_GT(n = proto_next_frame(p, len), 0);
      proto_header h;
      proto_bytes data;
      int32_t st;
      CHECK_OK(proto_decode_header(p, n, UINT32_MAX, &h));
      CHECK_OK(proto_decode_reply(p + PROTO_HEADER_SIZE, h.body_len, &st, &data));
      if (h.request_id == id)
        status = st;
      if (h.request_id == last) {
        CHECK_OK(st);
        nng_msg_free(m);
        return status;
      }
    }
    nng_msg_free(m);
  }
}

/* Over tls+tcp:// (nng) with a budget of 32 MiB (max_memory; above two frames of 4 MiB), eleven
 * writes of 3 MiB into C, each its own message, behind the blocker: the first ten hold 30 MiB and
 * the blocker's frames 170 KiB, so they are admitted and wait; the eleventh would make 33 MiB and
 * is refused with EBUSY at once. A PING after it orders the answers: the daemon handles an nng
 * pipe's messages in order, so the eleventh's EBUSY comes before the PING's reply. Without the
 * budget every write is admitted and the PING's reply comes first. */
TEST(nng_writes_past_the_budget_are_refused) {
  enum { WRITES = 11, BYTES = 3 << 20 };
  td_daemon d;
  char tcp[64];
  start(&d, "[limits]\nmax_message = 4194304\nmax_memory = 33554432\n", tcp, sizeof tcp);
  td_client c;
  td_client_open(&c, tcp);
  CHECK_OK(td_hello_caps(&c, PROTO_CAP_BATCH, NULL)); /* the blocker comes in one message */
  long base = block(&d, &c, BLOCK_N, BLOCK_REPS);
  uint8_t *data = calloc(1, BYTES);
  CHECK(data != NULL);
  dev_op op = {.h = {.kind = DEV_OP_WRITE, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = C_, .count = BYTES / 4};
  for (uint64_t i = 0; i < WRITES; i++) {
    proto_out o;
    proto_out_init(&o);
    CHECK_OK(proto_encode_op(&o, 2000 + i, &op, (proto_bytes){data, BYTES}));
    td_send_raw(&c, o.data, o.len, 2000 + i);
    proto_out_free(&o);
  }
  free(data);
  proto_out o;
  proto_control_req ping = {PROTO_CTL_PING, 0};
  proto_out_init(&o);
  CHECK_OK(proto_encode_control(&o, 3000, &ping));
  td_send_raw(&c, o.data, o.len, 3000);
  proto_out_free(&o);
  int status = status_before(&c, 2000 + WRITES - 1, 3000);
  long in_flight, ops = taken(&d, base, &in_flight);
  fprintf(stderr, "# the last write: %s before the PING's reply; %ld ops taken\n",
          status == 1 ? "no answer" : accel_err_name(status), ops);
  CHECK_ERR(status, ACCEL_EBUSY);
  CHECK_EQ(ops, BLOCK_REPS + WRITES - 1); /* the blocker and ten writes, the last refused */
  kill_daemon(&d);
  td_client_close(&c);
}

static const test_case tests[] = {
    TEST_CASE(local_reading_pauses_at_32_ops_in_flight),
    TEST_CASE(short_turns_take_every_frame),
    TEST_CASE(writes_of_every_size_cross_the_staging_buffer_whole),
    TEST_CASE(one_frame_turns_beside_a_light_client_take_every_frame),
    TEST_CASE(frames_waiting_for_a_turn_are_not_idle_time),
    TEST_CASE(descriptors_of_frames_waiting_for_a_turn_are_announced),
    TEST_CASE(nng_writes_past_the_budget_are_refused),
};

TEST_MAIN(tests)
