/* KernelActor: owns one backend queue of a device; puts ready tasks on it and brings their
 * completion back to the loop by the task's strategy:
 *   callback  the backend notifies on its thread (host_notify) -> the op's future completes
 *             there, and the record is posted to the loop (accel_post)
 *   sync      a worker blocks in event_sync -> the op's future completes there too, and a
 *             message goes back to the loop
 * (on backends whose errors are sticky, one notification or wait covers a burst of tasks)
 *   poll      the actor queries events every loop iteration while polled work is in flight
 * A deadline watchdog covers callbacks that never come (a CUDA callback does not fire after a
 * device error). When the actor ends (device fault, shutdown), its in-flight tasks complete
 * with ACCEL_EDEVLOST; late completions then find their record detached and only free it. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/busy.h"
#include "actors/device.h"
#include "actors/lanes.h"
#include "actors/trace.h"
#include "actors/wait_help.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"
#include "runtime/future_help.h"
#include "runtime/loop.h"
#include "runtime/spin.h"
#include "runtime/status.h"

#define WATCHDOG_MS 250
#define FAULT_RETRY_MS 10
#define DEFAULT_DEADLINE_MS 60000
/* Tasks on the device queue at once; more wait here, in order. A driver blocks the submitting
 * thread when a stream's queue fills up (CUDA: about a thousand entries), and that thread is
 * the loop: it must never block. */
#define MAX_ON_QUEUE 128
/* While several sessions have work on a queue, it holds at most this many tasks: a session's
 * op then waits behind about this many others plus one per other session (lanes.h), not
 * behind a full queue of a flooding one. Measured on an H200, a light client beside 8 that
 * flood (bench-clients --fairness 8): depth 128 / 64 / 32 gave its median 1.1 / 0.61 / 0.37 ms
 * and the flood 134 / 127 / 107 kops/s; 64 halves the wait for 5% of the throughput. */
#define FAIR_ON_QUEUE 64
/* Within the hold after a light session's op (one op at a time) ended beside a session that
 * pipelines (lanes.h), the queue holds at most this many: the light session's next op waits
 * behind about this many others, whose calls the device worker's one link thread launches in
 * order, about 1.5 us each on an H200 (the GPU itself runs them faster). At depth 64 that
 * backlog was most of the light client's wait (bench-clients --fairness 8: 130-150 us median
 * beside the flood, 13 us alone; a second stream for it changed nothing). At 8 and 12 its
 * median beside the flood was 40-48 us; at 8 the flood moved 0.6-0.7x its ops (the worker's
 * thread runs dry between refills), at 12 about 0.9x; at 16 the median went back up to 45-93
 * us. The runs at 12 and 16 were of an earlier rule for "light" (docs/PERFORMANCE.md "Turns
 * back to back; a short queue after a light session's op; what did not help"). */
#define LIGHT_ON_QUEUE 12
#define EARLY_NONE 1 /* no answer yet (answers are 0 or negative) */

typedef struct kernel_state kernel_state;

typedef struct dev_inflight {
  accel_task post;           /* the backend's callback posts the record to the loop */
  rt_list link;              /* in the actor's in-flight list */
  struct dev_inflight *next; /* in the world's pool of free records */
  kernel_state *owner;       /* NULL once the actor has ended */
  dev_task *task;            /* NULL once finished */
  const be_ops *be;
  be_event *event;
  accel_completion how;
  uint64_t deadline_ms;
  /* The backend's answer, set off the loop where the op's future completed early (EARLY_NONE
   * until then): an actor that ends before the record reaches the loop finishes it with this,
   * never with a failure the client's future does not show. */
  atomic_int early_status;
  dev_world *world; /* whose pool the record goes back to */
  accel_runtime *world_rt;
  accel_future *early;             /* the op's future, completed right in the backend's callback */
  dev_call *early_call;            /* the op's call, if it has an `early` (ops/call.h) */
  atomic_int early_call_state;     /* CALL_EARLY_*: who ran or skipped early_call's `early` */
  struct dev_inflight *batch_next; /* the next record one host function completes */
  int refs;                        /* the actor's list + the pending completion mechanism */
  bool armed;           /* its completion is on its way (arm); the watchdog retries if not */
  uint64_t t_submit_ns; /* when the work went to the queue (busy time, traces) */
} dev_inflight;

struct kernel_state {
  dev_node *node;
  dev_queue_class qclass;
  be_queue *queue;
  accel_actor *self;
  rt_list inflight; /* dev_inflight records, newest first */
  uint32_t polled;  /* in-flight records with how == POLL */
  bool poll_armed, watchdog_armed;
  bool stopping;       /* ending: failures are ours, not the device's */
  uint32_t on_queue;   /* tasks in flight on the queue */
  dev_lanes waiting;   /* ready tasks past the queue's depth, a lane per session (lanes.h) */
  uint32_t generation; /* the device incarnation this actor serves */
  bool fault_reported; /* the device actor has the report (or no longer needs it) */
  bool fault_pending;  /* a report met a full mailbox: sent again until it gets through */
  /* Records of this burst by strategy (callback, sync), oldest first, waiting for
   * DEV_MSG_ARM_BATCH to arm one completion behind the last (be->sticky_errors). */
  struct burst {
    dev_inflight *head, *tail;
  } burst[2];
  bool batch_msg; /* DEV_MSG_ARM_BATCH is in the mailbox */
};

