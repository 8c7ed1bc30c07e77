/* api-multi: several devices of one backend, the suite's members: copies straight between them
 * (peer copies), placement on ACCEL_DEVICE_ANY (where the inputs are, then the shortest queue),
 * and the collective package (all-reduce, broadcast, all-gather). Transfer counters are checked
 * exactly (accel_transfer_stats_get), every result against a reference computed here in float64
 * (or exactly, where the values make it exact), on fresh random inputs.
 *
 * The members are the CPU backend's devices by default (`cpu_devices=N`, each its own memory
 * node, the collectives through the CPU backend's implementation), so that the contract is
 * tested where there is no GPU. With ACCEL_TEST_MEMBERS=cuda they are the host's GPUs: the same
 * tests over real peer copies and NCCL, with as many GPUs as the host has up to what a test
 * asks for; a test that needs more than the host has is skipped, saying so.
 *
 * The devices are found by backend: with ACCEL_TEST_BACKENDS=opencl,cpu the OpenCL device
 * comes first and the CPU devices after it. */
#include <math.h>

#include "api_util.h"

/* The first device of another backend than cpu (a GPU, an OpenCL device), or -1. */
static accel_device other_dev(accel_ctx *ctx, const char *backend) {
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    CHECK_OK(accel_device_info(ctx, d, &info));
    if (strcmp(info.backend, "cpu") != 0 && (backend == NULL || strcmp(info.backend, backend) == 0))
      return d;
  }
  return -1;
}

/* ---- the members ---- */

static const char *members_backend(void) {
  const char *b = getenv("ACCEL_TEST_MEMBERS");
  return b != NULL && *b != '\0' ? b : "cpu";
}

static bool members_are_cpus(void) {
  return strcmp(members_backend(), "cpu") == 0;
}

static int member_count(accel_ctx *ctx) {
  int n = 0;
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    CHECK_OK(accel_device_info(ctx, d, &info));
    n += strcmp(info.backend, members_backend()) == 0;
  }
  return n;
}

/* The index of the k-th member. */
static accel_device member(accel_ctx *ctx, int k) {
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    CHECK_OK(accel_device_info(ctx, d, &info));
    if (strcmp(info.backend, members_backend()) == 0 && k-- == 0)
      return d;
  }
  TEST_FAIL("no %s device %d", members_backend(), k);
  return -1;
}

static char members_skip_[128];

/* A context with `want` members, or as many as the host has of another backend, at least
 * `least` (else NULL, the reason in members_skip_); *n: how many to use. `params`: more of the
 * URL ("" for none). GPUs are opened in their primary contexts where `collectives` (NCCL needs
 * them; collective.c), in their own otherwise (acceld's default). */
static accel_ctx *open_members(int want, int least, const char *params, bool collectives, int *n) {
  char url[256];
  const char *sep = *params ? "&" : "";
  char backends[48] = ""; /* the members' backend alone, unless params name the backends */
  if (!strstr(params, "backends="))
    snprintf(backends, sizeof backends, "backends=%s&", members_backend());
  if (members_are_cpus())
    snprintf(url, sizeof url, "embedded:?cpu_devices=%d%s%s", want, sep, params);
  else
    snprintf(url, sizeof url, "embedded:?%scuda_context=%s%s%s", backends,
             collectives ? "primary" : "own", sep, params);
  accel_ctx *ctx = ctx_open(url);
  int have = member_count(ctx);
  if (members_are_cpus())
    CHECK_EQ(have, want);
  if (have < least) {
    accel_close(ctx);
    snprintf(members_skip_, sizeof members_skip_, "needs %d %s devices, %d here", least,
             members_backend(), have);
    return NULL;
  }
  *n = have < want ? have : want;
  return ctx;
}

/* ctx = a context of up to `want` members, at least `least`, their number in n (open_members);
 * skips the test where there are too few. */
#define OPEN_MEMBERS(ctx, n, want, least, params, collectives)                                     \
  do {                                                                                             \
    if (((ctx) = open_members(want, least, params, collectives, &(n))) == NULL)                    \
      TEST_SKIP(members_skip_);                                                                    \
  } while (0)

#define CHECK_MOVED(ctx, what, h2d_, d2h_, d2d_)                                                   \
  do {                                                                                             \
    accel_transfer_stats s_ = moved_now(ctx);                                                      \
    if (s_.host_to_device != (h2d_) || s_.device_to_host != (d2h_) ||                              \
        s_.device_to_device != (d2d_))                                                             \
      TEST_FAIL("%s: h2d %" PRIu64 " d2h %" PRIu64 " d2d %" PRIu64 ", want %" PRIu64 " %" PRIu64   \
                " %" PRIu64,                                                                       \
                what, s_.host_to_device, s_.device_to_host, s_.device_to_device, (uint64_t)(h2d_), \
                (uint64_t)(d2h_), (uint64_t)(d2d_));                                               \
  } while (0)

static void check_same(const char *what, const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof got[i]) != 0)
      TEST_FAIL("%s[%zu] = %.9g, want %.9g", what, i, (double)got[i], (double)want[i]);
}

/* ---- peer copies ---- */

/* Data computed on one device and used on the others (two, or one where the host has only
 * two GPUs) moves device to device, once to each, and never through the host; the bytes are
 * the ones computed. */
