/* accel — an sgemm workload spread by placement over every GPU, against the same workload on
 * one GPU (issue: every GPU of a host). API level, embedded mode, CUDA devices only.
 *
 * The workload: P independent products C_i = A_i B_i (n x n, F32), each pair written from the
 * host, then accel_finish. "one": every sgemm names GPU 0. "any": every sgemm on
 * ACCEL_DEVICE_ANY, which places it where its inputs are and, with them on the host, on the
 * GPU with the shortest queue (docs/ARCHITECTURE.md, "Placement"). Both include the writes.
 * The printed speed-up is one's time / any's time (median of the repetitions, alternating).
 * With fewer than two GPUs it says so and exits 77.
 *
 * Usage: bench-spread [--quick] [--n N] [--pairs P] [--reps R] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/accel.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define DIE(...)                                                                                   \
  do {                                                                                             \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fputc('\n', stderr);                                                                           \
    exit(1);                                                                                       \
  } while (0)

#define OK(call)                                                                                   \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0)                                                                                  \
      DIE("%s: %s", #call, accel_strerror(rc_));                                                   \
  } while (0)

typedef struct work {
  accel_ctx *ctx;
  int n, pairs;
  float *host;
  accel_buffer *a, *b, *c;
} work;

/* One repetition: the writes and products, on `dev`; seconds until everything finished. */
static double run_once(work *w, accel_device dev) {
  size_t elems = (size_t)w->n * (size_t)w->n;
  double t0 = now_s();
  for (int i = 0; i < w->pairs; i++) {
    OK(accel_write(w->ctx, w->a[i], 0, w->host, elems, NULL));
    OK(accel_write(w->ctx, w->b[i], 0, w->host + elems, elems, NULL));
    OK(accel_sgemm(w->ctx, dev, ACCEL_NO_TRANS, ACCEL_NO_TRANS, w->n, w->n, w->n, 1.0f, w->a[i],
                   w->n, w->b[i], w->n, 0.0f, w->c[i], w->n, NULL));
  }
  OK(accel_finish(w->ctx, -1));
  return now_s() - t0;
}

int main(int argc, char **argv) {
  int n = 4096, pairs = 16, reps = 5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      pairs = 8;
      reps = 3;
    } else if (!strcmp(argv[i], "--n") && i + 1 < argc) {
      n = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--pairs") && i + 1 < argc) {
      pairs = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
    }
  }
  work w = {.n = n, .pairs = pairs};
  OK(accel_open(&w.ctx, "embedded:?backends=cuda"));
  int gpus = accel_device_count(w.ctx);
  if (gpus < 2) {
    printf("sgemm spread over GPUs: skipped: %d GPU(s); the comparison needs two or more\n", gpus);
    accel_close(w.ctx);
    return 77;
  }
  size_t elems = (size_t)n * (size_t)n;
  w.host = malloc(2 * elems * sizeof *w.host);
  w.a = calloc((size_t)pairs, sizeof *w.a);
  w.b = calloc((size_t)pairs, sizeof *w.b);
  w.c = calloc((size_t)pairs, sizeof *w.c);
  if (!w.host || !w.a || !w.b || !w.c)
    DIE("out of memory");
  srand(12345);
  for (size_t i = 0; i < 2 * elems; i++)
    w.host[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  for (int i = 0; i < pairs; i++) {
    OK(accel_buffer_create(w.ctx, ACCEL_F32, elems, &w.a[i]));
    OK(accel_buffer_create(w.ctx, ACCEL_F32, elems, &w.b[i]));
    OK(accel_buffer_create(w.ctx, ACCEL_F32, elems, &w.c[i]));
  }
  run_once(&w, 0); /* warm-up: memory, cuBLAS handles, the second GPU */
  run_once(&w, ACCEL_DEVICE_ANY);
  double one[64], any[64];
  reps = reps > 64 ? 64 : reps;
  for (int r = 0; r < reps; r++) {
    one[r] = run_once(&w, 0);
    any[r] = run_once(&w, ACCEL_DEVICE_ANY);
  }
  qsort(one, (size_t)reps, sizeof *one, cmp_double);
  qsort(any, (size_t)reps, sizeof *any, cmp_double);
  double flop = 2.0 * n * (double)n * n * pairs;
  printf("sgemm spread over %d GPUs (%d products n=%d, writes included): one GPU %.1f ms "
         "(%.0f GFLOP/s), ANY %.1f ms (%.0f GFLOP/s): speed-up %.2f\n",
         gpus, pairs, n, one[reps / 2] * 1e3, flop / one[reps / 2] * 1e-9, any[reps / 2] * 1e3,
         flop / any[reps / 2] * 1e-9, one[reps / 2] / any[reps / 2]);
  for (int i = 0; i < pairs; i++) {
    OK(accel_buffer_destroy(w.ctx, w.a[i]));
    OK(accel_buffer_destroy(w.ctx, w.b[i]));
    OK(accel_buffer_destroy(w.ctx, w.c[i]));
  }
  accel_close(w.ctx);
  free(w.host);
  free(w.a);
  free(w.b);
  free(w.c);
  return 0;
}
