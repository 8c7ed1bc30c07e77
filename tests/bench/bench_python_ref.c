/* accel — the C side of the Python benchmark (tests/bench/bench_python.py runs both and prints
 * the ratios). One repetition, in this process, on a context opened with URL:
 *   tiny   ITERS fills of a 1-element f32 buffer on any device, each waited for on its future:
 *          the median and the mean microseconds per op (after 200 warm-up ops)
 *   bulk   MIB MiB of f32 written from malloc'd memory into a buffer, copied by the device
 *          (ACCEL_DEVICE_ANY: a GPU where there is one) into a second buffer, and that read
 *          back into another malloc'd block, waited for: seconds (after one warm-up round
 *          trip), and the data checked. The copy makes the data travel to the device and back
 * Prints "tiny_median_us=X tiny_mean_us=Y bulk_s=Z" on one line.
 * Usage: bench-python-ref URL ITERS MIB   (exit status 0 unless a call failed) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/accel.h"

#define CHECK(call)                                                                                \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0) {                                                                                \
      fprintf(stderr, "%s: %s\n", #call, accel_strerror(rc_));                                     \
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
  return (x > y) - (x < y);
}

static double tiny_op(accel_ctx *ctx, accel_buffer buf) {
  accel_future *f = NULL;
  double t0 = now_s();
  CHECK(accel_fill(ctx, ACCEL_DEVICE_ANY, buf, 1.0, &f));
  CHECK(accel_future_wait(f, -1));
  accel_future_release(f);
  return now_s() - t0;
}

static void tiny(accel_ctx *ctx, int iters, double *median_us, double *mean_us) {
  accel_buffer buf;
  CHECK(accel_buffer_create(ctx, ACCEL_F32, 1, &buf));
  for (int i = 0; i < 200; i++)
    tiny_op(ctx, buf);
  double *t = malloc(sizeof *t * (size_t)iters), sum = 0;
  if (t == NULL)
    exit(1);
  for (int i = 0; i < iters; i++)
    sum += t[i] = tiny_op(ctx, buf);
  qsort(t, (size_t)iters, sizeof *t, cmp_double);
  *median_us = t[iters / 2] * 1e6;
  *mean_us = sum / iters * 1e6;
  free(t);
  CHECK(accel_buffer_destroy(ctx, buf));
}

static double round_trip(accel_ctx *ctx, const accel_buffer buf[2], const float *src, float *dst,
                         size_t n) {
  accel_future *w = NULL, *c = NULL, *r = NULL;
  double t0 = now_s();
  CHECK(accel_write(ctx, buf[0], 0, src, n, &w));
  CHECK(accel_copy(ctx, ACCEL_DEVICE_ANY, buf[1], 0, buf[0], 0, n, &c));
  CHECK(accel_read(ctx, buf[1], 0, dst, n, &r));
  CHECK(accel_future_wait(w, -1));
  CHECK(accel_future_wait(c, -1));
  CHECK(accel_future_wait(r, -1));
  double s = now_s() - t0;
  accel_future_release(w);
  accel_future_release(c);
  accel_future_release(r);
  return s;
}

static double bulk(accel_ctx *ctx, size_t mib) {
  size_t n = mib * (1u << 20) / sizeof(float);
  float *src = malloc(n * sizeof *src), *dst = malloc(n * sizeof *dst);
  if (src == NULL || dst == NULL)
    exit(1);
  for (size_t i = 0; i < n; i++)
    src[i] = (float)(i % 1000);
  accel_buffer buf[2];
  CHECK(accel_buffer_create(ctx, ACCEL_F32, n, &buf[0]));
  CHECK(accel_buffer_create(ctx, ACCEL_F32, n, &buf[1]));
  round_trip(ctx, buf, src, dst, n); /* warm-up: first touch of every page */
  double s = round_trip(ctx, buf, src, dst, n);
  if (memcmp(src, dst, n * sizeof *src) != 0) {
    fprintf(stderr, "bulk: data read back differs\n");
    exit(1);
  }
  CHECK(accel_buffer_destroy(ctx, buf[0]));
  CHECK(accel_buffer_destroy(ctx, buf[1]));
  free(src);
  free(dst);
  return s;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: bench-python-ref URL ITERS MIB\n");
    return 2;
  }
  int iters = atoi(argv[2]);
  size_t mib = (size_t)atol(argv[3]);
  if (iters < 1 || mib < 1) {
    fprintf(stderr, "ITERS and MIB must be positive\n");
    return 2;
  }
  accel_ctx *ctx;
  CHECK(accel_open(&ctx, argv[1]));
  double median_us, mean_us;
  tiny(ctx, iters, &median_us, &mean_us);
  double bulk_s = bulk(ctx, mib);
  printf("tiny_median_us=%.3f tiny_mean_us=%.3f bulk_s=%.6f\n", median_us, mean_us, bulk_s);
  accel_close(ctx);
  return 0;
}
