/* A failing allocator for accel_replace_allocator (the tests' version of Lua's ltests.c
 * debug_realloc and libuv's test-loop-oom.c).
 *
 * Every block carries a header (a magic number and its size), so the allocator knows how many
 * of accel's blocks are live, and a free of a block it did not allocate (memory of the C
 * library's or another library's, freed through accel's hook) aborts at once.
 *
 * fa_arm(n) makes the n-th allocation attempt from now fail (n counts malloc, calloc and
 * realloc, from every thread); fa_disarm() stops failing. fa_failed() says whether the armed
 * failure happened, fa_live() how many blocks are live. Blocks are real C-library blocks behind
 * the header, so this allocator may replace the default one at any time. */
#ifndef ACCEL_TESTS_FAILING_ALLOC_H
#define ACCEL_TESTS_FAILING_ALLOC_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "accel/runtime.h"

#define FA_MAGIC 0xacce1a110c0ffeeULL

typedef struct fa_header {
  uint64_t magic;
  uint64_t size;
} fa_header;

static atomic_ullong fa_calls, fa_fail_at, fa_hits;
static atomic_llong fa_live_blocks;

static int fa_should_fail(void) {
  unsigned long long at = atomic_load(&fa_fail_at);
  if (at == 0)
    return 0;
  if (atomic_fetch_add(&fa_calls, 1) + 1 != at)
    return 0;
  atomic_fetch_add(&fa_hits, 1);
  return 1;
}

static fa_header *fa_check(void *p) {
  fa_header *h = (fa_header *)p - 1;
  if (h->magic != FA_MAGIC) {
    fprintf(stderr, "failing_alloc: %p was not allocated through accel's hook\n", p);
    abort();
  }
  return h;
}

static void *fa_malloc(size_t size) {
  if (fa_should_fail())
    return NULL;
  fa_header *h = malloc(sizeof *h + size);
  if (h == NULL)
    return NULL;
  *h = (fa_header){FA_MAGIC, size};
  atomic_fetch_add(&fa_live_blocks, 1);
  return h + 1;
}

static void *fa_calloc(size_t count, size_t size) {
  if (size != 0 && count > (SIZE_MAX - sizeof(fa_header)) / size)
    return NULL;
  if (fa_should_fail())
    return NULL;
  fa_header *h = calloc(1, sizeof *h + count * size);
  if (h == NULL)
    return NULL;
  *h = (fa_header){FA_MAGIC, count * size};
  atomic_fetch_add(&fa_live_blocks, 1);
  return h + 1;
}

static void *fa_realloc(void *p, size_t size) {
  fa_header *old = fa_check(p);
  if (fa_should_fail())
    return NULL;
  old->magic = 0; /* a stale pointer to the old block no longer passes */
  fa_header *h = realloc(old, sizeof *h + size);
  if (h == NULL) {
    old->magic = FA_MAGIC;
    return NULL;
  }
  *h = (fa_header){FA_MAGIC, size};
  return h + 1;
}

static void fa_free(void *p) {
  fa_header *h = fa_check(p);
  h->magic = 0;
  atomic_fetch_sub(&fa_live_blocks, 1);
  free(h);
}

static inline void fa_install(void) {
  if (accel_replace_allocator(fa_malloc, fa_realloc, fa_calloc, fa_free) != 0)
    abort();
}

static inline void fa_arm(unsigned long long n) {
  atomic_store(&fa_calls, 0);
  atomic_store(&fa_hits, 0);
  atomic_store(&fa_fail_at, n);
}

static inline void fa_disarm(void) {
  atomic_store(&fa_fail_at, 0);
}

static inline int fa_failed(void) {
  return atomic_load(&fa_hits) > 0;
}

static inline long long fa_live(void) {
  return atomic_load(&fa_live_blocks);
}

static inline unsigned long long fa_attempts(void) {
  return atomic_load(&fa_calls);
}

#endif
