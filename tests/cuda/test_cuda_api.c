/* cuda-api: the key checks of the API suite (tests/api), run on the CUDA device through the
 * public C API in embedded mode (the API suite itself uses device 0, a CPU device):
 *   - sgemm, every transpose and padded leading dimensions, against a float64 reference;
 *   - RNG fills equal to the CPU device's for random seeds, offsets and sizes (bits and
 *     uniforms bit for bit, normals within a few ulp);
 *   - coherence GPU <-> CPU: data moves only when an op needs it elsewhere, once each way,
 *     and the transfer counters say so exactly;
 *   - the three completion strategies (context-wide and per op) give the same results;
 *   - a sticky fault with ops in flight: each completes (OK or ACCEL_EDEVLOST), the device
 *     restarts, host data survives, later ops are right; the time from the fault to the first
 *     op served again is printed;
 *   - the calling thread's own current CUDA context is current again after every call (the
 *     open and close run the devices' start and stop there, and a waiter syncs on the device
 *     itself), and the thread's context stack keeps its depth; also in a fresh process whose
 *     first accel call is accel_open.
 * Without a CUDA device it exits 77 (meson's SKIP) and says why. */
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../api/api_util.h"

static accel_device GPU = -1; /* the CUDA device's index in every context made here */

/* The first device whose backend is cuda, or -1. */
static accel_device find_gpu(accel_ctx *ctx) {
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    if (accel_device_info(ctx, d, &info) == 0 && strcmp(info.backend, "cuda") == 0)
      return d;
  }
  return -1;
}

static accel_ctx *gpu_ctx(const char *url) {
  accel_ctx *ctx = ctx_open(url);
  CHECK_EQ(find_gpu(ctx), GPU);
  return ctx;
}

#define SYNC(call)                                                                                 \
  do {                                                                                             \
    f = NULL;                                                                                      \
    CHECK_OK(call);                                                                                \
    WAIT_OK(f);                                                                                    \
  } while (0)

/* ---- sgemm ---------------------------------------------------------------------------- */

/* One sgemm of a random shape with padded leading dimensions, checked element by element:
 * |C - ref| <= (k + 4) eps (|alpha| sum |a b| + |beta c|). */
static void sgemm_case(accel_ctx *ctx, accel_trans ta, accel_trans tb, size_t m, size_t n,
                       size_t k) {
  size_t lda = (ta ? k : m) + rnd_range(0, 5), ldb = (tb ? n : k) + rnd_range(0, 5);
  size_t ldc = m + rnd_range(0, 5), alen = lda * (ta ? m : k), blen = ldb * (tb ? k : n);
  float alpha = rnd_nonzero(0.5f, 2), beta = rnd_nonzero(-1, 1);
  float *a = rnd_floats(alen, -1, 1), *b = rnd_floats(blen, -1, 1);
  float *c = rnd_floats(ldc * n, -1, 1), *out = xmalloc(ldc * n * 4);
  accel_buffer A = buf_from(ctx, ACCEL_F32, a, alen), Bm = buf_from(ctx, ACCEL_F32, b, blen);
  accel_buffer C = buf_from(ctx, ACCEL_F32, c, ldc * n);
  accel_future *f;
  SYNC(accel_sgemm(ctx, GPU, ta, tb, m, n, k, alpha, A, lda, Bm, ldb, beta, C, ldc, &f));
  read_sync(ctx, C, 0, out, ldc * n);
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < m; i++) {
      double s = 0, mag = 0;
      for (size_t l = 0; l < k; l++) {
        double x = ta ? a[l + i * lda] : a[i + l * lda], y = tb ? b[j + l * ldb] : b[l + j * ldb];
        s += x * y;
        mag += fabs(x * y);
      }
      double want = alpha * s + beta * c[i + j * ldc];
      double tol = (double)(k + 4) * FLT_EPSILON *
                   (fabs(alpha) * mag + fabs(beta * c[i + j * ldc]));
      if (!(fabs(out[i + j * ldc] - want) <= tol))
        TEST_FAIL("sgemm %zux%zux%zu (%d,%d) C[%zu,%zu] = %.9g, want %.9g", m, n, k, ta, tb, i, j,
                  (double)out[i + j * ldc], want);
    }
  CHECK_OK(accel_buffer_destroy(ctx, A));
  CHECK_OK(accel_buffer_destroy(ctx, Bm));
  CHECK_OK(accel_buffer_destroy(ctx, C));
  free(a);
  free(b);
  free(c);
  free(out);
}

