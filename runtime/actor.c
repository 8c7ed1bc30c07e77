/* Actor cells: the ref table, spawning, sending, running a turn, retiring and sweeping.
 *
 * Sends from the target's own loop resolve the ref directly. Sends from other threads (other
 * loops included) pin the slot (slot->pins) before checking the generation, and the target's
 * loop bumps the generation before it checks the pins (both sequentially consistent): either
 * the sender sees the new generation (stale), or the loop sees the pin and frees the cell only
 * in a later sweep. The free list is shared by the loops, under slots_mu. */
#include <stdlib.h>
#include <string.h>

#include "runtime/alloc.h"
#include "runtime/rt.h"

#define RT_REPLIED ((accel_future *)(uintptr_t)1) /* msg->reply after accel_reply */

/* ---- the ref table ---- */

int rt_slots_init(accel_runtime *rt, uint32_t max_actors) {
  if (max_actors > RT_MAX_ACTORS_LIMIT)
    return ACCEL_EINVAL;
  rt->slot_limit = max_actors + 1;
  size_t chunks = (rt->slot_limit + RT_SLOT_CHUNK - 1) / RT_SLOT_CHUNK;
  rt->slot_chunks = rt_calloc(chunks, sizeof *rt->slot_chunks);
  if (rt->slot_chunks == NULL)
    return ACCEL_ENOMEM;
  atomic_init(&rt->slot_count, 0);
  rt->free_head = 0;
  return 0;
}

void rt_slots_free(accel_runtime *rt) {
  if (rt->slot_chunks == NULL)
    return;
  uint32_t count = atomic_load(&rt->slot_count);
  for (uint32_t c = 0; c * RT_SLOT_CHUNK < count; c++)
    rt_free(rt->slot_chunks[c]);
  rt_free(rt->slot_chunks);
  rt->slot_chunks = NULL;
}

/* One more chunk of free slots (slots_mu held), lowest first on the free list. Slot 0 is never
 * handed out, so {0, 0} is always stale. */
static int slots_grow(accel_runtime *rt) {
  uint32_t base = atomic_load_explicit(&rt->slot_count, memory_order_relaxed);
  if (base >= rt->slot_limit)
    return ACCEL_ELIMIT;
  uint32_t end = rt->slot_limit - base < RT_SLOT_CHUNK ? rt->slot_limit : base + RT_SLOT_CHUNK;
  rt_slot *chunk = rt_calloc(RT_SLOT_CHUNK, sizeof *chunk);
  if (chunk == NULL)
    return ACCEL_ENOMEM;
  uint32_t first = base == 0 ? 1 : base;
  for (uint32_t i = first; i < end; i++) {
    atomic_init(&chunk[i - base].gen, 1);
    atomic_init(&chunk[i - base].waiting, 0);
    atomic_flag_clear(&chunk[i - base].post_lock);
    chunk[i - base].next_free = i + 1 < end ? i + 1 : rt->free_head;
  }
  rt->slot_chunks[base >> RT_SLOT_CHUNK_SHIFT] = chunk;
  if (first < end)
    rt->free_head = first;
  atomic_store_explicit(&rt->slot_count, end, memory_order_release);
  return 0;
}

static int slot_alloc(accel_runtime *rt, accel_actor *cell) {
  pthread_mutex_lock(&rt->slots_mu);
  int rc = rt->free_head == 0 ? slots_grow(rt) : 0;
  if (rc == 0) {
    uint32_t idx = rt->free_head;
    rt_slot *slot = rt_slot_of(rt, idx);
    rt->free_head = slot->next_free;
    atomic_store(&slot->home, cell->home->index);
    atomic_store(&slot->cell, cell);
    cell->ref = (accel_ref){idx, atomic_load(&slot->gen)};
  }
  pthread_mutex_unlock(&rt->slots_mu);
  return rc;
}

static void slot_retire(accel_runtime *rt, uint32_t idx) {
  rt_slot *slot = rt_slot_of(rt, idx);
  unsigned gen = atomic_load(&slot->gen) + 1;
  atomic_store(&slot->gen, gen == 0 ? 1 : gen); /* 0 is never live */
}

static void slot_release(accel_runtime *rt, uint32_t idx) {
  rt_slot *slot = rt_slot_of(rt, idx);
  pthread_mutex_lock(&rt->slots_mu);
  atomic_store(&slot->cell, NULL);
  slot->next_free = rt->free_head;
  rt->free_head = idx;
  pthread_mutex_unlock(&rt->slots_mu);
}

