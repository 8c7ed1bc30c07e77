/* bench-cuda: the CUDA backend against the libraries and driver calls it stands on, ratios
 * measured in one run on one GPU (docs/PERFORMANCE.md, "CUDA (H200)"):
 *   sgemm      accel_sgemm on device-resident buffers vs cublasSgemm / cublasGemmEx (TF32)
 *              called directly, n = 256, 1024, 2048, 4096;
 *   rng        accel_rng_fill (uniform) vs cuRAND's Philox4_32_10 host generator;
 *   tiny op    a 1-element fill through accel, per completion strategy, vs cuLaunchKernel of
 *              the same kernel + the same kind of completion done by hand;
 *   transfers  host <-> device through accel (backend and API) vs raw pinned cuMemcpy;
 *   faults     time from an injected fault to the first op served again.
 * Every number is the median of many runs after a warm-up; GPU work in the baselines is
 * timed with CUDA events where the comparison allows (the same clock on both sides otherwise:
 * host time around a batch, which includes the batch's submission). Inputs are random,
 * never zeros. Without a CUDA device it exits 77 (meson's SKIP). --quick: fewer runs; --only
 * PART[,PART...]: those parts (transfers, sgemm, rng, tiny, memory, fault). Before each part
 * it prints the process's threads and the CPU it uses while idle. */
#include <curand.h>
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../be_f32.h"
#include "accel/accel.h"
#include "backends/backend.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/cublas_lib.h"
#include "backends/cuda/driver.h"

#define BENCH_NAME "bench-cuda"
#include "bench_cuda_util.h"

static int REPS = 9;

/* ---- helpers -------------------------------------------------------------------------- */

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static float rnd_float(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) * 0x1p-53) * 2.0f - 1.0f + 0x1p-20f;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL)
    DIE("out of memory");
  return p;
}

static float *random_floats(size_t n) {
  float *p = xmalloc(n * 4);
  for (size_t i = 0; i < n; i++)
    p[i] = rnd_float();
  return p;
}

/* ---- the raw side: the driver, cuBLAS and cuRAND by hand ------------------------------ */

typedef struct raw {
  be_device *dev; /* the backend's device: its context, its module, the driver table */
  CUstream stream;
  CUevent e0, e1;
  CUfunction fill, null;
} raw;

static void raw_enter(raw *r) {
  CU(be_cu.cuCtxSetCurrent((CUcontext)(uintptr_t)be_cuda_context(r->dev)));
}

static raw raw_open(void) {
  raw r = {0};
  /* No pin cache from this device: the staged rows of the transfers run before any accel
   * context opens (and makes one). */
  be_open_opts opts = {.pinned_max = BE_PINNED_OFF};
  OK(be_cuda_ops.open(0, &opts, &r.dev));
  raw_enter(&r);
  CU(be_cu.cuStreamCreate(&r.stream, CU_STREAM_NON_BLOCKING));
  CU(be_cu.cuEventCreate(&r.e0, CU_EVENT_DEFAULT));
  CU(be_cu.cuEventCreate(&r.e1, CU_EVENT_DEFAULT));
  r.fill = (CUfunction)(uintptr_t)be_cuda_function(r.dev, "be_fill_u32");
  r.null = (CUfunction)(uintptr_t)be_cuda_function(r.dev, "be_null");
  return r;
}

static void raw_close(raw *r) {
  raw_enter(r);
  be_cu.cuEventDestroy(r->e0);
  be_cu.cuEventDestroy(r->e1);
  be_cu.cuStreamDestroy(r->stream);
  be_cuda_ops.close(r->dev);
}

static double event_ms(raw *r) {
  float ms = 0;
  CU(be_cu.cuEventSynchronize(r->e1));
  CU(be_cu.cuEventElapsedTime(&ms, r->e0, r->e1));
  return ms;
}

static CUdeviceptr raw_alloc_random(raw *r, size_t floats) {
  CUdeviceptr p;
  float *h = random_floats(floats);
  CU(be_cu.cuMemAlloc(&p, floats * 4));
  CU(be_cu.cuMemcpyHtoDAsync(p, h, floats * 4, r->stream)); /* pageable: synchronous */
  CU(be_cu.cuStreamSynchronize(r->stream));
  free(h);
  return p;
}

/* ---- accel contexts ------------------------------------------------------------------- */

static accel_device find_gpu(accel_ctx *ctx) {
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    if (accel_device_info(ctx, d, &info) == 0 && strcmp(info.backend, "cuda") == 0)
      return d;
  }
  DIE("no cuda device in the accel context");
}

static accel_ctx *ctx_open(const char *url, accel_device *gpu) {
  accel_ctx *ctx = NULL;
  OK(accel_open(&ctx, url));
  *gpu = find_gpu(ctx);
  return ctx;
}

static accel_buffer buf_random(accel_ctx *ctx, size_t n) {
  accel_buffer b;
  float *h = random_floats(n);
  OK(accel_buffer_create(ctx, ACCEL_F32, n, &b));
  OK(accel_write(ctx, b, 0, h, n, NULL));
  OK(accel_finish(ctx, -1));
  free(h);
  return b;
}

/* ---- sgemm ---------------------------------------------------------------------------- */

enum { NC = 4 }; /* C buffers taken in turn, so that the ops are independent */

typedef struct gemm_in {
  int n, k_ops;
  bool tf32, gemm_ex; /* FP32 through cublasGemmEx instead of cublasSgemm */
} gemm_in;

static cublasStatus_t direct_one(const be_cublas_api *api, cublasHandle_t h, const gemm_in *g,
                                 CUdeviceptr a, CUdeviceptr b, CUdeviceptr c) {
  const float one = 1, zero = 0;
  const float *pa = (const float *)(uintptr_t)a, *pb = (const float *)(uintptr_t)b;
  float *pc = (float *)(uintptr_t)c;
  if (!g->tf32 && !g->gemm_ex)
    return api->cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one, pa, g->n, pb,
                               g->n, &zero, pc, g->n);
  return api->cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one, pa, CUDA_R_32F,
                           g->n, pb, CUDA_R_32F, g->n, &zero, pc, CUDA_R_32F, g->n,
                           g->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT);
}

/* The direct side of one size: its own cuBLAS handle on the raw stream, and its matrices. */
typedef struct direct_gemm {
  const be_cublas_api *api;
  cublasHandle_t h;
  CUdeviceptr a, b, c[NC];
} direct_gemm;

