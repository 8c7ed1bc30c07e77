/* The collective package of the cpu backend: every CPU device's memory is host memory, so one
 * item on the leader's queue (the call's queue[0]) does the whole collective, reading and
 * writing every device's buffer. The caller orders it: nothing else touches the buffers until
 * the leader's queue passes the item.
 *
 * All-reduce combines the buffers in device order, element by element: F32 and F64 in their
 * own type, F16 and BF16 in f32, rounded to nearest even once at the end (NCCL reduces 16-bit
 * types in their own precision along its ring, so its sums may differ in the last bits).
 * Broadcast and all-gather are copies, exact. */
#include <string.h>

#include "accel/error.h"
#include "backends/cpu/backend_cpu.h"
#include "backends/cpu/queue.h"
#include "ops/dtype_conv.h"

#define BIT(t) ACCEL_DTYPE_BIT(t)
#define COLL_DTYPES (BIT(ACCEL_F32) | BIT(ACCEL_F64) | BIT(ACCEL_F16) | BIT(ACCEL_BF16))

static uint32_t coll_dtypes(be_device *dev) {
  (void)dev;
  return COLL_DTYPES;
}

static int coll_supports(be_device *const dev[], uint32_t ndev) {
  (void)dev;
  return ndev >= 1 && ndev <= BE_COLL_MAX_DEVICES ? 0 : ACCEL_ENOTSUP;
}

static double combine(uint32_t op, double a, double b) {
  switch (op) {
  case BE_REDUCE_PROD:
    return a * b;
  case BE_REDUCE_MIN:
    return b < a ? b : a;
  case BE_REDUCE_MAX:
    return b > a ? b : a;
  default:
    return a + b;
  }
}

/* In f32: one double operation rounded once to float is the float operation's own result
 * (double has more than twice float's precision, so the double rounding is innocuous for a
 * sum or a product; min and max are exact). */
static float combine_f(uint32_t op, float a, float b) {
  return (float)combine(op, a, b);
}

static float load16(uint32_t dtype, const void *p, size_t j) {
  uint16_t h = ((const uint16_t *)p)[j];
  return dtype == ACCEL_F16 ? be_f16_to_f32(h) : be_bf16_to_f32(h);
}

static void store16(uint32_t dtype, void *p, size_t j, float v) {
  ((uint16_t *)p)[j] = dtype == ACCEL_F16 ? be_f32_to_f16(v) : be_f32_to_bf16(v);
}

static void all_reduce(const be_cpu_item *it) {
  uint32_t n = it->u.coll.ndev, op = it->u.coll.reduce, t = it->u.coll.dtype;
  void *const *b = it->u.coll.buf;
  for (size_t j = 0; j < it->u.coll.count; j++) {
    if (t == ACCEL_F64) {
      double acc = ((const double *)b[0])[j];
      for (uint32_t i = 1; i < n; i++)
        acc = combine(op, acc, ((const double *)b[i])[j]);
      for (uint32_t i = 0; i < n; i++)
        ((double *)b[i])[j] = acc;
    } else if (t == ACCEL_F32) {
      float acc = ((const float *)b[0])[j];
      for (uint32_t i = 1; i < n; i++)
        acc = combine_f(op, acc, ((const float *)b[i])[j]);
      for (uint32_t i = 0; i < n; i++)
        ((float *)b[i])[j] = acc;
    } else {
      float acc = load16(t, b[0], j);
      for (uint32_t i = 1; i < n; i++)
        acc = combine_f(op, acc, load16(t, b[i], j));
      for (uint32_t i = 0; i < n; i++)
        store16(t, b[i], j, acc);
    }
  }
}

int be_cpu_collective_run(const be_cpu_item *it) {
  size_t bytes = it->u.coll.count * be_dtype_size(it->u.coll.dtype);
  uint32_t n = it->u.coll.ndev;
  switch (it->u.coll.kind) {
  case BE_COLL_ALL_REDUCE:
    all_reduce(it);
    return 0;
  case BE_COLL_BROADCAST:
    for (uint32_t i = 0; i < n; i++)
      if (i != it->u.coll.root && bytes > 0)
        memcpy(it->u.coll.buf[i], it->u.coll.buf[it->u.coll.root], bytes);
    return 0;
  case BE_COLL_ALL_GATHER:
    for (uint32_t i = 0; i < n; i++)
      for (uint32_t k = 0; k < n && bytes > 0; k++)
        memcpy((char *)it->u.coll.recv[i] + k * bytes, it->u.coll.buf[k], bytes);
    return 0;
  }
  return ACCEL_EINVAL;
}

/* The first `bytes` of m as a host address (a handle of 0 only for 0 bytes). */
static int host_span(be_mem m, size_t bytes, void **out) {
  if (bytes > m.bytes || (m.handle == 0 && bytes > 0))
    return ACCEL_EINVAL;
  *out = (void *)(uintptr_t)m.handle;
  return 0;
}

static int check_call(const be_coll_call *c) {
  if (c->ndev < 1 || c->ndev > BE_COLL_MAX_DEVICES || c->queue[0] == NULL ||
      !(COLL_DTYPES & BIT(c->dtype)) || c->reduce > BE_REDUCE_MAX ||
      (c->kind == BE_COLL_BROADCAST && c->root >= c->ndev) || c->kind > BE_COLL_ALL_GATHER)
    return ACCEL_EINVAL;
  size_t esize = be_dtype_size(c->dtype);
  if (c->count > SIZE_MAX / esize / c->ndev)
    return ACCEL_EINVAL;
  return 0;
}

static int coll_run(const be_coll_call *c) {
  int rc = check_call(c);
  if (rc != 0)
    return rc;
  size_t bytes = c->count * be_dtype_size(c->dtype);
  be_cpu_item it = {.kind = BE_CPU_COLLECTIVE,
                    .u.coll = {.kind = c->kind,
                               .dtype = c->dtype,
                               .reduce = c->reduce,
                               .root = c->root,
                               .ndev = c->ndev,
                               .count = c->count}};
  for (uint32_t i = 0; i < c->ndev && rc == 0; i++) {
    rc = host_span(c->buf[i], bytes, &it.u.coll.buf[i]);
    if (rc == 0 && c->kind == BE_COLL_ALL_GATHER)
      rc = host_span(c->recv[i], bytes * c->ndev, &it.u.coll.recv[i]);
  }
  return rc != 0 ? rc : be_cpu_queue_submit(c->queue[0], &it);
}

const be_coll_pkg be_cpu_collective = {
    .version = BE_COLL_VERSION,
    .dtypes = coll_dtypes,
    .supports = coll_supports,
    .run = coll_run,
};
