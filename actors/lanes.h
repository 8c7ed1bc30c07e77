/* Fair turns on a device queue: the ready tasks that wait for room on a kernel actor's queue,
 * one FIFO lane per session, taken round-robin, so that a session that floods a device with
 * ops cannot make another wait behind all of them. Each lane also counts its session's tasks on
 * the queue: while more than one session has work there, the kernel actor keeps the queue
 * shallower (lanes_depth), so a newcomer's op waits behind a few ops, not a full queue.
 * Tasks of one session keep their order; tasks of different sessions share no buffers, so
 * their order between them is free. Loop thread; no allocation (a fixed table of lanes; the
 * sessions past it share the last one, in order). */
#ifndef DEV_LANES_H
#define DEV_LANES_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/world.h"

#define DEV_LANES_MAX 64 /* no more: `used` below is a bit each */
/* A session with this many tasks here at once pipelines. Fewer: a session that waits for each
 * op can still have two, its next op coming while the loop finishes the last (its reply went
 * out first, from the thread that saw the work done). */
#define DEV_LANES_DEEP 4

typedef struct dev_lane {
  const void *owner; /* the session's accounting (dev_task.acct); NULL is an owner too */
  dev_task *head, *tail;
  uint32_t active; /* its tasks waiting here or on the queue */
  bool lone;       /* since it last came to an empty lane, its session never had three here */
} dev_lane;

_Static_assert(DEV_LANES_MAX <= 64, "dev_lanes.used has a bit per lane");

typedef struct dev_lanes {
  dev_lane lane[DEV_LANES_MAX];
  uint64_t used;           /* bit i: lane i is in use (DEV_LANES_MAX bits) */
  uint32_t nlanes;         /* lanes in use: active > 0 */
  uint32_t waiting;        /* tasks in every lane */
  uint32_t next;           /* where the round-robin looks first */
  uint64_t deep_until_ns;  /* a session pipelined here within the hold before this */
  const void *deep_owner;  /* the session that did so last (lanes are reused by others) */
  uint64_t light_until_ns; /* a light session's op ended here within the hold before this */
} dev_lanes;

/* How long a pipelining session, and a light session's op beside it, are remembered (enter,
 * leave): a light session's reply and its next op, or a pipelining session's two batches,
 * leave a gap that must not end what they showed. */
#define DEV_LANES_HOLD_NS 2000000u

/* A task comes to the kernel actor (it will run now or wait in its lane) at now_ns (a
 * monotonic clock): t->lane is set. True if its session now has DEV_LANES_DEEP tasks here:
 * it pipelines (remembered for the hold while it holds that many; the shared lane, whose
 * sessions are counted together, never counts as pipelining nor as light). */
bool dev_lanes_enter(dev_lanes *l, dev_task *t, uint64_t now_ns);
/* A task that entered has left (completed, failed or dropped) at now_ns. True if its session
 * has no task here now and had at most one other (its next op, come early: DEV_LANES_DEEP's
 * note) since its lane was last empty: a light session, one op at a time. If another session
 * pipelined here within the hold, the queue is then kept short for the hold (depth). */
bool dev_lanes_leave(dev_lanes *l, const dev_task *t, uint64_t now_ns);
/* Puts an entered task at the end of its lane. */
void dev_lanes_push(dev_lanes *l, dev_task *t);
/* The next waiting task, round-robin over the lanes; NULL if none waits. */
dev_task *dev_lanes_pop(dev_lanes *l);
/* How many tasks the queue should hold at most at now_ns: `light` within the hold after a
 * light session's op beside a pipelining one (its next op then waits behind a few, not a
 * queue the other filled while it was between two ops), else `deep` while one session (or
 * none) has work here, `shallow` while several have. */
static inline uint32_t dev_lanes_depth(const dev_lanes *l, uint32_t deep, uint32_t shallow,
                                       uint32_t light, uint64_t now_ns) {
  if (now_ns < l->light_until_ns)
    return light;
  return l->nlanes > 1 ? shallow : deep;
}

#endif
