/* accel — element types of buffers (included by accel.h; backends use it too). */
#ifndef ACCEL_DTYPE_H
#define ACCEL_DTYPE_H

typedef enum accel_dtype {
  ACCEL_F32 = 1,
  ACCEL_U32 = 2,
  ACCEL_F64 = 3,
  ACCEL_F16 = 4,  /* IEEE 754 binary16 */
  ACCEL_BF16 = 5, /* bfloat16: the upper half of an f32 */
  ACCEL_I32 = 6,
  ACCEL_BOOL = 7 /* one byte, 0 or 1 (comparisons' results, where's condition) */
} accel_dtype;

#define ACCEL_DTYPE_MAX_ ACCEL_BOOL

/* A set of dtypes as bits (ACCEL_DTYPE_BIT(ACCEL_F32) | ...), as device info reports them. */
#define ACCEL_DTYPE_BIT(t) (1u << (unsigned)(t))

#endif
