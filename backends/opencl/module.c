/* User kernels on OpenCL (the `module` package): OpenCL C built by the device's platform, and
 * SPIR-V where the device takes IL. Programs are built with -cl-kernel-arg-info, so a launch's
 * arguments are checked against each parameter's address space and type. A built program's
 * binary is cached on disk (backends/disk_cache.h) keyed by the device, its driver, the
 * options and the code: a second load of the same source skips the compiler. With load_with
 * the compiler runs elsewhere (acceld's build helper, compile.c there) and its binary is
 * loaded here. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "backends/disk_cache.h"
#include "backends/opencl/compile.h"
#include "backends/opencl/device.h"
#include "runtime/alloc.h"

#define IL_VERSION 0x105B /* CL_DEVICE_IL_VERSION(_KHR): not in the 1.2 headers */
#define ARG_INFO_OPTION " -cl-kernel-arg-info"

struct be_kernel {
  struct be_kernel *next;
  cl_kernel k;
  char name[BE_KERNEL_NAME_MAX + 1];
  be_kernel_info info;
  be_device *dev;
};

struct be_module {
  be_device *dev; /* held */
  cl_program program;
  struct be_kernel *kernels;
};

static bool takes_spirv(be_device *dev) {
  char il[256] = "";
  if (clGetDeviceInfo(dev->id, IL_VERSION, sizeof il - 1, il, NULL) != CL_SUCCESS)
    return false;
  return strstr(il, "SPIR-V") != NULL && be_ocl_il_creator(dev->platform) != NULL;
}

static uint32_t ocl_sources(be_device *dev) {
  if (dev == NULL)
    return 0;
  return (1u << ACCEL_SOURCE_OPENCL) | (takes_spirv(dev) ? 1u << ACCEL_SOURCE_SPIRV : 0);
}

static void ocl_limits(be_device *dev, be_launch_limits *out) {
  size_t items[3] = {1, 1, 1};
  memset(out, 0, sizeof *out);
  clGetDeviceInfo(dev->id, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof items, items, NULL);
  for (int i = 0; i < 3; i++) {
    out->max_block[i] = items[i] > UINT32_MAX ? UINT32_MAX : (uint32_t)items[i];
    out->max_grid[i] = UINT32_MAX; /* OpenCL bounds only the global size (a size_t) */
  }
  out->max_threads_per_block = dev->wg_max > UINT32_MAX ? UINT32_MAX : (uint32_t)dev->wg_max;
  out->max_shared_bytes = 0; /* dynamic local memory comes as __local arguments */
}

/* ---- building ---------------------------------------------------------------------------- */

static uint64_t cache_key(be_device *dev, uint32_t source, const void *code, size_t len,
                          const char *opts) {
  char s[256];
  uint64_t h = be_cache_hash(BE_CACHE_HASH_INIT, &source, sizeof source);
  static const cl_device_info keys[] = {CL_DEVICE_NAME, CL_DEVICE_VENDOR, CL_DRIVER_VERSION,
                                        CL_DEVICE_VERSION};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    if (clGetDeviceInfo(dev->id, keys[i], sizeof s, s, NULL) != CL_SUCCESS)
      s[0] = '\0';
    s[sizeof s - 1] = '\0';
    h = be_cache_hash(h, s, strlen(s) + 1);
  }
  if (clGetPlatformInfo(dev->platform, CL_PLATFORM_VERSION, sizeof s, s, NULL) != CL_SUCCESS)
    s[0] = '\0';
  s[sizeof s - 1] = '\0';
  h = be_cache_hash(h, s, strlen(s) + 1);
  h = be_cache_hash(h, opts, strlen(opts) + 1);
  return be_cache_hash(h, code, len);
}

static char *text(const char *what, cl_int err) {
  char *s = rt_malloc(96);
  if (s)
    snprintf(s, 96, "%s (OpenCL error %d)", what, (int)err);
  return s;
}

static cl_program create(be_device *dev, uint32_t source, const void *code, size_t len,
                         cl_int *err) {
  if (source == ACCEL_SOURCE_SPIRV) {
    be_ocl_il_fn f = be_ocl_il_creator(dev->platform);
    if (f == NULL) {
      *err = CL_INVALID_OPERATION;
      return NULL;
    }
    return f(dev->ctx, code, len, err);
  }
  const char *src = code;
  return clCreateProgramWithSource(dev->ctx, 1, &src, &len, err);
}

/* A program from a binary (the cache's, the build helper's), built for dev: NULL if the
 * driver refused it. */
