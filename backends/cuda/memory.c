/* Device memory of the cuda backend: cuMemAlloc blocks. A be_mem's handle is the block's
 * record (the device pointer, its generation, a link in the device's list), so close() frees
 * what its users left behind and memory of an older generation, gone with its context, is
 * never freed twice. */
#include <stdio.h>
#include <stdlib.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "runtime/alloc.h"

typedef struct be_cuda_block {
  rt_list link; /* first: the device's list points here */
  CUdeviceptr ptr;
  unsigned gen;
} be_cuda_block;

static be_cuda_block *block_of(be_mem m) {
  return (be_cuda_block *)(uintptr_t)m.handle;
}

int be_cuda_mem_alloc(be_device *dev, size_t bytes, be_mem *out) {
  if (dev == NULL || out == NULL || bytes == 0)
    return ACCEL_EINVAL;
  if (be_cuda_lost(dev) || dev->ctx == NULL)
    return ACCEL_EDEVLOST;
  be_cuda_block *blk = rt_calloc(1, sizeof *blk);
  if (blk == NULL)
    return ACCEL_ENOMEM;
  int rc = be_cuda_enter(dev);
  if (rc == 0)
    rc = be_cuda_check(dev, be_cu.cuMemAlloc(&blk->ptr, bytes));
  if (rc != 0) {
    rt_free(blk);
    return rc;
  }
  blk->gen = atomic_load(&dev->gen);
  pthread_mutex_lock(&dev->lock);
  rt_list_push_front(&dev->blocks, &blk->link);
  pthread_mutex_unlock(&dev->lock);
  *out = (be_mem){.handle = (uint64_t)(uintptr_t)blk, .bytes = bytes};
  return 0;
}

/* The device memory of blk, if its context still holds it. cuMemFree may wait for the
 * device (the reason alloc and free stay off the loop thread). */
static void block_release(be_device *dev, be_cuda_block *blk) {
  if (blk->gen != atomic_load(&dev->gen) || be_cuda_lost(dev) || be_cuda_enter(dev) != 0)
    return;
  be_cuda_check(dev, be_cu.cuMemFree(blk->ptr));
}

void be_cuda_mem_free(be_device *dev, be_mem *mem) {
  if (dev == NULL || mem == NULL || mem->handle == 0)
    return;
  be_cuda_block *blk = block_of(*mem);
  pthread_mutex_lock(&dev->lock);
  rt_list_remove(&blk->link);
  pthread_mutex_unlock(&dev->lock);
  block_release(dev, blk);
  rt_free(blk);
  *mem = (be_mem){0};
}

void be_cuda_mem_free_all(be_device *dev) {
  while (!rt_list_empty(&dev->blocks)) {
    be_cuda_block *blk = (be_cuda_block *)dev->blocks.next;
    rt_list_remove(&blk->link);
    block_release(dev, blk);
    rt_free(blk);
  }
}

/* ---- shared with other libraries of the process ---- */

/* Only the primary context's pointers mean anything to PyTorch, CuPy and the like: a context
 * of accel's own has its own address space (the driver API's contexts do not share
 * allocations, even on one GPU). */
int be_cuda_mem_share(be_device *dev, char *why, size_t why_len) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  if (dev->primary)
    return 0;
  if (why != NULL && why_len > 0)
    snprintf(why, why_len,
             "this CUDA device runs in a context of accel's own; open the "
             "context with cuda_context=primary to share its memory");
  return ACCEL_ENOTSUP;
}

int be_cuda_mem_address(be_device *dev, be_mem mem, uint64_t *out) {
  if (dev == NULL || mem.handle == 0 || !dev->primary)
    return ACCEL_EINVAL;
  *out = (uint64_t)block_of(mem)->ptr;
  return 0;
}

/* A record of the caller's pointer outside the device's list: close() and mem_free_all never
 * see it, so the memory is never freed here. The wait on the legacy default stream orders the
 * producer's work (DLPack's stream 1) before accel's streams, which do not synchronise with
 * it (CU_STREAM_NON_BLOCKING). */
int be_cuda_mem_wrap(be_device *dev, uint64_t addr, size_t bytes, be_mem *out) {
  if (dev == NULL || out == NULL || addr == 0 || bytes == 0 || !dev->primary)
    return ACCEL_EINVAL;
  if (be_cuda_lost(dev) || dev->ctx == NULL)
    return ACCEL_EDEVLOST;
  int rc = be_cuda_enter(dev);
  if (rc == 0)
    rc = be_cuda_check(dev, be_cu.cuStreamSynchronize(CU_STREAM_LEGACY));
  if (rc != 0)
    return rc;
  be_cuda_block *blk = rt_calloc(1, sizeof *blk);
  if (blk == NULL)
    return ACCEL_ENOMEM;
  rt_list_init(&blk->link);
  blk->ptr = (CUdeviceptr)addr;
  blk->gen = atomic_load(&dev->gen);
  *out = (be_mem){.handle = (uint64_t)(uintptr_t)blk, .bytes = bytes};
  return 0;
}

void be_cuda_mem_unwrap(be_device *dev, be_mem *mem) {
  if (mem == NULL || mem->handle == 0)
    return;
  rt_free(block_of(*mem));
  *mem = (be_mem){0};
}

int be_cuda_span(be_mem m, size_t off, size_t count, size_t size, CUdeviceptr *out) {
  size_t len = m.bytes / size;
  if ((m.handle == 0 && m.bytes > 0) || off > len || count > len - off)
    return ACCEL_EINVAL;
  *out = m.handle == 0 ? 0 : block_of(m)->ptr + off * size;
  return 0;
}

int be_cuda_tail(be_mem m, size_t off, size_t size, CUdeviceptr *out, size_t *len) {
  *len = off <= m.bytes / size ? m.bytes / size - off : 0;
  return be_cuda_span(m, off, *len, size, out);
}

uint64_t be_cuda_devptr(be_mem m) {
  return m.handle == 0 ? 0 : (uint64_t)block_of(m)->ptr;
}

/* Portable: the registration holds for every context, so one device's call serves all. */
int be_cuda_host_register(be_device *dev, void *p, size_t bytes) {
  if (dev == NULL || p == NULL || bytes == 0)
    return ACCEL_EINVAL;
  if (be_cuda_lost(dev) || dev->ctx == NULL)
    return ACCEL_EDEVLOST;
  int rc = be_cuda_enter(dev);
  if (rc == 0)
    rc = be_cuda_check(dev, be_cu.cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_PORTABLE));
  return rc;
}

void be_cuda_host_unregister(be_device *dev, void *p) {
  if (dev != NULL && p != NULL && be_cuda_enter(dev) == 0)
    be_cu.cuMemHostUnregister(p); /* fails harmlessly after a reset took the registration */
}