TEST(sgemm_against_float64) {
  accel_ctx *ctx = gpu_ctx(NULL);
  for (int t = 0; t < 4; t++) {
    sgemm_case(ctx, (accel_trans)(t & 1), (accel_trans)(t >> 1), rnd_range(1, 90), rnd_range(1, 90),
               rnd_range(1, 90));
    sgemm_case(ctx, (accel_trans)(t & 1), (accel_trans)(t >> 1), 1, 1, rnd_range(1, 9));
  }
  sgemm_case(ctx, ACCEL_NO_TRANS, ACCEL_NO_TRANS, 512, 384, 640);
  sgemm_case(ctx, ACCEL_TRANS, ACCEL_TRANS, 257, 129, 1031);
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
}

/* ---- RNG equal to the CPU device ------------------------------------------------------ */

static void rng_case(accel_ctx *ctx, accel_device cpu, accel_dist dist, size_t n) {
  accel_rng spec = {.dist = dist,
                    .seed = rnd64(),
                    .offset = rnd64() >> rnd_range(2, 63),
                    .mean = rnd_nonzero(-3, 3),
                    .stddev = rnd_float(0.5f, 3)};
  if (dist == ACCEL_DIST_NORMAL)
    spec.offset &= ~1ull;
  accel_dtype t = dist == ACCEL_DIST_BITS ? ACCEL_U32 : ACCEL_F32;
  accel_buffer G = buf_new(ctx, t, n), Cb = buf_new(ctx, t, n);
  float *g = xmalloc(n * 4), *c = xmalloc(n * 4);
  accel_future *f;
  SYNC(accel_rng_fill(ctx, GPU, G, &spec, &f));
  SYNC(accel_rng_fill(ctx, cpu, Cb, &spec, &f));
  read_sync(ctx, G, 0, g, n);
  read_sync(ctx, Cb, 0, c, n);
  for (size_t i = 0; i < n; i++) {
    bool same = dist == ACCEL_DIST_NORMAL
                    ? fabs((double)g[i] - c[i]) <= 16 * FLT_EPSILON * (fabs(c[i]) + 1) * spec.stddev
                    : memcmp(&g[i], &c[i], 4) == 0;
    if (!same)
      TEST_FAIL("dist %d seed %#" PRIx64 " offset %" PRIu64 " n %zu: element %zu: gpu %a, "
                "cpu %a",
                dist, spec.seed, spec.offset, n, i, (double)g[i], (double)c[i]);
  }
  CHECK_OK(accel_buffer_destroy(ctx, G));
  CHECK_OK(accel_buffer_destroy(ctx, Cb));
  free(g);
  free(c);
}

TEST(rng_equals_cpu_device) {
  accel_ctx *ctx = gpu_ctx(NULL);
  accel_device cpu = GPU == 0 ? 1 : 0;
  for (int i = 0; i < 24; i++)
    rng_case(ctx, cpu, (accel_dist)(i % 3), rnd_range(1, 200000));
  rng_case(ctx, cpu, ACCEL_DIST_UNIFORM, (1u << 22) + 1);
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
}

/* ---- coherence ------------------------------------------------------------------------ */

typedef struct moved {
  uint64_t h2d, d2h, d2d, written, read;
} moved;

static void expect(accel_ctx *ctx, const char *where, moved want) {
  accel_transfer_stats s;
  CHECK_OK(accel_finish(ctx, -1));
  stats(ctx, &s);
  if (s.host_to_device != want.h2d || s.device_to_host != want.d2h ||
      s.device_to_device != want.d2d || s.written != want.written || s.read != want.read)
    TEST_FAIL("%s: moved h2d %" PRIu64 " d2h %" PRIu64 " d2d %" PRIu64 " written %" PRIu64
              " read %" PRIu64 "; want %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64,
              where, s.host_to_device, s.device_to_host, s.device_to_device, s.written, s.read,
              want.h2d, want.d2h, want.d2d, want.written, want.read);
}

static float sigmoid_ref(float x) {
  return (float)(1.0 / (1.0 + exp(-(double)x)));
}