static cl_program from_binary(be_device *dev, const void *bin, size_t size, const char *opts) {
  const unsigned char *b = bin;
  cl_int err = CL_SUCCESS, status = CL_SUCCESS;
  cl_program p = clCreateProgramWithBinary(dev->ctx, 1, &dev->id, &size, &b, &status, &err);
  if (p != NULL && (err != CL_SUCCESS || status != CL_SUCCESS ||
                    clBuildProgram(p, 1, &dev->id, opts, NULL, NULL) != CL_SUCCESS)) {
    clReleaseProgram(p);
    p = NULL;
  }
  return p;
}

static cl_program from_cache(be_device *dev, uint64_t key, const char *opts) {
  void *bin = NULL;
  size_t size = 0;
  if (be_cache_read("opencl-module", key, &bin, &size) != 0)
    return NULL;
  cl_program p = from_binary(dev, bin, size, opts);
  rt_free(bin);
  return p;
}

static void to_cache(be_device *dev, cl_program p, uint64_t key) {
  size_t size = 0;
  if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
      size == 0)
    return;
  unsigned char *bin = rt_malloc(size);
  if (bin != NULL && clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS)
    be_cache_write("opencl-module", key, bin, size);
  rt_free(bin);
  (void)dev;
}

/* The front end in this process (embedded mode's default). */
static int build_here(be_device *dev, uint32_t source, const void *code, size_t len,
                      const char *opts, cl_program *out, char **log) {
  cl_int err = CL_SUCCESS;
  cl_program p = create(dev, source, code, len, &err);
  if (p == NULL) {
    *log = text(source == ACCEL_SOURCE_SPIRV ? "the device refused the SPIR-V module"
                                             : "the platform refused the source",
                err);
    return err == CL_OUT_OF_HOST_MEMORY ? ACCEL_ENOMEM : ACCEL_EBUILD;
  }
  err = clBuildProgram(p, 1, &dev->id, opts, NULL, NULL);
  *log = be_ocl_build_log(dev->id, p);
  if (err != CL_SUCCESS) {
    if (*log == NULL)
      *log = text("the build failed", err);
    clReleaseProgram(p);
    return err == CL_OUT_OF_HOST_MEMORY ? ACCEL_ENOMEM : ACCEL_EBUILD;
  }
  *out = p;
  return 0;
}

/* The front end in c's place (the build helper): its binary is loaded here. */
static int build_by(be_device *dev, const be_compiler *c, uint32_t source, const void *code,
                    size_t len, const char *opts, cl_program *out, char **log) {
  char target[600];
  be_ocl_target(dev, target, sizeof target);
  void *bin = NULL;
  size_t size = 0;
  int rc = c->compile(c, target, source, code, len, opts, &bin, &size, log);
  if (rc != 0)
    return rc;
  *out = from_binary(dev, bin, size, opts);
  rt_free(bin);
  if (*out == NULL) {
    char *why = text("accel: the driver refused the build helper's binary", CL_INVALID_BINARY);
    if (why != NULL && *log == NULL)
      *log = why;
    else
      rt_free(why);
    return ACCEL_EBUILD;
  }
  return 0;
}

static int build(be_device *dev, const be_compiler *c, uint32_t source, const void *code,
                 size_t len, const char *opts, cl_program *out, char **log) {
  uint64_t key = cache_key(dev, source, code, len, opts);
  cl_program p = from_cache(dev, key, opts);
  if (p != NULL) {
    *out = p;
    return 0;
  }
  int rc = c ? build_by(dev, c, source, code, len, opts, out, log)
             : build_here(dev, source, code, len, opts, out, log);
  if (rc == 0)
    to_cache(dev, *out, key);
  return rc;
}

static int ocl_load_with(be_device *dev, uint32_t source, const void *code, size_t len,
                         const char *options, const be_compiler *c, be_module **out, char **log) {
  *log = NULL;
  if (source != ACCEL_SOURCE_OPENCL && (source != ACCEL_SOURCE_SPIRV || !takes_spirv(dev)))
    return ACCEL_ENOTSUP;
  if (be_ocl_gen_lost(dev, atomic_load(&dev->gen)) || dev->ctx == NULL)
    return ACCEL_EDEVLOST;
  size_t olen = options ? strlen(options) : 0;
  char *opts = rt_malloc(olen + sizeof ARG_INFO_OPTION);
  be_module *m = rt_calloc(1, sizeof *m);
  if (opts == NULL || m == NULL) {
    rt_free(opts);
    rt_free(m);
    return ACCEL_ENOMEM;
  }
  snprintf(opts, olen + sizeof ARG_INFO_OPTION, "%s%s", options ? options : "", ARG_INFO_OPTION);
  int rc = build(dev, c, source, code, len, opts, &m->program, log);
  rt_free(opts);
  if (rc != 0) {
    rt_free(m);
    return rc;
  }
  be_ocl_dev_ref(dev);
  m->dev = dev;
  *out = m;
  return 0;
}

