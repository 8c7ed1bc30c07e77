/* The task graph: ops and transfers, ordered per buffer in issue order.
 *
 * Each buffer remembers its last writer and the readers since; a new task that reads waits for
 * the last writer (read-after-write), one that writes waits for both (write-after-read,
 * write-after-write). An edge between two tasks on the same device is satisfied as soon as the
 * earlier one is submitted: the later one's queue then waits on the earlier one's event, so a
 * dependent chain flows on the device without coming back to the loop. An edge across devices
 * is satisfied when the earlier task is done. */
#include <stdlib.h>
#include <string.h>

#include "actors/device.h"
#include "actors/session.h"
#include "actors/world.h"
#include "runtime/alloc.h"
#include "runtime/status.h"

/* A task from the pool keeps its edge arrays (emptied): they are the allocations a chain of
 * tasks would otherwise repeat. */
static dev_task *task_alloc(dev_world *w) {
  dev_task *t = w->task_pool;
  if (t == NULL)
    return rt_calloc(1, sizeof *t);
  w->task_pool = t->overflow_next;
  w->task_pool_len--;
  dev_edge *succ = t->succ;
  dev_task **same = t->same_node_deps;
  uint32_t succ_cap = t->succ_cap, same_cap = t->same_cap;
  memset(t, 0, sizeof *t);
  t->succ = succ;
  t->succ_cap = succ_cap;
  t->same_node_deps = same;
  t->same_cap = same_cap;
  return t;
}

static void task_release(dev_task *t) {
  dev_world *w = t->world;
  if (w->task_pool_len >= DEV_POOL_MAX) {
    rt_free(t->succ);
    rt_free(t->same_node_deps);
    rt_free(t);
    return;
  }
  t->overflow_next = w->task_pool;
  w->task_pool = t;
  w->task_pool_len++;
}

void dev_task_pool_free(dev_world *w) {
  while (w->task_pool) {
    dev_task *t = w->task_pool;
    w->task_pool = t->overflow_next;
    rt_free(t->succ);
    rt_free(t->same_node_deps);
    rt_free(t);
  }
  w->task_pool_len = 0;
}

dev_task *dev_task_create(dev_world *w, dev_task_kind kind, dev_node *node, dev_queue_class q) {
  dev_task *t = task_alloc(w);
  if (t == NULL)
    return NULL;
  t->kind = kind;
  t->world = w;
  t->node = node;
  t->node_gen = node->generation;
  t->qclass = q;
  t->src_node = -1;
  node->queued++;
  return t;
}

void dev_task_count_for(dev_task *t, const dev_call *call) {
  if (call->acct == NULL || t->acct != NULL)
    return;
  t->acct = call->acct;
  t->acct->refs++;
}

static int grow(void **arr, uint32_t *cap, uint32_t n, size_t elem) {
  if (n < *cap)
    return 0;
  uint32_t ncap = *cap ? *cap * 2 : 4;
  void *p = rt_realloc(*arr, ncap * elem);
  if (p == NULL)
    return ACCEL_ENOMEM;
  *arr = p;
  *cap = ncap;
  return 0;
}

/* Whether an edge may be satisfied on the device (to's queue waits on from's event) rather
 * than by from's completion: both on one node, and `to` is not a collective, whose other
 * devices' queues would not be ordered behind that wait. */
static bool flows_on_device(const dev_task *from, const dev_task *to) {
  return from->node == to->node && !(to->call && to->call->op.h.kind == DEV_OP_COLLECTIVE);
}

static int add_edge(dev_task *from, dev_task *to) {
  if (from == to || from->state == DEV_TASK_DONE)
    return 0;
  /* Edges to `to` are only added while `to` is planned, so a duplicate is the latest one. */
  if (from->nsucc && from->succ[from->nsucc - 1].to == to)
    return 0;
  if (grow((void **)&from->succ, &from->succ_cap, from->nsucc, sizeof(dev_edge)) != 0)
    return ACCEL_ENOMEM;
  bool same_node = flows_on_device(from, to);
  if (same_node &&
      grow((void **)&to->same_node_deps, &to->same_cap, to->nsame, sizeof(dev_task *)) != 0)
    return ACCEL_ENOMEM;
  from->succ[from->nsucc++] = (dev_edge){to, false};
  to->deps++;
  to->preds_alive++;
  if (same_node)
    to->same_node_deps[to->nsame++] = from;
  /* Already submitted on the same device: the edge is satisfied by an event wait. */
  if (same_node && from->state == DEV_TASK_SUBMITTED) {
    from->succ[from->nsucc - 1].satisfied = true;
    to->deps--;
  }
  return 0;
}

