/* The allocator hook (alloc.h). Four function pointers swapped as one table: a reader sees the
 * old table or the new one, never a mix. Replacing is meant for start-up (or, as the tests do,
 * for allocators that wrap the C library's so blocks of either may be freed by the other). */
#include "runtime/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct rt_allocator {
  accel_malloc_func malloc_fn;
  accel_realloc_func realloc_fn;
  accel_calloc_func calloc_fn;
  accel_free_func free_fn;
} rt_allocator;

static const rt_allocator libc_allocator = {malloc, realloc, calloc, free};
static _Atomic(const rt_allocator *) current = &libc_allocator;

int accel_replace_allocator(accel_malloc_func malloc_fn, accel_realloc_func realloc_fn,
                            accel_calloc_func calloc_fn, accel_free_func free_fn) {
  if (malloc_fn == NULL && realloc_fn == NULL && calloc_fn == NULL && free_fn == NULL) {
    atomic_store(&current, &libc_allocator);
    return 0;
  }
  if (malloc_fn == NULL || realloc_fn == NULL || calloc_fn == NULL || free_fn == NULL)
    return ACCEL_EINVAL;
  static rt_allocator tables[2];
  static atomic_int next;
  /* Alternate two tables so a reader still holding the previous one keeps valid pointers. */
  rt_allocator *t = &tables[atomic_fetch_add(&next, 1) & 1];
  *t = (rt_allocator){malloc_fn, realloc_fn, calloc_fn, free_fn};
  atomic_store(&current, t);
  return 0;
}

void *rt_malloc(size_t size) {
  return atomic_load(&current)->malloc_fn(size ? size : 1);
}

void *rt_calloc(size_t count, size_t size) {
  if (count == 0 || size == 0)
    count = size = 1;
  return atomic_load(&current)->calloc_fn(count, size);
}

void *rt_realloc(void *ptr, size_t size) {
  if (ptr == NULL)
    return rt_malloc(size);
  return atomic_load(&current)->realloc_fn(ptr, size ? size : 1);
}

void rt_free(void *ptr) {
  if (ptr != NULL)
    atomic_load(&current)->free_fn(ptr);
}

char *rt_strndup(const char *s, size_t n) {
  if (s == NULL)
    return NULL;
  size_t len = strnlen(s, n);
  char *copy = rt_malloc(len + 1);
  if (copy != NULL) {
    memcpy(copy, s, len);
    copy[len] = '\0';
  }
  return copy;
}

char *rt_strdup(const char *s) {
  return s == NULL ? NULL : rt_strndup(s, strlen(s));
}

/* The block from the hook starts `align - 1 + sizeof(void *)` bytes early at most; the pointer
 * the hook gave sits just before the aligned address. */
void *rt_aligned_calloc(size_t align, size_t size) {
  if (align == 0 || (align & (align - 1)) != 0 || align > 4096 ||
      size > SIZE_MAX - align - sizeof(void *))
    return NULL;
  char *raw = rt_calloc(1, size + align - 1 + sizeof(void *));
  if (raw == NULL)
    return NULL;
  uintptr_t at = ((uintptr_t)(raw + sizeof(void *)) + align - 1) & ~(uintptr_t)(align - 1);
  ((void **)at)[-1] = raw;
  return (void *)at;
}

void rt_aligned_free(void *ptr) {
  if (ptr != NULL)
    rt_free(((void **)ptr)[-1]);
}
