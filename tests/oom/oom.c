/* Every allocation fails in turn (the tests' version of Lua's ltests.c and libuv's
 * test-loop-oom.c). Each scenario runs once with no failure to count its allocations, then
 * once per N with the Nth allocation of accel's own failing (failing_alloc.h): each call must
 * complete or fail with ACCEL_ENOMEM, nothing may crash or hang (the futures are waited for
 * with a limit), every block accel allocated must be freed once the scenario has torn down
 * (the allocator counts them; LeakSanitizer also runs under ASan), and the same scenario must
 * then succeed with no failure: the system serves again.
 *
 * Scenarios: the runtime (spawn, ask, a worker job, a timer, stop); an op's path in the
 * embedded mode (open, buffers, write, ops, read, checked values, a peer copy and an
 * all-reduce between two devices, close); the wire codec
 * (encode and decode of every frame kind); a session through an in-process server (the
 * server actor on its own runtime and device world, a client of libaccel over ipc://: hello,
 * buffers, ops, read, the session's teardown when the client closes). And once, without
 * failures: a session whose transfers go through shared memory leaves no block behind.
 *
 * ACCEL_OOM_STRIDE=K tries every Kth N only (default 1: every N); ACCEL_OOM_ONLY=N that N only.
 * A leak names the blocks left (their allocation numbers: ACCEL_OOM_TRAP_SEQ, failing_alloc.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accel/accel.h"
#include "actors/device.h"
#include "actors/trace.h"
#include "actors/world_init.h"
#include "oom/failing_alloc.h"
#include "proto/wire.h"
#include "runtime/alloc.h"
#include "server/server.h"
#include "test.h"

enum { WAIT_MS = 30000 };

/* The step where the scenario's first error came from, for the failure message. */
static const char *failed_step = "";

static int step(int rc, const char *what) {
  if (rc != 0 && failed_step[0] == '\0')
    failed_step = what;
  return rc;
}

/* Waits with no timeout (the waiting thread then runs a sync completion itself: kernel
 * actor's sync jobs); a hang is then caught by the test's own timeout. */
static bool untimed_waits;

/* A future's status, or a loud failure when it does not complete in WAIT_MS: a hang. */
static int wait_release(accel_future *f, const char *what) {
  int rc = accel_future_wait(f, untimed_waits ? -1 : WAIT_MS);
  if (rc == ACCEL_ETIMEDOUT)
    TEST_FAIL("%s did not complete in %d ms (armed at N = %llu)", what, WAIT_MS,
              (unsigned long long)atomic_load(&fa_fail_at));
  accel_future_release(f);
  return step(rc, what);
}

/* ---- the runtime: spawn, asks (one with a deadline), a monitor, a job, a timer, stop ---- */

enum { MSG_ASK = ACCEL_MSG_USER, MSG_WORKED, MSG_TICK };

typedef struct echo_state {
  accel_future *pending; /* the ask waiting for its worker job and timer */
  int seen;
} echo_state;

static int doubling_work(void *data) {
  int *v = data;
  *v *= 2;
  return 0;
}

static void finish_if_done(echo_state *st, int status) {
  if (st->pending != NULL && (status != 0 || ++st->seen == 2)) {
    accel_future_complete(st->pending, status, NULL, NULL);
    accel_future_release(st->pending);
    st->pending = NULL;
  }
}

static int echo_receive(accel_actor *self, void *state, accel_msg *msg) {
  echo_state *st = state;
  if (msg->type == MSG_ASK) {
    uint64_t id; /* a monitor of the root: its record lives until the shutdown fires it */
    int mon = accel_monitor(self, accel_runtime_root(accel_actor_runtime(self)), &id);
    if (mon != 0)
      return accel_reply(msg, mon, NULL, NULL) < 0 ? -1 : 0;
    int *v = malloc(sizeof *v); /* the test's memory, not accel's */
    CHECK(v != NULL);
    *v = 21;
    int rc = accel_work_submit(self, doubling_work, v, free, MSG_WORKED);
    if (rc != 0)
      free(v);
    if (rc == 0)
      rc = accel_timer_start(self, 1, 0, MSG_TICK, 0, NULL);
    if (rc != 0) /* a job already submitted completes into an actor with nothing pending */
      return accel_reply(msg, rc, NULL, NULL) < 0 ? -1 : 0;
    st->pending = accel_msg_take_reply(msg);
    st->seen = 0;
    return 0;
  }
  if (msg->type == MSG_WORKED) {
    int *v = msg->data;
    int status = (int)(int64_t)msg->arg;
    finish_if_done(st, status != 0 ? status : *v == 42 ? 0 : ACCEL_EINVAL);
    return 0;
  }
  if (msg->type == MSG_TICK)
    finish_if_done(st, 0);
  return 0;
}