#define NOT_A_READER UINT32_MAX

/* Where t sits in b's reader list (t->reader_pos, per buffer slot of t), kept up to date so
 * that removal is O(1): a long run of readers must not cost a scan per completion. */
static uint32_t *reader_pos_of(dev_task *t, const dev_buffer *b) {
  for (uint32_t i = 0; i < t->nbufs; i++)
    if (t->buf[i] == b && t->reader_pos[i] != NOT_A_READER)
      return &t->reader_pos[i];
  return NULL;
}

static void readers_remove(dev_buffer *b, dev_task *t) {
  uint32_t *pos = reader_pos_of(t, b);
  if (pos == NULL)
    return;
  uint32_t at = *pos, last = --b->nreaders;
  *pos = NOT_A_READER;
  if (at == last)
    return;
  dev_task *moved = b->readers[last];
  b->readers[at] = moved;
  for (uint32_t i = 0; i < moved->nbufs; i++)
    if (moved->buf[i] == b && moved->reader_pos[i] == last)
      moved->reader_pos[i] = at;
}

/* Records that t uses b with `access`, adding the edges that keep issue order. */
int dev_task_use(dev_task *t, dev_buffer *b, uint32_t access) {
  if (t->nbufs == DEV_OP_MAX_BUFS)
    return ACCEL_EINVAL;
  uint32_t slot = t->nbufs++;
  t->buf[slot] = b;
  t->reader_pos[slot] = NOT_A_READER;
  b->users++;
  if (b->last_writer && add_edge(b->last_writer, t) != 0)
    return ACCEL_ENOMEM;
  if (!(access & DEV_WRITE)) {
    if (grow((void **)&b->readers, &b->readers_cap, b->nreaders, sizeof(dev_task *)) != 0)
      return ACCEL_ENOMEM;
    t->reader_pos[slot] = b->nreaders;
    b->readers[b->nreaders++] = t;
    return 0;
  }
  for (uint32_t i = 0; i < b->nreaders; i++) {
    dev_task *r = b->readers[i];
    uint32_t *pos = reader_pos_of(r, b);
    if (pos)
      *pos = NOT_A_READER; /* the list restarts after this writer */
    if (add_edge(r, t) != 0)
      return ACCEL_ENOMEM;
  }
  b->nreaders = 0;
  b->last_writer = t;
  return 0;
}

/* ---- progress ---- */

void dev_task_ready_check(dev_task *t) {
  if (t->state != DEV_TASK_WAITING || t->deps != 0 || t->dispatched)
    return;
  if (t->status < 0) {
    dev_task_complete(t, t->status); /* an input transfer failed: never run it */
    return;
  }
  dev_kernel_dispatch(t);
}

static void same_node_deps_remove(dev_task *t, dev_task *dep) {
  for (uint32_t i = 0; i < t->nsame; i++) {
    if (t->same_node_deps[i] == dep) {
      t->same_node_deps[i] = t->same_node_deps[--t->nsame];
      return;
    }
  }
}

/* Called by the kernel actor once t's work is on the device queue, its event recorded. */
void dev_task_submitted(dev_task *t) {
  t->state = DEV_TASK_SUBMITTED;
  dev_edge *edges = t->succ;
  for (uint32_t i = 0; i < t->nsucc; i++) {
    if (edges[i].satisfied || !flows_on_device(t, edges[i].to))
      continue;
    edges[i].satisfied = true;
    edges[i].to->deps--;
    dev_task_ready_check(edges[i].to);
  }
}

static void untrack(dev_task *t) {
  for (uint32_t i = 0; i < t->nbufs; i++) {
    dev_buffer *b = t->buf[i];
    if (b->last_writer == t)
      b->last_writer = NULL;
    readers_remove(b, t);
  }
}

static void task_free(dev_task *t);

