/* The cuda backend's built-in kernels, compiled by nvcc at build time into a fatbin (sm_90
 * code plus PTX) that the library embeds and loads with cuModuleLoadData (kernels.c launches
 * them). Device code only: names are extern "C" so the host looks them up as written.
 *
 * Every kernel runs a grid-stride loop over 64-bit indices, so any grid covers any size.
 * Results follow the cpu backend's formulas (backends/cpu/): RNG bits and uniforms bit for bit
 * (Philox4x32-10 in cuRAND's device-API stream convention, backends/cpu/philox.h), the rest within
 * the float error of the operation.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define BLOCK 256

/* ---- element types -------------------------------------------------------------------- *
 * F16 and BF16 travel as their bits (uint16_t wrapped in a tag type); every op on them
 * computes in f32 and rounds once at the store, to nearest even (__float2half_rn,
 * __float2bfloat16_rn: bit-exact with ops/dtype_conv.h on the host). */

struct f16 {
  uint16_t bits;
};
struct bf16 {
  uint16_t bits;
};

template <typename T> struct elem; /* the type an element computes in, load and store */

template <> struct elem<float> {
  typedef float calc;
  static __device__ __forceinline__ float load(float x) { return x; }
  static __device__ __forceinline__ float store(float x) { return x; }
};

template <> struct elem<double> {
  typedef double calc;
  static __device__ __forceinline__ double load(double x) { return x; }
  static __device__ __forceinline__ double store(double x) { return x; }
};

template <> struct elem<f16> {
  typedef float calc;
  static __device__ __forceinline__ float load(f16 x) {
    return __half2float(__ushort_as_half(x.bits));
  }
  static __device__ __forceinline__ f16 store(float x) {
    f16 r = {__half_as_ushort(__float2half_rn(x))};
    return r;
  }
};

template <> struct elem<bf16> {
  typedef float calc;
  static __device__ __forceinline__ float load(bf16 x) {
    return __bfloat162float(__ushort_as_bfloat16(x.bits));
  }
  static __device__ __forceinline__ bf16 store(float x) {
    bf16 r = {__bfloat16_as_ushort(__float2bfloat16_rn(x))};
    return r;
  }
};

/* One extern "C" kernel per element type of a template: NAME (f32), NAME_f64, NAME_f16,
 * NAME_bf16. */
#define BE_PER_TYPE(MACRO) MACRO(, float) MACRO(_f64, double) MACRO(_f16, f16) MACRO(_bf16, bf16)

/* ---- fill ----------------------------------------------------------------------------- */

/* dst[i] = value: 16-byte stores between a scalar head and tail. */
extern "C" __global__ void be_fill_u32(uint32_t *dst, uint64_t n, uint32_t value) {
  uint64_t tid = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  uint64_t head = ((16 - ((uintptr_t)dst & 15)) & 15) / 4;
  if (head > n)
    head = n;
  if (tid < head)
    dst[tid] = value;
  uint4 *body = (uint4 *)(dst + head);
  uint64_t nvec = (n - head) / 4;
  uint4 v = make_uint4(value, value, value, value);
  for (uint64_t i = tid; i < nvec; i += stride)
    body[i] = v;
  uint64_t done = head + nvec * 4;
  if (tid < n - done)
    dst[done + tid] = value;
}

/* dst[i] = value over 8-byte elements (aligned: offsets count whole elements). */
extern "C" __global__ void be_fill_u64(uint64_t *dst, uint64_t n, uint64_t value) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = value;
}