TEST(peer_copies_move_device_to_device_once) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 3, 2, "", false);
  accel_device a = member(ctx, 0), b = member(ctx, 1), c = member(ctx, nm - 1);
  size_t n = rnd_range(1000, 100000), bytes = n * 4;
  uint64_t others = (uint64_t)(nm - 1) * bytes; /* once to each other member */
  float *x = rnd_floats(n, -3, 3), *y = xmalloc(bytes), *z = xmalloc(bytes);
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), Y = buf_new(ctx, ACCEL_F32, n);
  accel_buffer Z = buf_new(ctx, ACCEL_F32, n), W = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  CHECK_OK(accel_relu(ctx, a, Y, X, &f)); /* Y on a only */
  WAIT_OK(f);
  CHECK_MOVED(ctx, "Y computed on a", bytes, 0, 0);
  CHECK_OK(accel_relu(ctx, b, Z, Y, &f));
  WAIT_OK(f);
  CHECK_MOVED(ctx, "Y used on b", bytes, 0, bytes);
  CHECK_OK(accel_relu(ctx, c, W, Y, &f)); /* c is b with two members: valid there already */
  WAIT_OK(f);
  CHECK_OK(accel_relu(ctx, b, W, Y, &f)); /* valid on b already */
  WAIT_OK(f);
  CHECK_MOVED(ctx, "Y used on c, and on b again", bytes, 0, others);
  read_sync(ctx, Z, 0, z, n);
  read_sync(ctx, W, 0, y, n);
  for (size_t i = 0; i < n; i++)
    x[i] = x[i] > 0 ? x[i] : 0;
  check_same("relu(relu(x)) on b", z, x, n);
  check_same("relu(relu(x)) on b, from c's copy", y, x, n);
  CHECK_MOVED(ctx, "reads", bytes, 0, others);
  accel_close(ctx);
  free(x);
  free(y);
  free(z);
}

/* A source device that faults while another device copies from it: the copy completes with
 * the right bytes or its op fails with a clean error; nothing reads freed memory (ASan) and
 * both devices serve again afterwards. */
TEST(a_peer_source_that_faults_loses_nothing_silently) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 2, 2, "fault_injection=1&max_restarts=8", false);
  accel_device a = member(ctx, 0), b = member(ctx, 1);
  size_t n = (size_t)test_scaled(4 << 20, 1 << 16), bytes = n * 4;
  float *x = rnd_floats(n, -3, 3), *out = xmalloc(bytes);
  for (int round = 0; round < 4; round++) {
    accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), Y = buf_new(ctx, ACCEL_F32, n);
    accel_buffer Z = buf_new(ctx, ACCEL_F32, n);
    accel_future *f = NULL, *g = NULL;
    CHECK_OK(accel_relu(ctx, a, Y, X, &f)); /* Y on a only */
    WAIT_OK(f);
    CHECK_OK(accel_relu(ctx, b, Z, Y, &g)); /* a peer copy from a, then relu on b */
    CHECK_OK(accel_inject_fault(ctx, a));
    int rc = fut_status(g);
    if (rc == 0) {
      read_sync(ctx, Z, 0, out, n);
      for (size_t i = 0; i < n; i++)
        if (out[i] != (x[i] > 0 ? x[i] : 0))
          TEST_FAIL("round %d: z[%zu] = %g after a fault of the source", round, i, (double)out[i]);
    } else if (rc != ACCEL_EDATALOST && rc != ACCEL_EDEVLOST) {
      TEST_FAIL("round %d: the op on b failed with %s", round, accel_err_name(rc));
    }
    struct accel_device_info info;
    device_wait(ctx, a, 0, (uint32_t)round + 1, &info);
    CHECK_OK(accel_buffer_destroy(ctx, X));
    CHECK_OK(accel_buffer_destroy(ctx, Y));
    CHECK_OK(accel_buffer_destroy(ctx, Z));
  }
  accel_close(ctx);
  free(x);
  free(out);
}

/* Between devices of two backends (a CPU device and a GPU or OpenCL device) data goes
 * through the host: one device->host and one host->device copy each way, no peer copy. */
TEST(different_backends_exchange_through_the_host) {
  accel_ctx *ctx = ctx_open(NULL);
  accel_device c = cpu_dev(ctx, 0), o = other_dev(ctx, NULL);
  if (o < 0) {
    accel_close(ctx);
    TEST_SKIP("no device of another backend here");
  }
  size_t n = rnd_range(1000, 100000), bytes = n * 4;
  float *x = rnd_floats(n, -3, 3), *out = xmalloc(bytes);
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), Y = buf_new(ctx, ACCEL_F32, n);
  accel_buffer Z = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  CHECK_OK(accel_relu(ctx, c, Y, X, &f)); /* Y on the cpu device only */
  WAIT_OK(f);
  CHECK_OK(accel_relu(ctx, o, Z, Y, &f)); /* Y to the other device, through the host */
  WAIT_OK(f);
  CHECK_MOVED(ctx, "cpu -> other", 2 * bytes, bytes, 0);
  CHECK_OK(accel_relu(ctx, c, Y, Z, &f)); /* Z back, through the host */
  WAIT_OK(f);
  CHECK_MOVED(ctx, "other -> cpu", 3 * bytes, 2 * bytes, 0);
  read_sync(ctx, Y, 0, out, n);
  for (size_t i = 0; i < n; i++)
    x[i] = x[i] > 0 ? x[i] : 0;
  check_same("relu x3", out, x, n);
  accel_close(ctx);
  free(x);
  free(out);
}

