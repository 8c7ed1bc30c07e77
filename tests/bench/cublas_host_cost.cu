// probe-cublas-host-cost: what a small gemm costs the host in each cuBLAS entry, and what
// Philox fills reach with each launch shape, on the GPU alone (docs/PERFORMANCE.md, "Small
// ops: cached cuBLASLt plans, the Philox grid"). Not a benchmark of accel: it measures the
// choices behind backends/cuda/gemm_lt.c and RNG_BLOCKS_PER_SM in backends/cuda/kernels.c.
//
// Per product (n = 256 and 1024, FP32 and TF32; TF32 n = 2048): for cublasSgemm, cublasGemmEx
// and cublasLtMatmul with its descriptors and algorithm kept, the host time per call while
// the GPU runs behind ("host/call"), the wall time per op of a pipeline ("wall/op"), and the
// GPU's time per product with every launch queued behind a spinning kernel ("gpu-only/op").
// Then 256 MiB uniform fills by cuRAND and by a Philox kernel like the backend's, by blocks per
// SM and store kind. Medians of 7 (gemm) and 9 (fills) repetitions. Run on the GPU machine:
//   build-gpu/tests/bench/probe-cublas-host-cost
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <curand.h>
#include <vector>
#define CK(x)                                                                                      \
  do {                                                                                             \
    auto _r = (x);                                                                                 \
    if ((int)_r != 0) {                                                                            \
      printf("FAIL %s:%d %s -> %d\n", __FILE__, __LINE__, #x, (int)_r);                            \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static double med(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

enum Api { SGEMM, GEMMEX, LT, GRAPH };
static cudaGraphExec_t graphs[4]; // GRAPH: one cublasGemmEx per C buffer, captured once
struct LtPlan {
  cublasLtMatmulDesc_t d;
  cublasLtMatrixLayout_t l;
  cublasLtMatmulAlgo_t algo;
  void *ws;
  size_t wss;
};
static cublasLtHandle_t lth;
static LtPlan lt_plan(int n, bool tf32) {
  LtPlan p;
  p.wss = 32 << 20;
  CK(cudaMalloc(&p.ws, p.wss));
  CK(cublasLtMatmulDescCreate(&p.d, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                              CUDA_R_32F));
  CK(cublasLtMatrixLayoutCreate(&p.l, CUDA_R_32F, n, n, n));
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p.wss,
                                          sizeof p.wss));
  cublasLtMatmulHeuristicResult_t r;
  int got = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lth, p.d, p.l, p.l, p.l, p.l, pref, 1, &r, &got));
  if (!got) {
    printf("no lt algo\n");
    exit(1);
  }
  p.algo = r.algo;
  return p;
}
static void one(Api api, cublasHandle_t h, LtPlan *p, int n, bool tf32, float *a, float *b,
                float *c, cudaStream_t s) {
  const float one = 1, zero = 0;
  if (api == SGEMM)
    CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
  else if (api == GEMMEX)
    CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_32F, n, b, CUDA_R_32F, n,
                    &zero, c, CUDA_R_32F, n,
                    tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  else
    CK(cublasLtMatmul(lth, p->d, &one, a, p->l, b, p->l, &zero, c, p->l, c, p->l, &p->algo, p->ws,
                      p->wss, s));
}
static void capture(cublasHandle_t h, int n, bool tf32, float *a, float *b, float **c,
                    cudaStream_t s) {
  for (int i = 0; i < 4; i++) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    one(GEMMEX, h, nullptr, n, tf32, a, b, c[i], s);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&graphs[i], g, 0));
    CK(cudaGraphDestroy(g));
  }
}
static void launch(Api api, cublasHandle_t h, LtPlan *p, int n, bool tf32, float *a, float *b,
                   float **c, int i, cudaStream_t s) {
  if (api == GRAPH)
    CK(cudaGraphLaunch(graphs[i % 4], s));
  else
    one(api, h, p, n, tf32, a, b, c[i % 4], s);
}
static const char *names[] = {"cublasSgemm", "cublasGemmEx", "cublasLt(cached)", "GemmEx graph"};
static void gemm_case(int n, bool tf32) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasSetStream(h, s));
  size_t nn = (size_t)n * n;
  float *a, *b, *c[4];
  CK(cudaMalloc(&a, nn * 4));
  CK(cudaMalloc(&b, nn * 4));
  for (auto &x : c)
    CK(cudaMalloc(&x, nn * 4));
  CK(cudaMemset(a, 0x3c, nn * 4));
  CK(cudaMemset(b, 0x3c, nn * 4));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  LtPlan p = lt_plan(n, tf32);
  int K = n <= 256 ? 400 : 100;
  void *ws;
  CK(cudaMalloc(&ws, 32 << 20));
  CK(cublasSetWorkspace(h, ws, 32 << 20)); // a graph may not allocate cuBLAS's workspace
  capture(h, n, tf32, a, b, c, s);
  for (int api = 0; api < 4; api++) {
    if (tf32 && api == SGEMM)
      continue;
    for (int i = 0; i < 10; i++)
      launch((Api)api, h, &p, n, tf32, a, b, c, i, s);
    CK(cudaStreamSynchronize(s));
    std::vector<double> host, wall, gpu;
    for (int rep = 0; rep < 7; rep++) {
      // pipelined as the benchmark does: wall per op
      double t0 = now();
      CK(cudaEventRecord(e0, s));
      for (int i = 0; i < K; i++)
        launch((Api)api, h, &p, n, tf32, a, b, c, i, s);
      double t1 = now();
      CK(cudaEventRecord(e1, s));
      CK(cudaStreamSynchronize(s));
      wall.push_back((now() - t0) / K);
      host.push_back((t1 - t0) / K);
      // GPU-only: queue behind a spin kernel so launches are all in before the GPU starts
      spin<<<1, 1, 0, s>>>(2000000000LL / 1000 * 5); // ~ a few ms
      CK(cudaEventRecord(e0, s));
      for (int i = 0; i < K && i < 200; i++)
        launch((Api)api, h, &p, n, tf32, a, b, c, i, s);
      CK(cudaEventRecord(e1, s));
      CK(cudaStreamSynchronize(s));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      gpu.push_back(ms * 1e-3 / std::min(K, 200));
    }
    printf("gemm %s n=%d %-18s host/call %7.2f us  wall/op %7.2f us  gpu-only/op %7.2f us\n",
           tf32 ? "TF32" : "FP32", n, names[api], med(host) * 1e6, med(wall) * 1e6, med(gpu) * 1e6);
  }
  cublasDestroy(h);
  cudaStreamDestroy(s);
}

