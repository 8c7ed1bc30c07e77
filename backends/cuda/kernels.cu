/* The cuda backend's built-in kernels, compiled by nvcc at build time into a fatbin (sm_90
 * code plus PTX) that the library embeds and loads with cuModuleLoadData (kernels.c launches
 * them). Device code only: names are extern "C" so the host looks them up as written.
 *
 * Every kernel runs a grid-stride loop over 64-bit indices, so any grid covers any size.
 * Results follow the cpu backend's formulas (backends/cpu/): RNG bits and uniforms bit for bit
 * (Philox4x32-10 in cuRAND's device-API stream convention, DESIGN.md "Ops"), the rest within
 * the float error of the operation.
 */
#include <stdint.h>

#define BLOCK 256

/* ---- fill ----------------------------------------------------------------------------- */

/* dst[i] = value: 16-byte stores between a scalar head and tail. */
extern "C" __global__ void be_fill_u32(uint32_t *dst, uint64_t n, uint32_t value)
{
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

/* ---- Philox4x32-10 -------------------------------------------------------------------- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* Block q of the stream of key (k0, k1): counter {q mod 2^32, q >> 32, 0, 0}. */
__device__ __forceinline__ uint4 philox(uint64_t q, uint32_t k0, uint32_t k1)
{
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
__device__ __forceinline__ float uniform(uint32_t x)
{
  return (float)x * 0x1p-32f + 0x1p-33f;
}

/* Box-Muller as backends/cpu/philox.c computes it, every rounding spelled out so that the
 * compiler contracts nothing the cpu does not: the values then differ from the cpu's only by
 * the device's sinf/cosf/logf (a few ulp). */
__device__ __forceinline__ float2 box_muller(uint32_t x, uint32_t y)
{
  const float k = 0x1p-32f * 6.2831855f;
  float u = uniform(x);
  float v = __fadd_rn(__fmul_rn((float)y, k), k / 2.0f);
  float r = sqrtf(-2.0f * logf(u));
  float s, c;
  sincosf(v, &s, &c);
  return make_float2(__fmul_rn(s, r), __fmul_rn(c, r));
}

__device__ __forceinline__ float scaled(float z, float mean, float stddev)
{
  return __fadd_rn(__fmul_rn(z, stddev), mean);
}

enum { DIST_BITS = 0, DIST_UNIFORM = 1, DIST_NORMAL = 2 };

template <int DIST>
__device__ __forceinline__ uint4 convert(uint4 w, float mean, float stddev)
{
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

__device__ __forceinline__ uint32_t lane(uint4 v, int j)
{
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

/* dst[i] = element (offset + i) of the stream, i < count. Thread-block b computes Philox
 * block q0 + b, whose words land at dst[4b - s .. 4b - s + 3] (s = offset mod 4): one
 * 16-byte store when that is aligned and inside, else word by word. Normals pair words
 * (2m, 2m + 1), which share a block because the offset is even (checked by the host). */
template <int DIST>
__device__ void rng(uint32_t *dst, uint64_t count, uint64_t offset, uint32_t k0, uint32_t k1,
                    float mean, float stddev)
{
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

extern "C" __global__ void be_rng_bits(uint32_t *dst, uint64_t count, uint64_t offset,
                                       uint32_t k0, uint32_t k1, float mean, float stddev)
{
  rng<DIST_BITS>(dst, count, offset, k0, k1, mean, stddev);
}

extern "C" __global__ void be_rng_uniform(uint32_t *dst, uint64_t count, uint64_t offset,
                                          uint32_t k0, uint32_t k1, float mean, float stddev)
{
  rng<DIST_UNIFORM>(dst, count, offset, k0, k1, mean, stddev);
}

extern "C" __global__ void be_rng_normal(uint32_t *dst, uint64_t count, uint64_t offset,
                                         uint32_t k0, uint32_t k1, float mean, float stddev)
{
  rng<DIST_NORMAL>(dst, count, offset, k0, k1, mean, stddev);
}

/* ---- BLAS level 1 --------------------------------------------------------------------- */

extern "C" __global__ void be_saxpy(uint64_t n, float alpha, const float *x, float *y)
{
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaf(alpha, x[i], y[i]);
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
  for (int o = 16; o > 0; o /= 2)
    v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

/* The block's sum, valid in thread 0 (blockDim.x == BLOCK). */
__device__ float block_sum(float v)
{
  __shared__ float part[BLOCK / 32];
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0)
    part[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < BLOCK / 32 ? part[threadIdx.x] : 0.0f;
  if (threadIdx.x < 32)
    v = warp_sum(v);
  __syncthreads(); /* part may be reused by the caller's next reduction */
  return v;
}

/* partial[blockIdx.x] = this block's share of x . y. Deterministic: fixed partitions and a
 * fixed reduction tree. */
extern "C" __global__ void be_dot_partial(uint64_t n, const float *x, const float *y,
                                          float *partial)
{
  float acc = 0.0f;
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    acc = fmaf(x[i], y[i], acc);
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = acc;
}

/* *result = the sum of nparts partials (one block). */
extern "C" __global__ void be_dot_final(unsigned nparts, const float *partial, float *result)
{
  float acc = 0.0f;
  for (unsigned i = threadIdx.x; i < nparts; i += blockDim.x)
    acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    *result = acc;
}

/* C = beta C over an m x n column-major matrix (sgemm when A and B are not read); beta = 0
 * writes zeros, so NaN in C does not survive (BLAS). */
extern "C" __global__ void be_scale(float *c, int64_t m, int64_t n, int64_t ldc, float beta)
{
  uint64_t total = (uint64_t)m * (uint64_t)n;
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < total; t += stride) {
    uint64_t i = t % (uint64_t)m, j = t / (uint64_t)m;
    float *p = c + i + j * (uint64_t)ldc;
    *p = beta == 0.0f ? 0.0f : beta * *p;
  }
}

/* ---- NN element-wise ------------------------------------------------------------------ */

/* 1 / (1 + exp(-x)) without overflow, as the cpu backend computes it. */
__device__ __forceinline__ float sigmoid(float x)
{
  float e = expf(-fabsf(x));
  float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

#define BE_UNARY(name, expr)                                                               \
  extern "C" __global__ void name(float *dst, const float *src, uint64_t n)                \
  {                                                                                        \
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;                                    \
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;              \
         i += stride) {                                                                    \
      float x = src[i];                                                                    \
      dst[i] = (expr);                                                                     \
    }                                                                                      \
  }

BE_UNARY(be_sigmoid, sigmoid(x))
BE_UNARY(be_relu, x < 0.0f ? 0.0f : x)
BE_UNARY(be_tanh, tanhf(x))

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    float w = __shfl_down_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

/* The block's maximum as `x > max` finds it (NaN never wins: the row's exp then makes the
 * NaN, as on the cpu), broadcast to every thread. */
__device__ float block_max(float v)
{
  __shared__ float part[BLOCK / 32];
  __shared__ float all;
  v = warp_max(v);
  if ((threadIdx.x & 31) == 0)
    part[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < BLOCK / 32 ? part[threadIdx.x] : -INFINITY;
    v = warp_max(v);
    if (threadIdx.x == 0)
      all = v;
  }
  __syncthreads();
  return all;
}

/* Row-wise softmax of a rows x cols row-major matrix, one block per row: the maximum first,
 * so exp never overflows, then the sum, then the quotients. */
extern "C" __global__ void be_softmax(float *dst, const float *src, uint64_t rows,
                                      uint64_t cols)
{
  __shared__ float total;
  for (uint64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *x = src + r * cols;
    float *y = dst + r * cols;
    float mx = -INFINITY;
    for (uint64_t j = threadIdx.x; j < cols; j += blockDim.x)
      mx = x[j] > mx ? x[j] : mx;
    mx = block_max(mx);
    float sum = 0.0f;
    for (uint64_t j = threadIdx.x; j < cols; j += blockDim.x)
      sum += expf(x[j] - mx);
    sum = block_sum(sum);
    if (threadIdx.x == 0)
      total = sum;
    __syncthreads();
    sum = total;
    for (uint64_t j = threadIdx.x; j < cols; j += blockDim.x)
      y[j] = expf(x[j] - mx) / sum;
    __syncthreads(); /* `total` is rewritten by the next row */
  }
}

/* ---- tests and benchmarks ------------------------------------------------------------- */

/* Does nothing: the cost of a launch alone. */
extern "C" __global__ void be_null(void) {}

/* Breaks the context for real (fault injection, tests only): mode 0 traps, mode 1 writes
 * through a pointer that maps nothing. */
extern "C" __global__ void be_fault(int mode, unsigned *bad)
{
  if (mode == 0)
    asm volatile("trap;");
  else
    *(volatile unsigned *)bad = 0xdeadu;
}