/* True if `slot` is this thread's loop's: its cell may be read without a pin. */
static bool slot_is_here(accel_runtime *rt, const rt_slot *slot) {
  rt_loop *l = rt_here(rt);
  return l != NULL && atomic_load_explicit(&slot->home, memory_order_relaxed) == l->index;
}

accel_actor *rt_resolve_local(accel_runtime *rt, accel_ref ref) {
  rt_slot *slot = rt_slot_at(rt, ref.slot);
  if (slot == NULL || !slot_is_here(rt, slot))
    return NULL;
  if (atomic_load_explicit(&slot->gen, memory_order_relaxed) != ref.gen)
    return NULL;
  accel_actor *cell = atomic_load_explicit(&slot->cell, memory_order_relaxed);
  return cell && cell->status == RT_RUNNING ? cell : NULL;
}

/* ---- cells ---- */

int rt_cell_create(rt_loop *home, accel_actor *parent, rt_child *spec, accel_actor **out) {
  accel_runtime *rt = home->rt;
  accel_actor *cell = rt_aligned_calloc(_Alignof(accel_actor), sizeof *cell);
  if (cell == NULL)
    return ACCEL_ENOMEM;
  cell->rt = rt;
  cell->home = home;
  atomic_flag_clear(&cell->monitors_lock);
  cell->turns_since_move = UINT32_MAX; /* never moved: free to move on its first turn */
  cell->parent = parent;
  cell->spec = spec;
  cell->b = spec ? spec->b : NULL;
  cell->arg = spec ? spec->arg : NULL;
  cell->throughput = spec ? spec->throughput : 64;
  rt_list_init(&cell->children);
  if (spec)
    cell->supervision = spec->supervision;
  atomic_init(&cell->scheduled, 0);
  if (rt_mailbox_init(&cell->mailbox, spec ? spec->mailbox_capacity : 64) != 0) {
    rt_aligned_free(cell);
    return ACCEL_ENOMEM;
  }
  int rc = slot_alloc(rt, cell);
  if (rc != 0) {
    rt_mailbox_destroy(&cell->mailbox);
    rt_aligned_free(cell);
    return rc;
  }
  atomic_fetch_add(&rt->stats.actors_live, 1);
  atomic_fetch_add(&rt->stats.actors_spawned, 1);
  *out = cell;
  return 0;
}

static void cell_free(accel_actor *cell) {
  rt_mailbox_destroy(&cell->mailbox);
  rt_aligned_free(cell);
}

int rt_cell_start(accel_actor *cell) {
  size_t size = cell->b->state_size ? cell->b->state_size : 1;
  cell->state = rt_calloc(1, size);
  if (cell->state == NULL)
    return ACCEL_ENOMEM;
  if (cell->b->start == NULL)
    return 0;
  accel_actor *prev = rt_tls_actor;
  rt_tls_actor = cell;
  int rc = cell->b->start(cell, cell->state, cell->arg);
  rt_tls_actor = prev;
  return rc < 0 ? rc : 0;
}

/* Ends an incarnation: its ref goes stale at once, its children stop (reverse start order),
 * its timers stop, its stop hook runs, and the cell waits in the graveyard for the sweep. */
void rt_cell_terminate(accel_actor *cell, int reason) {
  if (cell->status == RT_STOPPED)
    return;
  accel_runtime *rt = cell->rt;
  cell->status = RT_STOPPED;
  slot_retire(rt, cell->ref.slot);
  rt_monitors_fire(cell, reason);
  rt_waiters_fail(cell);
  rt_children_stop_all(cell);
  rt_timers_stop_all(cell);
  if (cell->state) {
    if (cell->b->stop) {
      accel_actor *prev = rt_tls_actor;
      rt_tls_actor = cell;
      cell->b->stop(cell, cell->state);
      rt_tls_actor = prev;
    }
    rt_free(cell->state);
    cell->state = NULL;
  }
  rt_loop *l = cell->home;
  if (cell->spec && cell->spec->cell == cell) {
    pthread_mutex_lock(&l->tree_mu);
    cell->spec->cell = NULL;
    pthread_mutex_unlock(&l->tree_mu);
  }
  cell->spec = NULL;
  atomic_fetch_sub(&rt->stats.actors_live, 1);
  cell->grave_next = l->graveyard;
  l->graveyard = cell;
  rt_wake_turn(l);
}

