/* DeviceActor: one per memory node (the host, each device). It opens the device, starts the
 * kernel actors, and fails on a sticky device fault; its supervisor then restarts it: the
 * kernel actors end (their in-flight tasks complete with ACCEL_EDEVLOST), the node's replicas
 * are dropped (buffers with no other valid copy become lost), the device is closed and opened
 * again in a new incarnation (generation bumped). Past the restart limit the device is
 * quarantined and the others keep serving. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "actors/device.h"
#include "actors/module.h"
#include "runtime/deadline.h"
#include "runtime/status.h"

static const char *const kernel_names[DEV_Q_COUNT] = {"mem", "blas", "rng", "nn", "mod", "coll"};

typedef struct device_state {
  dev_node *node;
} device_state;

static int open_device(dev_node *node) {
  be_open_opts opts = {.fault_injection = node->world->fault_injection,
                       .tf32 = node->world->tf32,
                       .primary_context = node->world->cuda_primary,
                       .pinned_max = node->world->pinned_max,
                       .worker_link = node->world->worker_link};
  int rc = node->be->open(node->backend_index, &opts, &node->dev);
  if (rc != 0)
    return rc;
  if (node->info.name[0] == '\0') { /* once: clients read them without locks */
    dev_caps_read(node);
    node->be->info(node->dev, &node->info);
  }
  return 0;
}

static int device_start(accel_actor *self, void *state, void *arg) {
  device_state *d = state;
  dev_node *node = arg;
  d->node = node;
  pthread_mutex_lock(&node->build_mu); /* builds read both */
  node->generation++;
  dev_blocking_begin(); /* opening a device blocks: the loop waits for it by design */
  int rc = open_device(node);
  dev_blocking_end();
  pthread_mutex_unlock(&node->build_mu);
  if (rc != 0)
    return rc;
  for (int q = 0; q < DEV_Q_COUNT; q++) {
    if ((q == DEV_Q_MOD && node->be->module == NULL) ||
        (q == DEV_Q_COLL && node->be->collective == NULL))
      continue; /* no such package on this backend: no queue (a CPU queue is a thread) */
    node->kernel_args[q] = (struct dev_kernel_spawn){node, (dev_queue_class)q};
    accel_spawn_opts o = {.name = kernel_names[q], .mailbox_capacity = 1 << 14};
    rc = accel_spawn(accel_actor_runtime(self), self, &dev_kernel_behavior, &node->kernel_args[q],
                     &o, NULL);
    if (rc != 0)
      return rc;
  }
  node->actor = accel_self(self);
  __atomic_store_n(&node->state, DEV_NODE_SERVING, __ATOMIC_RELAXED);
  return 0;
}

#define ABORTED_BUILD_WAIT_MS 2000

/* Builds in progress on the device finish before it closes (seconds at most), except after an
 * abort, where a load may wait behind the abandoned kernel for good: then the device closes
 * after a short wait, the backend keeping what such a build still uses. build_mu held. */
static void wait_for_builds(dev_node *node) {
  struct timespec until = rt_deadline_after(ABORTED_BUILD_WAIT_MS);
  while (node->builds > 0) {
    if (!node->aborted) {
      pthread_cond_wait(&node->build_cv, &node->build_mu);
    } else if (pthread_cond_timedwait(&node->build_cv, &node->build_mu, &until) != 0) {
      accel_log(ACCEL_LOG_WARN, "device",
                "device %d: %u module build(s) still waiting behind the abandoned work: "
                "closing without them",
                node->device, node->builds);
      return;
    }
  }
}

#define FOREIGN_WAIT_MS 5000

/* Waits until the work behind `ev` (on `user`'s queue) has passed, or `until` (ms). */
static bool wait_event(dev_node *user, be_event *ev, uint64_t until) {
  while (user->be->event_query(ev) == RT_PENDING) {
    if (rt_mono_ms() >= until)
      return false;
    nanosleep(&(struct timespec){0, 100000}, NULL);
  }
  return true;
}

/* Other devices' queues may still be using this node's memory (a peer copy from it, a
 * collective over it, or such work whose task failed first: foreign_left): it must not be
 * freed under them. Their work ends on its own (a copy, a collective of serving devices); a
 * wait past FOREIGN_WAIT_MS (a collective whose other device hangs) is given up with a
 * warning. The loop waits here by design, as for the close. */
static void wait_for_foreign_users(dev_node *node) {
  dev_world *w = node->world;
  uint64_t until = rt_mono_ms() + FOREIGN_WAIT_MS;
  uint32_t bit = 1u << node->index;
  bool ok = true;
  RT_LIST_FOR_EACH(dev_task, t, &w->foreign, foreign_link) {
    if (ok && (t->foreign_mask & bit))
      ok = wait_event(t->node, t->foreign_ev, until);
  }
  RT_LIST_FOR_EACH(dev_foreign_left, l, &w->foreign_left, link) {
    if (ok && (l->mask & bit))
      ok = wait_event(l->node, l->ev, until);
  }
  if (!ok)
    accel_log(ACCEL_LOG_WARN, "device",
              "device %d: another device still uses its memory after %d ms: freeing it anyway",
              node->device, FOREIGN_WAIT_MS);
  dev_foreign_left_sweep(w, false);
}

