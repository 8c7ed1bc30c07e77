/* bench-cuda-module: user kernels through accel against the raw driver, ratios measured in one
 * run on one GPU:
 *   launch     a tiny user kernel (one thread writes one word) through the public API,
 *              embedded with the CUDA backend alone (accel_module_load, accel_kernel_get,
 *              accel_launch + accel_future_wait per launch), per completion strategy
 *              (accel_set_completion CALLBACK, SYNC, POLL), vs the same CUBIN loaded with
 *              cuModuleLoadData and run by cuLaunchKernel + cuEventRecord + cuEventSynchronize
 *              per launch; ratio = accel time / raw time (lower is better, 1 is the floor);
 *   load       a module load through the API served from the build cache vs one that runs
 *              NVRTC (a source made unique by a random comment, a fresh empty ACCEL_CACHE_DIR).
 * Every number is the median of many runs after a warm-up, host clock around each round trip.
 * Without a CUDA device it exits 77 (meson's SKIP). --quick: fewer runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#include "backends/backend.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "backends/cuda/driver.h"

#define BENCH_NAME "bench-cuda-module"
#include "bench_cuda_util.h"

static int LAUNCHES = 3000, LOADS = 9;

/* ---- helpers -------------------------------------------------------------------------- */

static double *times(int n) {
  double *t = malloc((size_t)n * sizeof *t);
  if (t == NULL)
    DIE("out of memory");
  return t;
}

/* ---- the kernel ----------------------------------------------------------------------- */

static const char touch_src[] =
    "extern \"C\" __global__ void touch(unsigned *p, unsigned v) { p[0] = v; }\n";

/* ---- raw: the CUBIN accel runs, by hand --------------------------------------------------- */

typedef struct raw {
  be_device *dev; /* the backend's device: its context, the driver table */
  CUmodule mod;
  CUfunction fn;
  CUstream stream;
  CUevent ev;
  CUdeviceptr word;
} raw;

/* The CUBIN the backend builds for this device (NVRTC, or its build cache). */
static be_cuda_image raw_image(raw *r) {
  be_cuda_image img = {0};
  char *log = NULL;
  int rc = be_cuda_build(r->dev, NULL, touch_src, strlen(touch_src), NULL, &img, &log);
  if (rc != 0)
    DIE("NVRTC: %s\n%s", accel_strerror(rc), log != NULL ? log : "");
  free(log);
  return img;
}

static raw raw_open(void) {
  raw r = {0};
  OK(be_cuda_ops.open(0, NULL, &r.dev));
  be_cuda_image img = raw_image(&r);
  CU(be_cu.cuCtxSetCurrent((CUcontext)(uintptr_t)be_cuda_context(r.dev)));
  CU(be_cu.cuModuleLoadData(&r.mod, img.data));
  free(img.data);
  CU(be_cu.cuModuleGetFunction(&r.fn, r.mod, "touch"));
  CU(be_cu.cuStreamCreate(&r.stream, CU_STREAM_NON_BLOCKING));
  CU(be_cu.cuEventCreate(&r.ev, CU_EVENT_DISABLE_TIMING));
  CU(be_cu.cuMemAlloc(&r.word, 4));
  return r;
}

static void raw_close(raw *r) {
  CU(be_cu.cuCtxSetCurrent((CUcontext)(uintptr_t)be_cuda_context(r->dev)));
  be_cu.cuMemFree(r->word);
  be_cu.cuEventDestroy(r->ev);
  be_cu.cuStreamDestroy(r->stream);
  be_cu.cuModuleUnload(r->mod);
  be_cuda_ops.close(r->dev);
}

static double raw_launch(raw *r) {
  double *t = times(LAUNCHES);
  CU(be_cu.cuCtxSetCurrent((CUcontext)(uintptr_t)be_cuda_context(r->dev)));
  for (int i = -300; i < LAUNCHES; i++) {
    unsigned v = (unsigned)i;
    void *args[] = {&r->word, &v};
    double t0 = now_s();
    CU(be_cu.cuLaunchKernel(r->fn, 1, 1, 1, 1, 1, 1, 0, r->stream, args, NULL));
    CU(be_cu.cuEventRecord(r->ev, r->stream));
    CU(be_cu.cuEventSynchronize(r->ev));
    if (i >= 0)
      t[i] = now_s() - t0;
  }
  double m = median(t, LAUNCHES);
  free(t);
  return m;
}

/* ---- accel ---------------------------------------------------------------------------- */

static accel_device find_gpu(accel_ctx *ctx) {
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    if (accel_device_info(ctx, d, &info) == 0 && strcmp(info.backend, "cuda") == 0)
      return d;
  }
  DIE("no cuda device in the accel context");
}

static void wait_ok(accel_future *f) {
  int rc = accel_future_wait(f, -1);
  if (rc != 0) {
    const char *log = accel_future_value(f);
    DIE("%s\n%s", accel_strerror(rc), log != NULL ? log : "");
  }
  accel_future_release(f);
}

/* Seconds one accel_module_load of src takes until its future completes. */
static double load_once(accel_ctx *ctx, accel_device gpu, const char *src, accel_module *m) {
  accel_future *f;
  double t0 = now_s();
  OK(accel_module_load(ctx, gpu, ACCEL_SOURCE_CUDA, src, strlen(src), NULL, m, &f));
  wait_ok(f);
  return now_s() - t0;
}