void rt_drop_msg(accel_runtime *rt, accel_msg *msg) {
  atomic_fetch_add_explicit(&rt->stats.dead_letters, 1, memory_order_relaxed);
  if (msg->reply && msg->reply != RT_REPLIED)
    rt_future_complete_release(msg->reply, ACCEL_ESTALE);
  if (msg->data && msg->drop)
    msg->drop(msg->data);
}

static void drain_dead_letters(accel_runtime *rt, accel_actor *cell) {
  accel_msg msg;
  while (rt_mailbox_pop(&cell->mailbox, &msg))
    rt_drop_msg(rt, &msg);
}

/* Frees retired cells that no other thread can reach any more. */
void rt_sweep(rt_loop *l) {
  accel_runtime *rt = l->rt;
  accel_actor **link = &l->graveyard;
  while (*link) {
    accel_actor *cell = *link;
    rt_slot *slot = rt_slot_of(rt, cell->ref.slot);
    /* scheduled == 1 means a run queue still holds it; taking it to 1 keeps senders out. */
    if (atomic_load(&slot->pins) == 0 && atomic_exchange(&cell->scheduled, 1) == 0) {
      *link = cell->grave_next;
      drain_dead_letters(rt, cell);
      slot_release(rt, cell->ref.slot);
      cell_free(cell);
    } else {
      link = &cell->grave_next;
    }
  }
}

/* ---- running a turn ---- */

static void deliver(accel_actor *cell, accel_msg *msg) {
  if (msg->type == ACCEL_MSG_EXIT) { /* a linked actor failed: so does this one */
    rt_supervise_failure(cell, (int)(int32_t)msg->flags);
    return;
  }
  if (cell->rt->n_loops > 1)
    rt_move_note(cell, msg->sender);
  rt_tls_actor = cell;
  int rc = cell->b->receive(cell, cell->state, msg);
  rt_tls_actor = NULL;
  if (msg->reply && msg->reply != RT_REPLIED)
    rt_future_complete_release(msg->reply, rc);
  if (msg->data && msg->drop)
    msg->drop(msg->data);
  if (rc < 0)
    rt_supervise_failure(cell, rc);
}

static void unschedule(accel_actor *cell) {
  atomic_store(&cell->scheduled, 0); /* seq_cst: pairs with the mailbox's seq_cst publish */
  /* A sender that pushed before our store saw scheduled == 1 and left the wake-up to us. */
  if (cell->status == RT_RUNNING && !rt_mailbox_empty(&cell->mailbox) &&
      atomic_exchange(&cell->scheduled, 1) == 0)
    rt_schedule_local(cell->home, cell);
}

void rt_cell_run(accel_actor *cell) {
  uint64_t start = cell->rt->n_loops > 1 ? rt_move_stamp() : 0;
  uint32_t n = 0;
  accel_msg msg;
  while (cell->status == RT_RUNNING && n < cell->throughput &&
         rt_mailbox_pop(&cell->mailbox, &msg)) {
    n++;
    deliver(cell, &msg);
  }
  atomic_fetch_add_explicit(&cell->rt->stats.messages_received, n, memory_order_relaxed);
  if (rt_mailbox_has_retired(&cell->mailbox)) /* rings it outgrew, once no sender holds them */
    rt_mailbox_reclaim(&cell->mailbox, &rt_slot_of(cell->rt, cell->ref.slot)->pins);
  if (cell->rt->n_loops > 1) {
    if (rt_move_due(cell, start) && rt_move(cell))
      return; /* still scheduled: its new loop runs it next (move.c) */
    rt_move_turn_end(cell);
  }
  if (cell->status == RT_RUNNING && n == cell->throughput && !rt_mailbox_empty(&cell->mailbox))
    rt_schedule_local(cell->home, cell); /* used its turn: to the back of the queue */
  else
    unschedule(cell);
  if (cell->waiters) /* after the schedule's decision: their pushes schedule it again */
    rt_waiters_admit(cell);
}

/* ---- sending ---- */

static int push_as(accel_runtime *rt, accel_actor *cell, const accel_msg *msg, accel_ref sender) {
  accel_msg m = *msg;
  m.sender = sender;
  int rc = rt_mailbox_push(&cell->mailbox, &m);
  if (rc != 0) {
    if (rc == ACCEL_EBUSY)
      atomic_fetch_add_explicit(&rt->stats.busy_refusals, 1, memory_order_relaxed);
    return rc;
  }
  if (atomic_exchange(&cell->scheduled, 1) == 0)
    rt_schedule(cell);
  return 0;
}

static accel_ref current_sender(accel_runtime *rt) {
  accel_actor *from = rt_tls_actor;
  return from && from->rt == rt ? from->ref : ACCEL_REF_NONE;
}