static void leave(kernel_state *k, const dev_task *t);

static dev_inflight *inflight_alloc(dev_world *w) {
  dev_inflight *f = w->inflight_pool;
  if (f == NULL)
    return rt_calloc(1, sizeof *f);
  w->inflight_pool = f->next;
  w->inflight_pool_len--;
  memset(f, 0, sizeof *f);
  return f;
}

static void inflight_unref(dev_inflight *f) {
  if (--f->refs > 0)
    return;
  if (f->event)
    f->be->event_destroy(f->event);
  if (f->early)
    accel_future_release(f->early);
  dev_world *w = f->world;
  if (w->inflight_pool_len >= DEV_POOL_MAX) {
    rt_free(f);
    return;
  }
  f->next = w->inflight_pool; /* records are made and freed on the loop only */
  w->inflight_pool = f;
  w->inflight_pool_len++;
}

void dev_inflight_pool_free(dev_world *w) {
  while (w->inflight_pool) {
    dev_inflight *f = w->inflight_pool;
    w->inflight_pool = f->next;
    rt_free(f);
  }
  w->inflight_pool_len = 0;
}

static void inflight_unlink(kernel_state *k, dev_inflight *f) {
  rt_list_remove(&f->link);
  if (f->how == ACCEL_COMPLETION_POLL && f->armed)
    k->polled--;
  k->on_queue--;
  f->owner = NULL;
}

/* Tells the device actor; the generation lets it ignore reports about an incarnation that has
 * already been replaced. One report per incarnation is enough: the device actor fails on it
 * and ends this actor. A report refused by a full mailbox must not be lost (the device would
 * go on serving broken), so it stays pending and is sent again by a timer and on every
 * message until it gets through. */
static void report_fault(kernel_state *k) {
  if (k->fault_reported)
    return;
  accel_msg m = {.type = DEV_MSG_FAULT, .arg = k->generation};
  int rc = accel_tell(accel_actor_runtime(k->self), accel_parent(k->self), &m);
  if (rc == 0 || rc == ACCEL_ESTALE || rc == ACCEL_ECLOSED) {
    /* ESTALE: the device actor has ended, and ends us; ECLOSED: the runtime is stopping. */
    k->fault_reported = true;
    k->fault_pending = false;
    return;
  }
  if (!k->fault_pending)
    accel_log(ACCEL_LOG_WARN, "device", "device %d: fault report refused (%s): retrying",
              k->node->device, accel_err_name(rc));
  k->fault_pending = true;
  if (accel_timer_start(k->self, FAULT_RETRY_MS, 0, DEV_MSG_FAULT_RETRY, 0, NULL) != 0)
    accel_log(ACCEL_LOG_ERROR, "device",
              "device %d: no timer for the fault report: it waits for the next message",
              k->node->device);
}

/* Transfers this large are logged when they start and end: a long silence otherwise. */
#define LARGE_TRANSFER_BYTES (256ull << 20)

/* took_ns 0: it starts now; else it ended with `status` after took_ns. */
static void log_large_transfer(const kernel_state *k, const dev_task *t, uint64_t took_ns,
                               int status) {
  if (t->kind != DEV_TASK_TRANSFER || t->buf[0] == NULL || t->buf[0]->bytes < LARGE_TRANSFER_BYTES)
    return;
  double gib = (double)t->buf[0]->bytes / (double)(1ull << 30), s = (double)took_ns * 1e-9;
  const char *client = dev_task_client(t);
  if (took_ns == 0)
    accel_log(ACCEL_LOG_INFO, "device", "device %d: %s of %.2f GiB started (client %s)",
              k->node->device, dev_task_label(t), gib, client);
  else if (status == 0)
    accel_log(ACCEL_LOG_INFO, "device", "device %d: %s of %.2f GiB done in %.3f s (%.2f GB/s)",
              k->node->device, dev_task_label(t), gib, s,
              (double)t->buf[0]->bytes / (s > 0 ? s : 1e-9) * 1e-9);
  else
    accel_log(ACCEL_LOG_WARN, "device", "device %d: %s of %.2f GiB failed after %.3f s: %s",
              k->node->device, dev_task_label(t), gib, s, accel_strerror(status));
}

/* A call's `early` runs at most once, never during or after its `done`: the thread that learns
 * the work is done claims it (RUNNING, then SETTLED), or the loop finishing the record first
 * settles it unrun; a loop that finds it running waits the moment it takes (a reply's write). */
enum { CALL_EARLY_IDLE, CALL_EARLY_RUNNING, CALL_EARLY_SETTLED };

