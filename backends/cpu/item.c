/* Runs one copy or kernel item of a cpu queue on its worker thread: the kernels of
 * cpu_kernels.h on the addresses the submitter checked (ops.c). */
#include "accel/error.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/queue.h"

static int run_rng(void *dst, size_t count, const be_rng_args *r)
{
  switch (r->dist) {
  case BE_RNG_BITS:
    return be_cpu_philox_fill_u32(dst, count, r->seed, r->offset);
  case BE_RNG_UNIFORM:
    return be_cpu_philox_fill_uniform(dst, count, r->seed, r->offset);
  case BE_RNG_NORMAL:
    return be_cpu_philox_fill_normal(dst, count, r->seed, r->offset, (float)r->mean,
                                     (float)r->stddev);
  }
  return ACCEL_EINVAL;
}

static int run_unary(be_unary_op op, float *dst, const float *src, size_t count)
{
  switch (op) {
  case BE_SIGMOID:
    return be_cpu_sigmoid_f32(dst, src, count);
  case BE_RELU:
    return be_cpu_relu_f32(dst, src, count);
  case BE_TANH:
    return be_cpu_tanh_f32(dst, src, count);
  }
  return ACCEL_EINVAL;
}

static int run_sgemm(const be_cpu_item *it)
{
  return be_cpu_sgemm(&it->u.sgemm.g, it->u.sgemm.a, it->u.sgemm.a_len, it->u.sgemm.b,
                      it->u.sgemm.b_len, it->u.sgemm.c, it->u.sgemm.c_len);
}

int be_cpu_item_run(const be_cpu_item *it)
{
  switch (it->kind) {
  case BE_CPU_COPY:
    return be_cpu_copy(it->u.copy.dst, it->u.copy.src, it->u.copy.bytes);
  case BE_CPU_SGEMM:
    return run_sgemm(it);
  case BE_CPU_SAXPY:
    return be_cpu_saxpy((int64_t)it->u.saxpy.n, it->u.saxpy.alpha, it->u.saxpy.x, 1,
                        it->u.saxpy.n, it->u.saxpy.y, 1, it->u.saxpy.n);
  case BE_CPU_SDOT:
    return be_cpu_sdot((int64_t)it->u.sdot.n, it->u.sdot.x, 1, it->u.sdot.n, it->u.sdot.y, 1,
                       it->u.sdot.n, it->u.sdot.result);
  case BE_CPU_FILL:
    return be_cpu_fill(it->u.fill.dst, it->u.fill.count, it->u.fill.esize, it->u.fill.value);
  case BE_CPU_RNG:
    return run_rng(it->u.rng.dst, it->u.rng.count, &it->u.rng.r);
  case BE_CPU_UNARY:
    return run_unary(it->u.unary.op, it->u.unary.dst, it->u.unary.src, it->u.unary.count);
  case BE_CPU_SOFTMAX:
    return be_cpu_softmax_f32(it->u.softmax.dst, it->u.softmax.src, it->u.softmax.rows,
                              it->u.softmax.cols);
  case BE_CPU_CALLBACK:
  case BE_CPU_WAIT:
    break; /* the queue runs these itself */
  }
  return ACCEL_EINVAL;
}
