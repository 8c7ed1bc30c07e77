/* Small gemms through cuBLASLt with their plans cached per queue.
 *
 * For a small product the GPU is done before the host is: on an H100, an FP32 gemm of
 * n = 256 takes 8.4 us on the GPU, while cublasGemmEx spends 13.4 us of host time per call
 * (cublasSgemm 19.4 us) choosing a kernel by its heuristics each time; cuBLASLt with the
 * operation's descriptors and the heuristic's algorithm kept from the first call spends
 * 11.5 us (TF32 n = 256: 7.5 -> 6.4 us). A client pipelining small gemms waits on that host
 * time, and in accel it is the loop's. So a queue keeps the plans of its last LT_PLANS shapes
 * (least recently used out), and a gemm whose m n k is at most LT_MAX_VOLUME runs through its
 * plan. Larger products keep cublasGemmEx: the GPU's time dominates there, and its kernel
 * choice is the one measured against cuBLAS (docs/PERFORMANCE.md).
 *
 * Anything missing (the library, memory for the plan, an algorithm for the shape) leaves the
 * gemm to cublasGemmEx (RT_NOT_HANDLED): the plans are a shortcut, never a new failure.
 * ACCEL_CUDA_GEMM_LT=0 turns them off (read once per process), for comparisons.
 *
 * Plans live on the queue's thread (the loop), like the queue's cuBLAS handle. The workspace
 * comes from the device's stream-ordered pool (cuMemAllocAsync on the queue's stream: it does
 * not wait for the device, as cuMemAlloc would, with every client behind the loop); a driver
 * without one leaves the plans without a workspace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/gemm_lt.h"
#include "runtime/alloc.h"
#include "runtime/status.h"

#define LT_PLANS 16
#define LT_MAX_VOLUME ((uint64_t)1 << 27) /* m n k of 512^3 */
/* Split-k algorithms of small products keep their partial sums here. */
#define LT_WORKSPACE ((size_t)8 << 20)

/* Plans are for matrices at LT_ALIGN-byte aligned addresses only (a buffer's start): that is
 * what cuBLASLt's heuristic assumes unless told otherwise, and its matmul refuses a pointer at
 * an offset into a buffer (CUBLAS_STATUS_NOT_SUPPORTED), which then marked the shape's plan
 * unusable for aligned calls too. The others go to cublasGemmEx: with plans made for every
 * alignment (the minimum set in the preference), the conformance suite, whose matrices sit at
 * random offsets, once found a BF16 result rounded past its bound (1.1 half-ulps off), where
 * cuBLAS's stay within it. */
#define LT_ALIGN 256u

typedef struct lt_key { /* compared with memcmp: no padding (`zero` fills it) */
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t ab_type, c_type;
  int32_t trans_a, trans_b, compute, zero;
} lt_key;

typedef struct lt_plan {
  lt_key key;
  uint64_t last_use; /* 0: an empty slot */
  bool none;         /* no algorithm for it: cublasGemmEx */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
} lt_plan;

struct be_cuda_lt {
  cublasLtHandle_t handle;
  CUdeviceptr work; /* 0 when it could not be had: plans then use none */
  size_t work_size;
  uint64_t clock;
  uint64_t runs, made; /* be_cuda_gemm_lt_stats */
  lt_plan plans[LT_PLANS];
};

static bool lt_enabled(void) {
  static atomic_int on = -1;
  if (atomic_load(&on) < 0) {
    const char *v = getenv("ACCEL_CUDA_GEMM_LT");
    atomic_store(&on, !(v != NULL && strcmp(v, "0") == 0));
  }
  return atomic_load(&on) > 0;
}

/* st is success; else, with ACCEL_CUDA_TRACE=1, says on stderr which step refused. */
static bool lt_ok(const char *what, cublasStatus_t st) {
  if (st == CUBLAS_STATUS_SUCCESS)
    return true;
  if (be_cuda_tracing())
    fprintf(stderr, "accel-cuda: cuBLASLt %s: status %d (that shape goes to cublasGemmEx)\n", what,
            (int)st);
  return false;
}

static void plan_clear(const be_cublaslt_api *lt, lt_plan *p) {
  if (p->desc)
    lt->cublasLtMatmulDescDestroy(p->desc);
  if (p->la)
    lt->cublasLtMatrixLayoutDestroy(p->la);
  if (p->lb)
    lt->cublasLtMatrixLayoutDestroy(p->lb);
  if (p->lc)
    lt->cublasLtMatrixLayoutDestroy(p->lc);
  memset(p, 0, sizeof *p);
}

