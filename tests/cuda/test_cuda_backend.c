/* cuda-backend: what the backend conformance suite (tests/backends/test_backend.c, run on
 * every built backend) does not reach, on a real GPU through be_ops and backend_cuda.h:
 *   - RNG against real cuRAND (tests/backends/curand_golden.h) and against the cpu backend for
 *     random seeds, stream offsets, buffer offsets (aligned or not) and sizes: bits and
 *     uniforms bit for bit, normals within a few ulp;
 *   - host transfers of every kind: pageable small (bounce buffer), pageable large (the
 *     stager, several chunks), pinned (direct DMA), in stream order with kernels between them
 *     and with one host buffer read then written on the same queue;
 *   - sgemm FP32 against TF32 (the backend-level switch): TF32's error is measurably larger;
 *   - stream memory operations on pinned host memory (what the stager stands on), and how far
 *     submissions get behind a callback that blocks (printed: the driver stops the
 *     submitting thread after a few hundred operations);
 *   - host_notify: a notification whose function blocks does not hold its queue;
 *   - faults: callbacks around one, reset after one (soft: the default injection), and a
 *     real break of the context by a trap or an illegal write (ACCEL_CUDA_FAULT=trap|oob,
 *     alone in its process), which is detected as any sticky error is, and after which this
 *     driver allows no new context in the process.
 * Without a CUDA device it exits 77 (meson's SKIP) and says why. */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "../backends/curand_golden.h"
#include "../be_f32.h"
#include "backends/backend.h"
#include "backends/cpu/philox.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/driver.h"
#include "cuda_fx.h"

static const be_ops *B = &be_cuda_ops;

#define CU_OK(call) CHECK_EQ((call), CUDA_SUCCESS)

static void finish(fx *f) {
  be_event *ev = NULL;
  CHECK_OK(B->event_create(f->d, &ev));
  CHECK_OK(B->event_record(ev, f->q));
  CHECK_OK(B->event_sync(ev));
  B->event_destroy(ev);
}

static be_mem mem_new(fx *f, size_t bytes) {
  be_mem m = {0};
  CHECK_OK(B->mem_alloc(f->d, bytes, &m));
  return m;
}

/* ---- RNG ------------------------------------------------------------------------------ */

/* count elements of the stream into element buf_off of a fresh buffer, read back. */
static void rng_get(fx *f, be_rng_dist dist, uint64_t seed, uint64_t offset, size_t buf_off,
                    size_t count, float mean, float stddev, void *out) {
  be_mem m = mem_new(f, (buf_off + count) * 4);
  be_rng_args r = {.dist = dist, .seed = seed, .offset = offset, .mean = mean, .stddev = stddev};
  CHECK_OK(be_rng_fill(B, f->q, m, buf_off, count, &r));
  CHECK_OK(B->copy_d2h(f->q, out, m, buf_off * 4, count * 4));
  finish(f);
  B->mem_free(f->d, &m);
}

static void check_normal(const float *got, const float *want, size_t n, float stddev,
                         const char *what) {
  for (size_t i = 0; i < n; i++)
    if (!(fabs((double)got[i] - want[i]) <= 16 * FLT_EPSILON * (fabs(want[i]) + 1) * stddev))
      TEST_FAIL("%s[%zu]: got %a, want %a", what, i, (double)got[i], (double)want[i]);
}

static void golden_case(fx *f, const curand_golden *g, size_t buf_off) {
  uint32_t bits[CURAND_GOLDEN_WORDS];
  float uni[CURAND_GOLDEN_WORDS], nrm[CURAND_GOLDEN_WORDS];
  rng_get(f, BE_RNG_BITS, g->seed, g->offset, buf_off, CURAND_GOLDEN_WORDS, 0, 1, bits);
  rng_get(f, BE_RNG_UNIFORM, g->seed, g->offset, buf_off, CURAND_GOLDEN_WORDS, 0, 1, uni);
  rng_get(f, BE_RNG_NORMAL, g->seed, g->offset & ~1ull, buf_off, CURAND_GOLDEN_WORDS, 0, 1, nrm);
  CHECK(memcmp(bits, g->u32, sizeof bits) == 0);
  CHECK(memcmp(uni, g->uniform, sizeof uni) == 0);
  check_normal(nrm, g->normal, CURAND_GOLDEN_WORDS, 1, "normal vs cuRAND");
}

