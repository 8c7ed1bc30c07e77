/* The opencl backend beyond the conformance suite (tests/backends/test_backend.c):
 *   - RNG bits and F32, F64, F16, BF16 uniforms bit-identical to the CPU backend's Philox
 *     (backends/cpu/philox.h) for random seeds, offsets, sizes and destination offsets;
 *   - the program's disk cache: the first open compiles kernels.cl and writes the cache file,
 *     a second open loads it (no compilation), a corrupt file is rebuilt, an unwritable cache
 *     directory still works;
 *   - a fault, then reset: the fresh context comes from the cache and works;
 *   - the built-in kernels' rounded-up launches write nothing past an op's range.
 * Every test uses a cache directory of its own (ACCEL_CACHE_DIR, a fresh temporary one).
 * Without an OpenCL device it exits 77 (meson's SKIP) and says why. Fresh random inputs each
 * run; ACCEL_TEST_SEED reproduces one. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../test.h"
#include "backends/backend.h"
#include "backends/cpu/philox.h"
#include "backends/opencl/backend_opencl.h"
#include "ops/dtype_conv.h"

static const be_ops *B;
static uint64_t rng_state;

static uint64_t rnd64(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static size_t rnd_range(size_t lo, size_t hi) {
  return lo + (size_t)(rnd64() % (hi - lo + 1));
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p == NULL)
    TEST_FAIL("out of memory");
  return p;
}

static be_device *dev_open(int fault_injection) {
  be_open_opts opts = {.fault_injection = fault_injection};
  be_device *d = NULL;
  CHECK_OK(B->open(0, &opts, &d));
  return d;
}

static void finish(be_device *d, be_queue *q) {
  be_event *ev = NULL;
  CHECK_OK(B->event_create(d, &ev));
  CHECK_OK(B->event_record(ev, q));
  CHECK_OK(B->event_sync(ev));
  B->event_destroy(ev);
}

/* ---- RNG against the CPU backend ----------------------------------------------------------- */

/* count elements of dtype (dist) at stream offset o into a buffer at element off, read back,
 * compared byte for byte with the CPU's fill. */
static void rng_match(be_device *d, be_queue *q, uint32_t dtype, be_rng_dist dist) {
  size_t es = dtype == ACCEL_F64 ? 8 : dtype == ACCEL_F16 || dtype == ACCEL_BF16 ? 2 : 4;
  size_t n = rnd_range(1, 70000), off = rnd_range(0, 33);
  be_rng_args r = {.dist = dist, .seed = rnd64(), .offset = rnd64() >> rnd_range(0, 63)};
  if (rnd64() % 4 == 0)
    r.offset = rnd_range(0, 9); /* near the stream's start too */
  uint8_t *want = xcalloc(n, es), *got = xcalloc(n + off, es);
  if (dist == BE_RNG_BITS)
    CHECK_OK(be_cpu_philox_fill_u32((uint32_t *)(void *)want, n, r.seed, r.offset));
  else
    CHECK_OK(be_cpu_philox_fill_uniform_as(dtype, want, n, r.seed, r.offset));
  be_mem m = {0};
  CHECK_OK(B->mem_alloc(d, (n + off) * es, &m));
  CHECK_OK(B->rng->fill(q, dtype, m, off, n, &r));
  CHECK_OK(B->copy_d2h(q, got, m, 0, (n + off) * es));
  finish(d, q);
  for (size_t i = 0; i < n; i++)
    if (memcmp(got + (off + i) * es, want + i * es, es) != 0)
      TEST_FAIL("dtype %u dist %d seed %" PRIu64 " offset %" PRIu64 ": element %zu of %zu differs",
                dtype, (int)dist, r.seed, r.offset, i, n);
  B->mem_free(d, &m);
  free(want);
  free(got);
}

TEST(rng_bit_identical_to_cpu) {
  be_device *d = dev_open(0);
  be_queue *q = NULL;
  CHECK_OK(B->queue_create(d, &q));
  uint32_t set = B->rng->dtypes(d);
  static const uint32_t types[] = {ACCEL_F32, ACCEL_F64, ACCEL_F16, ACCEL_BF16};
  for (int rep = 0; rep < 8; rep++) {
    rng_match(d, q, ACCEL_U32, BE_RNG_BITS);
    for (size_t t = 0; t < 4; t++)
      if (set & ACCEL_DTYPE_BIT(types[t]))
        rng_match(d, q, types[t], BE_RNG_UNIFORM);
  }
  CHECK(set & ACCEL_DTYPE_BIT(ACCEL_F32));
  CHECK(set & ACCEL_DTYPE_BIT(ACCEL_BF16));
  B->queue_destroy(q);
  B->close(d);
}

