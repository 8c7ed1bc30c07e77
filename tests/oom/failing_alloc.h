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
 * the header, so this allocator may replace the default one at any time. Live blocks are kept
 * on a list, with their numbers, to name the ones a failure leaked. */
#ifndef ACCEL_TESTS_FAILING_ALLOC_H
#define ACCEL_TESTS_FAILING_ALLOC_H

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "accel/runtime.h"

#define FA_MAGIC 0xacce1a110c0ffeeULL

typedef struct fa_header {
  uint64_t magic;
  uint64_t size;
  uint64_t seq; /* the allocation's number since the start of the process */
  struct fa_header *prev, *next;
  void *frames[9]; /* who allocated it, with ACCEL_OOM_BACKTRACE=1 */
} fa_header;       /* 16 x 8 bytes: blocks stay 16-byte aligned */

static atomic_ullong fa_calls, fa_fail_at, fa_hits, fa_seq;
static void *fa_fail_frames[12]; /* where the armed failure happened */
static int fa_fail_nframes;
static atomic_llong fa_live_blocks;
static pthread_mutex_t fa_mu = PTHREAD_MUTEX_INITIALIZER;
static fa_header fa_blocks = {.prev = &fa_blocks, .next = &fa_blocks}; /* every live block */

/* ACCEL_OOM_TRAP_SEQ=S raises SIGTRAP at the allocation numbered S (a debugger shows who made
 * a block that leaked: fa_report_leaks prints their numbers); ACCEL_OOM_BACKTRACE=1 keeps each
 * block's allocating frames, printed with the leak. */
static void fa_link(fa_header *h) {
  h->seq = atomic_fetch_add(&fa_seq, 1) + 1;
  static int want_frames = -1;
  if (want_frames < 0)
    want_frames = getenv("ACCEL_OOM_BACKTRACE") != NULL;
  if (want_frames)
    backtrace(h->frames, 9);
  static long long trap = -1;
  if (trap < 0) {
    const char *t = getenv("ACCEL_OOM_TRAP_SEQ");
    trap = t ? atoll(t) : 0;
  }
  if (trap > 0 && h->seq == (uint64_t)trap)
    raise(SIGTRAP);
  pthread_mutex_lock(&fa_mu);
  h->next = fa_blocks.next;
  h->prev = &fa_blocks;
  fa_blocks.next->prev = h;
  fa_blocks.next = h;
  pthread_mutex_unlock(&fa_mu);
}

static void fa_unlink(fa_header *h) {
  pthread_mutex_lock(&fa_mu);
  h->prev->next = h->next;
  h->next->prev = h->prev;
  pthread_mutex_unlock(&fa_mu);
}

static int fa_should_fail(void) {
  unsigned long long at = atomic_load(&fa_fail_at);
  if (at == 0)
    return 0;
  if (atomic_fetch_add(&fa_calls, 1) + 1 != at)
    return 0;
  atomic_fetch_add(&fa_hits, 1);
  fa_fail_nframes = backtrace(fa_fail_frames, 12);
  if (getenv("ACCEL_OOM_TRAP_FAIL") != NULL)
    raise(SIGTRAP); /* a debugger shows the allocation that fails */
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
  *h = (fa_header){.magic = FA_MAGIC, .size = size};
  fa_link(h);
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
  *h = (fa_header){.magic = FA_MAGIC, .size = count * size};
  fa_link(h);
  atomic_fetch_add(&fa_live_blocks, 1);
  return h + 1;
}

static void *fa_realloc(void *p, size_t size) {
  fa_header *old = fa_check(p);
  if (fa_should_fail())
    return NULL;
  fa_unlink(old);
  old->magic = 0; /* a stale pointer to the old block no longer passes */
  fa_header *h = realloc(old, sizeof *h + size);
  if (h == NULL) {
    old->magic = FA_MAGIC;
    fa_link(old);
    return NULL;
  }
  h->magic = FA_MAGIC;
  h->size = size;
  fa_link(h);
  return h + 1;
}

static void fa_free(void *p) {
  fa_header *h = fa_check(p);
  fa_unlink(h);
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

/* Prints where the armed failure happened (addresses: addr2line -f -i -e EXE turns them into
 * functions and lines). */
static inline void fa_report_failure(void) {
  if (fa_failed()) {
    fprintf(stderr, "  the failed allocation:\n");
    backtrace_symbols_fd(fa_fail_frames, fa_fail_nframes, 2);
  }
}

/* The number the next allocation will get. */
static inline unsigned long long fa_next_seq(void) {
  return atomic_load(&fa_seq) + 1;
}

/* Prints the live blocks numbered from `since` on (at most 16), to stderr. */
static inline void fa_report_leaks(unsigned long long since) {
  int shown = 0;
  pthread_mutex_lock(&fa_mu);
  for (fa_header *h = fa_blocks.next; h != &fa_blocks && shown < 16; h = h->next) {
    if (h->seq >= since) {
      fprintf(stderr, "  leaked: allocation #%llu, %llu bytes (ACCEL_OOM_TRAP_SEQ=%llu)\n",
              (unsigned long long)h->seq, (unsigned long long)h->size, (unsigned long long)h->seq);
      int n = 0;
      while (n < 9 && h->frames[n] != NULL)
        n++;
      backtrace_symbols_fd(h->frames, n, 2);
      shown++;
    }
  }
  pthread_mutex_unlock(&fa_mu);
}

static inline unsigned long long fa_attempts(void) {
  return atomic_load(&fa_calls);
}

#endif