static void direct_open(raw *r, const gemm_in *g, direct_gemm *d) {
  d->api = be_cublas();
  if (d->api == NULL)
    DIE("cuBLAS not found");
  raw_enter(r);
  if (d->api->cublasCreate_v2(&d->h) != 0 || d->api->cublasSetStream_v2(d->h, r->stream) != 0)
    DIE("cublasCreate");
  size_t nn = (size_t)g->n * (size_t)g->n;
  d->a = raw_alloc_random(r, nn);
  d->b = raw_alloc_random(r, nn);
  for (int i = 0; i < NC; i++)
    d->c[i] = raw_alloc_random(r, nn);
  for (int i = 0; i < 3; i++)
    direct_one(d->api, d->h, g, d->a, d->b, d->c[i % NC]);
  CU(be_cu.cuStreamSynchronize(r->stream));
}

/* Seconds per sgemm: host clock around k_ops and a stream sync (*ev_s: CUDA events). */
static double direct_rep(raw *r, const gemm_in *g, direct_gemm *d, double *ev_s) {
  raw_enter(r);
  double t0 = now_s();
  CU(be_cu.cuEventRecord(r->e0, r->stream));
  for (int i = 0; i < g->k_ops; i++)
    if (direct_one(d->api, d->h, g, d->a, d->b, d->c[i % NC]) != CUBLAS_STATUS_SUCCESS)
      DIE("cublas gemm");
  CU(be_cu.cuEventRecord(r->e1, r->stream));
  CU(be_cu.cuStreamSynchronize(r->stream));
  double wall = (now_s() - t0) / g->k_ops;
  *ev_s = event_ms(r) * 1e-3 / g->k_ops;
  return wall;
}

static void direct_close(raw *r, direct_gemm *d) {
  raw_enter(r);
  d->api->cublasDestroy_v2(d->h);
  be_cu.cuMemFree(d->a);
  be_cu.cuMemFree(d->b);
  for (int i = 0; i < NC; i++)
    be_cu.cuMemFree(d->c[i]);
}

/* Medians of REPS repetitions of the direct call alone (*ev_s: by CUDA events). */
static double direct_sgemm(raw *r, const gemm_in *g, double *ev_s) {
  direct_gemm d;
  direct_open(r, g, &d);
  double wall[64], ev[64];
  for (int rep = 0; rep < REPS; rep++)
    wall[rep] = direct_rep(r, g, &d, &ev[rep]);
  direct_close(r, &d);
  *ev_s = median(ev, REPS);
  return median(wall, REPS);
}

/* The accel side of one size: its buffers in an open context. */
typedef struct api_gemm {
  accel_ctx *ctx;
  accel_device gpu;
  accel_buffer a, b, c[NC];
} api_gemm;

static void accel_gemm_open(accel_ctx *ctx, accel_device gpu, const gemm_in *g, api_gemm *x) {
  size_t n = (size_t)g->n, nn = n * n;
  *x = (api_gemm){.ctx = ctx, .gpu = gpu, .a = buf_random(ctx, nn), .b = buf_random(ctx, nn)};
  for (int i = 0; i < NC; i++)
    OK(accel_buffer_create(ctx, ACCEL_F32, nn, &x->c[i]));
  for (int i = 0; i < 2 * NC; i++) /* moves A and B to the GPU once; C stays there */
    OK(accel_sgemm(ctx, gpu, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1, x->a, n, x->b, n, 0,
                   x->c[i % NC], n, NULL));
  OK(accel_finish(ctx, -1));
}

/* Seconds per sgemm through the API: host clock around k_ops and accel_finish. */
static double accel_rep(const gemm_in *g, api_gemm *x) {
  size_t n = (size_t)g->n;
  double t0 = now_s();
  for (int i = 0; i < g->k_ops; i++)
    OK(accel_sgemm(x->ctx, x->gpu, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1, x->a, n, x->b, n, 0,
                   x->c[i % NC], n, NULL));
  OK(accel_finish(x->ctx, -1));
  return (now_s() - t0) / g->k_ops;
}

static void accel_gemm_close(api_gemm *x) {
  accel_buffer_destroy(x->ctx, x->a);
  accel_buffer_destroy(x->ctx, x->b);
  for (int i = 0; i < NC; i++)
    accel_buffer_destroy(x->ctx, x->c[i]);
  OK(accel_finish(x->ctx, -1));
}

/* Medians of REPS repetitions, the direct call's and accel's alternating, so that the GPU's
 * clocks and the host's load drift under both alike (a reference measured once, before every
 * strategy's rows, moved by up to 10% against them). */
static void alternate(raw *r, accel_ctx *ctx, accel_device gpu, const gemm_in *g, double *t_accel,
                      double *t_direct) {
  direct_gemm d;
  api_gemm x;
  direct_open(r, g, &d);
  accel_gemm_open(ctx, gpu, g, &x);
  double ta[64], td[64], ev;
  for (int rep = 0; rep < REPS; rep++) {
    td[rep] = direct_rep(r, g, &d, &ev);
    ta[rep] = accel_rep(g, &x);
  }
  accel_gemm_close(&x);
  direct_close(r, &d);
  *t_accel = median(ta, REPS);
  *t_direct = median(td, REPS);
}

static void fmt_tflops(char *buf, size_t len, int n, double s) {
  snprintf(buf, len, "%.1f TFLOP/s", 2.0 * n * (double)n * n / s * 1e-12);
}

static const char *const strategies[] = {"callback", "sync", "poll"};

/* cuBLAS direct for one size: the batch length (about 50 ms of work) and the times. */
static gemm_in direct_setup(raw *r, int n, bool tf32, double *t, double *ev) {
  gemm_in g = {.n = n, .k_ops = 3, .tf32 = tf32};
  *t = direct_sgemm(r, &g, ev);
  g.k_ops = (int)fmin(2000, fmax(10, 0.05 / *t));
  *t = direct_sgemm(r, &g, ev);
  return g;
}

static void sgemm_row(const gemm_in *g, const char *how, double ta, double t) {
  char what[48], a[24], ref[24];
  snprintf(what, sizeof what, "sgemm %s n=%d, %s (x%d)", g->tf32 ? "TF32" : "FP32", g->n, how,
           g->k_ops);
  fmt_tflops(a, sizeof a, g->n, ta);
  fmt_tflops(ref, sizeof ref, g->n, t);
  add_row(what, a, ref, t / ta, g->n >= 2048 ? ">= 0.97" : "");
  printf("sgemm %s n=%d %s: accel %.3f ms, cuBLAS %.3f ms per op\n", g->tf32 ? "TF32" : "FP32",
         g->n, how, ta * 1e3, t * 1e3);
}