TEST(rng_matches_curand) {
  fx f = fx_open_with(0);
  size_t n = sizeof curand_golden_device / sizeof curand_golden_device[0];
  for (size_t i = 0; i < n; i++)
    for (size_t off = 0; off < 4; off++) /* every alignment of the output */
      golden_case(&f, &curand_golden_device[i], off);
  fx_close(&f);
}

static void rng_random_case(fx *f, be_rng_dist dist, size_t count) {
  uint64_t seed = cuda_rnd64(), offset = cuda_rnd64() >> cuda_rnd_range(2, 63);
  size_t buf_off = cuda_rnd_range(0, 7);
  float mean = cuda_rnd_nz(0.5f, 3), stddev = fabsf(cuda_rnd_nz(0.5f, 3));
  if (dist == BE_RNG_NORMAL)
    offset &= ~1ull;
  float *got = cuda_xmalloc(count * 4), *want = cuda_xmalloc(count * 4);
  rng_get(f, dist, seed, offset, buf_off, count, mean, stddev, got);
  if (dist == BE_RNG_BITS)
    CHECK_OK(be_cpu_philox_fill_u32((uint32_t *)(void *)want, count, seed, offset));
  else if (dist == BE_RNG_UNIFORM)
    CHECK_OK(be_cpu_philox_fill_uniform(want, count, seed, offset));
  else
    CHECK_OK(be_cpu_philox_fill_normal(want, count, seed, offset, mean, stddev));
  if (dist == BE_RNG_NORMAL)
    check_normal(got, want, count, stddev, "normal vs cpu");
  else
    for (size_t i = 0; i < count; i++)
      if (memcmp(&got[i], &want[i], 4) != 0)
        TEST_FAIL("dist %d seed %#" PRIx64 " offset %" PRIu64 " (buffer +%zu, %zu words): "
                  "word %zu differs",
                  dist, seed, offset, buf_off, count, i);
  free(got);
  free(want);
}

TEST(rng_matches_cpu) {
  fx f = fx_open_with(0);
  for (int i = 0; i < 30; i++)
    rng_random_case(&f, (be_rng_dist)(i % 3), cuda_rnd_range(1, 300000));
  rng_random_case(&f, BE_RNG_UNIFORM, ((size_t)1 << 24) + 3); /* many grid strides */
  rng_random_case(&f, BE_RNG_NORMAL, ((size_t)1 << 22) + 1);
  fx_close(&f);
}

/* ---- transfers ------------------------------------------------------------------------ */

static void fill_random(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = cuda_rnd64() | 0x0101010101010101ull; /* no zero byte */
    memcpy(p + i, &v, n - i < 8 ? n - i : 8);
  }
}

/* h2d at a random offset of a device buffer, d2h back, both from pageable (or given) host
 * memory. */
static void round_trip(fx *f, size_t n, uint8_t *src, uint8_t *dst) {
  size_t off = cuda_rnd_range(0, 4095);
  be_mem m = mem_new(f, off + n);
  fill_random(src, n);
  memset(dst, 0, n);
  CHECK_OK(B->copy_h2d(f->q, m, off, src, n));
  CHECK_OK(B->copy_d2h(f->q, dst, m, off, n));
  finish(f);
  if (memcmp(src, dst, n) != 0)
    TEST_FAIL("round trip of %zu bytes at device offset %zu differs", n, off);
  B->mem_free(f->d, &m);
}

TEST(pageable_copies) {
  fx f = fx_open_with(0);
  size_t sizes[] = {1,
                    3,
                    4096,
                    (1u << 20) - 1,
                    1u << 20,
                    (1u << 20) + 1,
                    (8u << 20) + 5,
                    (37u << 20) + 3,
                    cuda_rnd_range(1, 64u << 20)};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    uint8_t *src = cuda_xmalloc(sizes[i]), *dst = cuda_xmalloc(sizes[i]);
    round_trip(&f, sizes[i], src, dst);
    free(src);
    free(dst);
  }
  fx_close(&f);
}

