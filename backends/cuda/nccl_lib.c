/* Loading NCCL at run time (nccl_lib.h). */
#include "backends/cuda/nccl_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "accel/error.h"
#include "backends/cuda/driver.h"

static const char *const nccl_names[] = {"libnccl.so.2", "libnccl.so", NULL};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static be_nccl_api api;
static const be_nccl_api *loaded;
static char why[160];

/* A name missing from lib: the load fails (an NCCL older than 2.4). */
static const char *resolve(void *lib) {
#define BE_NCCL_SYM_(fn)                                                                           \
  *(void **)(void *)&api.fn = dlsym(lib, #fn);                                                     \
  if (api.fn == NULL)                                                                              \
    return #fn;
  BE_NCCL_SYM_(ncclGetVersion)
  BE_NCCL_SYM_(ncclGetErrorString)
  BE_NCCL_SYM_(ncclGetUniqueId)
  BE_NCCL_SYM_(ncclCommInitRank)
  BE_NCCL_SYM_(ncclCommDestroy)
  BE_NCCL_SYM_(ncclCommAbort)
  BE_NCCL_SYM_(ncclGroupStart)
  BE_NCCL_SYM_(ncclGroupEnd)
  BE_NCCL_SYM_(ncclAllReduce)
  BE_NCCL_SYM_(ncclBroadcast)
  BE_NCCL_SYM_(ncclAllGather)
#undef BE_NCCL_SYM_
  *(void **)(void *)&api.ncclCommFinalize = dlsym(lib, "ncclCommFinalize");
  if (api.ncclGetVersion(&api.version) != ncclSuccess)
    return "ncclGetVersion's answer";
  return NULL;
}

static void load(void) {
  /* Before NCCL can read its environment (it does at its first communicator). */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const char *env = getenv("ACCEL_NCCL_LIBRARY");
  void *lib = be_cuda_dlopen_first("ACCEL_NCCL_LIBRARY", nccl_names);
  const char *missing = NULL;
  if (lib == NULL) {
    snprintf(why, sizeof why, "%s not found", env != NULL && *env != '\0' ? env : "libnccl.so.2");
  } else if ((missing = resolve(lib)) != NULL) {
    snprintf(why, sizeof why, "NCCL too old: no %s", missing);
    dlclose(lib);
  } else {
    loaded = &api;
    return;
  }
  fprintf(stderr, "accel-cuda: collectives not supported: %s\n", why);
}

const be_nccl_api *be_nccl(void) {
  pthread_once(&once, load);
  return loaded;
}

const char *be_nccl_why(void) {
  pthread_once(&once, load);
  return why;
}

int be_nccl_err(ncclResult_t r) {
  switch (r) {
  case ncclSuccess:
    return 0;
  case ncclInvalidArgument:
  case ncclInvalidUsage:
    return ACCEL_EINVAL;
  case ncclInProgress:
    return ACCEL_EAGAIN;
  default:
    return ACCEL_EIO;
  }
}