void be_cuda_gemm_lt_release(be_queue *q, bool context_alive) {
  struct be_cuda_lt *s = q->lt;
  const be_cublaslt_api *lt = be_cublaslt();
  if (s == NULL || lt == NULL)
    return;
  for (int i = 0; i < LT_PLANS; i++)
    plan_clear(lt, &s->plans[i]); /* host objects: freed whatever became of the context */
  if (s->work && context_alive)
    be_cu.cuMemFreeAsync(s->work, q->stream);
  lt->cublasLtDestroy(s->handle);
  rt_free(s);
  q->lt = NULL;
}

/* The queue's Lt state, made on its first small gemm (the workspace with it). */
static struct be_cuda_lt *state_of(be_queue *q, const be_cublaslt_api *lt) {
  if (q->lt != NULL || q->capturing) /* the workspace is not to be a graph's (gemm_graph.c) */
    return q->lt;
  struct be_cuda_lt *s = rt_calloc(1, sizeof *s);
  if (s == NULL)
    return NULL;
  if (lt->cublasLtCreate(&s->handle) != CUBLAS_STATUS_SUCCESS) {
    rt_free(s);
    return NULL;
  }
  if (be_cu.cuMemAllocAsync != NULL && be_cu.cuMemFreeAsync != NULL &&
      be_cuda_trace("cuBLASLt workspace",
                    be_cu.cuMemAllocAsync(&s->work, LT_WORKSPACE, q->stream)) == CUDA_SUCCESS)
    s->work_size = LT_WORKSPACE;
  else
    s->work = 0; /* plans without a workspace */
  q->lt = s;
  return s;
}

/* Column-major, as stored: rows x cols with leading dimension ld. */
static bool layout(const be_cublaslt_api *lt, cublasLtMatrixLayout_t *out, uint32_t dtype,
                   int64_t rows, int64_t cols, int64_t ld) {
  return lt_ok("layout", lt->cublasLtMatrixLayoutCreate(out, be_cuda_data_type(dtype),
                                                        (uint64_t)rows, (uint64_t)cols, ld));
}

static bool set_trans(const be_cublaslt_api *lt, cublasLtMatmulDesc_t d,
                      cublasLtMatmulDescAttributes_t attr, int32_t op) {
  return lt_ok("transpose", lt->cublasLtMatmulDescSetAttribute(d, attr, &op, sizeof op));
}

/* Descriptors and layouts of the key's operation; false if any could not be made. */
static bool plan_describe(const be_cublaslt_api *lt, lt_plan *p) {
  const lt_key *k = &p->key;
  cudaDataType_t scale = k->compute == CUBLAS_COMPUTE_64F ? CUDA_R_64F : CUDA_R_32F;
  bool ta = k->trans_a != CUBLAS_OP_N, tb = k->trans_b != CUBLAS_OP_N;
  return lt_ok("descriptor",
               lt->cublasLtMatmulDescCreate(&p->desc, (cublasComputeType_t)k->compute, scale)) &&
         set_trans(lt, p->desc, CUBLASLT_MATMUL_DESC_TRANSA, k->trans_a) &&
         set_trans(lt, p->desc, CUBLASLT_MATMUL_DESC_TRANSB, k->trans_b) &&
         layout(lt, &p->la, k->ab_type, ta ? k->k : k->m, ta ? k->m : k->k, k->lda) &&
         layout(lt, &p->lb, k->ab_type, tb ? k->n : k->k, tb ? k->k : k->n, k->ldb) &&
         layout(lt, &p->lc, k->c_type, k->m, k->n, k->ldc);
}

/* The heuristic's first algorithm within the workspace; false if it has none. */
static bool plan_choose(const be_cublaslt_api *lt, struct be_cuda_lt *s, lt_plan *p) {
  cublasLtMatmulPreference_t pref = NULL;
  if (!lt_ok("preference", lt->cublasLtMatmulPreferenceCreate(&pref)))
    return false;
  cublasLtMatmulHeuristicResult_t r;
  int found = 0;
  bool ok =
      lt_ok("workspace size",
            lt->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &s->work_size, sizeof s->work_size)) &&
      lt_ok("heuristic", lt->cublasLtMatmulAlgoGetHeuristic(s->handle, p->desc, p->la, p->lb, p->lc,
                                                            p->lc, pref, 1, &r, &found)) &&
      lt_ok("heuristic: no algorithm", found > 0 ? r.state : CUBLAS_STATUS_NOT_SUPPORTED);
  lt->cublasLtMatmulPreferenceDestroy(pref);
  if (ok)
    p->algo = r.algo;
  return ok;
}