static double accel_launch_rt(accel_ctx *ctx, accel_device gpu, accel_kernel k, accel_buffer word,
                              accel_completion how) {
  OK(accel_set_completion(ctx, how));
  accel_launch_dims dims = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
  double *t = times(LAUNCHES);
  for (int i = -300; i < LAUNCHES; i++) {
    accel_arg args[] = {accel_arg_buffer(word, ACCEL_ACCESS_WRITE, 0, 1),
                        accel_arg_u32((uint32_t)i)};
    accel_future *f;
    double t0 = now_s();
    OK(accel_launch(ctx, gpu, k, &dims, args, 2, &f));
    wait_ok(f);
    if (i >= 0)
      t[i] = now_s() - t0;
  }
  OK(accel_set_completion(ctx, ACCEL_COMPLETION_DEFAULT));
  double m = median(t, LAUNCHES);
  free(t);
  return m;
}

static void bench_launch(raw *r, accel_ctx *ctx, accel_device gpu) {
  static const struct {
    accel_completion how;
    const char *name;
  } strategies[] = {{ACCEL_COMPLETION_CALLBACK, "callback"},
                    {ACCEL_COMPLETION_SYNC, "sync"},
                    {ACCEL_COMPLETION_POLL, "poll"}};
  accel_module m;
  accel_kernel k;
  accel_buffer word;
  load_once(ctx, gpu, touch_src, &m);
  OK(accel_kernel_get(ctx, m, "touch", &k));
  OK(accel_buffer_create(ctx, ACCEL_U32, 1, &word));
  double raw_s = raw_launch(r);
  char a[24], ref[24], what[48];
  snprintf(ref, sizeof ref, "%.1f us", raw_s * 1e6);
  for (int i = 0; i < 3; i++) {
    double acc = accel_launch_rt(ctx, gpu, k, word, strategies[i].how);
    snprintf(what, sizeof what, "tiny user kernel launch + wait, %s", strategies[i].name);
    snprintf(a, sizeof a, "%.1f us", acc * 1e6);
    add_row(what, a, ref, acc / raw_s, "");
  }
  uint32_t got = 0;
  OK(accel_read(ctx, word, 0, &got, 1, NULL));
  OK(accel_finish(ctx, -1));
  if (got != (uint32_t)(LAUNCHES - 1))
    DIE("the kernel wrote %u, not %u", got, (unsigned)(LAUNCHES - 1));
  OK(accel_buffer_destroy(ctx, word));
  OK(accel_module_unload(ctx, m));
}

/* Cold: every load a source NVRTC has never seen (a random comment). Cached: the same source
 * again, served from the build cache. */
static void bench_load(accel_ctx *ctx, accel_device gpu) {
  double *cold = times(LOADS), *warm = times(LOADS);
  unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
  for (int i = 0; i < LOADS; i++) {
    char src[256];
    accel_module m;
    snprintf(src, sizeof src, "// %u-%d\n%s", seed, i, touch_src);
    cold[i] = load_once(ctx, gpu, src, &m);
    OK(accel_module_unload(ctx, m));
    warm[i] = load_once(ctx, gpu, src, &m);
    OK(accel_module_unload(ctx, m));
  }
  double c = median(cold, LOADS), w = median(warm, LOADS);
  char a[24], ref[24];
  snprintf(a, sizeof a, "%.3f ms", w * 1e3);
  snprintf(ref, sizeof ref, "%.3f ms", c * 1e3);
  add_row("module load: cached (accel) vs NVRTC (ref)", a, ref, w / c, "");
  free(cold);
  free(warm);
}

/* A fresh, empty build cache for this run (cold loads must compile). */
static void fresh_cache(char *dir, size_t len) {
  snprintf(dir, len, "/tmp/accel-bench-module-XXXXXX");
  if (mkdtemp(dir) == NULL)
    DIE("mkdtemp failed");
  setenv("ACCEL_CACHE_DIR", dir, 1);
}

int main(int argc, char **argv) {
  char why[128] = "";
  int count = 0;
  if (be_cuda_ops.probe(&count, why, sizeof why) != 0 || count == 0) {
    printf("SKIP: no CUDA device (%s): bench-cuda-module needs one\n", why[0] ? why : "no device");
    return 77;
  }
  if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
    LAUNCHES = 1000;
    LOADS = 3;
  }
  char dir[64], cmd[128];
  fresh_cache(dir, sizeof dir);
  raw r = raw_open();
  be_device_info info;
  be_cuda_ops.info(r.dev, &info);
  printf("# %s; median of %d launches and %d loads after warm-up\n", info.name, LAUNCHES, LOADS);
  accel_ctx *ctx = NULL;
  OK(accel_open(&ctx, "embedded:?backends=cuda"));
  accel_device gpu = find_gpu(ctx);
  bench_launch(&r, ctx, gpu);
  bench_load(ctx, gpu);
  accel_close(ctx);
  raw_close(&r);
  print_table("user kernels", info.name, "accel time / reference time");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
  return 0;
}
