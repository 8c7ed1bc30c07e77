/* What the CUDA benchmarks share: dying with a message on any failed call (a benchmark never
 * times an error), a monotonic clock and the median. Define BENCH_NAME before including. */
#ifndef ACCEL_BENCH_CUDA_UTIL_H
#define ACCEL_BENCH_CUDA_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "accel/error.h"
#include "backends/cuda/driver.h"

#define DIE(...)                                                                                   \
  do {                                                                                             \
    fprintf(stderr, BENCH_NAME ": " __VA_ARGS__);                                                  \
    fputc('\n', stderr);                                                                           \
    exit(1);                                                                                       \
  } while (0)

#define CU(call)                                                                                   \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS)                                                                        \
      DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, be_cuda_err_name(r_));                       \
  } while (0)

#define OK(call)                                                                                   \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0)                                                                                  \
      DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, accel_strerror(rc_));                        \
  } while (0)

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Sorts v in place. */
static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the results table: a "row:" line as each result comes, the table at the end ---- */

typedef struct bench_row {
  char what[48], accel[24], ref[24], ratio[16], target[16];
} bench_row;

static bench_row bench_rows[64];
static int bench_nrows;

/* ratio <= 0: none ("-"). */
static inline void add_row(const char *what, const char *accel, const char *ref, double ratio,
                           const char *target) {
  if (bench_nrows == 64)
    return;
  bench_row *r = &bench_rows[bench_nrows++];
  snprintf(r->what, sizeof r->what, "%s", what);
  snprintf(r->accel, sizeof r->accel, "%s", accel);
  snprintf(r->ref, sizeof r->ref, "%s", ref);
  if (ratio > 0)
    snprintf(r->ratio, sizeof r->ratio, "%.3f", ratio);
  else
    snprintf(r->ratio, sizeof r->ratio, "-");
  snprintf(r->target, sizeof r->target, "%s", target);
  printf("row: %s | %s | %s | %s | %s\n", r->what, r->accel, r->ref, r->ratio, r->target);
  fflush(stdout);
}

/* title: "== <title> on <gpu>: ..." */
static inline void print_table(const char *title, const char *gpu, const char *ratio_means) {
  printf("\n== %s on %s: accel vs reference (ratio = %s) ==\n", title, gpu, ratio_means);
  printf("%-44s %-22s %-22s %-8s %s\n", "measure", "accel", "reference", "ratio", "target");
  for (int i = 0; i < bench_nrows; i++)
    printf("%-44s %-22s %-22s %-8s %s\n", bench_rows[i].what, bench_rows[i].accel,
           bench_rows[i].ref, bench_rows[i].ratio, bench_rows[i].target);
}

#endif
