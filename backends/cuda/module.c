/* User kernels on the cuda backend: the `module` package of backend.h.
 *
 * A module is a CUmodule of the incarnation that loaded it: CUDA C built by NVRTC
 * (module_build.c, with its caches), or PTX handed to the driver, which compiles it for the
 * device (and keeps its own JIT cache). Its kernels are CUfunctions looked up once per name
 * and kept in the module.
 *
 * Loading waits for the device: beside a kernel of the same context that keeps running,
 * cuModuleLoadData of a CUBIN did not return, nor did a kernel launched on another stream
 * start (lazy loading; H100, driver 580, measured). So a load blocks its worker thread until
 * the kernels running on the device end (or, after abort(), for good: the context is buried
 * with the load inside it, context.c).
 *
 * Lifetime: the device lists its modules. When the incarnation goes (reset, close), their
 * CUmodules go with it (be_cuda_modules_dissolve): a module of an older generation launches
 * nothing (ACCEL_EDEVLOST) and its unload only frees its record. close frees the records its
 * users left.
 *
 * Parameters: CUDA knows each parameter's size (cuFuncGetParamInfo, drivers from 12.4) but not
 * whether it is a pointer or a 64-bit integer, so every parameter is BE_PARAM_UNKNOWN; a
 * launch's arguments must match in number and size where the sizes are known.
 *
 * Shared memory: a kernel gets 48 KiB of shared memory per block unless it opts in to more;
 * limits() offers the device's opt-in maximum, and the first launch that asks for more
 * dynamic shared memory than the kernel was opened to raises its limit
 * (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES). A kernel's static shared memory counts
 * against the same maximum: a launch past it is ACCEL_EINVAL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "backends/cuda/nvrtc_lib.h"
#include "runtime/alloc.h"

/* Bytes of the JIT's error and information logs kept (each). */
#define JIT_LOG 16384
/* More parameters than fit in a kernel's 32764 bytes of them: the count stops here. */
#define PARAMS_CAP 32768u

struct be_kernel {
  be_kernel *next; /* the module's list */
  be_module *mod;
  CUfunction fn;
  be_kernel_info info;
  atomic_uint shared; /* dynamic shared bytes the function is opened to (raised under lock) */
  char name[];
};

struct be_module {
  rt_list link; /* first: the device's list points here */
  be_device *dev;
  unsigned gen;
  CUmodule cu; /* under dev->lock; NULL once its incarnation is gone */
  pthread_mutex_t lock;
  be_kernel *kernels;
};

/* ---- limits and sources --------------------------------------------------------------- */

static uint32_t attr(be_device *dev, CUdevice_attribute a) {
  int v = 0;
  return be_cu.cuDeviceGetAttribute(&v, a, dev->cu) == CUDA_SUCCESS && v > 0 ? (uint32_t)v : 0;
}

void be_cuda_limits_read(be_device *dev) {
  be_launch_limits *l = &dev->limits;
  l->max_block[0] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  l->max_block[1] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  l->max_block[2] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  l->max_threads_per_block = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  l->max_grid[0] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  l->max_grid[1] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  l->max_grid[2] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  l->max_shared_bytes = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  if (l->max_shared_bytes == 0) /* a driver that does not say: the default */
    l->max_shared_bytes = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
}

static void cuda_limits(be_device *dev, be_launch_limits *out) {
  if (dev != NULL && out != NULL)
    *out = dev->limits;
}

/* NVRTC was looked for when the device opened (backend_cuda.c): this never blocks. */
static uint32_t cuda_sources(be_device *dev) {
  (void)dev;
  return (be_nvrtc() != NULL ? 1u << ACCEL_SOURCE_CUDA : 0) | 1u << ACCEL_SOURCE_PTX;
}

/* ---- load ----------------------------------------------------------------------------- */

static bool blank(const char *s) {
  char *copy = s != NULL ? rt_strdup(s) : NULL;
  be_cuda_log_finish(&copy);
  bool none = copy == NULL;
  rt_free(copy);
  return none;
}

/* The PTX as the driver wants it: ending in a NUL. */
static int ptx_image(const void *code, size_t len, const char *options, be_cuda_image *img,
                     char **log) {
  if (!blank(options)) {
    be_cuda_log_append(log, "accel: PTX takes no options (the driver compiles it as it is)");
    return ACCEL_EBUILD;
  }
  char *p = rt_malloc(len + 1);
  if (p == NULL)
    return ACCEL_ENOMEM;
  if (len > 0)
    memcpy(p, code, len);
  p[len] = '\0';
  *img = (be_cuda_image){p, len};
  return 0;
}