/* ---- Philox4x32-10 -------------------------------------------------------------------- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* Block q of the stream of key (k0, k1): counter {q mod 2^32, q >> 32, 0, 0}. */
__device__ __forceinline__ uint4 philox(uint64_t q, uint32_t k0, uint32_t k1) {
  uint32_t c0 = (uint32_t)q, c1 = (uint32_t)(q >> 32), c2 = 0, c3 = 0;
#pragma unroll
  for (int r = 0; r < 10; r++) {
    uint32_t hi0 = __umulhi(PHILOX_M0, c0), lo0 = PHILOX_M0 * c0;
    uint32_t hi1 = __umulhi(PHILOX_M1, c2), lo1 = PHILOX_M1 * c2;
    c0 = hi1 ^ c1 ^ k0;
    c2 = hi0 ^ c3 ^ k1;
    c1 = lo1;
    c3 = lo0;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  return make_uint4(c0, c1, c2, c3);
}

/* cuRAND's uniform: x * 2^-32 + 2^-33 (the product is exact, so contraction cannot change
 * it). */
__device__ __forceinline__ float uniform(uint32_t x) {
  return (float)x * 0x1p-32f + 0x1p-33f;
}

/* Box-Muller as backends/cpu/philox.c computes it, every rounding spelled out so that the
 * compiler contracts nothing the cpu does not: the values then differ from the cpu's only by
 * the device's sinf/cosf/logf (a few ulp). */
__device__ __forceinline__ float2 box_muller(uint32_t x, uint32_t y) {
  const float k = 0x1p-32f * 6.2831855f;
  float u = uniform(x);
  float v = __fadd_rn(__fmul_rn((float)y, k), k / 2.0f);
  float r = sqrtf(-2.0f * logf(u));
  float s, c;
  sincosf(v, &s, &c);
  return make_float2(__fmul_rn(s, r), __fmul_rn(c, r));
}

__device__ __forceinline__ float scaled(float z, float mean, float stddev) {
  return __fadd_rn(__fmul_rn(z, stddev), mean);
}

enum { DIST_BITS = 0, DIST_UNIFORM = 1, DIST_NORMAL = 2 };

template <int DIST> __device__ __forceinline__ uint4 convert(uint4 w, float mean, float stddev) {
  if (DIST == DIST_BITS)
    return w;
  if (DIST == DIST_UNIFORM)
    return make_uint4(__float_as_uint(uniform(w.x)), __float_as_uint(uniform(w.y)),
                      __float_as_uint(uniform(w.z)), __float_as_uint(uniform(w.w)));
  float2 a = box_muller(w.x, w.y), b = box_muller(w.z, w.w);
  return make_uint4(__float_as_uint(scaled(a.x, mean, stddev)),
                    __float_as_uint(scaled(a.y, mean, stddev)),
                    __float_as_uint(scaled(b.x, mean, stddev)),
                    __float_as_uint(scaled(b.y, mean, stddev)));
}

__device__ __forceinline__ uint32_t lane(uint4 v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

/* dst[i] = element (offset + i) of the stream, i < count. Thread-block b computes Philox
 * block q0 + b, whose words land at dst[4b - s .. 4b - s + 3] (s = offset mod 4): one
 * 16-byte store when that is aligned and inside, else word by word. Normals pair words
 * (2m, 2m + 1), which share a block because the offset is even (checked by the host). */
template <int DIST>
__device__ void rng(uint32_t *dst, uint64_t count, uint64_t offset, uint32_t k0, uint32_t k1,
                    float mean, float stddev) {
  uint64_t s = offset & 3, q0 = offset >> 2, nb = (s + count + 3) >> 2;
  bool vec = (((uintptr_t)dst >> 2) & 3) == s && ((uintptr_t)dst & 3) == 0;
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t b = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; b < nb; b += stride) {
    uint4 out = convert<DIST>(philox(q0 + b, k0, k1), mean, stddev);
    int64_t i0 = (int64_t)(4 * b) - (int64_t)s;
    if (vec && i0 >= 0 && (uint64_t)i0 + 4 <= count) {
      *(uint4 *)(dst + i0) = out;
      continue;
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
      int64_t i = i0 + j;
      if (i >= 0 && (uint64_t)i < count)
        dst[i] = lane(out, j);
    }
  }
}

extern "C" __global__ void be_rng_bits(uint32_t *dst, uint64_t count, uint64_t offset, uint32_t k0,
                                       uint32_t k1, float mean, float stddev) {
  rng<DIST_BITS>(dst, count, offset, k0, k1, mean, stddev);
}

extern "C" __global__ void be_rng_uniform(uint32_t *dst, uint64_t count, uint64_t offset,
                                          uint32_t k0, uint32_t k1, float mean, float stddev) {
  rng<DIST_UNIFORM>(dst, count, offset, k0, k1, mean, stddev);
}

extern "C" __global__ void be_rng_normal(uint32_t *dst, uint64_t count, uint64_t offset,
                                         uint32_t k0, uint32_t k1, float mean, float stddev) {
  rng<DIST_NORMAL>(dst, count, offset, k0, k1, mean, stddev);
}

/* ---- RNG into F64, F16, BF16 ------------------------------------------------------------
 * F16 and BF16: the f32 uniform or normal of the same element (the same word or words as an
 * f32 fill), rounded to nearest even. F64 (cuRAND's double convention): stream element e uses
 * words 2e and 2e + 1, so one Philox block q makes elements 2q and 2q + 1. */

template <int DIST, typename T>
__device__ void rng16(T *dst, uint64_t count, uint64_t offset, uint32_t k0, uint32_t k1, float mean,
                      float stddev) {
  uint64_t s = offset & 3, q0 = offset >> 2, nb = (s + count + 3) >> 2;
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t b = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; b < nb; b += stride) {
    uint4 out = convert<DIST>(philox(q0 + b, k0, k1), mean, stddev);
    int64_t i0 = (int64_t)(4 * b) - (int64_t)s;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      int64_t i = i0 + j;
      if (i >= 0 && (uint64_t)i < count)
        dst[i] = elem<T>::store(__uint_as_float(lane(out, j)));
    }
  }
}

/* cuRAND's _curand_uniform_double_hq: z * 2^-53 + 2^-54 with z = w0 ^ (w1 << 21) (53 bits);
 * the product is exact, so the one rounding of the sum is the same everywhere. */
__device__ __forceinline__ double hq(uint32_t w0, uint32_t w1, double scale) {
  uint64_t z = (uint64_t)w0 ^ ((uint64_t)w1 << 21);
  return __dadd_rn(__dmul_rn((double)z, scale), scale / 2.0);
}

