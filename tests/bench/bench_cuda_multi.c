/* bench-cuda-multi: what spans several devices of the cuda backend against the same work done
 * by hand, on the same buffers and streams, in one run:
 *   - a 256 MiB peer copy from GPU 1 to GPU 0 through copy_peer vs a raw cuMemcpyPeerAsync
 *     (needs two GPUs: "skipped: one GPU" otherwise);
 *   - an all-reduce (sum) of 1 GiB of F32 over every GPU through the collective package vs
 *     NCCL called directly (its own communicators, the same join of the streams onto the
 *     first). With one GPU it still runs, labelled "1 device": NCCL's single-rank all-reduce
 *     in place moves nothing, so the row measures the call's overhead, not bandwidth.
 * Each side runs ITERS operations between two CUDA events on the first device's queue after a
 * warm-up; the sides alternate, REPS times, and each reports its median. Inputs are uniform
 * random F32 (the backend's RNG). ratio = direct time / accel time (1.0 is parity). The
 * collective needs primary contexts (collective.c): ACCEL_CUDA_CONTEXT=primary is set here.
 * NCCL_NVLS_ENABLE is forced to 0 by the backend's loader. Without a CUDA device it exits 77;
 * without NCCL the all-reduce row says so. --quick: fewer repetitions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/driver.h"
#include "backends/cuda/nccl_lib.h"

#define BENCH_NAME "bench-cuda-multi"
#include "bench_cuda_util.h"

#define ITERS 10
#define PEER_BYTES ((size_t)256 << 20)
#define REDUCE_COUNT ((size_t)1 << 28) /* 1 GiB of F32 */

static int REPS = 9;
static const be_ops *B = &be_cuda_ops;

