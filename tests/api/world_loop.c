/* A device world on a loop of its own (dev_world_opts.loop): in a runtime of two loops, the
 * world's actors and a session of it are spawned on the second loop, and ops sent from this
 * thread (create, fill, read) complete there with the values asked for: the kernel actors'
 * completions, which come on a backend's thread, are handed to the world's loop, never to
 * loop 0 (acceld runs a world per loop). ThreadSanitizer (suite 'threads') would see a world
 * touched from two loops. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "../test.h"
#include "actors/device.h"
#include "actors/session.h"
#include "actors/world_init.h"

/* Large enough that the cpu backend's worker thread, not the submitting loop, finishes each op. */
enum { COUNT = 4 << 20, ROUNDS = 10, WAIT_MS = 30000, MSG_WHERE = ACCEL_MSG_USER };

static pthread_t world_thread; /* loop 1's, as an actor there saw it */
static atomic_int elsewhere;   /* completions that ran on another thread */

typedef struct waiter {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, status;
} waiter;

static waiter w8 = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static void op_done(dev_call *call, int status) {
  if (!pthread_equal(pthread_self(), world_thread))
    atomic_fetch_add(&elsewhere, 1);
  pthread_mutex_lock(&w8.mu);
  w8.done++;
  if (status != 0 && w8.status == 0)
    w8.status = status;
  pthread_cond_broadcast(&w8.cv);
  pthread_mutex_unlock(&w8.mu);
  dev_call_free(call);
}

/* Sends one op to the session and waits for its end: its status. */
static int run_op(accel_runtime *rt, accel_ref session, const dev_op *op) {
  dev_call *call = dev_call_alloc(NULL, op->h.kind);
  CHECK(call != NULL);
  call->op = *op;
  call->done = op_done;
  pthread_mutex_lock(&w8.mu);
  int want = w8.done + 1;
  w8.status = 0;
  pthread_mutex_unlock(&w8.mu);
  accel_msg m;
  dev_session_op_msg(&m, call);
  CHECK_OK(accel_tell(rt, session, &m));
  pthread_mutex_lock(&w8.mu);
  while (w8.done < want)
    pthread_cond_wait(&w8.cv, &w8.mu);
  int rc = w8.status;
  pthread_mutex_unlock(&w8.mu);
  return rc;
}

static int where_receive(accel_actor *self, void *state, accel_msg *msg) {
  world_thread = pthread_self();
  accel_reply(msg, 0, NULL, NULL);
  return 0;
}

static const accel_behavior where_b = {.name = "where", .receive = where_receive};

TEST(a_world_on_its_own_loop_completes_ops_there) {
  accel_runtime *rt = NULL;
  CHECK_OK(accel_runtime_create(&rt, &(accel_runtime_opts){.loops = 2}));
  dev_world_opts wo = {.cpu_devices = 1, .completion = ACCEL_COMPLETION_CALLBACK, .loop = 2};
  snprintf(wo.backends, sizeof wo.backends, "cpu");
  static dev_world world;
  CHECK_OK(dev_world_init(&world, rt, &wo));
  accel_ref devices, session, where;
  CHECK_OK(dev_world_spawn(&world, NULL, &devices));
  dev_session_args args = {.world = &world, .max_buffers = 16, .name = "test"};
  CHECK_OK(accel_spawn(rt, NULL, &dev_session_behavior, &args,
                       &(accel_spawn_opts){.name = "session", .loop = 2}, &session));
  CHECK_OK(accel_spawn(rt, NULL, &where_b, NULL, &(accel_spawn_opts){.loop = 2}, &where));
  CHECK_OK(accel_runtime_start(rt));
  accel_future *f = NULL;
  CHECK_OK(accel_ask(rt, where, &(accel_msg){.type = MSG_WHERE}, &f));
  CHECK_OK(accel_future_wait(f, WAIT_MS));
  accel_future_release(f);

  uint64_t handle = (uint64_t)1 << 32 | 1; /* slot 1, generation 1 */
  dev_op create = {.h = {.kind = DEV_OP_BUFFER_CREATE}, .nbufs = 1};
  create.bufs[0] = (dev_op_buf){.handle = handle, .count = COUNT};
  create.u.create.dtype = ACCEL_U32;
  CHECK_OK(run_op(rt, session, &create));
  static uint32_t host[COUNT];
  for (uint32_t r = 0; r < ROUNDS; r++) {
    dev_op fill = {.h = {.kind = DEV_OP_FILL, .device = 0}, .nbufs = 1};
    fill.bufs[0] = (dev_op_buf){.handle = handle, .access = DEV_WRITE_ALL, .count = COUNT};
    fill.u.fill.value = 1000 + r;
    CHECK_OK(run_op(rt, session, &fill));
    dev_op read = {.h = {.kind = DEV_OP_READ, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
    read.bufs[0] = (dev_op_buf){.handle = handle, .access = DEV_READ, .count = COUNT};
    read.u.read.dst = host;
    read.u.read.bytes = sizeof host;
    CHECK_OK(run_op(rt, session, &read));
    for (uint32_t i = 0; i < COUNT; i++)
      if (host[i] != 1000 + r)
        TEST_FAIL("round %u: element %u is %u", r, i, host[i]);
  }
  CHECK_EQ(atomic_load(&elsewhere), 0); /* every op ended on the world's loop */
  accel_runtime_stop(rt);
  accel_runtime_destroy(rt);
  dev_world_fini(&world);
}

static const test_case tests[] = {
    TEST_CASE(a_world_on_its_own_loop_completes_ops_there),
};

TEST_MAIN(tests)