TEST(pinned_copies) {
  fx f = fx_open_with(0);
  size_t n = (48u << 20) + 7;
  void *src = NULL, *dst = NULL;
  CHECK_EQ(be_cu.cuMemHostAlloc(&src, n, 0), CUDA_SUCCESS);
  CHECK_EQ(be_cu.cuMemHostAlloc(&dst, n, 0), CUDA_SUCCESS);
  round_trip(&f, n, src, dst);
  round_trip(&f, 1000, (uint8_t *)src + 3, (uint8_t *)dst + 5); /* inside the allocation */
  be_cu.cuMemFreeHost(src);
  be_cu.cuMemFreeHost(dst);
  fx_close(&f);
}

static pin_cache_stats pins_now(void) {
  pin_cache_stats s;
  be_cuda_pin_stats(&s);
  return s;
}

static void fill_byte(fx *f, be_mem m, size_t n, uint8_t v) {
  CHECK_OK(be_fill_u32(B, f->q, m, 0, n / 4, v * 0x01010101u));
  finish(f);
}

static void check_all(const uint8_t *p, size_t n, uint8_t v, const char *what) {
  for (size_t i = 0; i < n; i += 4093)
    if (p[i] != v)
      TEST_FAIL("%s: byte %zu is %#x, want %#x", what, i, p[i], v);
  if (p[n - 1] != v)
    TEST_FAIL("%s: the last byte is %#x, want %#x", what, p[n - 1], v);
}

/* Memory copied twice is registered by the pin cache, and copies from it then go by DMA. Then
 * it is unmapped and other memory mapped at the same addresses: the driver still holds the
 * old registration (it would DMA the old pages, measured), but the cache saw the unmap, so the
 * new bytes arrive, both ways. */
TEST(pin_cache_pins_reused_memory_and_never_serves_a_stale_registration) {
  fx f = fx_open_with(0);
  size_t n = 16u << 20;
  be_mem m = mem_new(&f, n);
  uint8_t *h = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(h != MAP_FAILED);
  memset(h, 0xa1, n);
  pin_cache_stats s0 = pins_now();
  for (int i = 0; i < 2; i++)
    CHECK_OK(B->copy_h2d(f.q, m, 0, h, n));
  finish(&f);
  be_cuda_pin_flush();
  CHECK_EQ(pins_now().pins, s0.pins + 1); /* needs userfaultfd, which this machine has */
  memset(h, 0xa2, n);
  CHECK_OK(B->copy_h2d(f.q, m, 0, h, n)); /* by DMA from the registered pages */
  memset(h, 0, n);
  CHECK_OK(B->copy_d2h(f.q, h, m, 0, n));
  finish(&f);
  CHECK_EQ(pins_now().hits, s0.hits + 2);
  check_all(h, n, 0xa2, "round trip through registered memory");

  /* Other pages at the same addresses at once (the kernel unmaps the old: an event), so that
   * no other thread can take the addresses in between. */
  uint8_t *again = mmap(h, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                        0);
  CHECK(again == h);
  memset(again, 0xb3, n);
  CHECK_OK(B->copy_h2d(f.q, m, 0, again, n));
  uint8_t *back = cuda_xmalloc(n);
  CHECK_OK(B->copy_d2h(f.q, back, m, 0, n));
  finish(&f);
  check_all(back, n, 0xb3, "h2d from memory mapped where registered memory was");
  fill_byte(&f, m, n, 0xc4);
  CHECK_OK(B->copy_d2h(f.q, again, m, 0, n));
  finish(&f);
  check_all(again, n, 0xc4, "d2h into memory mapped where registered memory was");
  CHECK_EQ(pins_now().invalidated, s0.invalidated + 1);
  free(back);
  munmap(again, n);
  B->mem_free(f.d, &m);
  fx_close(&f);
}