/* The key's plan: found, or made in the least recently used slot (one that failed to be made
 * stays, marked none, so that the shape does not retry on every call). */
static lt_plan *plan_for(const be_cublaslt_api *lt, struct be_cuda_lt *s, const lt_key *key) {
  lt_plan *victim = &s->plans[0];
  for (int i = 0; i < LT_PLANS; i++) {
    lt_plan *p = &s->plans[i];
    if (p->last_use != 0 && memcmp(&p->key, key, sizeof *key) == 0) {
      p->last_use = ++s->clock;
      return p;
    }
    if (p->last_use < victim->last_use)
      victim = p;
  }
  plan_clear(lt, victim);
  s->made++;
  victim->key = *key;
  victim->last_use = ++s->clock;
  victim->none = !plan_describe(lt, victim) || !plan_choose(lt, s, victim);
  return victim;
}

static void key_of(lt_key *k, cublasComputeType_t ct, const be_gemm_args *g) {
  *k = (lt_key){.m = g->m,
                .n = g->n,
                .k = g->k,
                .lda = g->lda,
                .ldb = g->ldb,
                .ldc = g->ldc,
                .ab_type = g->ab_type,
                .c_type = g->c_type,
                .trans_a = g->trans_a == BE_BLAS_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N,
                .trans_b = g->trans_b == BE_BLAS_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N,
                .compute = ct};
}

/* 0 < m n k <= LT_MAX_VOLUME, without overflow (each may be up to INT_MAX). */
static bool small(const be_gemm_args *g) {
  uint64_t m = (uint64_t)g->m, n = (uint64_t)g->n, k = (uint64_t)g->k;
  return m > 0 && n > 0 && k > 0 && m <= LT_MAX_VOLUME && n <= LT_MAX_VOLUME / m &&
         k <= LT_MAX_VOLUME / (m * n);
}

int be_cuda_gemm_lt(be_queue *q, cublasComputeType_t ct, const be_gemm_args *g, const void *alpha,
                    const void *beta, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c) {
  if (g->batch != 1 || !small(g) || !lt_enabled() || (a | b | c) % LT_ALIGN != 0)
    return RT_NOT_HANDLED;
  const be_cublaslt_api *lt = be_cublaslt();
  if (lt == NULL) {
    static atomic_bool told;
    if (be_cuda_tracing() && !atomic_exchange(&told, true))
      fprintf(stderr, "accel-cuda: cuBLASLt not loaded: small gemms go to cublasGemmEx\n");
    return RT_NOT_HANDLED;
  }
  struct be_cuda_lt *s = state_of(q, lt);
  if (s == NULL)
    return RT_NOT_HANDLED;
  lt_key key;
  key_of(&key, ct, g);
  lt_plan *p = plan_for(lt, s, &key);
  if (p->none)
    return RT_NOT_HANDLED;
  void *pc = (void *)(uintptr_t)c;
  cublasStatus_t st = lt->cublasLtMatmul(s->handle, p->desc, alpha, (const void *)(uintptr_t)a,
                                         p->la, (const void *)(uintptr_t)b, p->lb, beta, pc, p->lc,
                                         pc, p->lc, &p->algo, (void *)(uintptr_t)s->work,
                                         s->work_size, q->stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
    lt_ok("matmul", st);
    p->none = true; /* refused before anything was queued: cuBLAS's own way then */
    return RT_NOT_HANDLED;
  }
  if (st != CUBLAS_STATUS_SUCCESS)
    return be_cuda_gemm_error(q, st);
  s->runs += !q->capturing; /* a capture runs nothing (gemm_graph.c) */
  return 0;
}

void be_cuda_gemm_lt_stats_get(be_queue *q, be_cuda_gemm_lt_stats *out) {
  *out = (be_cuda_gemm_lt_stats){0};
  struct be_cuda_lt *s = q ? q->lt : NULL;
  if (s == NULL)
    return;
  out->runs = s->runs;
  out->made = s->made;
  for (int i = 0; i < LT_PLANS; i++)
    out->live += s->plans[i].last_use != 0;
}