/* ---- the program cache ---------------------------------------------------------------------- */

static char cache_root[256];

/* A fresh, empty cache directory of this process, as ACCEL_CACHE_DIR. */
static void fresh_cache_dir(const char *name) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", cache_root, name);
  CHECK_EQ(mkdir(dir, 0700), 0);
  CHECK_EQ(setenv("ACCEL_CACHE_DIR", dir, 1), 0);
}

/* A small op that uses the program: 16 bits from seed 7 against the CPU. */
static void program_works(be_device *d) {
  be_queue *q = NULL;
  CHECK_OK(B->queue_create(d, &q));
  be_mem m = {0};
  uint32_t got[16], want[16];
  be_rng_args r = {.dist = BE_RNG_BITS, .seed = 7, .offset = 5};
  CHECK_OK(B->mem_alloc(d, sizeof got, &m));
  CHECK_OK(B->rng->fill(q, ACCEL_U32, m, 0, 16, &r));
  CHECK_OK(B->copy_d2h(q, got, m, 0, sizeof got));
  finish(d, q);
  CHECK_OK(be_cpu_philox_fill_u32(want, 16, 7, 5));
  CHECK(memcmp(got, want, sizeof got) == 0);
  B->mem_free(d, &m);
  B->queue_destroy(q);
}

static bool file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

TEST(program_cache_used_on_second_open) {
  fresh_cache_dir("second-open");
  uint64_t builds = be_opencl_source_builds(), loads = be_opencl_cache_loads();
  be_device *d = dev_open(0);
  char path[4200];
  CHECK_OK(be_opencl_cache_file(d, path, sizeof path));
  CHECK(strstr(path, getenv("ACCEL_CACHE_DIR")) == path);
  CHECK_EQ(be_opencl_source_builds(), builds + 1); /* an empty cache: compiled */
  CHECK(file_exists(path));
  program_works(d);
  B->close(d);
  uint64_t t0 = test_now_ns();
  d = dev_open(0);
  uint64_t t1 = test_now_ns();
  CHECK_EQ(be_opencl_source_builds(), builds + 1); /* not compiled again */
  CHECK_EQ(be_opencl_cache_loads(), loads + 1);
  printf("  second open from the cache: %.1f ms\n", (double)(t1 - t0) / 1e6);
  program_works(d);
  B->close(d);
}

TEST(program_cache_corrupt_rebuilt) {
  fresh_cache_dir("corrupt");
  be_device *d = dev_open(0);
  char path[4200];
  CHECK_OK(be_opencl_cache_file(d, path, sizeof path));
  B->close(d);
  CHECK(file_exists(path));
  /* Flip bytes in the middle of the payload: the hash no longer matches. */
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL);
  CHECK_EQ(fseek(f, 100, SEEK_SET), 0);
  CHECK_EQ(fwrite("garbage!", 1, 8, f), 8);
  CHECK_EQ(fclose(f), 0);
  uint64_t builds = be_opencl_source_builds(), loads = be_opencl_cache_loads();
  d = dev_open(0);
  CHECK_EQ(be_opencl_source_builds(), builds + 1);
  CHECK_EQ(be_opencl_cache_loads(), loads);
  program_works(d);
  B->close(d);
  /* Truncated to a few bytes: rebuilt again, then the rewritten file is good. */
  f = fopen(path, "wb");
  CHECK(f != NULL);
  CHECK_EQ(fwrite("ACC", 1, 3, f), 3);
  CHECK_EQ(fclose(f), 0);
  d = dev_open(0);
  CHECK_EQ(be_opencl_source_builds(), builds + 2);
  B->close(d);
  d = dev_open(0);
  CHECK_EQ(be_opencl_source_builds(), builds + 2);
  CHECK_EQ(be_opencl_cache_loads(), loads + 1);
  program_works(d);
  B->close(d);
}

TEST(program_cache_unwritable) {
  char file[512];
  snprintf(file, sizeof file, "%s/a-file", cache_root);
  FILE *f = fopen(file, "wb");
  CHECK(f != NULL);
  CHECK_EQ(fclose(f), 0);
  char dir[600];
  snprintf(dir, sizeof dir, "%s/below", file); /* a directory under a file: cannot exist */
  CHECK_EQ(setenv("ACCEL_CACHE_DIR", dir, 1), 0);
  uint64_t builds = be_opencl_source_builds();
  be_device *d = dev_open(0);
  CHECK_EQ(be_opencl_source_builds(), builds + 1);
  program_works(d);
  B->close(d);
}

