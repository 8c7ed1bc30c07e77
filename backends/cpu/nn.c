/* The element-wise ops and softmax in every dtype of the nn package (cpu_kernels.h): F32 is
 * elementwise.c's kernels; F64 the same formulas in double; F16 and BF16 widen each element to
 * f32, run the F32 kernel and round the result to nearest even (ops/dtype_conv.h). */
#include <math.h>
#include <stdlib.h>

#include "accel/error.h"
#include "backends/cpu/cpu_kernels.h"
#include "ops/dtype_conv.h"
#include "runtime/alloc.h"

/* Elements per chunk of a 16-bit op: the f32 copy lives on the worker's stack. */
#define CHUNK 512

static void widen(uint32_t dtype, float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = dtype == ACCEL_F16 ? be_f16_to_f32(src[i]) : be_bf16_to_f32(src[i]);
}

static void narrow(uint32_t dtype, uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = dtype == ACCEL_F16 ? be_f32_to_f16(src[i]) : be_f32_to_bf16(src[i]);
}

/* exp, log, sqrt, abs: libm's, one element at a time (sqrt and fabs correctly rounded). */
static void math_f32(be_unary_op op, float *y, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    y[i] = op == BE_EXP ? expf(v) : op == BE_LOG ? logf(v) : op == BE_SQRT ? sqrtf(v) : fabsf(v);
  }
}

static int unary_f32(be_unary_op op, float *y, const float *x, size_t n) {
  switch (op) {
  case BE_SIGMOID:
    return be_cpu_sigmoid_f32(y, x, n);
  case BE_RELU:
    return be_cpu_relu_f32(y, x, n);
  case BE_TANH:
    return be_cpu_tanh_f32(y, x, n);
  case BE_EXP:
  case BE_LOG:
  case BE_SQRT:
  case BE_ABS:
    if (n > 0 && (y == NULL || x == NULL))
      return ACCEL_EINVAL;
    math_f32(op, y, x, n);
    return 0;
  }
  return ACCEL_EINVAL;
}

/* As elementwise.c's sigmoid: e = exp(-|x|) <= 1 never overflows. */
static double sigmoid64(double x) {
  double e = exp(-fabs(x)), r = 1.0 / (1.0 + e);
  return x >= 0.0 ? r : e * r;
}

static double unary64(be_unary_op op, double v) {
  switch (op) {
  case BE_SIGMOID:
    return sigmoid64(v);
  case BE_RELU:
    return v < 0.0 ? 0.0 : v;
  case BE_TANH:
    return tanh(v);
  case BE_EXP:
    return exp(v);
  case BE_LOG:
    return log(v);
  case BE_SQRT:
    return sqrt(v);
  default:
    return fabs(v);
  }
}

static void unary_f64(be_unary_op op, double *y, const double *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    y[i] = unary64(op, x[i]);
}

/* Chunk by chunk: each chunk is read whole before it is written, so y == x works. */
static void unary_16(uint32_t dtype, be_unary_op op, uint16_t *y, const uint16_t *x, size_t n) {
  float buf[CHUNK];
  for (size_t i = 0; i < n; i += CHUNK) {
    size_t c = n - i < CHUNK ? n - i : CHUNK;
    widen(dtype, buf, x + i, c);
    unary_f32(op, buf, buf, c);
    narrow(dtype, y + i, buf, c);
  }
}

static bool nn_dtype(uint32_t dtype) {
  return dtype == ACCEL_F32 || dtype == ACCEL_F64 || dtype == ACCEL_F16 || dtype == ACCEL_BF16;
}

int be_cpu_unary(uint32_t dtype, be_unary_op op, void *y, const void *x, size_t n) {
  if (!nn_dtype(dtype))
    return ACCEL_ENOTSUP;
  if (op > BE_UNARY_OP_LAST || (n > 0 && (y == NULL || x == NULL)))
    return ACCEL_EINVAL;
  if (dtype == ACCEL_F32)
    return unary_f32(op, y, x, n);
  if (dtype == ACCEL_F64)
    unary_f64(op, y, x, n);
  else
    unary_16(dtype, op, y, x, n);
  return 0;
}

/* As softmax_row of elementwise.c, in double. */
static void softmax_row64(double *y, const double *x, size_t cols) {
  double max = x[0], sum = 0.0;
  for (size_t j = 1; j < cols; j++)
    max = x[j] > max ? x[j] : max;
  for (size_t j = 0; j < cols; j++) {
    y[j] = exp(x[j] - max);
    sum += y[j];
  }
  for (size_t j = 0; j < cols; j++)
    y[j] /= sum;
}

/* One f32 row of scratch (allocated here, on the worker): widen, the F32 softmax, round. */
static int softmax_16(uint32_t dtype, uint16_t *y, const uint16_t *x, size_t rows, size_t cols) {
  float *row = rt_malloc(cols * sizeof *row);
  if (row == NULL)
    return ACCEL_ENOMEM;
  for (size_t r = 0; r < rows; r++) {
    widen(dtype, row, x + r * cols, cols);
    be_cpu_softmax_f32(row, row, 1, cols);
    narrow(dtype, y + r * cols, row, cols);
  }
  rt_free(row);
  return 0;
}

int be_cpu_softmax(uint32_t dtype, void *y, const void *x, size_t rows, size_t cols) {
  if (!nn_dtype(dtype))
    return ACCEL_ENOTSUP;
  if (cols > 0 && rows > SIZE_MAX / cols)
    return ACCEL_EINVAL;
  if (rows * cols > 0 && (y == NULL || x == NULL))
    return ACCEL_EINVAL;
  if (dtype == ACCEL_F32)
    return be_cpu_softmax_f32(y, x, rows, cols);
  if (rows * cols == 0)
    return 0;
  if (dtype != ACCEL_F64)
    return softmax_16(dtype, y, x, rows, cols);
  for (size_t r = 0; r < rows; r++)
    softmax_row64((double *)y + r * cols, (const double *)x + r * cols, cols);
  return 0;
}