static void echo_stop(accel_actor *self, void *state) {
  finish_if_done(state, ACCEL_ECANCELED);
}

static const accel_behavior echo_behavior = {
    .name = "echo", .state_size = sizeof(echo_state), .receive = echo_receive, .stop = echo_stop};

static int scenario_runtime(void) {
  accel_runtime *rt;
  int rc = accel_runtime_create(&rt, NULL);
  if (rc != 0)
    return rc;
  rc = accel_runtime_start(rt);
  accel_ref echo = ACCEL_REF_NONE;
  if (rc == 0)
    rc = accel_spawn(rt, NULL, &echo_behavior, NULL, NULL, &echo);
  for (int i = 0; rc == 0 && i < 2; i++) { /* an ask, then one with a deadline far ahead */
    accel_future *f;
    rc = i == 0 ? accel_ask(rt, echo, &(accel_msg){.type = MSG_ASK}, &f)
                : accel_ask_timeout(rt, echo, &(accel_msg){.type = MSG_ASK}, 60000, &f);
    if (rc == 0)
      rc = wait_release(f, "an ask");
  }
  if (rc == 0)
    rc = accel_stop(rt, echo);
  accel_runtime_stop(rt);
  accel_runtime_join(rt);
  accel_runtime_destroy(rt);
  return rc;
}

/* ---- an op's path: buffers, write, ops, read, checked against the host ---- */

enum { N_ELEMS = 64, N_SIDE = 8 }; /* the vectors are also 8 x 8 matrices */
enum { N_BIG = 16384 }; /* 64 KiB: on the local link, through shared memory (remote_shm.c) */

typedef struct op_path {
  accel_ctx *ctx;
  accel_buffer x, y, r, z, w;
  int nbufs;
  bool big; /* w too, written and read back */
} op_path;

/* `rc` is the call's result; the future is read after the call made it (through its address:
 * the order of evaluation of arguments is unspecified). */
static int await(int rc, accel_future **f, const char *what) {
  return rc != 0 ? step(rc, what) : wait_release(*f, what);
}

static int make_buffers(op_path *p) {
  accel_buffer *bufs[] = {&p->x, &p->y, &p->r, &p->z, &p->w};
  size_t counts[] = {N_ELEMS, N_ELEMS, 1, N_ELEMS, N_BIG};
  for (int i = 0; i < (p->big ? 5 : 4); i++) {
    int rc = step(accel_buffer_create(p->ctx, ACCEL_F32, counts[i], bufs[i]), "create");
    if (rc != 0)
      return rc;
    p->nbufs++;
  }
  return 0;
}

/* z = x y as 8 x 8 matrices (column-major), read back and checked (exact: small integers). */
static int run_gemm(op_path *p, const float *x, const float *y) {
  float z[N_ELEMS];
  accel_future *f;
  int rc = await(accel_sgemm(p->ctx, ACCEL_DEVICE_ANY, ACCEL_NO_TRANS, ACCEL_NO_TRANS, N_SIDE,
                             N_SIDE, N_SIDE, 1.0f, p->x, N_SIDE, p->y, N_SIDE, 0.0f, p->z, N_SIDE,
                             &f),
                 &f, "sgemm");
  if (rc == 0)
    rc = await(accel_read(p->ctx, p->z, 0, z, N_ELEMS, &f), &f, "read z");
  for (int i = 0; rc == 0 && i < N_SIDE; i++)
    for (int j = 0; j < N_SIDE; j++) {
      double want = 0;
      for (int l = 0; l < N_SIDE; l++)
        want += (double)x[i + l * N_SIDE] * y[l + j * N_SIDE];
      CHECK(z[i + j * N_SIDE] == (float)want);
    }
  return rc;
}

/* y = 2 x + y, r = x . y, then y read back, then a gemm; the values are small integers,
 * exact in f32. */
