/* The fixture of the cuda backend's own tests: device 0 opened with one queue. */
#ifndef ACCEL_TESTS_CUDA_FX_H
#define ACCEL_TESTS_CUDA_FX_H

#include "backends/backend.h"
#include "backends/cuda/backend_cuda.h"
#include "cuda_test.h"

typedef struct fx {
  be_device *d;
  be_queue *q;
} fx;

static inline fx fx_open_with(int fault_injection) {
  be_open_opts o = {.fault_injection = fault_injection};
  fx f = {0};
  CHECK_OK(be_cuda_ops.open(0, &o, &f.d));
  CHECK_OK(be_cuda_ops.queue_create(f.d, &f.q));
  return f;
}

static inline void fx_close(fx *f) {
  be_cuda_ops.queue_destroy(f->q);
  be_cuda_ops.close(f->d);
}

#endif