template <int DIST>
__device__ void rng64(double *dst, uint64_t count, uint64_t offset, uint32_t k0, uint32_t k1,
                      double mean, double stddev) {
  uint64_t s = offset & 1, q0 = offset >> 1, nb = (s + count + 1) >> 1;
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t b = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; b < nb; b += stride) {
    uint4 w = philox(q0 + b, k0, k1);
    double v[2];
    if (DIST == DIST_UNIFORM) {
      v[0] = hq(w.x, w.y, 0x1p-53);
      v[1] = hq(w.z, w.w, 0x1p-53);
    } else { /* Box-Muller on (u, v) as cuRAND's _curand_box_muller_double */
      double u = hq(w.x, w.y, 0x1p-53), t = hq(w.z, w.w, 0x1p-52);
      double r = sqrt(-2.0 * log(u)), sn, cs;
      sincospi(t, &sn, &cs);
      v[0] = __dadd_rn(__dmul_rn(__dmul_rn(sn, r), stddev), mean);
      v[1] = __dadd_rn(__dmul_rn(__dmul_rn(cs, r), stddev), mean);
    }
    int64_t i0 = (int64_t)(2 * b) - (int64_t)s;
    if (i0 >= 0)
      dst[i0] = v[0];
    if ((uint64_t)(i0 + 1) < count)
      dst[i0 + 1] = v[1];
  }
}

#define BE_RNG16(sfx, T)                                                                           \
  extern "C" __global__ void be_rng_uniform##sfx(T *dst, uint64_t count, uint64_t offset,          \
                                                 uint32_t k0, uint32_t k1, float mean,             \
                                                 float stddev) {                                   \
    rng16<DIST_UNIFORM>(dst, count, offset, k0, k1, mean, stddev);                                 \
  }                                                                                                \
  extern "C" __global__ void be_rng_normal##sfx(T *dst, uint64_t count, uint64_t offset,           \
                                                uint32_t k0, uint32_t k1, float mean,              \
                                                float stddev) {                                    \
    rng16<DIST_NORMAL>(dst, count, offset, k0, k1, mean, stddev);                                  \
  }

BE_RNG16(_f16, f16)
BE_RNG16(_bf16, bf16)

extern "C" __global__ void be_rng_uniform_f64(double *dst, uint64_t count, uint64_t offset,
                                              uint32_t k0, uint32_t k1, double mean,
                                              double stddev) {
  rng64<DIST_UNIFORM>(dst, count, offset, k0, k1, mean, stddev);
}

extern "C" __global__ void be_rng_normal_f64(double *dst, uint64_t count, uint64_t offset,
                                             uint32_t k0, uint32_t k1, double mean, double stddev) {
  rng64<DIST_NORMAL>(dst, count, offset, k0, k1, mean, stddev);
}

/* ---- BLAS level 1 (F32 and F64) ------------------------------------------------------- */

template <typename T> __device__ void axpy(uint64_t n, T alpha, const T *x, T *y) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fma(alpha, x[i], y[i]);
}

template <typename T> __device__ void scal(uint64_t n, T alpha, T *x) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = alpha * x[i];
}

template <typename T> __device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2)
    v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

/* The block's sum, valid in thread 0 (blockDim.x == BLOCK). */
template <typename T> __device__ T block_sum(T v) {
  __shared__ T part[BLOCK / 32];
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0)
    part[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < BLOCK / 32 ? part[threadIdx.x] : (T)0;
  if (threadIdx.x < 32)
    v = warp_sum(v);
  __syncthreads(); /* part may be reused by the caller's next reduction */
  return v;
}

/* partial[blockIdx.x] = this block's share of x . y. Deterministic: fixed partitions and a
 * fixed reduction tree. */
template <typename T> __device__ void dot_partial(uint64_t n, const T *x, const T *y, T *partial) {
  T acc = 0;
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    acc = fma(x[i], y[i], acc);
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = acc;
}

/* *result = the sum of nparts partials (one block). */
template <typename T> __device__ void dot_final(unsigned nparts, const T *partial, T *result) {
  T acc = 0;
  for (unsigned i = threadIdx.x; i < nparts; i += blockDim.x)
    acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    *result = acc;
}

#define BE_BLAS1(a, d, s, T)                                                                       \
  extern "C" __global__ void be_##a##axpy(uint64_t n, T alpha, const T *x, T *y) {                 \
    axpy(n, alpha, x, y);                                                                          \
  }                                                                                                \
  extern "C" __global__ void be_##a##scal(uint64_t n, T alpha, T *x) {                             \
    scal(n, alpha, x);                                                                             \
  }                                                                                                \
  extern "C" __global__ void be_dot_partial##s(uint64_t n, const T *x, const T *y, T *partial) {   \
    dot_partial(n, x, y, partial);                                                                 \
  }                                                                                                \
  extern "C" __global__ void be_dot_final##s(unsigned nparts, const T *partial, T *result) {       \
    dot_final(nparts, partial, result);                                                            \
  }

BE_BLAS1(s, s, , float)
BE_BLAS1(d, d, _f64, double)

/* C_b = beta C_b over batch m x n column-major matrices stride_c elements apart (gemm when
 * A and B are not read); beta = 0 writes zeros, so NaN in C does not survive (BLAS). */