/* X from the host; Y = sigmoid(X) on the GPU (X moves there once); Z = relu(Y) on the CPU
 * device (Y moves GPU -> host -> CPU, once); both again (nothing moves); Y rewritten on the
 * CPU device, used on the GPU (back once); reads of data valid on the host move nothing. */
TEST(coherence_gpu_and_cpu) {
  accel_ctx *ctx = gpu_ctx(NULL);
  accel_device cpu = GPU == 0 ? 1 : 0;
  size_t n = rnd_range(300000, 3000000), bytes = n * 4; /* past the bounce buffer, often */
  float *x = rnd_floats(n, -4, 4), *out = xmalloc(bytes);
  accel_buffer X = buf_new(ctx, ACCEL_F32, n), Y = buf_new(ctx, ACCEL_F32, n);
  accel_buffer Z = buf_new(ctx, ACCEL_F32, n), W = buf_new(ctx, ACCEL_F32, n);
  accel_future *f;
  write_sync(ctx, X, 0, x, n);
  moved want = {.written = bytes};
  SYNC(accel_sigmoid(ctx, GPU, Y, X, &f));
  want.h2d += bytes;
  expect(ctx, "X to the GPU", want);
  SYNC(accel_relu(ctx, cpu, Z, Y, &f));
  want.d2h += bytes;
  want.h2d += bytes;
  expect(ctx, "Y from the GPU to the CPU device", want);
  SYNC(accel_relu(ctx, cpu, W, Y, &f));
  SYNC(accel_tanh(ctx, GPU, W, Y, &f));
  read_sync(ctx, Y, 0, out, n);
  want.read += bytes;
  expect(ctx, "Y used again on both and read", want);
  for (size_t i = 0; i < n; i++)
    if (!(fabsf(out[i] - sigmoid_ref(x[i])) <= 4e-7f))
      TEST_FAIL("Y[%zu] = %.9g, want %.9g", i, (double)out[i], (double)sigmoid_ref(x[i]));
  SYNC(accel_sigmoid(ctx, cpu, Y, Y, &f)); /* valid on the CPU device only */
  SYNC(accel_relu(ctx, GPU, Z, Y, &f));
  want.d2h += bytes;
  want.h2d += bytes;
  expect(ctx, "Y from the CPU device back to the GPU", want);
  read_sync(ctx, Z, 0, out, n); /* valid on the GPU only: straight to the caller */
  want.read += bytes;
  expect(ctx, "Z read from the GPU", want);
  for (size_t i = 0; i < n; i++) {
    float w = sigmoid_ref(sigmoid_ref(x[i]));
    if (!(fabsf(out[i] - w) <= 1e-6f))
      TEST_FAIL("Z[%zu] = %.9g, want %.9g", i, (double)out[i], (double)w);
  }
  accel_close(ctx);
  free(x);
  free(out);
}

/* ---- completion strategies ------------------------------------------------------------ */

static void workload(accel_ctx *ctx) {
  const size_t n = 200;
  float *a = rnd_floats(n * n, -1, 1), *b = rnd_floats(n * n, -1, 1), *c = xmalloc(n * n * 4);
  uint32_t bits[8];
  accel_buffer A = buf_from(ctx, ACCEL_F32, a, n * n), Bm = buf_from(ctx, ACCEL_F32, b, n * n);
  accel_buffer C = buf_new(ctx, ACCEL_F32, n * n), R = buf_new(ctx, ACCEL_U32, 8);
  accel_future *fs[4];
  accel_rng spec = {.dist = ACCEL_DIST_BITS, .seed = 0};
  CHECK_OK(accel_sgemm(ctx, GPU, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, Bm, n, 0.0f,
                       C, n, &fs[0]));
  CHECK_OK(accel_sigmoid(ctx, GPU, C, C, &fs[1]));
  CHECK_OK(accel_read(ctx, C, 0, c, n * n, &fs[2]));
  CHECK_OK(accel_rng_fill(ctx, GPU, R, &spec, NULL));
  CHECK_OK(accel_read(ctx, R, 0, bits, 8, &fs[3]));
  for (int i = 3; i >= 0; i--)
    WAIT_OK(fs[i]);
  CHECK_OK(accel_finish(ctx, -1));
  for (size_t j = 0; j < n; j += 7)
    for (size_t i = 0; i < n; i++) {
      double s = 0;
      for (size_t l = 0; l < n; l++)
        s += (double)a[i + l * n] * b[l + j * n];
      float w = (float)(1.0 / (1.0 + exp(-s)));
      if (!(fabsf(c[i + j * n] - w) <= 1e-5f))
        TEST_FAIL("sigmoid(A B)[%zu,%zu] = %.9g, want %.9g", i, j, (double)c[i + j * n], (double)w);
    }
  CHECK_EQ(bits[0], 0x6627e8d5u); /* Philox4x32-10 of counter 0, key 0 */
  CHECK_EQ(bits[3], 0x9b00dbd8u);
  accel_buffer_destroy(ctx, A);
  accel_buffer_destroy(ctx, Bm);
  accel_buffer_destroy(ctx, C);
  accel_buffer_destroy(ctx, R);
  free(a);
  free(b);
  free(c);
}

