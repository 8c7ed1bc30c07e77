/* A bounded multi-producer, single-consumer queue of messages (Vyukov's bounded queue: one
 * sequence number per cell, producers claim a position with one CAS, no locks).
 * Producers: any thread. Consumer: the loop thread only. */
#ifndef RT_MAILBOX_H
#define RT_MAILBOX_H

#include <stdatomic.h>
#include <stddef.h>

#include "accel/runtime.h"
#include "runtime/attr.h"

typedef struct rt_mailbox_cell {
  atomic_size_t seq;
  accel_msg msg;
} rt_mailbox_cell;

typedef struct rt_mailbox {
  rt_mailbox_cell *cells;
  size_t mask;
  _Alignas(64) atomic_size_t tail; /* next position producers claim */
  _Alignas(64) size_t head;        /* next position the consumer reads (consumer only) */
} rt_mailbox;

/* capacity is rounded up to a power of two (at least 2). 0 or ACCEL_ENOMEM. */
RT_MUST_USE int rt_mailbox_init(rt_mailbox *mb, uint32_t capacity);
void rt_mailbox_destroy(rt_mailbox *mb);
/* 0, or ACCEL_EBUSY when full (nothing queued). */
RT_MUST_USE int rt_mailbox_push(rt_mailbox *mb, const accel_msg *msg);
/* 1 and *out filled, or 0 when empty (a push in progress counts as not there yet). */
RT_MUST_USE int rt_mailbox_pop(rt_mailbox *mb, accel_msg *out);
int rt_mailbox_empty(rt_mailbox *mb);

#endif
