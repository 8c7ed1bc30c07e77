/* The built-in program (kernels.cl, embedded at build time) for a device, and its disk cache.
 *
 * A build from source takes about 0.6 s on PoCL (more on GPU drivers), on every open and
 * every reset: so the binary of the first build is kept in a file named by a hash (FNV-1a,
 * 64 bits) of the platform, the device, its driver version, the build options and the source.
 * Directory: $ACCEL_CACHE_DIR, else $XDG_CACHE_HOME/accel, else $HOME/.cache/accel. The file
 * holds a header (magic, payload length, payload hash) and the driver's binary; one that is
 * missing, short, corrupt or refused by the driver means a build from source, and a cache
 * that cannot be written is only a missed saving. Files are written whole and renamed into
 * place, so a concurrent reader never sees half a file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel/error.h"
#include "backends/opencl/backend_opencl.h"
#include "backends/opencl/device.h"

#define CACHE_MAGIC "ACCLBIN1"
#define CACHE_MAX ((size_t)256 << 20)

static atomic_uint_fast64_t source_builds, cache_loads;

uint64_t be_opencl_source_builds(void)
{
  return atomic_load(&source_builds);
}

uint64_t be_opencl_cache_loads(void)
{
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
    [BE_OCL_NULL] = "be_null",
};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ s[i]) * 0x100000001b3ull;
  return h;
}

static const char *options(const be_device *dev)
{
  return dev->fp64 ? "-DBE_FP64" : "";
}

/* The hash of everything the binary depends on. */
static uint64_t cache_key(const be_device *dev)
{
  char s[256];
  uint64_t h = 0xcbf29ce484222325ull;
  static const cl_device_info dev_keys[] = {CL_DEVICE_NAME, CL_DEVICE_VENDOR, CL_DRIVER_VERSION,
                                            CL_DEVICE_VERSION};
  for (size_t i = 0; i < sizeof dev_keys / sizeof dev_keys[0]; i++) {
    if (clGetDeviceInfo(dev->id, dev_keys[i], sizeof s, s, NULL) != CL_SUCCESS)
      s[0] = '\0';
    s[sizeof s - 1] = '\0';
    h = fnv(h, s, strlen(s) + 1);
  }
  static const cl_platform_info plat_keys[] = {CL_PLATFORM_NAME, CL_PLATFORM_VERSION};
  for (size_t i = 0; i < sizeof plat_keys / sizeof plat_keys[0]; i++) {
    if (clGetPlatformInfo(dev->platform, plat_keys[i], sizeof s, s, NULL) != CL_SUCCESS)
      s[0] = '\0';
    s[sizeof s - 1] = '\0';
    h = fnv(h, s, strlen(s) + 1);
  }
  const char *opt = options(dev);
  h = fnv(h, opt, strlen(opt) + 1);
  return fnv(h, be_opencl_source, be_opencl_source_size);
}

static int cache_dir(char *buf, size_t len)
{
  const char *env = getenv("ACCEL_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME");
  const char *home = getenv("HOME");
  int n;
  if (env != NULL && env[0] != '\0')
    n = snprintf(buf, len, "%s", env);
  else if (xdg != NULL && xdg[0] != '\0')
    n = snprintf(buf, len, "%s/accel", xdg);
  else if (home != NULL && home[0] != '\0')
    n = snprintf(buf, len, "%s/.cache/accel", home);
  else
    return ACCEL_ENOENT;
  return n > 0 && (size_t)n < len ? 0 : ACCEL_ENOENT;
}

int be_opencl_cache_file(be_device *dev, char *buf, size_t len)
{
  char dir[4096];
  if (dev == NULL || buf == NULL || cache_dir(dir, sizeof dir) != 0)
    return ACCEL_ENOENT;
  int n = snprintf(buf, len, "%s/opencl-%016llx.bin", dir,
                   (unsigned long long)cache_key(dev));
  return n > 0 && (size_t)n < len ? 0 : ACCEL_ENOENT;
}

