/* Peer copies of the cuda backend: device-to-device copies between two open devices of the
 * backend (backend.h, can_peer and copy_peer).
 *
 * cuMemcpyPeerAsync names both contexts, so it works between any two contexts, with or without
 * peer access: with it the copy engines read the peer's memory directly (NVLink or PCIe
 * peer-to-peer); without it the driver stages the copy through host memory itself. can_peer
 * is therefore true for any two open devices, and the registry below only records which pairs
 * are direct (for the trace and be_cuda_peer_direct).
 *
 * Peer access is a property of a pair of contexts: when an incarnation begins (open, reset)
 * it is enabled both ways with every incarnation already open whose GPU can reach it
 * (cuDeviceCanAccessPeer). Two devices of one GPU (one index opened twice) need none: their
 * contexts share the GPU's memory and the driver copies within it. The registry's lock is held
 * only while a device joins or leaves (blocking is allowed there), never by can_peer. A device
 * leaves before its context goes (dissolve), so a context in the registry is alive; the
 * driver drops the peer mappings of a context when it is destroyed. */
#include <stdio.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"

/* Incarnations open at once in one process, at most (beyond, they copy without peer access
 * between them: still correct, staged by the driver). */
#define BE_CUDA_PEER_MAX 64

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static be_device *reg[BE_CUDA_PEER_MAX];

static uint_fast64_t ordinal_bit(be_device *dev) {
  return dev->index >= 0 && dev->index < 64 ? (uint_fast64_t)1 << dev->index : 0;
}

/* Lets `from`'s context read and write `to`'s memory directly, if its GPU can. */
static void enable_one(be_device *from, be_device *to) {
  int can = 0;
  char what[96];
  if (be_cu.cuDeviceCanAccessPeer(&can, from->cu, to->cu) != CUDA_SUCCESS || !can ||
      be_cuda_enter(from) != 0)
    return;
  CUresult r = be_cu.cuCtxEnablePeerAccess(to->ctx, 0);
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
    atomic_fetch_or(&from->peer_direct, ordinal_bit(to));
  snprintf(what, sizeof what, "peer access cuda:%d -> cuda:%d", from->index, to->index);
  be_cuda_trace(what, r);
}

static void enable_pair(be_device *a, be_device *b) {
  if (a->cu == b->cu || atomic_load(&b->fault) != BE_CUDA_OK)
    return;
  enable_one(a, b);
  enable_one(b, a);
}

void be_cuda_peer_join(be_device *dev) {
  atomic_store(&dev->peer_direct, 0);
  pthread_mutex_lock(&reg_lock);
  int slot = -1;
  for (int i = 0; i < BE_CUDA_PEER_MAX; i++) {
    if (reg[i] == NULL) {
      if (slot < 0)
        slot = i;
    } else {
      enable_pair(dev, reg[i]);
    }
  }
  if (slot >= 0)
    reg[slot] = dev;
  pthread_mutex_unlock(&reg_lock);
  if (slot < 0)
    be_cuda_trace("peer registry full: copies from this device go without peer access",
                  CUDA_SUCCESS);
  atomic_store(&dev->peer_open, true);
}

void be_cuda_peer_leave(be_device *dev) {
  atomic_store(&dev->peer_open, false);
  pthread_mutex_lock(&reg_lock);
  for (int i = 0; i < BE_CUDA_PEER_MAX; i++)
    if (reg[i] == dev)
      reg[i] = NULL;
  pthread_mutex_unlock(&reg_lock);
  atomic_store(&dev->peer_direct, 0);
}

/* Never blocks: two atomics per device (a fault in progress counts as lost). */
static bool usable(be_device *dev) {
  return atomic_load(&dev->peer_open) && atomic_load(&dev->fault) == BE_CUDA_OK;
}

bool be_cuda_can_peer(be_device *dst, be_device *src) {
  return dst != NULL && src != NULL && dst != src && usable(dst) && usable(src);
}

int be_cuda_peer_direct(be_device *dst, be_device *src) {
  if (dst == NULL || src == NULL)
    return ACCEL_EINVAL;
  return (atomic_load(&dst->peer_direct) & ordinal_bit(src)) != 0;
}

int be_cuda_copy_peer(be_queue *q, be_mem dst, size_t dst_off, be_device *src_dev, be_mem src,
                      size_t src_off, size_t bytes) {
  CUdeviceptr d = 0, s = 0;
  if (q == NULL || src_dev == NULL || be_cuda_span(dst, dst_off, bytes, 1, &d) != 0 ||
      be_cuda_span(src, src_off, bytes, 1, &s) != 0)
    return ACCEL_EINVAL;
  int rc = be_cuda_queue_ok(q);
  if (rc != 0)
    return rc;
  if (be_cuda_lost(src_dev) || src_dev->ctx == NULL)
    return ACCEL_EDEVLOST;
  if (!be_cuda_can_peer(q->dev, src_dev))
    return ACCEL_EINVAL;
  if (bytes == 0)
    return 0;
  rc = be_cuda_enter(q->dev);
  if (rc != 0)
    return rc;
  CUresult r = be_cu.cuMemcpyPeerAsync(d, q->dev->ctx, s, src_dev->ctx, bytes, q->stream);
  return be_cuda_check(q->dev, r);
}
