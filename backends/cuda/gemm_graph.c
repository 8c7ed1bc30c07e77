/* Repeated gemms replayed from captured CUDA graphs.
 *
 * A small gemm costs host time more than GPU time. On an H200, cublasGemmEx of TF32 n = 1024
 * spends 12.7 us of host time per call against 13.4 us on the GPU, FP32 n = 256 14.9 us
 * against 7.9 us (cuBLASLt with a kept plan: 13.9 us); the same call captured once in a CUDA
 * graph launches in 1.4-1.9 us (tests/bench/cublas_host_cost.cu, docs/PERFORMANCE.md). A
 * pipeline of small gemms is bound by that host time, and in accel the host time is the loop's,
 * with accel's own work per op on top. Programs repeat their gemms: the same shapes on the
 * same buffers, step after step. So a queue remembers its last GRAPH_SLOTS gemms, keyed by
 * everything the call depends on (shape, types, compute type, scalars and the three device
 * addresses). The second time a key is seen, its call is captured and instantiated; from then
 * on it is launched as a graph.
 *
 * Why a replay computes what the call would: the graph holds the call's kernels and their
 * arguments, nothing of the data, so it reads and writes the addresses as they are when it runs,
 * in stream order like any launch. A key names addresses, not buffers: a buffer freed and
 * another made at the same address gets the same product, which is what the call would give.
 * What the kernels use besides the matrices (the cuBLAS handle's workspace, the cuBLASLt
 * workspace) belongs to the queue and is released after the graphs (blas.c).
 *
 * The capture is in relaxed mode, so it forbids nothing to the other threads of the process
 * (copy threads, callbacks). Anything that fails in the capture or the instantiation marks the
 * key refused: it runs as a plain call until it is evicted. Memory is bounded by the slots:
 * each instantiated graph holds a few KiB of the driver's.
 *
 * Only products of at most GRAPH_MAX_VOLUME multiply-adds: beyond that the GPU's time hides the
 * host's. ACCEL_CUDA_GEMM_GRAPHS=0, or be_cuda_set_gemm_graphs, turns replays off (for
 * comparisons). On the queue's thread, like everything else of the queue's cuBLAS state. */
#include <string.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/gemm_graph.h"
#include "runtime/alloc.h"

#define GRAPH_SLOTS 64
#define GRAPH_MAX_VOLUME ((uint64_t)1 << 31) /* m n k batch: 1024^3 twice over */

typedef struct graph_key { /* compared with memcmp: no padding (`zero` fills it) */
  uint64_t a, b, c;        /* first: two keys of different calls differ here most often */
  int64_t m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c;
  double alpha, beta;
  uint32_t ab_type, c_type;
  int32_t trans_a, trans_b, compute, zero;
} graph_key;

typedef struct graph_slot {
  graph_key key;
  uint64_t last_use; /* 0: an empty slot */
  bool refused;      /* capture or instantiation failed: a plain call */
  CUgraphExec exec;  /* NULL: seen once, not captured yet */
} graph_slot;

struct be_cuda_graphs {
  uint64_t clock;
  uint64_t captured, replays, refused; /* be_cuda_gemm_graph_stats */
  graph_slot slots[GRAPH_SLOTS];
};

static bool driver_has_graphs(void) {
  return be_cu.cuStreamBeginCapture != NULL && be_cu.cuStreamEndCapture != NULL &&
         be_cu.cuGraphInstantiate != NULL && be_cu.cuGraphLaunch != NULL &&
         be_cu.cuGraphExecDestroy != NULL && be_cu.cuGraphDestroy != NULL;
}

/* 0 < m n k batch <= GRAPH_MAX_VOLUME, without overflow (each may be up to INT_MAX). */
static bool small_enough(const be_gemm_args *g) {
  uint64_t v = 1, dims[4] = {(uint64_t)g->m, (uint64_t)g->n, (uint64_t)g->k, (uint64_t)g->batch};
  for (int i = 0; i < 4; i++) {
    if (dims[i] == 0 || dims[i] > GRAPH_MAX_VOLUME / v)
      return false;
    v *= dims[i];
  }
  return true;
}

static void key_of(graph_key *k, const be_cuda_gemm_call *call) {
  const be_gemm_args *g = call->g;
  *k = (graph_key){.a = call->a,
                   .b = call->b,
                   .c = call->c,
                   .m = g->m,
                   .n = g->n,
                   .k = g->k,
                   .lda = g->lda,
                   .ldb = g->ldb,
                   .ldc = g->ldc,
                   .batch = g->batch,
                   .stride_a = g->batch > 1 ? g->stride_a : 0, /* unread for one matrix */
                   .stride_b = g->batch > 1 ? g->stride_b : 0,
                   .stride_c = g->batch > 1 ? g->stride_c : 0,
                   .alpha = g->alpha,
                   .beta = g->beta,
                   .ab_type = g->ab_type,
                   .c_type = g->c_type,
                   .trans_a = g->trans_a,
                   .trans_b = g->trans_b,
                   .compute = call->compute};
}

