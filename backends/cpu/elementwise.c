/* NN element-wise ops and buffer fill/copy on host memory (see cpu_kernels.h). Plain loops the
 * compiler vectorises where libm allows (fill, copy, relu; the exp/tanh loops call libm). */
#include <math.h>
#include <string.h>

#include "accel/error.h"
#include "backends/cpu/cpu_kernels.h"

static int check_unary(float *y, const float *x, size_t n) {
  return n > 0 && (y == NULL || x == NULL) ? ACCEL_EINVAL : 0;
}

int be_cpu_fill_u32(uint32_t *dst, size_t n, uint32_t value) {
  if (n > 0 && dst == NULL)
    return ACCEL_EINVAL;
  for (size_t i = 0; i < n; i++)
    dst[i] = value;
  return 0;
}

int be_cpu_fill_f32(float *dst, size_t n, float value) {
  if (n > 0 && dst == NULL)
    return ACCEL_EINVAL;
  for (size_t i = 0; i < n; i++)
    dst[i] = value;
  return 0;
}

int be_cpu_fill(void *dst, size_t n, uint32_t esize, uint64_t value) {
  if ((n > 0 && dst == NULL) || (esize != 1 && esize != 2 && esize != 4 && esize != 8))
    return ACCEL_EINVAL;
  switch (esize) {
  case 1:
    memset(dst, (int)(value & 0xff), n);
    return 0;
  case 2:
    for (size_t i = 0; i < n; i++)
      ((uint16_t *)dst)[i] = (uint16_t)value;
    return 0;
  case 4:
    return be_cpu_fill_u32(dst, n, (uint32_t)value);
  default:
    for (size_t i = 0; i < n; i++)
      ((uint64_t *)dst)[i] = value;
    return 0;
  }
}

int be_cpu_copy(void *dst, const void *src, size_t bytes) {
  if (bytes > 0 && (dst == NULL || src == NULL))
    return ACCEL_EINVAL;
  if (bytes > 0)
    memmove(dst, src, bytes);
  return 0;
}

/* With e = exp(-|x|) <= 1 nothing overflows: 1 / (1 + e) for x >= 0, e / (1 + e) below. */
static float sigmoid(float x) {
  float e = expf(-fabsf(x));
  float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

int be_cpu_sigmoid_f32(float *y, const float *x, size_t n) {
  if (check_unary(y, x, n) != 0)
    return ACCEL_EINVAL;
  for (size_t i = 0; i < n; i++)
    y[i] = sigmoid(x[i]);
  return 0;
}

int be_cpu_relu_f32(float *y, const float *x, size_t n) {
  if (check_unary(y, x, n) != 0)
    return ACCEL_EINVAL;
  for (size_t i = 0; i < n; i++)
    y[i] = x[i] < 0.0f ? 0.0f : x[i];
  return 0;
}

int be_cpu_tanh_f32(float *y, const float *x, size_t n) {
  if (check_unary(y, x, n) != 0)
    return ACCEL_EINVAL;
  for (size_t i = 0; i < n; i++)
    y[i] = tanhf(x[i]);
  return 0;
}

/* One row. The maximum is subtracted first so that exp never overflows (the largest term is
 * exp(0) = 1 and the sum is at least 1); the sum is kept in double, which costs nothing next
 * to expf and keeps long rows accurate. */
static void softmax_row(float *y, const float *x, size_t cols) {
  float max = x[0];
  for (size_t j = 1; j < cols; j++)
    max = x[j] > max ? x[j] : max;
  double sum = 0.0;
  for (size_t j = 0; j < cols; j++) {
    float e = expf(x[j] - max);
    y[j] = e;
    sum += e;
  }
  for (size_t j = 0; j < cols; j++)
    y[j] = (float)(y[j] / sum);
}

int be_cpu_softmax_f32(float *y, const float *x, size_t rows, size_t cols) {
  if (cols > 0 && rows > SIZE_MAX / cols)
    return ACCEL_EINVAL;
  if (check_unary(y, x, rows * cols) != 0)
    return ACCEL_EINVAL;
  for (size_t r = 0; r < rows && cols > 0; r++)
    softmax_row(y + r * cols, x + r * cols, cols);
  return 0;
}