/* The FP32 reference at n = 256 is cublasSgemm, whose host time per call (19 us on an H100)
 * exceeds the GPU's (8 us): the rows also give accel against cublasGemmEx (13 us), the
 * cheapest cuBLAS call for the same product, so that a win over the slower call is not
 * mistaken for one over cuBLAS. */
static void gemm_ex_rows(const gemm_in *g, const char *how, double ta, double t_ex) {
  char what[48], a[24], ref[24];
  snprintf(what, sizeof what, "sgemm FP32 n=%d %s vs GemmEx", g->n, how);
  fmt_tflops(a, sizeof a, g->n, ta);
  fmt_tflops(ref, sizeof ref, g->n, t_ex);
  add_row(what, a, ref, t_ex / ta, "");
}

/* Per completion strategy: a context whose device runs FP32 or (ACCEL_CUDA_TF32, read at
 * open) TF32; each size's rows alternate the direct call and accel's. */
static void bench_sgemm_mode(raw *r, bool tf32) {
  static const int sizes[] = {256, 1024, 2048, 4096};
  gemm_in g[4];
  double t[4], ev[4];
  for (int i = 0; i < 4; i++) {
    g[i] = direct_setup(r, sizes[i], tf32, &t[i], &ev[i]);
    printf("cuBLAS %s n=%d: %.3f ms per op (events %.3f ms)\n", tf32 ? "TF32" : "FP32", sizes[i],
           t[i] * 1e3, ev[i] * 1e3);
  }
  for (int s = 0; s < 3; s++) {
    char url[64];
    snprintf(url, sizeof url, "embedded:?completion=%s", strategies[s]);
    if (tf32)
      setenv("ACCEL_CUDA_TF32", "1", 1);
    accel_device gpu;
    accel_ctx *ctx = ctx_open(url, &gpu);
    unsetenv("ACCEL_CUDA_TF32");
    for (int i = 0; i < 4; i++) {
      double ta, td;
      alternate(r, ctx, gpu, &g[i], &ta, &td);
      sgemm_row(&g[i], strategies[s], ta, td);
      if (i == 0 && !tf32) {
        gemm_in ex = g[0];
        ex.gemm_ex = true;
        double ta_ex, t_ex;
        alternate(r, ctx, gpu, &ex, &ta_ex, &t_ex);
        gemm_ex_rows(&g[i], strategies[s], ta_ex, t_ex);
      }
    }
    accel_close(ctx);
  }
}

static void bench_sgemm(raw *r) {
  bench_sgemm_mode(r, false);
  bench_sgemm_mode(r, true);
}

/* ---- rng ------------------------------------------------------------------------------ */

#define RNG_FLOATS ((size_t)64 << 20) /* 256 MiB */
#define RNG_OPS 10

typedef struct curand_api {
  curandStatus_t (*create)(curandGenerator_t *, curandRngType_t);
  curandStatus_t (*destroy)(curandGenerator_t);
  curandStatus_t (*set_stream)(curandGenerator_t, cudaStream_t);
  curandStatus_t (*set_seed)(curandGenerator_t, unsigned long long);
  curandStatus_t (*uniform)(curandGenerator_t, float *, size_t);
} curand_api;

static bool curand_load(curand_api *c) {
  void *lib = dlopen("libcurand.so.10", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL)
    lib = dlopen("/usr/local/cuda/lib64/libcurand.so.10", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL)
    return false;
  *(void **)(void *)&c->create = dlsym(lib, "curandCreateGenerator");
  *(void **)(void *)&c->destroy = dlsym(lib, "curandDestroyGenerator");
  *(void **)(void *)&c->set_stream = dlsym(lib, "curandSetStream");
  *(void **)(void *)&c->set_seed = dlsym(lib, "curandSetPseudoRandomGeneratorSeed");
  *(void **)(void *)&c->uniform = dlsym(lib, "curandGenerateUniform");
  return c->create && c->destroy && c->set_stream && c->set_seed && c->uniform;
}

/* Seconds per 256 MiB fill by cuRAND: *ev_s by events, returned by host clock. */
static double curand_fill(raw *r, double *ev_s) {
  curand_api c;
  if (!curand_load(&c))
    DIE("libcurand.so.10 not found");
  raw_enter(r);
  curandGenerator_t gen;
  if (c.create(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10) != 0 || c.set_stream(gen, r->stream) ||
      c.set_seed(gen, 1234))
    DIE("curand generator");
  CUdeviceptr p;
  CU(be_cu.cuMemAlloc(&p, RNG_FLOATS * 4));
  c.uniform(gen, (float *)(uintptr_t)p, RNG_FLOATS);
  CU(be_cu.cuStreamSynchronize(r->stream));
  double wall[64], ev[64];
  for (int rep = 0; rep < REPS; rep++) {
    double t0 = now_s();
    CU(be_cu.cuEventRecord(r->e0, r->stream));
    for (int i = 0; i < RNG_OPS; i++)
      c.uniform(gen, (float *)(uintptr_t)p, RNG_FLOATS);
    CU(be_cu.cuEventRecord(r->e1, r->stream));
    CU(be_cu.cuStreamSynchronize(r->stream));
    wall[rep] = (now_s() - t0) / RNG_OPS;
    ev[rep] = event_ms(r) * 1e-3 / RNG_OPS;
  }
  c.destroy(gen);
  be_cu.cuMemFree(p);
  *ev_s = median(ev, REPS);
  return median(wall, REPS);
}

/* The backend's kernel alone: rng_fill on a backend queue, timed by events on its stream. */
static double backend_rng_fill(raw *r) {
  be_queue *q;
  be_mem m;
  OK(be_cuda_ops.queue_create(r->dev, &q));
  OK(be_cuda_ops.mem_alloc(r->dev, RNG_FLOATS * 4, &m));
  CUstream s = (CUstream)(uintptr_t)be_cuda_stream(q);
  be_rng_args a = {.dist = BE_RNG_UNIFORM, .seed = 1234};
  OK(be_cuda_ops.rng->fill(q, ACCEL_F32, m, 0, RNG_FLOATS, &a));
  double ev[64];
  for (int rep = 0; rep < REPS; rep++) {
    raw_enter(r);
    CU(be_cu.cuEventRecord(r->e0, s));
    for (int i = 0; i < RNG_OPS; i++) {
      a.offset = (uint64_t)i * RNG_FLOATS;
      OK(be_cuda_ops.rng->fill(q, ACCEL_F32, m, 0, RNG_FLOATS, &a));
    }
    CU(be_cu.cuEventRecord(r->e1, s));
    ev[rep] = event_ms(r) * 1e-3 / RNG_OPS;
  }
  be_cuda_ops.queue_destroy(q);
  be_cuda_ops.mem_free(r->dev, &m);
  return median(ev, REPS);
}

