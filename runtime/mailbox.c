/* The growing mailbox (mailbox.h has the design).
 *
 * Why the bound holds: let ring n be the newest, b_n its cells still blocked and q_k what ring
 * k holds. Invariant: the rings older than n hold at most b_n messages. Then everything queued
 * is at most (N_n - b_n) + b_n = N_n <= capacity. A new ring made from a full ring n starts
 * with b = N_n blocked, and rings up to n hold at most q_n + b_n <= N_n then (a ring holds no
 * message in a blocked cell). After its close an older ring only shrinks; the consumer
 * unblocks a cell of the ring that was newest *before* it took the message (so that message
 * was counted in that ring's b), and all of them once the older rings are empty. */
#include "runtime/mailbox.h"

#include <sched.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/alloc.h"

#define CLOSED ((size_t)1 << (sizeof(size_t) * 8 - 1)) /* in a ring's tail: no more claims */

struct rt_ring {
  /* Read by producers and the consumer, written once. */
  size_t mask;
  _Atomic(rt_ring *) next;         /* the ring that replaced this one (set after the close) */
  rt_ring *retired_next;           /* consumer only: in the mailbox's retired list */
  _Alignas(64) atomic_size_t tail; /* next position producers claim; CLOSED once replaced */
  /* Consumer only. */
  _Alignas(64) size_t head;
  size_t unblock_next, unblock_end; /* first-lap cells still blocked: [next, end) */
  _Alignas(64) rt_mailbox_cell cells[];
};

enum { PUSHED, RING_FULL, RING_CLOSED };

static uint32_t round_up_pow2(uint32_t n) {
  uint32_t c = 2;
  while (c < n && c < (UINT32_C(1) << 31))
    c <<= 1;
  return c;
}

/* `blocked` cells at the end of the first lap start one lap behind: not claimable until the
 * consumer unblocks them. */
static rt_ring *ring_new(size_t n, size_t blocked) {
  rt_ring *r = rt_aligned_calloc(64, sizeof *r + n * sizeof r->cells[0]);
  if (r == NULL)
    return NULL;
  r->mask = n - 1;
  atomic_init(&r->next, NULL);
  atomic_init(&r->tail, 0);
  for (size_t i = 0; i < n; i++)
    atomic_init(&r->cells[i].seq, i < n - blocked ? i : i - n);
  r->unblock_next = n - blocked;
  r->unblock_end = n;
  return r;
}

int rt_mailbox_init(rt_mailbox *mb, uint32_t capacity) {
  mb->capacity = round_up_pow2(capacity);
  uint32_t first = mb->capacity < RT_MAILBOX_FIRST ? mb->capacity : RT_MAILBOX_FIRST;
  rt_ring *r = ring_new(first, 0);
  if (r == NULL)
    return ACCEL_ENOMEM;
  atomic_init(&mb->ring, r);
  mb->head_ring = r;
  mb->retired = NULL;
  atomic_init(&mb->growing, false);
  return 0;
}

static void free_retired(rt_mailbox *mb, rt_ring *keep) {
  rt_ring **link = &mb->retired;
  while (*link) {
    rt_ring *r = *link;
    if (r == keep) {
      link = &r->retired_next;
      continue;
    }
    *link = r->retired_next;
    rt_aligned_free(r);
  }
}

void rt_mailbox_destroy(rt_mailbox *mb) {
  free_retired(mb, NULL);
  rt_ring *r = mb->head_ring;
  while (r) {
    rt_ring *next = atomic_load_explicit(&r->next, memory_order_relaxed);
    rt_aligned_free(r);
    r = next;
  }
  mb->head_ring = NULL;
  atomic_store(&mb->ring, NULL);
}

/* ---- producers ---- */

static int ring_push(rt_ring *r, const accel_msg *msg) {
  size_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
  for (;;) {
    if (pos & CLOSED)
      return RING_CLOSED;
    rt_mailbox_cell *cell = &r->cells[pos & r->mask];
    size_t seq = atomic_load_explicit(&cell->seq, memory_order_acquire);
    intptr_t dif = (intptr_t)seq - (intptr_t)pos;
    if (dif == 0) {
      if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed)) {
        cell->msg = *msg;
        /* seq_cst, not just release: with the scheduled flag this is a store-then-load on
         * each side (producer: publish, then test-and-set scheduled; consumer: clear
         * scheduled, then look again), which needs one total order. */
        atomic_store_explicit(&cell->seq, pos + 1, memory_order_seq_cst);
        return PUSHED;
      }
    } else if (dif < 0) {
      return RING_FULL; /* the cell one lap behind is not consumed (or still blocked) */
    } else {
      pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    }
  }
}

static bool ring_full(rt_ring *r) {
  size_t pos = atomic_load(&r->tail);
  if (pos & CLOSED)
    return false;
  size_t seq = atomic_load(&r->cells[pos & r->mask].seq);
  return (intptr_t)seq - (intptr_t)pos < 0;
}

/* Replaces the full newest ring `full` by one twice its size. 0 (grown, or no longer needed:
 * push again), ACCEL_EBUSY at the bound, ACCEL_EAGAIN while another producer grows it,
 * ACCEL_ENOMEM. The order matters: close, link, publish (see rt_mailbox_empty). */
