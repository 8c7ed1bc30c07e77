/* The opencl backend's built-in kernels (OpenCL C 1.2), compiled at run time once per device
 * (program.c caches the binary). BE_FP64 is defined when the device has cl_khr_fp64; the F64
 * kernels exist only then. 16-bit types are storage only (F16 through vload_half and
 * vstore_half_rte, which are core OpenCL and need no cl_khr_fp16; BF16 as ushort), computed
 * in f32 and rounded to nearest even, as ops/dtype_conv.h does on the host.
 *
 * Offsets and counts are in elements of the buffer's type (ulong). No contraction into fused
 * multiply-adds: the RNG's uniforms must round each step as the CPU backend does
 * (backends/cpu/philox.h), bit for bit. */
#pragma OPENCL FP_CONTRACT OFF
#ifdef BE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* ---- 16-bit storage ---------------------------------------------------------------------- */

inline ushort f32_to_bf16(float f)
{
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, make it quiet */
    return (ushort)((u >> 16) | 0x0040u);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float bf16_to_f32(ushort h)
{
  return as_float((uint)h << 16);
}

#define LOAD_F32(p, i) ((p)[i])
#define STORE_F32(p, i, v) ((p)[i] = (v))
#define LOAD_F64(p, i) ((p)[i])
#define STORE_F64(p, i, v) ((p)[i] = (v))
#define LOAD_F16(p, i) vload_half((i), (p))
#define STORE_F16(p, i, v) vstore_half_rte((v), (i), (p))
#define LOAD_BF16(p, i) bf16_to_f32((p)[i])
#define STORE_BF16(p, i, v) ((p)[i] = f32_to_bf16(v))

/* ---- Philox4x32-10 (philox.h: cuRAND's stream convention) -------------------------------- */

inline uint4 philox(ulong block, uint k0, uint k1)
{
  uint4 c = (uint4)((uint)block, (uint)(block >> 32), 0u, 0u);
  for (int r = 0; r < 10; r++) {
    uint lo0 = 0xD2511F53u * c.x, hi0 = mul_hi(0xD2511F53u, c.x);
    uint lo1 = 0xCD9E8D57u * c.z, hi1 = mul_hi(0xCD9E8D57u, c.z);
    c = (uint4)(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

inline uint word_of(uint4 w, uint k)
{
  return k == 0 ? w.x : k == 1 ? w.y : k == 2 ? w.z : w.w;
}

/* cuRAND's _curand_uniform: two float roundings. */
inline float uniform_f32(uint x)
{
  float f = (float)x;
  f = f * 0x1p-32f;
  return f + 0x1p-33f;
}

/* cuRAND's _curand_box_muller (philox.h): element 0 sin, element 1 cos. */
inline float normal_f32(uint x, uint y, uint k)
{
  const float K = 0x1p-32f * 6.2831855f;
  float u = uniform_f32(x);
  float v = (float)y * K;
  v = v + K / 2.0f;
  float r = sqrt(-2.0f * log(u));
  return k == 0 ? sin(v) * r : cos(v) * r;
}

/* Work item g covers block b = offset / EPB + g of the output's stream (EPB elements per
 * block): stream elements b * EPB + k inside [offset, offset + count) land at dst[off + s -
 * offset]. */
#define RNG_PROLOGUE(EPB)                                                                     \
  ulong b = offset / (EPB) + get_global_id(0);                                              \
  uint4 w = philox(b, k0, k1);                                                               \
  for (uint k = 0; k < (EPB); k++) {                                                         \
    ulong s = b * (EPB) + k;                                                                 \
    if (s < offset || s - offset >= count)                                                   \
      continue;                                                                              \
    ulong i = off + (s - offset);

__kernel void be_rng_bits(__global uint *dst, ulong off, ulong offset, ulong count, uint k0,
                          uint k1)
{
  RNG_PROLOGUE(4)
    dst[i] = word_of(w, k);
  }
}

#define RNG_UNIFORM16(NAME, T, STORE)                                                          \
  __kernel void NAME(__global T *dst, ulong off, ulong offset, ulong count, uint k0, uint k1) \
  {                                                                                          \
    RNG_PROLOGUE(4)                                                                          \
      STORE(dst, i, uniform_f32(word_of(w, k)));                                             \
    }                                                                                        \
  }

RNG_UNIFORM16(be_rng_uniform_f32, float, STORE_F32)
RNG_UNIFORM16(be_rng_uniform_f16, half, STORE_F16)
RNG_UNIFORM16(be_rng_uniform_bf16, ushort, STORE_BF16)

/* Normals: the pair (2j, 2j + 1) of words gives elements 2j (sin) and 2j + 1 (cos); mean and
 * stddev were rounded to float by the host. */
#define RNG_NORMAL16(NAME, T, STORE)                                                           \
  __kernel void NAME(__global T *dst, ulong off, ulong offset, ulong count, uint k0, uint k1,  \
                     float mean, float sd)                                                   \
  {                                                                                          \
    RNG_PROLOGUE(4)                                                                          \
      float z = normal_f32(word_of(w, k & 2u), word_of(w, (k & 2u) + 1u), k & 1u);           \
      z = z * sd;                                                                            \
      STORE(dst, i, z + mean);                                                               \
    }                                                                                        \
  }

RNG_NORMAL16(be_rng_normal_f32, float, STORE_F32)
RNG_NORMAL16(be_rng_normal_f16, half, STORE_F16)
RNG_NORMAL16(be_rng_normal_bf16, ushort, STORE_BF16)

#ifdef BE_FP64
/* cuRAND's _curand_uniform_double_hq: z = w0 ^ (w1 << 21) < 2^53, exact in double. */
inline double uniform53(uint w0, uint w1, double scale)
{
  ulong z = (ulong)w0 ^ ((ulong)w1 << 21);
  double d = (double)z * scale;
  return d + scale / 2.0;
}

/* Element e (stream element o + e) takes words 2(o + e), 2(o + e) + 1: two per block. */
__kernel void be_rng_uniform_f64(__global double *dst, ulong off, ulong offset, ulong count,
                                 uint k0, uint k1)
{
  RNG_PROLOGUE(2)
    dst[i] = uniform53(word_of(w, 2 * k), word_of(w, 2 * k + 1), 0x1p-53);
  }
}

/* Pair j (elements 2j, 2j + 1) from block j; sinpi/cospi keep accuracy near their zeros. */
__kernel void be_rng_normal_f64(__global double *dst, ulong off, ulong offset, ulong count,
                                uint k0, uint k1, double mean, double sd)
{
  RNG_PROLOGUE(2)
    double u = uniform53(w.x, w.y, 0x1p-53), v = uniform53(w.z, w.w, 0x1p-52);
    double r = sqrt(-2.0 * log(u));
    double z = k == 0 ? r * sinpi(v) : r * cospi(v);
    z = z * sd;
    dst[i] = z + mean;
  }
}
#endif

