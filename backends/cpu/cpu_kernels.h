/* The cpu backend's compute kernels: BLAS (through OpenBLAS), Philox RNG fills (philox.h) and
 * NN element-wise ops, on host memory, in the dtypes of the op packages (accel/dtype.h; F16
 * and BF16 elements are their raw uint16_t bits).
 *
 * These are pure functions, the layer under the backend interface: no actors, no threads of
 * their own (but see "Threads" below), no state of their own: openblas.c holds the one
 * process-wide table they share, OpenBLAS's own functions bound once on first use
 * (openblas.h, thread-safe); when it cannot be bound the BLAS kernels may return
 * ACCEL_ENOTSUP (every call that would reach OpenBLAS does). Allocation: only the 16-bit gemm (f32
 * copies of A, B and C) and the 16-bit softmax (one f32 row) allocate scratch, on the calling
 * thread, freed before they return; they return ACCEL_ENOMEM if it fails. Each checks its arguments
 * first and returns 0 or a negative code from accel/error.h; on an error nothing has been written.
 * Counts are in elements.
 *
 * Threads: every function may run on any thread, concurrently with any other on disjoint
 * output buffers. They block the calling thread for the duration of the work (a worker's job,
 * never the loop's). OpenBLAS may use its own thread pool inside gemm (OPENBLAS_NUM_THREADS
 * or openblas_set_num_threads() bound it).
 *
 * Aliasing: element-wise ops may run in place (y == x); other partial overlaps are undefined.
 * BLAS outputs must not overlap their inputs.
 */
#ifndef BE_CPU_KERNELS_H
#define BE_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/cpu/philox.h"
#include "ops/blas_args.h"

/* ---- BLAS (blas.c, gemm.c) -----------------------------------------------------------------
 * Errors: ACCEL_EINVAL (see be_blas_check_*; also a NULL buffer that would be touched),
 * ACCEL_ELIMIT (a dimension, leading dimension or stride above what OpenBLAS's 32-bit
 * interface takes, INT_MAX), ACCEL_ENOTSUP (OpenBLAS could not be bound: openblas.h). */

/* C = alpha * op(A) * op(B) + beta * C, column-major, BLAS semantics: with m or n = 0 nothing
 * happens; with k = 0 or alpha = 0, C = beta * C without reading A or B; beta = 0 overwrites C
 * (NaN or Inf in C do not propagate). a_len, b_len, c_len: elements in each buffer. */
int be_cpu_sgemm(const be_sgemm_args *g, const float *a, size_t a_len, const float *b, size_t b_len,
                 float *c, size_t c_len);

/* gemm of any combination be_gemm_combo_ok allows except TF32 (ACCEL_ENOTSUP: no tensor
 * cores), strided-batched, with sgemm's BLAS rules above for every dtype. F64: dgemm. F32:
 * be_cpu_sgemm per matrix. F16 and BF16 A and B: widened to f32 scratch, one sgemm per matrix
 * with FP32 accumulation and float alpha and beta; a 16-bit C is widened first (when beta !=
 * 0) and rounded back to nearest even (dtype_conv.h). k = 0 or alpha = 0 with a 16-bit C:
 * beta * C in float, rounded. a_len, b_len, c_len: elements of the types in g. Errors as
 * above, and ACCEL_ENOMEM (the 16-bit scratch). */
int be_cpu_gemm(const be_gemm_args *g, const void *a, size_t a_len, const void *b, size_t b_len,
                void *c, size_t c_len);

/* y = alpha * x + y over n elements with strides incx, incy >= 1. */
int be_cpu_saxpy(int64_t n, float alpha, const float *x, int64_t incx, size_t x_len, float *y,
                 int64_t incy, size_t y_len);

/* *result = sum of x[i * incx] * y[i * incy], i < n, accumulated in float as OpenBLAS does
 * (0 for n = 0). */
int be_cpu_sdot(int64_t n, const float *x, int64_t incx, size_t x_len, const float *y, int64_t incy,
                size_t y_len, float *result);

/* The same in double (daxpy, ddot accumulated in double as OpenBLAS does). */
int be_cpu_daxpy(int64_t n, double alpha, const double *x, int64_t incx, size_t x_len, double *y,
                 int64_t incy, size_t y_len);
int be_cpu_ddot(int64_t n, const double *x, int64_t incx, size_t x_len, const double *y,
                int64_t incy, size_t y_len, double *result);

