/* The `collective` package of the cuda backend (backend.h): all-reduce (sum, prod, min, max),
 * broadcast and all-gather over a set of devices, through NCCL loaded at run time
 * (nccl_lib.h), in F32, F64, F16, BF16 and U32 (U32: sum, min, max).
 *
 * Contexts: only devices in their GPU's primary context (ACCEL_CUDA_CONTEXT=primary, context.c)
 * take collectives; with contexts of their own, supports() answers ACCEL_ENOTSUP. NCCL works
 * through the runtime API, which binds a device's primary context: a communicator belongs to
 * the context current when it was made, and NCCL's own calls (cudaSetDevice in
 * ncclCommInitRank and in the launch of a group's work) switch the calling thread to the
 * primary context of each communicator's device (NVIDIA/nccl issues 565, "NCCL currently uses
 * a device's primary context for API calls that are wrapped in ncclGroupStart/End()", and
 * 1736, "ncclCommInitRank switches the CUDA context"). Its kernels would then run in a context
 * that can neither use our streams (another context's) nor read our buffers (another
 * context's allocations). Switching an open device to the primary context on demand would
 * move its memory and streams, which cannot be done under work in flight; asking for primary
 * contexts up front is the robust choice, and the test and benchmark do so.
 *
 * Communicators: one clique per distinct ordered list of devices (and their incarnations),
 * made on first use with ncclGetUniqueId + ncclCommInitRank per device in one group, kept in a
 * list under `lock` with an event per device but the first, and destroyed when any member's
 * incarnation ends (be_cuda_coll_forget, from dissolve: close, reset). The lock is held across
 * a run (its NCCL group) and a clique's making: NCCL's group state is per thread, but its
 * communicators are not to be used by two threads at once.
 *
 * Ordering (backend.h): the work of device i goes on queue[i]'s stream; then each queue[i]
 * (i > 0) records its clique event and queue[0]'s stream waits on them, so that what is
 * queued on queue[0] after the call waits for every device. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "backends/cuda/nccl_lib.h"
#include "runtime/alloc.h"

#define MAXDEV BE_COLL_MAX_DEVICES

typedef struct clique {
  struct clique *next;
  uint32_t ndev;
  be_device *dev[MAXDEV];
  uint64_t inc[MAXDEV]; /* the members' incarnations when it was made */
  ncclComm_t comm[MAXDEV];
  CUevent done[MAXDEV]; /* [i > 0]: queue[i]'s point after the call, in dev[i]'s context */
} clique;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static clique *cliques;

/* ---- what the package takes --------------------------------------------------------------- */

#define FLOATS                                                                                     \
  (ACCEL_DTYPE_BIT(ACCEL_F32) | ACCEL_DTYPE_BIT(ACCEL_F64) | ACCEL_DTYPE_BIT(ACCEL_F16) |          \
   ACCEL_DTYPE_BIT(ACCEL_BF16))

static bool available(be_device *dev) {
  return be_nccl() != NULL && dev->primary;
}

static uint32_t coll_dtypes(be_device *dev) {
  return dev != NULL && available(dev) ? FLOATS | ACCEL_DTYPE_BIT(ACCEL_U32) : 0;
}

/* NCCL takes one GPU once per communicator ("may lead to hangs" otherwise). */
static int coll_supports(be_device *const dev[], uint32_t ndev) {
  if (dev == NULL || ndev == 0 || ndev > MAXDEV)
    return ACCEL_ENOTSUP;
  for (uint32_t i = 0; i < ndev; i++) {
    if (dev[i] == NULL || !available(dev[i]))
      return ACCEL_ENOTSUP;
    for (uint32_t j = 0; j < i; j++)
      if (dev[j] == NULL || dev[j]->cu == dev[i]->cu)
        return ACCEL_ENOTSUP;
  }
  return 0;
}