/* ---- blas vector ops ----------------------------------------------------------------------- */

#define VECTOR_OPS(SUF, T)                                                                     \
  __kernel void be_axpy_##SUF(ulong n, T alpha, __global const T *x, ulong xo, __global T *y,   \
                              ulong yo)                                                      \
  {                                                                                          \
    ulong i = get_global_id(0);                                                              \
    if (i < n) {                                                                             \
      T ax = alpha * x[xo + i];                                                              \
      y[yo + i] = ax + y[yo + i];                                                            \
    }                                                                                        \
  }                                                                                          \
  __kernel void be_scal_##SUF(ulong n, T alpha, __global T *x, ulong xo)                      \
  {                                                                                          \
    ulong i = get_global_id(0);                                                              \
    if (i < n)                                                                               \
      x[xo + i] = alpha * x[xo + i];                                                         \
  }                                                                                          \
  /* One work-group (local size a power of two, at most 256): strided partial sums, then a  \
   * tree in local memory. */                                                               \
  __kernel void be_dot_##SUF(ulong n, __global const T *x, ulong xo, __global const T *y,     \
                             ulong yo, __global T *r, ulong ro)                              \
  {                                                                                          \
    __local T part[256];                                                                     \
    uint l = get_local_id(0), ls = get_local_size(0);                                        \
    T s = 0;                                                                                 \
    for (ulong i = l; i < n; i += ls) {                                                      \
      T p = x[xo + i] * y[yo + i];                                                           \
      s = s + p;                                                                             \
    }                                                                                        \
    part[l] = s;                                                                             \
    barrier(CLK_LOCAL_MEM_FENCE);                                                            \
    for (uint h = ls / 2; h > 0; h /= 2) {                                                   \
      if (l < h)                                                                             \
        part[l] = part[l] + part[l + h];                                                     \
      barrier(CLK_LOCAL_MEM_FENCE);                                                          \
    }                                                                                        \
    if (l == 0)                                                                              \
      r[ro] = part[0];                                                                       \
  }

