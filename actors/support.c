/* What a device runs: the op packages of its backend and the dtypes of each, read once per
 * incarnation (the backend's answers may depend on the device: tensor cores, an OpenCL
 * device without fp64), and the question placement asks of every op. */
#include <string.h>

#include "actors/device.h"

#define QUEUE_ROW(K, name, label, nbufs, dtypes, package, queue, runs) [DEV_OP_##K] = DEV_Q_##queue,
static const dev_queue_class queues[DEV_OP_KIND_COUNT_] = {DEV_OP_TABLE(QUEUE_ROW)};

dev_queue_class dev_op_queue(uint32_t kind) {
  return kind < DEV_OP_KIND_COUNT_ ? queues[kind] : DEV_Q_MEM;
}

_Static_assert(ACCEL_DTYPE_MAX_ * 4 + BE_GEMM_MATH_FP64 < 32, "gemm caps fit in 32 bits");

static uint32_t gemm_bit(uint32_t c_type, uint32_t math) {
  return 1u << (c_type * 4u + math);
}

static void read_blas(const be_blas_pkg *p, be_device *dev, dev_caps *c) {
  for (uint32_t ab = 1; ab <= ACCEL_DTYPE_MAX_; ab++)
    for (uint32_t ct = 1; ct <= ACCEL_DTYPE_MAX_; ct++)
      for (uint32_t m = BE_GEMM_MATH_DEVICE; m <= BE_GEMM_MATH_FP64; m++)
        if (be_gemm_combo_ok(ab, ct, m) && p->gemm_supports(dev, ab, ct, m) == 0)
          c->gemm[ab] |= gemm_bit(ct, m);
  c->vector_dtypes = p->vector_dtypes(dev);
}

void dev_caps_read(dev_node *node) {
  const be_ops *be = node->be;
  dev_caps *c = &node->caps;
  *c = (dev_caps){0};
  if (node->dev == NULL)
    return;
  c->read = true;
  if (be->blas && be->blas->version == BE_BLAS_VERSION) {
    c->packages |= ACCEL_PKG_BLAS;
    read_blas(be->blas, node->dev, c);
  }
  if (be->rng && be->rng->version == BE_RNG_VERSION) {
    c->packages |= ACCEL_PKG_RNG;
    c->rng_dtypes = be->rng->dtypes(node->dev);
  }
  if (be->nn && be->nn->version == BE_NN_VERSION) {
    c->packages |= ACCEL_PKG_NN;
    c->nn_dtypes = be->nn->dtypes(node->dev);
  }
  if (be->module && be->module->version == BE_MODULE_VERSION) {
    c->packages |= ACCEL_PKG_MODULE;
    c->sources = be->module->sources(node->dev);
    be->module->limits(node->dev, &c->limits);
  }
  if (be->collective && be->collective->version == BE_COLL_VERSION) {
    c->packages |= ACCEL_PKG_COLLECTIVE;
    c->coll_dtypes = be->collective->dtypes(node->dev);
  }
}

uint32_t dev_caps_gemm_dtypes(const dev_caps *c) {
  uint32_t set = 0;
  for (uint32_t ab = 1; ab <= ACCEL_DTYPE_MAX_; ab++)
    if (c->gemm[ab])
      set |= ACCEL_DTYPE_BIT(ab);
  return set;
}

static bool has(uint32_t set, uint32_t dtype) {
  return (set & ACCEL_DTYPE_BIT(dtype)) != 0;
}

/* DEVICE math means the device's default, which every device that runs the types has. */
static bool gemm_ok(const dev_caps *c, const be_gemm_args *g) {
  return g->ab_type <= ACCEL_DTYPE_MAX_ && g->c_type <= ACCEL_DTYPE_MAX_ &&
         (c->gemm[g->ab_type] & gemm_bit(g->c_type, g->math)) != 0;
}

/* Whether the device runs the op's dtypes in the op's package (it has the package). */
static bool package_runs(const dev_caps *c, uint32_t package, const dev_op *op, uint32_t dtype) {
  switch (package) {
  case ACCEL_PKG_BLAS:
    return op->h.kind == DEV_OP_GEMM ? gemm_ok(c, &op->u.gemm) : has(c->vector_dtypes, dtype);
  case ACCEL_PKG_RNG:
    return op->u.rng.dist == BE_RNG_BITS ? dtype == ACCEL_U32 : has(c->rng_dtypes, dtype);
  case ACCEL_PKG_NN: /* the integers of binary, every dtype of where besides the floats */
    return has(c->nn_dtypes, dtype) || op->h.kind == DEV_OP_WHERE ||
           (op->h.kind == DEV_OP_BINARY &&
            (dtype == ACCEL_I32 || dtype == ACCEL_U32 || dtype == ACCEL_BOOL));
  case ACCEL_PKG_MODULE: /* and the module built there: the session asks the module */
    return true;
  case ACCEL_PKG_COLLECTIVE: /* and the devices together: the session asks the backend */
    return has(c->coll_dtypes, dtype);
  default:
    return false;
  }
}

static bool convert_runs(const dev_caps *c, uint32_t dtype) {
  return dtype != ACCEL_F64 || has(c->nn_dtypes, dtype);
}

int dev_node_supports(const dev_node *node, const dev_op *op, dev_buffer *const bufs[]) {
  const dev_caps *c = &node->caps;
  const dev_op_info *info = dev_op_info_of(op->h.kind);
  /* The dtype the op computes in: its first buffer's, but a binary op's inputs (a
   * comparison writes BOOL whatever it compares). */
  uint32_t first = op->h.kind == DEV_OP_BINARY ? 1 : 0;
  uint32_t dtype = op->nbufs > first ? bufs[first]->dtype : 0;
  if (info == NULL)
    return ACCEL_EINVAL;
  if (info->package == 0)
    return 0; /* the core: every backend */
  if (!c->read)
    return ACCEL_EDEVLOST; /* never opened (quarantined at start): we cannot know */
  bool ok = (c->packages & info->package) && package_runs(c, info->package, op, dtype);
  if (op->h.kind == DEV_OP_CONVERT) /* every dtype but F64, which only a device with it */
    ok = (c->packages & info->package) && convert_runs(c, bufs[0]->dtype) &&
         convert_runs(c, bufs[1]->dtype);
  return ok ? 0 : ACCEL_ENOTSUP;
}

void dev_node_describe(const dev_node *node, struct accel_device_info *d) {
  memset(d, 0, sizeof *d);
  /* name, sizes and capabilities are set when the device first opened (before any client
   * could ask); state and restarts change on the loop while clients read them. */
  memcpy(d->name, node->info.name, sizeof d->name - 1);
  strncpy(d->backend, node->be->name, sizeof d->backend - 1);
  d->mem_bytes = node->info.mem_bytes;
  d->compute_units = node->info.compute_units;
  d->state = (int)__atomic_load_n(&node->state, __ATOMIC_RELAXED);
  d->restarts = __atomic_load_n(&node->restarts, __ATOMIC_RELAXED);
  d->kind = (uint32_t)node->info.kind;
  d->packages = node->caps.packages;
  d->gemm_dtypes = dev_caps_gemm_dtypes(&node->caps);
  d->vector_dtypes = node->caps.vector_dtypes;
  d->rng_dtypes = node->caps.rng_dtypes;
  d->nn_dtypes = node->caps.nn_dtypes;
  d->sources = node->caps.sources;
  d->collective_dtypes = node->caps.coll_dtypes;
}