static int nccl_type(uint32_t dtype, ncclDataType_t *out) {
  switch (dtype) {
  case ACCEL_F32:
    *out = ncclFloat32;
    return 0;
  case ACCEL_F64:
    *out = ncclFloat64;
    return 0;
  case ACCEL_F16:
    *out = ncclFloat16;
    return 0;
  case ACCEL_BF16:
    *out = ncclBfloat16;
    return 0;
  case ACCEL_U32:
    *out = ncclUint32;
    return 0;
  default:
    return ACCEL_ENOTSUP;
  }
}

static int nccl_op(be_reduce_op op, uint32_t dtype, ncclRedOp_t *out) {
  static const ncclRedOp_t ops[] = {[BE_REDUCE_SUM] = ncclSum,
                                    [BE_REDUCE_PROD] = ncclProd,
                                    [BE_REDUCE_MIN] = ncclMin,
                                    [BE_REDUCE_MAX] = ncclMax};
  if ((unsigned)op > BE_REDUCE_MAX)
    return ACCEL_EINVAL;
  if (dtype == ACCEL_U32 && op == BE_REDUCE_PROD)
    return ACCEL_ENOTSUP;
  *out = ops[op];
  return 0;
}

/* ---- checks ------------------------------------------------------------------------------- */

static int check_buffers(const be_coll_call *c, uint32_t i, size_t esize) {
  CUdeviceptr p = 0;
  if (be_cuda_span(c->buf[i], 0, c->count, esize, &p) != 0)
    return ACCEL_EINVAL;
  if (c->kind != BE_COLL_ALL_GATHER)
    return 0;
  if (c->count > SIZE_MAX / c->ndev || be_cuda_span(c->recv[i], 0, c->ndev * c->count, esize, &p))
    return ACCEL_EINVAL;
  return 0;
}

static int check_call(const be_coll_call *c) {
  if (c == NULL || c->ndev == 0 || c->ndev > MAXDEV || (unsigned)c->kind > BE_COLL_ALL_GATHER)
    return ACCEL_EINVAL;
  if (c->kind == BE_COLL_BROADCAST && c->root >= c->ndev)
    return ACCEL_EINVAL;
  size_t esize = be_cuda_esize(c->dtype);
  ncclDataType_t t;
  ncclRedOp_t op;
  int rc = nccl_type(c->dtype, &t);
  if (rc == 0 && c->kind == BE_COLL_ALL_REDUCE)
    rc = nccl_op(c->reduce, c->dtype, &op);
  for (uint32_t i = 0; rc == 0 && i < c->ndev; i++) {
    if (c->dev[i] == NULL || c->queue[i] == NULL || c->queue[i]->dev != c->dev[i])
      return ACCEL_EINVAL;
    rc = check_buffers(c, i, esize);
  }
  for (uint32_t i = 0; rc == 0 && i < c->ndev; i++)
    rc = be_cuda_queue_ok(c->queue[i]);
  return rc != 0 ? rc : coll_supports(c->dev, c->ndev);
}

/* ---- cliques ------------------------------------------------------------------------------ */

static bool any_lost(const clique *k) {
  for (uint32_t i = 0; i < k->ndev; i++)
    if (atomic_load(&k->dev[i]->fault) != BE_CUDA_OK || k->dev[i]->ctx == NULL)
      return true;
  return false;
}

/* NCCL's communicators of one clique end together (ending one waits for its peers): finalized
 * in one group and then destroyed, or aborted when a member is lost (nothing is waited for). */
static void comms_end(const be_nccl_api *n, ncclComm_t *comm, uint32_t ndev, bool lost) {
  n->ncclGroupStart();
  for (uint32_t i = 0; i < ndev; i++)
    if (comm[i] != NULL && (lost || n->ncclCommFinalize != NULL))
      (lost ? n->ncclCommAbort : n->ncclCommFinalize)(comm[i]);
  n->ncclGroupEnd();
  for (uint32_t i = 0; !lost && i < ndev; i++)
    if (comm[i] != NULL)
      n->ncclCommDestroy(comm[i]);
}

