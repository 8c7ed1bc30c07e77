/* bench-submit: what a tiny op's submission and completion cost in one CUDA context.
 *
 * T threads of one process, each with a stream of its own in the device's primary context,
 * each doing "fill one 4-byte element, learn it is done" in a loop for a few seconds. The
 * completion is learnt one of three ways:
 *   event  cuEventRecord behind the fill, the thread polls cuEventQuery (what acceld's
 *          worker does: the record on the link thread, the polls on its completer);
 *   flag   cuStreamWriteValue32 of a sequence number into pinned host memory behind the fill,
 *          the thread polls that word (no driver call, so no driver lock, while it waits);
 *   sync   cuStreamSynchronize (what a raw client does; spin-waits by the context's flags).
 * It prints aggregate ops/s and the median latency per mode and thread count, so that the
 * worker's design can be chosen on numbers: is the one context's limit the driver lock the
 * completion polls take, or the launches themselves?
 *
 * Usage: bench-submit [--threads 1,2,4,8] [--seconds S]
 */
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 64
#define MAX_SAMPLES (1 << 20)

enum mode { MODE_EVENT, MODE_FLAG, MODE_SYNC, MODE_COUNT };
static const char *const mode_names[MODE_COUNT] = {"event", "flag", "sync"};

struct worker {
  pthread_t thread;
  CUcontext ctx;
  enum mode mode;
  double seconds;
  uint64_t ops;
  double *lat_us;
  size_t nlat;
  int failed;
};

static atomic_int start_flag;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int check(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS)
    return 0;
  const char *name = "?";
  cuGetErrorName(r, &name);
  fprintf(stderr, "bench-submit: %s failed: %s\n", what, name);
  return -1;
}

/* Learns that everything before this point of the stream is done, the mode's way. */
static int wait_done(struct worker *w, CUstream s, CUevent ev, volatile uint32_t *flag,
                     CUdeviceptr flag_dev, uint32_t seq) {
  switch (w->mode) {
  case MODE_EVENT: {
    if (check(cuEventRecord(ev, s), "cuEventRecord"))
      return -1;
    CUresult r;
    while ((r = cuEventQuery(ev)) == CUDA_ERROR_NOT_READY) {
    }
    return check(r, "cuEventQuery");
  }
  case MODE_FLAG:
    if (check(cuStreamWriteValue32(s, flag_dev, seq, CU_STREAM_WRITE_VALUE_DEFAULT),
              "cuStreamWriteValue32"))
      return -1;
    while (*flag != seq) {
    }
    return 0;
  case MODE_SYNC:
  default:
    return check(cuStreamSynchronize(s), "cuStreamSynchronize");
  }
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  CUstream s = NULL;
  CUevent ev = NULL;
  CUdeviceptr buf = 0, flag_dev = 0;
  uint32_t *flag = NULL;
  if (check(cuCtxSetCurrent(w->ctx), "cuCtxSetCurrent") ||
      check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
      check(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate") ||
      check(cuMemAlloc(&buf, 256), "cuMemAlloc") ||
      check(cuMemHostAlloc((void **)&flag, 64,
                           CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
            "cuMemHostAlloc") ||
      check(cuMemHostGetDevicePointer(&flag_dev, flag, 0), "cuMemHostGetDevicePointer")) {
    w->failed = 1;
    return NULL;
  }
  *flag = 0;
  while (!atomic_load(&start_flag)) {
  }
  double end = now_s() + w->seconds;
  uint32_t seq = 0;
  for (;;) {
    double t0 = now_s();
    if (t0 >= end)
      break;
    ++seq;
    if (check(cuMemsetD32Async(buf, seq, 1, s), "cuMemsetD32Async") ||
        wait_done(w, s, ev, flag, flag_dev, seq)) {
      w->failed = 1;
      break;
    }
    if (w->nlat < MAX_SAMPLES)
      w->lat_us[w->nlat++] = (now_s() - t0) * 1e6;
    w->ops++;
  }
  cuStreamSynchronize(s);
  cuMemFreeHost(flag);
  cuMemFree(buf);
  cuEventDestroy(ev);
  cuStreamDestroy(s);
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int run_round(CUcontext ctx, enum mode mode, int threads, double seconds) {
  static struct worker ws[MAX_THREADS];
  atomic_store(&start_flag, 0);
  for (int i = 0; i < threads; i++) {
    ws[i] = (struct worker){.ctx = ctx, .mode = mode, .seconds = seconds};
    ws[i].lat_us = malloc(sizeof(double) * MAX_SAMPLES);
    if (!ws[i].lat_us || pthread_create(&ws[i].thread, NULL, worker_main, &ws[i])) {
      fprintf(stderr, "bench-submit: no memory or thread\n");
      exit(1); /* the threads started wait for start_flag: the process ends them */
    }
  }
  atomic_store(&start_flag, 1);
  uint64_t ops = 0;
  int failed = 0;
  double *all = malloc(sizeof(double) * MAX_SAMPLES);
  if (all == NULL) {
    fprintf(stderr, "bench-submit: no memory\n");
    exit(1);
  }
  size_t nall = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(ws[i].thread, NULL);
    ops += ws[i].ops;
    failed |= ws[i].failed;
    for (size_t k = 0; k < ws[i].nlat && nall < MAX_SAMPLES; k++)
      all[nall++] = ws[i].lat_us[k];
    free(ws[i].lat_us);
  }
  qsort(all, nall, sizeof(double), cmp_double);
  double median = nall ? all[nall / 2] : 0;
  free(all);
  printf("| %s | %d | %.1f kops/s | %.2f µs |%s\n", mode_names[mode], threads,
         (double)ops / seconds / 1e3, median, failed ? " FAILED" : "");
  fflush(stdout);
  return failed ? -1 : 0;
}

int main(int argc, char **argv) {
  const char *thread_list = "1,2,4,8";
  double seconds = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      thread_list = argv[++i];
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: bench-submit [--threads 1,2,4,8] [--seconds S]\n");
      return 2;
    }
  }
  CUdevice dev;
  CUcontext ctx;
  if (check(cuInit(0), "cuInit") || check(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain"))
    return 1;
  int memops = 0;
  cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev);
  printf("stream memory operations: %s\n", memops ? "yes" : "no");
  printf("| completion | threads | aggregate | median latency |\n|---|---|---|---|\n");
  int status = 0;
  char *list = strdup(thread_list);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    int t = atoi(tok);
    if (t < 1 || t > MAX_THREADS)
      continue;
    for (int m = 0; m < MODE_COUNT; m++)
      if (run_round(ctx, (enum mode)m, t, seconds))
        status = 1;
  }
  free(list);
  cuDevicePrimaryCtxRelease(dev);
  return status;
}