static int run_ops(op_path *p) {
  float x[N_ELEMS], y[N_ELEMS], out[N_ELEMS], dot = 0;
  for (int i = 0; i < N_ELEMS; i++) {
    x[i] = (float)(i % 7);
    y[i] = (float)(i % 5);
  }
  accel_future *f;
  int rc = await(accel_write(p->ctx, p->x, 0, x, N_ELEMS, &f), &f, "write x");
  if (rc == 0)
    rc = await(accel_write(p->ctx, p->y, 0, y, N_ELEMS, &f), &f, "write y");
  if (rc == 0)
    rc = await(accel_saxpy(p->ctx, ACCEL_DEVICE_ANY, N_ELEMS, 2.0f, p->x, p->y, &f), &f, "saxpy");
  if (rc == 0)
    rc = await(accel_sdot(p->ctx, ACCEL_DEVICE_ANY, N_ELEMS, p->x, p->y, p->r, &f), &f, "sdot");
  if (rc == 0)
    rc = await(accel_read(p->ctx, p->y, 0, out, N_ELEMS, &f), &f, "read y");
  if (rc == 0)
    rc = await(accel_read(p->ctx, p->r, 0, &dot, 1, &f), &f, "read r");
  if (rc != 0)
    return rc;
  double want_dot = 0;
  for (int i = 0; i < N_ELEMS; i++) {
    double want = 2.0 * x[i] + y[i];
    CHECK(out[i] == (float)want);
    want_dot += x[i] * want;
  }
  CHECK(dot == (float)want_dot);
  return run_gemm(p, x, out);
}

/* w written and read back whole: large enough that a client of the daemon moves it through
 * shared memory (a region attached, records of its own for each op). */
static int run_big(op_path *p) {
  static float in[N_BIG], out[N_BIG];
  for (int i = 0; i < N_BIG; i++)
    in[i] = (float)(i % 13);
  memset(out, 0, sizeof out);
  accel_future *f;
  int rc = await(accel_write(p->ctx, p->w, 0, in, N_BIG, &f), &f, "write w");
  if (rc == 0)
    rc = await(accel_read(p->ctx, p->w, 0, out, N_BIG, &f), &f, "read w");
  if (rc == 0)
    CHECK(memcmp(in, out, sizeof in) == 0);
  return rc;
}

/* Two devices: z (on device 0) copied straight to device 1 by an op there (y = relu(z)), then
 * an all-reduce of z on device 0 with y on device 1: both become 2 z (exact: small integers). */
static int run_two_devices(op_path *p) {
  float z0[N_ELEMS], y1[N_ELEMS], z1[N_ELEMS];
  accel_device devs[2] = {0, 1};
  accel_buffer bufs[2] = {p->z, p->y};
  accel_future *f;
  int rc = await(accel_read(p->ctx, p->z, 0, z0, N_ELEMS, &f), &f, "read z");
  if (rc == 0)
    rc = await(accel_relu(p->ctx, 1, p->y, p->z, &f), &f, "relu on device 1");
  if (rc == 0)
    rc = await(accel_all_reduce(p->ctx, devs, bufs, 2, ACCEL_REDUCE_SUM, &f), &f, "all-reduce");
  if (rc == 0)
    rc = await(accel_read(p->ctx, p->y, 0, y1, N_ELEMS, &f), &f, "read y");
  if (rc == 0)
    rc = await(accel_read(p->ctx, p->z, 0, z1, N_ELEMS, &f), &f, "read z");
  for (int i = 0; rc == 0 && i < N_ELEMS; i++) {
    CHECK(z1[i] == 2 * z0[i]);
    CHECK(y1[i] == 2 * z0[i]);
  }
  return rc;
}

static int op_path_run(const char *url, bool big) {
  op_path p = {.big = big};
  int rc = step(accel_open(&p.ctx, url), "open");
  if (rc != 0)
    return rc;
  rc = make_buffers(&p);
  if (rc == 0)
    rc = run_ops(&p);
  if (rc == 0 && big)
    rc = run_big(&p);
  if (rc == 0 && strstr(url, "cpu_devices=2"))
    rc = run_two_devices(&p);
  accel_buffer bufs[] = {p.x, p.y, p.r, p.z, p.w};
  for (int i = 0; i < p.nbufs; i++) {
    int drc = step(accel_buffer_destroy(p.ctx, bufs[i]), "destroy");
    if (rc == 0)
      rc = drc;
  }
  accel_close(p.ctx);
  return rc;
}

static int scenario_embedded(void) {
  return op_path_run("embedded:?backends=cpu&cpu_devices=2", false);
}

/* Sync completions, waited for with no timeout: the clients' own threads do the device's
 * waits. */
static int scenario_embedded_sync(void) {
  untimed_waits = true;
  int rc = op_path_run("embedded:?backends=cpu&cpu_devices=2&completion=sync", false);
  untimed_waits = false;
  return rc;
}

/* ---- the wire codec: every frame kind encoded and decoded back ---- */

