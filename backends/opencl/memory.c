/* Device memory (cl_mem buffers: be_mem.handle is the cl_mem), the copies and the core fill.
 * Copies and fills are non-blocking enqueues: host memory stays the caller's to keep valid
 * until the work completes (backend.h). The device keeps a list of its live buffers, for
 * close. */
#include <stdlib.h>

#include "accel/error.h"
#include "backends/opencl/device.h"
#include "runtime/alloc.h"

static cl_mem mem_of(be_mem m) {
  return (cl_mem)(uintptr_t)m.handle;
}

int be_ocl_span(be_mem m, size_t off, size_t count, size_t size) {
  if (size == 0 || off > SIZE_MAX / size || count > SIZE_MAX / size)
    return ACCEL_EINVAL;
  size_t a = off * size, n = count * size;
  if (a > m.bytes || n > m.bytes - a)
    return ACCEL_EINVAL;
  return m.handle == 0 && n > 0 ? ACCEL_EINVAL : 0;
}

int be_ocl_tail(be_mem m, size_t off, size_t size, size_t *len) {
  size_t elems = m.bytes / size;
  if (off > elems)
    return ACCEL_EINVAL;
  *len = elems - off;
  return 0;
}

static int track(be_device *dev, cl_mem mem) {
  pthread_mutex_lock(&dev->lock);
  if (dev->nmems == dev->cap_mems) {
    size_t cap = dev->cap_mems ? 2 * dev->cap_mems : 64;
    cl_mem *p = rt_realloc(dev->mems, cap * sizeof *p);
    if (p == NULL) {
      pthread_mutex_unlock(&dev->lock);
      return ACCEL_ENOMEM;
    }
    dev->mems = p;
    dev->cap_mems = cap;
  }
  dev->mems[dev->nmems++] = mem;
  pthread_mutex_unlock(&dev->lock);
  return 0;
}

/* Whether mem was live (and now is not); the newest buffers are searched first. */
static bool untrack(be_device *dev, cl_mem mem) {
  bool found = false;
  pthread_mutex_lock(&dev->lock);
  for (size_t i = dev->nmems; i-- > 0;)
    if (dev->mems[i] == mem) {
      dev->mems[i] = dev->mems[--dev->nmems];
      found = true;
      break;
    }
  pthread_mutex_unlock(&dev->lock);
  return found;
}

int be_ocl_mem_alloc(be_device *dev, size_t bytes, be_mem *out) {
  if (dev == NULL || out == NULL || bytes == 0)
    return ACCEL_EINVAL;
  if (atomic_load(&dev->lost) || dev->ctx == NULL)
    return ACCEL_EDEVLOST;
  cl_int err = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(dev->ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (mem == NULL)
    return err == CL_INVALID_BUFFER_SIZE ? ACCEL_ENOMEM : be_ocl_check(dev, err);
  int rc = track(dev, mem);
  if (rc != 0) {
    clReleaseMemObject(mem);
    return rc;
  }
  out->handle = (uint64_t)(uintptr_t)mem;
  out->bytes = bytes;
  return 0;
}

/* Works on a lost device too: the buffer's context lives until its last buffer goes. */
void be_ocl_mem_free(be_device *dev, be_mem *mem) {
  if (dev == NULL || mem == NULL || mem->handle == 0)
    return;
  if (untrack(dev, mem_of(*mem)))
    clReleaseMemObject(mem_of(*mem));
  mem->handle = 0;
  mem->bytes = 0;
}

void be_ocl_mem_free_all(be_device *dev) {
  pthread_mutex_lock(&dev->lock);
  for (size_t i = 0; i < dev->nmems; i++)
    clReleaseMemObject(dev->mems[i]);
  dev->nmems = 0;
  pthread_mutex_unlock(&dev->lock);
}

/* ---- copies and fill -------------------------------------------------------------------- */

int be_ocl_copy_h2d(be_queue *q, be_mem dst, size_t dst_off, const void *src, size_t bytes) {
  int rc = q == NULL || (src == NULL && bytes > 0) ? ACCEL_EINVAL
                                                   : be_ocl_span(dst, dst_off, bytes, 1);
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || bytes == 0)
    return rc;
  return be_ocl_check(q->dev, clEnqueueWriteBuffer(q->cq, mem_of(dst), CL_FALSE, dst_off, bytes,
                                                   src, 0, NULL, NULL));
}

int be_ocl_copy_d2h(be_queue *q, void *dst, be_mem src, size_t src_off, size_t bytes) {
  int rc = q == NULL || (dst == NULL && bytes > 0) ? ACCEL_EINVAL
                                                   : be_ocl_span(src, src_off, bytes, 1);
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || bytes == 0)
    return rc;
  return be_ocl_check(q->dev, clEnqueueReadBuffer(q->cq, mem_of(src), CL_FALSE, src_off, bytes, dst,
                                                  0, NULL, NULL));
}

/* Overlapping ranges of one buffer are ACCEL_EINVAL (OpenCL's CL_MEM_COPY_OVERLAP). */
int be_ocl_copy_d2d(be_queue *q, be_mem dst, size_t dst_off, be_mem src, size_t src_off,
                    size_t bytes) {
  int rc = q == NULL ? ACCEL_EINVAL : be_ocl_span(dst, dst_off, bytes, 1);
  if (rc == 0)
    rc = be_ocl_span(src, src_off, bytes, 1);
  if (rc == 0 && dst.handle == src.handle && bytes > 0 && dst_off < src_off + bytes &&
      src_off < dst_off + bytes)
    rc = ACCEL_EINVAL;
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || bytes == 0)
    return rc;
  return be_ocl_check(q->dev, clEnqueueCopyBuffer(q->cq, mem_of(src), mem_of(dst), src_off, dst_off,
                                                  bytes, 0, NULL, NULL));
}

int be_ocl_fill(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t esize, uint64_t value) {
  if (q == NULL || (esize != 1 && esize != 2 && esize != 4 && esize != 8))
    return ACCEL_EINVAL;
  int rc = be_ocl_span(dst, off, count, esize);
  if (rc == 0)
    rc = be_ocl_queue_ok(q);
  if (rc != 0 || count == 0)
    return rc;
  /* The pattern is value's low esize bytes, in memory order (little-endian hosts). */
  uint8_t pattern[8];
  for (uint32_t i = 0; i < esize; i++)
    pattern[i] = (uint8_t)(value >> (8 * i));
  return be_ocl_check(q->dev, clEnqueueFillBuffer(q->cq, mem_of(dst), pattern, esize, off * esize,
                                                  count * esize, 0, NULL, NULL));
}