static double accel_rng_time(const char *how) {
  char url[64];
  snprintf(url, sizeof url, "embedded:?completion=%s", how);
  accel_device gpu;
  accel_ctx *ctx = ctx_open(url, &gpu);
  accel_buffer b;
  OK(accel_buffer_create(ctx, ACCEL_F32, RNG_FLOATS, &b));
  accel_rng spec = {.dist = ACCEL_DIST_UNIFORM, .seed = 1234};
  OK(accel_rng_fill(ctx, gpu, b, &spec, NULL));
  OK(accel_finish(ctx, -1));
  double t[64];
  for (int rep = 0; rep < REPS; rep++) {
    double t0 = now_s();
    for (int i = 0; i < RNG_OPS; i++) {
      spec.offset = (uint64_t)i * RNG_FLOATS;
      OK(accel_rng_fill(ctx, gpu, b, &spec, NULL));
    }
    OK(accel_finish(ctx, -1));
    t[rep] = (now_s() - t0) / RNG_OPS;
  }
  accel_close(ctx);
  return median(t, REPS);
}

static void fmt_tbs(char *buf, size_t len, double bytes, double s) {
  snprintf(buf, len, "%.2f TB/s", bytes / s * 1e-12);
}

static void bench_rng(raw *r) {
  double bytes = (double)RNG_FLOATS * 4, cu_ev, cu_wall = curand_fill(r, &cu_ev);
  double be_ev = backend_rng_fill(r);
  char a[24], ref[24], what[48];
  fmt_tbs(a, sizeof a, bytes, be_ev);
  fmt_tbs(ref, sizeof ref, bytes, cu_ev);
  add_row("rng uniform 256 MiB, kernel (events)", a, ref, cu_ev / be_ev, ">= 1.0");
  for (int s = 0; s < 3; s++) {
    double api = accel_rng_time(strategies[s]);
    snprintf(what, sizeof what, "rng uniform 256 MiB, API, %s", strategies[s]);
    fmt_tbs(a, sizeof a, bytes, api);
    fmt_tbs(ref, sizeof ref, bytes, cu_wall);
    add_row(what, a, ref, cu_wall / api, ">= 1.0");
  }
}

/* ---- tiny ops ------------------------------------------------------------------------- */

#define TINY_N 3000

/* CPU time of the whole process (every thread: the loop, workers, driver threads, spinning
 * included), seconds. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Median latency; *cpu: the process's CPU time per op over the measured ops. */
/* ACCEL_BENCH_TINY_GAP_US=<n>: each op of the tiny rows starts n microseconds after the last
 * one ended (spun, outside the timing), so that whatever the last one left for later is done
 * first: a diagnostic of what an op's completion costs the next one. Default 0. */
static void tiny_gap(void) {
  static double gap = -1;
  if (gap < 0) {
    const char *v = getenv("ACCEL_BENCH_TINY_GAP_US");
    gap = v != NULL ? atof(v) * 1e-6 : 0;
  }
  for (double t0 = now_s(); gap > 0 && now_s() - t0 < gap;)
    ;
}

/* timeout_ms: the wait's (-1: none; a careful user's 10000 takes the same fast path). */
static double accel_tiny_wait(const char *how, int64_t timeout_ms, double *cpu) {
  char url[64];
  snprintf(url, sizeof url, "embedded:?completion=%s", how);
  accel_device gpu;
  accel_ctx *ctx = ctx_open(url, &gpu);
  accel_buffer p;
  OK(accel_buffer_create(ctx, ACCEL_U32, 1, &p));
  static double t[TINY_N];
  double c0 = 0;
  for (int i = -300; i < TINY_N; i++) {
    accel_future *f;
    if (i == 0)
      c0 = cpu_s();
    tiny_gap();
    double t0 = now_s();
    OK(accel_fill_u32(ctx, gpu, p, (uint32_t)i, &f));
    OK(accel_future_wait(f, timeout_ms));
    accel_future_release(f);
    if (i >= 0)
      t[i] = now_s() - t0;
  }
  *cpu = (cpu_s() - c0) / TINY_N;
  accel_close(ctx);
  return median(t, TINY_N);
}

static double accel_tiny(const char *how, double *cpu) {
  return accel_tiny_wait(how, -1, cpu);
}

static void CUDA_CB post(CUstream s, CUresult r, void *sem) {
  (void)s;
  (void)r;
  sem_post(sem);
}

/* A 1-element fill (or the null kernel) launched by hand and waited for by hand. */
static double raw_tiny(raw *r, const char *how, bool null_kernel, double *cpu) {
  raw_enter(r);
  CUdeviceptr d;
  CU(be_cu.cuMemAlloc(&d, 4));
  uint64_t n = 1;
  uint32_t v = 7;
  void *args[] = {&d, &n, &v};
  sem_t sem;
  sem_init(&sem, 0, 0);
  static double t[TINY_N];
  double c0 = 0;
  for (int i = -300; i < TINY_N; i++) {
    if (i == 0)
      c0 = cpu_s();
    tiny_gap();
    double t0 = now_s();
    if (null_kernel)
      CU(be_cu.cuLaunchKernel(r->null, 1, 1, 1, 1, 1, 1, 0, r->stream, NULL, NULL));
    else
      CU(be_cu.cuLaunchKernel(r->fill, 1, 1, 1, 256, 1, 1, 0, r->stream, args, NULL));
    if (strcmp(how, "callback") == 0) {
      CU(be_cu.cuStreamAddCallback(r->stream, post, &sem, 0)); /* as the backend does */
      sem_wait(&sem);
    } else {
      CU(be_cu.cuEventRecord(r->e1, r->stream));
      if (strcmp(how, "sync") == 0)
        CU(be_cu.cuEventSynchronize(r->e1));
      else
        while (be_cu.cuEventQuery(r->e1) == CUDA_ERROR_NOT_READY)
          ;
    }
    if (i >= 0)
      t[i] = now_s() - t0;
  }
  *cpu = (cpu_s() - c0) / TINY_N;
  sem_destroy(&sem);
  be_cu.cuMemFree(d);
  return median(t, TINY_N);
}