static int codec_round_trip(void) {
  proto_out o;
  proto_out_init(&o);
  proto_hello h = {.version = PROTO_VERSION};
  int rc = proto_encode_hello(&o, 1, &h);
  dev_op op = {.h = {.kind = DEV_OP_FILL, .device = 0}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = 1, .count = 16};
  if (rc == 0)
    rc = proto_encode_op(&o, 2, &op, (proto_bytes){NULL, 0});
  uint8_t payload[32] = {1, 2, 3};
  if (rc == 0)
    rc = proto_encode_reply(&o, 3, 0, (proto_bytes){payload, sizeof payload});
  /* what was encoded decodes (decoders allocate nothing: they read the frame in place) */
  for (size_t at = 0; rc == 0 && at < o.len;) {
    size_t len = proto_next_frame(o.data + at, o.len - at);
    proto_header hd;
    CHECK(len > 0);
    CHECK_OK(proto_decode_header(o.data + at, len, 1u << 20, &hd));
    at += len;
  }
  proto_out_free(&o);
  return rc;
}

/* ---- a session through an in-process server: the client's and the daemon's allocations ---- */

static char socket_url[128];

static uint32_t server_io_threads; /* 2: the client's frames go through shared rings */

static int server_tree(accel_runtime *rt, dev_world *w, srv_args *args) {
  dev_world_opts wo = {.cpu_devices = 1};
  snprintf(wo.backends, sizeof wo.backends, "cpu");
  int rc = dev_world_init(w, rt, &wo);
  accel_ref devices;
  if (rc == 0)
    rc = dev_world_spawn(w, NULL, &devices);
  if (rc != 0)
    return rc;
  static const char *listen[1];
  listen[0] = socket_url;
  *args = (srv_args){.world = w,
                     .listen = listen,
                     .nlisten = 1,
                     .limits = {.max_message = SRV_DEFAULT_MAX_MESSAGE,
                                .max_in_flight = SRV_DEFAULT_MAX_IN_FLIGHT,
                                .max_buffers = SRV_DEFAULT_MAX_BUFFERS,
                                .max_memory = SRV_DEFAULT_MAX_MEMORY},
                     .ipc_mode = -1,
                     .ipc_gid = -1,
                     .io_threads = server_io_threads,
                     .sec = {.allow_any_local = true}};
  accel_supervision sup = {.strategy = ACCEL_ONE_FOR_ONE, .on_limit = ACCEL_LIMIT_STOP_CHILD};
  accel_spawn_opts so = {.name = "server", .supervision = &sup};
  return accel_spawn(rt, NULL, &srv_behavior, args, &so, NULL);
}

static int daemon_session(bool big) {
  accel_runtime *rt;
  int rc = accel_runtime_create(&rt, NULL);
  if (rc != 0)
    return rc;
  dev_world w = {0};
  srv_args args;
  rc = server_tree(rt, &w, &args);
  if (rc == 0)
    rc = accel_runtime_start(rt);
  if (rc == 0)
    rc = op_path_run(socket_url, big);
  accel_runtime_stop(rt);
  accel_runtime_join(rt);
  accel_runtime_destroy(rt);
  dev_world_fini(&w);
  return rc;
}

/* With a 64 KiB write and read through shared memory: a failed attach must not leave its
 * descriptor to be taken by the next one (another region's bytes read back). */
static int scenario_daemon(void) {
  return daemon_session(true);
}

/* ---- a trace: started, stopped, rendered (actors/trace.h) ---- */

/* An empty world's trace: its JSON is written into a growing block of accel's allocator, so
 * that a failed growth is ACCEL_ENOMEM with nothing left behind. */
static int scenario_trace(void) {
  static dev_world w;
  memset(&w, 0, sizeof w);
  int rc = step(dev_trace_start(&w, 64), "trace start");
  if (rc != 0)
    return rc;
  char *json = NULL;
  size_t len = 0;
  rc = step(dev_trace_stop(&w, &json, &len), "trace render");
  if (rc == 0 && (len == 0 || json[len] != '\0' || strstr(json, "\"traceEvents\":[") == NULL))
    rc = step(ACCEL_EINVAL, "the trace's JSON");
  rt_free(json);
  return rc;
}

/* ---- the driver: every N in turn ---- */

static unsigned long long stride(void) {
  const char *s = getenv("ACCEL_OOM_STRIDE");
  unsigned long long k = s ? strtoull(s, NULL, 10) : 1;
  return k ? k : 1;
}

/* ACCEL_OOM_ONLY=N: fail only the Nth allocation (to debug one case). */
static unsigned long long only_n(void) {
  const char *s = getenv("ACCEL_OOM_ONLY");
  return s ? strtoull(s, NULL, 10) : 0;
}