/* A peer copy that waits behind a long queue on its destination while its source restarts,
 * and meanwhile the source gets new memory for the same buffer (a later op there; a block of
 * NaNs from the cache): the copy must not take that memory for the data. Either the op that needed
 * the copy succeeds with the right bytes (the copy ran before the fault) or it fails with
 * ACCEL_EDATALOST; the same for the later op on the source. Device b's mem queue is held with
 * copies of a large buffer (more than the 128 tasks a queue takes at once), so the peer copy waits
 * in its kernel actor while the fault and the restart happen. */
TEST(a_peer_copy_planned_before_its_source_restarted_takes_no_new_memory) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 2, 2, "fault_injection=1&max_restarts=8", false);
  accel_device a = member(ctx, 0), b = member(ctx, 1);
  enum { HOLD = 200 };
  size_t n = rnd_range(1000, 50000), big = (size_t)test_scaled(16 << 20, 1 << 16);
  float *x = rnd_floats(n, -3, 3), *out = xmalloc(n * 4);
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), Y = buf_new(ctx, ACCEL_F32, n);
  accel_buffer Z = buf_new(ctx, ACCEL_F32, n), W = buf_new(ctx, ACCEL_F32, n);
  accel_buffer H1 = buf_new(ctx, ACCEL_F32, big), H2 = buf_new(ctx, ACCEL_F32, big);
  accel_future *f = NULL, *g = NULL, *h = NULL;
  CHECK_OK(accel_fill(ctx, b, H1, 1.0, &f));
  WAIT_OK(f);
  CHECK_OK(accel_relu(ctx, a, Y, X, &f)); /* Y on a only */
  WAIT_OK(f);
  for (int i = 0; i < HOLD; i++) /* b's mem queue: long */
    CHECK_OK(accel_copy(ctx, b, i % 2 ? H1 : H2, 0, i % 2 ? H2 : H1, 0, big, NULL));
  CHECK_OK(accel_relu(ctx, b, Z, Y, &g)); /* a peer copy a -> b, behind them */
  accel_buffer T = buf_new(ctx, ACCEL_F32, 1);
  CHECK_OK(accel_fill(ctx, a, T, 2.0, &f)); /* done: the session has planned the relu */
  WAIT_OK(f);
  CHECK_OK(accel_inject_fault(ctx, a));
  struct accel_device_info info;
  device_wait(ctx, a, 0, 1, &info);
  /* a block of Y's size full of NaN in a's cache: the memory Y gets there next */
  accel_buffer P = buf_new(ctx, ACCEL_F32, n);
  CHECK_OK(accel_fill(ctx, a, P, NAN, &f));
  WAIT_OK(f);
  CHECK_OK(accel_buffer_destroy(ctx, P));
  CHECK_OK(accel_relu(ctx, a, W, Y, &h)); /* Y on a again: new memory there */
  int rg = fut_status(g), rh = fut_status(h);
  for (size_t i = 0; i < n; i++)
    x[i] = x[i] > 0 ? x[i] : 0;
  if (rg == 0) {
    read_sync(ctx, Z, 0, out, n);
    check_same("relu(Y) on b", out, x, n);
  } else {
    CHECK_ERR(rg, ACCEL_EDATALOST);
  }
  if (rh == 0) {
    read_sync(ctx, W, 0, out, n);
    check_same("relu(Y) on a after its restart", out, x, n);
  } else {
    CHECK_ERR(rh, ACCEL_EDATALOST);
  }
  printf("# peer copy: %s; the op on the restarted source: %s\n", accel_err_name(rg),
         accel_err_name(rh));
  int rf = accel_finish(ctx, -1); /* it reports those failures again */
  if (!(rf == 0 || rf == ACCEL_EDATALOST))
    TEST_FAIL("accel_finish: %s", accel_err_name(rf));
  accel_close(ctx);
  free(x);
  free(out);
}

/* ---- placement ---- */

/* Y = sigmoid(X) on d, then Z = tanh(Y) on ANY, each waited for: what the second moved (each
 * count after accel_finish). */
static accel_transfer_stats any_after_one_on(accel_ctx *ctx, accel_device d, accel_buffer X,
                                             accel_buffer Y, accel_buffer Z) {
  accel_future *f = NULL;
  CHECK_OK(accel_sigmoid(ctx, d, Y, X, &f));
  WAIT_OK(f);
  accel_transfer_stats before = moved_now(ctx);
  CHECK_OK(accel_tanh(ctx, ACCEL_DEVICE_ANY, Z, Y, &f));
  WAIT_OK(f);
  accel_transfer_stats after = moved_now(ctx);
  return (accel_transfer_stats){.host_to_device = after.host_to_device - before.host_to_device,
                                .device_to_device = after.device_to_device -
                                                    before.device_to_device};
}

/* ACCEL_DEVICE_ANY runs an op where its inputs are: computed on device b, used by an op on
 * ANY, the result is on b (and nothing moved); the same with the data on a. */
TEST(any_runs_where_the_inputs_are) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 2, 2, "", false);
  size_t n = rnd_range(1000, 100000);
  float *x = rnd_floats(n, -3, 3);
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), Y = buf_new(ctx, ACCEL_F32, n);
  accel_buffer Z = buf_new(ctx, ACCEL_F32, n), S = buf_new(ctx, ACCEL_F32, n);
  for (int k = 1; k >= 0; k--) {
    accel_device d = member(ctx, k);
    accel_transfer_stats moved = any_after_one_on(ctx, d, X, Y, Z);
    CHECK_EQ(moved.host_to_device, 0);
    CHECK_EQ(moved.device_to_device, 0);
    CHECK(valid_on(ctx, d, Z, S));
  }
  accel_close(ctx);
  free(x);
}

