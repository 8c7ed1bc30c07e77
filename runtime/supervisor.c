/* Supervision: what a parent does when a child fails.
 *
 * A failure (receive or start returned < 0) ends the child's incarnation at once. Its parent
 * counts the restart in the child's intensity window (R restarts within T ms since the first
 * restart of the window). Within the limit, the strategy picks the children to restart, they
 * are stopped now (reverse start order) and started again, in start order, after the backoff
 * delay (initial * 2^(n-1), capped). Past the limit the child is stopped for good; then the
 * parent either fails itself (escalation) or is only told (child_exit). */
#include <stdlib.h>
#include <string.h>

#include "runtime/alloc.h"
#include "runtime/rt.h"

void rt_supervision_defaults(accel_supervision *s, const accel_supervision *given) {
  static const accel_supervision none;
  *s = given ? *given : none;
  if (s->max_restarts == 0)
    s->max_restarts = 3;
  if (s->within_ms == 0)
    s->within_ms = 5000;
  if (s->backoff_max_ms == 0)
    s->backoff_max_ms = 1000;
}

/* ---- child records ---- */

rt_child *rt_child_create(accel_actor *owner, const accel_behavior *b, void *arg,
                          const accel_spawn_opts *opts) {
  rt_child *spec = rt_calloc(1, sizeof *spec);
  if (spec == NULL)
    return NULL;
  const char *name = opts && opts->name ? opts->name : b->name ? b->name : "actor";
  spec->name = rt_strdup(name);
  if (spec->name == NULL) {
    rt_free(spec);
    return NULL;
  }
  spec->owner = owner;
  spec->b = b;
  spec->arg = arg;
  spec->mailbox_capacity = opts && opts->mailbox_capacity ? opts->mailbox_capacity : 1024;
  spec->throughput = opts && opts->throughput ? opts->throughput : 64;
  spec->stays = opts && opts->loop != 0;
  rt_supervision_defaults(&spec->supervision, opts ? opts->supervision : NULL);
  pthread_mutex_lock(&owner->home->tree_mu);
  rt_list_push_back(&owner->children, &spec->link);
  pthread_mutex_unlock(&owner->home->tree_mu);
  return spec;
}

static void free_timer(uv_handle_t *h) {
  rt_free(h);
}

static void cancel_backoff(rt_child *spec) {
  if (spec->backoff) {
    uv_close((uv_handle_t *)spec->backoff, free_timer);
    spec->backoff = NULL;
  }
}

void rt_child_free(rt_child *spec) {
  pthread_mutex_t *tree_mu = &spec->owner->home->tree_mu;
  pthread_mutex_lock(tree_mu);
  rt_list_remove(&spec->link);
  pthread_mutex_unlock(tree_mu);
  cancel_backoff(spec);
  rt_free(spec->name);
  rt_free(spec);
}

void rt_children_stop_all(accel_actor *owner) {
  while (!rt_list_empty(&owner->children)) {
    rt_child *spec = RT_LIST_LAST(&owner->children, rt_child, link);
    if (spec->cell)
      rt_cell_terminate(spec->cell, ACCEL_ECLOSED); /* its parent stops */
    rt_child_free(spec);
  }
}

static void notify_child_exit(accel_actor *owner, accel_ref child, int reason) {
  if (owner->status != RT_RUNNING || owner->b->child_exit == NULL)
    return;
  accel_actor *prev = rt_tls_actor;
  rt_tls_actor = owner;
  owner->b->child_exit(owner, owner->state, child, reason);
  rt_tls_actor = prev;
}

/* Stops a child for good and tells its parent. */
void rt_child_stop(rt_child *spec, int reason) {
  accel_actor *owner = spec->owner;
  accel_ref ref = spec->cell ? spec->cell->ref : ACCEL_REF_NONE;
  if (spec->cell)
    rt_cell_terminate(spec->cell, reason);
  rt_child_free(spec);
  notify_child_exit(owner, ref, reason);
}

/* ---- failure handling ---- */

static void supervise(rt_child *spec, int reason);

static bool over_limit(rt_child *spec, const accel_supervision *sup) {
  uint64_t now = uv_hrtime() / 1000000;
  pthread_mutex_lock(&spec->owner->home->tree_mu); /* the counts are read by walks */
  if (spec->restarts_in_window == 0 || now - spec->window_start_ms > sup->within_ms) {
    spec->window_start_ms = now;
    spec->restarts_in_window = 0;
  }
  spec->restarts_in_window++;
  pthread_mutex_unlock(&spec->owner->home->tree_mu);
  return spec->restarts_in_window > sup->max_restarts;
}

static uint64_t backoff_delay(rt_child *spec, const accel_supervision *sup) {
  uint64_t delay = sup->backoff_initial_ms;
  for (uint32_t i = 1; i < spec->restarts_in_window && delay < sup->backoff_max_ms; i++)
    delay *= 2;
  return delay < sup->backoff_max_ms ? delay : sup->backoff_max_ms;
}

static void limit_reached(rt_child *spec, int reason) {
  accel_actor *owner = spec->owner;
  accel_runtime *rt = owner->rt;
  bool escalate = owner->supervision.on_limit == ACCEL_LIMIT_ESCALATE && owner->spec != NULL;
  RT_LOG(ACCEL_LOG_ERROR, "actor '%s' exceeded %u restarts in %u ms: stopped%s", spec->name,
         owner->supervision.max_restarts, owner->supervision.within_ms,
         escalate ? "; escalating" : "");
  rt_child_stop(spec, reason);
  if (!escalate)
    return;
  atomic_fetch_add(&rt->stats.escalations, 1);
  rt_supervise_failure(owner, ACCEL_ELIMIT);
}