/* ---- fault and reset ------------------------------------------------------------------------ */

typedef struct rec {
  atomic_int calls, status;
} rec;

static void rec_fn(void *arg, int status) {
  rec *r = arg;
  atomic_store(&r->status, status);
  atomic_fetch_add(&r->calls, 1);
}

static void rec_wait(rec *r) {
  uint64_t t0 = test_now_ms();
  while (atomic_load(&r->calls) == 0) {
    if (test_now_ms() - t0 > 20000)
      TEST_FAIL("callback never called");
    test_sleep_ms(1);
  }
}

TEST(fault_then_reset_from_cache) {
  fresh_cache_dir("fault");
  be_device *d = dev_open(1);
  be_queue *q = NULL;
  be_mem m = {0};
  CHECK_OK(B->queue_create(d, &q));
  CHECK_OK(B->mem_alloc(d, 1 << 20, &m));
  rec before = {0}, after = {0}, late = {0};
  for (int i = 0; i < 8; i++)
    CHECK_OK(B->fill(q, m, 0, (1 << 20) / 4, 4, (uint64_t)i));
  CHECK_OK(B->host_notify(q, rec_fn, &before));
  CHECK_OK(B->inject_fault(d));
  CHECK_ERR(B->status(d), ACCEL_EDEVLOST);
  CHECK_ERR(B->host_callback(q, rec_fn, &late), ACCEL_EDEVLOST);
  CHECK_ERR(B->fill(q, m, 0, 4, 4, 1), ACCEL_EDEVLOST);
  rec_wait(&before);
  CHECK(atomic_load(&before.status) == 0 || atomic_load(&before.status) == ACCEL_EDEVLOST);
  B->queue_destroy(q);
  B->mem_free(d, &m);
  uint64_t builds = be_opencl_source_builds();
  CHECK_OK(B->reset(d));
  CHECK_EQ(be_opencl_source_builds(), builds); /* the fresh context's program: from the cache */
  CHECK_OK(B->status(d));
  program_works(d);
  CHECK_OK(B->queue_create(d, &q));
  CHECK_OK(B->host_callback(q, rec_fn, &after));
  rec_wait(&after);
  CHECK_OK(atomic_load(&after.status));
  B->queue_destroy(q);
  B->close(d);
  CHECK_EQ(atomic_load(&late.calls), 0);
  CHECK_EQ(atomic_load(&before.calls), 1);
}

/* ---- gemm: a batch large enough for CLBlast's strided-batched routine (blas.c) ----------------
 */

static float rnd_float(void) {
  return (float)(rnd64() % 2000) / 1000.0f - 1.0f;
}

TEST(gemm_large_strided_batch) {
  be_device *d = dev_open(0);
  be_queue *q = NULL;
  CHECK_OK(B->queue_create(d, &q));
  be_gemm_args g = {.m = 5,
                    .n = 4,
                    .k = 3,
                    .alpha = 1.5,
                    .beta = -0.5,
                    .lda = 6,
                    .ldb = 3,
                    .ldc = 5,
                    .ab_type = ACCEL_F32,
                    .c_type = ACCEL_F32,
                    .batch = 40,
                    .stride_a = 20,
                    .stride_b = 13,
                    .stride_c = 21};
  size_t la = 40 * 20, lb = 40 * 13, lc = 40 * 21;
  float *a = xcalloc(la, 4), *b = xcalloc(lb, 4), *c = xcalloc(lc, 4), *got = xcalloc(lc, 4);
  for (size_t i = 0; i < la; i++)
    a[i] = rnd_float();
  for (size_t i = 0; i < lb; i++)
    b[i] = rnd_float();
  for (size_t i = 0; i < lc; i++)
    c[i] = rnd_float();
  be_mem ma = {0}, mb = {0}, mc = {0};
  CHECK_OK(B->mem_alloc(d, la * 4, &ma));
  CHECK_OK(B->mem_alloc(d, lb * 4, &mb));
  CHECK_OK(B->mem_alloc(d, lc * 4, &mc));
  CHECK_OK(B->copy_h2d(q, ma, 0, a, la * 4));
  CHECK_OK(B->copy_h2d(q, mb, 0, b, lb * 4));
  CHECK_OK(B->copy_h2d(q, mc, 0, c, lc * 4));
  CHECK_OK(B->blas->gemm(q, &g, ma, 0, mb, 0, mc, 0));
  CHECK_OK(B->copy_d2h(q, got, mc, 0, lc * 4));
  finish(d, q);
  for (int64_t t = 0; t < g.batch; t++)
    for (int64_t j = 0; j < g.n; j++)
      for (int64_t i = 0; i < g.m; i++) {
        size_t ci = (size_t)(t * g.stride_c + j * g.ldc + i);
        double want = g.beta * c[ci];
        for (int64_t l = 0; l < g.k; l++)
          want += g.alpha * a[t * g.stride_a + l * g.lda + i] * b[t * g.stride_b + j * g.ldb + l];
        if (!(fabs(got[ci] - want) <= 1e-5 * (1 + fabs(want))))
          TEST_FAIL("batch %" PRId64 " C(%" PRId64 ", %" PRId64 "): got %g, want %g", t, i, j,
                    (double)got[ci], want);
      }
  B->mem_free(d, &ma);
  B->mem_free(d, &mb);
  B->mem_free(d, &mc);
  free(a);
  free(b);
  free(c);
  free(got);
  B->queue_destroy(q);
  B->close(d);
}

