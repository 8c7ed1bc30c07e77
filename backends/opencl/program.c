/* The built-in program (kernels.cl, embedded at build time) for a device, and its disk cache.
 *
 * A build from source takes about 0.6 s on PoCL (more on GPU drivers), on every open and
 * every reset: so the binary of the first build is kept in the backends' disk cache
 * (backends/disk_cache.h, kind "opencl") under a hash of the platform, the device, its driver
 * version, the build options and the source. An entry that is missing, corrupt or refused by
 * the driver means a build from source, and a cache that cannot be written is only a missed
 * saving. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/error.h"
#include "backends/disk_cache.h"
#include "backends/opencl/backend_opencl.h"
#include "backends/opencl/device.h"
#include "runtime/alloc.h"

#define CACHE_KIND "opencl"

static atomic_uint_fast64_t source_builds, cache_loads;

uint64_t be_opencl_source_builds(void) {
  return atomic_load(&source_builds);
}

uint64_t be_opencl_cache_loads(void) {
  return atomic_load(&cache_loads);
}

/* The kernels by be_ocl_fn index (NULL: none in that place). */
static const char *const fn_names[BE_OCL_FN_COUNT] = {
    [BE_OCL_RNG_BITS] = "be_rng_bits",
    [BE_OCL_RNG_UNIFORM] = "be_rng_uniform_f32",
    [BE_OCL_RNG_UNIFORM + 1] = "be_rng_uniform_f64",
    [BE_OCL_RNG_UNIFORM + 2] = "be_rng_uniform_f16",
    [BE_OCL_RNG_UNIFORM + 3] = "be_rng_uniform_bf16",
    [BE_OCL_RNG_NORMAL] = "be_rng_normal_f32",
    [BE_OCL_RNG_NORMAL + 1] = "be_rng_normal_f64",
    [BE_OCL_RNG_NORMAL + 2] = "be_rng_normal_f16",
    [BE_OCL_RNG_NORMAL + 3] = "be_rng_normal_bf16",
    [BE_OCL_AXPY] = "be_axpy_f32",
    [BE_OCL_AXPY + 1] = "be_axpy_f64",
    [BE_OCL_SCAL] = "be_scal_f32",
    [BE_OCL_SCAL + 1] = "be_scal_f64",
    [BE_OCL_DOT] = "be_dot_f32",
    [BE_OCL_DOT + 1] = "be_dot_f64",
    [BE_OCL_SIGMOID] = "be_sigmoid_f32",
    [BE_OCL_SIGMOID + 1] = "be_sigmoid_f64",
    [BE_OCL_SIGMOID + 2] = "be_sigmoid_f16",
    [BE_OCL_SIGMOID + 3] = "be_sigmoid_bf16",
    [BE_OCL_RELU] = "be_relu_f32",
    [BE_OCL_RELU + 1] = "be_relu_f64",
    [BE_OCL_RELU + 2] = "be_relu_f16",
    [BE_OCL_RELU + 3] = "be_relu_bf16",
    [BE_OCL_TANH] = "be_tanh_f32",
    [BE_OCL_TANH + 1] = "be_tanh_f64",
    [BE_OCL_TANH + 2] = "be_tanh_f16",
    [BE_OCL_TANH + 3] = "be_tanh_bf16",
    [BE_OCL_SOFTMAX] = "be_softmax_f32",
    [BE_OCL_SOFTMAX + 1] = "be_softmax_f64",
    [BE_OCL_SOFTMAX + 2] = "be_softmax_f16",
    [BE_OCL_SOFTMAX + 3] = "be_softmax_bf16",
    [BE_OCL_SCALE] = "be_scale_f32",
    [BE_OCL_SCALE + 1] = "be_scale_f64",
    [BE_OCL_SCALE + 2] = "be_scale_f16",
    [BE_OCL_BINARY] = "be_binary_f32",
    [BE_OCL_BINARY + 1] = "be_binary_f64",
    [BE_OCL_BINARY + 2] = "be_binary_f16",
    [BE_OCL_BINARY + 3] = "be_binary_bf16",
#define OCL_ROW_(fn, name)                                                                         \
  [fn] = name "_f32", [fn + 1] = name "_f64", [fn + 2] = name "_f16", [fn + 3] = name "_bf16"
    OCL_ROW_(BE_OCL_EXP, "be_exp"),
    OCL_ROW_(BE_OCL_LOG, "be_log"),
    OCL_ROW_(BE_OCL_SQRT, "be_sqrt"),
    OCL_ROW_(BE_OCL_ABS, "be_abs"),
    OCL_ROW_(BE_OCL_REDUCE, "be_reduce"),
#undef OCL_ROW_
    [BE_OCL_BINARY_INT] = "be_binary_i32",
    [BE_OCL_BINARY_INT + 1] = "be_binary_u32",
    [BE_OCL_COMPARE] = "be_compare_f32",
    [BE_OCL_COMPARE + 1] = "be_compare_f64",
    [BE_OCL_COMPARE + 2] = "be_compare_f16",
    [BE_OCL_COMPARE + 3] = "be_compare_bf16",
    [BE_OCL_COMPARE + 4] = "be_compare_i32",
    [BE_OCL_COMPARE + 5] = "be_compare_u32",
    [BE_OCL_WHERE] = "be_where_u8",
    [BE_OCL_WHERE + 1] = "be_where_u16",
    [BE_OCL_WHERE + 2] = "be_where_u32",
    [BE_OCL_WHERE + 3] = "be_where_u64",
    [BE_OCL_CONVERT] = "be_convert",
    [BE_OCL_BINARY_BOOL] = "be_binary_bool",
    [BE_OCL_NULL] = "be_null",
};

