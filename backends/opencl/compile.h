/* User code compiled for an OpenCL device outside the daemon (compile.c): the helper's side of
 * the module package's compile step (be_module_pkg.compile, backend.h). */
#ifndef BE_OPENCL_COMPILE_H
#define BE_OPENCL_COMPILE_H

#include "backends/opencl/device.h"

typedef cl_program (*be_ocl_il_fn)(cl_context, const void *, size_t, cl_int *);

/* clCreateProgramWithIL (OpenCL 2.1, in the ICD loader) or the KHR extension's, for a device
 * of `platform`; NULL if neither is there. */
be_ocl_il_fn be_ocl_il_creator(cl_platform_id platform);

/* The build log of p on dev (malloc'd), NULL if the compiler said nothing but blanks. */
char *be_ocl_build_log(cl_device_id dev, cl_program p);

/* The target text of dev for be_ocl_compile: its platform's name and its own, a line each. */
void be_ocl_target(be_device *dev, char *buf, size_t len);

/* be_module_pkg.compile: builds code for the device `target` names, in a context of its own,
 * and returns the program's binary (CL_PROGRAM_BINARIES). Its options are the full build
 * options (load_with added -cl-kernel-arg-info). */
int be_ocl_compile(const char *target, uint32_t source, const void *code, size_t len,
                   const char *options, void **image, size_t *image_len, char **log);

#endif
