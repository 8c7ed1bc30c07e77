/* accel — a client's host <-> GPU transfers through acceld against raw pinned cuMemcpy, in
 * one run (docs/PERFORMANCE.md, "Daemon: GPU transfers").
 *
 *   write  accel_write of a buffer that lives on the GPU, from the client's memory: with
 *          accel_host_alloc memory (shared with acceld and registered for DMA there) it is one
 *          DMA; from malloc'd memory it is one memcpy into a staging region, then the DMA
 *   read   accel_read of it back
 *   raw    cuMemcpyHtoD / cuMemcpyDtoH of the same size from cuMemHostAlloc'd memory, in this
 *          process (the floor)
 * Ratios are raw time / acceld time (1.0: as fast as the raw copy). Each measure is the median
 * of --reps runs after a warm-up; every copy's data is checked once.
 *
 *   tiny   a fill of a 1-element GPU buffer and a wait on its future, one after another:
 *          the latency a client sees for the smallest op (median and p99, microseconds)
 * --workers LIST is passed to acceld (its devices in worker processes or not: '' for none),
 * so one run can put the two side by side.
 *
 * Usage: bench-daemon-gpu [--mib N] [--reps N] [--acceld PATH] [--workers LIST]
 * (exits 77 without a GPU) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"

#define CU(x)                                                                                      \
  do {                                                                                             \
    CUresult r_ = (x);                                                                             \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #x, (int)r_);                        \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#define OK(x)                                                                                      \
  do {                                                                                             \
    int rc_ = (x);                                                                                 \
    if (rc_ != 0) {                                                                                \
      fprintf(stderr, "%s:%d: %s = %s\n", __FILE__, __LINE__, #x, accel_err_name(rc_));            \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

static void pattern(uint32_t *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint32_t)((i + seed) * 2654435761u);
}

static size_t mismatches(const uint32_t *p, size_t n, uint32_t seed) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += p[i] != (uint32_t)((i + seed) * 2654435761u);
  return bad;
}

/* ---- the daemon ---- */

static const char *workers; /* --workers, or NULL: acceld's default */

static pid_t start_acceld(const char *acceld, char *url, size_t url_len) {
  char dir[] = "/tmp/accel-bench-gpu-XXXXXX";
  if (mkdtemp(dir) == NULL)
    exit(1);
  snprintf(url, url_len, "ipc://%s/acceld.sock", dir);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char log[128];
    snprintf(log, sizeof log, "%s/acceld.log", dir);
    if (freopen(log, "w", stderr) == NULL)
      _exit(127);
    if (workers != NULL)
      execl(acceld, acceld, "--foreground", "--listen", url, "--workers", workers, (char *)NULL);
    else
      execl(acceld, acceld, "--foreground", "--listen", url, (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 200; i++) { /* until it answers */
    accel_ctx *probe;
    if (accel_open(&probe, url) == 0) {
      accel_close(probe);
      return pid;
    }
    usleep(50000);
  }
  fprintf(stderr, "acceld did not start\n");
  exit(1);
}

static int cuda_device(accel_ctx *ctx) {
  for (int d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    if (accel_device_info(ctx, d, &info) == 0 && strcmp(info.backend, "cuda") == 0)
      return d;
  }
  return -1;
}

typedef struct through {
  double write_s, read_s;       /* medians */
  double write_best, read_best; /* fastest runs */
  size_t bad;
} through;

static double fastest(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++)
    m = v[i] < m ? v[i] : m;
  return m;
}

/* Writes and reads a GPU-resident buffer of n elements from src / into dst, reps times. */
static through via_acceld(accel_ctx *ctx, int gpu, uint32_t *src, uint32_t *dst, size_t n,
                          int reps) {
  accel_buffer b;
  OK(accel_buffer_create(ctx, ACCEL_U32, n, &b));
  OK(accel_fill_u32(ctx, gpu, b, 0, NULL)); /* it lives on the GPU */
  OK(accel_finish(ctx, -1));
  double w[64], r[64];
  through t = {0};
  for (int i = -1; i < reps; i++) { /* -1: warm-up */
    double t0 = now_s();
    OK(accel_write(ctx, b, 0, src, n, NULL));
    OK(accel_finish(ctx, -1));
    double t1 = now_s();
    OK(accel_read(ctx, b, 0, dst, n, NULL));
    OK(accel_finish(ctx, -1));
    double t2 = now_s();
    if (i < 0) {
      t.bad = mismatches(dst, n, 7);
      continue;
    }
    w[i] = t1 - t0;
    r[i] = t2 - t1;
  }
  OK(accel_buffer_destroy(ctx, b));
  t.write_best = fastest(w, reps);
  t.read_best = fastest(r, reps);
  t.write_s = median(w, reps);
  t.read_s = median(r, reps);
  return t;
}