/* accel_finish waits for the transfers its ops brought about, not only for the ops: an op
 * may complete before the copy it waited for reaches the loop (the device ran them in order,
 * their completions came back in any order), and a copy still counted as queued would make
 * the next op on ANY avoid its device. Many rounds, each with a copy from the host. */
TEST(accel_finish_waits_for_the_transfers_of_its_ops) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 2, 2, "", false);
  size_t n = 4096;
  float *x = rnd_floats(n, -3, 3);
  accel_buffer Y = buf_new(ctx, ACCEL_F32, n), Z = buf_new(ctx, ACCEL_F32, n);
  for (int round = 0; round < 300; round++) {
    accel_device d = member(ctx, round % 2);
    accel_buffer X = buf_new(ctx, ACCEL_F32, n);  /* new: valid nowhere */
    CHECK_OK(accel_write(ctx, X, 0, x, n, NULL)); /* on the host: the sigmoid copies it */
    accel_transfer_stats moved = any_after_one_on(ctx, d, X, Y, Z);
    if (moved.device_to_device != 0)
      TEST_FAIL("round %d: the op on ANY moved %llu bytes between devices", round,
                (unsigned long long)moved.device_to_device);
    CHECK_OK(accel_buffer_destroy(ctx, X));
  }
  accel_close(ctx);
  free(x);
}

/* The side of the gemms that keep a device busy for tens of milliseconds. */
static int busy_side(void) {
  return members_are_cpus() ? 640 : 4096;
}

/* With its inputs on the host (as far from one device as from the other), an op on ANY goes
 * to the device whose queue is shorter: device a has a batch of gemms queued, so the op runs
 * on b. (The gemms take tens of milliseconds; the op is submitted right behind them.) On a
 * machine so loaded that a's gemms were all done before the op was submitted or done, a may
 * have been idle too and the premise did not hold: the round is run again, with twice the
 * gemms, 3 times at most. */
static void idle_device_round(int gemms, bool *busy) {
  *busy = true; /* a round that does not run (OPEN_MEMBERS skips) is not run again */
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 2, 2, members_are_cpus() ? "backends=cpu" : "", false); /* members only */
  accel_device a = member(ctx, 0), b = member(ctx, 1);
  const int side = busy_side();
  size_t n = rnd_range(1000, 50000);
  float *m = rnd_floats(side * side, -1, 1), *x = rnd_floats(n, -3, 3);
  accel_buffer A = buf_from(ctx, ACCEL_F32, m, side * side), *C = calloc(gemms, sizeof *C);
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), Z = buf_new(ctx, ACCEL_F32, n);
  accel_buffer S = buf_new(ctx, ACCEL_F32, n);
  accel_future **gf = calloc(gemms, sizeof *gf), *f = NULL;
  for (int i = 0; i < gemms; i++)
    C[i] = buf_new(ctx, ACCEL_F32, side * side);
  for (int i = 0; i < gemms; i++)
    CHECK_OK(accel_sgemm(ctx, a, ACCEL_NO_TRANS, ACCEL_NO_TRANS, side, side, side, 1.0f, A, side, A,
                         side, 0.0f, C[i], side, &gf[i]));
  *busy = accel_future_poll(gf[gemms - 1]) == ACCEL_EAGAIN; /* a still has work queued */
  CHECK_OK(accel_tanh(ctx, ACCEL_DEVICE_ANY, Z, X, &f));
  WAIT_OK(f);
  /* ... and still has once the op is done, so it had when the op was placed (a loaded
   * machine may run the test's thread late: the gemms done before the op reached the loop).
   * An op placed on a wrongly still fails: beside the gemms it leaves them running (another
   * queue) and is then not on b; behind them it finds them done, every round. */
  *busy = *busy && accel_future_poll(gf[gemms - 1]) == ACCEL_EAGAIN;
  for (int i = 0; i < gemms; i++)
    WAIT_OK(gf[i]);
  if (*busy)
    CHECK(valid_on(ctx, b, Z, S));
  else
    printf("# a's %d gemms were done before the op was done: again\n", gemms);
  accel_close(ctx);
  free(C);
  free(gf);
  free(m);
  free(x);
}

TEST(any_runs_on_the_idle_device) {
  int gemms = 6;
  bool busy = false;
  for (int round = 0; !busy; round++, gemms *= 2) {
    CHECK_LT(round, 3);
    idle_device_round(gemms, &busy);
  }
}

/* The other side of the trade: inputs much larger than what a few queued tasks weigh (1 MiB
 * each) keep the op where they are, even with that device busy and the other idle. */
TEST(any_stays_with_large_inputs_on_a_busy_device) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 2, 2, members_are_cpus() ? "backends=cpu" : "", false);
  accel_device b = member(ctx, 1);
  enum { GEMMS = 3 };
  const int side = busy_side();
  size_t n = (size_t)16 << 20; /* 64 MiB of F32 */
  float *m = rnd_floats(side * side, -1, 1), *x = rnd_floats(n, -3, 3);
  accel_buffer A = buf_from(ctx, ACCEL_F32, m, side * side), C[GEMMS];
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), Y = buf_new(ctx, ACCEL_F32, n);
  accel_buffer Z = buf_new(ctx, ACCEL_F32, n), S = buf_new(ctx, ACCEL_F32, n);
  accel_future *gf[GEMMS], *f = NULL;
  for (int i = 0; i < GEMMS; i++)
    C[i] = buf_new(ctx, ACCEL_F32, side * side);
  CHECK_OK(accel_relu(ctx, b, Y, X, &f)); /* Y: 64 MiB on b only */
  WAIT_OK(f);
  for (int i = 0; i < GEMMS; i++)
    CHECK_OK(accel_sgemm(ctx, b, ACCEL_NO_TRANS, ACCEL_NO_TRANS, side, side, side, 1.0f, A, side, A,
                         side, 0.0f, C[i], side, &gf[i]));
  CHECK_OK(accel_tanh(ctx, ACCEL_DEVICE_ANY, Z, Y, &f));
  WAIT_OK(f);
  for (int i = 0; i < GEMMS; i++)
    WAIT_OK(gf[i]);
  CHECK(valid_on(ctx, b, Z, S));
  accel_close(ctx);
  free(m);
  free(x);
}

