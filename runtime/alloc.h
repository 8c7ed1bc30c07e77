/* accel's own allocations: every heap block accel allocates for itself (runtime, device layer,
 * wire codec, clients, backends' host-side state) comes from here, so one hook
 * (accel_replace_allocator in accel/runtime.h) sees and can fail each of them. Memory that
 * other libraries allocate (libuv, nng, drivers) and the data of buffers (device memory, the
 * CPU device's blocks, accel_host_alloc) do not go through it.
 *
 * The lowest layer of the tree: any folder may include this header; it includes nothing of
 * accel's but the public runtime header and runtime/attr.h. Safe from any thread.
 * rt_free(NULL) does nothing. */
#ifndef RT_ALLOC_H
#define RT_ALLOC_H

#include <stddef.h>

#include "accel/runtime.h"
#include "runtime/attr.h"

RT_MUST_USE void *rt_malloc(size_t size);
RT_MUST_USE void *rt_calloc(size_t count, size_t size);
RT_MUST_USE void *rt_realloc(void *ptr, size_t size);
void rt_free(void *ptr);
/* `size` zeroed bytes at an address that is a multiple of `align` (a power of two, at most
 * 4096), for structs that ask for more than malloc's alignment (_Alignas(64) against false
 * sharing); freed with rt_aligned_free only. Through the hook like every block. */
RT_MUST_USE void *rt_aligned_calloc(size_t align, size_t size);
void rt_aligned_free(void *ptr);
/* A copy of s (NULL when s is NULL or memory runs out); rt_strndup copies at most n bytes. */
RT_MUST_USE char *rt_strdup(const char *s);
RT_MUST_USE char *rt_strndup(const char *s, size_t n);

#endif