accel_actor *rt_cell_pin(accel_runtime *rt, accel_ref ref) {
  rt_slot *slot = rt_slot_at(rt, ref.slot);
  if (slot == NULL)
    return NULL;
  atomic_fetch_add(&slot->pins, 1);
  accel_actor *cell = atomic_load(&slot->cell);
  if (atomic_load(&slot->gen) == ref.gen && cell != NULL)
    return cell;
  atomic_fetch_sub(&slot->pins, 1);
  return NULL;
}

void rt_cell_unpin(accel_actor *cell) {
  atomic_fetch_sub(&rt_slot_of(cell->rt, cell->ref.slot)->pins, 1);
}

/* From a thread that is not the target's loop: pin the slot, check, push. */
static int send_pinned(accel_runtime *rt, accel_ref to, const accel_msg *msg, accel_ref sender) {
  if (!rt_remote_enter(rt))
    return ACCEL_ECLOSED;
  int rc = ACCEL_ESTALE;
  accel_actor *cell = rt_cell_pin(rt, to);
  if (cell != NULL) {
    rc = push_as(rt, cell, msg, sender);
    rt_cell_unpin(cell);
  }
  rt_remote_leave(rt);
  return rc;
}

static int send_from(accel_runtime *rt, accel_ref to, const accel_msg *msg, accel_ref sender) {
  if (atomic_load_explicit(&rt->closing, memory_order_relaxed))
    return ACCEL_ECLOSED;
  rt_slot *slot = rt_slot_at(rt, to.slot);
  if (slot == NULL)
    return ACCEL_ESTALE;
  if (!slot_is_here(rt, slot))
    return send_pinned(rt, to, msg, sender);
  accel_actor *cell = rt_resolve_local(rt, to);
  return cell ? push_as(rt, cell, msg, sender) : ACCEL_ESTALE;
}

int rt_send_as(accel_runtime *rt, accel_ref to, const accel_msg *msg) {
  return send_from(rt, to, msg, msg->sender);
}

int rt_send_local(accel_runtime *rt, accel_ref to, const accel_msg *msg) {
  return send_from(rt, to, msg, current_sender(rt));
}

static int send_msg(accel_runtime *rt, accel_ref to, const accel_msg *msg) {
  int rc = send_from(rt, to, msg, current_sender(rt));
  if (rc == ACCEL_ESTALE) {
    atomic_fetch_add_explicit(&rt->stats.dead_letters, 1, memory_order_relaxed);
    RT_LOG(ACCEL_LOG_DEBUG, "dead letter: type %u to {%u,%u}", msg->type, to.slot, to.gen);
  }
  return rc;
}

int accel_tell(accel_runtime *rt, accel_ref to, const accel_msg *msg) {
  if (rt == NULL || msg == NULL)
    return ACCEL_EINVAL;
  accel_msg m = *msg;
  m.reply = NULL;
  return send_msg(rt, to, &m);
}

int accel_ask(accel_runtime *rt, accel_ref to, const accel_msg *msg, accel_future **out) {
  if (rt == NULL || msg == NULL || out == NULL)
    return ACCEL_EINVAL;
  accel_future *f;
  int rc = accel_future_create(rt, &f);
  if (rc != 0)
    return rc;
  accel_future_retain(f); /* the message's reference, released on completion */
  accel_msg m = *msg;
  m.reply = f;
  rc = send_msg(rt, to, &m);
  if (rc != 0) {
    accel_future_release(f);
    accel_future_release(f);
    return rc;
  }
  *out = f;
  return 0;
}

int accel_reply(accel_msg *msg, int status, void *value, void (*drop)(void *)) {
  if (msg == NULL)
    return ACCEL_EINVAL;
  if (msg->reply == RT_REPLIED)
    return ACCEL_EALREADY;
  if (msg->reply == NULL)
    return 0;
  int rc = accel_future_complete(msg->reply, status, value, drop);
  if (rc == ACCEL_EALREADY && value != NULL && drop != NULL)
    drop(value); /* an ask that timed out: its future took no value */
  accel_future_release(msg->reply);
  msg->reply = RT_REPLIED;
  return rc;
}

accel_future *accel_msg_take_reply(accel_msg *msg) {
  if (msg == NULL || msg->reply == NULL || msg->reply == RT_REPLIED)
    return NULL;
  accel_future *f = msg->reply;
  msg->reply = RT_REPLIED;
  return f;
}