static void clique_free(clique *k) {
  bool lost = any_lost(k);
  comms_end(be_nccl(), k->comm, k->ndev, lost);
  for (uint32_t i = 1; i < k->ndev; i++) {
    be_device *d = k->dev[i];
    if (k->done[i] != NULL && atomic_load(&d->fault) == BE_CUDA_OK && be_cuda_enter(d) == 0)
      be_cu.cuEventDestroy(k->done[i]); /* a lost context's go with it */
  }
  rt_free(k);
}

static bool clique_is(const clique *k, const be_coll_call *c) {
  if (k->ndev != c->ndev)
    return false;
  for (uint32_t i = 0; i < k->ndev; i++)
    if (k->dev[i] != c->dev[i] || k->inc[i] != c->dev[i]->incarnation)
      return false;
  return true;
}

/* The communicators, one per device in one group (NCCL's way of making a clique from one
 * thread); each rank's device is the one whose context is current. */
static int comms_make(const be_nccl_api *n, clique *k) {
  ncclUniqueId id;
  const char *nvls = getenv("NCCL_NVLS_ENABLE");
  if (nvls == NULL || strcmp(nvls, "0") != 0)
    setenv("NCCL_NVLS_ENABLE", "0", 1); /* never NVLink multicast (nccl_lib.h) */
  ncclResult_t r = n->ncclGetUniqueId(&id);
  if (r != ncclSuccess)
    return be_nccl_err(r);
  int rc = 0;
  n->ncclGroupStart();
  for (uint32_t i = 0; rc == 0 && i < k->ndev; i++) {
    rc = be_cuda_enter(k->dev[i]);
    if (rc == 0)
      rc = be_nccl_err(n->ncclCommInitRank(&k->comm[i], (int)k->ndev, id, (int)i));
  }
  r = n->ncclGroupEnd();
  if (rc == 0)
    rc = be_nccl_err(r);
  if (rc != 0) {
    for (uint32_t i = 0; i < k->ndev; i++)
      if (k->comm[i] != NULL)
        n->ncclCommAbort(k->comm[i]);
    memset(k->comm, 0, sizeof k->comm);
  }
  return rc;
}

static int events_make(clique *k) {
  int rc = 0;
  for (uint32_t i = 1; rc == 0 && i < k->ndev; i++) {
    rc = be_cuda_enter(k->dev[i]);
    if (rc == 0)
      rc = be_cuda_check(k->dev[i], be_cu.cuEventCreate(&k->done[i], CU_EVENT_DISABLE_TIMING));
  }
  return rc;
}

/* Under lock: the clique of c's devices, made if needed. */
static clique *clique_get(const be_coll_call *c, int *rc) {
  for (clique *k = cliques; k != NULL; k = k->next)
    if (clique_is(k, c))
      return k;
  clique *k = rt_calloc(1, sizeof *k);
  if (k == NULL) {
    *rc = ACCEL_ENOMEM;
    return NULL;
  }
  k->ndev = c->ndev;
  for (uint32_t i = 0; i < c->ndev; i++) {
    k->dev[i] = c->dev[i];
    k->inc[i] = c->dev[i]->incarnation;
  }
  *rc = comms_make(be_nccl(), k);
  if (*rc == 0 && (*rc = events_make(k)) != 0)
    clique_free(k);
  else if (*rc != 0)
    rt_free(k);
  if (*rc != 0)
    return NULL;
  be_cuda_trace("NCCL communicators made", CUDA_SUCCESS);
  k->next = cliques;
  cliques = k;
  return k;
}

void be_cuda_coll_forget(be_device *dev) {
  pthread_mutex_lock(&lock);
  clique **p = &cliques;
  while (*p != NULL) {
    clique *k = *p;
    bool member = false;
    for (uint32_t i = 0; i < k->ndev; i++)
      member = member || k->dev[i] == dev;
    if (!member) {
      p = &k->next;
      continue;
    }
    *p = k->next;
    clique_free(k);
  }
  pthread_mutex_unlock(&lock);
}