template <typename T>
__device__ void scale(T *c, int64_t m, int64_t n, int64_t ldc, int64_t batch, int64_t stride_c,
                      typename elem<T>::calc beta) {
  typedef typename elem<T>::calc C;
  uint64_t mn = (uint64_t)m * (uint64_t)n, total = mn * (uint64_t)batch;
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < total; t += stride) {
    uint64_t b = t / mn, r = t % mn, i = r % (uint64_t)m, j = r / (uint64_t)m;
    T *p = c + b * (uint64_t)stride_c + i + j * (uint64_t)ldc;
    *p = elem<T>::store(beta == (C)0 ? (C)0 : beta * elem<T>::load(*p));
  }
}

#define BE_SCALE(sfx, T)                                                                           \
  extern "C" __global__ void be_scale##sfx(T *c, int64_t m, int64_t n, int64_t ldc, int64_t batch, \
                                           int64_t stride_c, elem<T>::calc beta) {                 \
    scale(c, m, n, ldc, batch, stride_c, beta);                                                    \
  }

BE_PER_TYPE(BE_SCALE)

/* ---- NN element-wise ------------------------------------------------------------------ */

/* 1 / (1 + exp(-x)) without overflow, as the cpu backend computes it. */
__device__ __forceinline__ float sigmoid(float x) {
  float e = expf(-fabsf(x));
  float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

__device__ __forceinline__ double sigmoid(double x) {
  double e = exp(-fabs(x));
  double r = 1.0 / (1.0 + e);
  return x >= 0.0 ? r : e * r;
}

__device__ __forceinline__ float exp_(float x) {
  return expf(x);
}
__device__ __forceinline__ double exp_(double x) {
  return exp(x);
}
__device__ __forceinline__ float tanh_(float x) {
  return tanhf(x);
}
__device__ __forceinline__ double tanh_(double x) {
  return tanh(x);
}

__device__ __forceinline__ float log_(float x) {
  return logf(x);
}
__device__ __forceinline__ double log_(double x) {
  return log(x);
}
__device__ __forceinline__ float sqrt_(float x) {
  return sqrtf(x); /* correctly rounded: nvcc's default -prec-sqrt=true */
}
__device__ __forceinline__ double sqrt_(double x) {
  return sqrt(x);
}

enum { OP_SIGMOID = 0, OP_RELU, OP_TANH, OP_EXP, OP_LOG, OP_SQRT, OP_ABS };

template <int OP, typename C> __device__ __forceinline__ C apply(C x) {
  if (OP == OP_SIGMOID)
    return sigmoid(x);
  if (OP == OP_RELU)
    return x < (C)0 ? (C)0 : x;
  if (OP == OP_EXP)
    return exp_(x);
  if (OP == OP_LOG)
    return log_(x);
  if (OP == OP_SQRT)
    return sqrt_(x);
  if (OP == OP_ABS)
    return x < (C)0 ? -x : x == (C)0 ? (C)0 : x; /* -0 -> +0, NaN stays */
  return tanh_(x);
}

template <int OP, typename T> __device__ void unary(T *dst, const T *src, uint64_t n) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = elem<T>::store(apply<OP>(elem<T>::load(src[i])));
}

#define BE_UNARY(sfx, T)                                                                           \
  extern "C" __global__ void be_sigmoid##sfx(T *dst, const T *src, uint64_t n) {                   \
    unary<OP_SIGMOID>(dst, src, n);                                                                \
  }                                                                                                \
  extern "C" __global__ void be_relu##sfx(T *dst, const T *src, uint64_t n) {                      \
    unary<OP_RELU>(dst, src, n);                                                                   \
  }                                                                                                \
  extern "C" __global__ void be_tanh##sfx(T *dst, const T *src, uint64_t n) {                      \
    unary<OP_TANH>(dst, src, n);                                                                   \
  }                                                                                                \
  extern "C" __global__ void be_exp##sfx(T *dst, const T *src, uint64_t n) {                       \
    unary<OP_EXP>(dst, src, n);                                                                    \
  }                                                                                                \
  extern "C" __global__ void be_log##sfx(T *dst, const T *src, uint64_t n) {                       \
    unary<OP_LOG>(dst, src, n);                                                                    \
  }                                                                                                \
  extern "C" __global__ void be_sqrt##sfx(T *dst, const T *src, uint64_t n) {                      \
    unary<OP_SQRT>(dst, src, n);                                                                   \
  }                                                                                                \
  extern "C" __global__ void be_abs##sfx(T *dst, const T *src, uint64_t n) {                       \
    unary<OP_ABS>(dst, src, n);                                                                    \
  }

BE_PER_TYPE(BE_UNARY)

/* Element-wise of two inputs, broadcast by their strides (ops/args.h be_binary_args). The op
 * is uniform across the grid, so its switch never diverges. MAXIMUM and MINIMUM propagate NaN,
 * as the cpu backend's (and numpy's) do. */
enum { OP_ADD = 0, OP_SUB, OP_MUL, OP_DIV, OP_MAXIMUM, OP_MINIMUM };

template <typename C> __device__ __forceinline__ C apply2(int op, C x, C y) {
  switch (op) {
  case OP_ADD:
    return x + y;
  case OP_SUB:
    return x - y;
  case OP_MUL:
    return x * y;
  case OP_DIV:
    return x / y;
  case OP_MAXIMUM:
    return x > y || x != x ? x : y;
  default:
    return x < y || x != x ? x : y;
  }
}