static void early_call_run(dev_inflight *f, int status) {
  int idle = CALL_EARLY_IDLE;
  if (f->early_call == NULL ||
      !atomic_compare_exchange_strong(&f->early_call_state, &idle, CALL_EARLY_RUNNING))
    return;
  f->early_call->early(f->early_call, rt_status_public(status));
  atomic_store(&f->early_call_state, CALL_EARLY_SETTLED);
}

static void early_call_settle(dev_inflight *f) { /* on the loop */
  int idle = CALL_EARLY_IDLE;
  if (f->early_call == NULL ||
      atomic_compare_exchange_strong(&f->early_call_state, &idle, CALL_EARLY_SETTLED))
    return;
  while (atomic_load(&f->early_call_state) != CALL_EARLY_SETTLED)
    rt_cpu_relax();
}

/* The work behind f completed with `status` (on the loop). */
static void inflight_finish(dev_inflight *f, int status) {
  early_call_settle(f);
  status = rt_status_public(status); /* the op's: its client hears it */
  kernel_state *k = f->owner;
  dev_task *t = f->task;
  f->task = NULL;
  if (k) {
    /* the turn's start: at most a turn early, and no clock read per op */
    uint64_t now = rt_turn_ns(k->node->world->rt);
    now = now > f->t_submit_ns ? now : f->t_submit_ns;
    dev_node_busy_end(k->node, now);
    if (t && k->node->world->trace)
      dev_trace_task(k->node->world, t, f->t_submit_ns, now, status);
    if (t)
      log_large_transfer(k, t, now - f->t_submit_ns, status);
    inflight_unlink(k, f);
    inflight_unref(f); /* the list's reference */
  }
  if (t) {
    if (k)
      leave(k, t);
    dev_task_complete(t, status);
  }
  if (k && status == ACCEL_EDEVLOST && !k->stopping)
    report_fault(k);
}

/* ---- completion strategies ---- */

static void pump(kernel_state *k);

/* The op's future, for completion on the thread that learns the work is done (a client
 * waiting on it wakes one hop sooner); held by the record, so it outlives the op if need be. */
static void take_early(dev_inflight *f) {
  dev_task *t = f->task;
  if (t->kind == DEV_TASK_OP && t->call->future && t->call->done == NULL) {
    f->early = t->call->future;
    accel_future_retain(f->early);
  }
  if (t->kind == DEV_TASK_OP && t->call->early)
    f->early_call = t->call;
}

static void drop_early(dev_inflight *f) {
  if (f->early) {
    accel_future_release(f->early);
    f->early = NULL;
  }
}

/* A chain of records (batch_next; one record alone is a chain of one) completed together:
 * on the loop, each finishes in order and drops the completion's reference. */
static void chain_finish(dev_inflight *f, bool use_status, int status) {
  kernel_state *k = NULL;
  for (dev_inflight *g = f; g != NULL; g = g->batch_next)
    k = g->owner ? g->owner : k; /* finishing detaches them */
  while (f != NULL) {
    dev_inflight *next = f->batch_next; /* f may be freed below */
    if (f->owner)
      inflight_finish(f, use_status ? status : atomic_load(&f->early_status));
    inflight_unref(f);
    f = next;
  }
  if (k)
    pump(k);
}

/* Off the loop (a backend thread, a worker): the clients' futures complete here, without
 * waiting for the loop; its bookkeeping follows (completing them again there is a no-op).
 * A future a waiter's own wait completed first (wait_help.h) keeps that answer, and so does
 * its record: the op ends as its future said. */
static void chain_complete_early(dev_inflight *head, int status) {
  for (dev_inflight *f = head; f != NULL; f = f->batch_next) {
    int answer = status;
    if (f->early && accel_future_complete(f->early, status, NULL, NULL) == ACCEL_EALREADY)
      answer = accel_future_poll(f->early);
    int none = EARLY_NONE; /* past_deadline may have answered first: its answer stands */
    if (!atomic_compare_exchange_strong(&f->early_status, &none, answer))
      answer = none;
    early_call_run(f, answer);
  }
}

static void on_callback_done(accel_task *task) {
  chain_finish((dev_inflight *)task, false, 0);
}

/* On a backend thread, after the work of every record of the chain. */
static void host_callback(void *arg, int status) {
  dev_inflight *head = arg;
  chain_complete_early(head, status);
  dev_world_post(head->world, &head->post, on_callback_done);
}

/* Undoes a chain's arming: its references dropped, each record to be armed again by the
 * watchdog (`rearm`) or not at all (the actor ends). */
static void chain_drop(dev_inflight *head, bool rearm) {
  while (head != NULL) {
    dev_inflight *next = head->batch_next;
    head->batch_next = NULL;
    if (rearm)
      head->armed = false;
    drop_early(head);
    inflight_unref(head);
    head = next;
  }
}

/* The futures of the chain whose clients wait for them now get a wait of their own, where the
 * backend's host functions come late (wait_help.h). */