TEST(completion_strategies) {
  static const char *const urls[] = {"embedded:?completion=callback", "embedded:?completion=sync",
                                     "embedded:?completion=poll"};
  for (size_t u = 0; u < 3; u++) {
    accel_ctx *ctx = gpu_ctx(urls[u]);
    workload(ctx);
    for (int how = ACCEL_COMPLETION_CALLBACK; how <= ACCEL_COMPLETION_POLL; how++) {
      CHECK_OK(accel_set_completion(ctx, (accel_completion)how));
      workload(ctx);
    }
    accel_close(ctx);
  }
}

/* ---- sticky fault and recovery -------------------------------------------------------- */

/* Issues a 1-element fill on the GPU until one succeeds; returns when it did. */
static void until_served(accel_ctx *ctx, accel_buffer probe) {
  for (;;) {
    accel_future *f = NULL;
    CHECK_OK(accel_fill_u32(ctx, GPU, probe, 1, &f));
    int rc = fut_status(f);
    if (rc == 0)
      return;
    CHECK_ERR(rc, ACCEL_EDEVLOST);
    test_sleep_ms(1);
  }
}

TEST(fault_recovery) {
  accel_ctx *ctx = gpu_ctx("embedded:?fault_injection=1");
  size_t n = 1024;
  enum { OPS = 12 };
  float *a = rnd_floats(n * n, -1, 1), *b = rnd_floats(n * n, -1, 1), *out = xmalloc(n * n * 4);
  accel_buffer A = buf_from(ctx, ACCEL_F32, a, n * n), Bm = buf_from(ctx, ACCEL_F32, b, n * n);
  accel_buffer C[OPS], probe = buf_new(ctx, ACCEL_U32, 1);
  accel_future *fg[OPS], *fr[OPS];
  for (int i = 0; i < OPS; i++) {
    C[i] = buf_new(ctx, ACCEL_F32, n * n);
    CHECK_OK(accel_sgemm(ctx, GPU, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, Bm, n, 0.0f,
                         C[i], n, &fg[i]));
    CHECK_OK(accel_read(ctx, C[i], 0, out, n * n, &fr[i]));
  }
  uint64_t t0 = test_now_ns();
  CHECK_OK(accel_inject_fault(ctx, GPU));
  until_served(ctx, probe);
  double ms = (double)(test_now_ns() - t0) / 1e6;
  int lost = 0;
  for (int i = 0; i < OPS; i++) {
    int st[2] = {fut_status(fg[i]), fut_status(fr[i])};
    for (int j = 0; j < 2; j++) {
      if (st[j] != 0)
        CHECK_ERR(st[j], ACCEL_EDEVLOST);
      lost += st[j] != 0;
    }
  }
  printf("# fault to serving: %.1f ms (%d of %d ops in flight lost)\n", ms, lost, 2 * OPS);
  struct accel_device_info info;
  CHECK_OK(accel_device_info(ctx, GPU, &info));
  CHECK_EQ(info.state, 0);
  CHECK_EQ(info.restarts, 1);
  int frc = accel_finish(ctx, -1);
  if (frc != 0)
    CHECK_ERR(frc, ACCEL_EDEVLOST);
  accel_future *f;
  accel_buffer D = buf_new(ctx, ACCEL_F32, 16);
  SYNC(accel_sgemm(ctx, GPU, ACCEL_NO_TRANS, ACCEL_NO_TRANS, 4, 4, 4, 1.0f, A, n, Bm, n, 0.0f, D, 4,
                   &f));
  read_sync(ctx, D, 0, out, 4); /* D(0..3, 0) after the restart, from host A and B */
  for (size_t i = 0; i < 4; i++) {
    double s = 0;
    for (size_t l = 0; l < 4; l++)
      s += (double)a[i + l * n] * b[l];
    CHECK(fabs(out[i] - s) <= 1e-5);
  }
  read_sync(ctx, A, 0, out, n * n); /* host data survived */
  CHECK(memcmp(out, a, n * n * 4) == 0);
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
  free(a);
  free(b);
  free(out);
}

