/* Help offered to a future's waiters: a way for a thread that waits on a future with no
 * timeout to bring about its completion itself, instead of sleeping until another thread
 * does and then being woken. The device layer offers one when an op's completion is a
 * blocking wait on a device event: the waiting client syncs on the event in its own thread,
 * and the op costs one thread hand-off less (see kernel_actor.c).
 *
 * A helper is reference counted (atomic: released on any thread). Whoever runs it must make
 * sure its work happens once however many threads try (a claim inside `run`). */
#ifndef RT_FUTURE_HELP_H
#define RT_FUTURE_HELP_H

#include <stdatomic.h>
#include <stdbool.h>

#include "accel/runtime.h"

typedef struct rt_helper rt_helper;
struct rt_helper {
  atomic_int refs;
  void (*run)(rt_helper *h);  /* on a waiting thread, never the loop; may block */
  void (*free)(rt_helper *h); /* at the last reference, on any thread */
  /* Optional: for a wait with a timeout, the same work without blocking past `until_ns`
   * (uv_hrtime's clock): true if it was done (here or by another thread), false if the time
   * ran out first (the waiter then waits as usual: the op's own completion comes). */
  bool (*try_run)(rt_helper *h, uint64_t until_ns);
};

static inline void rt_helper_retain(rt_helper *h) {
  atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
}

static inline void rt_helper_release(rt_helper *h) {
  if (h != NULL && atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1)
    h->free(h);
}

/* Offers h to f's waiters (f takes a reference, dropped when a waiter takes it, when f
 * completes, or when f is freed). Returns true if a thread is already waiting on f: one
 * with no timeout leaves only once f completes, and runs h first unless f completes before
 * it gets to it; one with a timeout runs h's try_run (where h has one) within its time.
 * False (nothing taken) if f is done or already has a helper. */
bool rt_future_offer_help(accel_future *f, rt_helper *h);

/* True if a thread waits on f now (with a timeout or without): help offered would be run. */
bool rt_future_has_helper_waiting(accel_future *f);

#endif