static CUresult jit_load(CUmodule *cu, const void *image, char *err, char *info) {
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {err, (void *)(uintptr_t)(JIT_LOG - 1), info, (void *)(uintptr_t)(JIT_LOG - 1)};
  return be_cu.cuModuleLoadDataEx(cu, image, 4, opts, vals);
}

/* An image the driver refused is a build error (its log says why), unless the device broke
 * (the fault path) or ran out of memory. */
static int load_error(be_device *dev, CUresult r, char **log) {
  if (be_cuda_sticky(r))
    return be_cuda_check(dev, r);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    return ACCEL_ENOMEM;
  char line[96];
  snprintf(line, sizeof line, "accel: the driver did not load the module: %s", be_cuda_err_name(r));
  be_cuda_log_append(log, line);
  return ACCEL_EBUILD;
}

static int driver_load(be_device *dev, const be_cuda_image *img, CUmodule *cu, char **log) {
  char *err = rt_calloc(2, JIT_LOG);
  if (err == NULL)
    return ACCEL_ENOMEM;
  char *info = err + JIT_LOG;
  int rc = be_cuda_enter(dev);
  CUresult r = rc == 0 ? jit_load(cu, img->data, err, info) : CUDA_SUCCESS;
  be_cuda_log_append(log, info);
  be_cuda_log_append(log, err);
  rt_free(err);
  if (rc == 0 && r != CUDA_SUCCESS)
    rc = load_error(dev, r, log);
  return rc;
}

static int module_new(be_device *dev, CUmodule cu, be_module **out) {
  be_module *m = rt_calloc(1, sizeof *m);
  if (m == NULL)
    return ACCEL_ENOMEM;
  m->dev = dev;
  m->cu = cu;
  rt_list_init(&m->link);
  pthread_mutex_init(&m->lock, NULL);
  pthread_mutex_lock(&dev->lock);
  m->gen = atomic_load(&dev->gen);
  rt_list_push_front(&dev->modules, &m->link);
  pthread_mutex_unlock(&dev->lock);
  *out = m;
  return 0;
}

static int image_for(be_device *dev, const be_compiler *c, uint32_t source, const void *code,
                     size_t len, const char *options, be_cuda_image *img, char **log) {
  if (source == ACCEL_SOURCE_PTX)
    return ptx_image(code, len, options, img, log);
  if (source == ACCEL_SOURCE_CUDA)
    return be_cuda_build(dev, c, code, len, options, img, log);
  return ACCEL_ENOTSUP;
}

static int cuda_load_with(be_device *dev, uint32_t source, const void *code, size_t len,
                          const char *options, const be_compiler *c, be_module **out, char **log) {
  char *text = NULL;
  if (log != NULL)
    *log = NULL;
  if (dev == NULL || out == NULL || (code == NULL && len > 0))
    return ACCEL_EINVAL;
  if (be_cuda_lost(dev) || dev->ctx == NULL)
    return ACCEL_EDEVLOST;
  be_cuda_image img = {0};
  CUmodule cu = NULL;
  int rc = image_for(dev, c, source, code, len, options, &img, &text);
  if (rc == 0)
    rc = driver_load(dev, &img, &cu, &text);
  if (rc == 0 && (rc = module_new(dev, cu, out)) != 0)
    be_cu.cuModuleUnload(cu);
  rt_free(img.data);
  be_cuda_log_finish(&text);
  if (log != NULL)
    *log = text;
  else
    rt_free(text);
  return rc;
}

static int cuda_load(be_device *dev, uint32_t source, const void *code, size_t len,
                     const char *options, be_module **out, char **log) {
  return cuda_load_with(dev, source, code, len, options, NULL, out, log);
}

/* ---- unload and teardown ---------------------------------------------------------------- */

static void module_free(be_module *m) {
  while (m->kernels != NULL) {
    be_kernel *k = m->kernels;
    m->kernels = k->next;
    rt_free(k);
  }
  pthread_mutex_destroy(&m->lock);
  rt_free(m);
}

/* A lost device's modules stay: its context is destroyed or reset, and they with it (the
 * driver might wait for work that never ends first). */
