/* Repeated gemms replayed from captured CUDA graphs.
 *
 * A small gemm costs host time more than GPU time. On an H200, cublasGemmEx of TF32 n = 1024
 * spends 12.7 us of host time per call against 13.4 us on the GPU, FP32 n = 256 14.9 us
 * against 7.9 us (cuBLASLt with a kept plan: 13.9 us); the same call captured once in a CUDA
 * graph launches in 1.4-1.9 us (tests/bench/cublas_host_cost.cu, docs/PERFORMANCE.md). A
 * pipeline of small gemms is bound by that host time, and in accel the host time is the loop's,
 * with accel's own work per op on top. Programs repeat their gemms: the same shapes on the
 * same buffers, step after step. So a queue keys its gemms by everything the call depends on
 * (shape, types, compute type, scalars and the three device addresses) and remembers the last
 * SEEN_SLOTS keys seen once. The second time a key is seen, its call is captured and
 * instantiated into one of GRAPH_SLOTS graphs (the least recently used one goes), and from
 * then on it is launched as a graph. Gemms seen once (temporaries at new addresses) pass
 * through the table of keys seen once and never evict a graph.
 *
 * Why a replay computes what the call would: the graph holds the call's kernels and their
 * arguments, nothing of the data, so it reads and writes the addresses as they are when it runs,
 * in stream order like any launch. A key names addresses, not buffers: a buffer freed and
 * another made at the same address gets the same product, which is what the call would give.
 * What the kernels use besides the matrices (the cuBLAS handle's workspace, which blas.c gives
 * the handle so that cuBLAS allocates none in a capture, and the cuBLASLt workspace) belongs to
 * the queue and is released after the graphs (blas.c).
 *
 * The capture is in thread-local mode: it forbids nothing to the other threads of the process
 * (copy threads, callbacks), and nothing else can queue work on the stream meanwhile (only the
 * queue's thread does, the loop holding the runtime's token). A capture or instantiation that
 * fails leaves the key to plain calls for its next RETRY_AFTER sightings. Memory is bounded by
 * the slots: each instantiated graph holds a few KiB of the driver's.
 *
 * Only products of at most GRAPH_MAX_VOLUME multiply-adds: beyond that the GPU's time hides the
 * host's. ACCEL_CUDA_GEMM_GRAPHS=0, or be_cuda_set_gemm_graphs, turns replays off (for
 * comparisons). On the queue's thread, like everything else of the queue's cuBLAS state. */
#include <string.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/gemm_graph.h"
#include "runtime/alloc.h"
#include "runtime/status.h"

#define GRAPH_SLOTS 64
#define SEEN_SLOTS 32
#define RETRY_AFTER 256 /* sightings of a refused key before its capture is tried again */
#define GRAPH_MAX_VOLUME ((uint64_t)1 << 31) /* m n k batch: 1024^3 twice over */

typedef struct graph_key { /* compared with memcmp: no padding (`zero` fills it) */
  uint64_t a, b, c;        /* first: two keys of different calls differ here most often */
  int64_t m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c;
  double alpha, beta;
  uint32_t ab_type, c_type;
  int32_t trans_a, trans_b, compute, zero;
} graph_key;

typedef struct slot_head { /* first in both kinds of slot (find) */
  graph_key key;
  uint64_t last_use; /* 0: an empty slot */
} slot_head;

typedef struct graph_slot {
  slot_head h;
  CUgraphExec exec;
} graph_slot;

typedef struct seen_slot {
  slot_head h;
  uint32_t skip; /* sightings left before a capture is tried again (after a refusal) */
} seen_slot;