/* OpenCL lets f32 division be 2.5 ulp off (NVIDIA's is): where the device can, it is built
 * correctly rounded, as the other backends' and numpy's is. */
static const char *options(const be_device *dev) {
  static const char *const opts[2][2] = {{"", "-cl-fp32-correctly-rounded-divide-sqrt"},
                                         {"-DBE_FP64",
                                          "-DBE_FP64 -cl-fp32-correctly-rounded-divide-sqrt"}};
  return opts[dev->fp64][dev->div_exact];
}

/* The hash of everything the binary depends on. */
static uint64_t cache_key(const be_device *dev) {
  char s[256];
  uint64_t h = BE_CACHE_HASH_INIT;
  static const cl_device_info dev_keys[] = {CL_DEVICE_NAME, CL_DEVICE_VENDOR, CL_DRIVER_VERSION,
                                            CL_DEVICE_VERSION};
  for (size_t i = 0; i < sizeof dev_keys / sizeof dev_keys[0]; i++) {
    if (clGetDeviceInfo(dev->id, dev_keys[i], sizeof s, s, NULL) != CL_SUCCESS)
      s[0] = '\0';
    s[sizeof s - 1] = '\0';
    h = be_cache_hash(h, s, strlen(s) + 1);
  }
  static const cl_platform_info plat_keys[] = {CL_PLATFORM_NAME, CL_PLATFORM_VERSION};
  for (size_t i = 0; i < sizeof plat_keys / sizeof plat_keys[0]; i++) {
    if (clGetPlatformInfo(dev->platform, plat_keys[i], sizeof s, s, NULL) != CL_SUCCESS)
      s[0] = '\0';
    s[sizeof s - 1] = '\0';
    h = be_cache_hash(h, s, strlen(s) + 1);
  }
  const char *opt = options(dev);
  h = be_cache_hash(h, opt, strlen(opt) + 1);
  return be_cache_hash(h, be_opencl_source, be_opencl_source_size);
}

int be_opencl_cache_file(be_device *dev, char *buf, size_t len) {
  if (dev == NULL)
    return ACCEL_ENOENT;
  return be_cache_path(CACHE_KIND, cache_key(dev), buf, len);
}