/* ---- sends that met a full mailbox on the loop (timer ticks, work results) ---- */

/* On a loop of rt: the retry waits on that loop's list. */
static void retry_send(accel_runtime *rt, accel_ref to, const accel_msg *msg, bool as_sender) {
  rt_loop *l = rt_here(rt);
  rt_retry *node = rt_malloc(sizeof *node);
  if (node == NULL) {
    accel_msg m = *msg;
    rt_drop_msg(rt, &m);
    return;
  }
  node->next = NULL;
  node->to = to;
  node->msg = *msg;
  node->as_sender = as_sender;
  rt_retry **link = &l->retries;
  while (*link)
    link = &(*link)->next;
  *link = node;
  rt_wake_turn(l);
}

void rt_retry_send(accel_runtime *rt, accel_ref to, const accel_msg *msg) {
  retry_send(rt, to, msg, false);
}

void rt_retry_send_as(accel_runtime *rt, accel_ref to, const accel_msg *msg) {
  retry_send(rt, to, msg, true);
}

/* Returns true if some retries are still waiting for room. */
bool rt_retries_flush(rt_loop *l) {
  accel_runtime *rt = l->rt;
  rt_retry **link = &l->retries;
  while (*link) {
    rt_retry *node = *link;
    int rc = node->as_sender ? rt_send_as(rt, node->to, &node->msg)
                             : rt_send_local(rt, node->to, &node->msg);
    if (rt_send_later(rc)) {
      link = &node->next;
      continue;
    }
    if (rc != 0)
      rt_drop_msg(rt, &node->msg);
    *link = node->next;
    rt_free(node);
  }
  return l->retries != NULL;
}

/* ---- spawning ---- */

static int child_spawn(rt_child *spec) {
  rt_loop *home = spec->owner->home;
  accel_actor *cell;
  int rc = rt_cell_create(home, spec->owner, spec, &cell);
  if (rc != 0)
    return rc;
  pthread_mutex_lock(&home->tree_mu);
  spec->cell = cell;
  pthread_mutex_unlock(&home->tree_mu);
  rc = rt_cell_start(cell);
  if (rc != 0)
    rt_cell_terminate(cell, rc); /* runs the stop hook on the partial state */
  return rc;
}

int rt_child_respawn(rt_child *spec) {
  return child_spawn(spec);
}

/* On loop l (its thread, or the creating thread before the loops run): a child of parent, or
 * of l's root. */
static int spawn_now(rt_loop *l, accel_actor *parent, const accel_behavior *b, void *arg,
                     const accel_spawn_opts *opts, accel_ref *out) {
  if (atomic_load(&l->rt->closing))
    return ACCEL_ECLOSED;
  accel_actor *owner = parent ? parent : l->root;
  if (owner == NULL || owner->status != RT_RUNNING)
    return ACCEL_ESTALE;
  rt_child *spec = rt_child_create(owner, b, arg, opts);
  if (spec == NULL)
    return ACCEL_ENOMEM;
  int rc = child_spawn(spec);
  if (rc != 0) {
    rt_child_free(spec);
    return rc;
  }
  if (out)
    *out = spec->cell->ref;
  return 0;
}

typedef struct spawn_req {
  rt_task task; /* first: the task pointer is the request */
  rt_loop *loop;
  const accel_behavior *b;
  void *arg;
  const accel_spawn_opts *opts;
  accel_ref ref;
  int rc;
  accel_future *done;
} spawn_req;

static void spawn_task(rt_task *task) {
  spawn_req *req = (spawn_req *)task;
  req->rc = spawn_now(req->loop, NULL, req->b, req->arg, req->opts, &req->ref);
  /* Our own reference: the waiter may see `done` and free its own before we return. */
  rt_future_complete_release(req->done, 0);
}

static int spawn_from_other_thread(rt_loop *l, const accel_behavior *b, void *arg,
                                   const accel_spawn_opts *opts, accel_ref *out) {
  accel_runtime *rt = l->rt;
  spawn_req req = {.task.fn_ = spawn_task, .loop = l, .b = b, .arg = arg, .opts = opts};
  int rc = accel_future_create(rt, &req.done);
  if (rc != 0)
    return rc;
  /* Pinned while posting: a shutdown drain then waits for us and runs the task. */
  if (!rt_remote_enter(rt)) {
    accel_future_release(req.done);
    return ACCEL_ECLOSED;
  }
  accel_future_retain(req.done); /* the task's */
  rt_post_to(l, &req.task);
  rt_remote_leave(rt);
  accel_future_wait(req.done, -1);
  accel_future_release(req.done);
  if (req.rc == 0 && out)
    *out = req.ref;
  return req.rc;
}

