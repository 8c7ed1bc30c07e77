#include "runtime/mailbox.h"

#include <stdint.h>
#include <stdlib.h>
#include "runtime/alloc.h"

static size_t round_up_pow2(uint32_t n) {
  size_t c = 2;
  while (c < n)
    c <<= 1;
  return c;
}

int rt_mailbox_init(rt_mailbox *mb, uint32_t capacity) {
  size_t cap = round_up_pow2(capacity);
  mb->cells = rt_malloc(cap * sizeof(*mb->cells));
  if (mb->cells == NULL)
    return ACCEL_ENOMEM;
  for (size_t i = 0; i < cap; i++)
    atomic_init(&mb->cells[i].seq, i);
  mb->mask = cap - 1;
  atomic_init(&mb->tail, 0);
  mb->head = 0;
  return 0;
}

void rt_mailbox_destroy(rt_mailbox *mb) {
  rt_free(mb->cells);
  mb->cells = NULL;
}

int rt_mailbox_push(rt_mailbox *mb, const accel_msg *msg) {
  size_t pos = atomic_load_explicit(&mb->tail, memory_order_relaxed);
  for (;;) {
    rt_mailbox_cell *cell = &mb->cells[pos & mb->mask];
    size_t seq = atomic_load_explicit(&cell->seq, memory_order_acquire);
    intptr_t dif = (intptr_t)seq - (intptr_t)pos;
    if (dif == 0) {
      if (atomic_compare_exchange_weak_explicit(&mb->tail, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed)) {
        cell->msg = *msg;
        /* seq_cst, not just release: with the scheduled flag this is a store-then-load on
         * each side (producer: publish, then test-and-set scheduled; consumer: clear
         * scheduled, then look again), which needs one total order. */
        atomic_store_explicit(&cell->seq, pos + 1, memory_order_seq_cst);
        return 0;
      }
    } else if (dif < 0) {
      return ACCEL_EBUSY; /* the cell one lap behind is not consumed yet: full */
    } else {
      pos = atomic_load_explicit(&mb->tail, memory_order_relaxed);
    }
  }
}

int rt_mailbox_pop(rt_mailbox *mb, accel_msg *out) {
  rt_mailbox_cell *cell = &mb->cells[mb->head & mb->mask];
  size_t seq = atomic_load_explicit(&cell->seq, memory_order_acquire);
  if (seq != mb->head + 1)
    return 0;
  *out = cell->msg;
  atomic_store_explicit(&cell->seq, mb->head + mb->mask + 1, memory_order_release);
  mb->head++;
  return 1;
}

int rt_mailbox_empty(rt_mailbox *mb) {
  rt_mailbox_cell *cell = &mb->cells[mb->head & mb->mask];
  return atomic_load_explicit(&cell->seq, memory_order_seq_cst) != mb->head + 1;
}
