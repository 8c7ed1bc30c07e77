/* A bounded multi-producer, single-consumer queue of messages that grows on demand.
 *
 * Messages sit in rings (Vyukov's bounded queue: one sequence number per cell, producers claim
 * a position with one CAS, no locks). A mailbox starts with one small ring (RT_MAILBOX_FIRST
 * cells, or the bound if smaller); a producer that finds the newest ring full while it is
 * smaller than the bound makes a ring twice its size (at most the bound), closes the full one
 * (no position is claimed in it any more) and publishes the new one. The consumer empties the
 * rings oldest first, so the order of one producer's messages holds across growth.
 *
 * The bound: a new ring starts with as many cells blocked (they look one lap behind, not yet
 * consumed) as the ring it replaces had cells, which is at least what all older rings still
 * hold. The consumer unblocks one for every message it takes from an older ring, and the rest
 * when the older rings are empty. So at most `capacity` messages are ever queued, and a mailbox
 * holding `capacity` refuses with ACCEL_EBUSY as a single ring would; during growth a sender
 * may be refused a little early, never late.
 *
 * Rings are never moved. A ring the consumer has left is retired, and freed by
 * rt_mailbox_reclaim once no other thread may still hold it (a producer on another thread reads
 * the ring pointer inside a send, pinned: actor.c), or by rt_mailbox_destroy.
 *
 * Producers: any thread. Consumer (pop, empty, reclaim): the loop thread only. */
#ifndef RT_MAILBOX_H
#define RT_MAILBOX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "accel/runtime.h"
#include "runtime/attr.h"

#define RT_MAILBOX_FIRST 16u /* cells of a mailbox's first ring */

typedef struct rt_mailbox_cell {
  atomic_size_t seq;
  accel_msg msg;
} rt_mailbox_cell;

typedef struct rt_ring rt_ring;

typedef struct rt_mailbox {
  _Atomic(rt_ring *) ring; /* the newest: where producers push */
  rt_ring *head_ring;      /* consumer only: where it pops (the oldest not yet emptied) */
  rt_ring *retired;        /* consumer only: emptied rings waiting for rt_mailbox_reclaim */
  uint32_t capacity;       /* the bound, a power of two */
  atomic_bool growing;     /* a producer is making the next ring */
} rt_mailbox;

/* capacity is rounded up to a power of two (at least 2). 0 or ACCEL_ENOMEM. */
RT_MUST_USE int rt_mailbox_init(rt_mailbox *mb, uint32_t capacity);
void rt_mailbox_destroy(rt_mailbox *mb);
/* 0; ACCEL_EBUSY when `capacity` messages are queued; ACCEL_ENOMEM when the mailbox had to grow
 * and could not. On failure nothing is queued and nothing queued is lost. */
RT_MUST_USE int rt_mailbox_push(rt_mailbox *mb, const accel_msg *msg);
/* 1 and *out filled, or 0 when empty (a push in progress counts as not there yet). */
RT_MUST_USE int rt_mailbox_pop(rt_mailbox *mb, accel_msg *out);
int rt_mailbox_empty(rt_mailbox *mb);
/* Messages queued (approximate while producers push); consumer only. */
uint32_t rt_mailbox_used(rt_mailbox *mb);
/* Cells allocated now, all rings counted (for tests and reports); consumer only. */
size_t rt_mailbox_cells(rt_mailbox *mb);
/* Frees retired rings if *pins (the senders on other threads inside a send to this mailbox) is
 * 0 after the newest ring is read: a sender that pins later reads the newest ring. */
void rt_mailbox_reclaim(rt_mailbox *mb, atomic_uint *pins);
static inline bool rt_mailbox_has_retired(const rt_mailbox *mb) {
  return mb->retired != NULL;
}

#endif