/* ---- the cache file ---------------------------------------------------------------------- */

typedef struct cache_head {
  char magic[8];
  uint64_t size, hash;
} cache_head;

/* The payload of a valid cache file (caller frees), or NULL. */
static unsigned char *cache_read(const char *path, size_t *size)
{
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return NULL;
  cache_head h;
  unsigned char *p = NULL;
  if (fread(&h, sizeof h, 1, f) == 1 && memcmp(h.magic, CACHE_MAGIC, 8) == 0 && h.size > 0 &&
      h.size <= CACHE_MAX && (p = malloc(h.size)) != NULL) {
    if (fread(p, 1, h.size, f) != h.size || fgetc(f) != EOF ||
        fnv(0xcbf29ce484222325ull, p, h.size) != h.hash) {
      free(p);
      p = NULL;
    }
  }
  fclose(f);
  *size = p != NULL ? h.size : 0;
  return p;
}

static void mkdirs(const char *path)
{
  char tmp[4200];
  if (strlen(path) >= sizeof tmp)
    return;
  memcpy(tmp, path, strlen(path) + 1);
  for (char *s = tmp + 1; *s != '\0'; s++)
    if (*s == '/') {
      *s = '\0';
      mkdir(tmp, 0700);
      *s = '/';
    }
}

static void cache_write(const char *path, const unsigned char *p, size_t size)
{
  char tmp[4300];
  int n = snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  if (n <= 0 || (size_t)n >= sizeof tmp)
    return;
  mkdirs(path);
  FILE *f = fopen(tmp, "wb");
  if (f == NULL)
    return;
  cache_head h = {.size = size, .hash = fnv(0xcbf29ce484222325ull, p, size)};
  memcpy(h.magic, CACHE_MAGIC, 8);
  bool ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(p, 1, size, f) == size;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0)
    unlink(tmp);
}

/* ---- building ----------------------------------------------------------------------------- */

static cl_program from_binary(be_device *dev, const unsigned char *bin, size_t size)
{
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

static void print_log(be_device *dev, cl_program p)
{
  size_t len = 0;
  if (clGetProgramBuildInfo(p, dev->id, CL_PROGRAM_BUILD_LOG, 0, NULL, &len) != CL_SUCCESS)
    return;
  char *log = malloc(len + 1);
  if (log != NULL &&
      clGetProgramBuildInfo(p, dev->id, CL_PROGRAM_BUILD_LOG, len, log, NULL) == CL_SUCCESS) {
    log[len] = '\0';
    fprintf(stderr, "accel opencl: kernels.cl failed to build on %s:\n%s\n", dev->info.name, log);
  }
  free(log);
}

static cl_program from_source(be_device *dev)
{
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

static void save(be_device *dev, cl_program p, const char *path)
{
  size_t size = 0;
  if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
      size == 0 || size > CACHE_MAX)
    return;
  unsigned char *bin = malloc(size);
  if (bin != NULL &&
      clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS)
    cache_write(path, bin, size);
  (void)dev;
  free(bin);
}

static cl_program build(be_device *dev)
{
  char path[4200];
  bool cached = be_opencl_cache_file(dev, path, sizeof path) == 0;
  size_t size = 0;
  unsigned char *bin = cached ? cache_read(path, &size) : NULL;
  cl_program p = bin != NULL ? from_binary(dev, bin, size) : NULL;
  free(bin);
  if (p != NULL) {
    atomic_fetch_add(&cache_loads, 1);
    return p;
  }
  p = from_source(dev);
  if (p != NULL && cached)
    save(dev, p, path);
  return p;
}

int be_ocl_program_load(be_device *dev)
{
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

void be_ocl_program_free(be_device *dev)
{
  for (int i = 0; i < BE_OCL_FN_COUNT; i++) {
    if (dev->fn[i] != NULL)
      clReleaseKernel(dev->fn[i]);
    dev->fn[i] = NULL;
  }
  if (dev->program != NULL)
    clReleaseProgram(dev->program);
  dev->program = NULL;
}
