/* Conversions between f32 and the 16-bit float types, bit-exact with CUDA's __float2half_rn,
 * __half2float, __float2bfloat16_rn and __bfloat162float: round to nearest, ties to even;
 * subnormals, infinities and NaN kept (a NaN stays a quiet NaN). Every backend that rounds
 * to f16 or bf16 on the host uses these, so the same f32 gives the same bits everywhere.
 * Pure and header-only: any thread, any layer (clients convert fill values with them). */
#ifndef BE_DTYPE_CONV_H
#define BE_DTYPE_CONV_H

#include <stdint.h>
#include <string.h>

#include "accel/dtype.h"

static inline uint32_t be_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float be_f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* bfloat16: the upper 16 bits of the f32, rounded to nearest even. */
static inline uint16_t be_f32_to_bf16(float f) {
  uint32_t u = be_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, make it quiet */
    return (uint16_t)((u >> 16) | 0x0040u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float be_bf16_to_f32(uint16_t h) {
  return be_f32_of_bits((uint32_t)h << 16);
}

/* IEEE binary16, rounded to nearest even (overflow to infinity, gradual underflow). */
static inline uint16_t be_f32_to_f16(float f) {
  uint32_t u = be_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) /* NaN */
    return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) /* rounds to 65520 or more: infinity */
    return (uint16_t)(sign | 0x7c00u);
  if (abs < 0x38800000u) { /* below 2^-14: a subnormal (or zero) of f16 */
    if (abs < 0x33000000u) /* at most 2^-25: rounds to zero (a tie rounds to even 0) */
      return sign;
    uint32_t exp = abs >> 23, mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp; /* 14..24: the value is mant * 2^(exp - 150) */
    uint32_t half = mant >> shift, rest = mant & ((1u << shift) - 1u), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1u)))
      half++;
    return (uint16_t)(sign | half);
  }
  uint32_t r = abs - 0x38000000u; /* rebias the exponent: 127 - 15 = 112 = 0x70 << 23 */
  r = r + 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

static inline float be_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) /* infinity or NaN */
    return be_f32_of_bits(sign | 0x7f800000u | (mant << 13));
  if (exp != 0)
    return be_f32_of_bits(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0)
    return be_f32_of_bits(sign);
  float v = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24, exact */
  return sign ? -v : v;
}

/* d as an f32 rounded to odd: truncated toward zero, its last bit set where that dropped
 * anything (NaN and infinities kept; above FLT_MAX: FLT_MAX, odd). An f32 rounded so, then
 * to f16 or bf16 to nearest even, gives what d rounded once would: f32 keeps more than two
 * bits beyond either (the classic round-to-odd argument). So F64, I32 and U32 reach F16 and
 * BF16 with one rounding (ops/args.h be_convert_args; the GPU kernels do the same). */
static inline float be_f64_to_f32_odd(double d) {
  float f = (float)d; /* to nearest */
  if (d != d || (double)f == d)
    return f;
  uint32_t u = be_f32_bits(f);
  if (f > d ? f > 0 : f < 0) /* rounded away from zero (or to an infinity): one step back */
    u -= 1u;
  return be_f32_of_bits(u | 1u);
}

/* Bytes per element of a dtype (0 for an unknown one). */
static inline uint32_t be_dtype_size(uint32_t dtype) {
  switch (dtype) {
  case ACCEL_F64:
    return 8;
  case ACCEL_F32:
  case ACCEL_U32:
  case ACCEL_I32:
    return 4;
  case ACCEL_F16:
  case ACCEL_BF16:
    return 2;
  case ACCEL_BOOL:
    return 1;
  default:
    return 0;
  }
}

#endif
