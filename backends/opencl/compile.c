/* User code built for an OpenCL device in the build helper (compile.h): the device is found
 * again by its platform's name and its own (the helper opens nothing else of the backend), the
 * code built in a context of the helper's, and the program's binary is what the daemon loads
 * (clCreateProgramWithBinary: no front end runs in the daemon). */
#include "backends/opencl/compile.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "runtime/alloc.h"

be_ocl_il_fn be_ocl_il_creator(cl_platform_id platform) {
  be_ocl_il_fn f = (be_ocl_il_fn)(uintptr_t)clGetExtensionFunctionAddressForPlatform(
      platform, "clCreateProgramWithILKHR");
  if (f == NULL)
    f = (be_ocl_il_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "clCreateProgramWithIL");
  return f;
}

char *be_ocl_build_log(cl_device_id dev, cl_program p) {
  size_t len = 0;
  if (clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &len) != CL_SUCCESS || len == 0)
    return NULL;
  char *log = rt_malloc(len + 1);
  if (log == NULL ||
      clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, len, log, NULL) != CL_SUCCESS) {
    rt_free(log);
    return NULL;
  }
  log[len] = '\0';
  if (strspn(log, " \t\r\n") == strlen(log)) {
    rt_free(log);
    return NULL;
  }
  return log;
}

void be_ocl_target(be_device *dev, char *buf, size_t len) {
  char plat[256] = "", name[256] = "";
  clGetPlatformInfo(dev->platform, CL_PLATFORM_NAME, sizeof plat - 1, plat, NULL);
  clGetDeviceInfo(dev->id, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
  snprintf(buf, len, "%s\n%s", plat, name);
}

/* ---- finding the device ---- */

static bool same_name(const char *want, char *got, size_t n) {
  got[n - 1] = '\0';
  return strcmp(want, got) == 0;
}

static bool device_of(cl_platform_id p, const char *want, cl_device_id *out) {
  cl_device_id ids[64];
  cl_uint n = 0;
  if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 64, ids, &n) != CL_SUCCESS)
    return false;
  for (cl_uint i = 0; i < n && i < 64; i++) {
    char name[256] = "";
    if (clGetDeviceInfo(ids[i], CL_DEVICE_NAME, sizeof name, name, NULL) == CL_SUCCESS &&
        same_name(want, name, sizeof name)) {
      *out = ids[i];
      return true;
    }
  }
  return false;
}

/* The device named by "platform\ndevice": 0, or ACCEL_ENOENT. */
static int find(const char *target, cl_platform_id *plat, cl_device_id *dev) {
  const char *nl = strchr(target, '\n');
  cl_platform_id ps[32];
  cl_uint n = 0;
  if (nl == NULL || clGetPlatformIDs(32, ps, &n) != CL_SUCCESS)
    return ACCEL_ENOENT;
  for (cl_uint i = 0; i < n && i < 32; i++) {
    char name[256] = "";
    size_t plen = (size_t)(nl - target);
    if (clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL) != CL_SUCCESS ||
        strlen(name) != plen || strncmp(name, target, plen) != 0)
      continue;
    if (device_of(ps[i], nl + 1, dev)) {
      *plat = ps[i];
      return 0;
    }
  }
  return ACCEL_ENOENT;
}

/* ---- building ---- */

static char *note(const char *what, cl_int err) {
  char *s = rt_malloc(128);
  if (s)
    snprintf(s, 128, "%s (OpenCL error %d)", what, (int)err);
  return s;
}

static cl_program create(cl_platform_id plat, cl_context ctx, uint32_t source, const void *code,
                         size_t len, cl_int *err) {
  if (source == ACCEL_SOURCE_SPIRV) {
    be_ocl_il_fn f = be_ocl_il_creator(plat);
    if (f == NULL) {
      *err = CL_INVALID_OPERATION;
      return NULL;
    }
    return f(ctx, code, len, err);
  }
  const char *src = code;
  return clCreateProgramWithSource(ctx, 1, &src, &len, err);
}

static int binary_of(cl_program p, void **image, size_t *image_len) {
  size_t size = 0;
  if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
      size == 0)
    return ACCEL_EBUILD;
  unsigned char *bin = rt_malloc(size);
  if (bin == NULL)
    return ACCEL_ENOMEM;
  if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) != CL_SUCCESS) {
    rt_free(bin);
    return ACCEL_EBUILD;
  }
  *image = bin;
  *image_len = size;
  return 0;
}

static int build_in(cl_platform_id plat, cl_device_id dev, cl_context ctx, uint32_t source,
                    const void *code, size_t len, const char *options, void **image,
                    size_t *image_len, char **log) {
  cl_int err = CL_SUCCESS;
  cl_program p = create(plat, ctx, source, code, len, &err);
  if (p == NULL) {
    *log = note(source == ACCEL_SOURCE_SPIRV ? "the device refused the SPIR-V module"
                                             : "the platform refused the source",
                err);
    return err == CL_OUT_OF_HOST_MEMORY ? ACCEL_ENOMEM : ACCEL_EBUILD;
  }
  err = clBuildProgram(p, 1, &dev, options, NULL, NULL);
  *log = be_ocl_build_log(dev, p);
  int rc = err == CL_SUCCESS              ? binary_of(p, image, image_len)
           : err == CL_OUT_OF_HOST_MEMORY ? ACCEL_ENOMEM
                                          : ACCEL_EBUILD;
  if (err != CL_SUCCESS && *log == NULL)
    *log = note("the build failed", err);
  clReleaseProgram(p);
  return rc;
}

int be_ocl_compile(const char *target, uint32_t source, const void *code, size_t len,
                   const char *options, void **image, size_t *image_len, char **log) {
  *log = NULL;
  if (source != ACCEL_SOURCE_OPENCL && source != ACCEL_SOURCE_SPIRV)
    return ACCEL_ENOTSUP;
  cl_platform_id plat;
  cl_device_id dev;
  if (find(target, &plat, &dev) != 0) {
    *log = note("accel-build: the device is not there in the build helper", CL_DEVICE_NOT_FOUND);
    return ACCEL_ENOENT;
  }
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
  cl_int err = CL_SUCCESS;
  cl_context ctx = clCreateContext(props, 1, &dev, NULL, NULL, &err);
  if (ctx == NULL) {
    *log = note("accel-build: no context on the device", err);
    return err == CL_OUT_OF_HOST_MEMORY ? ACCEL_ENOMEM : ACCEL_EBUILD;
  }
  int rc = build_in(plat, dev, ctx, source, code, len, options, image, image_len, log);
  clReleaseContext(ctx);
  return rc;
}