/* Ends the incarnations the strategy picks (reverse start order) and marks them for restart. */
static void stop_for_restart(rt_child *spec, int reason) {
  accel_actor *owner = spec->owner;
  rt_list *all = &owner->children;
  rt_child *first = spec, *last = spec;
  if (owner->supervision.strategy == ACCEL_ONE_FOR_ALL)
    first = RT_LIST_FIRST(all, rt_child, link);
  if (owner->supervision.strategy != ACCEL_ONE_FOR_ONE)
    last = RT_LIST_LAST(all, rt_child, link);
  for (rt_child *s = last;; s = RT_LIST_PREV(s, all, rt_child, link)) {
    s->awaiting_restart = true;
    s->restart_leader = spec;
    s->last_reason = reason;
    accel_actor *cell = s->cell;
    if (cell && cell->state && cell->b->pre_restart) {
      accel_actor *prev = rt_tls_actor;
      rt_tls_actor = cell;
      cell->b->pre_restart(cell, cell->state, reason);
      rt_tls_actor = prev;
    }
    if (cell) /* the failed one with its failure; the others the strategy takes along */
      rt_cell_terminate(cell, s == spec ? reason : ACCEL_ECLOSED);
    if (s == first)
      break;
  }
}

static void restart_one(rt_child *spec) {
  accel_runtime *rt = spec->owner->rt;
  spec->awaiting_restart = false;
  int rc = rt_child_respawn(spec);
  if (rc != 0) {
    atomic_fetch_add(&rt->stats.failures, 1);
    supervise(spec, rc);
    return;
  }
  atomic_fetch_add(&rt->stats.restarts, 1);
  pthread_mutex_lock(&spec->owner->home->tree_mu);
  spec->restarts_total++;
  pthread_mutex_unlock(&spec->owner->home->tree_mu);
  accel_actor *cell = spec->cell;
  RT_LOG(ACCEL_LOG_INFO, "actor '%s' restarted as {%u,%u}", spec->name, cell->ref.slot,
         cell->ref.gen);
  if (cell->b->post_restart) {
    accel_actor *prev = rt_tls_actor;
    rt_tls_actor = cell;
    cell->b->post_restart(cell, cell->state, spec->last_reason);
    rt_tls_actor = prev;
  }
}

/* Restarts, in start order, the children that wait for `leader`'s backoff. One at a time,
 * searching again each time: a restart may fail and change the list (or end the owner).
 * `leader` is only compared, never dereferenced: it may have been freed meanwhile. */
static void restart_group(accel_actor *owner, const rt_child *leader) {
  for (;;) {
    if (owner->status != RT_RUNNING)
      return;
    rt_child *s = RT_LIST_FIRST(&owner->children, rt_child, link);
    while (s && !(s->awaiting_restart && s->restart_leader == leader))
      s = RT_LIST_NEXT(s, &owner->children, rt_child, link);
    if (s == NULL)
      return;
    restart_one(s);
  }
}

static void on_backoff(uv_timer_t *t) {
  rt_child *spec = t->data;
  accel_actor *owner = spec->owner;
  cancel_backoff(spec);
  restart_group(owner, spec);
}

static int arm_backoff(rt_child *spec, uint64_t delay) {
  if (spec->backoff == NULL) {
    uv_timer_t *t = rt_malloc(sizeof *t);
    if (t == NULL)
      return ACCEL_ENOMEM;
    if (uv_timer_init(&spec->owner->home->loop, t) != 0) {
      rt_free(t); /* not a handle of the loop yet: no close needed */
      return ACCEL_ESYS;
    }
    t->data = spec;
    spec->backoff = t;
  }
  return uv_timer_start(spec->backoff, on_backoff, delay, 0) == 0 ? 0 : ACCEL_ESYS;
}

static void schedule_restart(rt_child *spec) {
  uint64_t delay = backoff_delay(spec, &spec->owner->supervision);
  if (arm_backoff(spec, delay) != 0) {
    RT_LOG(ACCEL_LOG_WARN, "actor '%s': no backoff timer: restarting now", spec->name);
    cancel_backoff(spec);
    restart_group(spec->owner, spec); /* restart now rather than never */
  }
}

static void supervise(rt_child *spec, int reason) {
  if (over_limit(spec, &spec->owner->supervision)) {
    limit_reached(spec, reason);
    return;
  }
  stop_for_restart(spec, reason);
  schedule_restart(spec);
}

void rt_supervise_failure(accel_actor *cell, int reason) {
  accel_runtime *rt = cell->rt;
  if (cell->status != RT_RUNNING)
    return;
  cell->status = RT_FAILED;
  atomic_fetch_add(&rt->stats.failures, 1);
  RT_LOG(ACCEL_LOG_WARN, "actor '%s' {%u,%u} failed: %s", accel_actor_name(cell), cell->ref.slot,
         cell->ref.gen, accel_err_name(reason));
  if (cell->spec == NULL)
    return; /* the root does not fail */
  supervise(cell->spec, reason);
}
