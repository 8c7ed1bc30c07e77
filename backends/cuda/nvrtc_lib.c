/* Loading NVRTC at run time (nvrtc_lib.h). */
#include "backends/cuda/nvrtc_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "backends/cuda/driver.h"

/* The toolkit this backend is built against ships libnvrtc.so.13; 12's takes the same calls.
 * The absolute path catches a toolkit not on the loader's path. */
static const char *const nvrtc_names[] = {
    "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13", NULL,
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static be_nvrtc_api api;
static const be_nvrtc_api *loaded;

static int resolve(void *lib) {
#define BE_NVRTC_RESOLVE_(fn)                                                                      \
  *(void **)(void *)&api.fn = dlsym(lib, #fn);                                                     \
  if (api.fn == NULL)                                                                              \
    return -1;
  BE_NVRTC_FUNCS(BE_NVRTC_RESOLVE_)
#undef BE_NVRTC_RESOLVE_
#define BE_NVRTC_OPTIONAL_(fn) *(void **)(void *)&api.fn = dlsym(lib, #fn);
  BE_NVRTC_OPTIONAL_FUNCS(BE_NVRTC_OPTIONAL_)
#undef BE_NVRTC_OPTIONAL_
  return api.nvrtcVersion(&api.major, &api.minor) == NVRTC_SUCCESS ? 0 : -1;
}

static void load(void) {
  void *lib = be_cuda_dlopen_first("ACCEL_NVRTC", nvrtc_names);
  if (lib == NULL)
    return;
  if (resolve(lib) == 0)
    loaded = &api;
  else
    dlclose(lib);
}

const be_nvrtc_api *be_nvrtc(void) {
  pthread_once(&once, load);
  return loaded;
}
