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

#include <stdint.h>

#include "actors/world.h"

#define DEV_LANES_MAX 64 /* no more: `used` below is a bit each */

typedef struct dev_lane {
  const void *owner; /* the session's accounting (dev_task.acct); NULL is an owner too */
  dev_task *head, *tail;
  uint32_t active; /* its tasks waiting here or on the queue */
} dev_lane;

_Static_assert(DEV_LANES_MAX <= 64, "dev_lanes.used has a bit per lane");

typedef struct dev_lanes {
  dev_lane lane[DEV_LANES_MAX];
  uint64_t used;    /* bit i: lane i is in use (DEV_LANES_MAX bits) */
  uint32_t nlanes;  /* lanes in use: active > 0 */
  uint32_t waiting; /* tasks in every lane */
  uint32_t next;    /* where the round-robin looks first */
} dev_lanes;

/* A task comes to the kernel actor (it will run now or wait in its lane): t->lane is set. */
void dev_lanes_enter(dev_lanes *l, dev_task *t);
/* A task that entered has left: completed, failed or dropped. */
void dev_lanes_leave(dev_lanes *l, const dev_task *t);
/* Puts an entered task at the end of its lane. */
void dev_lanes_push(dev_lanes *l, dev_task *t);
/* The next waiting task, round-robin over the lanes; NULL if none waits. */
dev_task *dev_lanes_pop(dev_lanes *l);
/* How many tasks the queue should hold at most now: `deep` while one session (or none) has
 * work here, `shallow` while several have. */
static inline uint32_t dev_lanes_depth(const dev_lanes *l, uint32_t deep, uint32_t shallow) {
  return l->nlanes > 1 ? shallow : deep;
}

#endif
