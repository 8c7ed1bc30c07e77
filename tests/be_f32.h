/* The f32 kernels of the backend interface as the tests call them: thin shorthands over the
 * core fill and the blas, rng and nn packages (backends/backend.h), so that one test reads as
 * the op it tests. Header-only; tests of backends include it. */
#ifndef ACCEL_TESTS_BE_F32_H
#define ACCEL_TESTS_BE_F32_H

#include "backends/backend.h"

static inline int be_fill_u32(const be_ops *be, be_queue *q, be_mem dst, size_t off, size_t count,
                              uint32_t value) {
  return be->fill(q, dst, off, count, 4, value);
}

static inline be_gemm_args be_gemm_of_sgemm(const be_sgemm_args *s) {
  return (be_gemm_args){.trans_a = s->trans_a,
                        .trans_b = s->trans_b,
                        .m = s->m,
                        .n = s->n,
                        .k = s->k,
                        .alpha = s->alpha,
                        .beta = s->beta,
                        .lda = s->lda,
                        .ldb = s->ldb,
                        .ldc = s->ldc,
                        .ab_type = ACCEL_F32,
                        .c_type = ACCEL_F32,
                        .math = (be_gemm_math)s->math,
                        .batch = 1};
}

static inline int be_sgemm(const be_ops *be, be_queue *q, const be_sgemm_args *s, be_mem a,
                           size_t a_off, be_mem b, size_t b_off, be_mem c, size_t c_off) {
  if (s == NULL)
    return ACCEL_EINVAL;
  be_gemm_args g = be_gemm_of_sgemm(s);
  return be->blas->gemm(q, &g, a, a_off, b, b_off, c, c_off);
}

static inline int be_saxpy(const be_ops *be, be_queue *q, size_t n, float alpha, be_mem x,
                           size_t x_off, be_mem y, size_t y_off) {
  return be->blas->axpy(q, ACCEL_F32, n, alpha, x, x_off, y, y_off);
}

static inline int be_sdot(const be_ops *be, be_queue *q, size_t n, be_mem x, size_t x_off, be_mem y,
                          size_t y_off, be_mem r, size_t r_off) {
  return be->blas->dot(q, ACCEL_F32, n, x, x_off, y, y_off, r, r_off);
}

static inline int be_rng_fill(const be_ops *be, be_queue *q, be_mem dst, size_t off, size_t count,
                              const be_rng_args *r) {
  uint32_t dtype = r != NULL && r->dist == BE_RNG_BITS ? ACCEL_U32 : ACCEL_F32;
  return be->rng->fill(q, dtype, dst, off, count, r);
}

static inline int be_unary(const be_ops *be, be_queue *q, be_unary_op op, be_mem dst,
                           size_t dst_off, be_mem src, size_t src_off, size_t count) {
  return be->nn->unary(q, ACCEL_F32, op, dst, dst_off, src, src_off, count);
}

static inline int be_softmax(const be_ops *be, be_queue *q, be_mem dst, size_t dst_off, be_mem src,
                             size_t src_off, size_t rows, size_t cols) {
  return be->nn->softmax(q, ACCEL_F32, dst, dst_off, src, src_off, rows, cols);
}

#endif