/* ---- the caller's own context ---------------------------------------------------------- */

/* The driver's entries this test calls itself (stable signatures since CUDA 4). */
typedef struct driver {
  int (*init)(unsigned);
  int (*device_get)(int *, int);
  int (*retain)(void **, int);
  int (*release)(int);
  int (*set_current)(void *);
  int (*get_current)(void **);
  int (*pop_current)(void **);
} driver;

static void driver_load(driver *d) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CHECK(lib != NULL);
  *(void **)&d->init = dlsym(lib, "cuInit");
  *(void **)&d->device_get = dlsym(lib, "cuDeviceGet");
  *(void **)&d->retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
  *(void **)&d->release = dlsym(lib, "cuDevicePrimaryCtxRelease_v2");
  *(void **)&d->set_current = dlsym(lib, "cuCtxSetCurrent");
  *(void **)&d->get_current = dlsym(lib, "cuCtxGetCurrent");
  *(void **)&d->pop_current = dlsym(lib, "cuCtxPopCurrent_v2");
  CHECK(d->init && d->device_get && d->retain && d->release && d->set_current && d->get_current &&
        d->pop_current);
}

static void check_current(const driver *d, void *want, const char *after) {
  void *cur = NULL;
  CHECK_EQ(d->get_current(&cur), 0);
  if (cur != want)
    TEST_FAIL("after %s the thread's current context is %p, not the caller's %p", after, cur, want);
}

/* The driver loaded and GPU 0's primary context retained, as a program of its own would:
 * that context; the CUDA device in *cu. */
static void *callers_primary(driver *d, int *cu) {
  driver_load(d);
  CHECK_EQ(d->init(0), 0);
  CHECK_EQ(d->device_get(cu, 0), 0);
  void *mine = NULL;
  CHECK_EQ(d->retain(&mine, *cu), 0);
  return mine;
}

/* Closes ctx, then pops the caller's context off this thread's stack: it is current after
 * the close and it is what the pop takes. */
static void close_and_pop(const driver *d, accel_ctx *ctx, void *mine) {
  accel_close(ctx);
  check_current(d, mine, "accel_close");
  void *popped = NULL;
  CHECK_EQ(d->pop_current(&popped), 0);
  CHECK(popped == mine);
}

/* The caller's primary context (accel's is its own) is current on this thread, alone on its
 * stack; every kind of call, each completion strategy, leaves it so. */
TEST(the_callers_context_stays_current) {
  driver d;
  int cu = -1;
  void *mine = callers_primary(&d, &cu);
  static const char *const urls[] = {"embedded:?completion=callback", "embedded:?completion=sync",
                                     "embedded:?completion=poll"};
  for (size_t u = 0; u < 3; u++) {
    CHECK_EQ(d.set_current(mine), 0);
    accel_ctx *ctx = gpu_ctx(urls[u]);
    check_current(&d, mine, "accel_open");
    accel_buffer X = buf_new(ctx, ACCEL_U32, 4096);
    check_current(&d, mine, "accel_buffer_create");
    uint32_t host[4096];
    for (int round = 0; round < 20; round++) {
      accel_future *f = NULL;
      CHECK_OK(accel_fill_u32(ctx, GPU, X, (uint32_t)round, &f));
      check_current(&d, mine, "accel_fill_u32");
      WAIT_OK(f);
      check_current(&d, mine, "a wait");
      read_sync(ctx, X, 0, host, 4096);
      check_current(&d, mine, "accel_read");
      CHECK_EQ(host[0], (uint32_t)round);
      CHECK_EQ(host[4095], (uint32_t)round);
      test_sleep_ms(round % 3); /* the loop falls asleep now and then */
    }
    CHECK_OK(accel_buffer_destroy(ctx, X));
    close_and_pop(&d, ctx, mine);
    check_current(&d, NULL, "popping the caller's one context"); /* the stack's depth kept */
  }
  CHECK_EQ(d.release(cu), 0);
}