template <typename T>
__device__ void binary(T *dst, const T *a, const T *b, int op, uint64_t rows, uint64_t cols,
                       uint64_t ars, uint64_t acs, uint64_t brs, uint64_t bcs) {
  uint64_t n = rows * cols, stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    uint64_t r = i / cols, c = i - r * cols;
    dst[i] = elem<T>::store(
        apply2(op, elem<T>::load(a[r * ars + c * acs]), elem<T>::load(b[r * brs + c * bcs])));
  }
}

#define BE_BINARY(sfx, T)                                                                          \
  extern "C" __global__ void be_binary##sfx(T *dst, const T *a, const T *b, int op, uint64_t rows, \
                                            uint64_t cols, uint64_t ars, uint64_t acs,             \
                                            uint64_t brs, uint64_t bcs) {                          \
    binary(dst, a, b, op, rows, cols, ars, acs, brs, bcs);                                         \
  }

BE_PER_TYPE(BE_BINARY)

/* The logical ops (be_binary_op BITAND .. BITXOR): bitwise on I32 and U32, on each byte's
 * truth for BOOL (binary_bool). */
enum { OP_BITAND = 12, OP_BITOR, OP_BITXOR };

/* I32 and U32: add, subtract and multiply in the unsigned type U (wrapping, as numpy's), the
 * bitwise ops on U's bits, the others in T; DIV never comes (kernels.c refuses it). */
template <typename T, typename U> __device__ __forceinline__ T apply_int(int op, T x, T y) {
  switch (op) {
  case OP_ADD:
    return (T)((U)x + (U)y);
  case OP_SUB:
    return (T)((U)x - (U)y);
  case OP_MUL:
    return (T)((U)x * (U)y);
  case OP_MAXIMUM:
    return x > y ? x : y;
  case OP_BITAND:
    return (T)((U)x & (U)y);
  case OP_BITOR:
    return (T)((U)x | (U)y);
  case OP_BITXOR:
    return (T)((U)x ^ (U)y);
  default:
    return x < y ? x : y;
  }
}

template <typename T, typename U>
__device__ void binary_int(T *dst, const T *a, const T *b, int op, uint64_t rows, uint64_t cols,
                           uint64_t ars, uint64_t acs, uint64_t brs, uint64_t bcs) {
  uint64_t n = rows * cols, stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    uint64_t r = i / cols, c = i - r * cols;
    dst[i] = apply_int<T, U>(op, a[r * ars + c * acs], b[r * brs + c * bcs]);
  }
}

extern "C" __global__ void be_binary_i32(int32_t *dst, const int32_t *a, const int32_t *b, int op,
                                         uint64_t rows, uint64_t cols, uint64_t ars, uint64_t acs,
                                         uint64_t brs, uint64_t bcs) {
  binary_int<int32_t, uint32_t>(dst, a, b, op, rows, cols, ars, acs, brs, bcs);
}

extern "C" __global__ void be_binary_u32(uint32_t *dst, const uint32_t *a, const uint32_t *b,
                                         int op, uint64_t rows, uint64_t cols, uint64_t ars,
                                         uint64_t acs, uint64_t brs, uint64_t bcs) {
  binary_int<uint32_t, uint32_t>(dst, a, b, op, rows, cols, ars, acs, brs, bcs);
}

/* BOOL: the logical ops on each byte's truth (any byte but 0 is true), 0 or 1 out. */
extern "C" __global__ void be_binary_bool(uint8_t *dst, const uint8_t *a, const uint8_t *b, int op,
                                          uint64_t rows, uint64_t cols, uint64_t ars, uint64_t acs,
                                          uint64_t brs, uint64_t bcs) {
  uint64_t n = rows * cols, stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    uint64_t r = i / cols, c = i - r * cols;
    unsigned x = a[r * ars + c * acs] != 0, y = b[r * brs + c * bcs] != 0;
    dst[i] = (uint8_t)(op == OP_BITAND ? x & y : op == OP_BITOR ? x | y : x ^ y);
  }
}

/* Comparisons (be_binary_op from EQUAL): IEEE's, so NaN is only NOT_EQUAL; a byte 0 or 1. */
enum { OP_EQUAL = 6, OP_NOT_EQUAL, OP_LESS, OP_LESS_EQUAL, OP_GREATER, OP_GREATER_EQUAL };

template <> struct elem<int32_t> {
  typedef int32_t calc;
  static __device__ __forceinline__ int32_t load(int32_t x) { return x; }
};

template <> struct elem<uint32_t> {
  typedef uint32_t calc;
  static __device__ __forceinline__ uint32_t load(uint32_t x) { return x; }
};

template <typename C> __device__ __forceinline__ bool compare_of(int op, C x, C y) {
  switch (op) {
  case OP_EQUAL:
    return x == y;
  case OP_NOT_EQUAL:
    return x != y;
  case OP_LESS:
    return x < y;
  case OP_LESS_EQUAL:
    return x <= y;
  case OP_GREATER:
    return x > y;
  default:
    return x >= y;
  }
}

