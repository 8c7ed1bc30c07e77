/* Fair turns on a device queue (lanes.h). */
#include "actors/lanes.h"

#include <stddef.h>

#define SHARED (DEV_LANES_MAX - 1) /* the sessions past the table's size, together */

/* A lane for `owner`: its own, else a free one, else the shared one. While the shared lane
 * holds work, no owner gets a lane of its own: one of its tasks may be in the shared lane, and
 * a lane of its own could run a later task first. Only the lanes in use are looked at (a scan
 * of all 63 was a twentieth of acceld's loop time per tiny op). */
static uint32_t lane_for(dev_lanes *l, const void *owner) {
  uint64_t own = l->used & ~((uint64_t)1 << SHARED);
  for (uint64_t m = own; m != 0; m &= m - 1) {
    uint32_t i = (uint32_t)__builtin_ctzll(m);
    if (l->lane[i].owner == owner)
      return i;
  }
  uint64_t free_lanes = ~own & (((uint64_t)1 << SHARED) - 1);
  if (l->lane[SHARED].active > 0 || free_lanes == 0)
    return SHARED;
  uint32_t i = (uint32_t)__builtin_ctzll(free_lanes);
  l->lane[i].owner = owner;
  return i;
}

/* A lane of its own (not the shared one, whose counts mix sessions) holding `held` tasks: while
 * it pipelines, that is remembered for the hold, and whose session it was. */
static void note_deep(dev_lanes *l, uint32_t lane, uint32_t held, uint64_t now_ns) {
  if (lane == SHARED || held < DEV_LANES_DEEP)
    return;
  l->deep_until_ns = now_ns + DEV_LANES_HOLD_NS;
  l->deep_owner = l->lane[lane].owner;
}

bool dev_lanes_enter(dev_lanes *l, dev_task *t, uint64_t now_ns) {
  t->lane = (uint8_t)lane_for(l, t->acct);
  dev_lane *lane = &l->lane[t->lane];
  uint32_t was = lane->active++;
  if (was == 0) {
    l->nlanes++;
    l->used |= (uint64_t)1 << t->lane;
    lane->lone = t->lane != SHARED;
  } else if (was == 2) {
    lane->lone = false; /* two may be one op's tail and the next (lanes.h) */
  }
  note_deep(l, t->lane, was + 1, now_ns);
  return t->lane != SHARED && was + 1 == DEV_LANES_DEEP;
}

bool dev_lanes_leave(dev_lanes *l, const dev_task *t, uint64_t now_ns) {
  dev_lane *lane = &l->lane[t->lane];
  if (lane->active == 0)
    return false;                              /* a guard: a task leaves once */
  note_deep(l, t->lane, lane->active, now_ns); /* still pipelining as its work drains */
  if (--lane->active > 0)
    return false;
  l->nlanes--;
  l->used &= ~((uint64_t)1 << t->lane);
  /* light beside another session's pipelining, not after its own */
  if (lane->lone && now_ns < l->deep_until_ns && l->deep_owner != lane->owner)
    l->light_until_ns = now_ns + DEV_LANES_HOLD_NS;
  return lane->lone;
}

void dev_lanes_push(dev_lanes *l, dev_task *t) {
  dev_lane *lane = &l->lane[t->lane];
  t->overflow_next = NULL;
  if (lane->tail)
    lane->tail->overflow_next = t;
  else
    lane->head = t;
  lane->tail = t;
  l->waiting++;
}

dev_task *dev_lanes_pop(dev_lanes *l) {
  if (l->waiting == 0)
    return NULL;
  for (uint32_t k = 0; k < DEV_LANES_MAX; k++) {
    dev_lane *lane = &l->lane[(l->next + k) % DEV_LANES_MAX];
    dev_task *t = lane->head;
    if (t == NULL)
      continue;
    lane->head = t->overflow_next;
    if (lane->head == NULL)
      lane->tail = NULL;
    l->waiting--;
    l->next = (l->next + k + 1) % DEV_LANES_MAX; /* the next lane goes first next time */
    return t;
  }
  return NULL;
}