/* ---- collectives ---- */

enum { MAX_DEV = ACCEL_COLLECTIVE_MAX_DEVICES };

static size_t esize(accel_dtype t) {
  return t == ACCEL_F64 ? 8 : t == ACCEL_F16 || t == ACCEL_BF16 ? 2 : 4;
}

/* Values that are exact in every float type here: multiples of 1/4 in [-8, 8]. */
static double rnd_quarter(void) {
  return ((double)rnd_range(0, 64) - 32.0) / 4.0;
}

/* An exactly representable value as an element of t. */
static void store(accel_dtype t, void *p, size_t i, double v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  switch (t) {
  case ACCEL_F64:
    ((double *)p)[i] = v;
    break;
  case ACCEL_F32:
    ((float *)p)[i] = f;
    break;
  case ACCEL_BF16:
    ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
    break;
  default: { /* F16: v is 0 or a normal number with at most 11 significant bits */
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    ((uint16_t *)p)[i] = f == 0.0f ? sign : (uint16_t)(sign | e << 10 | ((u >> 13) & 0x3ff));
  }
  }
}

static double load(accel_dtype t, const void *p, size_t i) {
  switch (t) {
  case ACCEL_F64:
    return ((const double *)p)[i];
  case ACCEL_F32:
    return ((const float *)p)[i];
  case ACCEL_BF16: {
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  default: {
    uint16_t h = ((const uint16_t *)p)[i];
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
  }
  }
}

static double reduce_ref(accel_reduce op, double a, double b) {
  switch (op) {
  case ACCEL_REDUCE_PROD:
    return a * b;
  case ACCEL_REDUCE_MIN:
    return b < a ? b : a;
  case ACCEL_REDUCE_MAX:
    return b > a ? b : a;
  default:
    return a + b;
  }
}

/* n buffers of `count` elements of t on the first n members, filled with host data. */
typedef struct coll_set {
  accel_ctx *ctx;
  accel_device dev[MAX_DEV];
  accel_buffer buf[MAX_DEV];
  void *host[MAX_DEV];
  uint32_t n;
  size_t count;
  accel_dtype t;
} coll_set;

static void coll_make(coll_set *s, accel_ctx *ctx, uint32_t n, accel_dtype t, size_t count,
                      bool quarters) {
  *s = (coll_set){.ctx = ctx, .n = n, .count = count, .t = t};
  for (uint32_t i = 0; i < n; i++) {
    s->dev[i] = member(ctx, (int)i);
    s->host[i] = xmalloc(count * esize(t) + 1);
    for (size_t j = 0; j < count; j++)
      store(t, s->host[i], j, quarters ? rnd_quarter() : (double)rnd_float(-2.0f, 2.0f));
    s->buf[i] = buf_from(ctx, t, s->host[i], count);
  }
}

static void coll_free(coll_set *s) {
  for (uint32_t i = 0; i < s->n; i++) {
    CHECK_OK(accel_buffer_destroy(s->ctx, s->buf[i]));
    free(s->host[i]);
  }
}

/* Every buffer read back equals the reduction of the inputs: exactly for MIN, MAX and for
 * values that make the sum exact, else within `tol` relative to the sum of magnitudes. */
static void check_all_reduce(coll_set *s, accel_reduce op, double tol) {
  void *got = xmalloc(s->count * esize(s->t) + 1);
  for (uint32_t i = 0; i < s->n; i++) {
    read_sync(s->ctx, s->buf[i], 0, got, s->count);
    for (size_t j = 0; j < s->count; j++) {
      double want = load(s->t, s->host[0], j), mag = fabs(want);
      for (uint32_t k = 1; k < s->n; k++) {
        double v = load(s->t, s->host[k], j);
        want = reduce_ref(op, want, v);
        mag = op == ACCEL_REDUCE_PROD ? mag * fabs(v) : mag + fabs(v);
      }
      double g = load(s->t, got, j);
      if (!(fabs(g - want) <= tol * mag))
        TEST_FAIL("all-reduce op %d dtype %d over %u: buf %u [%zu] = %.17g, want %.17g", op,
                  (int)s->t, s->n, i, j, g, want);
    }
  }
  free(got);
}

/* F32 and F64 on random values, every reduction: F32 sums within 4 ulp of the sum of
 * magnitudes per device, F64 within 1e-15. */
TEST(all_reduce_matches_a_float64_reference) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 3, 2, "", true);
  accel_dtype types[] = {ACCEL_F32, ACCEL_F64};
  for (int ti = 0; ti < 2; ti++)
    for (int op = ACCEL_REDUCE_SUM; op <= ACCEL_REDUCE_MAX; op++) {
      coll_set s;
      uint32_t n = (uint32_t)rnd_range(2, (size_t)nm);
      coll_make(&s, ctx, n, types[ti], rnd_range(1, 20000), false);
      accel_future *f = NULL;
      CHECK_OK(accel_all_reduce(ctx, s.dev, s.buf, n, (accel_reduce)op, &f));
      WAIT_OK(f);
      check_all_reduce(&s, (accel_reduce)op, types[ti] == ACCEL_F32 ? 4 * 0x1p-24 * n : 1e-15);
      coll_free(&s);
    }
  accel_close(ctx);
}