static void fail_each_allocation(const char *name, int (*scenario)(void)) {
  CHECK_OK(scenario()); /* warm: one-time set-up (libraries' tables, caches) happens here */
  long long base = fa_live();
  fa_arm(~0ULL); /* counts, never fails */
  CHECK_OK(scenario());
  unsigned long long total = fa_attempts();
  fa_disarm();
  CHECK_EQ(fa_live(), base);
  unsigned long long failed = 0, completed = 0, k = stride(), only = only_n();
  for (unsigned long long n = 1; n <= total; n += k) {
    if (only != 0 && n != only)
      continue;
    unsigned long long first = fa_next_seq();
    failed_step = "";
    fa_arm(n);
    int rc = scenario();
    int hit = fa_failed();
    fa_disarm();
    if (rc != 0 && rc != ACCEL_ENOMEM) {
      fa_report_failure();
      TEST_FAIL("%s: allocation %llu of %llu failed: the scenario returned %s (%s)", name, n, total,
                accel_err_name(rc), failed_step);
    }
    if (rc != 0 && !hit)
      TEST_FAIL("%s: ENOMEM with no allocation failed (N = %llu)", name, n);
    if (fa_live() != base) {
      fa_report_failure();
      fa_report_leaks(first);
      TEST_FAIL("%s: allocation %llu of %llu failed: %lld block(s) leaked", name, n, total,
                fa_live() - base);
    }
    CHECK_OK(scenario()); /* serves again */
    rc == 0 ? completed++ : failed++;
  }
  printf("# %s: %llu allocations; failing each%s: %llu ENOMEM, %llu completed\n", name, total,
         k > 1 ? " (a stride of them)" : "", failed, completed);
}

TEST(runtime_survives_every_failed_allocation) {
  fail_each_allocation("runtime", scenario_runtime);
}

TEST(codec_survives_every_failed_allocation) {
  fail_each_allocation("codec", codec_round_trip);
}

TEST(embedded_op_path_survives_every_failed_allocation) {
  fail_each_allocation("embedded", scenario_embedded);
}

TEST(sync_waits_by_waiting_clients_survive_every_failed_allocation) {
  fail_each_allocation("embedded, sync", scenario_embedded_sync);
}

TEST(trace_render_survives_every_failed_allocation) {
  fail_each_allocation("trace", scenario_trace);
}

TEST(daemon_session_survives_every_failed_allocation) {
  snprintf(socket_url, sizeof socket_url, "ipc:///tmp/accel-oom-%d.sock", (int)getpid());
  fail_each_allocation("daemon", scenario_daemon);
  unlink(socket_url + strlen("ipc://"));
}

/* The same session with the server's I/O threads, so that the client's frames go through
 * shared rings. */
TEST(daemon_session_on_rings_survives_every_failed_allocation) {
  snprintf(socket_url, sizeof socket_url, "ipc:///tmp/accel-oom-%d.sock", (int)getpid());
  server_io_threads = 2;
  fail_each_allocation("daemon, rings", scenario_daemon);
  server_io_threads = 0;
  unlink(socket_url + strlen("ipc://"));
}

/* Transfers through shared memory (a 64 KiB write and read on the local link) free every
 * block they allocated, in the client and in the daemon, once the session is torn down. Run
 * whole, without failures. */
TEST(shared_memory_transfers_free_what_they_allocated) {
  snprintf(socket_url, sizeof socket_url, "ipc:///tmp/accel-oom-%d.sock", (int)getpid());
  CHECK_OK(daemon_session(true)); /* warm */
  long long base = fa_live();
  CHECK_OK(daemon_session(true));
  CHECK_EQ(fa_live(), base);
  unlink(socket_url + strlen("ipc://"));
}

static const test_case tests[] = {
    TEST_CASE(runtime_survives_every_failed_allocation),
    TEST_CASE(codec_survives_every_failed_allocation),
    TEST_CASE(embedded_op_path_survives_every_failed_allocation),
    TEST_CASE(sync_waits_by_waiting_clients_survive_every_failed_allocation),
    TEST_CASE(trace_render_survives_every_failed_allocation),
    TEST_CASE(daemon_session_survives_every_failed_allocation),
    TEST_CASE(daemon_session_on_rings_survives_every_failed_allocation),
    TEST_CASE(shared_memory_transfers_free_what_they_allocated),
};

static void install_first(void) __attribute__((constructor));
static void install_first(void) {
  fa_install(); /* before accel allocates anything */
}

TEST_MAIN(tests)