/* Satisfies t's remaining edges and lets successors go. A successor on the same device may
 * have finished before t (its work waited on t's event, but completions reach the loop in any
 * order), so each edge holds the successor's memory until here. */
static void release_successors(dev_task *t) {
  dev_edge *edges = t->succ;
  bool poison = t->status < 0 && t->kind == DEV_TASK_TRANSFER;
  uint32_t n = t->nsucc;
  for (uint32_t i = 0; i < n; i++) {
    dev_task *s = edges[i].to;
    same_node_deps_remove(s, t);
    if (poison && s->status == 0 && s->state == DEV_TASK_WAITING)
      s->status = t->status;
    if (!edges[i].satisfied) {
      edges[i].satisfied = true;
      s->deps--;
    }
  }
  t->nsucc = 0;
  for (uint32_t i = 0; i < n; i++)
    dev_task_ready_check(edges[i].to); /* may complete it; its memory is ours until below */
  for (uint32_t i = 0; i < n; i++) {
    dev_task *s = edges[i].to;
    if (--s->preds_alive == 0 && s->state == DEV_TASK_DONE)
      task_free(s);
  }
}

static void task_free(dev_task *t) {
  if (t->acct)
    dev_session_acct_release(t->acct);
  if (t->event)
    t->node->be->event_destroy(t->event);
  for (uint32_t i = 0; i < t->nbufs; i++)
    dev_buffer_unuse(t->buf[i]);
  task_release(t);
}

/* A failed transfer leaves its destination replica without the data the planner promised. */
static void transfer_failed(dev_task *t) {
  dev_buffer *b = t->buf[0];
  /* A copy out of a device to the host runs on that device; the others (from the host, from
   * a peer, or a first zero-fill) land on the node they run on. */
  int dst = t->src_node == t->node->index ? DEV_HOST_NODE : t->node->index;
  if (b->rep[dst].state == DEV_SHARED)
    b->rep[dst].state = DEV_INVALID;
  if (dev_buffer_valid_node(b, -1) < 0)
    b->lost = true;
}

void dev_foreign_left_sweep(dev_world *w, bool all) {
  for (dev_foreign_left *l = RT_LIST_FIRST(&w->foreign_left, dev_foreign_left, link), *next;
       l != NULL; l = next) {
    next = RT_LIST_NEXT(l, &w->foreign_left, dev_foreign_left, link); /* l may go */
    if (!all && l->node->be->event_query(l->ev) == RT_PENDING)
      continue;
    rt_list_remove(&l->link);
    l->node->be->event_destroy(l->ev);
    rt_free(l);
  }
}

void dev_task_foreign_end(dev_task *t) {
  if (t->foreign_ev == NULL)
    return;
  rt_list_remove(&t->foreign_link);
  be_event *ev = t->foreign_ev;
  /* A task that failed while its work was queued (an arming error, a deadline) ends first:
   * the memory it names stays in use until the work passes the event. */
  if (t->node->be->event_query(ev) == RT_PENDING) {
    dev_foreign_left *l = rt_malloc(sizeof *l);
    if (l != NULL) { /* without memory the record goes: the one case left unguarded */
      *l = (dev_foreign_left){.node = t->node, .ev = ev, .mask = t->foreign_mask};
      rt_list_push_back(&t->world->foreign_left, &l->link);
      ev = NULL;
    }
  }
  if (ev != NULL)
    t->node->be->event_destroy(ev);
  t->foreign_ev = NULL;
  t->foreign_mask = 0;
}

void dev_task_complete(dev_task *t, int status) {
  if (t->state == DEV_TASK_DONE)
    return;
  t->state = DEV_TASK_DONE;
  t->node->queued--;
  dev_task_foreign_end(t);
  if (t->status == 0)
    t->status = status;
  if (t->kind == DEV_TASK_TRANSFER && t->status < 0)
    transfer_failed(t);
  untrack(t);
  release_successors(t);
  if (t->kind == DEV_TASK_OP)
    dev_op_finished(t->world, t->call, t->status);
  if (t->counted && t->world->on_transfer)
    t->world->on_transfer(t->world->on_op_done_arg, -1); /* its op reports its failures */
  if (t->preds_alive == 0)
    task_free(t);
}