/* F16 and BF16 on quarters: every sum, minimum and maximum is exact. */
TEST(all_reduce_of_16_bit_floats_is_exact_on_exact_values) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 3, 2, "", true);
  accel_dtype types[] = {ACCEL_F16, ACCEL_BF16};
  accel_reduce ops[] = {ACCEL_REDUCE_SUM, ACCEL_REDUCE_MIN, ACCEL_REDUCE_MAX};
  for (int ti = 0; ti < 2; ti++)
    for (int oi = 0; oi < 3; oi++) {
      coll_set s;
      coll_make(&s, ctx, (uint32_t)nm, types[ti], rnd_range(1, 5000), true);
      accel_future *f = NULL;
      CHECK_OK(accel_all_reduce(ctx, s.dev, s.buf, s.n, ops[oi], &f));
      WAIT_OK(f);
      check_all_reduce(&s, ops[oi], 0.0);
      coll_free(&s);
    }
  accel_close(ctx);
}

/* The data moves as for any op: each buffer written on the host is brought to its device
 * once; afterwards each is valid on its device, and a read takes it from there. */
TEST(all_reduce_moves_each_buffer_to_its_device_once) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 3, 2, "", true);
  coll_set s;
  coll_make(&s, ctx, (uint32_t)nm, ACCEL_F32, rnd_range(1000, 20000), true);
  uint64_t bytes = s.count * 4 * s.n;
  accel_future *f = NULL;
  CHECK_OK(accel_all_reduce(ctx, s.dev, s.buf, s.n, ACCEL_REDUCE_SUM, &f));
  WAIT_OK(f);
  CHECK_MOVED(ctx, "all-reduce of host data", bytes, 0, 0);
  check_all_reduce(&s, ACCEL_REDUCE_SUM, 0.0);
  CHECK_MOVED(ctx, "after the reads", bytes, 0, 0);
  CHECK_OK(accel_all_reduce(ctx, s.dev, s.buf, s.n, ACCEL_REDUCE_SUM, &f)); /* again: in place */
  WAIT_OK(f);
  CHECK_MOVED(ctx, "a second all-reduce", bytes, 0, 0);
  coll_free(&s);
  accel_close(ctx);
}

/* The most devices a collective takes (8, as many CPU devices as a context opens), and one
 * more refused. */
TEST(all_reduce_over_the_most_devices) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, MAX_DEV, MAX_DEV, "", true);
  coll_set s;
  coll_make(&s, ctx, MAX_DEV, ACCEL_F64, rnd_range(1, 3000), true);
  accel_future *f = NULL;
  CHECK_OK(accel_all_reduce(ctx, s.dev, s.buf, MAX_DEV, ACCEL_REDUCE_SUM, &f));
  WAIT_OK(f);
  check_all_reduce(&s, ACCEL_REDUCE_SUM, 0.0);
  accel_device dev9[MAX_DEV + 1];
  accel_buffer buf9[MAX_DEV + 1];
  memcpy(dev9, s.dev, sizeof s.dev);
  memcpy(buf9, s.buf, sizeof s.buf);
  dev9[MAX_DEV] = s.dev[0];
  buf9[MAX_DEV] = s.buf[0];
  f = FUT_SENTINEL;
  CHECK_ERR(accel_all_reduce(ctx, dev9, buf9, MAX_DEV + 1, ACCEL_REDUCE_SUM, &f), ACCEL_EINVAL);
  CHECK(f == FUT_SENTINEL);
  coll_free(&s);
  accel_close(ctx);
}

/* Every buffer equals the root's, bit for bit, whichever device is the root. */
TEST(broadcast_copies_the_root_everywhere) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 3, 2, "", true);
  for (uint32_t root = 0; root < (uint32_t)nm; root++) {
    coll_set s;
    coll_make(&s, ctx, (uint32_t)nm, ACCEL_F32, rnd_range(1, 30000), false);
    accel_future *f = NULL;
    CHECK_OK(accel_broadcast(ctx, s.dev, s.buf, s.n, root, &f));
    WAIT_OK(f);
    float *got = xmalloc(s.count * 4);
    for (uint32_t i = 0; i < s.n; i++) {
      read_sync(ctx, s.buf[i], 0, got, s.count);
      check_same("broadcast", got, s.host[root], s.count);
    }
    free(got);
    coll_free(&s);
  }
  accel_close(ctx);
}

/* Every receive buffer holds the sends in device order, bit for bit. */
TEST(all_gather_concatenates_in_device_order) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 3, 2, "", true);
  coll_set s;
  coll_make(&s, ctx, (uint32_t)nm, ACCEL_F64, rnd_range(1, 10000), false);
  accel_buffer recv[3];
  for (int i = 0; i < nm; i++)
    recv[i] = buf_new(ctx, ACCEL_F64, s.n * s.count);
  accel_future *f = NULL;
  CHECK_OK(accel_all_gather(ctx, s.dev, s.buf, recv, s.n, &f));
  WAIT_OK(f);
  double *got = xmalloc(s.n * s.count * 8);
  for (int i = 0; i < nm; i++) {
    read_sync(ctx, recv[i], 0, got, s.n * s.count);
    for (int k = 0; k < nm; k++)
      CHECK(memcmp(got + (size_t)k * s.count, s.host[k], s.count * 8) == 0);
  }
  for (int i = 0; i < nm; i++)
    CHECK_OK(accel_buffer_destroy(ctx, recv[i]));
  free(got);
  coll_free(&s);
  accel_close(ctx);
}

