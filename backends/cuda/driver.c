/* Loading the CUDA driver at run time (driver.h). */
#include "backends/cuda/driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/error.h"

#define BE_CU_STR_(x) #x
#define BE_CU_STR(x) BE_CU_STR_(x) /* expands cuda.h's version macros first */

be_cu_api be_cu;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_why[128];

/* why = prefix + arg (either may be empty). */
static void say(char *why, size_t len, const char *prefix, const char *arg) {
  if (why != NULL && len > 0)
    snprintf(why, len, "%s%s", prefix, arg);
}

/* Every symbol of BE_CU_FUNCS from lib into api; the first missing one fails the load (a
 * driver older than the toolkit this was built with). Those of BE_CU_OPTIONAL_FUNCS stay NULL
 * when missing. */
static int resolve(void *lib, be_cu_api *api, char *why, size_t len) {
#define BE_CU_RESOLVE_(fn)                                                                         \
  *(void **)(void *)&api->fn = dlsym(lib, BE_CU_STR(fn));                                          \
  if (api->fn == NULL) {                                                                           \
    say(why, len, "driver too old: no ", BE_CU_STR(fn));                                           \
    return ACCEL_ENOTSUP;                                                                          \
  }
  BE_CU_FUNCS(BE_CU_RESOLVE_)
#undef BE_CU_RESOLVE_
#define BE_CU_OPTIONAL_(fn) *(void **)(void *)&api->fn = dlsym(lib, BE_CU_STR(fn));
  BE_CU_OPTIONAL_FUNCS(BE_CU_OPTIONAL_)
#undef BE_CU_OPTIONAL_
  return 0;
}

/* The name of r from the table being loaded (be_cu is not published yet). */
static const char *name_in(const be_cu_api *api, CUresult r) {
  static _Thread_local char buf[32];
  const char *name = NULL;
  if (api->cuGetErrorName(r, &name) == CUDA_SUCCESS && name != NULL)
    return name;
  snprintf(buf, sizeof buf, "CUDA error %d", (int)r);
  return buf;
}

/* cuInit's answer in words: no device, a stub or mismatched driver, or the error's name. */
static int init_driver(const be_cu_api *api, char *why, size_t len) {
  CUresult r = api->cuInit(0);
  if (r == CUDA_SUCCESS)
    return 0;
  if (r == CUDA_ERROR_NO_DEVICE)
    say(why, len, "no device", "");
  else if (r == CUDA_ERROR_STUB_LIBRARY || r == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH ||
           r == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)
    say(why, len, "no driver: ", name_in(api, r));
  else
    say(why, len, "driver: ", name_in(api, r));
  return ACCEL_ENOTSUP;
}

static int open_into(const char *path, be_cu_api *api, void **lib, char *why, size_t len) {
  *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (*lib == NULL) {
    say(why, len, "no driver", "");
    return ACCEL_ENOTSUP;
  }
  int rc = resolve(*lib, api, why, len);
  if (rc == 0)
    rc = init_driver(api, why, len);
  return rc;
}

static void load(void) {
  const char *path = getenv("ACCEL_CUDA_DRIVER");
  void *lib = NULL;
  be_cu_api api;
  memset(&api, 0, sizeof api);
  load_rc = open_into(path != NULL && *path != '\0' ? path : "libcuda.so.1", &api, &lib, load_why,
                      sizeof load_why);
  if (load_rc == 0)
    be_cu = api; /* published by pthread_once; the library stays loaded for good */
  else if (lib != NULL)
    dlclose(lib);
}

int be_cuda_driver_load(char *why, size_t why_len) {
  pthread_once(&load_once, load);
  if (load_rc != 0)
    say(why, why_len, "", load_why);
  else if (why != NULL && why_len > 0)
    why[0] = '\0';
  return load_rc;
}

int be_cuda_driver_try(const char *path, char *why, size_t why_len) {
  be_cu_api api;
  void *lib = NULL;
  memset(&api, 0, sizeof api);
  int rc = open_into(path, &api, &lib, why, why_len);
  if (lib != NULL)
    dlclose(lib);
  return rc;
}

bool be_cuda_sticky(CUresult r) {
  switch (r) {
  case CUDA_ERROR_ECC_UNCORRECTABLE:
  case CUDA_ERROR_NVLINK_UNCORRECTABLE:
  case CUDA_ERROR_ILLEGAL_ADDRESS:
  case CUDA_ERROR_LAUNCH_TIMEOUT:
  case CUDA_ERROR_CONTEXT_IS_DESTROYED:
  case CUDA_ERROR_ASSERT:
  case CUDA_ERROR_HARDWARE_STACK_ERROR:
  case CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case CUDA_ERROR_MISALIGNED_ADDRESS:
  case CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case CUDA_ERROR_INVALID_PC:
  case CUDA_ERROR_LAUNCH_FAILED:
  case CUDA_ERROR_EXTERNAL_DEVICE:
  case CUDA_ERROR_DEVICE_UNAVAILABLE:
  case CUDA_ERROR_CONTAINED:
  case CUDA_ERROR_UNKNOWN:
    return true;
  default:
    return false;
  }
}

int be_cuda_err(CUresult r) {
  if (be_cuda_sticky(r))
    return ACCEL_EDEVLOST;
  switch (r) {
  case CUDA_SUCCESS:
    return 0;
  case CUDA_ERROR_NOT_READY:
    return ACCEL_EAGAIN;
  case CUDA_ERROR_OUT_OF_MEMORY:
    return ACCEL_ENOMEM;
  case CUDA_ERROR_INVALID_VALUE:
  case CUDA_ERROR_INVALID_HANDLE:
    return ACCEL_EINVAL;
  case CUDA_ERROR_NO_DEVICE:
  case CUDA_ERROR_NOT_INITIALIZED:
  case CUDA_ERROR_DEINITIALIZED:
  case CUDA_ERROR_STUB_LIBRARY:
  case CUDA_ERROR_NOT_SUPPORTED:
  case CUDA_ERROR_NO_BINARY_FOR_GPU:
    return ACCEL_ENOTSUP;
  default:
    return ACCEL_EIO;
  }
}

const char *be_cuda_err_name(CUresult r) {
  static _Thread_local char buf[32];
  const char *name = NULL;
  if (be_cu.cuGetErrorName != NULL && be_cu.cuGetErrorName(r, &name) == CUDA_SUCCESS &&
      name != NULL)
    return name;
  snprintf(buf, sizeof buf, "CUDA_ERROR_%d", (int)r);
  return buf;
}

bool be_cuda_tracing(void) {
  static atomic_int on = -1;
  if (atomic_load(&on) < 0) {
    const char *v = getenv("ACCEL_CUDA_TRACE");
    atomic_store(&on, v != NULL && strcmp(v, "1") == 0);
  }
  return atomic_load(&on) > 0;
}

CUresult be_cuda_trace(const char *what, CUresult r) {
  if (be_cuda_tracing())
    fprintf(stderr, "accel-cuda: %s: %s\n", what, be_cuda_err_name(r));
  return r;
}

void *be_cuda_dlopen_first(const char *env, const char *const *names) {
  const char *path = getenv(env);
  if (path != NULL && *path != '\0')
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
  for (const char *const *n = names; *n != NULL; n++) {
    void *lib = dlopen(*n, RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL)
      return lib;
  }
  return NULL;
}