static void slot_clear(graph_slot *s) {
  if (s->exec != NULL)
    be_cu.cuGraphExecDestroy(s->exec);
  memset(s, 0, sizeof *s);
}

void be_cuda_gemm_graph_release(be_queue *q, bool context_alive) {
  struct be_cuda_graphs *gs = q->graphs;
  if (gs == NULL)
    return;
  for (int i = 0; context_alive && i < GRAPH_SLOTS; i++)
    slot_clear(&gs->slots[i]); /* else the graphs went with the context */
  rt_free(gs);
  q->graphs = NULL;
}

/* The key's slot, or NULL after taking the least recently used slot for it (seen once). */
static graph_slot *slot_for(struct be_cuda_graphs *gs, const graph_key *key) {
  graph_slot *victim = &gs->slots[0];
  for (int i = 0; i < GRAPH_SLOTS; i++) {
    graph_slot *s = &gs->slots[i];
    if (s->last_use != 0 && memcmp(&s->key, key, sizeof *key) == 0) {
      s->last_use = ++gs->clock;
      return s;
    }
    if (s->last_use < victim->last_use)
      victim = s;
  }
  slot_clear(victim);
  victim->key = *key;
  victim->last_use = ++gs->clock;
  return NULL;
}

/* Captures the call on the queue's stream and instantiates it into s->exec; false (nothing
 * queued: a capture runs nothing) if any step failed. */
static bool capture(be_queue *q, graph_slot *s, const be_cuda_gemm_call *call) {
  if (be_cu.cuStreamBeginCapture(q->stream, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS)
    return false;
  q->capturing = true;
  int rc = be_cuda_gemm_issue(call);
  q->capturing = false;
  CUgraph graph = NULL;
  CUresult r = be_cu.cuStreamEndCapture(q->stream, &graph);
  bool ok = rc == 0 && r == CUDA_SUCCESS && graph != NULL &&
            be_cu.cuGraphInstantiate(&s->exec, graph, 0) == CUDA_SUCCESS;
  if (graph != NULL)
    be_cu.cuGraphDestroy(graph);
  if (!ok)
    s->exec = NULL;
  return ok;
}

static struct be_cuda_graphs *graphs_of(be_queue *q) {
  if (q->graphs == NULL)
    q->graphs = rt_calloc(1, sizeof *q->graphs);
  return q->graphs;
}

int be_cuda_gemm_graph(be_queue *q, const be_cuda_gemm_call *call) {
  if (!atomic_load(&q->dev->gemm_graphs) || !small_enough(call->g) || !driver_has_graphs())
    return ACCEL_EAGAIN;
  struct be_cuda_graphs *gs = graphs_of(q);
  if (gs == NULL)
    return ACCEL_EAGAIN;
  graph_key key;
  key_of(&key, call);
  graph_slot *s = slot_for(gs, &key);
  if (s == NULL || s->refused)
    return ACCEL_EAGAIN;
  bool fresh = s->exec == NULL;
  if (fresh && !capture(q, s, call)) {
    s->refused = true;
    gs->refused++;
    return ACCEL_EAGAIN;
  }
  CUresult r = be_cu.cuGraphLaunch(s->exec, q->stream);
  if (r != CUDA_SUCCESS && !be_cuda_sticky(r)) { /* out of memory, say: a plain call */
    slot_clear(s);
    return ACCEL_EAGAIN;
  }
  if (r != CUDA_SUCCESS)
    return be_cuda_check(q->dev, r);
  if (fresh)
    gs->captured++;
  else
    gs->replays++;
  return 0;
}

void be_cuda_gemm_graph_stats_get(be_queue *q, be_cuda_gemm_graph_stats *out) {
  *out = (be_cuda_gemm_graph_stats){0};
  struct be_cuda_graphs *gs = q ? q->graphs : NULL;
  if (gs == NULL)
    return;
  out->captured = gs->captured;
  out->replays = gs->replays;
  out->refused = gs->refused;
  for (int i = 0; i < GRAPH_SLOTS; i++)
    out->live += gs->slots[i].exec != NULL;
}

int be_cuda_set_gemm_graphs(be_device *dev, bool on) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  atomic_store(&dev->gemm_graphs, on);
  return 0;
}
