/* Runs one copy or kernel item of a cpu queue on its worker thread (a tiny one where it is
 * submitted: be_cpu_item_tiny): the kernels of
 * cpu_kernels.h on the addresses the submitter checked (ops.c). Scratch the kernels need
 * (16-bit gemm and softmax) is allocated here, on the worker, never on the submitting loop. */
#include "accel/error.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/queue.h"

static int run_rng(uint32_t dtype, void *dst, size_t count, const be_rng_args *r) {
  switch (r->dist) {
  case BE_RNG_BITS:
    return be_cpu_philox_fill_u32(dst, count, r->seed, r->offset);
  case BE_RNG_UNIFORM:
    return be_cpu_philox_fill_uniform_as(dtype, dst, count, r->seed, r->offset);
  case BE_RNG_NORMAL:
    return be_cpu_philox_fill_normal_as(dtype, dst, count, r->seed, r->offset, r->mean, r->stddev);
  }
  return ACCEL_EINVAL;
}

static int run_gemm(const be_cpu_item *it) {
  return be_cpu_gemm(&it->u.gemm.g, it->u.gemm.a, it->u.gemm.a_len, it->u.gemm.b, it->u.gemm.b_len,
                     it->u.gemm.c, it->u.gemm.c_len);
}

/* Contiguous vectors (stride 1) of n elements, F32 or F64. */
static int run_vec(be_cpu_item_kind kind, uint32_t dtype, const be_cpu_item *it) {
  int64_t n = (int64_t)it->u.vec.n;
  size_t len = it->u.vec.n;
  double a = it->u.vec.alpha;
  bool f64 = dtype == ACCEL_F64;
  switch (kind) {
  case BE_CPU_AXPY:
    return f64 ? be_cpu_daxpy(n, a, it->u.vec.x, 1, len, it->u.vec.y, 1, len)
               : be_cpu_saxpy(n, (float)a, it->u.vec.x, 1, len, it->u.vec.y, 1, len);
  case BE_CPU_DOT:
    return f64 ? be_cpu_ddot(n, it->u.vec.x, 1, len, it->u.vec.y, 1, len, it->u.vec.result)
               : be_cpu_sdot(n, it->u.vec.x, 1, len, it->u.vec.y, 1, len, it->u.vec.result);
  default:
    return f64 ? be_cpu_dscal(n, a, it->u.vec.y, 1, len)
               : be_cpu_sscal(n, (float)a, it->u.vec.y, 1, len);
  }
}

int be_cpu_item_run(const be_cpu_item *it) {
  switch (it->kind) {
  case BE_CPU_COPY:
    return be_cpu_copy(it->u.copy.dst, it->u.copy.src, it->u.copy.bytes);
  case BE_CPU_GEMM:
    return run_gemm(it);
  case BE_CPU_AXPY:
  case BE_CPU_DOT:
  case BE_CPU_SCAL:
    return run_vec(it->kind, it->u.vec.dtype, it);
  case BE_CPU_FILL:
    return be_cpu_fill(it->u.fill.dst, it->u.fill.count, it->u.fill.esize, it->u.fill.value);
  case BE_CPU_RNG:
    return run_rng(it->u.rng.dtype, it->u.rng.dst, it->u.rng.count, &it->u.rng.r);
  case BE_CPU_UNARY:
    return be_cpu_unary(it->u.unary.dtype, it->u.unary.op, it->u.unary.dst, it->u.unary.src,
                        it->u.unary.count);
  case BE_CPU_SOFTMAX:
    return be_cpu_softmax(it->u.softmax.dtype, it->u.softmax.dst, it->u.softmax.src,
                          it->u.softmax.rows, it->u.softmax.cols);
  case BE_CPU_BINARY:
    return be_cpu_binary(it->u.binary.dtype, &it->u.binary.g, it->u.binary.dst, it->u.binary.a,
                         it->u.binary.b);
  case BE_CPU_REDUCE:
    return be_cpu_reduce(it->u.reduce.dtype, &it->u.reduce.g, it->u.reduce.dst, it->u.reduce.src);
  case BE_CPU_WHERE:
    return be_cpu_where(it->u.where.dtype, &it->u.where.g, it->u.where.dst, it->u.where.cond,
                        it->u.where.a, it->u.where.b);
  case BE_CPU_CONVERT:
    return be_cpu_convert(it->u.convert.dst_dtype, it->u.convert.src_dtype, &it->u.convert.g,
                          it->u.convert.dst, it->u.convert.src);
  case BE_CPU_COLLECTIVE:
    return be_cpu_collective_run(it);
  case BE_CPU_CALLBACK:
  case BE_CPU_WAIT:
    break; /* the queue runs these itself */
  }
  return ACCEL_EINVAL;
}

/* About a microsecond of work on one core: run where it is submitted (queue.h). Gemm and
 * softmax are left out: 16-bit ones allocate scratch, which stays off the submitting loop. */
#define TINY_BYTES 16384
#define TINY_ELEMENTS 4096

bool be_cpu_item_tiny(const be_cpu_item *it) {
  switch (it->kind) {
  case BE_CPU_CALLBACK:
    return it->u.cb.quick;
  case BE_CPU_COPY:
    return it->u.copy.bytes <= TINY_BYTES;
  case BE_CPU_FILL:
    return it->u.fill.count <= TINY_BYTES / it->u.fill.esize;
  case BE_CPU_RNG:
    return it->u.rng.count <= TINY_ELEMENTS;
  case BE_CPU_AXPY:
  case BE_CPU_DOT:
  case BE_CPU_SCAL:
    return it->u.vec.n <= TINY_ELEMENTS;
  case BE_CPU_UNARY:
    return it->u.unary.count <= TINY_ELEMENTS;
  case BE_CPU_BINARY:
    return it->u.binary.g.rows * it->u.binary.g.cols <= TINY_ELEMENTS;
  case BE_CPU_REDUCE:
    return it->u.reduce.g.rows * it->u.reduce.g.cols <= TINY_ELEMENTS;
  case BE_CPU_WHERE:
    return it->u.where.g.rows * it->u.where.g.cols <= TINY_ELEMENTS;
  case BE_CPU_CONVERT:
    return it->u.convert.g.rows * it->u.convert.g.cols <= TINY_ELEMENTS;
  default:
    return false;
  }
}