/* One queue, nothing waited for in between: a large h2d of H, a fill over part of the
 * device buffer, a large d2h into H itself (read, then written, in stream order), then a
 * small h2d and d2h through the bounce buffer over the same host memory. */
TEST(transfers_keep_stream_order) {
  fx f = fx_open_with(0);
  size_t words = (20u << 20) + 11, fill_at = cuda_rnd_range(0, words - 2000), fill_n = 999;
  uint32_t *h = cuda_xmalloc(words * 4), *want = cuda_xmalloc(words * 4), v = 0x5eed1234u;
  fill_random((uint8_t *)h, words * 4);
  memcpy(want, h, words * 4);
  for (size_t i = 0; i < fill_n; i++)
    want[fill_at + i] = v;
  be_mem m = mem_new(&f, words * 4), small = mem_new(&f, 4096);
  CHECK_OK(B->copy_h2d(f.q, m, 0, h, words * 4));
  CHECK_OK(be_fill_u32(B, f.q, m, fill_at, fill_n, v));
  CHECK_OK(B->copy_d2h(f.q, h, m, 0, words * 4));
  CHECK_OK(B->copy_h2d(f.q, small, 0, h + fill_at, 4096));
  CHECK_OK(be_fill_u32(B, f.q, small, 0, 1, ~v));
  CHECK_OK(B->copy_d2h(f.q, h + fill_at, small, 0, 4096));
  want[fill_at] = ~v;
  finish(&f);
  for (size_t i = 0; i < words; i++)
    if (h[i] != want[i])
      TEST_FAIL("word %zu: %#x, want %#x (fill at %zu)", i, h[i], want[i], fill_at);
  B->mem_free(f.d, &m);
  B->mem_free(f.d, &small);
  free(h);
  free(want);
  fx_close(&f);
}

/* The stream memory operations the stager stands on: a stream waits on a word of pinned host
 * memory until the host writes it, and writes another word the host then reads. */
TEST(stream_waits_on_host_memory) {
  fx f = fx_open_with(0);
  CU_OK(be_cu.cuCtxSetCurrent((CUcontext)(uintptr_t)be_cuda_context(f.d)));
  CUstream s = (CUstream)(uintptr_t)be_cuda_stream(f.q);
  void *host = NULL;
  CUdeviceptr wd = 0, d = 0;
  CU_OK(be_cu.cuMemHostAlloc(&host, 64, CU_MEMHOSTALLOC_DEVICEMAP));
  volatile uint32_t *w = host;
  w[0] = w[1] = 0;
  CU_OK(be_cu.cuMemHostGetDevicePointer(&wd, host, 0));
  printf("    host %p, device %#llx\n", host, (unsigned long long)wd);
  CU_OK(be_cu.cuMemAlloc(&d, 4));
  CU_OK(be_cu.cuMemsetD32Async(d, 1, 1, s));
  CU_OK(be_cu.cuStreamWaitValue32(s, wd, 5, CU_STREAM_WAIT_VALUE_GEQ));
  CU_OK(be_cu.cuMemsetD32Async(d, 2, 1, s));
  CU_OK(be_cu.cuStreamWriteValue32(s, wd + 4, 7, CU_STREAM_WRITE_VALUE_DEFAULT));
  test_sleep_ms(50);
  CUresult pending = be_cu.cuStreamQuery(s);
  uint32_t early = w[1];
  w[0] = 5;
  CU_OK(be_cu.cuStreamSynchronize(s));
  uint32_t got = 0;
  CU_OK(be_cu.cuMemcpyDtoHAsync(&got, d, 4, s));
  CU_OK(be_cu.cuStreamSynchronize(s));
  printf("    before the host's write: stream %s, word %u; after: word %u, memory %u\n",
         be_cuda_err_name(pending), early, w[1], got);
  CHECK_EQ(pending, CUDA_ERROR_NOT_READY);
  CHECK_EQ(early, 0);
  CHECK_EQ(w[1], 7);
  CHECK_EQ(got, 2);
  be_cu.cuMemFree(d);
  be_cu.cuMemFreeHost(host);
  fx_close(&f);
}