static void device_stop(accel_actor *self, void *state) {
  device_state *d = state;
  dev_node *node = d->node;
  if (node == NULL)
    return;
  /* The kernel actors (children) have ended already; their queues are gone. */
  dev_overflow_fail(node);
  if (node->state == DEV_NODE_SERVING)
    __atomic_store_n(&node->state, DEV_NODE_RESTARTING, __ATOMIC_RELAXED);
  if (node->dev) {
    dev_blocking_begin(); /* closing a device blocks: the loop waits for it by design */
    wait_for_foreign_users(node);
    dev_buffer_drop_node(node->world, node);
    pthread_mutex_lock(&node->build_mu);
    wait_for_builds(node); /* memory jobs too (mem_cache.c) */
    dev_mem_cache_close(node);
    dev_modules_drop_node(node->world, node);
    node->be->close(node->dev);
    node->dev = NULL;
    node->aborted = false;
    pthread_mutex_unlock(&node->build_mu);
    dev_blocking_end();
  }
}

static void device_pre_restart(accel_actor *self, void *state, int reason) {
  device_state *d = state;
  __atomic_store_n(&d->node->state, DEV_NODE_RESTARTING, __ATOMIC_RELAXED);
  accel_log(ACCEL_LOG_WARN, "device", "device %d (%s) lost (%s): restarting", d->node->device,
            d->node->info.name, accel_err_name(reason));
}

static void device_post_restart(accel_actor *self, void *state, int reason) {
  device_state *d = state;
  __atomic_store_n(&d->node->restarts, d->node->restarts + 1, __ATOMIC_RELAXED);
}

static int device_receive(accel_actor *self, void *state, accel_msg *msg) {
  device_state *d = state;
  switch (msg->type) {
  case DEV_MSG_FAULT:
    if (msg->arg != d->node->generation)
      return 0;            /* about an earlier incarnation: already handled */
    return ACCEL_EDEVLOST; /* fail: the supervisor restarts the device */
  case DEV_MSG_INJECT_FAULT: {
    int rc = d->node->be->inject_fault(d->node->dev);
    accel_reply(msg, rc, NULL, NULL);
    return rc == 0 ? ACCEL_EDEVLOST : 0;
  }
  default:
    return 0;
  }
}

const accel_behavior dev_device_behavior = {
    .name = "device",
    .state_size = sizeof(device_state),
    .start = device_start,
    .receive = device_receive,
    .stop = device_stop,
    .pre_restart = device_pre_restart,
    .post_restart = device_post_restart,
};

/* ---- the device supervisor ---- */

typedef struct supervisor_state {
  dev_world *world;
} supervisor_state;

static int supervisor_start(accel_actor *self, void *state, void *arg) {
  supervisor_state *s = state;
  s->world = arg;
  for (int n = 0; n < s->world->nnodes; n++) {
    dev_node *node = &s->world->nodes[n];
    char name[32];
    if (n == DEV_HOST_NODE)
      snprintf(name, sizeof name, "host");
    else
      snprintf(name, sizeof name, "device%d", node->device);
    accel_spawn_opts o = {.name = name};
    int rc = accel_spawn(accel_actor_runtime(self), self, &dev_device_behavior, node, &o, NULL);
    if (rc == ACCEL_ENOMEM)
      return rc; /* the host is out of memory, the device is not at fault: nothing starts */
    if (rc != 0) {
      accel_log(ACCEL_LOG_ERROR, "device", "device %s did not start: %s", name, accel_strerror(rc));
      __atomic_store_n(&node->state, DEV_NODE_QUARANTINED, __ATOMIC_RELAXED);
    }
  }
  return 0;
}

static void supervisor_child_exit(accel_actor *self, void *state, accel_ref child, int reason) {
  supervisor_state *s = state;
  for (int n = 0; n < s->world->nnodes; n++) {
    dev_node *node = &s->world->nodes[n];
    if (node->actor.slot == child.slot && node->actor.gen == child.gen) {
      __atomic_store_n(&node->state, DEV_NODE_QUARANTINED, __ATOMIC_RELAXED);
      accel_log(ACCEL_LOG_ERROR, "device", "device %d (%s) quarantined after %u restarts",
                node->device, node->info.name, node->restarts);
      if (s->world->on_quarantine)
        s->world->on_quarantine(s->world->on_quarantine_arg, node->device);
    }
  }
}

static int supervisor_receive(accel_actor *self, void *state, accel_msg *msg) {
  return 0;
}

const accel_behavior dev_supervisor_behavior = {
    .name = "devices",
    .state_size = sizeof(supervisor_state),
    .start = supervisor_start,
    .receive = supervisor_receive,
    .child_exit = supervisor_child_exit,
};

int dev_world_spawn(dev_world *w, accel_actor *parent, accel_ref *supervisor) {
  accel_supervision sup = {.strategy = ACCEL_ONE_FOR_ONE,
                           .max_restarts = w->max_restarts,
                           .within_ms = w->restart_window_ms,
                           .backoff_initial_ms = 0,
                           .on_limit = ACCEL_LIMIT_STOP_CHILD};
  accel_spawn_opts o = {.name = "devices", .supervision = &sup, .loop = w->loop};
  return accel_spawn(w->rt, parent, &dev_supervisor_behavior, w, &o, supervisor);
}
