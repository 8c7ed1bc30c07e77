/* Turns run by a client thread while the loop sleeps (loop.h: rt_tell_and_run).
 *
 * A client that sends one op and waits for it would otherwise cross threads twice: its send
 * wakes the loop (an eventfd write, a context switch), and the loop's completion wakes it
 * back. When the loop sleeps nobody else needs the runtime's state, so the sender takes the
 * loop token and runs the turn itself: with work that completes where it is submitted (the
 * cpu backend's tiny items), the op is done before the send returns, with no wake-up at all.
 * The loop thread sleeps in poll with the token released (loop.c: sleep_in_poll); a borrower
 * holds it like the loop would, libuv included, and afterwards wakes the loop only if a
 * handle, a timer, a `then` callback or leftover work needs it sooner than it would wake. */
#include <stdlib.h>
#include <string.h>

#include "runtime/loop.h"
#include "runtime/rt.h"

/* A bound on the turns one send runs on a client thread; what is left goes to the loop. */
#define RT_BORROW_TURNS 64

bool rt_borrow_env_off(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    const char *s = getenv("ACCEL_BORROW");
    v = s != NULL && strcmp(s, "0") == 0;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v != 0;
}

void rt_borrow_disable(accel_runtime *rt) {
  if (rt != NULL)
    atomic_store(&rt->borrow_off, true);
}

uint64_t rt_borrowed_turns(accel_runtime *rt) {
  uint64_t n = 0;
  for (uint32_t i = 0; rt != NULL && i < rt->n_loops; i++)
    n += atomic_load(&rt->loops[i].borrowed_turns);
  return n;
}

static bool run_here(rt_loop *l) {
  if (pthread_mutex_trylock(&l->token) != 0)
    return false; /* the loop (or another borrower) runs: it will look */
  if (l->sleep_until_ms == 0 || atomic_load(&l->rt->closing)) {
    pthread_mutex_unlock(&l->token); /* not asleep in poll: not started, or on its way */
    return false;
  }
  l->borrowed = true;
  rt_tls_loop = l;
  uv_update_time(&l->loop); /* timers started here count from now, not from its sleep */
  uint64_t turns = 0;
  while (turns < RT_BORROW_TURNS && rt_turn_has_work(l)) {
    rt_turn_run(l);
    turns++;
  }
  rt_tls_loop = NULL;
  l->borrowed = false;
  atomic_fetch_add_explicit(&l->borrowed_turns, turns, memory_order_relaxed);
  bool wake = rt_turn_loop_must_wake(l);
  pthread_mutex_unlock(&l->token);
  if (wake)
    rt_wakeup_signal(&l->wake);
  return true;
}

/* The turns run are those of the target's loop (the one the send queued work on). */
int rt_tell_and_run(accel_runtime *rt, accel_ref to, const accel_msg *msg) {
  rt_slot *slot = rt ? rt_slot_at(rt, to.slot) : NULL;
  if (slot == NULL || rt_tls_loop != NULL ||
      atomic_load_explicit(&rt->borrow_off, memory_order_relaxed))
    return accel_tell(rt, to, msg);
  rt_loop *l = rt_slot_home(rt, slot);
  rt_tls_hold_wake = l;
  rt_tls_wake_owed = false;
  int rc = accel_tell(rt, to, msg);
  rt_tls_hold_wake = NULL;
  if (!rt_tls_wake_owed)
    return rc; /* nothing queued, or queued where the loop looks anyway */
  rt_tls_wake_owed = false;
  /* Pinned like any remote sender; a closing runtime's stop already woke the loop, whose
   * drain takes what was queued. */
  if (rt_remote_enter(rt)) {
    if (!run_here(l))
      rt_wakeup_signal(&l->wake);
    rt_remote_leave(rt);
  }
  return rc;
}