/* The smallest op and a wait, n times: median and p99 in microseconds. */
static void tiny_ops(accel_ctx *ctx, int gpu, double *med_us, double *p99_us) {
  enum { N = 2000 };
  static double t[N];
  accel_buffer b;
  OK(accel_buffer_create(ctx, ACCEL_U32, 1, &b));
  for (int i = -200; i < N; i++) { /* < 0: warm-up */
    double t0 = now_s();
    accel_future *f;
    OK(accel_fill_u32(ctx, gpu, b, (uint32_t)i, &f));
    OK(accel_future_wait(f, -1));
    accel_future_release(f);
    if (i >= 0)
      t[i] = (now_s() - t0) * 1e6;
  }
  OK(accel_buffer_destroy(ctx, b));
  qsort(t, N, sizeof t[0], cmp_double);
  *med_us = t[N / 2];
  *p99_us = t[N * 99 / 100];
}

/* ---- raw ---- */

static through raw_copies(size_t bytes, int reps) {
  be_device *dev;
  through t = {0};
  OK(be_cuda_ops.open(0, NULL, &dev));
  CU(be_cu.cuCtxSetCurrent((CUcontext)(uintptr_t)be_cuda_context(dev)));
  void *host;
  CUdeviceptr d;
  CU(be_cu.cuMemHostAlloc(&host, bytes, 0));
  CU(be_cu.cuMemAlloc(&d, bytes));
  memset(host, 1, bytes);
  double w[64], r[64];
  for (int i = -1; i < reps; i++) {
    double t0 = now_s();
    CU(be_cu.cuMemcpyHtoDAsync(d, host, bytes, NULL));
    CU(be_cu.cuCtxSynchronize());
    double t1 = now_s();
    CU(be_cu.cuMemcpyDtoHAsync(host, d, bytes, NULL));
    CU(be_cu.cuCtxSynchronize());
    double t2 = now_s();
    if (i >= 0)
      w[i] = t1 - t0, r[i] = t2 - t1;
  }
  be_cu.cuMemFree(d);
  be_cu.cuMemFreeHost(host);
  be_cuda_ops.close(dev);
  t.write_s = median(w, reps);
  t.read_s = median(r, reps);
  return t;
}

static void row(const char *what, double bytes, double accel_s, double raw_s, double best_s) {
  printf("%-40s %8.2f GB/s   raw %8.2f GB/s   ratio %.3f (fastest run %.3f)\n", what,
         bytes / accel_s / 1e9, bytes / raw_s / 1e9, raw_s / accel_s, raw_s / best_s);
}

int main(int argc, char **argv) {
  size_t mib = 1024;
  int reps = 5;
  const char *acceld = getenv("ACCELD");
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mib") && i + 1 < argc)
      mib = strtoul(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--acceld") && i + 1 < argc)
      acceld = argv[++i];
    else if (!strcmp(argv[i], "--workers") && i + 1 < argc)
      workers = argv[++i];
  }
  reps = reps < 1 ? 1 : reps > 64 ? 64 : reps;
  int count;
  char why[128] = "";
  if (be_cuda_ops.probe(&count, why, sizeof why) != 0 || count == 0) {
    printf("bench-daemon-gpu: no GPU (%s): skipped\n", why);
    return 77;
  }
  if (acceld == NULL) {
    fprintf(stderr, "bench-daemon-gpu: set ACCELD or --acceld\n");
    return 2;
  }
  size_t bytes = mib << 20, n = bytes / 4;
  through raw = raw_copies(bytes, reps);
  char url[160];
  pid_t pid = start_acceld(acceld, url, sizeof url);
  accel_ctx *ctx;
  OK(accel_open(&ctx, url));
  int gpu = cuda_device(ctx);
  if (gpu < 0) {
    fprintf(stderr, "acceld serves no CUDA device\n");
    return 1;
  }
  uint32_t *src, *dst;
  OK(accel_host_alloc(ctx, bytes, (void **)&src));
  OK(accel_host_alloc(ctx, bytes, (void **)&dst));
  pattern(src, n, 7);
  sleep(1); /* the daemon registers the regions for DMA on a worker after they attach */
  through shared = via_acceld(ctx, gpu, src, dst, n, reps);
  uint32_t *psrc = malloc(bytes), *pdst = malloc(bytes);
  pattern(psrc, n, 7);
  through plain = via_acceld(ctx, gpu, psrc, pdst, n, reps);
  printf("# %zu MiB, median of %d, GPU device %d through acceld at %s\n", mib, reps, gpu, url);
  row("H2D from accel_host_alloc memory", (double)bytes, shared.write_s, raw.write_s,
      shared.write_best);
  row("D2H into accel_host_alloc memory", (double)bytes, shared.read_s, raw.read_s,
      shared.read_best);
  row("H2D from malloc memory (staging)", (double)bytes, plain.write_s, raw.write_s,
      plain.write_best);
  row("D2H into malloc memory (staging)", (double)bytes, plain.read_s, raw.read_s, plain.read_best);
  printf("data checked: %zu + %zu mismatches\n", shared.bad, plain.bad);
  double med, p99;
  tiny_ops(ctx, gpu, &med, &p99);
  printf("%-40s %8.1f us median %8.1f us p99   (workers: %s)\n", "tiny op + wait (1-element fill)",
         med, p99, workers ? (workers[0] ? workers : "none") : "default");
  OK(accel_host_free(ctx, src));
  OK(accel_host_free(ctx, dst));
  free(psrc);
  free(pdst);
  accel_close(ctx);
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
  return shared.bad || plain.bad ? 1 : 0;
}
