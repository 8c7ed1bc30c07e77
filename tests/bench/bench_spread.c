/* accel — an sgemm workload spread by placement over every GPU, against the same workload on
 * one GPU (issue: every GPU of a host). API level, embedded mode, CUDA devices only.
 *
 * The workload: P independent products C_i = A_i B_i (n x n, F32), then accel_finish. "one":
 * every sgemm names GPU 0. "any": every sgemm on ACCEL_DEVICE_ANY, which places it where its
 * inputs are and, with them on the host, on the GPU with the shortest queue
 * (docs/DECISIONS.md, "Placement"). Two rows:
 *   - inputs resident: the pairs were written once, before the timing; each side has its own
 *     buffers, so "one" finds them all on GPU 0 and "any" each pair where its first product
 *     ran (spread by queue length, then kept there by data): products only;
 *   - writes included: each repetition writes every pair from the host first (pageable
 *     memory), so the host's copies weigh as much as the products.
 * The printed speed-up is one's time / any's time (median of the repetitions, alternating).
 * With fewer than two GPUs it says so and exits 77.
 *
 * Usage: bench-spread [--quick] [--n N] [--pairs P] [--reps R] */
#include <stdbool.h>
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

static void write_pair(work *w, int i) {
  size_t elems = (size_t)w->n * (size_t)w->n;
  OK(accel_write(w->ctx, w->a[i], 0, w->host, elems, NULL));
  OK(accel_write(w->ctx, w->b[i], 0, w->host + elems, elems, NULL));
}

/* One repetition: the products (after writing each pair, if `writes`) on `dev`; seconds until
 * everything finished. */
static double run_once(work *w, accel_device dev, bool writes) {
  double t0 = now_s();
  for (int i = 0; i < w->pairs; i++) {
    if (writes)
      write_pair(w, i);
    OK(accel_sgemm(w->ctx, dev, ACCEL_NO_TRANS, ACCEL_NO_TRANS, w->n, w->n, w->n, 1.0f, w->a[i],
                   w->n, w->b[i], w->n, 0.0f, w->c[i], w->n, NULL));
  }
  OK(accel_finish(w->ctx, -1));
  return now_s() - t0;
}

static void work_make(work *w) {
  size_t elems = (size_t)w->n * (size_t)w->n;
  w->a = calloc((size_t)w->pairs, sizeof *w->a);
  w->b = calloc((size_t)w->pairs, sizeof *w->b);
  w->c = calloc((size_t)w->pairs, sizeof *w->c);
  if (!w->a || !w->b || !w->c)
    DIE("out of memory");
  for (int i = 0; i < w->pairs; i++) {
    OK(accel_buffer_create(w->ctx, ACCEL_F32, elems, &w->a[i]));
    OK(accel_buffer_create(w->ctx, ACCEL_F32, elems, &w->b[i]));
    OK(accel_buffer_create(w->ctx, ACCEL_F32, elems, &w->c[i]));
    write_pair(w, i);
  }
}

static void work_free(work *w) {
  for (int i = 0; i < w->pairs; i++) {
    OK(accel_buffer_destroy(w->ctx, w->a[i]));
    OK(accel_buffer_destroy(w->ctx, w->b[i]));
    OK(accel_buffer_destroy(w->ctx, w->c[i]));
  }
  free(w->a);
  free(w->b);
  free(w->c);
}

/* Alternates one (GPU 0, buffers of `one`) and any (ANY, buffers of `any`) `reps` times after a
 * warm-up of each, and prints the row: the medians and one's over any's. */
static void compare(const char *what, work *one, work *any, int gpus, int reps, bool writes) {
  double t1[64], ta[64];
  run_once(one, 0, writes); /* warm-up: memory, cuBLAS handles, the second GPU, placement */
  run_once(any, ACCEL_DEVICE_ANY, writes);
  for (int r = 0; r < reps; r++) {
    t1[r] = run_once(one, 0, writes);
    ta[r] = run_once(any, ACCEL_DEVICE_ANY, writes);
  }
  qsort(t1, (size_t)reps, sizeof *t1, cmp_double);
  qsort(ta, (size_t)reps, sizeof *ta, cmp_double);
  double flop = 2.0 * one->n * (double)one->n * one->n * one->pairs;
  double m1 = t1[reps / 2], ma = ta[reps / 2];
  printf("sgemm spread over %d GPUs, %s (%d products n=%d): one GPU %.1f ms (%.0f GFLOP/s), "
         "ANY %.1f ms (%.0f GFLOP/s): speed-up %.2f\n",
         gpus, what, one->pairs, one->n, m1 * 1e3, flop / m1 * 1e-9, ma * 1e3, flop / ma * 1e-9,
         m1 / ma);
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
  accel_ctx *ctx = NULL;
  OK(accel_open(&ctx, "embedded:?backends=cuda"));
  int gpus = accel_device_count(ctx);
  if (gpus < 2) {
    printf("sgemm spread over GPUs: skipped: %d GPU(s); the comparison needs two or more\n", gpus);
    accel_close(ctx);
    return 77;
  }
  size_t elems = (size_t)n * (size_t)n;
  float *host = malloc(2 * elems * sizeof *host);
  if (host == NULL)
    DIE("out of memory");
  srand(12345);
  for (size_t i = 0; i < 2 * elems; i++)
    host[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  work one = {.ctx = ctx, .n = n, .pairs = pairs, .host = host}, any = one;
  work_make(&one);
  work_make(&any);
  reps = reps > 64 ? 64 : reps;
  compare("inputs resident", &one, &any, gpus, reps, false);
  compare("writes included", &one, &any, gpus, reps, true);
  work_free(&one);
  work_free(&any);
  accel_close(ctx);
  free(host);
  return 0;
}