static void bench_tiny(raw *r) {
  char a[24], ref[24], what[48];
  for (int i = 0; i < 3; i++) {
    double raw_cpu, acc_cpu;
    double raw_s = raw_tiny(r, strategies[i], false, &raw_cpu);
    double acc = accel_tiny(strategies[i], &acc_cpu);
    snprintf(what, sizeof what, "tiny op (1-element fill), %s", strategies[i]);
    snprintf(a, sizeof a, "%.1f us", acc * 1e6);
    snprintf(ref, sizeof ref, "%.1f us", raw_s * 1e6);
    add_row(what, a, ref, raw_s / acc, "");
    /* the CPU it took, every thread of the process (the raw poll loop spins by design) */
    snprintf(what, sizeof what, "  CPU per tiny op, %s", strategies[i]);
    snprintf(a, sizeof a, "%.1f us", acc_cpu * 1e6);
    snprintf(ref, sizeof ref, "%.1f us", raw_cpu * 1e6);
    add_row(what, a, ref, raw_cpu / acc_cpu, "");
  }
  /* A wait with a timeout against one without, same op, same run (target: ratio >= 0.9). */
  double cpu, untimed = accel_tiny_wait("callback", -1, &cpu);
  double timed = accel_tiny_wait("callback", 10000, &cpu);
  snprintf(a, sizeof a, "%.1f us", timed * 1e6);
  snprintf(ref, sizeof ref, "%.1f us", untimed * 1e6);
  add_row("tiny op, wait(10 s) vs wait(-1), callback", a, ref, untimed / timed, "");
  double nul_cpu, nul = raw_tiny(r, "sync", true, &nul_cpu);
  snprintf(ref, sizeof ref, "%.1f us", nul * 1e6);
  add_row("null kernel + event sync (floor)", "-", ref, 0, "");
}

/* ---- transfers ------------------------------------------------------------------------ */

#define XFER ((size_t)256 << 20)

static void fmt_gbs(char *buf, size_t len, double s) {
  snprintf(buf, len, "%.1f GB/s", (double)XFER / s * 1e-9);
}

/* Raw cuMemcpy*Async from/to pinned memory, by events. */
static double raw_copy(raw *r, bool h2d, void *host, CUdeviceptr d) {
  double t[64];
  raw_enter(r);
  for (int rep = -1; rep < REPS; rep++) {
    CU(be_cu.cuEventRecord(r->e0, r->stream));
    if (h2d)
      CU(be_cu.cuMemcpyHtoDAsync(d, host, XFER, r->stream));
    else
      CU(be_cu.cuMemcpyDtoHAsync(host, d, XFER, r->stream));
    CU(be_cu.cuEventRecord(r->e1, r->stream));
    double ms = event_ms(r);
    if (rep >= 0)
      t[rep] = ms * 1e-3;
  }
  return median(t, REPS);
}

/* Raw synchronous cuMemcpy from/to pageable memory (CUDA's own staging), host clock. */
static double raw_pageable(raw *r, bool h2d, void *host, CUdeviceptr d) {
  double t[64];
  int reps = REPS < 5 ? REPS : 5;
  raw_enter(r);
  for (int rep = -1; rep < reps; rep++) {
    double t0 = now_s();
    if (h2d)
      CU(be_cu.cuMemcpyHtoDAsync(d, host, XFER, r->stream));
    else
      CU(be_cu.cuMemcpyDtoHAsync(host, d, XFER, r->stream));
    CU(be_cu.cuStreamSynchronize(r->stream));
    if (rep >= 0)
      t[rep] = now_s() - t0;
  }
  return median(t, reps);
}

static void submit_copy(be_queue *q, bool h2d, void *host, be_mem m) {
  if (h2d)
    OK(be_cuda_ops.copy_h2d(q, m, 0, host, XFER));
  else
    OK(be_cuda_ops.copy_d2h(q, host, m, 0, XFER));
}

/* One copy on q, timed by events on its stream from its submission to its end (seconds). */
static double timed_copy(raw *r, be_queue *q, bool h2d, void *host, be_mem m) {
  CUstream s = (CUstream)(uintptr_t)be_cuda_stream(q);
  raw_enter(r);
  CU(be_cu.cuEventRecord(r->e0, s));
  submit_copy(q, h2d, host, m);
  raw_enter(r);
  CU(be_cu.cuEventRecord(r->e1, s));
  return event_ms(r) * 1e-3;
}

/* The backend's copy_h2d / copy_d2h on a fresh queue, by events on its stream. */
static double backend_copy(raw *r, bool h2d, void *host, be_mem m, unsigned threads) {
  be_queue *q;
  if (threads > 0)
    OK(be_cuda_set_copy_threads(r->dev, threads)); /* read by the queue's first large copy */
  OK(be_cuda_ops.queue_create(r->dev, &q));
  double t[64];
  for (int rep = -1; rep < REPS; rep++) {
    double sec = timed_copy(r, q, h2d, host, m);
    if (rep >= 0)
      t[rep] = sec;
  }
  be_cuda_ops.queue_destroy(q);
  return median(t, REPS);
}

/* Memory used once: a fresh allocation each repetition (touched, then timed), freed after. */
static double backend_copy_fresh(raw *r, bool h2d, be_mem m, unsigned threads) {
  be_queue *q;
  OK(be_cuda_set_copy_threads(r->dev, threads));
  OK(be_cuda_ops.queue_create(r->dev, &q));
  double t[64];
  for (int rep = -1; rep < REPS; rep++) {
    char *host = xmalloc(XFER);
    for (size_t i = 0; i < XFER; i += 4096)
      host[i] = (char)i;
    double sec = timed_copy(r, q, h2d, host, m);
    if (rep >= 0)
      t[rep] = sec;
    free(host);
  }
  be_cuda_ops.queue_destroy(q);
  return median(t, REPS);
}

/* One pageable buffer copied again and again, one copy thread: its first two copies are
 * staged, the pin cache registers it, the rest go by DMA. */
static double backend_copy_reused(raw *r, bool h2d, void *host, be_mem m) {
  be_queue *q;
  OK(be_cuda_ops.queue_create(r->dev, &q));
  for (int i = 0; i < 2; i++)
    submit_copy(q, h2d, host, m);
  raw_enter(r);
  CU(be_cu.cuStreamSynchronize((CUstream)(uintptr_t)be_cuda_stream(q)));
  be_cuda_ops.queue_destroy(q);
  be_cuda_pin_flush();
  return backend_copy(r, h2d, host, m, 1);
}