/* Counts the bytes that differ; prints the first. */
static size_t mismatches(const uint8_t *got, const uint8_t *want, size_t n, const char *what) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i] && bad++ == 0)
      first = i;
  if (bad > 0)
    printf("    %s: %zu of %zu bytes differ, the first at %zu\n", what, bad, n, first);
  return bad;
}

/* Each direction of the stager alone, the other done in pieces through the bounce buffer. */
TEST(stager_each_direction) {
  fx f = fx_open_with(0);
  size_t n = (3u << 20) + 5, piece = 1u << 20;
  uint8_t *src = cuda_xmalloc(n), *dst = cuda_xmalloc(n);
  be_mem m = mem_new(&f, n);
  fill_random(src, n);
  memset(dst, 0, n);
  CHECK_OK(B->copy_h2d(f.q, m, 0, src, n));
  for (size_t o = 0; o < n; o += piece)
    CHECK_OK(B->copy_d2h(f.q, dst + o, m, o, n - o < piece ? n - o : piece));
  finish(&f);
  size_t bad = mismatches(dst, src, n, "stager h2d, bounce d2h");
  fill_random(src, n);
  memset(dst, 0, n);
  for (size_t o = 0; o < n; o += piece)
    CHECK_OK(B->copy_h2d(f.q, m, o, src + o, n - o < piece ? n - o : piece));
  CHECK_OK(B->copy_d2h(f.q, dst, m, 0, n));
  finish(&f);
  bad += mismatches(dst, src, n, "bounce h2d, stager d2h");
  CHECK_EQ(bad, 0);
  B->mem_free(f.d, &m);
  free(src);
  free(dst);
  fx_close(&f);
}

/* ---- sgemm: FP32 and TF32 ------------------------------------------------------------- */

