/* Conversions of a strided 2-D view between dtypes (cpu_kernels.h: be_cpu_convert; the rules
 * are ops/args.h be_convert_args'). Every element of every dtype is exact in a double, so a
 * row goes in blocks through doubles on the stack: a loop per source dtype widens, a loop per
 * destination dtype rounds once (F16 and BF16 through an f32 rounded to odd). Integers to
 * integers wrap instead of saturating, so those loops know where the doubles came from. The
 * same dtype is a copy of bits (NaN payloads and -0.0 kept). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "accel/error.h"
#include "backends/cpu/cpu_kernels.h"
#include "ops/dtype_conv.h"

#define BLOCK 1024

/* v[i] = element i * step of p, i < n, widened exactly. Inlined twice (step 1 and any), so
 * that a contiguous row runs loops the compiler vectorises. */
static inline void widen(uint32_t dtype, const void *p, uint64_t step, uint64_t n, double *v) {
  switch (dtype) {
  case ACCEL_F32:
    for (uint64_t i = 0; i < n; i++)
      v[i] = ((const float *)p)[i * step];
    break;
  case ACCEL_F64:
    for (uint64_t i = 0; i < n; i++)
      v[i] = ((const double *)p)[i * step];
    break;
  case ACCEL_F16:
    for (uint64_t i = 0; i < n; i++)
      v[i] = be_f16_to_f32(((const uint16_t *)p)[i * step]);
    break;
  case ACCEL_BF16:
    for (uint64_t i = 0; i < n; i++)
      v[i] = be_bf16_to_f32(((const uint16_t *)p)[i * step]);
    break;
  case ACCEL_I32:
    for (uint64_t i = 0; i < n; i++)
      v[i] = ((const int32_t *)p)[i * step];
    break;
  case ACCEL_U32:
    for (uint64_t i = 0; i < n; i++)
      v[i] = ((const uint32_t *)p)[i * step];
    break;
  default: /* BOOL: any byte but 0 is true (as where's cond) */
    for (uint64_t i = 0; i < n; i++)
      v[i] = ((const uint8_t *)p)[i * step] != 0;
    break;
  }
}

/* Truncated toward zero into [lo, hi], NaN to 0 (the limits are exact doubles; inside them
 * the cast truncates, without libm's trunc, a call on baseline x86-64). */
static inline int64_t saturate(double d, double lo, double hi) {
  if (d != d)
    return 0;
  return d <= lo ? (int64_t)lo : d >= hi ? (int64_t)hi : (int64_t)d;
}

/* Modulo 2^32 of an integer held exactly in d (a source I32, U32 or BOOL). */
static inline uint32_t wrap(double d) {
  return (uint32_t)(int64_t)d;
}

/* q[i] = v[i] rounded once to dtype; `ints`: v came from an integer dtype (I32, U32, BOOL). */
static void narrow(uint32_t dtype, bool ints, const double *v, uint64_t n, void *q) {
  switch (dtype) {
  case ACCEL_F32:
    for (uint64_t i = 0; i < n; i++)
      ((float *)q)[i] = (float)v[i];
    break;
  case ACCEL_F64:
    memcpy(q, v, n * sizeof *v);
    break;
  case ACCEL_F16:
    for (uint64_t i = 0; i < n; i++)
      ((uint16_t *)q)[i] = be_f32_to_f16(be_f64_to_f32_odd(v[i]));
    break;
  case ACCEL_BF16:
    for (uint64_t i = 0; i < n; i++)
      ((uint16_t *)q)[i] = be_f32_to_bf16(be_f64_to_f32_odd(v[i]));
    break;
  case ACCEL_I32: /* one loop each way: no test per element */
    if (ints)
      for (uint64_t i = 0; i < n; i++)
        ((int32_t *)q)[i] = (int32_t)wrap(v[i]);
    else
      for (uint64_t i = 0; i < n; i++)
        ((int32_t *)q)[i] = (int32_t)saturate(v[i], -2147483648.0, 2147483647.0);
    break;
  case ACCEL_U32:
    if (ints)
      for (uint64_t i = 0; i < n; i++)
        ((uint32_t *)q)[i] = wrap(v[i]);
    else
      for (uint64_t i = 0; i < n; i++)
        ((uint32_t *)q)[i] = (uint32_t)saturate(v[i], 0.0, 4294967295.0);
    break;
  default: /* BOOL: not zero (NaN is not zero) */
    for (uint64_t i = 0; i < n; i++)
      ((uint8_t *)q)[i] = v[i] != 0.0;
    break;
  }
}

/* A row of n elements of esize bytes at `step` copied as bits. */
static void copy_row(size_t esize, const char *p, uint64_t step, uint64_t n, char *q) {
  if (step == 1) {
    memcpy(q, p, n * esize);
    return;
  }
  switch (esize) { /* a typed loop per size: no call per element */
  case 1:
    for (uint64_t i = 0; i < n; i++)
      q[i] = p[i * step];
    break;
  case 2:
    for (uint64_t i = 0; i < n; i++)
      ((uint16_t *)(void *)q)[i] = ((const uint16_t *)(const void *)p)[i * step];
    break;
  case 4:
    for (uint64_t i = 0; i < n; i++)
      ((uint32_t *)(void *)q)[i] = ((const uint32_t *)(const void *)p)[i * step];
    break;
  default:
    for (uint64_t i = 0; i < n; i++)
      ((uint64_t *)(void *)q)[i] = ((const uint64_t *)(const void *)p)[i * step];
    break;
  }
}

int be_cpu_convert(uint32_t dst_dtype, uint32_t src_dtype, const be_convert_args *g, void *dst,
                   const void *src) {
  if (!be_convert_dtype_ok(dst_dtype) || !be_convert_dtype_ok(src_dtype))
    return ACCEL_ENOTSUP;
  size_t ds = be_dtype_size(dst_dtype), ss = be_dtype_size(src_dtype);
  bool ints = src_dtype == ACCEL_I32 || src_dtype == ACCEL_U32 || src_dtype == ACCEL_BOOL;
  double v[BLOCK];
  for (uint64_t r = 0; r < g->rows; r++) {
    const char *row = (const char *)src + r * g->rs * ss;
    char *out = (char *)dst + r * g->cols * ds;
    if (dst_dtype == src_dtype) {
      copy_row(ds, row, g->cs, g->cols, out);
      continue;
    }
    for (uint64_t c = 0; c < g->cols; c += BLOCK) {
      uint64_t n = g->cols - c < BLOCK ? g->cols - c : BLOCK;
      if (g->cs == 1)
        widen(src_dtype, row + c * ss, 1, n, v);
      else
        widen(src_dtype, row + c * g->cs * ss, g->cs, n, v);
      narrow(dst_dtype, ints, v, n, out + c * ds);
    }
  }
  return 0;
}