typedef struct xfer_bufs {
  void *pinned, *pageable;
  CUdeviceptr d;
  be_mem m;
} xfer_bufs;

static xfer_bufs xfer_alloc(raw *r) {
  xfer_bufs x;
  raw_enter(r);
  CU(be_cu.cuMemHostAlloc(&x.pinned, XFER, 0));
  x.pageable = xmalloc(XFER);
  memset(x.pinned, 0x5a, XFER);
  for (size_t i = 0; i < XFER; i += 4096) /* touched: no first-touch faults in the timing */
    ((volatile char *)x.pageable)[i] = (char)i;
  CU(be_cu.cuMemAlloc(&x.d, XFER));
  OK(be_cuda_ops.mem_alloc(r->dev, XFER, &x.m));
  return x;
}

static void xfer_free(raw *r, xfer_bufs *x) {
  raw_enter(r);
  be_cu.cuMemFreeHost(x->pinned);
  be_cu.cuMemFree(x->d);
  be_cuda_ops.mem_free(r->dev, &x->m);
  free(x->pageable);
}

/* An XFER-byte buffer valid on the GPU only (filled there). */
static accel_buffer gpu_resident(accel_ctx *ctx, accel_device gpu) {
  accel_buffer b;
  accel_rng spec = {.dist = ACCEL_DIST_UNIFORM, .seed = 9};
  OK(accel_buffer_create(ctx, ACCEL_F32, XFER / 4, &b));
  OK(accel_rng_fill(ctx, gpu, b, &spec, NULL));
  return b;
}

/* Writes from the caller's memory into a GPU-resident buffer, through the API (host clock to
 * accel_finish). Warm-up: two staged writes make the pin cache register the memory, in the
 * background while more run (this program cannot wait for libaccel's cache: six more, for a
 * busy host). */
static double api_write(void *host) {
  accel_device gpu;
  accel_ctx *ctx = ctx_open(NULL, &gpu);
  accel_buffer b = gpu_resident(ctx, gpu); /* writes go there */
  for (int i = 0; i < 8; i++)
    OK(accel_write(ctx, b, 0, host, XFER / 4, NULL));
  OK(accel_finish(ctx, -1));
  double t[64];
  for (int rep = 0; rep < REPS; rep++) {
    double t0 = now_s();
    OK(accel_write(ctx, b, 0, host, XFER / 4, NULL));
    OK(accel_finish(ctx, -1));
    t[rep] = now_s() - t0;
  }
  accel_close(ctx);
  return median(t, REPS);
}

/* The same from memory used once: a fresh allocation each time (touched before the clock
 * starts), staged by the default copy threads; url NULL, or one without the pin cache. */
static double api_write_fresh(const char *url) {
  accel_device gpu;
  accel_ctx *ctx = ctx_open(url, &gpu);
  accel_buffer b = gpu_resident(ctx, gpu);
  OK(accel_finish(ctx, -1));
  double t[64];
  for (int rep = -1; rep < REPS; rep++) {
    char *host = xmalloc(XFER);
    for (size_t i = 0; i < XFER; i += 4096)
      host[i] = (char)i;
    double t0 = now_s();
    OK(accel_write(ctx, b, 0, host, XFER / 4, NULL));
    OK(accel_finish(ctx, -1));
    if (rep >= 0)
      t[rep] = now_s() - t0;
    free(host);
  }
  accel_close(ctx);
  return median(t, REPS);
}

/* Reads of a GPU-resident buffer into the caller's memory, through the API. */
static double api_read(void *host) {
  accel_device gpu;
  accel_ctx *ctx = ctx_open(NULL, &gpu);
  accel_buffer b = gpu_resident(ctx, gpu);
  OK(accel_finish(ctx, -1));
  double t[64];
  for (int rep = -8; rep < REPS; rep++) { /* as api_write: the pin cache's warm-up */
    double t0 = now_s();
    OK(accel_read(ctx, b, 0, host, XFER / 4, NULL));
    OK(accel_finish(ctx, -1));
    if (rep >= 0)
      t[rep] = now_s() - t0;
  }
  accel_close(ctx);
  return median(t, REPS);
}

static void xfer_row(const char *what, double accel_s, double ref_s, const char *target) {
  char a[24], ref[24];
  fmt_gbs(a, sizeof a, accel_s);
  fmt_gbs(ref, sizeof ref, ref_s);
  add_row(what, a, ref, ref_s / accel_s, target);
}

static void pin_row(void) {
  pin_cache_stats st;
  be_cuda_pin_stats(&st);
  char a[64];
  snprintf(a, sizeof a, "%llu pinned, %llu hits", (unsigned long long)st.pins,
           (unsigned long long)st.hits);
  add_row("pin cache so far (ranges pinned, DMA hits)", a, "-", 0, "");
}