/* ---- building ----------------------------------------------------------------------------- */

static cl_program from_binary(be_device *dev, const unsigned char *bin, size_t size) {
  cl_int err = CL_SUCCESS, status = CL_SUCCESS;
  cl_program p = clCreateProgramWithBinary(dev->ctx, 1, &dev->id, &size, &bin, &status, &err);
  if (p == NULL)
    return NULL;
  if (err != CL_SUCCESS || status != CL_SUCCESS ||
      clBuildProgram(p, 1, &dev->id, options(dev), NULL, NULL) != CL_SUCCESS) {
    clReleaseProgram(p);
    return NULL;
  }
  return p;
}

static void print_log(be_device *dev, cl_program p) {
  size_t len = 0;
  if (clGetProgramBuildInfo(p, dev->id, CL_PROGRAM_BUILD_LOG, 0, NULL, &len) != CL_SUCCESS)
    return;
  char *log = rt_malloc(len + 1);
  if (log != NULL &&
      clGetProgramBuildInfo(p, dev->id, CL_PROGRAM_BUILD_LOG, len, log, NULL) == CL_SUCCESS) {
    log[len] = '\0';
    fprintf(stderr, "accel opencl: kernels.cl failed to build on %s:\n%s\n", dev->info.name, log);
  }
  rt_free(log);
}

static cl_program from_source(be_device *dev) {
  const char *src = be_opencl_source;
  size_t len = be_opencl_source_size;
  cl_int err = CL_SUCCESS;
  cl_program p = clCreateProgramWithSource(dev->ctx, 1, &src, &len, &err);
  if (p == NULL)
    return NULL;
  atomic_fetch_add(&source_builds, 1);
  if (clBuildProgram(p, 1, &dev->id, options(dev), NULL, NULL) != CL_SUCCESS) {
    print_log(dev, p);
    clReleaseProgram(p);
    return NULL;
  }
  return p;
}

static void save(be_device *dev, cl_program p, uint64_t key) {
  size_t size = 0;
  if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
      size == 0 || size > BE_CACHE_MAX)
    return;
  unsigned char *bin = rt_malloc(size);
  if (bin != NULL && clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS)
    be_cache_write(CACHE_KIND, key, bin, size);
  (void)dev;
  rt_free(bin);
}

static cl_program build(be_device *dev) {
  uint64_t key = cache_key(dev);
  void *bin = NULL;
  size_t size = 0;
  cl_program p = NULL;
  if (be_cache_read(CACHE_KIND, key, &bin, &size) == 0)
    p = from_binary(dev, bin, size);
  rt_free(bin);
  if (p != NULL) {
    atomic_fetch_add(&cache_loads, 1);
    return p;
  }
  p = from_source(dev);
  if (p != NULL)
    save(dev, p, key);
  return p;
}

int be_ocl_program_load(be_device *dev) {
  cl_program p = build(dev);
  if (p == NULL)
    return ACCEL_EIO;
  dev->program = p;
  for (int i = 0; i < BE_OCL_FN_COUNT; i++) {
    const char *name = fn_names[i];
    bool f64 = name != NULL && strstr(name, "_f64") != NULL;
    if (name == NULL || (f64 && !dev->fp64))
      continue;
    cl_int err = CL_SUCCESS;
    dev->fn[i] = clCreateKernel(p, name, &err);
    if (dev->fn[i] == NULL) {
      be_ocl_program_free(dev);
      return ACCEL_EIO;
    }
  }
  return 0;
}

void be_ocl_program_free(be_device *dev) {
  for (int i = 0; i < BE_OCL_FN_COUNT; i++) {
    if (dev->fn[i] != NULL)
      clReleaseKernel(dev->fn[i]);
    dev->fn[i] = NULL;
  }
  if (dev->program != NULL)
    clReleaseProgram(dev->program);
  dev->program = NULL;
}