static void offer_wait_help(kernel_state *k, dev_inflight *head) {
  accel_future *futs[DEV_WAIT_HELP_MAX];
  uint32_t n = 0;
  for (dev_inflight *f = head; f != NULL && n < DEV_WAIT_HELP_MAX; f = f->batch_next)
    if (f->early && rt_future_has_helper_waiting(f->early))
      futs[n++] = f->early;
  if (n > 0)
    dev_wait_help_offer(k->node->be, k->node->dev, k->queue, futs, n);
}

static int arm_callback_chain(kernel_state *k, dev_inflight *head) {
  head->world_rt = accel_actor_runtime(k->self);
  if (k->node->be->late_callbacks)
    offer_wait_help(k, head);
  /* host_notify does not hold the queue until the callback returns (a GPU would idle). */
  const be_ops *be = k->node->be;
  int rc = (be->host_notify ? be->host_notify : be->host_callback)(k->queue, host_callback, head);
  if (rc == ACCEL_ENOMEM)
    return rc;
  if (rc != 0)
    host_callback(head, rc); /* finishes them with the error, through the loop */
  return 0;
}

/* ---- sync: a blocking wait on the chain's last event ----
 * Run by a worker, or by a client thread already waiting on one of the chain's futures with
 * no timeout (rt_future_offer_help): that client then learns of the completion in its own
 * thread, with no worker to wake and no wake-up back from it. Whoever claims the job first
 * runs it; a job a committed waiter will run is not given to a worker at all. */
enum { CLAIM_NONE, CLAIM_WORKER, CLAIM_WAITER, CLAIM_NOBODY };

typedef struct sync_job {
  rt_helper help; /* first: the futures' waiters see this */
  atomic_int claim;
  dev_inflight *head; /* the chain; its completion references go with the claim */
} sync_job;

static bool job_claim(sync_job *j, int who) {
  int none = CLAIM_NONE;
  return atomic_compare_exchange_strong(&j->claim, &none, who);
}

/* Off the loop: the last record's event covers the chain (an in-order queue). */
static int chain_sync(dev_inflight *head) {
  dev_inflight *last = head;
  while (last->batch_next)
    last = last->batch_next;
  int rc = last->be->event_sync(last->event);
  chain_complete_early(head, rc);
  return rc;
}

/* On a client's thread waiting on one of the chain's futures; the loop's bookkeeping follows
 * as a callback's would. */
static void job_help(rt_helper *h) {
  sync_job *j = (sync_job *)h;
  if (!job_claim(j, CLAIM_WAITER))
    return;
  dev_inflight *head = j->head;
  chain_sync(head);
  dev_world_post(head->world, &head->post, on_callback_done);
}

static void on_job_dropped(accel_task *task) {
  chain_drop((dev_inflight *)task, true);
}

/* The last reference. A job nobody claimed was left to waiters whose futures completed
 * another way (the actor ended, a deadline): the chain's references go on the loop. */
static void job_free(rt_helper *h) {
  sync_job *j = (sync_job *)h;
  if (job_claim(j, CLAIM_NOBODY))
    dev_world_post(j->head->world, &j->head->post, on_job_dropped);
  rt_free(j);
}

static int sync_work(void *data) {
  sync_job *j = data;
  return job_claim(j, CLAIM_WORKER) ? chain_sync(j->head) : 0; /* else a waiter runs it */
}

/* On the loop, the worker's answer: the chain is finished here if the worker ran it. */
static void sync_answer(sync_job *j, int status) {
  if (atomic_load(&j->claim) == CLAIM_WORKER)
    chain_finish(j->head, true, status);
  rt_helper_release(&j->help);
}

static void sync_drop(void *data) { /* the actor ended before the worker's answer came back */
  sync_job *j = data;
  if (job_claim(j, CLAIM_NOBODY) || atomic_load(&j->claim) == CLAIM_WORKER)
    chain_drop(j->head, false);
  rt_helper_release(&j->help);
}

/* Offers the job to the chain's futures; true if a waiter is committed to run it. */
static bool offer_to_waiters(sync_job *j) {
  bool committed = false;
  for (dev_inflight *f = j->head; f != NULL; f = f->batch_next)
    if (f->early && rt_future_offer_help(f->early, &j->help))
      committed = true;
  return committed;
}

static int arm_sync_chain(kernel_state *k, dev_inflight *head) {
  sync_job *j = rt_malloc(sizeof *j);
  if (j == NULL)
    return ACCEL_ENOMEM;
  head->world_rt = accel_actor_runtime(k->self);
  j->help.run = job_help;
  j->help.free = job_free;
  atomic_init(&j->help.refs, 1); /* the loop's, then the worker's */
  atomic_init(&j->claim, CLAIM_NONE);
  j->head = head;
  if (offer_to_waiters(j)) {
    rt_helper_release(&j->help); /* a waiter runs it: no worker */
    return 0;
  }
  int rc = accel_work_submit(k->self, sync_work, j, sync_drop, DEV_MSG_SYNCED);
  if (rc == 0)
    return 0; /* the loop's reference went with the worker */
  if (!job_claim(j, CLAIM_NOBODY))
    rc = 0; /* a waiter came meanwhile and runs it: armed after all */
  rt_helper_release(&j->help);
  return rc;
}

