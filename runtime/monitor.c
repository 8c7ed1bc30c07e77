/* Monitors (runtime.h: accel_monitor): any actor may watch any other incarnation on its
 * runtime and is sent a DOWN when it ends, with the reason. The records hang on the watched
 * cell (loop thread only, as every cell field): it fires them as it terminates, whatever
 * ended it (a stop, a failure before a restart, its parent's or the runtime's stop). */
#include "runtime/alloc.h"
#include "runtime/rt.h"

struct rt_monitor {
  accel_ref watcher;
  uint64_t id;
  rt_monitor *next;
};

int accel_monitor(accel_actor *self, accel_ref target, uint64_t *id) {
  if (self == NULL || id == NULL || self->status != RT_RUNNING)
    return ACCEL_EINVAL;
  accel_actor *cell = rt_resolve_local(self->rt, target);
  if (cell == NULL || cell->status != RT_RUNNING)
    return ACCEL_ESTALE; /* already gone: no DOWN will come */
  rt_monitor *m = rt_malloc(sizeof *m);
  if (m == NULL)
    return ACCEL_ENOMEM;
  *m =
      (rt_monitor){.watcher = self->ref, .id = ++self->rt->next_monitor_id, .next = cell->monitors};
  cell->monitors = m;
  *id = m->id;
  return 0;
}

int accel_demonitor(accel_actor *self, accel_ref target, uint64_t id) {
  if (self == NULL)
    return ACCEL_EINVAL;
  accel_actor *cell = rt_resolve_local(self->rt, target);
  for (rt_monitor **link = cell ? &cell->monitors : NULL; link && *link; link = &(*link)->next) {
    rt_monitor *m = *link;
    if (m->id == id && m->watcher.slot == self->ref.slot && m->watcher.gen == self->ref.gen) {
      *link = m->next;
      rt_free(m);
      return 0;
    }
  }
  return ACCEL_ENOENT; /* not this actor's, or fired already (its DOWN may be queued) */
}

/* As the DOWN's sender, the actor that ended (a watcher matches it against its refs). A full
 * mailbox delays the DOWN; a watcher gone, or a runtime closing, takes none. */
void rt_monitors_fire(accel_actor *cell, int reason) {
  accel_runtime *rt = cell->rt;
  while (cell->monitors) {
    rt_monitor *m = cell->monitors;
    cell->monitors = m->next;
    accel_msg down = {
        .type = ACCEL_MSG_DOWN, .flags = (uint32_t)reason, .arg = m->id, .sender = cell->ref};
    if (rt_send_as(rt, m->watcher, &down) == ACCEL_EBUSY)
      rt_retry_send_as(rt, m->watcher, &down);
    rt_free(m);
  }
}