static void bench_transfers(raw *r) {
  xfer_bufs x = xfer_alloc(r);
  double h2d = raw_copy(r, true, x.pinned, x.d), d2h = raw_copy(r, false, x.pinned, x.d);
  double ph2d = raw_pageable(r, true, x.pageable, x.d);
  double pd2h = raw_pageable(r, false, x.pageable, x.d);
  xfer_row("H2D raw pageable cuMemcpy (CUDA staging)", ph2d, h2d, "");
  xfer_row("D2H raw pageable cuMemcpy (CUDA staging)", pd2h, d2h, "");
  xfer_row("H2D backend, pinned caller memory", backend_copy(r, true, x.pinned, x.m, 0), h2d,
           ">= 0.9");
  xfer_row("D2H backend, pinned caller memory", backend_copy(r, false, x.pinned, x.m, 0), d2h,
           ">= 0.9");
  /* No accel context is open yet, so no pin cache: the stager alone. */
  unsigned threads[] = {1, 8, 12, 16};
  for (int i = 0; i < 4; i++) {
    char what[48];
    snprintf(what, sizeof what, "H2D backend, staged, %u copy thr", threads[i]);
    xfer_row(what, backend_copy(r, true, x.pageable, x.m, threads[i]), h2d, "");
    snprintf(what, sizeof what, "D2H backend, staged, %u copy thr", threads[i]);
    xfer_row(what, backend_copy(r, false, x.pageable, x.m, threads[i]), d2h, "");
  }
  /* From here on a second device holds the pin cache (the default bound). The API rows go
   * through libaccel, which has a backend and a pin cache of its own in this process (this
   * program also links the backend itself). */
  be_device *holder;
  OK(be_cuda_ops.open(0, NULL, &holder));
  xfer_row("H2D backend, pageable used once, 1 thr", backend_copy_fresh(r, true, x.m, 1), h2d, "");
  xfer_row("D2H backend, pageable used once, 1 thr", backend_copy_fresh(r, false, x.m, 1), d2h, "");
  xfer_row("H2D backend, pageable used once, 12 thr", backend_copy_fresh(r, true, x.m, 12), h2d,
           "");
  xfer_row("H2D backend, pageable reused, 1 copy thr",
           backend_copy_reused(r, true, x.pageable, x.m), h2d, ">= 0.9");
  xfer_row("D2H backend, pageable reused, 1 copy thr",
           backend_copy_reused(r, false, x.pageable, x.m), d2h, ">= 0.9");
  xfer_row("H2D API write, pageable caller memory", api_write(x.pageable), h2d, ">= 0.9");
  xfer_row("H2D API write, pageable used once", api_write_fresh(NULL), h2d, "");
  xfer_row("H2D API write, used once, no pin cache", api_write_fresh("embedded:?pinned_max=0"), h2d,
           "");
  xfer_row("D2H API read, pinned caller memory", api_read(x.pinned), d2h, ">= 0.9");
  xfer_row("D2H API read, pageable caller memory", api_read(x.pageable), d2h, ">= 0.9");
  pin_row();
  be_cuda_ops.close(holder);
  xfer_free(r, &x);
}

/* ---- fault to serving ----------------------------------------------------------------- */

static double fault_once(accel_ctx *ctx, accel_device gpu, accel_buffer a, accel_buffer *c,
                         accel_buffer probe) {
  size_t n = 2048;
  for (int i = 0; i < 8; i++) /* work in flight when the fault hits */
    OK(accel_sgemm(ctx, gpu, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1, a, n, a, n, 0, c[i], n,
                   NULL));
  double t0 = now_s();
  OK(accel_inject_fault(ctx, gpu));
  for (;;) {
    accel_future *f;
    OK(accel_fill_u32(ctx, gpu, probe, 1, &f));
    int rc = accel_future_wait(f, -1);
    accel_future_release(f);
    if (rc == 0)
      break;
    if (now_s() - t0 > 30)
      DIE("the device did not come back within 30 s: %s", accel_strerror(rc));
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  double t = now_s() - t0;
  accel_finish(ctx, -1); /* the first error since the last finish: device lost */
  return t;
}

static void bench_fault(void) {
  accel_device gpu;
  accel_ctx *ctx = ctx_open("embedded:?fault_injection=1&max_restarts=100", &gpu);
  size_t n = 2048;
  accel_buffer a = buf_random(ctx, n * n), c[8], probe;
  for (int i = 0; i < 8; i++)
    OK(accel_buffer_create(ctx, ACCEL_F32, n * n, &c[i]));
  OK(accel_buffer_create(ctx, ACCEL_U32, 1, &probe));
  double t[16];
  int reps = 5;
  for (int i = 0; i < reps; i++) {
    t[i] = fault_once(ctx, gpu, a, c, probe);
    printf("fault %d: serving again after %.1f ms\n", i, t[i] * 1e3);
  }
  accel_close(ctx);
  char a_s[24];
  double m = median(t, reps);
  snprintf(a_s, sizeof a_s, "%.1f ms", m * 1e3);
  add_row("fault to serving (median of 5)", a_s, "-", 0, "< 500 ms");
}

/* ---- memory: create, use, destroy; the loop's longest stall --------------------------- */

#define ALLOC_BYTES ((size_t)4 << 20)
#define ALLOC_N 400

/* A 4 MiB buffer made, filled on the GPU (its memory is taken then), waited for, destroyed. */
static double accel_alloc_cycle(void) {
  accel_device gpu;
  accel_ctx *ctx = ctx_open("embedded:", &gpu);
  static double t[ALLOC_N];
  for (int i = -50; i < ALLOC_N; i++) {
    double t0 = now_s();
    accel_buffer b;
    accel_future *f;
    OK(accel_buffer_create(ctx, ACCEL_U32, ALLOC_BYTES / 4, &b));
    OK(accel_fill_u32(ctx, gpu, b, (uint32_t)i, &f));
    OK(accel_future_wait(f, -1));
    accel_future_release(f);
    OK(accel_buffer_destroy(ctx, b));
    if (i >= 0)
      t[i] = now_s() - t0;
  }
  accel_close(ctx);
  return median(t, ALLOC_N);
}

/* The same by hand: cuMemAlloc, a memset on the stream, a sync, cuMemFree. */
static double raw_alloc_cycle(raw *r) {
  raw_enter(r);
  static double t[ALLOC_N];
  for (int i = -50; i < ALLOC_N; i++) {
    double t0 = now_s();
    CUdeviceptr d;
    CU(be_cu.cuMemAlloc(&d, ALLOC_BYTES));
    CU(be_cu.cuMemsetD32Async(d, (unsigned)i, ALLOC_BYTES / 4, r->stream));
    CU(be_cu.cuStreamSynchronize(r->stream));
    CU(be_cu.cuMemFree(d));
    if (i >= 0)
      t[i] = now_s() - t0;
  }
  return median(t, ALLOC_N);
}

typedef struct mixer {
  accel_ctx *ctx;
  accel_device gpu;
  int seed;
  double until;
} mixer;

/* One client thread of the mixed workload: buffers of many sizes made, used, destroyed, with
 * tiny ops and sgemms among them. */
static void *mix_thread(void *arg) {
  mixer *m = arg;
  unsigned x = (unsigned)m->seed * 2654435761u + 1;
  accel_buffer a = buf_random(m->ctx, 512 * 512), c;
  OK(accel_buffer_create(m->ctx, ACCEL_F32, 512 * 512, &c));
  while (now_s() < m->until) {
    x = x * 1103515245u + 12345u;
    size_t n = ((size_t)1 << (10 + (x >> 16) % 14)) + (x & 1023); /* 1 Ki .. 8 Mi elements */
    accel_buffer b;
    accel_future *f;
    OK(accel_buffer_create(m->ctx, ACCEL_F32, n, &b));
    OK(accel_fill(m->ctx, m->gpu, b, 1.0, NULL));
    OK(accel_sgemm(m->ctx, m->gpu, ACCEL_NO_TRANS, ACCEL_NO_TRANS, 512, 512, 512, 1.0f, a, 512, a,
                   512, 0.0f, c, 512, NULL));
    OK(accel_fill(m->ctx, m->gpu, c, 0.0, &f));
    OK(accel_future_wait(f, -1));
    accel_future_release(f);
    OK(accel_buffer_destroy(m->ctx, b));
  }
  OK(accel_finish(m->ctx, -1));
  return NULL;
}

/* Four client threads for two seconds; the loop's longest stall in that time. */
static double mixed_stall_s(void) {
  mixer m[4];
  pthread_t th[4];
  accel_device gpu;
  accel_ctx *ctx = ctx_open("embedded:", &gpu);
  accel_runtime_max_stall_ns(accel_ctx_runtime(ctx), 1);
  double until = now_s() + 2.0;
  for (int i = 0; i < 4; i++) {
    m[i] = (mixer){ctx, gpu, i + 1, until};
    if (pthread_create(&th[i], NULL, mix_thread, &m[i]) != 0)
      DIE("pthread_create failed");
  }
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  double stall = (double)accel_runtime_max_stall_ns(accel_ctx_runtime(ctx), 0) * 1e-9;
  accel_close(ctx);
  return stall;
}

static void bench_memory(raw *r) {
  char a[24], ref[24];
  double raw_s = raw_alloc_cycle(r), acc = accel_alloc_cycle();
  snprintf(a, sizeof a, "%.1f us", acc * 1e6);
  snprintf(ref, sizeof ref, "%.1f us", raw_s * 1e6);
  add_row("4 MiB buffer: create, fill, wait, destroy", a, ref, raw_s / acc, ">= 1 (cached)");
  double stall = mixed_stall_s();
  snprintf(a, sizeof a, "%.2f ms", stall * 1e3);
  add_row("loop's longest stall, mixed workload (2 s)", a, "-", 0, "");
}

/* ---- main ----------------------------------------------------------------------------- */

/* Whether PART is in `only`, a comma-separated list (NULL: every part). */
static bool part_on(const char *only, const char *part) {
  size_t n = strlen(part);
  for (const char *p = only; p != NULL; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (strncmp(p, part, n) == 0 && (p[n] == ',' || p[n] == '\0'))
      return true;
  return only == NULL;
}

enum { MAX_TASKS = 512 };

typedef struct task_cpu {
  int tid;
  long ticks; /* user + system, clock ticks */
  char name[32];
} task_cpu;

/* Every thread of the process with its CPU time so far; the count. */
static int task_cpus(task_cpu *out) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent *e; d != NULL && n < MAX_TASKS && (e = readdir(d)) != NULL;) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/self/task/%.16s/stat", e->d_name);
    FILE *f = e->d_name[0] == '.' ? NULL : fopen(path, "r");
    if (f == NULL)
      continue;
    char *close_paren = fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL;
    char *open_paren = strchr(line, '(');
    long ut = 0, st = 0;
    if (close_paren != NULL && open_paren != NULL &&
        sscanf(close_paren + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &ut, &st) ==
            2) {
      out[n] = (task_cpu){.tid = atoi(e->d_name), .ticks = ut + st};
      snprintf(out[n].name, sizeof out[n].name, "%.*s", (int)(close_paren - open_paren - 1),
               open_paren + 1);
      n++;
    }
    fclose(f);
  }
  if (d != NULL)
    closedir(d);
  return n;
}

