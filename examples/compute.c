/* compute: the accel C API end to end, in-process.
 *
 * Opens an embedded context, lists its devices, fills two matrices with Philox normals on the
 * device, multiplies them with sgemm, applies a softmax to every row, reads the result back
 * and checks it against a float64 computation on the host, from the same random numbers read
 * back. Prints what it did and how much data moved. Exit status 0 only if every check holds.
 *
 * Build:  cc compute.c $(pkg-config --cflags --libs accel) -lm
 * Run:    ./compute                      (in-process)
 *         ./compute ipc:///run/acceld/acceld.sock   (through the daemon)
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <accel/accel.h>

#define CHECK(call)                                                                                \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0) {                                                                                \
      fprintf(stderr, "%s failed: %s\n", #call, accel_strerror(rc_));                              \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

enum { M = 256, N = 192, K = 320 };

static void list_devices(accel_ctx *ctx) {
  int count = accel_device_count(ctx);
  printf("devices: %d\n", count);
  for (int d = 0; d < count; d++) {
    struct accel_device_info info;
    CHECK(accel_device_info(ctx, d, &info));
    printf("  %d: %-6s %s, %u compute units, %.1f GiB\n", d, info.backend, info.name,
           info.compute_units, (double)info.mem_bytes / (1u << 30));
  }
}

/* C = A * B (column-major), then a softmax over C seen as M row-major rows of N elements. */
static void reference(const float *a, const float *b, double *c) {
  for (int j = 0; j < N; j++)
    for (int i = 0; i < M; i++) {
      double s = 0;
      for (int l = 0; l < K; l++)
        s += (double)a[i + l * M] * b[l + j * K];
      c[i + j * M] = s;
    }
  for (int r = 0; r < M; r++) {
    double *row = c + (size_t)r * N, max = row[0], sum = 0;
    for (int j = 1; j < N; j++)
      max = row[j] > max ? row[j] : max;
    for (int j = 0; j < N; j++)
      sum += row[j] = exp(row[j] - max);
    for (int j = 0; j < N; j++)
      row[j] /= sum;
  }
}

static double max_error(const float *got, const double *want, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs(got[i] - want[i]);
    worst = e > worst ? e : worst;
  }
  return worst;
}

int main(int argc, char **argv) {
  /* "embedded:" (the default) runs in this process; "ipc://..." talks to acceld. */
  const char *url = argc > 1 ? argv[1] : "embedded:";
  accel_ctx *ctx;
  CHECK(accel_open(&ctx, url));
  printf("context: %s\n", url);
  list_devices(ctx);

  accel_buffer a, b, c, p;
  CHECK(accel_buffer_create(ctx, ACCEL_F32, (size_t)M * K, &a));
  CHECK(accel_buffer_create(ctx, ACCEL_F32, (size_t)K * N, &b));
  CHECK(accel_buffer_create(ctx, ACCEL_F32, (size_t)M * N, &c));
  CHECK(accel_buffer_create(ctx, ACCEL_F32, (size_t)M * N, &p));

  /* Issue everything at once: ops on the same buffers run in the order issued. */
  accel_rng normal = {.dist = ACCEL_DIST_NORMAL, .seed = 2026, .mean = 0, .stddev = 0.05f};
  CHECK(accel_rng_fill(ctx, ACCEL_DEVICE_ANY, a, &normal, NULL));
  normal.offset = (uint64_t)M * K; /* the next stretch of the same stream */
  CHECK(accel_rng_fill(ctx, ACCEL_DEVICE_ANY, b, &normal, NULL));
  CHECK(accel_sgemm(ctx, ACCEL_DEVICE_ANY, ACCEL_NO_TRANS, ACCEL_NO_TRANS, M, N, K, 1.0f, a, M, b,
                    K, 0.0f, c, M, NULL));
  CHECK(accel_softmax(ctx, ACCEL_DEVICE_ANY, p, c, M, N, NULL));

  float *ha = malloc(sizeof(float) * M * K), *hb = malloc(sizeof(float) * K * N);
  float *hp = malloc(sizeof(float) * M * N);
  double *want = malloc(sizeof(double) * M * N);
  accel_future *done;
  CHECK(accel_read(ctx, a, 0, ha, (size_t)M * K, NULL));
  CHECK(accel_read(ctx, b, 0, hb, (size_t)K * N, NULL));
  CHECK(accel_read(ctx, p, 0, hp, (size_t)M * N, &done));
  int status = accel_future_wait(done, 10000);
  accel_future_release(done);
  CHECK(status);
  CHECK(accel_finish(ctx, 10000));
  printf("rng fill %dx%d and %dx%d, sgemm %dx%dx%d, softmax over %d rows: done\n", M, K, K, N, M, N,
         K, M);

  reference(ha, hb, want);
  double err = max_error(hp, want, (size_t)M * N);
  printf("max |accel - float64 reference| = %.3g (tolerance 1e-5)\n", err);

  accel_transfer_stats st;
  CHECK(accel_transfer_stats_get(ctx, &st));
  printf("bytes moved: host->device %llu, device->host %llu, read back %llu\n",
         (unsigned long long)st.host_to_device, (unsigned long long)st.device_to_host,
         (unsigned long long)st.read);

  accel_buffer bufs[] = {a, b, c, p};
  for (int i = 0; i < 4; i++)
    CHECK(accel_buffer_destroy(ctx, bufs[i]));
  accel_close(ctx);
  free(ha);
  free(hb);
  free(hp);
  free(want);
  bool ok = err <= 1e-5;
  printf("%s\n", ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
