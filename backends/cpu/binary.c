/* The broadcasting element-wise ops of two inputs (cpu_kernels.h: be_cpu_binary) and the select
 * of where (be_cpu_where). One loop per dtype and op, so the compiler sees a plain loop over a
 * row: the inputs' column strides are 0 (broadcast) or 1 but for transposes. */
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
  default:                                                                                         \
    return ACCEL_EINVAL;                                                                           \
  }

/* Integers: add, subtract and multiply in the unsigned type U (wrapping, as numpy's int32 and
 * uint32 do, without signed overflow), maximum and minimum in T itself, the bitwise ops on U's
 * bits; DIV is refused before (be_binary_dtype_ok). */
#define INT_OPS(T, U)                                                                              \
  switch (g->op) {                                                                                 \
  case BE_ADD:                                                                                     \
    ROWS_LOOP(T, IDENTITY, IDENTITY, (T)((U)x + (U)y));                                            \
    return 0;                                                                                      \
  case BE_SUB:                                                                                     \
    ROWS_LOOP(T, IDENTITY, IDENTITY, (T)((U)x - (U)y));                                            \
    return 0;                                                                                      \
  case BE_MUL:                                                                                     \
    ROWS_LOOP(T, IDENTITY, IDENTITY, (T)((U)x * (U)y));                                            \
    return 0;                                                                                      \
  case BE_MAXIMUM:                                                                                 \
    ROWS_LOOP(T, IDENTITY, IDENTITY, x > y ? x : y);                                               \
    return 0;                                                                                      \
  case BE_MINIMUM:                                                                                 \
    ROWS_LOOP(T, IDENTITY, IDENTITY, x < y ? x : y);                                               \
    return 0;                                                                                      \
  case BE_BITAND:                                                                                  \
    ROWS_LOOP(T, IDENTITY, IDENTITY, (T)((U)x & (U)y));                                            \
    return 0;                                                                                      \
  case BE_BITOR:                                                                                   \
    ROWS_LOOP(T, IDENTITY, IDENTITY, (T)((U)x | (U)y));                                            \
    return 0;                                                                                      \
  case BE_BITXOR:                                                                                  \
    ROWS_LOOP(T, IDENTITY, IDENTITY, (T)((U)x ^ (U)y));                                            \
    return 0;                                                                                      \
  default:                                                                                         \
    return ACCEL_EINVAL;                                                                           \
  }

/* Comparisons: the inputs of T, loaded into float_t_, the answer 0 or 1 in a byte. */
#define CMP_LOOP(T, LOAD, EXPR)                                                                    \
  for (uint64_t r = 0; r < g->rows; r++) {                                                         \
    uint8_t *out = (uint8_t *)dst + r * g->cols;                                                   \
    const T *pa = (const T *)a + r * g->a_rs, *pb = (const T *)b + r * g->b_rs;                    \
    for (uint64_t c = 0; c < g->cols; c++) {                                                       \
      float_t_ x = LOAD(pa[c * g->a_cs]), y = LOAD(pb[c * g->b_cs]);                               \
      out[c] = (uint8_t)(EXPR);                                                                    \
    }                                                                                              \
  }

#define COMPARE_OPS(T, LOAD)                                                                       \
  switch (g->op) {                                                                                 \
  case BE_EQUAL:                                                                                   \
    CMP_LOOP(T, LOAD, x == y);                                                                     \
    return 0;                                                                                      \
  case BE_NOT_EQUAL:                                                                               \
    CMP_LOOP(T, LOAD, x != y);                                                                     \
    return 0;                                                                                      \
  case BE_LESS:                                                                                    \
    CMP_LOOP(T, LOAD, x < y);                                                                      \
    return 0;                                                                                      \
  case BE_LESS_EQUAL:                                                                              \
    CMP_LOOP(T, LOAD, x <= y);                                                                     \
    return 0;                                                                                      \
  case BE_GREATER:                                                                                 \
    CMP_LOOP(T, LOAD, x > y);                                                                      \
    return 0;                                                                                      \
  case BE_GREATER_EQUAL:                                                                           \
    CMP_LOOP(T, LOAD, x >= y);                                                                     \
    return 0;                                                                                      \
  default:                                                                                         \
    return ACCEL_EINVAL;                                                                           \
  }

/* One function per dtype: the comparisons, else the arithmetic. */
#define BINARY_FN(name, T, C, LOAD, STORE, ARITH)                                                  \
  static int name(const be_binary_args *g, void *dst, const void *a, const void *b) {              \
    typedef C float_t_;                                                                            \
    if (be_binary_compares(g->op)) {                                                               \
      COMPARE_OPS(T, LOAD)                                                                         \
    }                                                                                              \
    ARITH                                                                                          \
  }