template <typename T>
__device__ void compare(uint8_t *dst, const T *a, const T *b, int op, uint64_t rows, uint64_t cols,
                        uint64_t ars, uint64_t acs, uint64_t brs, uint64_t bcs) {
  uint64_t n = rows * cols, stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    uint64_t r = i / cols, c = i - r * cols;
    dst[i] = compare_of(op, elem<T>::load(a[r * ars + c * acs]),
                        elem<T>::load(b[r * brs + c * bcs]))
                 ? 1
                 : 0;
  }
}

#define BE_COMPARE(sfx, T)                                                                         \
  extern "C" __global__ void be_compare##sfx(uint8_t *dst, const T *a, const T *b, int op,         \
                                             uint64_t rows, uint64_t cols, uint64_t ars,           \
                                             uint64_t acs, uint64_t brs, uint64_t bcs) {           \
    compare(dst, a, b, op, rows, cols, ars, acs, brs, bcs);                                        \
  }

BE_PER_TYPE(BE_COMPARE)
BE_COMPARE(_i32, int32_t)
BE_COMPARE(_u32, uint32_t)

/* dst = cond ? a : b, the elements moved as bits (one kernel per element size). */
template <typename T>
__device__ void where(T *dst, const uint8_t *cond, const T *a, const T *b, uint64_t rows,
                      uint64_t cols, uint64_t crs, uint64_t ccs, uint64_t ars, uint64_t acs,
                      uint64_t brs, uint64_t bcs) {
  uint64_t n = rows * cols, stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    uint64_t r = i / cols, c = i - r * cols;
    dst[i] = cond[r * crs + c * ccs] ? a[r * ars + c * acs] : b[r * brs + c * bcs];
  }
}

#define BE_WHERE(sfx, T)                                                                           \
  extern "C" __global__ void be_where##sfx(T *dst, const uint8_t *cond, const T *a, const T *b,    \
                                           uint64_t rows, uint64_t cols, uint64_t crs,             \
                                           uint64_t ccs, uint64_t ars, uint64_t acs, uint64_t brs, \
                                           uint64_t bcs) {                                         \
    where(dst, cond, a, b, rows, cols, crs, ccs, ars, acs, brs, bcs);                              \
  }

BE_WHERE(_u8, uint8_t)
BE_WHERE(_u16, uint16_t)
BE_WHERE(_u32, uint32_t)
BE_WHERE(_u64, uint64_t)

template <typename T> __device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    T w = __shfl_down_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

/* The block's maximum as `x > max` finds it (NaN never wins: the row's exp then makes the
 * NaN, as on the cpu), broadcast to every thread. */
template <typename T> __device__ T block_max(T v) {
  __shared__ T part[BLOCK / 32];
  __shared__ T all;
  v = warp_max(v);
  if ((threadIdx.x & 31) == 0)
    part[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < BLOCK / 32 ? part[threadIdx.x] : (T)-INFINITY;
    v = warp_max(v);
    if (threadIdx.x == 0)
      all = v;
  }
  __syncthreads();
  return all;
}

/* Row-wise softmax of a rows x cols row-major matrix, one block per row: the maximum first,
 * so exp never overflows, then the sum, then the quotients (in f32 for F16 and BF16). */
template <typename T> __device__ void softmax(T *dst, const T *src, uint64_t rows, uint64_t cols) {
  typedef typename elem<T>::calc C;
  __shared__ C total;
  for (uint64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *x = src + r * cols;
    T *y = dst + r * cols;
    C mx = -INFINITY;
    for (uint64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      C v = elem<T>::load(x[j]);
      mx = v > mx ? v : mx;
    }
    mx = block_max(mx);
    C sum = 0;
    for (uint64_t j = threadIdx.x; j < cols; j += blockDim.x)
      sum += exp_(elem<T>::load(x[j]) - mx);
    sum = block_sum(sum);
    if (threadIdx.x == 0)
      total = sum;
    __syncthreads();
    sum = total;
    for (uint64_t j = threadIdx.x; j < cols; j += blockDim.x)
      y[j] = elem<T>::store(exp_(elem<T>::load(x[j]) - mx) / sum);
    __syncthreads(); /* `total` is rewritten by the next row */
  }
}

#define BE_SOFTMAX(sfx, T)                                                                         \
  extern "C" __global__ void be_softmax##sfx(T *dst, const T *src, uint64_t rows, uint64_t cols) { \
    softmax(dst, src, rows, cols);                                                                 \
  }

BE_PER_TYPE(BE_SOFTMAX)

/* ---- reductions (ops/args.h be_reduction_args) ------------------------------------------ *
 * The host (kernels.c) turns a view into nout outputs of len elements each: element k of
 * output o lies at o * os + (k / n2) * s1 + (k % n2) * s2 (n2 == len: a single run at step s2,
 * no division). Folds run in the element's calc type (f32 for F16 and BF16), partials travel
 * as doubles, and the output rounds once. Max and min let NaN win (x > NaN is false, so a NaN
 * held stays), as numpy's do. Deterministic: fixed partitions, a fixed tree. */
enum { RED_SUM = 0, RED_MAX, RED_MIN, RED_MEAN };

