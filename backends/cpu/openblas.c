/* Binding the cpu backend to OpenBLAS's own functions (openblas.h). */
#include "backends/cpu/openblas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static be_openblas_api api;
static const be_openblas_api *loaded;
static char error[256];

/* dlsym(lib, name), kept only if it lies in the file at `base`: a handle's lookup goes on into
 * the file's dependencies, and those are not OpenBLAS. */
static void *own_sym(void *lib, const void *base, const char *name) {
  Dl_info info;
  void *p = dlsym(lib, name);
  return p != NULL && dladdr(p, &info) != 0 && info.dli_fbase == base ? p : NULL;
}

static int resolve(void *lib, const void *base) {
#define BE_OPENBLAS_RESOLVE_(fn)                                                                   \
  *(void **)(void *)&api.fn = own_sym(lib, base, #fn);                                             \
  if (api.fn == NULL) {                                                                            \
    snprintf(error, sizeof error, "OpenBLAS has no " #fn);                                         \
    return -1;                                                                                     \
  }
  BE_OPENBLAS_FUNCS(BE_OPENBLAS_RESOLVE_)
#undef BE_OPENBLAS_RESOLVE_
  *(void **)(void *)&api.cblas_sbgemm = own_sym(lib, base, "cblas_sbgemm");
  return 0;
}

/* OpenBLAS's file: the one holding openblas_get_config, a name no other BLAS exports, so the
 * global lookup that found it cannot have found another library's. The kernels are built as
 * PIC, so the address is the function's own, not a PLT stub in the executable. */
static void *open_openblas(Dl_info *info) {
  char *(*probe)(void) = openblas_get_config;
  if (dladdr(*(void **)(void *)&probe, info) == 0 || info->dli_fname == NULL) {
    snprintf(error, sizeof error, "no file holds openblas_get_config");
    return NULL;
  }
  /* Never closed: OpenBLAS is linked in and stays for the process's life anyway. NOLOAD
   * matches the name the file was loaded under; the plain open finds the same mapped file
   * by its inode when the name differs. */
  void *lib = dlopen(info->dli_fname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == NULL)
    lib = dlopen(info->dli_fname, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL)
    snprintf(error, sizeof error, "dlopen of OpenBLAS's file: %s", dlerror());
  return lib;
}

static void load(void) {
  Dl_info info;
  void *lib = open_openblas(&info);
  if (lib != NULL && resolve(lib, info.dli_fbase) == 0) {
    loaded = &api;
    return;
  }
  fprintf(stderr,
          "accel-cpu: cannot bind OpenBLAS's own functions (%s); BLAS ops answer "
          "ACCEL_ENOTSUP\n",
          error);
}

const be_openblas_api *be_openblas(void) {
  pthread_once(&once, load);
  return loaded;
}

const char *be_openblas_error(void) {
  pthread_once(&once, load);
  return error;
}
