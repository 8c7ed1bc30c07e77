/* Loading cuBLAS at run time (cublas_lib.h). */
#include "backends/cuda/cublas_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "accel/error.h"
#include "backends/cuda/driver.h"

/* The toolkit this backend is built against ships libcublas.so.13; older ones still answer
 * the same C entry points. The absolute path catches a toolkit not on the loader's path. */
static const char *const cublas_names[] = {
    "libcublas.so.13",
    "libcublas.so.12",
    "libcublas.so",
    "/usr/local/cuda/lib64/libcublas.so.13",
    NULL,
};

static const char *const cublaslt_names[] = {
    "libcublasLt.so.13",
    "libcublasLt.so.12",
    "libcublasLt.so",
    "/usr/local/cuda/lib64/libcublasLt.so.13",
    NULL,
};

static pthread_once_t once = PTHREAD_ONCE_INIT, lt_once = PTHREAD_ONCE_INIT;
static be_cublas_api api;
static const be_cublas_api *loaded;
static be_cublaslt_api lt_api;
static const be_cublaslt_api *lt_loaded;

#define BE_CUBLAS_RESOLVE_(fn)                                                                     \
  *(void **)(void *)&t->fn = dlsym(lib, #fn);                                                      \
  if (t->fn == NULL)                                                                               \
    return -1;

static int resolve(void *lib) {
  be_cublas_api *t = &api;
  BE_CUBLAS_FUNCS(BE_CUBLAS_RESOLVE_)
  return 0;
}

static int resolve_lt(void *lib) {
  be_cublaslt_api *t = &lt_api;
  BE_CUBLASLT_FUNCS(BE_CUBLAS_RESOLVE_)
  return 0;
}
#undef BE_CUBLAS_RESOLVE_

/* The first library of `names` (env may name another) whose symbols `resolve` finds: true;
 * else nothing stays open. */
static bool load_lib(const char *env, const char *const *names, int (*resolve_fn)(void *)) {
  void *lib = be_cuda_dlopen_first(env, names);
  if (lib == NULL)
    return false;
  if (resolve_fn(lib) == 0)
    return true;
  dlclose(lib);
  return false;
}

static void load(void) {
  if (load_lib("ACCEL_CUDA_CUBLAS", cublas_names, resolve))
    loaded = &api;
}

const be_cublas_api *be_cublas(void) {
  pthread_once(&once, load);
  return loaded;
}

static void load_lt(void) {
  if (load_lib("ACCEL_CUDA_CUBLASLT", cublaslt_names, resolve_lt))
    lt_loaded = &lt_api;
}

const be_cublaslt_api *be_cublaslt(void) {
  pthread_once(&lt_once, load_lt);
  return lt_loaded;
}

int be_cublas_err(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS:
    return 0;
  case CUBLAS_STATUS_ALLOC_FAILED:
    return ACCEL_ENOMEM;
  case CUBLAS_STATUS_INVALID_VALUE:
    return ACCEL_EINVAL;
  case CUBLAS_STATUS_NOT_SUPPORTED:
  case CUBLAS_STATUS_ARCH_MISMATCH:
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return ACCEL_ENOTSUP;
  default:
    return ACCEL_EIO;
  }
}