enum { BURST_CALLBACK = 0, BURST_SYNC = 1 };

static int arm_chain(kernel_state *k, dev_inflight *head, int b) {
  return b == BURST_SYNC ? arm_sync_chain(k, head) : arm_callback_chain(k, head);
}

/* ---- completions of a burst, batched ----
 * Where errors are sticky for the device (be->sticky_errors), one host function (callback) or
 * one worker's wait (sync) behind the last task of a burst completes every task of it: an
 * in-order queue gets there once all have run. A client pipelining small ops then pays one per
 * burst instead of one per op. The burst is what the actor submits before its own
 * DEV_MSG_ARM_BATCH, sent behind the first, comes up. Each record of a burst holds a
 * reference for its completion. */

static void arm_bursts(kernel_state *k) {
  k->batch_msg = false;
  for (int b = BURST_CALLBACK; b <= BURST_SYNC; b++) {
    dev_inflight *head = k->burst[b].head;
    k->burst[b].head = k->burst[b].tail = NULL;
    if (head == NULL)
      continue;
    int rc = arm_chain(k, head, b);
    if (rc == ACCEL_ENOMEM)
      chain_drop(head, true);
    else if (rc != 0)
      chain_finish(head, true, rc); /* as the callback would have */
  }
}

/* Adds f to the burst of its strategy: 0, or RT_NOT_HANDLED if it is armed alone. A task whose
 * client waits for it already, with no burst open, is armed at once, in the turn that submitted
 * it, rather than a turn later with a burst that a waiting client will not add to (its wait,
 * or the host function's, starts sooner: on an H200, tiny-op sync 0.80-0.87 of raw launch +
 * sync in three runs, against 0.67-0.82). */
static int burst_join(kernel_state *k, dev_inflight *f, int b) {
  if (!k->node->be->sticky_errors)
    return RT_NOT_HANDLED;
  if (k->burst[b].head == NULL && f->early != NULL && rt_future_has_helper_waiting(f->early))
    return RT_NOT_HANDLED;
  if (!k->batch_msg) {
    accel_msg m = {.type = DEV_MSG_ARM_BATCH};
    if (accel_tell(accel_actor_runtime(k->self), accel_self(k->self), &m) != 0)
      return RT_NOT_HANDLED; /* a full mailbox: this one alone */
    k->batch_msg = true;
  }
  if (k->burst[b].tail)
    k->burst[b].tail->batch_next = f;
  else
    k->burst[b].head = f;
  k->burst[b].tail = f;
  return 0;
}

/* Arms f's completion by itself, or with its burst. */
static int arm_one(kernel_state *k, dev_inflight *f, int b) {
  take_early(f);
  f->refs++; /* the completion's, whichever way it comes */
  f->batch_next = NULL;
  if (burst_join(k, f, b) == 0)
    return 0;
  int rc = arm_chain(k, f, b);
  if (rc != 0) { /* undone: the watchdog arms it again (ENOMEM), or track fails it */
    f->refs--;
    drop_early(f);
  }
  return rc;
}

static void arm_poll(kernel_state *k) {
  if (!k->poll_armed && accel_timer_start(k->self, 0, 0, DEV_MSG_POLL, 0, NULL) == 0)
    k->poll_armed = true;
}

static void arm_watchdog(kernel_state *k) {
  if (!k->watchdog_armed &&
      accel_timer_start(k->self, WATCHDOG_MS, 0, DEV_MSG_WATCHDOG, 0, NULL) == 0)
    k->watchdog_armed = true;
}

/* ---- putting a task on the queue ---- */

/* An event on d's queue, made when a task of another queue first needs to wait for d. It is
 * recorded now, after d: a later point of d's queue than d's own end, so waiting on it is
 * safe (at worst a little longer than needed), and work that nobody waits for across queues
 * costs no event at all. */
static int event_after(kernel_state *k, dev_task *d, be_event **out) {
  if (d->event == NULL) {
    be_queue *q = k->node->queue[d->qclass];
    const be_ops *be = k->node->be;
    if (q == NULL)
      return ACCEL_EDEVLOST; /* d's queue is gone with its kernel actor */
    int rc = be->event_create(k->node->dev, &d->event);
    if (rc != 0) /* out of memory is this op's error, not the device's */
      return rc;
    rc = be->event_record(d->event, q);
    if (rc != 0) {
      be->event_destroy(d->event);
      d->event = NULL;
      return rc;
    }
  }
  *out = d->event;
  return 0;
}

static int wait_for_same_node_deps(kernel_state *k, dev_task *t) {
  for (uint32_t i = 0; i < t->nsame; i++) {
    dev_task *d = t->same_node_deps[i];
    if (d->qclass == k->qclass)
      continue; /* same queue: in order already */
    be_event *ev;
    int rc = event_after(k, d, &ev);
    if (rc == 0)
      rc = k->node->be->queue_wait(k->queue, ev);
    if (rc != 0)
      return rc;
  }
  return 0;
}