/* ---- launches past the range: the built-ins run a fixed work-group shape (kernels.c), so
 * the global size is rounded up; every element past an op's range keeps its value. */

#define TAIL 80 /* more than one work group of 64 */

/* n floats of x; y holds y0 (n + TAIL); z starts as sentinels. axpy, relu, RNG bits and
 * gemm's C = beta C (k = 0) of n elements, checked inside and past the range. */
static void range_round(be_device *d, be_queue *q, size_t n) {
  size_t len = n + TAIL;
  float *x = xcalloc(len, 4), *y0 = xcalloc(len, 4), *got = xcalloc(len, 4);
  uint32_t *bits = xcalloc(len, 4), *want_bits = xcalloc(n, 4);
  for (size_t i = 0; i < len; i++) {
    x[i] = rnd_float();
    y0[i] = rnd_float();
  }
  be_mem mx = {0}, my = {0}, mz = {0}, mb = {0};
  CHECK_OK(B->mem_alloc(d, len * 4, &mx));
  CHECK_OK(B->mem_alloc(d, len * 4, &my));
  CHECK_OK(B->mem_alloc(d, len * 4, &mz));
  CHECK_OK(B->mem_alloc(d, len * 4, &mb));
  CHECK_OK(B->copy_h2d(q, mx, 0, x, len * 4));
  CHECK_OK(B->copy_h2d(q, my, 0, y0, len * 4));
  CHECK_OK(B->copy_h2d(q, mz, 0, y0, len * 4));
  CHECK_OK(B->fill(q, mb, 0, len, 4, 0xdeadbeefu));
  CHECK_OK(B->blas->axpy(q, ACCEL_F32, n, 2.0, mx, 0, my, 0));
  CHECK_OK(B->nn->unary(q, ACCEL_F32, BE_RELU, mz, 0, mx, 0, n));
  be_rng_args r = {.dist = BE_RNG_BITS, .seed = rnd64(), .offset = rnd_range(0, 9)};
  CHECK_OK(B->rng->fill(q, ACCEL_U32, mb, 0, n, &r));
  CHECK_OK(B->copy_d2h(q, got, my, 0, len * 4));
  finish(d, q);
  for (size_t i = 0; i < len; i++) {
    float want = i < n ? 2.0f * x[i] + y0[i] : y0[i];
    if (!(fabsf(got[i] - want) <= 1e-6f * (1 + fabsf(want))))
      TEST_FAIL("axpy n %zu: y[%zu] = %g, want %g", n, i, (double)got[i], (double)want);
  }
  CHECK_OK(B->copy_d2h(q, got, mz, 0, len * 4));
  CHECK_OK(B->copy_d2h(q, bits, mb, 0, len * 4));
  finish(d, q);
  for (size_t i = 0; i < len; i++) {
    float want = i < n ? (x[i] > 0 ? x[i] : 0) : y0[i];
    if (got[i] != want)
      TEST_FAIL("relu n %zu: z[%zu] = %g, want %g", n, i, (double)got[i], (double)want);
  }
  CHECK_OK(be_cpu_philox_fill_u32(want_bits, n, r.seed, r.offset));
  for (size_t i = 0; i < len; i++)
    if (bits[i] != (i < n ? want_bits[i] : 0xdeadbeefu))
      TEST_FAIL("rng n %zu: word %zu = %08x", n, i, bits[i]);
  /* C = -0.5 C over a batch of 2 (m x 1 each, ldc m, stride m): 2m elements, the rest kept. */
  be_gemm_args g = {.m = (int64_t)n / 2 + 1,
                    .n = 1,
                    .k = 0,
                    .alpha = 1,
                    .beta = -0.5,
                    .lda = 1,
                    .ldb = 1,
                    .ab_type = ACCEL_F32,
                    .c_type = ACCEL_F32,
                    .batch = 2};
  g.lda = g.ldc = g.m;
  g.stride_c = g.m;
  CHECK_OK(B->copy_h2d(q, my, 0, y0, len * 4));
  CHECK_OK(B->blas->gemm(q, &g, mx, 0, mx, 0, my, 0));
  CHECK_OK(B->copy_d2h(q, got, my, 0, len * 4));
  finish(d, q);
  for (size_t i = 0; i < len; i++) {
    float want = i < (size_t)(2 * g.m) ? -0.5f * y0[i] : y0[i];
    if (got[i] != want)
      TEST_FAIL("C = beta C, m %" PRId64 ": C[%zu] = %g, want %g", g.m, i, (double)got[i],
                (double)want);
  }
  B->mem_free(d, &mx);
  B->mem_free(d, &my);
  B->mem_free(d, &mz);
  B->mem_free(d, &mb);
  free(x);
  free(y0);
  free(got);
  free(bits);
  free(want_bits);
}