#define NC(call)                                                                                   \
  do {                                                                                             \
    ncclResult_t n_ = (call);                                                                      \
    if (n_ != ncclSuccess)                                                                         \
      DIE("%s:%d: %s: NCCL error %d", __FILE__, __LINE__, #call, (int)n_);                         \
  } while (0)

typedef struct gpu {
  be_device *d;
  be_queue *q;
  CUstream s;
  CUcontext ctx;
} gpu;

static gpu gpu_open(int index) {
  gpu g = {0};
  OK(B->open(index, NULL, &g.d));
  OK(B->queue_create(g.d, &g.q));
  g.s = (CUstream)(uintptr_t)be_cuda_stream(g.q);
  g.ctx = (CUcontext)(uintptr_t)be_cuda_context(g.d);
  return g;
}

static void gpu_close(gpu *g) {
  B->queue_destroy(g->q);
  B->close(g->d);
}

/* Times fn(arg) ITERS times on g's stream: ms per operation. */
static double timed(gpu *g, void (*fn)(void *), void *arg) {
  CUevent e0, e1;
  float ms = 0;
  CU(be_cu.cuCtxSetCurrent(g->ctx));
  CU(be_cu.cuEventCreate(&e0, 0));
  CU(be_cu.cuEventCreate(&e1, 0));
  CU(be_cu.cuEventRecord(e0, g->s));
  for (int i = 0; i < ITERS; i++)
    fn(arg);
  CU(be_cu.cuCtxSetCurrent(g->ctx));
  CU(be_cu.cuEventRecord(e1, g->s));
  CU(be_cu.cuEventSynchronize(e1));
  CU(be_cu.cuEventElapsedTime(&ms, e0, e1));
  CU(be_cu.cuEventDestroy(e0));
  CU(be_cu.cuEventDestroy(e1));
  return (double)ms / ITERS;
}

/* Alternates the two sides REPS times after a warm-up of each: their medians, in ms. */
static void compare(gpu *g, void (*a)(void *), void (*d)(void *), void *arg, double *ma,
                    double *md) {
  double ta[64], td[64];
  timed(g, a, arg);
  timed(g, d, arg);
  for (int r = 0; r < REPS; r++) {
    ta[r] = timed(g, a, arg);
    td[r] = timed(g, d, arg);
  }
  *ma = median(ta, REPS);
  *md = median(td, REPS);
}

/* `target`: the ratio's, or a note where the row has none. */
static void row(const char *what, double bytes, double a, double d, const char *target) {
  char sa[24], sd[24];
  snprintf(sa, sizeof sa, "%.3f ms %.1f GB/s", a, bytes / a * 1e-6);
  snprintf(sd, sizeof sd, "%.3f ms %.1f GB/s", d, bytes / d * 1e-6);
  add_row(what, sa, sd, d / a, target);
}

/* ---- peer copy ---------------------------------------------------------------------------- */

typedef struct peer {
  gpu *dst, *src;
  be_mem md, ms;
} peer;

static void peer_accel(void *arg) {
  peer *p = arg;
  OK(B->copy_peer(p->dst->q, p->md, 0, p->src->d, p->ms, 0, PEER_BYTES));
}

static void peer_raw(void *arg) {
  peer *p = arg;
  CU(be_cu.cuCtxSetCurrent(p->dst->ctx));
  CU(be_cu.cuMemcpyPeerAsync((CUdeviceptr)be_cuda_devptr(p->md), p->dst->ctx,
                             (CUdeviceptr)be_cuda_devptr(p->ms), p->src->ctx, PEER_BYTES,
                             p->dst->s));
}

static void bench_peer(int ngpu) {
  if (ngpu < 2) {
    printf("peer copy 256 MiB: skipped: one GPU\n");
    add_row("peer copy 256 MiB GPU1 -> GPU0", "skipped: one GPU", "-", 0, "-");
    return;
  }
  gpu g0 = gpu_open(0), g1 = gpu_open(1);
  peer p = {.dst = &g0, .src = &g1};
  OK(B->mem_alloc(g0.d, PEER_BYTES, &p.md));
  OK(B->mem_alloc(g1.d, PEER_BYTES, &p.ms));
  be_rng_args r = {.dist = BE_RNG_UNIFORM, .seed = 7};
  OK(B->rng->fill(g1.q, ACCEL_F32, p.ms, 0, PEER_BYTES / 4, &r));
  CU(be_cu.cuCtxSetCurrent(g1.ctx));
  CU(be_cu.cuStreamSynchronize(g1.s));
  printf("peer path GPU1 -> GPU0: %s\n",
         be_cuda_peer_direct(g0.d, g1.d) == 1 ? "direct" : "staged by the driver");
  double a, d;
  compare(&g0, peer_accel, peer_raw, &p, &a, &d);
  row("peer copy 256 MiB GPU1 -> GPU0", (double)PEER_BYTES, a, d, ">= 0.9");
  B->mem_free(g0.d, &p.md);
  B->mem_free(g1.d, &p.ms);
  gpu_close(&g1);
  gpu_close(&g0);
}

/* ---- all-reduce --------------------------------------------------------------------------- */

typedef struct reduce {
  uint32_t n;
  gpu g[BE_COLL_MAX_DEVICES];
  be_coll_call c;
  const be_nccl_api *api;
  ncclComm_t comm[BE_COLL_MAX_DEVICES];
  CUevent done[BE_COLL_MAX_DEVICES];
} reduce;

static void reduce_accel(void *arg) {
  reduce *x = arg;
  OK(B->collective->run(&x->c));
}

/* What the backend does, by hand: one group, then stream 0 waits for the others. */
static void reduce_direct(void *arg) {
  reduce *x = arg;
  NC(x->api->ncclGroupStart());
  for (uint32_t i = 0; i < x->n; i++) {
    void *p = (void *)(uintptr_t)be_cuda_devptr(x->c.buf[i]);
    CU(be_cu.cuCtxSetCurrent(x->g[i].ctx));
    NC(x->api->ncclAllReduce(p, p, REDUCE_COUNT, ncclFloat32, ncclSum, x->comm[i], x->g[i].s));
  }
  NC(x->api->ncclGroupEnd());
  for (uint32_t i = 1; i < x->n; i++) {
    CU(be_cu.cuCtxSetCurrent(x->g[i].ctx));
    CU(be_cu.cuEventRecord(x->done[i], x->g[i].s));
    CU(be_cu.cuCtxSetCurrent(x->g[0].ctx));
    CU(be_cu.cuStreamWaitEvent(x->g[0].s, x->done[i], 0));
  }
}

static void direct_comms(reduce *x) {
  ncclUniqueId id;
  NC(x->api->ncclGetUniqueId(&id));
  NC(x->api->ncclGroupStart());
  for (uint32_t i = 0; i < x->n; i++) {
    CU(be_cu.cuCtxSetCurrent(x->g[i].ctx));
    NC(x->api->ncclCommInitRank(&x->comm[i], (int)x->n, id, (int)i));
  }
  NC(x->api->ncclGroupEnd());
  for (uint32_t i = 1; i < x->n; i++) {
    CU(be_cu.cuCtxSetCurrent(x->g[i].ctx));
    CU(be_cu.cuEventCreate(&x->done[i], CU_EVENT_DISABLE_TIMING));
  }
}

static void bench_all_reduce(int ngpu) {
  static reduce x;
  setenv("ACCEL_CUDA_CONTEXT", "primary", 1);
  x.n = ngpu < (int)BE_COLL_MAX_DEVICES ? (uint32_t)ngpu : BE_COLL_MAX_DEVICES;
  x.c = (be_coll_call){.kind = BE_COLL_ALL_REDUCE,
                       .dtype = ACCEL_F32,
                       .reduce = BE_REDUCE_SUM,
                       .ndev = x.n,
                       .count = REDUCE_COUNT};
  for (uint32_t i = 0; i < x.n; i++) {
    x.g[i] = gpu_open((int)i);
    x.c.dev[i] = x.g[i].d;
    x.c.queue[i] = x.g[i].q;
    OK(B->mem_alloc(x.g[i].d, REDUCE_COUNT * 4, &x.c.buf[i]));
    be_rng_args r = {.dist = BE_RNG_UNIFORM, .seed = 11, .offset = i * REDUCE_COUNT};
    OK(B->rng->fill(x.g[i].q, ACCEL_F32, x.c.buf[i], 0, REDUCE_COUNT, &r));
    CU(be_cu.cuCtxSetCurrent(x.g[i].ctx));
    CU(be_cu.cuStreamSynchronize(x.g[i].s));
  }
  char what[48];
  snprintf(what, sizeof what, "all-reduce sum 1 GiB F32, %u device%s", x.n, x.n > 1 ? "s" : "");
  x.api = be_nccl();
  if (x.api == NULL || B->collective->supports(x.c.dev, x.n) != 0) {
    printf("%s: not supported (%s)\n", what, x.api == NULL ? be_nccl_why() : "supports() said no");
    add_row(what, "not supported", "-", 0, "-");
  } else {
    printf("NCCL %d\n", x.api->version);
    direct_comms(&x);
    double a, d;
    compare(&x.g[0], reduce_accel, reduce_direct, &x, &a, &d);
    /* bus bandwidth, as nccl-tests count it: 2 (n - 1) / n of the buffer per rank */
    double bytes = (double)REDUCE_COUNT * 4 * (x.n > 1 ? 2.0 * (x.n - 1) / x.n : 1.0);
    /* one rank in place moves nothing: that row times the call alone */
    row(what, bytes, a, d, x.n > 1 ? ">= 0.95" : "none: no data moves");
    for (uint32_t i = 0; i < x.n; i++) {
      CU(be_cu.cuCtxSetCurrent(x.g[i].ctx));
      CU(be_cu.cuStreamSynchronize(x.g[i].s));
    }
    NC(x.api->ncclGroupStart()); /* ending one communicator waits for its peers */
    for (uint32_t i = 0; i < x.n && x.api->ncclCommFinalize != NULL; i++)
      NC(x.api->ncclCommFinalize(x.comm[i]));
    NC(x.api->ncclGroupEnd());
    for (uint32_t i = 0; i < x.n; i++)
      NC(x.api->ncclCommDestroy(x.comm[i]));
  }
  for (uint32_t i = 0; i < x.n; i++) {
    B->mem_free(x.g[i].d, &x.c.buf[i]);
    gpu_close(&x.g[i]);
  }
  unsetenv("ACCEL_CUDA_CONTEXT");
}

int main(int argc, char **argv) {
  char why[128] = "";
  int ngpu = 0;
  if (argc > 1 && strcmp(argv[1], "--quick") == 0)
    REPS = 3;
  if (B->probe(&ngpu, why, sizeof why) != 0 || ngpu == 0) {
    printf("SKIP: no CUDA device (%s)\n", why);
    return 77;
  }
  gpu g = gpu_open(0);
  be_device_info info;
  OK(B->info(g.d, &info));
  gpu_close(&g);
  printf("== peer copies and collectives (%d GPU%s), median of %d x %d ==\n", ngpu,
         ngpu > 1 ? "s" : "", REPS, ITERS);
  bench_peer(ngpu);
  bench_all_reduce(ngpu);
  print_table("multi-device", info.name, "direct time / accel time");
  return 0;
}
