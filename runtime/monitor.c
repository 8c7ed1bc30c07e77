/* Monitors and links (runtime.h: accel_monitor, accel_link): any actor may watch any other
 * incarnation on its runtime and is sent a DOWN when it ends, with the reason; two linked
 * incarnations fail together (a failure of one is an EXIT that the other's next turn turns
 * into its own failure, with the same reason). The records hang on the watched cell (loop
 * thread only, as every cell field): it fires them as it terminates, whatever ended it (a
 * stop, a failure before a restart, its parent's or the runtime's stop). A link is a record
 * on each side. */
#include "runtime/alloc.h"
#include "runtime/rt.h"

struct rt_monitor {
  accel_ref watcher;
  uint64_t id; /* 0 for a link */
  rt_monitor *next;
};

static int add_record(accel_actor *cell, accel_ref watcher, uint64_t id) {
  rt_monitor *m = rt_malloc(sizeof *m);
  if (m == NULL)
    return ACCEL_ENOMEM;
  *m = (rt_monitor){.watcher = watcher, .id = id, .next = cell->monitors};
  cell->monitors = m;
  return 0;
}

/* Removes watcher's record `id` from cell; false if there is none. */
static bool remove_record(accel_actor *cell, accel_ref watcher, uint64_t id) {
  for (rt_monitor **link = &cell->monitors; *link; link = &(*link)->next) {
    rt_monitor *m = *link;
    if (m->id == id && m->watcher.slot == watcher.slot && m->watcher.gen == watcher.gen) {
      *link = m->next;
      rt_free(m);
      return true;
    }
  }
  return false;
}

static accel_actor *running(accel_runtime *rt, accel_ref ref) {
  accel_actor *cell = rt_resolve_local(rt, ref);
  return cell != NULL && cell->status == RT_RUNNING ? cell : NULL;
}

int accel_monitor(accel_actor *self, accel_ref target, uint64_t *id) {
  if (self == NULL || id == NULL || self->status != RT_RUNNING)
    return ACCEL_EINVAL;
  accel_actor *cell = running(self->rt, target);
  if (cell == NULL)
    return ACCEL_ESTALE; /* already gone: no DOWN will come */
  uint64_t next = self->rt->next_monitor_id + 1;
  int rc = add_record(cell, self->ref, next);
  if (rc == 0)
    *id = self->rt->next_monitor_id = next;
  return rc;
}

int accel_demonitor(accel_actor *self, accel_ref target, uint64_t id) {
  if (self == NULL)
    return ACCEL_EINVAL;
  accel_actor *cell = rt_resolve_local(self->rt, target);
  if (id != 0 && cell != NULL && remove_record(cell, self->ref, id))
    return 0;
  return ACCEL_ENOENT; /* not this actor's, or fired already (its DOWN may be queued) */
}

int accel_link(accel_actor *self, accel_ref other) {
  if (self == NULL || self->status != RT_RUNNING)
    return ACCEL_EINVAL;
  accel_actor *cell = running(self->rt, other);
  if (cell == NULL)
    return ACCEL_ESTALE;
  if (cell == self)
    return ACCEL_EINVAL;
  int rc = add_record(cell, self->ref, 0);
  if (rc == 0 && (rc = add_record(self, other, 0)) != 0)
    remove_record(cell, self->ref, 0);
  return rc;
}

int accel_unlink(accel_actor *self, accel_ref other) {
  if (self == NULL)
    return ACCEL_EINVAL;
  accel_actor *cell = rt_resolve_local(self->rt, other);
  bool mine = remove_record(self, other, 0);
  bool theirs = cell != NULL && remove_record(cell, self->ref, 0);
  return mine || theirs ? 0 : ACCEL_ENOENT;
}

/* cell ended: its link to m->watcher goes from both sides, and if cell failed the partner
 * fails in its next turn with the same reason (a stop, or one that came from above, takes
 * nothing along). */
static void fire_link(accel_actor *cell, const rt_monitor *m, int reason) {
  accel_runtime *rt = cell->rt;
  accel_actor *partner = rt_resolve_local(rt, m->watcher);
  if (partner != NULL)
    remove_record(partner, cell->ref, 0);
  if (reason >= 0 || reason == ACCEL_ECLOSED)
    return;
  accel_msg exit_msg = {.type = ACCEL_MSG_EXIT, .flags = (uint32_t)reason, .sender = cell->ref};
  if (rt_send_later(rt_send_as(rt, m->watcher, &exit_msg)))
    rt_retry_send_as(rt, m->watcher, &exit_msg);
}

/* As the DOWN's sender, the actor that ended (a watcher matches it against its refs). A full
 * mailbox delays the DOWN; a watcher gone, or a runtime closing, takes none. */
static void fire_monitor(accel_actor *cell, const rt_monitor *m, int reason) {
  accel_msg down = {
      .type = ACCEL_MSG_DOWN, .flags = (uint32_t)reason, .arg = m->id, .sender = cell->ref};
  if (rt_send_later(rt_send_as(cell->rt, m->watcher, &down)))
    rt_retry_send_as(cell->rt, m->watcher, &down);
}

void rt_monitors_fire(accel_actor *cell, int reason) {
  while (cell->monitors) {
    rt_monitor *m = cell->monitors;
    cell->monitors = m->next;
    if (m->id == 0)
      fire_link(cell, m, reason);
    else
      fire_monitor(cell, m, reason);
    rt_free(m);
  }
}
