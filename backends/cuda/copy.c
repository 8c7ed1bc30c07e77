/* Copies of the cuda backend. Device to device: cuMemcpyDtoDAsync. Host memory comes three
 * ways, all asynchronous and in stream order (the host side is read or written when the
 * stream gets there, never at submission):
 *   pinned    (cuMemHostAlloc'd or registered; cuPointerGetAttributes says so) straight by
 *             DMA at full speed; so is memory the pin cache (pin.c) registered after seeing
 *             it copied before, and only the cache knows whether the driver's "registered"
 *             still holds for the memory mapped there now;
 *   pageable, small (up to BE_CUDA_BOUNCE) through the queue's pinned bounce buffer, the
 *             host side done by a host function (callback.c). Stream order keeps the one
 *             buffer safe to reuse;
 *   pageable, large through the queue's stager (stage.c): a thread copies chunk k + 1 to or
 *             from pinned memory while the DMA engine moves chunk k.
 * CUDA's own pageable cuMemcpy*Async would block the submitting thread (a stream sync before
 * host-to-device, the whole copy device-to-host), which a kernel actor on the loop cannot
 * afford. */
#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"

#define BE_CUDA_BOUNCE (1u << 20)

/* Whether [p, p + bytes) lies inside one pinned host allocation. */
static bool pinned(const void *p, size_t bytes) {
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  CUmemorytype type = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  void *data[] = {&type, &start, &size};
  CUresult r = be_cu.cuPointerGetAttributes(3, attrs, data, (CUdeviceptr)(uintptr_t)p);
  uintptr_t a = (uintptr_t)p;
  return r == CUDA_SUCCESS && type == CU_MEMORYTYPE_HOST && size > 0 && a >= start &&
         bytes <= size - (a - start);
}

static int bounce_alloc(be_queue *q) {
  if (q->bounce != NULL)
    return 0;
  return be_cuda_check(q->dev, be_cu.cuMemHostAlloc(&q->bounce, BE_CUDA_BOUNCE, 0));
}

/* One piece through the bounce buffer: the host function and the DMA, in stream order. */
static int bounce_piece(be_queue *q, bool to_device, CUdeviceptr d, char *host, size_t n) {
  if (to_device) {
    int rc = be_cuda_hostfn_copy(q, q->bounce, host, n);
    return rc != 0 ? rc
                   : be_cuda_check(q->dev, be_cu.cuMemcpyHtoDAsync(d, q->bounce, n, q->stream));
  }
  int rc = be_cuda_check(q->dev, be_cu.cuMemcpyDtoHAsync(q->bounce, d, n, q->stream));
  return rc != 0 ? rc : be_cuda_hostfn_copy(q, host, q->bounce, n);
}

/* Piece by piece (a large copy only when the stager is not available). A failure after the
 * first piece leaves the stream half-way through the copy: the device is marked lost, so
 * that nothing waits on a copy that will never finish. */
static int bounce_copy(be_queue *q, bool to_device, CUdeviceptr d, char *host, size_t bytes) {
  int rc = bounce_alloc(q);
  for (size_t off = 0; rc == 0 && off < bytes; off += BE_CUDA_BOUNCE) {
    size_t n = bytes - off < BE_CUDA_BOUNCE ? bytes - off : BE_CUDA_BOUNCE;
    rc = bounce_piece(q, to_device, d + off, host + off, n);
    if (rc != 0 && off > 0)
      be_cuda_fault(q->dev);
  }
  return rc;
}

/* After the DMA. A failed status (a fault, an abort, a queue destroyed first) may come while
 * the DMA could still run (an aborted context runs on): the range then stays held for good
 * (never unpinned, never trusted again) rather than risk an unpin under it. */
static void release_pin(void *range, int status) {
  if (status == 0)
    pin_cache_release(range);
}

/* By DMA; a range of the pin cache is held until the DMA is done. If that cannot be arranged
 * the range stays held for good (as above). */
static int dma_copy(be_queue *q, bool to_device, CUdeviceptr d, void *host, size_t bytes,
                    pin_range *held) {
  CUresult r = to_device ? be_cu.cuMemcpyHtoDAsync(d, host, bytes, q->stream)
                         : be_cu.cuMemcpyDtoHAsync(host, d, bytes, q->stream);
  int rc = be_cuda_check(q->dev, r);
  if (held != NULL && rc != 0)
    pin_cache_release(held);
  else if (held != NULL)
    rc = be_cuda_notify(q, release_pin, held);
  return rc;
}

static int host_copy(be_queue *q, bool to_device, CUdeviceptr d, void *host, size_t bytes) {
  int rc = be_cuda_enter(q->dev);
  if (rc != 0)
    return rc;
  pin_cache *pins = be_cuda_pins();
  pin_range *held;
  if (pin_cache_use(pins, host, bytes, pinned, &held) != PIN_PAGEABLE)
    return dma_copy(q, to_device, d, host, bytes, held);
  if (bytes > BE_CUDA_BOUNCE)
    pin_cache_note(pins, q->dev, host, bytes); /* pinned for the next time if it comes again */
  if (bytes > BE_CUDA_BOUNCE && atomic_load(&q->dev->memops)) {
    rc = be_cuda_stage_copy(q, to_device, d, host, bytes);
    if (rc != ACCEL_ENOTSUP)
      return rc; /* ENOTSUP: the stream cannot wait on host memory after all */
  }
  return bounce_copy(q, to_device, d, host, bytes);
}

int be_cuda_copy_h2d(be_queue *q, be_mem dst, size_t dst_off, const void *src, size_t bytes) {
  CUdeviceptr d = 0;
  if (q == NULL || (src == NULL && bytes > 0) || be_cuda_span(dst, dst_off, bytes, 1, &d) != 0)
    return ACCEL_EINVAL;
  int rc = be_cuda_queue_ok(q);
  if (rc != 0 || bytes == 0)
    return rc;
  return host_copy(q, true, d, (void *)(uintptr_t)src, bytes);
}

int be_cuda_copy_d2h(be_queue *q, void *dst, be_mem src, size_t src_off, size_t bytes) {
  CUdeviceptr s = 0;
  if (q == NULL || (dst == NULL && bytes > 0) || be_cuda_span(src, src_off, bytes, 1, &s) != 0)
    return ACCEL_EINVAL;
  int rc = be_cuda_queue_ok(q);
  if (rc != 0 || bytes == 0)
    return rc;
  return host_copy(q, false, s, dst, bytes);
}

/* Overlapping ranges of one block are refused: DMA does not copy as memmove would (and the
 * API refuses them before they get here). */
int be_cuda_copy_d2d(be_queue *q, be_mem dst, size_t dst_off, be_mem src, size_t src_off,
                     size_t bytes) {
  CUdeviceptr d = 0, s = 0;
  if (q == NULL || be_cuda_span(dst, dst_off, bytes, 1, &d) != 0 ||
      be_cuda_span(src, src_off, bytes, 1, &s) != 0)
    return ACCEL_EINVAL;
  if (bytes > 0 && d < s + bytes && s < d + bytes)
    return ACCEL_EINVAL;
  int rc = be_cuda_queue_ok(q);
  if (rc != 0 || bytes == 0)
    return rc;
  rc = be_cuda_enter(q->dev);
  return rc != 0 ? rc : be_cuda_check(q->dev, be_cu.cuMemcpyDtoDAsync(d, s, bytes, q->stream));
}