/* Where a child goes: its parent's loop. A top-level actor (parent NULL) goes to the loop its
 * options name; else spawned on a loop it stays there (it will talk to its spawner most); from
 * outside the loops, round-robin. */
int accel_spawn(accel_runtime *rt, accel_actor *parent, const accel_behavior *b, void *arg,
                const accel_spawn_opts *opts, accel_ref *out) {
  if (rt == NULL || b == NULL || b->receive == NULL)
    return ACCEL_EINVAL;
  if (atomic_load(&rt->closing))
    return ACCEL_ECLOSED; /* also: nobody would run a posted spawn after the loop ended */
  uint32_t chosen = opts ? opts->loop : 0;
  if (chosen > rt->n_loops)
    return ACCEL_EINVAL;
  rt_loop *want = chosen ? &rt->loops[chosen - 1] : NULL;
  rt_loop *here = rt_here(rt);
  if (here) {
    if ((parent != NULL && parent->home != here) || (want != NULL && want != here))
      return ACCEL_EINVAL; /* a cell pointer is only valid on its own loop; no waiting */
    return spawn_now(here, parent, b, arg, opts, out);
  }
  if (!atomic_load(&rt->running)) {
    /* Before the loops run, the creating thread stands in for the loop. */
    if (want != NULL && parent != NULL && parent->home != want)
      return ACCEL_EINVAL; /* a child lives on its parent's loop */
    rt_loop *l = parent ? parent->home : want ? want : rt_place(rt);
    rt_tls_loop = l;
    int rc = spawn_now(l, parent, b, arg, opts, out);
    rt_tls_loop = NULL;
    return rc;
  }
  if (parent != NULL)
    return ACCEL_EINVAL; /* a cell pointer is only valid on its loop's thread */
  return spawn_from_other_thread(want ? want : rt_place(rt), b, arg, opts, out);
}

/* ---- stopping ---- */

typedef struct stop_req {
  rt_task task;
  accel_runtime *rt;
  accel_ref ref;
} stop_req;

static void stop_task(rt_task *task) {
  stop_req *req = (stop_req *)task;
  accel_actor *cell = rt_resolve_local(req->rt, req->ref);
  if (cell == NULL && rt_follow(req->rt, req->ref, &req->task))
    return; /* it moved to another loop: the stop follows it */
  if (cell && cell->spec)
    rt_child_stop(cell->spec, 0);
  rt_free(req);
}

int accel_stop(accel_runtime *rt, accel_ref ref) {
  if (rt == NULL)
    return ACCEL_EINVAL;
  if (atomic_load(&rt->closing))
    return ACCEL_ECLOSED;
  rt_slot *slot = rt_slot_at(rt, ref.slot);
  if (slot == NULL || atomic_load(&slot->gen) != ref.gen)
    return ACCEL_ESTALE;
  if (ref.slot == rt->root_ref.slot)
    return ACCEL_EINVAL; /* the root stops with the runtime */
  stop_req *req = rt_malloc(sizeof *req);
  if (req == NULL)
    return ACCEL_ENOMEM;
  req->task.fn_ = stop_task;
  req->rt = rt;
  req->ref = ref;
  rt_post_to(rt_slot_home(rt, slot), &req->task); /* its cell is only touched there */
  return 0;
}

/* ---- accessors for callbacks ---- */

accel_ref accel_self(accel_actor *self) {
  return self ? self->ref : ACCEL_REF_NONE;
}

accel_runtime *accel_actor_runtime(accel_actor *self) {
  return self ? self->rt : NULL;
}

const char *accel_actor_name(accel_actor *self) {
  if (self == NULL)
    return NULL;
  return self->spec ? self->spec->name : "root";
}

accel_ref accel_parent(accel_actor *self) {
  return self && self->parent ? self->parent->ref : ACCEL_REF_NONE;
}

int accel_child(accel_actor *self, const char *name, accel_ref *out) {
  if (self == NULL || name == NULL || out == NULL)
    return ACCEL_EINVAL;
  RT_LIST_FOR_EACH(rt_child, spec, &self->children, link) {
    if (strcmp(spec->name, name) != 0)
      continue;
    if (spec->cell == NULL)
      return ACCEL_EAGAIN; /* between incarnations: waiting for its restart */
    *out = spec->cell->ref;
    return 0;
  }
  return ACCEL_ENOENT;
}