/* With accel's devices in their primary contexts, one of them is the caller's own (GPU 0's):
 * waits on ops of every GPU (gemms long enough that the caller waits before they end, and so
 * may sync on the device itself) leave the caller's context current, not another GPU's. */
TEST(the_callers_primary_context_stays_current_over_every_gpu) {
  driver d;
  int cu = -1;
  void *mine = callers_primary(&d, &cu);
  CHECK_EQ(d.set_current(mine), 0);
  accel_ctx *ctx = gpu_ctx("embedded:?cuda_context=primary&completion=sync");
  check_current(&d, mine, "accel_open");
  enum { SIDE = 2048 };
  accel_buffer A = buf_new(ctx, ACCEL_F32, SIDE * SIDE), C = buf_new(ctx, ACCEL_F32, SIDE * SIDE);
  int gpus = 0;
  for (accel_device g = 0; g < accel_device_count(ctx); g++) {
    struct accel_device_info info;
    CHECK_OK(accel_device_info(ctx, g, &info));
    if (strcmp(info.backend, "cuda") != 0)
      continue;
    gpus++;
    for (int round = 0; round < 10; round++) {
      accel_future *f = NULL;
      CHECK_OK(accel_sgemm(ctx, g, ACCEL_NO_TRANS, ACCEL_NO_TRANS, SIDE, SIDE, SIDE, 1.0f, A, SIDE,
                           A, SIDE, 0.0f, C, SIDE, &f));
      WAIT_OK(f);
      check_current(&d, mine, "a wait on a GPU's sgemm");
    }
  }
  printf("# %d GPU(s)\n", gpus);
  CHECK_OK(accel_buffer_destroy(ctx, A));
  CHECK_OK(accel_buffer_destroy(ctx, C));
  close_and_pop(&d, ctx, mine);
  CHECK_EQ(d.release(cu), 0);
}

/* In a fresh process whose first accel call is accel_open, with the caller's primary context
 * current (the driver is loaded by that call: nothing of accel's ran before it). Exit status:
 * 0 when the caller's context is current after the open and after the close, else 1. */
static int first_open_child(void) {
  driver d;
  driver_load(&d);
  int cu = -1;
  void *mine = NULL, *cur = NULL;
  if (d.init(0) != 0 || d.device_get(&cu, 0) != 0 || d.retain(&mine, cu) != 0 ||
      d.set_current(mine) != 0)
    return 1;
  accel_ctx *ctx = NULL;
  if (accel_open(&ctx, "embedded:?backends=cuda") != 0)
    return 1;
  bool ok = d.get_current(&cur) == 0 && cur == mine;
  accel_close(ctx);
  ok = ok && d.get_current(&cur) == 0 && cur == mine;
  printf("# first accel_open in the process: the caller's context %s\n",
         ok ? "stays current" : "was replaced");
  return ok ? 0 : 1;
}

TEST(the_callers_context_survives_the_first_accel_open) {
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    setenv("ACCEL_TEST_FIRST_OPEN", "1", 1);
    execl("/proc/self/exe", "test-cuda-api", (char *)NULL);
    _exit(127);
  }
  int status = 0;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  CHECK(WIFEXITED(status));
  CHECK_EQ(WEXITSTATUS(status), 0);
}

static const test_case tests[] = {
    TEST_CASE(sgemm_against_float64),
    TEST_CASE(rng_equals_cpu_device),
    TEST_CASE(coherence_gpu_and_cpu),
    TEST_CASE(completion_strategies),
    TEST_CASE(fault_recovery),
    TEST_CASE(the_callers_context_stays_current),
    TEST_CASE(the_callers_context_survives_the_first_accel_open),
    TEST_CASE(the_callers_primary_context_stays_current_over_every_gpu),
};

int main(int argc, char **argv) {
  if (getenv("ACCEL_TEST_FIRST_OPEN") != NULL)
    return first_open_child();
  accel_ctx *ctx = ctx_open(NULL);
  GPU = find_gpu(ctx);
  accel_close(ctx);
  if (GPU < 0) {
    printf("SKIP: no CUDA device in the embedded context (not built, no driver or no "
           "device): the GPU tests need one\n");
    return 77;
  }
  api_seed();
  return test_main_(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