static int ocl_load(be_device *dev, uint32_t source, const void *code, size_t len,
                    const char *options, be_module **out, char **log) {
  return ocl_load_with(dev, source, code, len, options, NULL, out, log);
}

static void ocl_unload(be_module *m) {
  if (m == NULL)
    return;
  while (m->kernels) {
    struct be_kernel *k = m->kernels;
    m->kernels = k->next;
    clReleaseKernel(k->k);
    rt_free(k);
  }
  clReleaseProgram(m->program);
  be_ocl_dev_unref(m->dev);
  rt_free(m);
}

/* ---- kernels ----------------------------------------------------------------------------- */

/* Bytes of an OpenCL C scalar or vector type by name ("float", "uint4", "size_t"); 0 if
 * unknown. */
static uint32_t type_size(be_device *dev, const char *name) {
  static const struct {
    const char *name;
    uint32_t size;
  } base[] = {{"char", 1}, {"uchar", 1}, {"bool", 1},   {"short", 2},        {"ushort", 2},
              {"half", 2}, {"int", 4},   {"uint", 4},   {"unsigned int", 4}, {"float", 4},
              {"long", 8}, {"ulong", 8}, {"double", 8}, {"unsigned long", 8}};
  cl_uint bits = 64;
  if (strcmp(name, "size_t") == 0 || strcmp(name, "ptrdiff_t") == 0 ||
      strcmp(name, "intptr_t") == 0 || strcmp(name, "uintptr_t") == 0) {
    clGetDeviceInfo(dev->id, CL_DEVICE_ADDRESS_BITS, sizeof bits, &bits, NULL);
    return bits / 8;
  }
  for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) {
    size_t n = strlen(base[i].name);
    if (strncmp(name, base[i].name, n) != 0)
      continue;
    const char *rest = name + n;
    if (*rest == '\0')
      return base[i].size;
    int width = atoi(rest);
    if (width == 2 || width == 3 || width == 4 || width == 8 || width == 16)
      return base[i].size * (uint32_t)(width == 3 ? 4 : width);
  }
  return 0;
}

static struct be_param param_of(be_device *dev, cl_kernel k, cl_uint i) {
  struct be_param p = {BE_PARAM_UNKNOWN, 0};
  cl_kernel_arg_address_qualifier q;
  char type[128] = "";
  if (clGetKernelArgInfo(k, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof q, &q, NULL) != CL_SUCCESS)
    return p;
  if (q == CL_KERNEL_ARG_ADDRESS_GLOBAL || q == CL_KERNEL_ARG_ADDRESS_CONSTANT)
    return (struct be_param){BE_PARAM_BUFFER, 0};
  if (q == CL_KERNEL_ARG_ADDRESS_LOCAL)
    return (struct be_param){BE_PARAM_LOCAL, 0};
  if (clGetKernelArgInfo(k, i, CL_KERNEL_ARG_TYPE_NAME, sizeof type - 1, type, NULL) != CL_SUCCESS)
    return (struct be_param){BE_PARAM_SCALAR, 0};
  if (strchr(type, '*')) /* a pointer in the private space: nothing we can pass */
    return (struct be_param){BE_PARAM_SCALAR, UINT32_MAX};
  return (struct be_param){BE_PARAM_SCALAR, type_size(dev, type)};
}

static int kernel_info(be_device *dev, cl_kernel k, be_kernel_info *info) {
  cl_uint n = 0;
  memset(info, 0, sizeof *info);
  if (clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof n, &n, NULL) != CL_SUCCESS) {
    info->nparams = UINT32_MAX;
    return 0;
  }
  if (n > BE_LAUNCH_MAX_ARGS)
    return ACCEL_ELIMIT; /* more parameters than a launch can pass */
  info->nparams = n;
  for (cl_uint i = 0; i < n; i++)
    info->params[i] = param_of(dev, k, i);
  return 0;
}