template <typename C> __device__ __forceinline__ C red_fold(int op, C m, C x) {
  switch (op) {
  case RED_MAX:
    return x > m || x != x ? x : m;
  case RED_MIN:
    return x < m || x != x ? x : m;
  default:
    return m + x;
  }
}

template <typename C> __device__ __forceinline__ C red_init(int op) {
  return op == RED_MAX ? (C)-INFINITY : op == RED_MIN ? (C)INFINITY : (C)0;
}

/* The answer from a fold of len elements: the mean divides (0 / 0 = NaN for none). */
template <typename C> __device__ __forceinline__ C red_finish(int op, C v, uint64_t len) {
  return op == RED_MEAN ? v / (C)len : v;
}

/* The block's fold, valid in thread 0 (blockDim.x == BLOCK). */
template <typename C> __device__ C block_fold(int op, C v) {
  __shared__ C part[BLOCK / 32];
#pragma unroll
  for (int o = 16; o > 0; o /= 2)
    v = red_fold(op, v, __shfl_down_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0)
    part[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < BLOCK / 32 ? part[threadIdx.x] : red_init<C>(op);
#pragma unroll
    for (int o = 16; o > 0; o /= 2)
      v = red_fold(op, v, __shfl_down_sync(0xffffffffu, v, o));
  }
  __syncthreads(); /* part is reused by the block's next unit */
  return v;
}

/* Units u = o * parts + p (grid-stride): block folds output o's elements p * BLOCK + tid,
 * step parts * BLOCK. parts == 1: the answer into dst[o]; else the partial into part[u]. */
template <typename T>
__device__ void reduce_blocks(T *dst, double *part, const T *src, int op, uint64_t nout,
                              uint64_t len, uint64_t os, uint64_t n2, uint64_t s1, uint64_t s2,
                              uint32_t parts) {
  typedef typename elem<T>::calc C;
  uint64_t units = nout * parts, step = (uint64_t)parts * BLOCK;
  for (uint64_t u = blockIdx.x; u < units; u += gridDim.x) {
    uint64_t o = u / parts, p = u - o * parts;
    const T *x = src + o * os;
    C v = red_init<C>(op);
    if (n2 == len) {
      for (uint64_t k = p * BLOCK + threadIdx.x; k < len; k += step)
        v = red_fold(op, v, elem<T>::load(x[k * s2]));
    } else {
      for (uint64_t k = p * BLOCK + threadIdx.x; k < len; k += step) {
        uint64_t k1 = k / n2;
        v = red_fold(op, v, elem<T>::load(x[k1 * s1 + (k - k1 * n2) * s2]));
      }
    }
    v = block_fold(op, v);
    if (threadIdx.x == 0) {
      if (parts == 1)
        dst[o] = elem<T>::store(red_finish(op, v, len));
      else
        part[u] = (double)v;
    }
  }
}

/* dst[o] = the fold of part[o * parts .. + parts), in double, rounded once. */
template <typename T>
__device__ void reduce_final(T *dst, const double *part, int op, uint64_t nout, uint32_t parts,
                             uint64_t len) {
  typedef typename elem<T>::calc C;
  for (uint64_t o = blockIdx.x; o < nout; o += gridDim.x) {
    double v = red_init<double>(op);
    for (uint32_t p = threadIdx.x; p < parts; p += blockDim.x)
      v = red_fold(op, v, part[o * parts + p]);
    v = block_fold(op, v);
    if (threadIdx.x == 0)
      dst[o] = elem<T>::store((C)red_finish(op, v, len));
  }
}

/* One thread per output, its len elements at `step` in turn: outputs side by side in memory
 * (a row-major matrix's columns), so a warp's loads are one coalesced row segment. */
template <typename T>
__device__ void reduce_threads(T *dst, const T *src, int op, uint64_t nout, uint64_t len,
                               uint64_t os, uint64_t step) {
  typedef typename elem<T>::calc C;
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t o = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; o < nout; o += stride) {
    const T *x = src + o * os;
    C v = red_init<C>(op);
    for (uint64_t k = 0; k < len; k++)
      v = red_fold(op, v, elem<T>::load(x[k * step]));
    dst[o] = elem<T>::store(red_finish(op, v, len));
  }
}

#define BE_REDUCE(sfx, T)                                                                          \
  extern "C" __global__ void be_reduce_blocks##sfx(T *dst, double *part, const T *src, int op,     \
                                                   uint64_t nout, uint64_t len, uint64_t os,       \
                                                   uint64_t n2, uint64_t s1, uint64_t s2,          \
                                                   uint32_t parts) {                               \
    reduce_blocks(dst, part, src, op, nout, len, os, n2, s1, s2, parts);                           \
  }                                                                                                \
  extern "C" __global__ void be_reduce_final##sfx(T *dst, const double *part, int op,              \
                                                  uint64_t nout, uint32_t parts, uint64_t len) {   \
    reduce_final(dst, part, op, nout, parts, len);                                                 \
  }                                                                                                \
  extern "C" __global__ void be_reduce_threads##sfx(T *dst, const T *src, int op, uint64_t nout,   \
                                                    uint64_t len, uint64_t os, uint64_t step) {    \
    reduce_threads(dst, src, op, nout, len, os, step);                                             \
  }

BE_PER_TYPE(BE_REDUCE)

