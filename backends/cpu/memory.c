/* Memory of the cpu backend: host blocks, 64-byte aligned (a cache line, and enough for any
 * vector load the kernels use). Each block starts with a header that links it into the
 * device's list, so close() frees what its users left behind. A reset frees nothing: host
 * memory cannot be lost, and its owners free it (or close does). */
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>

#include "accel/error.h"
#include "backends/cpu/backend_cpu.h"
#include "backends/cpu/device.h"
#include "runtime/alloc.h"

#define BE_CPU_ALIGN 64

typedef struct be_cpu_block {
  alignas(BE_CPU_ALIGN) rt_list link;
} be_cpu_block;

_Static_assert(sizeof(be_cpu_block) == BE_CPU_ALIGN, "the header keeps the data aligned");

int be_cpu_mem_alloc(be_device *dev, size_t bytes, be_mem *out) {
  if (dev == NULL || out == NULL || bytes == 0)
    return ACCEL_EINVAL;
  if (atomic_load(&dev->fault))
    return ACCEL_EDEVLOST;
  if (bytes > SIZE_MAX - 2 * BE_CPU_ALIGN)
    return ACCEL_ENOMEM;
  size_t total = sizeof(be_cpu_block) + (bytes + BE_CPU_ALIGN - 1) / BE_CPU_ALIGN * BE_CPU_ALIGN;
  be_cpu_block *blk = aligned_alloc(BE_CPU_ALIGN, total);
  if (blk == NULL)
    return ACCEL_ENOMEM;
  rt_list_init(&blk->link);
  be_cpu_dev_track(dev, &dev->blocks, &blk->link);
  *out = (be_mem){.handle = (uint64_t)(uintptr_t)(blk + 1), .bytes = bytes};
  return 0;
}

static be_cpu_block *block_of(uint64_t handle) {
  return (be_cpu_block *)(uintptr_t)handle - 1;
}

/* Works after a fault and after a reset, on memory of any generation. */
void be_cpu_mem_free(be_device *dev, be_mem *mem) {
  if (dev == NULL || mem == NULL || mem->handle == 0)
    return;
  be_cpu_block *blk = block_of(mem->handle);
  be_cpu_dev_untrack(dev, &blk->link);
  free(blk); /* aligned_alloc's: device memory, not accel's bookkeeping (runtime/alloc.h) */
  *mem = (be_mem){0};
}

void be_cpu_mem_free_all(be_device *dev) {
  while (dev->blocks.next != &dev->blocks) {
    rt_list *node = dev->blocks.next;
    rt_list_remove(node);
    free(node); /* the link is the block's first member; aligned_alloc's, as in mem_free */
  }
}

/* ---- shared with other libraries: host memory is the process's ---- */

int be_cpu_mem_share(be_device *dev, char *why, size_t why_len) {
  return dev == NULL ? ACCEL_EINVAL : 0;
}

int be_cpu_mem_address(be_device *dev, be_mem mem, uint64_t *out) {
  if (dev == NULL || mem.handle == 0)
    return ACCEL_EINVAL;
  *out = mem.handle;
  return 0;
}

/* A wrapped block has no header: its handle is the caller's pointer (the kernels take any
 * handle as the data's address), never freed here. */
int be_cpu_mem_wrap(be_device *dev, uint64_t addr, size_t bytes, be_mem *out) {
  if (dev == NULL || addr == 0 || bytes == 0)
    return ACCEL_EINVAL;
  *out = (be_mem){.handle = addr, .bytes = bytes};
  return 0;
}

void be_cpu_mem_unwrap(be_device *dev, be_mem *mem) {
  *mem = (be_mem){0};
}
