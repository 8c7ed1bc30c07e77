/* Walking the supervision tree (for `accelctl tree` and status). */
#include "runtime/rt.h"

typedef void (*visit_fn)(const accel_actor_view *v, void *arg);

static uint32_t mailbox_used(accel_actor *cell) {
  return rt_mailbox_used(&cell->mailbox);
}

/* `here`: the tree is this thread's loop's (mailboxes are read only there: their rings are
 * freed by their own loop). */
static void visit_children(accel_actor *owner, uint32_t depth, bool here, visit_fn visit,
                           void *arg) {
  RT_LIST_FOR_EACH(rt_child, spec, &owner->children, link) {
    accel_actor *cell = spec->cell;
    accel_actor_view v = {
        .name = spec->name,
        .ref = cell ? cell->ref : ACCEL_REF_NONE,
        .depth = depth,
        .state = cell ? "running" : "restarting",
        .restarts = spec->restarts_in_window,
        .restarts_total = spec->restarts_total,
        .mailbox_used = cell && here ? mailbox_used(cell) : 0,
    };
    visit(&v, arg);
    if (cell)
      visit_children(cell, depth + 1, here, visit, arg);
  }
}

/* Every loop's tree under one root (loop 0's): the other loops' roots are not shown, their
 * children are. Another loop's tree is read under its tree_mu. */
int accel_runtime_walk(accel_runtime *rt, visit_fn visit, void *arg) {
  if (rt == NULL || visit == NULL)
    return ACCEL_EINVAL;
  rt_loop *here = rt_here(rt);
  if (here == NULL || here->root == NULL)
    return ACCEL_EDEADLK;
  rt_loop *first = &rt->loops[0];
  accel_actor_view root = {.name = "root", .ref = rt->root_ref, .state = "running"};
  if (first == here)
    root.mailbox_used = mailbox_used(first->root);
  visit(&root, arg);
  for (uint32_t i = 0; i < rt->n_loops; i++) {
    rt_loop *l = &rt->loops[i];
    if (l != here)
      pthread_mutex_lock(&l->tree_mu);
    if (l->root != NULL)
      visit_children(l->root, 1, l == here, visit, arg);
    if (l != here)
      pthread_mutex_unlock(&l->tree_mu);
  }
  return 0;
}

uv_loop_t *rt_uv_loop(accel_runtime *rt) {
  rt_loop *l = rt_here(rt);
  return l ? &l->loop : &rt->loops[0].loop;
}

uint32_t rt_loop_index(accel_runtime *rt) {
  rt_loop *l = rt_here(rt);
  return l ? l->index : 0;
}