static void cuda_unload(be_module *m) {
  if (m == NULL)
    return;
  be_device *dev = m->dev;
  pthread_mutex_lock(&dev->lock);
  rt_list_remove(&m->link);
  CUmodule cu = m->cu;
  m->cu = NULL;
  pthread_mutex_unlock(&dev->lock);
  if (cu != NULL && !be_cuda_lost(dev) && be_cuda_enter(dev) == 0)
    be_cu.cuModuleUnload(cu);
  module_free(m);
}

/* The CUmodule of a module of the incarnation, taken from it (under dev->lock). */
static CUmodule take_live(be_device *dev) {
  for (rt_list *l = dev->modules.next; l != &dev->modules; l = l->next) {
    be_module *m = (be_module *)l;
    if (m->cu != NULL) {
      CUmodule cu = m->cu;
      m->cu = NULL;
      return cu;
    }
  }
  return NULL;
}

void be_cuda_modules_dissolve(be_device *dev, bool lost) {
  for (;;) {
    pthread_mutex_lock(&dev->lock);
    CUmodule cu = take_live(dev);
    pthread_mutex_unlock(&dev->lock);
    if (cu == NULL)
      return;
    if (!lost)
      be_cu.cuModuleUnload(cu);
  }
}

void be_cuda_modules_free_all(be_device *dev) {
  pthread_mutex_lock(&dev->lock);
  while (!rt_list_empty(&dev->modules)) {
    be_module *m = (be_module *)dev->modules.next;
    rt_list_remove(&m->link);
    module_free(m);
  }
  pthread_mutex_unlock(&dev->lock);
}

/* ---- kernels -------------------------------------------------------------------------- */

/* The parameters' sizes, as far as the driver says (the count stops at the first index it
 * refuses). */
static void param_info(CUfunction fn, be_kernel_info *info) {
  memset(info, 0, sizeof *info);
  info->nparams = UINT32_MAX;
  if (be_cu.cuFuncGetParamInfo == NULL)
    return;
  uint32_t n = 0;
  for (; n < PARAMS_CAP; n++) {
    size_t offset = 0, size = 0;
    CUresult r = be_cu.cuFuncGetParamInfo(fn, n, &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE)
      break;
    if (r != CUDA_SUCCESS)
      return; /* the driver cannot tell after all */
    if (n < BE_LAUNCH_MAX_ARGS)
      info->params[n] = (struct be_param){.kind = BE_PARAM_UNKNOWN, .size = (uint32_t)size};
  }
  info->nparams = n;
}

static be_kernel *kernel_find(be_module *m, const char *name) {
  for (be_kernel *k = m->kernels; k != NULL; k = k->next)
    if (strcmp(k->name, name) == 0)
      return k;
  return NULL;
}

/* The CUfunction of that name in a module of the live incarnation. */
static int function_get(be_module *m, const char *name, CUfunction *fn) {
  be_device *dev = m->dev;
  pthread_mutex_lock(&dev->lock);
  CUmodule cu = m->gen == atomic_load(&dev->gen) ? m->cu : NULL;
  pthread_mutex_unlock(&dev->lock);
  if (cu == NULL)
    return ACCEL_EDEVLOST;
  int rc = be_cuda_enter(dev);
  if (rc != 0)
    return rc;
  CUresult r = be_cu.cuModuleGetFunction(fn, cu, name);
  return r == CUDA_ERROR_NOT_FOUND ? ACCEL_ENOENT : be_cuda_check(dev, r);
}

static int kernel_new(be_module *m, const char *name, size_t len, be_kernel **out) {
  CUfunction fn = NULL;
  int rc = function_get(m, name, &fn);
  if (rc != 0)
    return rc;
  be_kernel *k = rt_calloc(1, sizeof *k + len + 1);
  if (k == NULL)
    return ACCEL_ENOMEM;
  k->mod = m;
  k->fn = fn;
  memcpy(k->name, name, len + 1);
  param_info(fn, &k->info);
  atomic_init(&k->shared, 0);
  k->next = m->kernels;
  m->kernels = k;
  *out = k;
  return 0;
}

static int cuda_kernel(be_module *m, const char *name, be_kernel **out, be_kernel_info *info) {
  if (m == NULL || name == NULL || out == NULL)
    return ACCEL_EINVAL;
  size_t len = strnlen(name, BE_KERNEL_NAME_MAX + 1);
  if (len == 0 || len > BE_KERNEL_NAME_MAX)
    return ACCEL_ENOENT;
  be_kernel *k = kernel_find(m, name);
  int rc = k != NULL ? 0 : kernel_new(m, name, len, &k);
  if (rc != 0)
    return rc;
  *out = k;
  if (info != NULL)
    *info = k->info;
  return 0;
}