/* The process's threads, and the CPU it uses over 200 ms of doing nothing, before a part:
 * what earlier parts left behind (idle contexts are to use no CPU), with the busiest threads
 * by name when it uses any. */
static void idle_report(const char *part) {
  static task_cpu before[MAX_TASKS], after[MAX_TASKS];
  int nb = task_cpus(before);
  double c0 = cpu_s(), t0 = now_s();
  nanosleep(&(struct timespec){.tv_nsec = 200 * 1000 * 1000}, NULL);
  double share = (cpu_s() - c0) / (now_s() - t0);
  int na = task_cpus(after);
  printf("# idle before %s: %d threads, %.1f%% of a core", part, na, 100 * share);
  for (int i = 0; share > 0.01 && i < na; i++)
    for (int j = 0; j < nb; j++)
      if (before[j].tid == after[i].tid && after[i].ticks > before[j].ticks)
        printf("; %s (tid %d) %ld ticks", after[i].name, after[i].tid,
               after[i].ticks - before[j].ticks);
  printf("\n#   by name:");
  for (int i = 0; i < na; i++) { /* each name once, with its count */
    int count = 0, first = i;
    for (int j = 0; j < na; j++)
      if (strcmp(after[j].name, after[i].name) == 0) {
        count++;
        first = j < first ? j : first;
      }
    if (first == i)
      printf(" %s x%d", after[i].name, count);
  }
  printf("\n");
}

int main(int argc, char **argv) {
  char why[128] = "";
  int count = 0;
  if (be_cuda_ops.probe(&count, why, sizeof why) != 0 || count == 0) {
    printf("SKIP: no CUDA device (%s): bench-cuda needs one\n", why[0] ? why : "no device");
    return 77;
  }
  const char *only = NULL; /* --only PART: that part alone */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      REPS = 3;
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else {
      fprintf(stderr,
              "usage: %s [--quick] [--only PART[,PART...]] (transfers sgemm rng tiny memory "
              "fault)\n",
              argv[0]);
      return 2;
    }
  }
#define PART(name) (part_on(only, name) && (idle_report(name), true))
  raw r = raw_open();
  be_device_info info;
  be_cuda_ops.info(r.dev, &info);
  printf("# %s, %u SMs, %.0f GiB; median of %d runs after warm-up\n", info.name, info.compute_units,
         (double)info.mem_bytes / (1 << 30), REPS);
  if (PART("transfers"))
    bench_transfers(&r); /* first: its staged rows need no pin cache yet (raw_open) */
  if (PART("sgemm"))
    bench_sgemm(&r);
  if (PART("rng"))
    bench_rng(&r);
  if (PART("tiny"))
    bench_tiny(&r);
  if (PART("memory"))
    bench_memory(&r);
  raw_close(&r); /* the fault resets the primary context the raw side shares */
  if (PART("fault"))
    bench_fault();
#undef PART
  print_table("CUDA backend", info.name, "reference time / accel time");
  return 0;
}