VECTOR_OPS(f32, float)
#ifdef BE_FP64
VECTOR_OPS(f64, double)
#endif

/* ---- nn: element-wise ops and row-wise softmax (C = compute type) ------------------------ */

inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp(-x)); }
inline float relu_f(float x) { return x > 0.0f ? x : 0.0f; }
inline float tanh_f(float x) { return tanh(x); }
inline float exp_f(float x) { return exp(x); }
inline float log_f(float x) { return log(x); }
inline float sqrt_f(float x) { return sqrt(x); }
inline float abs_f(float x) { return fabs(x); }
#ifdef BE_FP64
inline double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
inline double relu_d(double x) { return x > 0.0 ? x : 0.0; }
inline double tanh_d(double x) { return tanh(x); }
inline double exp_d(double x) { return exp(x); }
inline double log_d(double x) { return log(x); }
inline double sqrt_d(double x) { return sqrt(x); }
inline double abs_d(double x) { return fabs(x); }
#endif

#define UNARY(NAME, T, C, LOAD, STORE, FN)                                                     \
  __kernel void NAME(__global T *dst, ulong dso, __global const T *src, ulong so, ulong n)     \
  {                                                                                          \
    ulong i = get_global_id(0);                                                              \
    if (i < n) {                                                                             \
      C v = LOAD(src, so + i);                                                               \
      STORE(dst, dso + i, FN(v));                                                            \
    }                                                                                        \
  }

/* One work item per row: max, sum of exp(x - max), then each exp(x - max) / sum (in place
 * too: an element is read before it is written). */
#define SOFTMAX(NAME, T, C, LOAD, STORE)                                                       \
  __kernel void NAME(__global T *dst, ulong dso, __global const T *src, ulong so, ulong rows,  \
                     ulong cols)                                                             \
  {                                                                                          \
    ulong r = get_global_id(0);                                                              \
    if (r >= rows)                                                                           \
      return;                                                                                \
    ulong s0 = so + r * cols, d0 = dso + r * cols;                                           \
    C mx = LOAD(src, s0);                                                                    \
    for (ulong j = 1; j < cols; j++)                                                         \
      mx = fmax(mx, (C)LOAD(src, s0 + j));                                                   \
    C sum = 0;                                                                               \
    for (ulong j = 0; j < cols; j++)                                                         \
      sum += exp((C)LOAD(src, s0 + j) - mx);                                                 \
    for (ulong j = 0; j < cols; j++) {                                                       \
      C e = exp((C)LOAD(src, s0 + j) - mx);                                                  \
      STORE(dst, d0 + j, e / sum);                                                           \
    }                                                                                        \
  }

