/* Walking the supervision tree (for `accelctl tree` and status). */
#include "runtime/rt.h"

typedef void (*visit_fn)(const accel_actor_view *v, void *arg);

static uint32_t mailbox_used(accel_actor *cell) {
  return rt_mailbox_used(&cell->mailbox);
}

static void visit_children(accel_actor *owner, uint32_t depth, visit_fn visit, void *arg) {
  RT_LIST_FOR_EACH(rt_child, spec, &owner->children, link) {
    accel_actor *cell = spec->cell;
    accel_actor_view v = {
        .name = spec->name,
        .ref = cell ? cell->ref : ACCEL_REF_NONE,
        .depth = depth,
        .state = cell ? "running" : "restarting",
        .restarts = spec->restarts_in_window,
        .restarts_total = spec->restarts_total,
        .mailbox_used = cell ? mailbox_used(cell) : 0,
    };
    visit(&v, arg);
    if (cell)
      visit_children(cell, depth + 1, visit, arg);
  }
}

int accel_runtime_walk(accel_runtime *rt, visit_fn visit, void *arg) {
  if (rt == NULL || visit == NULL)
    return ACCEL_EINVAL;
  if (rt_tls_loop != rt || rt->root == NULL)
    return ACCEL_EDEADLK;
  accel_actor_view root = {.name = "root",
                           .ref = rt->root->ref,
                           .state = "running",
                           .mailbox_used = mailbox_used(rt->root)};
  visit(&root, arg);
  visit_children(rt->root, 1, visit, arg);
  return 0;
}

uv_loop_t *rt_uv_loop(accel_runtime *rt) {
  return &rt->loop;
}
