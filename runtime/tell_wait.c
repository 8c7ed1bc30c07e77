/* Sends that wait for room (accel_tell_wait in accel/runtime.h).
 *
 * A message that meets a full mailbox is parked in the target's list of waiters (loop thread
 * only; a sender on another thread posts it there), in the order parked. After each turn of the
 * target, rt_cell_run moves waiters into its mailbox while there is room, completing each
 * one's future. No polling and no spinning: the room a turn makes is what lets them in. The
 * target's end completes them with ACCEL_ESTALE and drops their messages.
 *
 * Order: the slot counts its waiting sends (rt_slot.waiting, from the moment one is made until
 * it ends). While any waits, a new accel_tell_wait does not try the mailbox but waits behind
 * them: a sender's later message can never overtake its earlier one. */
#include <stdbool.h>
#include <stdlib.h>

#include "runtime/alloc.h"
#include "runtime/rt.h"

struct rt_waiter {
  accel_task post; /* first: the posted task is the waiter */
  struct rt_waiter *next;
  accel_runtime *rt;
  accel_ref to;
  accel_msg msg;   /* its sender filled in when it was sent */
  accel_future *f; /* completed when the message is in the mailbox; NULL: not asked for */
  rt_slot *slot;   /* whose `waiting` counts it (slots are never freed before the runtime) */
};

/* The end of a wait: the future told, the message dropped unless it was queued. */
static void finish(rt_waiter *w, int status) {
  if (status != 0)
    rt_drop_msg(w->rt, &w->msg);
  atomic_fetch_sub(&w->slot->waiting, 1); /* after the push: a later direct send comes after */
  if (w->f) {
    accel_future_complete(w->f, status, NULL, NULL);
    accel_future_release(w->f);
  }
  rt_free(w);
}

/* On the loop: queue it now if there is room and nobody waits before it, else wait. */
static void park(rt_waiter *w) {
  accel_runtime *rt = w->rt;
  accel_actor *cell = atomic_load(&rt->closing) ? NULL : rt_resolve_local(rt, w->to);
  if (cell == NULL && rt_follow(rt, w->to, &w->post))
    return; /* it moved to another loop: the send follows it, still in order */
  if (cell == NULL || cell->status != RT_RUNNING) {
    finish(w, atomic_load(&rt->closing) ? ACCEL_ECLOSED : ACCEL_ESTALE);
    return;
  }
  if (cell->waiters == NULL) {
    int rc = rt_send_as(rt, w->to, &w->msg);
    if (rc != ACCEL_EBUSY) {
      finish(w, rc);
      return;
    }
  }
  w->next = NULL;
  if (cell->waiters_tail)
    cell->waiters_tail->next = w;
  else
    cell->waiters = w;
  cell->waiters_tail = w;
}

static void on_posted(accel_task *task) {
  park((rt_waiter *)task);
}

void rt_waiters_admit(accel_actor *cell) {
  while (cell->waiters && cell->status == RT_RUNNING) {
    rt_waiter *w = cell->waiters;
    int rc = rt_send_as(cell->rt, cell->ref, &w->msg);
    if (rc == ACCEL_EBUSY)
      return;
    cell->waiters = w->next;
    if (cell->waiters == NULL)
      cell->waiters_tail = NULL;
    finish(w, rc);
  }
}

void rt_waiters_fail(accel_actor *cell) {
  while (cell->waiters) {
    rt_waiter *w = cell->waiters;
    cell->waiters = w->next;
    finish(w, ACCEL_ESTALE);
  }
  cell->waiters_tail = NULL;
}

/* A future already complete with `status`, for the sends that went in at once. */
static int done_future(accel_runtime *rt, int status, accel_future **out) {
  int rc = accel_future_create(rt, out);
  if (rc == 0)
    accel_future_complete(*out, status, NULL, NULL);
  return rc;
}

int accel_tell_wait(accel_runtime *rt, accel_ref to, const accel_msg *msg,
                    accel_future **delivered) {
  if (rt == NULL || msg == NULL)
    return ACCEL_EINVAL;
  if (delivered)
    *delivered = NULL;
  rt_slot *slot = rt_slot_at(rt, to.slot);
  bool behind = slot && atomic_load(&slot->waiting) > 0 && atomic_load(&slot->gen) == to.gen;
  int rc = behind ? ACCEL_EBUSY : accel_tell(rt, to, msg);
  if (rc != ACCEL_EBUSY)
    return rc == 0 && delivered ? done_future(rt, 0, delivered) : rc;
  rt_waiter *w = rt_calloc(1, sizeof *w);
  if (w == NULL)
    return ACCEL_ENOMEM;
  *w = (rt_waiter){.rt = rt, .to = to, .msg = *msg, .slot = slot};
  accel_actor *from = rt_tls_actor;
  w->msg.sender = from && from->rt == rt ? from->ref : ACCEL_REF_NONE;
  if (delivered) {
    rc = accel_future_create(rt, &w->f);
    if (rc != 0) {
      rt_free(w);
      return rc;
    }
    accel_future_retain(w->f); /* one for the caller, one for the wait */
    *delivered = w->f;
  }
  /* Counted and posted under the slot's lock, so the target does not move to another loop in
   * between: this thread's waiting sends all meet it on one loop, in order (move.c). */
  rt_slot_lock(slot); /* slot: a busy mailbox has one */
  atomic_fetch_add(&slot->waiting, 1);
  rt_loop *home = rt_slot_home(rt, slot); /* the target's cell is only touched there */
  if (rt_tls_loop == home) {
    rt_slot_unlock(slot);
    park(w);
  } else {
    w->post.fn_ = on_posted;
    rt_post_to(home, &w->post); /* in order per sending thread, as tells are */
    rt_slot_unlock(slot);
  }
  return 0;
}