static int grow(rt_mailbox *mb, rt_ring *full) {
  size_t n = full->mask + 1;
  if (n >= mb->capacity)
    return ACCEL_EBUSY;
  if (atomic_exchange_explicit(&mb->growing, true, memory_order_acquire))
    return ACCEL_EAGAIN;
  int rc = 0;
  if (atomic_load(&mb->ring) == full && ring_full(full)) {
    rt_ring *r = ring_new(2 * n < mb->capacity ? 2 * n : mb->capacity, n);
    if (r == NULL) {
      rc = ACCEL_ENOMEM;
    } else {
      atomic_fetch_or(&full->tail, CLOSED);
      atomic_store(&full->next, r);
      atomic_store(&mb->ring, r);
    }
  }
  atomic_store_explicit(&mb->growing, false, memory_order_release);
  return rc;
}

/* Another producer is between closing a ring and publishing the next: wait for it. */
static void wait_turn(unsigned *spins) {
  if (++*spins % 64 == 0) {
    sched_yield();
  } else {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("pause");
#endif
  }
}

int rt_mailbox_push(rt_mailbox *mb, const accel_msg *msg) {
  unsigned spins = 0;
  for (;;) {
    /* seq_cst: ordered after a sender's pin (rt_mailbox_reclaim). */
    rt_ring *r = atomic_load(&mb->ring);
    int st = ring_push(r, msg);
    if (st == PUSHED)
      return 0;
    if (st == RING_FULL) {
      int rc = grow(mb, r);
      if (rc == 0)
        continue;
      if (rc != ACCEL_EAGAIN)
        return rc;
    }
    wait_turn(&spins);
  }
}

/* ---- the consumer ---- */

static void unblock_one(rt_ring *r) {
  if (r->unblock_next == r->unblock_end)
    return;
  size_t i = r->unblock_next++;
  atomic_store_explicit(&r->cells[i].seq, i, memory_order_seq_cst);
}

/* Leaves the head ring if it is closed and every position claimed in it was taken: the next
 * ring becomes the head, with nothing older left, so all its cells are unblocked. */
static bool leave_ring(rt_mailbox *mb) {
  rt_ring *r = mb->head_ring;
  rt_ring *next = atomic_load(&r->next); /* seq_cst: see rt_mailbox_empty */
  if (next == NULL)
    return false;
  size_t tail = atomic_load(&r->tail); /* closed before `next` was set */
  if (r->head != (tail & ~CLOSED))
    return false; /* a producer claimed a position and is still writing it */
  mb->head_ring = next;
  while (next->unblock_next != next->unblock_end)
    unblock_one(next);
  r->retired_next = mb->retired;
  mb->retired = r;
  return true;
}

int rt_mailbox_pop(rt_mailbox *mb, accel_msg *out) {
  for (;;) {
    rt_ring *r = mb->head_ring;
    /* A replaced ring: the newest, read before the take, counted this message as blocked. */
    rt_ring *credit = NULL;
    if (atomic_load_explicit(&r->next, memory_order_relaxed) != NULL)
      credit = atomic_load(&mb->ring);
    rt_mailbox_cell *cell = &r->cells[r->head & r->mask];
    size_t seq = atomic_load_explicit(&cell->seq, memory_order_acquire);
    if (seq == r->head + 1) {
      *out = cell->msg;
      atomic_store_explicit(&cell->seq, r->head + r->mask + 1, memory_order_release);
      r->head++;
      if (credit != NULL && credit != r)
        unblock_one(credit);
      return 1;
    }
    if (!leave_ring(mb))
      return 0;
  }
}

/* seq_cst loads: a producer that pushed into a newer ring read the ring pointer published
 * after the close and the link, so a consumer that clears `scheduled` after that producer's
 * test-and-set sees the link and the close here, and then the message. */
int rt_mailbox_empty(rt_mailbox *mb) {
  for (;;) {
    rt_ring *r = mb->head_ring;
    rt_mailbox_cell *cell = &r->cells[r->head & r->mask];
    if (atomic_load_explicit(&cell->seq, memory_order_seq_cst) == r->head + 1)
      return 0;
    if (!leave_ring(mb))
      return 1;
  }
}

uint32_t rt_mailbox_used(rt_mailbox *mb) {
  size_t n = 0;
  for (rt_ring *r = mb->head_ring; r; r = atomic_load_explicit(&r->next, memory_order_acquire))
    n += (atomic_load_explicit(&r->tail, memory_order_relaxed) & ~CLOSED) - r->head;
  return (uint32_t)n;
}

size_t rt_mailbox_cells(rt_mailbox *mb) {
  size_t n = 0;
  for (rt_ring *r = mb->head_ring; r; r = atomic_load_explicit(&r->next, memory_order_acquire))
    n += r->mask + 1;
  for (rt_ring *r = mb->retired; r; r = r->retired_next)
    n += r->mask + 1;
  return n;
}

void rt_mailbox_reclaim(rt_mailbox *mb, atomic_uint *pins) {
  rt_ring *newest = atomic_load(&mb->ring);
  if (atomic_load(pins) == 0)
    free_retired(mb, newest);
}