/* Each bad argument is refused by the call, with no future made. Over nm members (3, or 2
 * GPUs): the odd one out in each list is its last (L) or its second element. */
TEST(collectives_refuse_bad_arguments) {
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 3, 2, "", true);
  uint32_t n = (uint32_t)nm, L = n - 1;
  coll_set s;
  coll_make(&s, ctx, n, ACCEL_F32, 64, true);
  accel_buffer other = buf_new(ctx, ACCEL_F32, 65), ints = buf_new(ctx, ACCEL_U32, 64);
  accel_buffer f64 = buf_new(ctx, ACCEL_F64, 64), big[3];
  for (uint32_t i = 0; i < n; i++)
    big[i] = buf_new(ctx, ACCEL_F32, n * 64);
  accel_device dev[3], dup[3], out[3], any[3];
  accel_buffer b[3], same[3], longer[3], u32[3], mixed[3], short_recv[3], self_recv[3];
  memcpy(dev, s.dev, sizeof dev);
  memcpy(b, s.buf, sizeof b);
  memcpy(dup, dev, sizeof dev);
  memcpy(out, dev, sizeof dev);
  memcpy(any, dev, sizeof dev);
  dup[L] = dev[0];
  out[L] = 99;
  any[1] = ACCEL_DEVICE_ANY;
  memcpy(same, b, sizeof b);
  memcpy(longer, b, sizeof b);
  memcpy(u32, b, sizeof b);
  memcpy(mixed, b, sizeof b);
  same[L] = b[0];
  longer[L] = other;
  u32[0] = ints;
  mixed[1] = f64;
  memcpy(short_recv, big, sizeof big);
  memcpy(self_recv, big, sizeof big);
  short_recv[L] = other;
  self_recv[L] = b[L];
  accel_future *f = FUT_SENTINEL;
#define REFUSED(call)                                                                              \
  do {                                                                                             \
    CHECK_ERR(call, ACCEL_EINVAL);                                                                 \
    CHECK(f == FUT_SENTINEL);                                                                      \
  } while (0)
  REFUSED(accel_all_reduce(ctx, dev, b, 0, ACCEL_REDUCE_SUM, &f));
  REFUSED(accel_all_reduce(ctx, dev, b, n, (accel_reduce)4, &f));
  REFUSED(accel_all_reduce(NULL, dev, b, n, ACCEL_REDUCE_SUM, &f));
  REFUSED(accel_all_reduce(ctx, NULL, b, n, ACCEL_REDUCE_SUM, &f));
  REFUSED(accel_broadcast(ctx, dev, b, n, n, &f)); /* root past the devices */
  REFUSED(accel_all_gather(ctx, dev, b, NULL, n, &f));
  REFUSED(accel_all_reduce(ctx, dup, b, n, ACCEL_REDUCE_SUM, &f));
  REFUSED(accel_all_reduce(ctx, out, b, n, ACCEL_REDUCE_SUM, &f));
  REFUSED(accel_all_reduce(ctx, any, b, n, ACCEL_REDUCE_SUM, &f));
  REFUSED(accel_all_reduce(ctx, dev, same, n, ACCEL_REDUCE_SUM, &f));
  REFUSED(accel_all_reduce(ctx, dev, longer, n, ACCEL_REDUCE_SUM, &f));
  REFUSED(accel_broadcast(ctx, dev, longer, n, 0, &f));
  REFUSED(accel_all_reduce(ctx, dev, u32, n, ACCEL_REDUCE_SUM, &f));
  REFUSED(accel_all_reduce(ctx, dev, mixed, n, ACCEL_REDUCE_SUM, &f));
  REFUSED(accel_all_gather(ctx, dev, b, short_recv, n, &f));
  REFUSED(accel_all_gather(ctx, dev, b, self_recv, n, &f));
  f = NULL; /* and the right ones pass */
  CHECK_OK(accel_all_gather(ctx, dev, b, big, n, &f));
  WAIT_OK(f);
  CHECK_OK(accel_buffer_destroy(ctx, other));
  CHECK_OK(accel_buffer_destroy(ctx, ints));
  CHECK_OK(accel_buffer_destroy(ctx, f64));
  for (uint32_t i = 0; i < n; i++)
    CHECK_OK(accel_buffer_destroy(ctx, big[i]));
  coll_free(&s);
  accel_close(ctx);
}

/* A collective over devices of different backends cannot run (ACCEL_ENOTSUP in its future);
 * one over a quarantined device fails with ACCEL_EDEVLOST; the others go on serving. (GPU
 * members are opened beside a CPU device, for the mixed case.) */