BINARY_FN(binary_f32, float, float, IDENTITY, IDENTITY, BINARY_OPS(float, IDENTITY, IDENTITY))
BINARY_FN(binary_f64, double, double, IDENTITY, IDENTITY, BINARY_OPS(double, IDENTITY, IDENTITY))
BINARY_FN(binary_f16, uint16_t, float, be_f16_to_f32, be_f32_to_f16,
          BINARY_OPS(uint16_t, be_f16_to_f32, be_f32_to_f16))
BINARY_FN(binary_bf16, uint16_t, float, be_bf16_to_f32, be_f32_to_bf16,
          BINARY_OPS(uint16_t, be_bf16_to_f32, be_f32_to_bf16))
BINARY_FN(binary_i32, int32_t, int32_t, IDENTITY, IDENTITY, INT_OPS(int32_t, uint32_t))
BINARY_FN(binary_u32, uint32_t, uint32_t, IDENTITY, IDENTITY, INT_OPS(uint32_t, uint32_t))

/* BOOL: the logical ops on each byte's truth (any byte but 0 is true), 0 or 1 out. */
#define TRUTH(v) ((v) != 0)

static int binary_bool(const be_binary_args *g, void *dst, const void *a, const void *b) {
  typedef uint8_t float_t_;
  switch (g->op) {
  case BE_BITAND:
    ROWS_LOOP(uint8_t, TRUTH, IDENTITY, (uint8_t)(x & y));
    return 0;
  case BE_BITOR:
    ROWS_LOOP(uint8_t, TRUTH, IDENTITY, (uint8_t)(x | y));
    return 0;
  case BE_BITXOR:
    ROWS_LOOP(uint8_t, TRUTH, IDENTITY, (uint8_t)(x ^ y));
    return 0;
  default:
    return ACCEL_EINVAL;
  }
}

int be_cpu_binary(uint32_t dtype, const be_binary_args *g, void *dst, const void *a,
                  const void *b) {
  if (!be_binary_dtype_ok(g->op, dtype))
    return dtype == ACCEL_I32 || dtype == ACCEL_U32 || dtype == ACCEL_BOOL ? ACCEL_EINVAL
                                                                           : ACCEL_ENOTSUP;
  switch (dtype) {
  case ACCEL_F32:
    return binary_f32(g, dst, a, b);
  case ACCEL_F64:
    return binary_f64(g, dst, a, b);
  case ACCEL_F16:
    return binary_f16(g, dst, a, b);
  case ACCEL_BF16:
    return binary_bf16(g, dst, a, b);
  case ACCEL_I32:
    return binary_i32(g, dst, a, b);
  case ACCEL_U32:
    return binary_u32(g, dst, a, b);
  case ACCEL_BOOL:
    return binary_bool(g, dst, a, b);
  default:
    return ACCEL_ENOTSUP;
  }
}

/* ---- where: a select of bits, one loop per element size ---- */

#define WHERE_LOOP(T)                                                                              \
  for (uint64_t r = 0; r < g->rows; r++) {                                                         \
    T *out = (T *)dst + r * g->cols;                                                               \
    const uint8_t *pc = (const uint8_t *)cond + r * g->c_rs;                                       \
    const T *pa = (const T *)a + r * g->a_rs, *pb = (const T *)b + r * g->b_rs;                    \
    for (uint64_t c = 0; c < g->cols; c++)                                                         \
      out[c] = pc[c * g->c_cs] ? pa[c * g->a_cs] : pb[c * g->b_cs];                                \
  }                                                                                                \
  return 0

static int where_u8(const be_where_args *g, void *dst, const void *cond, const void *a,
                    const void *b) {
  WHERE_LOOP(uint8_t);
}

static int where_u16(const be_where_args *g, void *dst, const void *cond, const void *a,
                     const void *b) {
  WHERE_LOOP(uint16_t);
}

static int where_u32(const be_where_args *g, void *dst, const void *cond, const void *a,
                     const void *b) {
  WHERE_LOOP(uint32_t);
}

static int where_u64(const be_where_args *g, void *dst, const void *cond, const void *a,
                     const void *b) {
  WHERE_LOOP(uint64_t);
}

int be_cpu_where(uint32_t dtype, const be_where_args *g, void *dst, const void *cond, const void *a,
                 const void *b) {
  switch (be_dtype_size(dtype)) {
  case 1:
    return where_u8(g, dst, cond, a, b);
  case 2:
    return where_u16(g, dst, cond, a, b);
  case 4:
    return where_u32(g, dst, cond, a, b);
  case 8:
    return where_u64(g, dst, cond, a, b);
  default:
    return ACCEL_ENOTSUP;
  }
}