/* ---- tests and benchmarks ------------------------------------------------------------- */

/* Does nothing: the cost of a launch alone. */
extern "C" __global__ void be_null(void) {
}

/* Breaks the context for real (fault injection, tests only): mode 0 traps, mode 1 writes
 * through a pointer that maps nothing. */
extern "C" __global__ void be_fault(int mode, unsigned *bad) {
  if (mode == 0)
    asm volatile("trap;");
  else
    *(volatile unsigned *)bad = 0xdeadu;
}

/* ---- convert (ops/args.h be_convert_args) ---------------------------------------------- *
 * One kernel for every pair of dtypes (the pair an argument: one branch taken by the whole
 * grid). An element is loaded as what holds it exactly: an int64 for I32, U32 and BOOL, a
 * double for the floats; the store rounds once (F16 and BF16 through an f32 rounded to odd,
 * as ops/dtype_conv.h be_f64_to_f32_odd does on the host), integers to integers wrap, floats
 * to integers truncate and saturate (NaN 0). Dtype codes are accel_dtype's. */
enum { DT_F32 = 1, DT_U32, DT_F64, DT_F16, DT_BF16, DT_I32, DT_BOOL };

struct conv_val {
  bool is_int;
  long long i; /* is_int */
  double d;    /* else */
};

__device__ __forceinline__ conv_val conv_load(const void *src, int dt, uint64_t k) {
  conv_val v = {false, 0, 0.0};
  switch (dt) {
  case DT_F32:
    v.d = ((const float *)src)[k];
    break;
  case DT_F64:
    v.d = ((const double *)src)[k];
    break;
  case DT_F16:
    v.d = __half2float(__ushort_as_half(((const uint16_t *)src)[k]));
    break;
  case DT_BF16:
    v.d = __bfloat162float(__ushort_as_bfloat16(((const uint16_t *)src)[k]));
    break;
  case DT_I32:
    v.is_int = true;
    v.i = ((const int32_t *)src)[k];
    break;
  case DT_U32:
    v.is_int = true;
    v.i = ((const uint32_t *)src)[k];
    break;
  default:
    v.is_int = true;
    v.i = ((const uint8_t *)src)[k] != 0;
    break;
  }
  return v;
}

/* d as an f32 rounded to odd (host twin: be_f64_to_f32_odd). */
__device__ __forceinline__ float f32_odd(double d) {
  float f = (float)d;
  if (d != d || (double)f == d)
    return f;
  uint32_t u = __float_as_uint(f);
  if (f > d ? f > 0.0f : f < 0.0f)
    u -= 1u;
  return __uint_as_float(u | 1u);
}

__device__ __forceinline__ double saturate(double d, double lo, double hi) {
  if (d != d)
    return 0.0;
  return d <= lo ? lo : d >= hi ? hi : trunc(d);
}

__device__ __forceinline__ void conv_store(void *dst, int dt, uint64_t i, conv_val v) {
  double d = v.is_int ? (double)v.i : v.d; /* exact: |i| < 2^33 */
  switch (dt) {
  case DT_F32:
    ((float *)dst)[i] = (float)d;
    break;
  case DT_F64:
    ((double *)dst)[i] = d;
    break;
  case DT_F16:
    ((uint16_t *)dst)[i] = __half_as_ushort(__float2half_rn(f32_odd(d)));
    break;
  case DT_BF16:
    ((uint16_t *)dst)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(f32_odd(d)));
    break;
  case DT_I32:
    ((int32_t *)dst)[i] = v.is_int ? (int32_t)(uint32_t)v.i
                                   : (int32_t)saturate(d, -2147483648.0, 2147483647.0);
    break;
  case DT_U32:
    ((uint32_t *)dst)[i] = v.is_int ? (uint32_t)v.i : (uint32_t)saturate(d, 0.0, 4294967295.0);
    break;
  default:
    ((uint8_t *)dst)[i] = v.is_int ? v.i != 0 : d != 0.0;
    break;
  }
}

/* The same dtype: bits moved (element size es). */
__device__ __forceinline__ void conv_copy(void *dst, const void *src, int es, uint64_t i,
                                          uint64_t k) {
  switch (es) {
  case 1:
    ((uint8_t *)dst)[i] = ((const uint8_t *)src)[k];
    break;
  case 2:
    ((uint16_t *)dst)[i] = ((const uint16_t *)src)[k];
    break;
  case 4:
    ((uint32_t *)dst)[i] = ((const uint32_t *)src)[k];
    break;
  default:
    ((uint64_t *)dst)[i] = ((const uint64_t *)src)[k];
    break;
  }
}

/* same_es: the element size when the dtypes are the same (a copy), else 0. */
extern "C" __global__ void be_convert(void *dst, const void *src, int dst_dt, int src_dt,
                                      int same_es, uint64_t rows, uint64_t cols, uint64_t rs,
                                      uint64_t cs) {
  uint64_t n = rows * cols, stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    uint64_t r = i / cols, c = i - r * cols, k = r * rs + c * cs;
    if (same_es != 0)
      conv_copy(dst, src, same_es, i, k);
    else
      conv_store(dst, dst_dt, i, conv_load(src, src_dt, k));
  }
}
