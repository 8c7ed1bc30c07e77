/* bench-opencl: the opencl backend's overhead over raw OpenCL on the same device and context.
 *   sgemm n = 1024 through be_ops (CLBlast inside) vs CLBlastSgemm called directly: ratio;
 *   a tiny op (a 1-element fill, then an event synchronised) vs clEnqueueFillBuffer +
 *   clFinish: median latencies and their ratio.
 * Exits 77 without an OpenCL device. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <clblast_c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "backends/backend.h"
#include "backends/opencl/backend_opencl.h"

enum { N = 1024, GEMM_REPS = 5, TINY_REPS = 2000 };

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double median_us(uint64_t *t, size_t n) {
  qsort(t, n, sizeof *t, cmp_u64);
  return (double)t[n / 2] / 1e3;
}

static void sync_q(const be_ops *B, be_device *d, be_queue *q) {
  be_event *ev = NULL;
  CHECK_OK(B->event_create(d, &ev));
  CHECK_OK(B->event_record(ev, q));
  CHECK_OK(B->event_sync(ev));
  B->event_destroy(ev);
}

int main(void) {
  const be_ops *B = NULL;
  for (const be_entry *e = be_registry(); e->name != NULL; e++)
    if (strcmp(e->name, "opencl") == 0)
      B = e->ops;
  int count = 0;
  if (B == NULL || B->probe(&count, NULL, 0) != 0 || count == 0) {
    printf("1..0 # SKIP no OpenCL device\n");
    return 77;
  }
  be_device *d = NULL;
  be_queue *q = NULL;
  CHECK_OK(B->open(0, NULL, &d));
  CHECK_OK(B->queue_create(d, &q));
  be_device_info info;
  CHECK_OK(B->info(d, &info));
  printf("# %s\n", info.name);
  size_t bytes = (size_t)N * N * 4;
  float *h = malloc(bytes);
  for (size_t i = 0; i < (size_t)N * N; i++)
    h[i] = (float)(i % 17) / 17.0f;
  be_mem a, b, c;
  CHECK_OK(B->mem_alloc(d, bytes, &a));
  CHECK_OK(B->mem_alloc(d, bytes, &b));
  CHECK_OK(B->mem_alloc(d, bytes, &c));
  CHECK_OK(B->copy_h2d(q, a, 0, h, bytes));
  CHECK_OK(B->copy_h2d(q, b, 0, h, bytes));
  CHECK_OK(B->copy_h2d(q, c, 0, h, bytes));
  sync_q(B, d, q);
  be_gemm_args g = {.m = N,
                    .n = N,
                    .k = N,
                    .alpha = 1,
                    .beta = 0.5,
                    .lda = N,
                    .ldb = N,
                    .ldc = N,
                    .ab_type = ACCEL_F32,
                    .c_type = ACCEL_F32,
                    .batch = 1};
  cl_command_queue cq = be_opencl_queue(q);
  cl_mem ca = (cl_mem)(uintptr_t)a.handle, cb = (cl_mem)(uintptr_t)b.handle;
  cl_mem cc = (cl_mem)(uintptr_t)c.handle;
  /* Warm-up: CLBlast compiles its kernels on first use. */
  CHECK_OK(B->blas->gemm(q, &g, a, 0, b, 0, c, 0));
  sync_q(B, d, q);
  uint64_t tb[GEMM_REPS], tr[GEMM_REPS];
  for (int i = 0; i < GEMM_REPS; i++) {
    uint64_t t0 = test_now_ns();
    CHECK_OK(B->blas->gemm(q, &g, a, 0, b, 0, c, 0));
    sync_q(B, d, q);
    uint64_t t1 = test_now_ns();
    CHECK_EQ(CLBlastSgemm(CLBlastLayoutColMajor, CLBlastTransposeNo, CLBlastTransposeNo, N, N, N,
                          1.0f, ca, 0, N, cb, 0, N, 0.5f, cc, 0, N, &cq, NULL),
             CLBlastSuccess);
    CHECK_EQ(clFinish(cq), CL_SUCCESS);
    uint64_t t2 = test_now_ns();
    tb[i] = t1 - t0;
    tr[i] = t2 - t1;
  }
  double gb = median_us(tb, GEMM_REPS), gr = median_us(tr, GEMM_REPS);
  double gflop = 2.0 * N * N * N / 1e3;
  printf("sgemm n=%d: backend %.1f ms (%.1f GFLOP/s), CLBlast direct %.1f ms (%.1f GFLOP/s), "
         "ratio %.3f\n",
         N, gb / 1e3, gflop / gb, gr / 1e3, gflop / gr, gb / gr);
  static uint64_t ub[TINY_REPS], ur[TINY_REPS];
  cl_uint zero = 0;
  for (int i = 0; i < TINY_REPS; i++) {
    uint64_t t0 = test_now_ns();
    CHECK_OK(B->fill(q, c, 0, 1, 4, 7));
    sync_q(B, d, q);
    uint64_t t1 = test_now_ns();
    CHECK_EQ(clEnqueueFillBuffer(cq, cc, &zero, 4, 0, 4, 0, NULL, NULL), CL_SUCCESS);
    CHECK_EQ(clFinish(cq), CL_SUCCESS);
    uint64_t t2 = test_now_ns();
    ub[i] = t1 - t0;
    ur[i] = t2 - t1;
  }
  double fb = median_us(ub, TINY_REPS), fr = median_us(ur, TINY_REPS);
  printf("1-element fill + sync: backend %.1f us, raw clEnqueueFillBuffer + clFinish %.1f us, "
         "ratio %.2f\n",
         fb, fr, fb / fr);
  B->mem_free(d, &a);
  B->mem_free(d, &b);
  B->mem_free(d, &c);
  free(h);
  B->queue_destroy(q);
  B->close(d);
  return 0;
}
