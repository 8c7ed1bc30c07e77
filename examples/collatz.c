/* collatz: a user kernel (alkomp's example). For every element, count the steps of the Collatz
 * sequence until it reaches 1, on a device, from OpenCL C (or CUDA C where a CUDA device is
 * there and no OpenCL device), and check each count on the host. Exit status 0 only if every
 * count is right.
 *
 * Build:  cc collatz.c $(pkg-config --cflags --libs accel)
 * Run:    ./collatz                      (in-process)
 *         ./collatz ipc:///run/acceld/acceld.sock   (through the daemon)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <accel/accel.h>

static const char opencl_c[] = "__kernel void collatz(uint n, __global uint *v) {\n"
                               "  size_t i = get_global_id(0);\n"
                               "  if (i >= n) return;\n"
                               "  uint x = v[i], steps = 0;\n"
                               "  for (; x > 1; steps++) x = (x % 2) ? 3 * x + 1 : x / 2;\n"
                               "  v[i] = steps;\n"
                               "}\n";

static const char cuda_c[] = "extern \"C\" __global__ void collatz(unsigned n, unsigned *v) {\n"
                             "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                             "  if (i >= n) return;\n"
                             "  unsigned x = v[i], steps = 0;\n"
                             "  for (; x > 1; steps++) x = (x % 2) ? 3 * x + 1 : x / 2;\n"
                             "  v[i] = steps;\n"
                             "}\n";

#define CHECK(call)                                                                                \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0) {                                                                                \
      fprintf(stderr, "%s failed: %s\n", #call, accel_strerror(rc_));                              \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

enum { N = 10000 };

/* The first device that builds this kind of source, or -1. */
static accel_device device_for(accel_ctx *ctx, accel_source source) {
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    CHECK(accel_device_info(ctx, d, &info));
    if (info.sources & (1u << source))
      return d;
  }
  return -1;
}

static unsigned host_steps(unsigned long long x) {
  unsigned steps = 0;
  for (; x > 1; steps++)
    x = x % 2 ? 3 * x + 1 : x / 2;
  return steps;
}

int main(int argc, char **argv) {
  accel_ctx *ctx;
  CHECK(accel_open(&ctx, argc > 1 ? argv[1] : NULL));
  accel_source source = ACCEL_SOURCE_OPENCL;
  const char *code = opencl_c;
  accel_device dev = device_for(ctx, source);
  if (dev < 0) {
    source = ACCEL_SOURCE_CUDA;
    code = cuda_c;
    dev = device_for(ctx, source);
  }
  if (dev < 0) {
    fprintf(stderr, "collatz: no device here builds OpenCL C or CUDA C\n");
    return 77; /* "skipped" to a test harness */
  }
  struct accel_device_info info;
  CHECK(accel_device_info(ctx, dev, &info));
  printf("collatz: %s on device %d (%s)\n", source == ACCEL_SOURCE_OPENCL ? "OpenCL C" : "CUDA C",
         dev, info.name);

  /* Load and build; the future's value is the compiler's log. */
  accel_module mod;
  accel_kernel collatz;
  accel_future *built;
  CHECK(accel_module_load(ctx, dev, source, code, strlen(code), NULL, &mod, &built));
  int rc = accel_future_wait(built, -1);
  if (rc != 0) {
    const char *log = accel_future_value(built);
    fprintf(stderr, "build failed: %s\n%s\n", accel_strerror(rc), log ? log : "");
    return 1;
  }
  accel_future_release(built);
  CHECK(accel_kernel_get(ctx, mod, "collatz", &collatz));

  static unsigned v[N], steps[N];
  srand(42);
  for (int i = 0; i < N; i++)
    v[i] = 1 + (unsigned)rand() % 99999;
  accel_buffer buf;
  CHECK(accel_buffer_create(ctx, ACCEL_U32, N, &buf));
  CHECK(accel_write(ctx, buf, 0, v, N, NULL));
  accel_arg args[] = {accel_arg_u32(N), accel_arg_buffer(buf, ACCEL_ACCESS_READ_WRITE, 0, N)};
  accel_launch_dims dims = {{(N + 127) / 128, 1, 1}, {128, 1, 1}, 0, 0};
  CHECK(accel_launch(ctx, dev, collatz, &dims, args, 2, NULL));
  accel_future *read;
  CHECK(accel_read(ctx, buf, 0, steps, N, &read));
  CHECK(accel_future_wait(read, -1));
  accel_future_release(read);

  int wrong = 0;
  unsigned most = 0;
  for (int i = 0; i < N; i++) {
    wrong += steps[i] != host_steps(v[i]);
    most = steps[i] > steps[most] ? (unsigned)i : most;
  }
  printf("collatz: %d elements, %d wrong; the longest: %u takes %u steps\n", N, wrong, v[most],
         steps[most]);
  CHECK(accel_module_unload(ctx, mod));
  accel_close(ctx);
  return wrong == 0 ? 0 : 1;
}