/* ---- launch --------------------------------------------------------------------------- */

/* One argument's bytes, as cuLaunchKernel reads them through kernelParams. */
typedef union arg_slot {
  CUdeviceptr ptr;
  uint64_t bits;
} arg_slot;

static int geometry_ok(const be_launch_limits *lim, const be_launch *l) {
  uint64_t threads = 1;
  for (int i = 0; i < 3; i++) {
    if (l->grid[i] == 0 || l->grid[i] > lim->max_grid[i] || l->block[i] == 0 ||
        l->block[i] > lim->max_block[i])
      return ACCEL_EINVAL;
    threads *= l->block[i];
  }
  return threads <= lim->max_threads_per_block && l->shared_bytes <= lim->max_shared_bytes
             ? 0
             : ACCEL_EINVAL;
}

static int pack_arg(const be_kernel_arg *a, arg_slot *slot, uint32_t *size) {
  if (a->kind == BE_PARAM_BUFFER) {
    *size = sizeof(CUdeviceptr);
    return be_cuda_span(a->mem, a->offset, 0, 1, &slot->ptr);
  }
  if (a->kind != BE_PARAM_SCALAR) /* LOCAL: CUDA has dynamic shared memory instead */
    return ACCEL_EINVAL;
  if (a->size != 1 && a->size != 2 && a->size != 4 && a->size != 8)
    return ACCEL_EINVAL;
  *size = a->size;
  slot->bits = a->size == 8 ? a->bits : a->bits & ((1ull << (8 * a->size)) - 1);
  return 0;
}

static int pack_args(const be_kernel *k, const be_launch *l, arg_slot *slots, void **params) {
  const be_kernel_info *info = &k->info;
  bool known = info->nparams != UINT32_MAX;
  if (l->nargs > BE_LAUNCH_MAX_ARGS || (l->nargs > 0 && l->args == NULL) ||
      (known && l->nargs != info->nparams))
    return ACCEL_EINVAL;
  for (uint32_t i = 0; i < l->nargs; i++) {
    uint32_t size = 0;
    int rc = pack_arg(&l->args[i], &slots[i], &size);
    if (rc != 0)
      return rc;
    if (known && info->params[i].size != size)
      return ACCEL_EINVAL;
    params[i] = &slots[i];
  }
  return 0;
}

/* Raises the kernel's dynamic shared memory limit to `bytes` unless it is there already. */
static int shared_open(be_kernel *k, uint32_t bytes) {
  if (bytes <= atomic_load(&k->shared))
    return 0;
  be_module *m = k->mod;
  int rc = 0;
  pthread_mutex_lock(&m->lock);
  if (bytes > atomic_load(&k->shared)) {
    rc = be_cuda_check(
        m->dev, be_cu.cuFuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         (int)bytes));
    if (rc == 0)
      atomic_store(&k->shared, bytes);
  }
  pthread_mutex_unlock(&m->lock);
  return rc;
}

static int cuda_launch(be_queue *q, be_kernel *k, const be_launch *l) {
  if (q == NULL || k == NULL || l == NULL || k->mod->dev != q->dev)
    return ACCEL_EINVAL;
  be_device *dev = q->dev;
  arg_slot slots[BE_LAUNCH_MAX_ARGS];
  void *params[BE_LAUNCH_MAX_ARGS];
  int rc = geometry_ok(&dev->limits, l);
  if (rc == 0)
    rc = pack_args(k, l, slots, params);
  if (rc == 0)
    rc = be_cuda_queue_ok(q);
  if (rc == 0 && k->mod->gen != q->gen)
    rc = ACCEL_EDEVLOST;
  if (rc == 0)
    rc = be_cuda_enter(dev);
  if (rc == 0)
    rc = shared_open(k, l->shared_bytes);
  if (rc != 0)
    return rc;
  return be_cuda_check(dev,
                       be_cu.cuLaunchKernel(k->fn, l->grid[0], l->grid[1], l->grid[2], l->block[0],
                                            l->block[1], l->block[2], l->shared_bytes, q->stream,
                                            l->nargs > 0 ? params : NULL, NULL));
}

const be_module_pkg be_cuda_module = {
    .version = BE_MODULE_VERSION,
    .sources = cuda_sources,
    .limits = cuda_limits,
    .load = cuda_load,
    .unload = cuda_unload,
    .kernel = cuda_kernel,
    .launch = cuda_launch,
    .load_with = cuda_load_with,
    .compile = be_cuda_compile,
};