#define NN_OPS(SUF, T, C, LOAD, STORE, F)                                                      \
  UNARY(be_sigmoid_##SUF, T, C, LOAD, STORE, sigmoid_##F)                                    \
  UNARY(be_relu_##SUF, T, C, LOAD, STORE, relu_##F)                                          \
  UNARY(be_tanh_##SUF, T, C, LOAD, STORE, tanh_##F)                                          \
  UNARY(be_exp_##SUF, T, C, LOAD, STORE, exp_##F)                                            \
  UNARY(be_log_##SUF, T, C, LOAD, STORE, log_##F)                                            \
  UNARY(be_sqrt_##SUF, T, C, LOAD, STORE, sqrt_##F)                                          \
  UNARY(be_abs_##SUF, T, C, LOAD, STORE, abs_##F)                                            \
  SOFTMAX(be_softmax_##SUF, T, C, LOAD, STORE)

NN_OPS(f32, float, float, LOAD_F32, STORE_F32, f)
NN_OPS(f16, half, float, LOAD_F16, STORE_F16, f)
NN_OPS(bf16, ushort, float, LOAD_BF16, STORE_BF16, f)
#ifdef BE_FP64
NN_OPS(f64, double, double, LOAD_F64, STORE_F64, d)
#endif

/* Element-wise of two inputs, broadcast by their strides (ops/args.h be_binary_args): dst is
 * rows x cols, contiguous; input element (r, c) at r * rs + c * cs. The op (be_binary_op) is
 * an argument; MAXIMUM and MINIMUM propagate NaN. f32 quotients are correctly rounded where
 * the device can build them so (program.c asks for it); else they are the device's own. */
#define BINARY(NAME, T, C, LOAD, STORE)                                                        \
  __kernel void NAME(__global T *dst, ulong dso, __global const T *a, ulong ao,                \
                     __global const T *b, ulong bo, int op, ulong rows, ulong cols, ulong ars, \
                     ulong acs, ulong brs, ulong bcs)                                          \
  {                                                                                          \
    ulong i = get_global_id(0);                                                              \
    if (i >= rows * cols)                                                                    \
      return;                                                                                \
    ulong r = i / cols, c = i - r * cols;                                                    \
    C x = LOAD(a, ao + r * ars + c * acs), y = LOAD(b, bo + r * brs + c * bcs), v;           \
    switch (op) {                                                                            \
    case 0: v = x + y; break;                                                                \
    case 1: v = x - y; break;                                                                \
    case 2: v = x * y; break;                                                                \
    case 3: v = x / y; break;                                                                \
    case 4: v = x > y || isnan(x) ? x : y; break;                                            \
    default: v = x < y || isnan(x) ? x : y; break;                                           \
    }                                                                                        \
    STORE(dst, dso + i, v);                                                                  \
  }

BINARY(be_binary_f32, float, float, LOAD_F32, STORE_F32)
BINARY(be_binary_f16, half, float, LOAD_F16, STORE_F16)
BINARY(be_binary_bf16, ushort, float, LOAD_BF16, STORE_BF16)
#ifdef BE_FP64
BINARY(be_binary_f64, double, double, LOAD_F64, STORE_F64)
#endif

/* I32 and U32 arithmetic (be_binary_op 0 add, 1 subtract, 2 multiply, 4 maximum, 5 minimum;
 * no divide) and bitwise ops (12 and, 13 or, 14 xor): add, subtract, multiply and the bitwise
 * ops in uint, wrapping as numpy's does, the bits taken back as T; maximum and minimum in T. */
#define BINARY_INT(NAME, T, AS_T)                                                              \
  __kernel void NAME(__global T *dst, ulong dso, __global const T *a, ulong ao,                \
                     __global const T *b, ulong bo, int op, ulong rows, ulong cols, ulong ars, \
                     ulong acs, ulong brs, ulong bcs)                                          \
  {                                                                                          \
    ulong i = get_global_id(0);                                                              \
    if (i >= rows * cols)                                                                    \
      return;                                                                                \
    ulong r = i / cols, c = i - r * cols;                                                    \
    T x = a[ao + r * ars + c * acs], y = b[bo + r * brs + c * bcs], v;                       \
    switch (op) {                                                                            \
    case 0: v = AS_T(as_uint(x) + as_uint(y)); break;                                        \
    case 1: v = AS_T(as_uint(x) - as_uint(y)); break;                                        \
    case 2: v = AS_T(as_uint(x) * as_uint(y)); break;                                        \
    case 4: v = x > y ? x : y; break;                                                        \
    case 12: v = AS_T(as_uint(x) & as_uint(y)); break;                                       \
    case 13: v = AS_T(as_uint(x) | as_uint(y)); break;                                       \
    case 14: v = AS_T(as_uint(x) ^ as_uint(y)); break;                                       \
    default: v = x < y ? x : y; break;                                                       \
    }                                                                                        \
    dst[dso + i] = v;                                                                        \
  }

BINARY_INT(be_binary_i32, int, as_int)
BINARY_INT(be_binary_u32, uint, as_uint)

/* BOOL: the logical ops (12 and, 13 or, 14 xor) on each byte's truth (any byte but 0 is
 * true), one byte 0 or 1 out. */
__kernel void be_binary_bool(__global uchar *dst, ulong dso, __global const uchar *a, ulong ao,
                             __global const uchar *b, ulong bo, int op, ulong rows, ulong cols,
                             ulong ars, ulong acs, ulong brs, ulong bcs)
{
  ulong i = get_global_id(0);
  if (i >= rows * cols)
    return;
  ulong r = i / cols, c = i - r * cols;
  uint x = a[ao + r * ars + c * acs] != 0, y = b[bo + r * brs + c * bcs] != 0;
  dst[dso + i] = (uchar)(op == 12 ? x & y : op == 13 ? x | y : x ^ y);
}

/* Comparisons (be_binary_op 6 equal .. 11 greater_equal): IEEE's (NaN only not-equal), one
 * byte 0 or 1 per element. */
#define COMPARE(NAME, T, C, LOAD)                                                              \
  __kernel void NAME(__global uchar *dst, ulong dso, __global const T *a, ulong ao,            \
                     __global const T *b, ulong bo, int op, ulong rows, ulong cols, ulong ars, \
                     ulong acs, ulong brs, ulong bcs)                                          \
  {                                                                                          \
    ulong i = get_global_id(0);                                                              \
    if (i >= rows * cols)                                                                    \
      return;                                                                                \
    ulong r = i / cols, c = i - r * cols;                                                    \
    C x = LOAD(a, ao + r * ars + c * acs), y = LOAD(b, bo + r * brs + c * bcs);              \
    bool v;                                                                                  \
    switch (op) {                                                                            \
    case 6: v = x == y; break;                                                               \
    case 7: v = x != y; break;                                                               \
    case 8: v = x < y; break;                                                                \
    case 9: v = x <= y; break;                                                               \
    case 10: v = x > y; break;                                                               \
    default: v = x >= y; break;                                                              \
    }                                                                                        \
    dst[dso + i] = v ? 1 : 0;                                                                \
  }

#define LOAD_INT(p, i) ((p)[i])
COMPARE(be_compare_f32, float, float, LOAD_F32)
COMPARE(be_compare_f16, half, float, LOAD_F16)
COMPARE(be_compare_bf16, ushort, float, LOAD_BF16)
COMPARE(be_compare_i32, int, int, LOAD_INT)
COMPARE(be_compare_u32, uint, uint, LOAD_INT)
#ifdef BE_FP64
COMPARE(be_compare_f64, double, double, LOAD_F64)
#endif

/* dst = cond ? a : b (cond bytes, nonzero true), the elements moved as bits. */
#define WHERE(NAME, T)                                                                         \
  __kernel void NAME(__global T *dst, ulong dso, __global const uchar *cond, ulong co,         \
                     __global const T *a, ulong ao, __global const T *b, ulong bo, ulong rows, \
                     ulong cols, ulong crs, ulong ccs, ulong ars, ulong acs, ulong brs,        \
                     ulong bcs)                                                                \
  {                                                                                          \
    ulong i = get_global_id(0);                                                              \
    if (i >= rows * cols)                                                                    \
      return;                                                                                \
    ulong r = i / cols, c = i - r * cols;                                                    \
    dst[dso + i] = cond[co + r * crs + c * ccs] ? a[ao + r * ars + c * acs]                  \
                                                : b[bo + r * brs + c * bcs];                 \
  }

WHERE(be_where_u8, uchar)
WHERE(be_where_u16, ushort)
WHERE(be_where_u32, uint)
WHERE(be_where_u64, ulong)

/* Reductions (ops/args.h be_reduction_args): one work-group per output (local size a power
 * of two up to 256), its work items folding a strided share in C, then a tree in local
 * memory. Element k of output o lies at o * os + (k / n2) * s1 + (k % n2) * s2 (kernels.c).
 * op: 0 sum, 1 max, 2 min, 3 mean; max and min let NaN win (x > NaN is false, so it stays). */
#define RED_FOLD(op, m, x)                                                                     \
  ((op) == 1 ? ((x) > (m) || isnan(x) ? (x) : (m))                                           \
             : (op) == 2 ? ((x) < (m) || isnan(x) ? (x) : (m)) : (m) + (x))

#define REDUCE(NAME, T, C, LOAD, STORE)                                                        \
  __kernel void NAME(__global T *dst, ulong dso, __global const T *src, ulong so, int op,      \
                     ulong nout, ulong len, ulong os, ulong n2, ulong s1, ulong s2)          \
  {                                                                                          \
    __local C part[256];                                                                     \
    ulong o = get_group_id(0);                                                               \
    uint l = get_local_id(0), ls = get_local_size(0);                                        \
    if (o >= nout)                                                                           \
      return;                                                                                \
    C v = op == 1 ? (C)(-INFINITY) : op == 2 ? (C)INFINITY : (C)0;                           \
    ulong base = so + o * os;                                                                \
    for (ulong k = l; k < len; k += ls) {                                                    \
      ulong k1 = n2 == len ? 0 : k / n2, k2 = k - k1 * n2;                                   \
      C x = LOAD(src, base + k1 * s1 + k2 * s2);                                             \
      v = RED_FOLD(op, v, x);                                                                \
    }                                                                                        \
    part[l] = v;                                                                             \
    barrier(CLK_LOCAL_MEM_FENCE);                                                            \
    for (uint h = ls / 2; h > 0; h /= 2) {                                                   \
      if (l < h)                                                                             \
        part[l] = RED_FOLD(op, part[l], part[l + h]);                                        \
      barrier(CLK_LOCAL_MEM_FENCE);                                                          \
    }                                                                                        \
    if (l == 0)                                                                              \
      STORE(dst, dso + o, op == 3 ? part[0] / (C)len : part[0]);                             \
  }

REDUCE(be_reduce_f32, float, float, LOAD_F32, STORE_F32)
REDUCE(be_reduce_f16, half, float, LOAD_F16, STORE_F16)
REDUCE(be_reduce_bf16, ushort, float, LOAD_BF16, STORE_BF16)
#ifdef BE_FP64
REDUCE(be_reduce_f64, double, double, LOAD_F64, STORE_F64)
#endif

/* ---- gemm's C = beta C (k = 0 or alpha = 0; beta = 0 writes zeros, NaN or not) ---------- */

#define SCALE(NAME, T, C, LOAD, STORE)                                                         \
  __kernel void NAME(__global T *c, ulong co, ulong m, ulong n, ulong ldc, ulong stride,       \
                     C beta)                                                                 \
  {                                                                                          \
    ulong i = get_global_id(0), j = get_global_id(1), b = get_global_id(2);                  \
    if (i >= m || j >= n)                                                                    \
      return;                                                                                \
    ulong at = co + b * stride + j * ldc + i;                                                \
    C v = beta == (C)0 ? (C)0 : beta * (C)LOAD(c, at);                                       \
    STORE(c, at, v);                                                                         \
  }

SCALE(be_scale_f32, float, float, LOAD_F32, STORE_F32)
SCALE(be_scale_f16, half, float, LOAD_F16, STORE_F16)
#ifdef BE_FP64
SCALE(be_scale_f64, double, double, LOAD_F64, STORE_F64)
#endif

/* Convert (ops/args.h be_convert_args): one kernel for every pair of dtypes (codes of
 * accel_dtype: 1 F32, 2 U32, 3 F64, 4 F16, 5 BF16, 6 I32, 7 BOOL; same_es the element size
 * when they are the same: a copy of bits). An element is held exactly: I32, U32 and BOOL in a
 * long, F32, F16 and BF16 in a float, F64 in a double; the store rounds once (F16 and BF16
 * from a long or a double through an f32 rounded to odd, as ops/dtype_conv.h
 * be_f64_to_f32_odd), integers to integers wrap, floats to integers truncate and saturate
 * (NaN 0). Offsets in bytes. */
inline float f32_odd_of_long(long l)
{
  float f = (float)l; /* to nearest even */
  long back = (long)f;  /* |f| <= 2^32: exact */
  if (back == l)
    return f;
  uint u = as_uint(f);
  if (back > l ? f > 0.0f : f < 0.0f)
    u -= 1u;
  return as_float(u | 1u);
}

#ifdef BE_FP64
inline float f32_odd_of_double(double d)
{
  float f = (float)d;
  if (isnan(d) || (double)f == d)
    return f;
  uint u = as_uint(f);
  if ((double)f > d ? f > 0.0f : f < 0.0f)
    u -= 1u;
  return as_float(u | 1u);
}
#endif

inline int sat_i32(float f)
{
  return isnan(f) ? 0 : f >= 2147483648.0f ? INT_MAX : f < -2147483648.0f ? INT_MIN : (int)f;
}

inline uint sat_u32(float f)
{
  return isnan(f) ? 0u : f >= 4294967296.0f ? UINT_MAX : f <= -1.0f ? 0u : (uint)f;
}

__kernel void be_convert(__global uchar *dst, ulong dso, __global const uchar *src, ulong so,
                         int ddt, int sdt, int same_es, ulong rows, ulong cols, ulong rs,
                         ulong cs)
{
  ulong i = get_global_id(0);
  if (i >= rows * cols)
    return;
  ulong r = i / cols, c = i - r * cols, k = r * rs + c * cs;
  __global const uchar *s = src + so;
  __global uchar *d = dst + dso;
  if (same_es != 0) {
    if (same_es == 1)
      d[i] = s[k];
    else if (same_es == 2)
      ((__global ushort *)d)[i] = ((__global const ushort *)s)[k];
    else if (same_es == 4)
      ((__global uint *)d)[i] = ((__global const uint *)s)[k];
    else
      ((__global ulong *)d)[i] = ((__global const ulong *)s)[k];
    return;
  }
  int kind = 0; /* 0: the float f, 1: the long l, 2: the double x */
  float f = 0.0f;
  long l = 0;
#ifdef BE_FP64
  double x = 0.0;
#endif
  switch (sdt) {
  case 1:
    f = ((__global const float *)s)[k];
    break;
  case 4:
    f = vload_half(k, (__global const half *)s);
    break;
  case 5:
    f = bf16_to_f32(((__global const ushort *)s)[k]);
    break;
  case 6:
    kind = 1;
    l = ((__global const int *)s)[k];
    break;
  case 2:
    kind = 1;
    l = ((__global const uint *)s)[k];
    break;
  case 7:
    kind = 1;
    l = s[k] != 0;
    break;
#ifdef BE_FP64
  case 3:
    kind = 2;
    x = ((__global const double *)s)[k];
    break;
#endif
  default:
    return;
  }
  switch (ddt) {
  case 1:
#ifdef BE_FP64
    if (kind == 2) {
      ((__global float *)d)[i] = (float)x;
      break;
    }
#endif
    ((__global float *)d)[i] = kind == 1 ? (float)l : f;
    break;
  case 4:
  case 5: {
    float o = kind == 1 ? f32_odd_of_long(l) : f;
#ifdef BE_FP64
    if (kind == 2)
      o = f32_odd_of_double(x);
#endif
    if (ddt == 4)
      vstore_half_rte(o, i, (__global half *)d);
    else
      ((__global ushort *)d)[i] = f32_to_bf16(o);
    break;
  }
  case 6:
  case 2: {
    uint u;
#ifdef BE_FP64
    if (kind == 2) {
      double t = trunc(x);
      if (ddt == 6)
        u = isnan(x)                ? 0u
            : x >= 2147483648.0     ? (uint)INT_MAX
            : x <= -2147483649.0    ? (uint)INT_MIN
                                    : (uint)(int)t;
      else
        u = isnan(x) ? 0u : x >= 4294967296.0 ? UINT_MAX : x <= -1.0 ? 0u : (uint)t;
      ((__global uint *)d)[i] = u;
      break;
    }
#endif
    if (kind == 1)
      u = (uint)l;
    else
      u = ddt == 6 ? (uint)sat_i32(f) : sat_u32(f);
    ((__global uint *)d)[i] = u;
    break;
  }
  case 7: {
    bool t = kind == 1 ? l != 0 : f != 0.0f;
#ifdef BE_FP64
    if (kind == 2)
      t = x != 0.0;
#endif
    d[i] = t ? 1 : 0;
    break;
  }
#ifdef BE_FP64
  case 3:
    ((__global double *)d)[i] = kind == 2 ? x : kind == 1 ? (double)l : (double)f;
    break;
#endif
  default:
    break;
  }
}

/* A kernel that does nothing: a command whose completion is all there is to wait for. */
__kernel void be_null(void)
{
}
