/* The cpu backend's compute kernels: BLAS (through OpenBLAS), Philox RNG fills (philox.h) and
 * NN element-wise ops, on host memory.
 *
 * These are pure functions, the layer under the backend interface: no actors, no threads of
 * their own (but see "Threads" below), no allocation, no global state. Each checks its
 * arguments first and returns 0 or a negative code from accel/error.h; on an error nothing has
 * been written. Counts are in elements.
 *
 * Threads: every function may run on any thread, concurrently with any other on disjoint
 * output buffers. They block the calling thread for the duration of the work (a worker's job,
 * never the loop's). OpenBLAS may use its own thread pool inside sgemm (OPENBLAS_NUM_THREADS
 * or openblas_set_num_threads() bound it).
 *
 * Aliasing: element-wise ops may run in place (y == x); other partial overlaps are undefined.
 * BLAS outputs must not overlap their inputs.
 */
#ifndef BE_CPU_KERNELS_H
#define BE_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "backends/blas_args.h"
#include "backends/cpu/philox.h"

/* ---- BLAS (blas.c) ------------------------------------------------------------------------
 * Errors: ACCEL_EINVAL (see be_blas_check_*; also a NULL buffer that would be touched),
 * ACCEL_ELIMIT (a dimension, leading dimension or stride above what OpenBLAS's 32-bit
 * interface takes, INT_MAX). */

/* C = alpha * op(A) * op(B) + beta * C, column-major, BLAS semantics: with m or n = 0 nothing
 * happens; with k = 0 or alpha = 0, C = beta * C without reading A or B; beta = 0 overwrites C
 * (NaN or Inf in C do not propagate). a_len, b_len, c_len: elements in each buffer. */
int be_cpu_sgemm(const be_sgemm_args *g, const float *a, size_t a_len, const float *b,
                 size_t b_len, float *c, size_t c_len);

/* y = alpha * x + y over n elements with strides incx, incy >= 1. */
int be_cpu_saxpy(int64_t n, float alpha, const float *x, int64_t incx, size_t x_len, float *y,
                 int64_t incy, size_t y_len);

/* *result = sum of x[i * incx] * y[i * incy], i < n, accumulated in float as OpenBLAS does
 * (0 for n = 0). */
int be_cpu_sdot(int64_t n, const float *x, int64_t incx, size_t x_len, const float *y,
                int64_t incy, size_t y_len, float *result);

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

#endif
