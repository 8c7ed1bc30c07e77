/* saxpy_kernel: SAXPY (y = a x + y) written as a user kernel, next to accel's built-in
 * accel_saxpy on the same device and the same inputs: the two results must agree bit for bit.
 * Every OpenCL device and every CUDA device (CUDA C through NVRTC) of the context is tried.
 * Exit status 0 only if every device that ran it agrees.
 *
 * Build:  cc saxpy_kernel.c $(pkg-config --cflags --libs accel) -lm
 * Run:    ./saxpy_kernel   or   ./saxpy_kernel ipc:///run/acceld/acceld.sock
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <accel/accel.h>

/* Written as each backend's own axpy is (OpenCL: a product, then a sum, with contraction
 * into a fused multiply-add off, as in accel's own kernels; CUDA: one fused multiply-add), so
 * the bits match. */
static const char opencl_c[] =
    "#pragma OPENCL FP_CONTRACT OFF\n"
    "__kernel void saxpy(uint n, float a, __global const float *x, __global float *y) {\n"
    "  size_t i = get_global_id(0);\n"
    "  if (i < n) { float ax = a * x[i]; y[i] = ax + y[i]; }\n"
    "}\n";
static const char cuda_c[] =
    "extern \"C\" __global__ void saxpy(unsigned n, float a, const float *x, float *y) {\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = fmaf(a, x[i], y[i]);\n"
    "}\n";

#define CHECK(call)                                                                                \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0) {                                                                                \
      fprintf(stderr, "%s failed: %s\n", #call, accel_strerror(rc_));                              \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

enum { N = 1 << 20 };

static void wait_ok(accel_future *f) {
  int rc = accel_future_wait(f, -1);
  if (rc != 0) {
    const char *log = accel_future_value(f);
    fprintf(stderr, "failed: %s\n%s", accel_strerror(rc), log ? log : "");
    exit(1);
  }
  accel_future_release(f);
}

/* Runs both on dev; returns the number of elements that differ. */
static size_t compare_on(accel_ctx *ctx, accel_device dev, accel_source source, const float *x,
                         const float *y, float a) {
  const char *code = source == ACCEL_SOURCE_OPENCL ? opencl_c : cuda_c;
  accel_module mod;
  accel_kernel saxpy;
  accel_future *f;
  CHECK(accel_module_load(ctx, dev, source, code, strlen(code), NULL, &mod, &f));
  wait_ok(f);
  CHECK(accel_kernel_get(ctx, mod, "saxpy", &saxpy));

  accel_buffer bx, mine, builtin;
  CHECK(accel_buffer_create(ctx, ACCEL_F32, N, &bx));
  CHECK(accel_buffer_create(ctx, ACCEL_F32, N, &mine));
  CHECK(accel_buffer_create(ctx, ACCEL_F32, N, &builtin));
  CHECK(accel_write(ctx, bx, 0, x, N, NULL));
  CHECK(accel_write(ctx, mine, 0, y, N, NULL));
  CHECK(accel_write(ctx, builtin, 0, y, N, NULL));

  accel_arg args[] = {accel_arg_u32(N), accel_arg_f32(a),
                      accel_arg_buffer(bx, ACCEL_ACCESS_READ, 0, N),
                      accel_arg_buffer(mine, ACCEL_ACCESS_READ_WRITE, 0, N)};
  accel_launch_dims dims = {{N / 256, 1, 1}, {256, 1, 1}, 0, 0};
  CHECK(accel_launch(ctx, dev, saxpy, &dims, args, 4, NULL));
  CHECK(accel_saxpy(ctx, dev, N, a, bx, builtin, NULL));

  float *r1 = malloc(N * sizeof *r1), *r2 = malloc(N * sizeof *r2);
  if (r1 == NULL || r2 == NULL)
    exit(1);
  CHECK(accel_read(ctx, mine, 0, r1, N, &f));
  wait_ok(f);
  CHECK(accel_read(ctx, builtin, 0, r2, N, &f));
  wait_ok(f);
  size_t differ = 0;
  for (size_t i = 0; i < N; i++)
    differ += memcmp(&r1[i], &r2[i], sizeof *r1) != 0;
  free(r1);
  free(r2);
  CHECK(accel_module_unload(ctx, mod));
  CHECK(accel_buffer_destroy(ctx, bx));
  CHECK(accel_buffer_destroy(ctx, mine));
  CHECK(accel_buffer_destroy(ctx, builtin));
  return differ;
}

int main(int argc, char **argv) {
  accel_ctx *ctx;
  CHECK(accel_open(&ctx, argc > 1 ? argv[1] : NULL));
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), a = 1.7f;
  if (x == NULL || y == NULL)
    return 1;
  srand(7);
  for (size_t i = 0; i < N; i++) {
    x[i] = (float)rand() / (float)RAND_MAX * 20 - 10;
    y[i] = (float)rand() / (float)RAND_MAX * 20 - 10;
  }
  int ran = 0, bad = 0;
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    CHECK(accel_device_info(ctx, d, &info));
    accel_source source = (info.sources & (1u << ACCEL_SOURCE_CUDA))     ? ACCEL_SOURCE_CUDA
                          : (info.sources & (1u << ACCEL_SOURCE_OPENCL)) ? ACCEL_SOURCE_OPENCL
                                                                         : 0;
    if (source == 0)
      continue;
    size_t differ = compare_on(ctx, d, source, x, y, a);
    printf("saxpy_kernel: device %d (%s): user kernel vs accel_saxpy: %zu of %d elements differ\n",
           d, info.name, differ, N);
    ran++;
    bad += differ != 0;
  }
  free(x);
  free(y);
  accel_close(ctx);
  if (ran == 0) {
    fprintf(stderr, "saxpy_kernel: no device here builds OpenCL C or CUDA C\n");
    return 77;
  }
  return bad == 0 ? 0 : 1;
}