static int ocl_kernel(be_module *m, const char *name, be_kernel **out, be_kernel_info *info) {
  for (struct be_kernel *k = m->kernels; k; k = k->next)
    if (strcmp(k->name, name) == 0) {
      *out = k;
      *info = k->info;
      return 0;
    }
  cl_int err = CL_SUCCESS;
  cl_kernel ck = clCreateKernel(m->program, name, &err);
  if (ck == NULL)
    return err == CL_INVALID_KERNEL_NAME ? ACCEL_ENOENT : be_ocl_check(m->dev, err);
  struct be_kernel *k = rt_calloc(1, sizeof *k);
  int rc = k ? kernel_info(m->dev, ck, &k->info) : ACCEL_ENOMEM;
  if (rc != 0) {
    clReleaseKernel(ck);
    rt_free(k);
    return rc;
  }
  k->k = ck;
  k->dev = m->dev;
  snprintf(k->name, sizeof k->name, "%s", name);
  k->next = m->kernels;
  m->kernels = k;
  *out = k;
  *info = k->info;
  return 0;
}

/* ---- launches ---------------------------------------------------------------------------- */

/* A buffer argument: the cl_mem itself, or a sub-buffer from the byte offset (which OpenCL
 * wants aligned to the device's base address alignment). *sub is set when one was made. */
static cl_int buffer_arg(be_device *dev, const be_kernel_arg *a, cl_mem *mem, cl_mem *sub) {
  *mem = (cl_mem)(uintptr_t)a->mem.handle;
  *sub = NULL;
  if (a->offset == 0)
    return CL_SUCCESS;
  cl_uint align_bits = 0;
  clGetDeviceInfo(dev->id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL);
  size_t align = align_bits ? align_bits / 8 : 1;
  if (a->offset % align != 0 || a->offset >= a->mem.bytes)
    return CL_MISALIGNED_SUB_BUFFER_OFFSET;
  cl_buffer_region r = {a->offset, a->mem.bytes - a->offset};
  cl_int err = CL_SUCCESS;
  *sub = clCreateSubBuffer(*mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
  *mem = *sub;
  return err;
}

static cl_int set_args(struct be_kernel *k, const be_launch *l, cl_mem subs[]) {
  cl_int err = CL_SUCCESS;
  for (uint32_t i = 0; i < l->nargs && err == CL_SUCCESS; i++) {
    const be_kernel_arg *a = &l->args[i];
    subs[i] = NULL;
    if (a->kind == BE_PARAM_BUFFER) {
      cl_mem mem;
      err = buffer_arg(k->dev, a, &mem, &subs[i]);
      if (err == CL_SUCCESS)
        err = clSetKernelArg(k->k, i, sizeof mem, &mem);
    } else if (a->kind == BE_PARAM_LOCAL) {
      err = clSetKernelArg(k->k, i, a->size, NULL);
    } else {
      uint64_t v = a->bits; /* little-endian host: the low bytes come first */
      err = clSetKernelArg(k->k, i, a->size, &v);
    }
  }
  return err;
}

static int ocl_launch(be_queue *q, be_kernel *k, const be_launch *l) {
  int rc = be_ocl_queue_ok(q);
  if (rc != 0)
    return rc;
  if (l->shared_bytes != 0 || l->nargs > BE_LAUNCH_MAX_ARGS)
    return ACCEL_EINVAL; /* OpenCL's local memory comes as __local arguments */
  size_t global[3], local[3];
  for (int i = 0; i < 3; i++) {
    global[i] = (size_t)l->grid[i] * l->block[i];
    local[i] = l->block[i];
  }
  cl_mem subs[BE_LAUNCH_MAX_ARGS] = {0};
  cl_int err = set_args(k, l, subs);
  if (err == CL_SUCCESS)
    err = clEnqueueNDRangeKernel(q->cq, k->k, 3, NULL, global, local, 0, NULL, NULL);
  for (uint32_t i = 0; i < l->nargs; i++)
    if (subs[i]) /* the queued command holds its own reference */
      clReleaseMemObject(subs[i]);
  if (err == CL_INVALID_KERNEL_ARGS || err == CL_INVALID_ARG_SIZE || err == CL_INVALID_ARG_VALUE ||
      err == CL_MISALIGNED_SUB_BUFFER_OFFSET || err == CL_INVALID_WORK_GROUP_SIZE ||
      err == CL_INVALID_WORK_ITEM_SIZE)
    return ACCEL_EINVAL;
  return be_ocl_check(q->dev, err);
}

const be_module_pkg be_opencl_module = {
    .version = BE_MODULE_VERSION,
    .sources = ocl_sources,
    .limits = ocl_limits,
    .load = ocl_load,
    .unload = ocl_unload,
    .kernel = ocl_kernel,
    .launch = ocl_launch,
    .load_with = ocl_load_with,
    .compile = be_ocl_compile,
};