TEST(collectives_need_serving_devices_of_one_backend) {
  char params[96] = "fault_injection=1&max_restarts=1";
  if (!members_are_cpus())
    snprintf(params, sizeof params, "backends=%s,cpu&fault_injection=1&max_restarts=1",
             members_backend());
  accel_ctx *ctx;
  int nm;
  OPEN_MEMBERS(ctx, nm, 2, 2, params, true);
  accel_device a = member(ctx, 0), b = member(ctx, 1);
  accel_buffer x = buf_new(ctx, ACCEL_F32, 100), y = buf_new(ctx, ACCEL_F32, 100);
  accel_buffer xy[2] = {x, y};
  accel_future *f = NULL;
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    CHECK_OK(accel_device_info(ctx, d, &info));
    if (strcmp(info.backend, members_backend()) == 0)
      continue;
    accel_device mixed[2] = {a, d};
    CHECK_OK(accel_all_reduce(ctx, mixed, xy, 2, ACCEL_REDUCE_SUM, &f));
    CHECK_ERR(fut_status(f), ACCEL_ENOTSUP);
  }
  accel_device ab[2] = {a, b};
  CHECK_OK(accel_all_reduce(ctx, ab, xy, 2, ACCEL_REDUCE_SUM, &f));
  WAIT_OK(f);
  struct accel_device_info info;
  CHECK_OK(accel_inject_fault(ctx, b));
  device_wait(ctx, b, 0, 1, &info); /* restarted once: the limit */
  CHECK_OK(accel_inject_fault(ctx, b));
  device_wait(ctx, b, 2, 0, &info); /* quarantined */
  CHECK_OK(accel_all_reduce(ctx, ab, xy, 2, ACCEL_REDUCE_SUM, &f));
  CHECK_ERR(fut_status(f), ACCEL_EDEVLOST);
  CHECK_OK(accel_fill(ctx, a, x, 1.0, &f));
  WAIT_OK(f);
  accel_close(ctx);
}

/* A collective through NCCL over the first CUDA device alone (in its primary context, which
 * the URL asks for: through acceld, its config's cuda_context): all-reduce is the identity,
 * broadcast too, all-gather a copy; checked exactly. */
TEST(collectives_over_one_gpu) {
  accel_ctx *ctx = ctx_open("embedded:?cuda_context=primary");
  accel_device g = other_dev(ctx, "cuda");
  struct accel_device_info info = {0};
  if (g >= 0)
    CHECK_OK(accel_device_info(ctx, g, &info));
  if (!(info.packages & ACCEL_PKG_COLLECTIVE) || info.collective_dtypes == 0) {
    accel_close(ctx);
    TEST_SKIP(g < 0 ? "no CUDA device here"
                    : "the CUDA device runs no collectives (NCCL missing, or not in its primary "
                      "context)");
  }
  size_t n = rnd_range(1, 1 << 20);
  float *x = rnd_floats(n, -3, 3), *out = xmalloc(n * 4 + 4);
  accel_buffer X = buf_from(ctx, ACCEL_F32, x, n), R = buf_new(ctx, ACCEL_F32, n);
  accel_future *f = NULL;
  for (int op = ACCEL_REDUCE_SUM; op <= ACCEL_REDUCE_MAX; op++) {
    CHECK_OK(accel_all_reduce(ctx, &g, &X, 1, (accel_reduce)op, &f));
    WAIT_OK(f);
  }
  CHECK_OK(accel_broadcast(ctx, &g, &X, 1, 0, &f));
  WAIT_OK(f);
  CHECK_OK(accel_all_gather(ctx, &g, &X, &R, 1, &f));
  WAIT_OK(f);
  read_sync(ctx, X, 0, out, n);
  check_same("X after all-reduce and broadcast over one GPU", out, x, n);
  read_sync(ctx, R, 0, out, n);
  check_same("all-gather over one GPU", out, x, n);
  accel_close(ctx);
  free(x);
  free(out);
}

/* The URL chooses the CUDA devices' context: own (the default) or primary; nothing else. */
TEST(the_url_takes_own_or_primary_cuda_contexts) {
  EMBEDDED_ONLY();
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, test_url_("embedded:?cuda_context=primary")));
  accel_close(ctx);
  CHECK_OK(accel_open(&ctx, test_url_("embedded:?cuda_context=own")));
  accel_close(ctx);
  ctx = NULL;
  CHECK_ERR(accel_open(&ctx, test_url_("embedded:?cuda_context=shared")), ACCEL_EINVAL);
  CHECK(ctx == NULL);
}

static const test_case tests[] = {
    TEST_CASE(peer_copies_move_device_to_device_once),
    TEST_CASE(a_peer_source_that_faults_loses_nothing_silently),
    TEST_CASE(different_backends_exchange_through_the_host),
    TEST_CASE(a_peer_copy_planned_before_its_source_restarted_takes_no_new_memory),
    TEST_CASE(any_runs_where_the_inputs_are),
    TEST_CASE(accel_finish_waits_for_the_transfers_of_its_ops),
    TEST_CASE(any_runs_on_the_idle_device),
    TEST_CASE(any_stays_with_large_inputs_on_a_busy_device),
    TEST_CASE(all_reduce_matches_a_float64_reference),
    TEST_CASE(all_reduce_of_16_bit_floats_is_exact_on_exact_values),
    TEST_CASE(all_reduce_moves_each_buffer_to_its_device_once),
    TEST_CASE(all_reduce_over_the_most_devices),
    TEST_CASE(broadcast_copies_the_root_everywhere),
    TEST_CASE(all_gather_concatenates_in_device_order),
    TEST_CASE(collectives_refuse_bad_arguments),
    TEST_CASE(collectives_need_serving_devices_of_one_backend),
    TEST_CASE(collectives_over_one_gpu),
    TEST_CASE(the_url_takes_own_or_primary_cuda_contexts),
};

TEST_MAIN(tests)