/* x = alpha * x over n elements with stride incx >= 1 (with alpha = 0, NaN in x: whatever this
 * OpenBLAS's scal does; 0.3.21 writes zeros). */
int be_cpu_sscal(int64_t n, float alpha, float *x, int64_t incx, size_t x_len);
int be_cpu_dscal(int64_t n, double alpha, double *x, int64_t incx, size_t x_len);

/* ---- Element-wise (elementwise.c) --------------------------------------------------------
 * Errors: ACCEL_EINVAL for a NULL buffer with n > 0 (or rows * cols > 0), or rows * cols
 * overflowing. Float results follow libm: NaN in, NaN out. */

/* dst[i] = value, i < n. The f32 fill is the u32 fill of the value's bits. */
int be_cpu_fill_u32(uint32_t *dst, size_t n, uint32_t value);
int be_cpu_fill_f32(float *dst, size_t n, float value);

/* Each of n elements of esize bytes (1, 2, 4 or 8) = the low esize bytes of value. */
int be_cpu_fill(void *dst, size_t n, uint32_t esize, uint64_t value);

/* Copies `bytes` bytes; the regions may overlap (memmove). */
int be_cpu_copy(void *dst, const void *src, size_t bytes);

/* y[i] = 1 / (1 + exp(-x[i])), evaluated without overflow for any x. */
int be_cpu_sigmoid_f32(float *y, const float *x, size_t n);

/* y[i] = x[i] < 0 ? 0 : x[i] (so NaN stays NaN and -0 stays -0). */
int be_cpu_relu_f32(float *y, const float *x, size_t n);

/* y[i] = tanh(x[i]). */
int be_cpu_tanh_f32(float *y, const float *x, size_t n);

/* Softmax of each row of a rows x cols matrix stored row-major (each row's cols elements are
 * contiguous, as the last axis of a C array): y = exp(x - max) / sum(exp(x - max)) per row, so
 * large inputs do not overflow. A row holding NaN or +Inf, or only -Inf, gives NaN. */
int be_cpu_softmax_f32(float *y, const float *x, size_t rows, size_t cols);

/* ---- Element-wise in any nn dtype (nn.c) -------------------------------------------------
 * dtype ACCEL_F32 (the kernels above), ACCEL_F64 (the same formulas in double, libm), ACCEL_F16
 * or ACCEL_BF16 (each element widened to f32, the F32 kernel, rounded to nearest even); any
 * other is ACCEL_ENOTSUP. In place (y == x) allowed. Errors as above, ACCEL_EINVAL for an
 * unknown op, and ACCEL_ENOMEM (softmax in F16/BF16: one f32 row of scratch). */
int be_cpu_unary(uint32_t dtype, be_unary_op op, void *y, const void *x, size_t n);
int be_cpu_softmax(uint32_t dtype, void *y, const void *x, size_t rows, size_t cols);

/* dst = a op b over g->rows x g->cols, the inputs read at their strides (binary.c); dtype is
 * the inputs': the arithmetic writes it (F16 and BF16 computed in f32 and rounded once, I32
 * and U32 wrapping), the comparisons write bytes 0 or 1. ACCEL_EINVAL for an op the dtype does
 * not take (be_binary_dtype_ok), ACCEL_ENOTSUP for another dtype. */
int be_cpu_binary(uint32_t dtype, const be_binary_args *g, void *dst, const void *a, const void *b);

/* dst = cond ? a : b over g->rows x g->cols (binary.c), cond bytes (nonzero true), the others
 * elements of dtype moved as bits. */
int be_cpu_where(uint32_t dtype, const be_where_args *g, void *dst, const void *cond, const void *a,
                 const void *b);

/* dst (dst_dtype, contiguous) = src's view (src_dtype) converted as astype does (convert.c;
 * the rules: ops/args.h be_convert_args). ACCEL_ENOTSUP for a dtype outside the list. */
int be_cpu_convert(uint32_t dst_dtype, uint32_t src_dtype, const be_convert_args *g, void *dst,
                   const void *src);

/* dst = g->op folded over src's view (reduce.c), accumulated in double (contiguous F32 in
 * float blocks), rounded once to the dtype; no scratch. ACCEL_EINVAL for an unknown op or axis or
 * max/min of no elements, ACCEL_ENOTSUP for a dtype other than F32, F64, F16, BF16. */
int be_cpu_reduce(uint32_t dtype, const be_reduction_args *g, void *dst, const void *src);

#endif