struct be_cuda_graphs {
  uint64_t clock;
  uint64_t captured, replays, refused; /* be_cuda_gemm_graph_stats */
  graph_slot graphs[GRAPH_SLOTS];
  seen_slot seen[SEEN_SLOTS];
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

static void graph_clear(graph_slot *s) {
  if (s->exec != NULL)
    be_cu.cuGraphExecDestroy(s->exec);
  memset(s, 0, sizeof *s);
}

void be_cuda_gemm_graph_release(be_queue *q, bool context_alive) {
  struct be_cuda_graphs *gs = q->graphs;
  if (gs == NULL)
    return;
  for (int i = 0; context_alive && i < GRAPH_SLOTS; i++)
    graph_clear(&gs->graphs[i]); /* else the graphs went with the context */
  rt_free(gs);
  q->graphs = NULL;
}

/* Index of the key among n slots `stride` bytes apart from `first`, or -1; *lru: the least
 * recently used slot (an empty one first). */
static int find(const slot_head *first, size_t stride, int n, const graph_key *key, int *lru) {
  uint64_t oldest = UINT64_MAX;
  for (int i = 0; i < n; i++) {
    const slot_head *h = (const slot_head *)(const void *)((const char *)first +
                                                           (size_t)i * stride);
    if (h->last_use != 0 && memcmp(&h->key, key, sizeof *key) == 0)
      return i;
    if (h->last_use < oldest) {
      oldest = h->last_use;
      *lru = i;
    }
  }
  return -1;
}

/* Captures the call on the queue's stream and instantiates it into *exec; false (nothing
 * queued: a capture runs nothing) if any step failed. */
static bool capture(be_queue *q, const be_cuda_gemm_call *call, CUgraphExec *exec) {
  if (be_cu.cuStreamBeginCapture(q->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS)
    return false;
  q->capturing = true;
  int rc = be_cuda_gemm_issue(call);
  q->capturing = false;
  CUgraph graph = NULL;
  CUresult r = be_cu.cuStreamEndCapture(q->stream, &graph);
  bool ok = rc == 0 && r == CUDA_SUCCESS && graph != NULL &&
            be_cu.cuGraphInstantiate(exec, graph, 0) == CUDA_SUCCESS;
  if (graph != NULL)
    be_cu.cuGraphDestroy(graph);
  return ok;
}

static struct be_cuda_graphs *graphs_of(be_queue *q) {
  if (q->graphs == NULL)
    q->graphs = rt_calloc(1, sizeof *q->graphs);
  return q->graphs;
}

/* The key's graph: found, or captured now if the key was seen before (NULL: a plain call). */
static graph_slot *graph_for(be_queue *q, struct be_cuda_graphs *gs, const graph_key *key,
                             const be_cuda_gemm_call *call, bool *fresh) {
  int lru = 0, i = find(&gs->graphs[0].h, sizeof gs->graphs[0], GRAPH_SLOTS, key, &lru);
  *fresh = i < 0;
  if (i >= 0) {
    gs->graphs[i].h.last_use = ++gs->clock;
    return &gs->graphs[i];
  }
  int old = 0, j = find(&gs->seen[0].h, sizeof gs->seen[0], SEEN_SLOTS, key, &old);
  if (j < 0) { /* first sighting */
    gs->seen[old] = (seen_slot){.h = {.key = *key, .last_use = ++gs->clock}};
    return NULL;
  }
  seen_slot *s = &gs->seen[j];
  s->h.last_use = ++gs->clock;
  if (s->skip > 0) {
    s->skip--;
    return NULL;
  }
  CUgraphExec exec = NULL;
  if (!capture(q, call, &exec)) {
    s->skip = RETRY_AFTER;
    gs->refused++;
    return NULL;
  }
  graph_clear(&gs->graphs[lru]);
  gs->graphs[lru] = (graph_slot){.h = {.key = *key, .last_use = ++gs->clock}, .exec = exec};
  memset(s, 0, sizeof *s); /* a graph now */
  return &gs->graphs[lru];
}

int be_cuda_gemm_graph(be_queue *q, const be_cuda_gemm_call *call) {
  if (!atomic_load(&q->dev->gemm_graphs) || !small_enough(call->g) || !driver_has_graphs())
    return RT_NOT_HANDLED;
  struct be_cuda_graphs *gs = graphs_of(q);
  if (gs == NULL)
    return RT_NOT_HANDLED;
  graph_key key;
  key_of(&key, call);
  bool fresh;
  graph_slot *s = graph_for(q, gs, &key, call, &fresh);
  if (s == NULL)
    return RT_NOT_HANDLED;
  CUresult r = be_cu.cuGraphLaunch(s->exec, q->stream);
  if (r != CUDA_SUCCESS && !be_cuda_sticky(r)) { /* out of memory, say: a plain call */
    graph_clear(s);
    return RT_NOT_HANDLED;
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
    out->live += gs->graphs[i].exec != NULL;
}

int be_cuda_set_gemm_graphs(be_device *dev, bool on) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  atomic_store(&dev->gemm_graphs, on);
  return 0;
}