TEST(built_in_launches_stop_at_their_range) {
  be_device *d = dev_open(0);
  be_queue *q = NULL;
  CHECK_OK(B->queue_create(d, &q));
  static const size_t sizes[] = {1, 2, 63, 64, 65, 127, 129};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    range_round(d, q, sizes[i]);
  for (int rep = 0; rep < 4; rep++)
    range_round(d, q, rnd_range(130, 20000));
  B->queue_destroy(q);
  B->close(d);
}

TEST(info_names_platform_and_device) {
  be_device *d = dev_open(0);
  be_device_info info;
  CHECK_OK(B->info(d, &info));
  CHECK(strstr(info.name, ": ") != NULL);
  printf("  %s, kind %d, %u units\n", info.name, (int)info.kind, info.compute_units);
  B->close(d);
}

static const test_case tests[] = {
    TEST_CASE(info_names_platform_and_device), TEST_CASE(rng_bit_identical_to_cpu),
    TEST_CASE(gemm_large_strided_batch),       TEST_CASE(program_cache_used_on_second_open),
    TEST_CASE(program_cache_corrupt_rebuilt),  TEST_CASE(program_cache_unwritable),
    TEST_CASE(fault_then_reset_from_cache),    TEST_CASE(built_in_launches_stop_at_their_range),
};

int main(int argc, char **argv) {
  const char *env = getenv("ACCEL_TEST_SEED");
  uint64_t seed = env != NULL ? strtoull(env, NULL, 0) : test_now_ns() ^ ((uint64_t)getpid() << 32);
  printf("# seed %" PRIu64 " (rerun with ACCEL_TEST_SEED=%" PRIu64 ")\n", seed, seed);
  rng_state = seed;
  snprintf(cache_root, sizeof cache_root, "/tmp/accel-opencl-test-XXXXXX");
  if (mkdtemp(cache_root) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  /* PoCL's own kernel cache too, before the first OpenCL call: the machine's (which grows
   * with every work-group shape ever compiled) would make timings depend on its history. */
  char pocl_dir[300];
  snprintf(pocl_dir, sizeof pocl_dir, "%s/pocl", cache_root);
  CHECK_EQ(setenv("POCL_CACHE_DIR", pocl_dir, 1), 0);
  for (const be_entry *e = be_registry(); e->name != NULL; e++)
    if (strcmp(e->name, "opencl") == 0)
      B = e->ops;
  int count = 0;
  char why[128] = "not built";
  if (B == NULL || B->probe(&count, why, sizeof why) != 0 || count == 0) {
    printf("1..0 # SKIP no OpenCL device (%s)\n", why);
    rmdir(cache_root);
    return 77;
  }
  CHECK_EQ(setenv("ACCEL_CACHE_DIR", cache_root, 1), 0);
  int rc = test_main_(argc, argv, tests, sizeof tests / sizeof tests[0]);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_root);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", cache_root);
  return rc;
}