__device__ __forceinline__ uint4 philox(uint64_t q, uint32_t k0, uint32_t k1) {
  uint32_t c0 = (uint32_t)q, c1 = (uint32_t)(q >> 32), c2 = 0, c3 = 0;
#pragma unroll
  for (int r = 0; r < 10; r++) {
    uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return make_uint4(c0, c1, c2, c3);
}
template <int CS> __global__ void rngk(uint4 *dst, uint64_t nb, uint32_t k0, uint32_t k1) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t b = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; b < nb; b += stride) {
    uint4 w = philox(b, k0, k1);
    float4 f =
        make_float4(w.x * 2.3283064e-10f + 1.1641532e-10f, w.y * 2.3283064e-10f + 1.1641532e-10f,
                    w.z * 2.3283064e-10f + 1.1641532e-10f, w.w * 2.3283064e-10f + 1.1641532e-10f);
    if (CS == 1)
      __stcs((float4 *)&dst[b], f);
    else if (CS == 2)
      __stwt((float4 *)&dst[b], f);
    else
      ((float4 *)dst)[b] = f;
  }
}
static void rng_case() {
  size_t n = (size_t)64 << 20;
  float *d;
  CK(cudaMalloc(&d, n * 4));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  curandGenerator_t g;
  CK(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CK(curandSetStream(g, s));
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int v = 0; v < 8; v++) {
    std::vector<double> t;
    for (int rep = 0; rep < 9; rep++) {
      CK(cudaEventRecord(e0, s));
      for (int i = 0; i < 10; i++) {
        if (v == 0)
          CK(curandGenerateUniform(g, d, n));
        else {
          int bps = (v == 1 || v == 2 || v == 3) ? 8
                                                 : (v == 4 ? 4 : (v == 5 ? 16 : (v == 6 ? 32 : 2)));
          int cs = v == 2 ? 1 : (v == 3 ? 2 : (v >= 5 ? 1 : 0));
          unsigned grid = sms * bps;
          if (cs == 0)
            rngk<0><<<grid, 256, 0, s>>>((uint4 *)d, n / 4, 1234, 0);
          else if (cs == 1)
            rngk<1><<<grid, 256, 0, s>>>((uint4 *)d, n / 4, 1234, 0);
          else
            rngk<2><<<grid, 256, 0, s>>>((uint4 *)d, n / 4, 1234, 0);
        }
      }
      CK(cudaEventRecord(e1, s));
      CK(cudaStreamSynchronize(s));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms * 1e-3 / 10);
    }
    static const char *vn[] = {"curand",     "plain bps8", "stcs bps8",  "stwt bps8",
                               "plain bps4", "stcs bps16", "stcs bps32", "stcs bps2"};
    printf("rng 256MiB %-12s %7.1f us  %.2f TB/s\n", vn[v], med(t) * 1e6, n * 4 / med(t) * 1e-12);
  }
}
int main() {
  CK(cublasLtCreate(&lth));
  gemm_case(256, false);
  gemm_case(256, true);
  gemm_case(1024, true);
  gemm_case(1024, false);
  gemm_case(2048, true);
  rng_case();
  return 0;
}