static accel_completion strategy_of(kernel_state *k, dev_task *t) {
  accel_completion how = t->completion ? t->completion : k->node->completion;
  return how ? how : ACCEL_COMPLETION_CALLBACK;
}

/* Everything the task's completion needs that may fail for lack of memory, made before the
 * work is submitted: once it is, the task may not complete before the work does (the work
 * may still read the caller's memory). sync and poll complete through an event of their
 * own; callbacks need none. */
static int track_prepare(kernel_state *k, dev_task *t, dev_inflight **out) {
  dev_inflight *f = inflight_alloc(k->node->world);
  if (f == NULL)
    return ACCEL_ENOMEM;
  int64_t asked = t->call ? t->call->op.h.deadline_ms : 0;
  uint64_t deadline = asked > 0 ? (uint64_t)asked : DEFAULT_DEADLINE_MS;
  uint64_t now = rt_mono_ns(); /* the work is submitted right after: its start too */
  *f = (dev_inflight){.owner = k,
                      .task = t,
                      .be = k->node->be,
                      .how = strategy_of(k, t),
                      .deadline_ms = now / 1000000u + deadline,
                      .t_submit_ns = now,
                      .refs = 1,
                      .world = k->node->world};
  atomic_init(&f->early_status, EARLY_NONE);
  atomic_init(&f->early_call_state, CALL_EARLY_IDLE);
  int rc = f->how == ACCEL_COMPLETION_CALLBACK ? 0
                                               : k->node->be->event_create(k->node->dev, &f->event);
  if (rc != 0) {
    inflight_unref(f); /* back to the pool */
    return rc;
  }
  *out = f;
  return 0;
}

/* Starts the completion of submitted work: 0, ACCEL_ENOMEM with nothing changed (the watchdog
 * tries again: the work is queued, so the task must wait for it), or another error. */
static int arm(kernel_state *k, dev_inflight *f) {
  int rc = f->event ? k->node->be->event_record(f->event, k->queue) : 0;
  if (rc != 0)
    return rc;
  if (f->how == ACCEL_COMPLETION_CALLBACK)
    rc = arm_one(k, f, BURST_CALLBACK);
  else if (f->how == ACCEL_COMPLETION_SYNC)
    rc = arm_one(k, f, BURST_SYNC);
  if (rc != 0)
    return rc;
  f->armed = true;
  if (f->how == ACCEL_COMPLETION_POLL) {
    k->polled++;
    arm_poll(k);
  }
  return 0;
}

/* Tracks submitted work; true if it has finished already (with an error). */
static bool track(kernel_state *k, dev_inflight *f) {
  rt_list_push_front(&k->inflight, &f->link);
  k->on_queue++;
  dev_node_busy_begin(k->node, f->t_submit_ns);
  log_large_transfer(k, f->task, 0, 0);
  if (k->node->world->trace)
    dev_trace_submitted(k->node->world, f->task, f->t_submit_ns);
  int rc = arm(k, f);
  arm_watchdog(k);
  if (rc == ACCEL_ENOMEM) {
    accel_log(ACCEL_LOG_WARN, "device",
              "device %d: out of memory arming a completion: "
              "trying again",
              k->node->device);
    return false;
  }
  if (rc != 0) {
    inflight_finish(f, rc); /* the work is queued but nothing would report it: fail it */
    return true;
  }
  return false;
}

static void run_task(kernel_state *k, dev_task *t) {
  if (t->node_gen != k->node->generation) {
    leave(k, t);
    dev_task_complete(t, ACCEL_EDEVLOST);
    return;
  }
  dev_inflight *f = NULL;
  int rc = track_prepare(k, t, &f);
  if (rc == 0)
    rc = wait_for_same_node_deps(k, t);
  if (rc == 0)
    rc = dev_exec(t, k->queue);
  if (rc != 0) {
    if (f)
      inflight_unref(f);
    leave(k, t);
    dev_task_complete(t, rc);
    if (rc == ACCEL_EDEVLOST)
      report_fault(k);
    return;
  }
  if (!track(k, f))
    dev_task_submitted(t);
}

/* ---- messages ---- */

/* The first in-flight record, the one after f; NULL past the end. */
static dev_inflight *inflight_first(kernel_state *k) {
  return RT_LIST_FIRST(&k->inflight, dev_inflight, link);
}

static dev_inflight *inflight_next(kernel_state *k, dev_inflight *f) {
  return RT_LIST_NEXT(f, &k->inflight, dev_inflight, link);
}

static void poll_events(kernel_state *k) {
  k->poll_armed = false;
  for (dev_inflight *f = inflight_first(k), *next; f != NULL; f = next) {
    next = inflight_next(k, f); /* finishing f unlinks it */
    if (f->how == ACCEL_COMPLETION_POLL && f->armed) {
      int rc = k->node->be->event_query(f->event);
      if (rc != RT_PENDING)
        inflight_finish(f, rc);
    }
  }
  if (k->polled && accel_timer_start(k->self, 0, 0, DEV_MSG_POLL, 0, NULL) == 0)
    k->poll_armed = true;
}

