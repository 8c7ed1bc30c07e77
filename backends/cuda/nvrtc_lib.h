/* NVRTC (CUDA C++ to PTX or CUBIN at run time), loaded at run time like the driver (driver.h):
 * nothing links it. The first call dlopen()s libnvrtc.so.13, .12, then libnvrtc.so (the
 * environment variable ACCEL_NVRTC names another file instead, for tests) and looks its entry
 * points up by name. Without it CUDA C sources are ACCEL_ENOTSUP and PTX still loads.
 * nvrtc.h is read for its types only. */
#ifndef BE_CUDA_NVRTC_LIB_H
#define BE_CUDA_NVRTC_LIB_H

#include <nvrtc.h>
#include <stddef.h>

/* clang-format off */
#define BE_NVRTC_FUNCS(X)                                                                  \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)     \
  X(nvrtcCompileProgram) X(nvrtcGetPTXSize) X(nvrtcGetPTX) X(nvrtcGetProgramLogSize)        \
  X(nvrtcGetProgramLog)
/* clang-format on */

/* Entries of newer NVRTCs that the backend does without (NULL when missing): CUBIN output
 * (11.1; else PTX, which the driver compiles) and the list of architectures (11.2; else the
 * device's own is asked for). */
#define BE_NVRTC_OPTIONAL_FUNCS(X)                                                                 \
  X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetNumSupportedArchs) X(nvrtcGetSupportedArchs)

#define BE_NVRTC_FIELD_(fn) __typeof__(&fn) fn;

typedef struct be_nvrtc_api {
  BE_NVRTC_FUNCS(BE_NVRTC_FIELD_)
  BE_NVRTC_OPTIONAL_FUNCS(BE_NVRTC_FIELD_)
  int major, minor; /* nvrtcVersion() */
} be_nvrtc_api;

/* The loaded table, or NULL if NVRTC is missing (loaded once per process, thread-safe; the
 * first call may take milliseconds: the cuda backend makes it when it opens a device). */
const be_nvrtc_api *be_nvrtc(void);

#endif
