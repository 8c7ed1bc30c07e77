/* The broadcasting element-wise ops of two inputs (cpu_kernels.h: be_cpu_binary). One loop per
 * dtype and op, so the compiler sees a plain loop over a row: the inputs' column strides are
 * 0 (broadcast) or 1 but for transposes. */
#include <stdint.h>

#include "accel/error.h"
#include "backends/cpu/cpu_kernels.h"
#include "ops/dtype_conv.h"

/* NaN in, NaN out: x is NaN, or y is and the comparison fails. */
#define MAXIMUM(x, y) ((x) > (y) || (x) != (x) ? (x) : (y))
#define MINIMUM(x, y) ((x) < (y) || (x) != (x) ? (x) : (y))

#define ROWS_LOOP(T, LOAD, STORE, EXPR)                                                            \
  for (uint64_t r = 0; r < g->rows; r++) {                                                         \
    T *out = (T *)dst + r * g->cols;                                                               \
    const T *pa = (const T *)a + r * g->a_rs, *pb = (const T *)b + r * g->b_rs;                    \
    for (uint64_t c = 0; c < g->cols; c++) {                                                       \
      float_t_ x = LOAD(pa[c * g->a_cs]), y = LOAD(pb[c * g->b_cs]);                               \
      out[c] = STORE(EXPR);                                                                        \
    }                                                                                              \
  }

#define IDENTITY(v) (v)

/* One loop per op over element type T, computed in float_t_ (the type the macro sees). */
#define BINARY_OPS(T, LOAD, STORE)                                                                 \
  switch (g->op) {                                                                                 \
  case BE_ADD:                                                                                     \
    ROWS_LOOP(T, LOAD, STORE, x + y);                                                              \
    return 0;                                                                                      \
  case BE_SUB:                                                                                     \
    ROWS_LOOP(T, LOAD, STORE, x - y);                                                              \
    return 0;                                                                                      \
  case BE_MUL:                                                                                     \
    ROWS_LOOP(T, LOAD, STORE, x *y);                                                               \
    return 0;                                                                                      \
  case BE_DIV:                                                                                     \
    ROWS_LOOP(T, LOAD, STORE, x / y);                                                              \
    return 0;                                                                                      \
  case BE_MAXIMUM:                                                                                 \
    ROWS_LOOP(T, LOAD, STORE, MAXIMUM(x, y));                                                      \
    return 0;                                                                                      \
  case BE_MINIMUM:                                                                                 \
    ROWS_LOOP(T, LOAD, STORE, MINIMUM(x, y));                                                      \
    return 0;                                                                                      \
  }                                                                                                \
  return ACCEL_EINVAL;

static int binary_f32(const be_binary_args *g, void *dst, const void *a, const void *b) {
  typedef float float_t_;
  BINARY_OPS(float, IDENTITY, IDENTITY)
}

static int binary_f64(const be_binary_args *g, void *dst, const void *a, const void *b) {
  typedef double float_t_;
  BINARY_OPS(double, IDENTITY, IDENTITY)
}

static int binary_f16(const be_binary_args *g, void *dst, const void *a, const void *b) {
  typedef float float_t_;
  BINARY_OPS(uint16_t, be_f16_to_f32, be_f32_to_f16)
}

static int binary_bf16(const be_binary_args *g, void *dst, const void *a, const void *b) {
  typedef float float_t_;
  BINARY_OPS(uint16_t, be_bf16_to_f32, be_f32_to_bf16)
}

int be_cpu_binary(uint32_t dtype, const be_binary_args *g, void *dst, const void *a,
                  const void *b) {
  switch (dtype) {
  case ACCEL_F32:
    return binary_f32(g, dst, a, b);
  case ACCEL_F64:
    return binary_f64(g, dst, a, b);
  case ACCEL_F16:
    return binary_f16(g, dst, a, b);
  case ACCEL_BF16:
    return binary_bf16(g, dst, a, b);
  default:
    return ACCEL_ENOTSUP;
  }
}