/* ---- run ---------------------------------------------------------------------------------- */

static ncclResult_t enqueue_one(const be_nccl_api *n, const be_coll_call *c, const clique *k,
                                uint32_t i) {
  ncclDataType_t t = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  CUdeviceptr buf = 0, recv = 0;
  size_t esize = be_cuda_esize(c->dtype);
  CUstream s = c->queue[i]->stream;
  (void)nccl_type(c->dtype, &t);
  if (be_cuda_span(c->buf[i], 0, c->count, esize, &buf) != 0 ||
      (c->kind == BE_COLL_ALL_GATHER &&
       be_cuda_span(c->recv[i], 0, c->ndev * c->count, esize, &recv) != 0))
    return ncclInvalidArgument; /* checked before: not reached */
  switch (c->kind) {
  case BE_COLL_ALL_REDUCE:
    (void)nccl_op(c->reduce, c->dtype, &op);
    return n->ncclAllReduce((void *)buf, (void *)buf, c->count, t, op, k->comm[i], s);
  case BE_COLL_BROADCAST:
    return n->ncclBroadcast((void *)buf, (void *)buf, c->count, t, (int)c->root, k->comm[i], s);
  default:
    return n->ncclAllGather((void *)buf, (void *)recv, c->count, t, k->comm[i], s);
  }
}

/* A failed NCCL call: a device whose stream reports a sticky error is lost (be_cuda_check
 * marks it), else the call failed as NCCL said. */
static int nccl_failed(const be_coll_call *c, int rc) {
  for (uint32_t i = 0; i < c->ndev; i++) {
    be_device *d = c->dev[i];
    if (be_cuda_enter(d) == 0 &&
        be_cuda_check(d, be_cu.cuStreamQuery(c->queue[i]->stream)) == ACCEL_EDEVLOST)
      return ACCEL_EDEVLOST;
  }
  return rc;
}

/* queue[0] waits for every other queue's point after the call. */
static int join_leader(const be_coll_call *c, const clique *k) {
  be_queue *q0 = c->queue[0];
  for (uint32_t i = 1; i < c->ndev; i++) {
    be_queue *q = c->queue[i];
    int rc = be_cuda_enter(q->dev);
    if (rc == 0)
      rc = be_cuda_check(q->dev, be_cu.cuEventRecord(k->done[i], q->stream));
    if (rc == 0)
      rc = be_cuda_enter(q0->dev);
    if (rc == 0)
      rc = be_cuda_check(q0->dev, be_cu.cuStreamWaitEvent(q0->stream, k->done[i], 0));
    if (rc != 0)
      return rc;
  }
  return 0;
}

static int enqueue(const be_coll_call *c, const clique *k) {
  const be_nccl_api *n = be_nccl();
  int rc = be_nccl_err(n->ncclGroupStart());
  if (rc != 0)
    return rc;
  for (uint32_t i = 0; rc == 0 && i < c->ndev; i++) {
    rc = be_cuda_enter(c->dev[i]);
    if (rc == 0)
      rc = be_nccl_err(enqueue_one(n, c, k, i));
  }
  int end = be_nccl_err(n->ncclGroupEnd());
  if (rc == 0)
    rc = end;
  if (rc != 0)
    return nccl_failed(c, rc);
  return join_leader(c, k);
}

static int coll_run(const be_coll_call *c) {
  int rc = check_call(c);
  if (rc != 0 || c->count == 0)
    return rc;
  pthread_mutex_lock(&lock);
  const clique *k = clique_get(c, &rc);
  if (k != NULL)
    rc = enqueue(c, k);
  pthread_mutex_unlock(&lock);
  return rc;
}

const be_coll_pkg be_cuda_coll = {
    .version = BE_COLL_VERSION,
    .dtypes = coll_dtypes,
    .supports = coll_supports,
    .run = coll_run,
};
