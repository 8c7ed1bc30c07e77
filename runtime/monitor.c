/* Monitors and links (runtime.h: accel_monitor, accel_link): any actor may watch any other
 * incarnation on its runtime and is sent a DOWN when it ends, with the reason; two linked
 * incarnations fail together (a failure of one is an EXIT that the other's next turn turns
 * into its own failure, with the same reason). The records hang on the watched cell, under
 * its spin lock (watchers may live on other loops; they pin the cell's slot while they touch
 * it): it fires them as it terminates, whatever ended it (a stop, a failure before a restart,
 * its parent's or the runtime's stop). A link is a record on each side. */
#include "runtime/alloc.h"
#include "runtime/rt.h"

struct rt_monitor {
  accel_ref watcher;
  uint64_t id; /* 0 for a link */
  rt_monitor *next;
};

static void lock(accel_actor *cell) {
  while (atomic_flag_test_and_set_explicit(&cell->monitors_lock, memory_order_acquire))
    rt_cpu_relax();
}

static void unlock(accel_actor *cell) {
  atomic_flag_clear_explicit(&cell->monitors_lock, memory_order_release);
}

/* ACCEL_ESTALE once the incarnation has ended (its watchers were told, or are being told). */
static int add_record(accel_actor *cell, accel_ref watcher, uint64_t id) {
  rt_monitor *m = rt_malloc(sizeof *m);
  if (m == NULL)
    return ACCEL_ENOMEM;
  lock(cell);
  bool closed = cell->monitors_closed;
  if (!closed) {
    *m = (rt_monitor){.watcher = watcher, .id = id, .next = cell->monitors};
    cell->monitors = m;
  }
  unlock(cell);
  if (closed)
    rt_free(m);
  return closed ? ACCEL_ESTALE : 0;
}

static bool remove_record(accel_actor *cell, accel_ref watcher, uint64_t id) {
  rt_monitor *found = NULL;
  lock(cell);
  for (rt_monitor **link = &cell->monitors; *link; link = &(*link)->next) {
    rt_monitor *m = *link;
    if (m->id == id && m->watcher.slot == watcher.slot && m->watcher.gen == watcher.gen) {
      *link = m->next;
      found = m;
      break;
    }
  }
  unlock(cell);
  rt_free(found);
  return found != NULL;
}

int accel_monitor(accel_actor *self, accel_ref target, uint64_t *id) {
  if (self == NULL || id == NULL || self->status != RT_RUNNING)
    return ACCEL_EINVAL;
  accel_actor *cell = rt_cell_pin(self->rt, target);
  if (cell == NULL)
    return ACCEL_ESTALE; /* already gone: no DOWN will come */
  uint64_t next = self->home->next_monitor_id + 1;
  int rc = add_record(cell, self->ref, next);
  rt_cell_unpin(cell);
  if (rc == 0)
    *id = self->home->next_monitor_id = next;
  return rc;
}

int accel_demonitor(accel_actor *self, accel_ref target, uint64_t id) {
  if (self == NULL)
    return ACCEL_EINVAL;
  accel_actor *cell = id != 0 ? rt_cell_pin(self->rt, target) : NULL;
  bool removed = cell != NULL && remove_record(cell, self->ref, id);
  if (cell)
    rt_cell_unpin(cell);
  return removed ? 0 : ACCEL_ENOENT; /* not this actor's, or fired already (DOWN may be queued) */
}

int accel_link(accel_actor *self, accel_ref other) {
  if (self == NULL || self->status != RT_RUNNING)
    return ACCEL_EINVAL;
  accel_actor *cell = rt_cell_pin(self->rt, other);
  if (cell == NULL)
    return ACCEL_ESTALE;
  int rc = cell == self ? ACCEL_EINVAL : add_record(cell, self->ref, 0);
  if (rc == 0 && (rc = add_record(self, other, 0)) != 0)
    remove_record(cell, self->ref, 0);
  rt_cell_unpin(cell);
  return rc;
}

int accel_unlink(accel_actor *self, accel_ref other) {
  if (self == NULL)
    return ACCEL_EINVAL;
  bool mine = remove_record(self, other, 0);
  accel_actor *cell = rt_cell_pin(self->rt, other);
  bool theirs = cell != NULL && remove_record(cell, self->ref, 0);
  if (cell)
    rt_cell_unpin(cell);
  return mine || theirs ? 0 : ACCEL_ENOENT;
}

static void fire_link(accel_actor *cell, const rt_monitor *m, int reason) {
  accel_runtime *rt = cell->rt;
  accel_actor *partner = rt_cell_pin(rt, m->watcher);
  if (partner != NULL) {
    remove_record(partner, cell->ref, 0);
    rt_cell_unpin(partner);
  }
  if (reason >= 0 || reason == ACCEL_ECLOSED)
    return;
  accel_msg exit_msg = {.type = ACCEL_MSG_EXIT, .flags = (uint32_t)reason, .sender = cell->ref};
  if (rt_send_later(rt_send_as(rt, m->watcher, &exit_msg)))
    rt_retry_send_as(rt, m->watcher, &exit_msg);
}

static void fire_monitor(accel_actor *cell, const rt_monitor *m, int reason) {
  accel_msg down = {
      .type = ACCEL_MSG_DOWN, .flags = (uint32_t)reason, .arg = m->id, .sender = cell->ref};
  if (rt_send_later(rt_send_as(cell->rt, m->watcher, &down)))
    rt_retry_send_as(cell->rt, m->watcher, &down);
}

/* On the cell's loop, as it ends: no record is added after this (add_record sees closed). */
void rt_monitors_fire(accel_actor *cell, int reason) {
  lock(cell);
  cell->monitors_closed = true;
  rt_monitor *list = cell->monitors;
  cell->monitors = NULL;
  unlock(cell);
  while (list) {
    rt_monitor *m = list;
    list = m->next;
    if (m->id == 0)
      fire_link(cell, m, reason);
    else
      fire_monitor(cell, m, reason);
    rt_free(m);
  }
}
