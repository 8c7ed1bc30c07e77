/* Fair turns on a device queue (lanes.h). */
#include "actors/lanes.h"

#include <stddef.h>

#define SHARED (DEV_LANES_MAX - 1) /* the sessions past the table's size, together */

/* A lane for `owner`: its own, else a free one, else the shared one. While the shared lane
 * holds work, no owner gets a lane of its own: one of its tasks may be in the shared lane, and
 * a lane of its own could run a later task first. */
static uint32_t lane_for(dev_lanes *l, const void *owner) {
  uint32_t free_lane = SHARED;
  for (uint32_t i = 0; i < SHARED; i++) {
    const dev_lane *lane = &l->lane[i];
    if (lane->active > 0 && lane->owner == owner)
      return i;
    if (free_lane == SHARED && lane->active == 0)
      free_lane = i;
  }
  if (l->lane[SHARED].active > 0)
    return SHARED;
  l->lane[free_lane].owner = owner;
  return free_lane;
}

void dev_lanes_enter(dev_lanes *l, dev_task *t) {
  t->lane = (uint8_t)lane_for(l, t->acct);
  if (l->lane[t->lane].active++ == 0)
    l->nlanes++;
}

void dev_lanes_leave(dev_lanes *l, const dev_task *t) {
  dev_lane *lane = &l->lane[t->lane];
  if (lane->active == 0)
    return; /* a guard: a task leaves once */
  if (--lane->active == 0)
    l->nlanes--;
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