/* Work past its deadline that the backend can stop: the op fails with ACCEL_ETIMEDOUT and
 * the device gets the fault treatment (its context is destroyed, which is what stops a
 * kernel; the other work there fails with ACCEL_EDEVLOST). Ops of this queue after it could
 * never run otherwise. */
static void past_deadline(kernel_state *k, dev_inflight *f) {
  accel_log(ACCEL_LOG_WARN, "device", "device %d: an op ran past its deadline: resetting",
            k->node->device);
  /* Its answer first: a thread waiting on the device (a worker, or a client's own wait) would
   * hear of the reset and report ACCEL_EDEVLOST before the loop could say why. Unless the
   * work's completion answered just now (its reply may have left): it finishes as that said. */
  int none = EARLY_NONE;
  if (!atomic_compare_exchange_strong(&f->early_status, &none, ACCEL_ETIMEDOUT))
    return;
  if (f->early)
    accel_future_complete(f->early, ACCEL_ETIMEDOUT, NULL, NULL);
  k->node->be->abort(k->node->dev);
  k->node->aborted = true; /* its close need not wait for builds stuck behind the work */
  inflight_finish(f, ACCEL_ETIMEDOUT);
  report_fault(k);
}

static void watchdog(kernel_state *k) {
  k->watchdog_armed = false;
  uint64_t now = rt_mono_ms();
  for (dev_inflight *f = inflight_first(k), *next; f != NULL; f = next) {
    next = inflight_next(k, f); /* finishing f unlinks it */
    if (!f->armed) {            /* its work is queued: it waits for memory to arm its completion */
      int rc = arm(k, f);
      if (rc != 0 && rc != ACCEL_ENOMEM)
        inflight_finish(f, rc);
      continue;
    }
    if (now >= f->deadline_ms && atomic_load(&f->early_status) == EARLY_NONE) {
      /* (an answered record's completion is on its way to the loop: it finishes there) */
      int rc = f->event ? k->node->be->event_query(f->event) : RT_PENDING;
      if (rc == RT_PENDING && k->node->be->abort)
        past_deadline(k, f); /* still running: stop it (a user kernel that never ends) */
      else
        inflight_finish(f, rc == RT_PENDING || rc == 0 ? ACCEL_EDEVLOST : rc);
    }
  }
  if (!rt_list_empty(&k->inflight))
    arm_watchdog(k);
}

static void task_drop(void *data) {
  dev_task_complete(data, ACCEL_EDEVLOST); /* the kernel actor ended before running it */
}

static void overflow_drain(kernel_state *k);

static int kernel_handle(kernel_state *k, accel_msg *msg);

static uint64_t now_ns(const kernel_state *k) {
  return rt_turn_ns(k->node->world->rt);
}

static void leave(kernel_state *k, const dev_task *t) {
  (void)dev_lanes_leave(&k->waiting, t, now_ns(k));
}

static uint32_t depth(const kernel_state *k) {
  return dev_lanes_depth(&k->waiting, MAX_ON_QUEUE, FAIR_ON_QUEUE, LIGHT_ON_QUEUE, now_ns(k));
}

/* Puts waiting tasks on the queue while there is room, a session at a time. */
static void pump(kernel_state *k) {
  while (k->waiting.waiting > 0 && k->on_queue < depth(k) && !k->stopping)
    run_task(k, dev_lanes_pop(&k->waiting));
}

static int kernel_receive(accel_actor *self, void *state, accel_msg *msg) {
  kernel_state *k = state;
  if (k->fault_pending && msg->type != DEV_MSG_FAULT_RETRY)
    report_fault(k); /* its timer may be missing (out of memory): any message retries it */
  int rc = kernel_handle(k, msg);
  pump(k);
  overflow_drain(k);
  return rc;
}

static int kernel_handle(kernel_state *k, accel_msg *msg) {
  switch (msg->type) {
  case DEV_MSG_RUN: {
    dev_task *t = msg->data;
    msg->data = NULL;
    (void)dev_lanes_enter(&k->waiting, t, now_ns(k));
    if (k->on_queue < depth(k) && k->waiting.waiting == 0)
      run_task(k, t);
    else
      dev_lanes_push(&k->waiting, t);
    return 0;
  }
  case DEV_MSG_POLL:
    poll_events(k);
    return 0;
  case DEV_MSG_SYNCED: {
    sync_job *j = msg->data;
    msg->data = NULL;
    sync_answer(j, (int)(int64_t)msg->arg);
    return 0;
  }
  case DEV_MSG_WATCHDOG:
    watchdog(k);
    return 0;
  case DEV_MSG_FAULT_RETRY:
    if (k->fault_pending)
      report_fault(k);
    return 0;
  case DEV_MSG_ARM_BATCH:
    arm_bursts(k);
    return 0;
  default:
    return 0;
  }
}

