/* Memory of the cpu backend: host blocks, 64-byte aligned (a cache line, and enough for any
 * vector load the kernels use). Each block starts with a header that links it into the
 * device's list, so close() frees what its users left behind. A reset frees nothing: host
 * memory cannot be lost, and its owners free it (or close does).
 *
 * Blocks of BE_CPU_HUGE_MIN bytes or more are mappings of their own, asked for transparent
 * huge pages: a buffer's first touch (its zero-fill) then takes one fault per 2 MiB instead
 * of per 4 KiB. Under a hypervisor a fault costs microseconds: a 4 GiB buffer's zero-fill
 * took 22 s in 4 KiB pages on a 2-vCPU VM. The kernel's THP setting decides; "never" keeps
 * small pages, as before. */
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "accel/error.h"
#include "backends/cpu/backend_cpu.h"
#include "backends/cpu/device.h"
#include "runtime/alloc.h"

#define BE_CPU_ALIGN 64
#define BE_CPU_HUGE_MIN ((size_t)8 << 20)

typedef struct be_cpu_block {
  alignas(BE_CPU_ALIGN) rt_list link;
  size_t mapped; /* the mapping's length; 0: aligned_alloc's */
} be_cpu_block;

_Static_assert(sizeof(be_cpu_block) == BE_CPU_ALIGN, "the header keeps the data aligned");

static be_cpu_block *block_alloc(size_t total) {
  be_cpu_block *blk = aligned_alloc(BE_CPU_ALIGN, total);
  if (blk != NULL)
    blk->mapped = 0;
  return blk;
}

/* A mapping's start is page-aligned, so the header keeps the data 64-byte aligned. */
static be_cpu_block *block_map(size_t total) {
  void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  (void)madvise(p, total, MADV_HUGEPAGE); /* a hint: without THP, small pages */
  be_cpu_block *blk = p;
  blk->mapped = total;
  return blk;
}

/* aligned_alloc's or a mapping: device memory, not accel's bookkeeping (runtime/alloc.h). */
static void block_release(be_cpu_block *blk) {
  if (blk->mapped != 0)
    munmap(blk, blk->mapped);
  else
    free(blk);
}

int be_cpu_mem_alloc(be_device *dev, size_t bytes, be_mem *out) {
  if (dev == NULL || out == NULL || bytes == 0)
    return ACCEL_EINVAL;
  if (atomic_load(&dev->fault))
    return ACCEL_EDEVLOST;
  if (bytes > SIZE_MAX - 2 * BE_CPU_ALIGN)
    return ACCEL_ENOMEM;
  size_t total = sizeof(be_cpu_block) + (bytes + BE_CPU_ALIGN - 1) / BE_CPU_ALIGN * BE_CPU_ALIGN;
  be_cpu_block *blk = total >= BE_CPU_HUGE_MIN ? block_map(total) : block_alloc(total);
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
  block_release(blk);
  *mem = (be_mem){0};
}

void be_cpu_mem_free_all(be_device *dev) {
  while (dev->blocks.next != &dev->blocks) {
    rt_list *node = dev->blocks.next;
    rt_list_remove(node);
    block_release(RT_LIST_ITEM(node, be_cpu_block, link));
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
