/* The backends this build knows (backend.h): every description is compiled, an implementation
 * only when its backend is built, so `devices` can say "cuda: not built". A backend's meson
 * code defines BE_HAVE_<NAME> when it builds one. */
#include "backends/backend.h"
#include "backends/cpu/backend_cpu.h"

#ifdef BE_HAVE_CUDA
extern const be_ops be_cuda_ops;
#define BE_CUDA_OPS (&be_cuda_ops)
#else
#define BE_CUDA_OPS NULL
#endif

#ifdef BE_HAVE_OPENCL
extern const be_ops be_opencl_ops;
#define BE_OPENCL_OPS (&be_opencl_ops)
#else
#define BE_OPENCL_OPS NULL
#endif

static const be_entry be_entries[] = {
    {"cpu", &be_cpu_ops},
    {"cuda", BE_CUDA_OPS},
    {"opencl", BE_OPENCL_OPS},
    {NULL, NULL},
};

const be_entry *be_registry(void) {
  return be_entries;
}