static int kernel_start(accel_actor *self, void *state, void *arg) {
  kernel_state *k = state;
  struct dev_kernel_spawn *ka = arg;
  rt_list_init(&k->inflight); /* first: the stop hook runs even if the start fails */
  k->node = ka->node;
  k->qclass = ka->qclass;
  k->self = self;
  k->generation = k->node->generation;
  int rc = k->node->be->queue_create(k->node->dev, &k->queue);
  if (rc != 0)
    return rc;
  k->node->queue[k->qclass] = k->queue;
  k->node->kernel[k->qclass] = accel_self(self);
  k->node->kstate[k->qclass] = k;
  return 0;
}

static void kernel_stop(accel_actor *self, void *state) {
  kernel_state *k = state;
  k->stopping = true;
  if (k->node && k->node->kstate[k->qclass] == k)
    k->node->kstate[k->qclass] = NULL;
  for (dev_task *t; (t = dev_lanes_pop(&k->waiting)) != NULL;) {
    leave(k, t);
    dev_task_complete(t, ACCEL_EDEVLOST);
  }
  for (int b = BURST_CALLBACK; b <= BURST_SYNC; b++) { /* never armed: nothing will come */
    chain_drop(k->burst[b].head, false);
    k->burst[b].head = k->burst[b].tail = NULL;
  }
  while (!rt_list_empty(&k->inflight)) {
    dev_inflight *f = inflight_first(k);
    int early = atomic_load(&f->early_status); /* done, its future told so: keep to that */
    inflight_finish(f, early == EARLY_NONE ? ACCEL_EDEVLOST : early);
  }
  if (k->queue) {
    k->node->be->queue_destroy(k->queue); /* calls the remaining host callbacks */
    k->node->queue[k->qclass] = NULL;
  }
  k->node->kernel[k->qclass] = ACCEL_REF_NONE;
}

const accel_behavior dev_kernel_behavior = {
    .name = "kernel",
    .state_size = sizeof(kernel_state),
    .start = kernel_start,
    .receive = kernel_receive,
    .stop = kernel_stop,
};

static void overflow_push(struct dev_overflow *o, dev_task *t) {
  t->overflow_next = NULL;
  if (o->tail)
    o->tail->overflow_next = t;
  else
    o->head = t;
  o->tail = t;
}

static int send_run(dev_task *t) {
  accel_msg m = {.type = DEV_MSG_RUN, .data = t, .drop = task_drop};
  return accel_tell(t->world->rt, t->node->kernel[t->qclass], &m);
}

/* Moves waiting overflow tasks into the mailbox while it has room (in order). */
static void overflow_drain(kernel_state *k) {
  struct dev_overflow *o = &k->node->overflow[k->qclass];
  while (o->head) {
    dev_task *t = o->head;
    if (send_run(t) != 0)
      return;
    o->head = t->overflow_next;
    if (o->head == NULL)
      o->tail = NULL;
  }
}

void dev_overflow_fail(dev_node *node) {
  for (int q = 0; q < DEV_Q_COUNT; q++) {
    struct dev_overflow *o = &node->overflow[q];
    while (o->head) {
      dev_task *t = o->head;
      o->head = t->overflow_next;
      dev_task_complete(t, ACCEL_EDEVLOST);
    }
    o->tail = NULL;
  }
}

void dev_kernel_dispatch(dev_task *t) {
  dev_node *node = t->node;
  t->dispatched = true;
  if (node->state != DEV_NODE_SERVING || t->node_gen != node->generation) {
    dev_task_complete(t, ACCEL_EDEVLOST);
    return;
  }
  struct dev_overflow *o = &node->overflow[t->qclass];
  int rc = o->head ? ACCEL_EBUSY : send_run(t);
  if (rc == ACCEL_EBUSY)
    overflow_push(o, t); /* the kernel actor takes it when its mailbox has room */
  else if (rc != 0)
    dev_task_complete(t, ACCEL_EDEVLOST);
}

/* ---- reports ---- */

int dev_work_in_progress(const dev_world *w, uint64_t now_ns, uint64_t min_ns,
                         dev_work_report out[], int max) {
  int n = 0;
  for (int i = 1; i < w->nnodes; i++)
    for (int q = 0; q < DEV_Q_COUNT; q++) {
      kernel_state *k = w->nodes[i].kstate[q];
      if (k == NULL)
        continue;
      /* the list is newest first: walk it all, it holds at most MAX_ON_QUEUE records */
      for (dev_inflight *f = inflight_first(k); f != NULL && n < max; f = inflight_next(k, f)) {
        if (f->task == NULL || now_ns < f->t_submit_ns + min_ns)
          continue;
        const dev_task *t = f->task;
        out[n++] = (dev_work_report){
            .device = w->nodes[i].device,
            .queue = dev_queue_names[q],
            .what = dev_task_label(t),
            .bytes = t->kind == DEV_TASK_TRANSFER && t->buf[0] ? t->buf[0]->bytes : 0,
            .seconds = (double)(now_ns - f->t_submit_ns) * 1e-9,
            .client = dev_task_client(t),
        };
      }
    }
  return n;
}