/* ||C - A B|| / ||A B|| (Frobenius), A B in double. */
static double sgemm_error(fx *f, size_t n, const float *a, const float *b, const double *ref) {
  be_mem ma = mem_new(f, n * n * 4), mb = mem_new(f, n * n * 4), mc = mem_new(f, n * n * 4);
  float *c = cuda_xmalloc(n * n * 4);
  be_sgemm_args g = {.m = (int64_t)n,
                     .n = (int64_t)n,
                     .k = (int64_t)n,
                     .alpha = 1,
                     .beta = 0,
                     .lda = (int64_t)n,
                     .ldb = (int64_t)n,
                     .ldc = (int64_t)n};
  CHECK_OK(B->copy_h2d(f->q, ma, 0, a, n * n * 4));
  CHECK_OK(B->copy_h2d(f->q, mb, 0, b, n * n * 4));
  CHECK_OK(be_sgemm(B, f->q, &g, ma, 0, mb, 0, mc, 0));
  CHECK_OK(B->copy_d2h(f->q, c, mc, 0, n * n * 4));
  finish(f);
  double num = 0, den = 0;
  for (size_t i = 0; i < n * n; i++) {
    num += (c[i] - ref[i]) * (c[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  B->mem_free(f->d, &ma);
  B->mem_free(f->d, &mb);
  B->mem_free(f->d, &mc);
  free(c);
  return sqrt(num / den);
}

TEST(sgemm_fp32_and_tf32) {
  fx f = fx_open_with(0);
  size_t n = 384;
  float *a = cuda_xmalloc(n * n * 4), *b = cuda_xmalloc(n * n * 4);
  double *ref = cuda_xmalloc(n * n * 8);
  for (size_t i = 0; i < n * n; i++) {
    a[i] = cuda_rnd_nz(0.01f, 1);
    b[i] = cuda_rnd_nz(0.01f, 1);
  }
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < n; i++) {
      double s = 0;
      for (size_t l = 0; l < n; l++)
        s += (double)a[i + l * n] * b[l + j * n];
      ref[i + j * n] = s;
    }
  double e32 = sgemm_error(&f, n, a, b, ref);
  CHECK_OK(be_cuda_set_tf32(f.d, true));
  double etf = sgemm_error(&f, n, a, b, ref);
  CHECK_OK(be_cuda_set_tf32(f.d, false));
  printf("    relative error: FP32 %.2e, TF32 %.2e\n", e32, etf);
  CHECK(e32 < 1e-5);
  CHECK(etf < 5e-3);
  CHECK(etf > 4 * e32); /* the switch reached the tensor cores */
  free(a);
  free(b);
  free(ref);
  fx_close(&f);
}

/* ---- faults --------------------------------------------------------------------------- */

/* Callbacks queued behind a held one when a fault comes: each is called once, with
 * ACCEL_EDEVLOST, whether the held one has returned or not; what happened when is printed. */
typedef struct cb_seen {
  atomic_int calls, status, after_inject, order;
} cb_seen;

static atomic_int injected, cb_order, gate_open, gate_in;

static void seen_fn(void *arg, int status) {
  cb_seen *c = arg;
  atomic_store(&c->status, status);
  atomic_store(&c->after_inject, atomic_load(&injected));
  atomic_store(&c->order, atomic_fetch_add(&cb_order, 1));
  atomic_fetch_add(&c->calls, 1);
}

static void hold_fn(void *arg, int status) {
  (void)arg;
  (void)status;
  atomic_store(&gate_in, 1);
  uint64_t t0 = test_now_ms();
  while (!atomic_load(&gate_open) && test_now_ms() - t0 < 10000)
    test_sleep_ms(1);
}

static int count_calls(cb_seen *c, int n, int *ok, int *late) {
  int calls = 0;
  *ok = *late = 0;
  for (int i = 0; i < n; i++) {
    calls += atomic_load(&c[i].calls);
    *ok += atomic_load(&c[i].calls) && atomic_load(&c[i].status) == 0;
    *late += atomic_load(&c[i].calls) && !atomic_load(&c[i].after_inject);
  }
  return calls;
}

TEST(callbacks_across_a_fault) {
  enum { N = 40 };
  fx f = fx_open_with(1);
  be_mem m = mem_new(&f, 1 << 16);
  cb_seen c[N];
  memset(c, 0, sizeof c);
  CHECK_OK(B->host_callback(f.q, hold_fn, NULL));
  for (int i = 0; i < N; i++) {
    CHECK_OK(be_fill_u32(B, f.q, m, 0, 1 << 14, (uint32_t)i));
    CHECK_OK(B->host_callback(f.q, seen_fn, &c[i]));
  }
  while (!atomic_load(&gate_in))
    test_sleep_ms(1);
  int ok, before;
  int early = count_calls(c, N, &ok, &before);
  CHECK_OK(B->inject_fault(f.d));
  atomic_store(&injected, 1);
  test_sleep_ms(100);
  int held = count_calls(c, N, &ok, &before);
  atomic_store(&gate_open, 1);
  for (uint64_t t0 = test_now_ms(); count_calls(c, N, &ok, &before) < N;)
    if (test_now_ms() - t0 > 5000)
      break;
  int all = count_calls(c, N, &ok, &before);
  printf("    called before the fault %d, while held %d, in all %d of %d; with status 0: %d; "
         "before inject returned: %d\n",
         early, held, all, N, ok, before);
  CHECK_EQ(all, N);
  CHECK_EQ(ok, 0);
  B->mem_free(f.d, &m);
  fx_close(&f);
}

/* How far submissions get behind a callback that blocks (the conformance suite's "gate"):
 * the driver blocks the submitting thread once a held stream has a few hundred operations
 * waiting, until the callback returns (here after 2 s). Printed; each callback still runs
 * once. */
static void hold_2s(void *arg, int status) {
  (void)arg;
  (void)status;
  atomic_store(&gate_in, 1);
  test_sleep_ms(2000);
}

TEST(submitting_behind_a_blocked_callback) {
  enum { N = 200 };
  fx f = fx_open_with(0);
  be_mem m = mem_new(&f, 1 << 16);
  static cb_seen c[N];
  memset(c, 0, sizeof c);
  atomic_store(&gate_in, 0);
  CHECK_OK(B->host_callback(f.q, hold_2s, NULL));
  uint64_t t0 = test_now_ns();
  int stalled_at = -1;
  for (int i = 0; i < N; i++) {
    uint64_t t1 = test_now_ns();
    CHECK_OK(be_fill_u32(B, f.q, m, 0, 1 << 13, (uint32_t)i + 1));
    CHECK_OK(B->host_callback(f.q, seen_fn, &c[i]));
    if (stalled_at < 0 && test_now_ns() - t1 > 500000000u)
      stalled_at = i;
  }
  printf("    %d fills and callbacks behind a callback blocked for 2 s: submitted in %.0f ms%s", N,
         (double)(test_now_ns() - t0) / 1e6, stalled_at < 0 ? "\n" : "");
  if (stalled_at >= 0)
    printf(" (the driver held the submitter at operation pair %d)\n", stalled_at);
  finish(&f);
  int ok, before;
  CHECK_EQ(count_calls(c, N, &ok, &before), N);
  CHECK_EQ(ok, N);
  B->mem_free(f.d, &m);
  fx_close(&f);
}

/* host_notify does not hold its queue: while a notification's function is blocked, later
 * kernels on the queue run to completion, and the notifications after it wait their turn, in
 * order. (Only kernels: the driver may run every host function of a context on one thread, so
 * a blocked one of either kind delays the others, a pageable copy's host side among them.) */
static atomic_int note_open, note_in;

static void note_hold(void *arg, int status) {
  (void)arg;
  (void)status;
  atomic_store(&note_in, 1);
  uint64_t t0 = test_now_ms();
  while (!atomic_load(&note_open) && test_now_ms() - t0 < 10000)
    test_sleep_ms(1);
}

TEST(notify_does_not_hold_the_queue) {
  enum { N = 16 };
  fx f = fx_open_with(0);
  be_mem m = mem_new(&f, 1 << 16);
  cb_seen c[N];
  memset(c, 0, sizeof c);
  CHECK_OK(be_fill_u32(B, f.q, m, 0, 1 << 14, 1));
  CHECK_OK(B->host_notify(f.q, note_hold, NULL));
  for (int i = 0; i < N; i++) {
    CHECK_OK(be_fill_u32(B, f.q, m, 0, 1 << 14, (uint32_t)i + 2));
    CHECK_OK(B->host_notify(f.q, seen_fn, &c[i]));
  }
  for (uint64_t t0 = test_now_ms(); !atomic_load(&note_in);)
    if (test_now_ms() - t0 > 5000)
      TEST_FAIL("the held notification never ran");
  uint64_t t0 = test_now_ms();
  finish(&f);
  uint64_t ms = test_now_ms() - t0;
  int ok, before;
  int held = count_calls(c, N, &ok, &before);
  atomic_store(&note_open, 1);
  for (t0 = test_now_ms(); count_calls(c, N, &ok, &before) < N;)
    if (test_now_ms() - t0 > 5000)
      break;
  printf("    queue finished in %" PRIu64 " ms behind a held notification; notifications "
         "called meanwhile: %d\n",
         ms, held);
  uint32_t got = 0;
  CHECK_OK(B->copy_d2h(f.q, &got, m, 0, 4));
  finish(&f);
  CHECK_LT(ms, 5000);
  CHECK_EQ(got, (uint32_t)N + 1);
  CHECK_EQ(held, 0);
  CHECK_EQ(count_calls(c, N, &ok, &before), N);
  CHECK_EQ(ok, N);
  for (int i = 1; i < N; i++)
    CHECK_GT(atomic_load(&c[i].order), atomic_load(&c[i - 1].order));
  B->mem_free(f.d, &m);
  fx_close(&f);
}

/* The default (soft) fault, then reset: the device serves again. */
TEST(fault_and_reset) {
  fx f = fx_open_with(1);
  be_mem m = mem_new(&f, 1 << 20);
  CHECK_OK(be_fill_u32(B, f.q, m, 0, 1 << 18, 7));
  finish(&f);
  uint64_t t0 = test_now_ns();
  CHECK_OK(B->inject_fault(f.d));
  CHECK_ERR(B->status(f.d), ACCEL_EDEVLOST);
  CHECK_ERR(be_fill_u32(B, f.q, m, 0, 1, 7), ACCEL_EDEVLOST);
  B->mem_free(f.d, &m);
  B->queue_destroy(f.q);
  CHECK_OK(B->reset(f.d));
  CHECK_OK(B->queue_create(f.d, &f.q));
  m = mem_new(&f, 4096);
  uint32_t got = 0;
  CHECK_OK(be_fill_u32(B, f.q, m, 0, 1024, 9));
  CHECK_OK(B->copy_d2h(f.q, &got, m, 4092, 4));
  finish(&f);
  CHECK_EQ(got, 9);
  printf("    fault to serving (backend: inject, reset, new queue, first op): %.1f ms\n",
         (double)(test_now_ns() - t0) / 1e6);
  B->mem_free(f.d, &m);
  fx_close(&f);
}

static void count_cb(void *arg, int status) {
  atomic_store((atomic_int *)arg, status == ACCEL_EDEVLOST ? 2 : 1);
}

/* With ACCEL_CUDA_FAULT=trap or oob (alone in its process: it breaks CUDA for the process):
 * the fault kernel breaks the context for real. Work in flight and every later call report
 * ACCEL_EDEVLOST; then reset either brings the device back or fails cleanly (the device
 * stays lost, a new open fails): which one is printed. */
TEST(fault_real_break) {
  const char *mode = getenv("ACCEL_CUDA_FAULT");
  if (mode == NULL || (strcmp(mode, "trap") != 0 && strcmp(mode, "oob") != 0)) {
    printf("    (ACCEL_CUDA_FAULT=trap|oob runs it; it must run alone in its process)\n");
    return;
  }
  fx f = fx_open_with(1);
  be_mem m = mem_new(&f, 1 << 24);
  atomic_int cb = 0;
  for (int i = 0; i < 20; i++)
    CHECK_OK(be_fill_u32(B, f.q, m, 0, 1 << 22, (uint32_t)i));
  CHECK_OK(B->host_callback(f.q, count_cb, &cb));
  CHECK_OK(B->inject_fault(f.d));
  CHECK_ERR(B->status(f.d), ACCEL_EDEVLOST);
  CHECK_ERR(be_fill_u32(B, f.q, m, 0, 1, 7), ACCEL_EDEVLOST);
  B->mem_free(f.d, &m);
  B->queue_destroy(f.q);
  CHECK_EQ(atomic_load(&cb), 2);
  int rc = B->reset(f.d);
  be_device *other = NULL;
  int rc2 = B->open(0, NULL, &other);
  printf("    %s: in-process recovery %s (reset: %s, new open: %s)\n", mode,
         rc == 0 && rc2 == 0 ? "works" : "impossible", accel_err_name(rc), accel_err_name(rc2));
  if (rc != 0)
    CHECK_ERR(B->status(f.d), ACCEL_EDEVLOST);
  if (other != NULL)
    B->close(other);
  B->close(f.d);
}

static const test_case tests[] = {
    TEST_CASE(stream_waits_on_host_memory),
    TEST_CASE(stager_each_direction),
    TEST_CASE(rng_matches_curand),
    TEST_CASE(rng_matches_cpu),
    TEST_CASE(pageable_copies),
    TEST_CASE(pinned_copies),
    TEST_CASE(pin_cache_pins_reused_memory_and_never_serves_a_stale_registration),
    TEST_CASE(transfers_keep_stream_order),
    TEST_CASE(sgemm_fp32_and_tf32),
    TEST_CASE(callbacks_across_a_fault),
    TEST_CASE(submitting_behind_a_blocked_callback),
    TEST_CASE(notify_does_not_hold_the_queue),
    TEST_CASE(fault_and_reset),
    TEST_CASE(fault_real_break),
};

int main(int argc, char **argv) {
  char why[128] = "";
  int count = 0;
  if (B->probe(&count, why, sizeof why) != 0 || count == 0)
    return cuda_test_skip(why[0] ? why : "no device");
  cuda_test_seed();
  return test_main_(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
