/* Flow control of a client that pipelines ops, at its exact bounds: a local connection is not
 * read while it has 4096 ops in flight (server_local.c, LINK_MAX_OPS), and an nng connection,
 * which cannot be paused alone, has the writes that would pass its request-byte budget
 * refused with ACCEL_EBUSY (server_ops.c, admit).
 *
 * The ops stay in flight behind a blocker: sgemms on the daemon's CPU device, run on one
 * OpenBLAS thread (seconds of work even on a fast core), which every later op of a test waits
 * for because it touches their output. What a test looks at happens within a fraction of a
 * second of sending; the daemon is then killed, so the blocker is never waited for. */
#include <pthread.h>
#include <stdatomic.h>

#include "proto/local.h"
#include "util.h"

/* The daemon's pause threshold (server_local.c LINK_MAX_OPS). */
#define MAX_OPS 4096
/* The blocker: BLOCK_REPS sgemms of BLOCK_N x BLOCK_N floats, 2 Gflop each: 16 ms each on one
 * AVX-512 core (130 Gflop/s), 16 s in all, where a test looks for a second. */
#define BLOCK_N 1024
#define BLOCK_REPS 1024
#define A_ td_handle(1, 1)
#define B_ td_handle(2, 1)
#define C_ td_handle(3, 1) /* the sgemms' output: the ops of the tests wait for them */

/* A daemon on the CPU backend alone, its OpenBLAS on one thread, with `config`, listening
 * on its socket (tcp NULL) or on a tcp:// URL written to tcp. */
static void start(td_daemon *d, const char *config, char *tcp, size_t len) {
  setenv("OPENBLAS_NUM_THREADS", "1", 1); /* inherited by the daemon */
  setenv("OMP_NUM_THREADS", "1", 1);
  td_prepare(d);
  td_write_config(d, config);
  if (tcp == NULL) {
    td_start(d, "--backends", "cpu", NULL);
    return;
  }
  snprintf(tcp, len, "tcp://127.0.0.1:%d", td_free_port());
  td_start(d, "--listen", tcp, "--allow-plain-tcp", "--backends", "cpu", NULL);
}

/* The blocker ends with the daemon: nothing waits for it. */
static void kill_daemon(td_daemon *d) {
  td_signal(d, SIGKILL);
  CHECK_EQ(td_wait(d), 128 + SIGKILL);
  td_cleanup(d);
}

/* The blocker's buffers, then its sgemms sent without waiting (request ids 1000..). Returns
 * the daemon's ops_completed from before the sgemms. */
static long block(td_daemon *d, td_client *c) {
  uint64_t n = BLOCK_N;
  CHECK_OK(td_create(c, A_, ACCEL_F32, n * n));
  CHECK_OK(td_create(c, B_, ACCEL_F32, n * n));
  CHECK_OK(td_create(c, C_, ACCEL_F32, n * n));
  CHECK_OK(td_fill(c, A_, 0x3f800000u));
  CHECK_OK(td_fill(c, B_, 0x3f800000u));
  long base = td_status_field(d, "ops_completed");
  dev_op op = {.h = {.kind = DEV_OP_GEMM, .device = 0}, .nbufs = 3};
  uint64_t handles[3] = {A_, B_, C_};
  for (int i = 0; i < 3; i++)
    op.bufs[i] = (dev_op_buf){.handle = handles[i], .count = n * n};
  int64_t s = BLOCK_N;
  op.u.gemm = (be_gemm_args){
      .m = s, .n = s, .k = s, .alpha = 1, .beta = 0, .lda = s, .ldb = s, .ldc = s, .batch = 1};
  proto_out o;
  proto_out_init(&o);
  for (int i = 0; i < BLOCK_REPS; i++)
    CHECK_OK(proto_encode_op(&o, 1000 + (uint64_t)i, &op, (proto_bytes){NULL, 0}));
  td_send_raw(c, o.data, o.len, 1000);
  proto_out_free(&o);
  return base;
}

/* ---- a local connection: reading pauses at 4096 ops in flight ---- */

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
 * until 4096 ops (the blocker's included) are in flight, then stops reading, and the client's
 * socket fills: it can never send them all while the blocker runs. Sampled for a second from
 * the moment 4096 were taken, the ops in flight are never more than 4096. Without the pause
 * the daemon reads every fill at once (up to the session's 8192 in flight, the rest EBUSY):
 * more than 4096 in flight, and the sending ends. */
TEST(local_reading_pauses_at_4096_ops_in_flight) {
  enum { FILLS = 3 * MAX_OPS };
  td_daemon d;
  start(&d, "", NULL, 0);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  long base = block(&d, &c);
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
  CHECK_LT(done, BLOCK_REPS); /* the blocker ran all along: no fill could finish */

  kill_daemon(&d); /* the sender returns once its socket is closed */
  CHECK_EQ(pthread_join(t, NULL), 0);
  proto_out_free(&s.frames);
  td_client_close(&c);
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

/* Over tcp:// with a budget of 32 MiB (max_memory; above two frames of 4 MiB), eleven writes
 * of 3 MiB into C, each its own message, behind the blocker: the first ten hold 30 MiB and the
 * blocker's frames 170 KiB, so they are admitted and wait; the eleventh would make 33 MiB and
 * is refused with EBUSY at once. A PING after it orders the answers: the daemon handles an nng
 * pipe's messages in order, so the eleventh's EBUSY comes before the PING's reply. Without the
 * budget every write is admitted and the PING's reply comes first. */
TEST(tcp_writes_past_the_budget_are_refused) {
  enum { WRITES = 11, BYTES = 3 << 20 };
  td_daemon d;
  char tcp[64];
  start(&d, "[limits]\nmax_message = 4194304\nmax_memory = 33554432\n", tcp, sizeof tcp);
  td_client c;
  td_client_open(&c, tcp);
  CHECK_OK(td_hello_caps(&c, PROTO_CAP_BATCH, NULL)); /* the blocker comes in one message */
  long base = block(&d, &c);
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
    TEST_CASE(local_reading_pauses_at_4096_ops_in_flight),
    TEST_CASE(tcp_writes_past_the_budget_are_refused),
};

TEST_MAIN(tests)
