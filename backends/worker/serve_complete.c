/* Completions in the worker (serve.h): how acceld hears that work before a point of a queue
 * is done. Two ways:
 *   - the completer: on backends whose host functions come late (CUDA's and OpenCL's reach
 *     the host through a driver thread, tens of microseconds after the work), an event is
 *     recorded behind the work and a thread of the queue's own waits on it (event_sync) and
 *     sends the completion: the one a client waits for arrives microseconds after the GPU;
 *   - a host function (host_callback), where those are quick (the cpu backend), and for
 *     completions that hold their queue until acceld's function has run (an ack).
 * Completions of one queue reach acceld in the queue's order either way: a holding host
 * function first waits for the completer to have sent everything queued before it.
 *
 * Events watched: a completion of a queue that waited for another queue's event must reach
 * acceld after that event's (acceld would otherwise see the waiting work done and the event
 * not): the first completion after a wait sends every watched event that is complete. CUDA
 * forbids driver calls inside its host functions, so there the poller thread queries. */
#include <stdlib.h>
#include <time.h>

#include "backends/worker/serve.h"
#include "runtime/deadline.h"
#include "runtime/spin.h"
#include "runtime/status.h"

/* The link's completions and the events behind them, where acceld reads them (/metrics). */
static void count_done(uint64_t completions, uint64_t events) {
  bw_done_counts *d = bw_rings_done_counts(&ws.rings);
  if (d == NULL)
    return; /* a link without rings (tests') */
  atomic_fetch_add_explicit(&d->completions, completions, memory_order_relaxed);
  atomic_fetch_add_explicit(&d->events, events, memory_order_relaxed);
}

/* ---- watched event records ---- */

typedef struct ws_evrec {
  uint64_t tag;
  be_event *e; /* NULL once the event is destroyed */
  ws_queue *q; /* the queue it was recorded on, and its place among q's completions */
  uint64_t seq;
  bool sent;
  struct ws_evrec *next;
} ws_evrec;

static void watch(uint64_t tag, be_event *e, ws_queue *q, uint64_t seq) {
  ws_evrec *r = malloc(sizeof *r);
  if (r == NULL)
    return; /* its own completion reports it, later */
  pthread_mutex_lock(&ws.mu);
  *r = (ws_evrec){tag, e, q, seq, false, ws.evrecs};
  ws.evrecs = r;
  pthread_mutex_unlock(&ws.mu);
}

void ws_event_forget(be_event *e) {
  pthread_mutex_lock(&ws.mu);
  for (ws_evrec *r = ws.evrecs; r; r = r->next)
    if (r->e == e)
      r->e = NULL;
  pthread_mutex_unlock(&ws.mu);
}

/* Whether every completion of q before `seq` has reached acceld: a record's completion must
 * not overtake them (a read's data is copied out when its own completion comes). */
static bool in_turn(ws_queue *q, uint64_t seq) {
  pthread_mutex_lock(&q->cmu);
  bool ok = q->sent + 1 >= seq;
  pthread_mutex_unlock(&q->cmu);
  return ok;
}

/* Sends the completion of every watched record whose event is complete now, in its queue's
 * turn. Under mu. */
static void flush_events(void) {
  for (ws_evrec *r = ws.evrecs; r; r = r->next) {
    int rc = r->sent || r->e == NULL || !in_turn(r->q, r->seq) ? RT_PENDING
                                                               : ws.be->event_query(r->e);
    if (rc != RT_PENDING) {
      r->sent = true;
      ws_done(r->tag, rt_status_public(rc)); /* to acceld, over the wire */
    }
  }
}

/* Under mu: a watched record of another queue than `self` whose event is complete but whose
 * queue has completions before it still on their way: its queue and place; false if none. */
static bool complete_out_of_turn(const ws_queue *self, ws_queue **q, uint64_t *seq) {
  for (ws_evrec *r = ws.evrecs; r; r = r->next)
    if (!r->sent && r->e != NULL && r->q != self && !in_turn(r->q, r->seq) &&
        ws.be->event_query(r->e) != RT_PENDING) {
      *q = r->q;
      *seq = r->seq;
      return true;
    }
  return false;
}

/* Waits until q's completions before seq are sent, or FLUSH_WAIT_MS have passed. */
#define FLUSH_WAIT_MS 20
static bool wait_turn_for(ws_queue *q, uint64_t seq) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until); /* q->ccv's clock */
  until.tv_nsec += FLUSH_WAIT_MS * 1000000L;
  until.tv_sec += until.tv_nsec / 1000000000L;
  until.tv_nsec %= 1000000000L;
  pthread_mutex_lock(&q->cmu);
  int rc = 0;
  while (q->sent + 1 < seq && rc == 0)
    rc = pthread_cond_timedwait(&q->ccv, &q->cmu, &until);
  bool ok = q->sent + 1 >= seq;
  pthread_mutex_unlock(&q->cmu);
  return ok;
}

/* From `self`'s completer (never a host function, never the poller: those must not wait on
 * another queue): sends every watched event that is complete, waiting for the queues whose
 * earlier completions are still on their way (their completers are at it), so that nothing
 * this queue waited for reaches acceld after this queue's own completion. The wait is bounded:
 * two queues waiting for each other's events would otherwise wait for good (then the order is
 * the one that comes, as before). */
static void flush_in_turn(const ws_queue *self) {
  ws_queue *q;
  uint64_t seq;
  pthread_mutex_lock(&ws.mu);
  flush_events();
  while (complete_out_of_turn(self, &q, &seq)) {
    pthread_mutex_unlock(&ws.mu);
    bool turned = wait_turn_for(q, seq);
    pthread_mutex_lock(&ws.mu);
    flush_events();
    if (!turned)
      break;
  }
  pthread_mutex_unlock(&ws.mu);
}

/* The record's own completion: sent unless a flush sent it. */
static void event_done(uint64_t tag, int status) {
  pthread_mutex_lock(&ws.mu);
  bool sent = false;
  for (ws_evrec **p = &ws.evrecs; *p; p = &(*p)->next)
    if ((*p)->tag == tag) {
      ws_evrec *r = *p;
      sent = r->sent;
      *p = r->next;
      free(r);
      break;
    }
  if (!sent)
    ws_done(tag, status);
  pthread_mutex_unlock(&ws.mu);
}

static void send_done(uint64_t tag, bool event, int status) {
  if (event)
    event_done(tag, status);
  else
    ws_done(tag, status);
}

/* ---- the poller (flushes asked from inside a host function) ---- */

static void *poller(void *arg) {
  ws_self = arg;
  pthread_setname_np(pthread_self(), "accel-dev-poll"); /* seen in top -H, gdb, perf */
  pthread_mutex_lock(&ws.mu);
  for (;;) {
    while (ws.poll_done == ws.poll_asked)
      pthread_cond_wait(&ws.poll_cv, &ws.mu);
    uint64_t target = ws.poll_asked;
    flush_events();
    ws.poll_done = target;
    pthread_cond_broadcast(&ws.poll_cv);
  }
  return NULL;
}

static void flush_through_poller(void) {
  pthread_mutex_lock(&ws.mu);
  uint64_t want = ++ws.poll_asked;
  pthread_cond_broadcast(&ws.poll_cv);
  while (ws.poll_done < want)
    pthread_cond_wait(&ws.poll_cv, &ws.mu);
  pthread_mutex_unlock(&ws.mu);
}

bool ws_completions_start(ws_state *link) {
  pthread_t t;
  return pthread_create(&t, NULL, poller, link) == 0;
}

/* ---- host functions ---- */

typedef struct ws_done_arg {
  uint64_t tag;
  int error; /* a submission's error the completion reports */
  bool hold, event, flush;
  ws_queue *q;
  uint64_t seq; /* its place among q's completions: those before it are sent first */
} ws_done_arg;

/* Waits until acceld acks `tag` (its host function ran). */
static void wait_ack(uint64_t tag) {
  pthread_mutex_lock(&ws.mu);
  for (;;) {
    for (size_t i = 0; i < ws.nacked; i++)
      if (ws.acked[i] == tag) {
        ws.acked[i] = ws.acked[--ws.nacked];
        pthread_mutex_unlock(&ws.mu);
        return;
      }
    pthread_cond_wait(&ws.cv, &ws.mu);
  }
}

static void wait_turn(ws_queue *q, uint64_t seq) {
  pthread_mutex_lock(&q->cmu);
  while (q->sent + 1 < seq)
    pthread_cond_wait(&q->ccv, &q->cmu);
  pthread_mutex_unlock(&q->cmu);
}

/* q's completions up to seq have reached acceld. */
static void sent_up_to(ws_queue *q, uint64_t seq) {
  pthread_mutex_lock(&q->cmu);
  if (q->sent < seq)
    q->sent = seq;
  pthread_cond_broadcast(&q->ccv);
  pthread_mutex_unlock(&q->cmu);
}

static void complete_as_link(ws_done_arg d, int status);

/* A backend's thread, perhaps a link's own calling in (a fault's inline callbacks): `ws` is the
 * completion's link while it runs, and the caller's again after. */
static void on_complete(void *arg, int status) {
  ws_done_arg d = *(ws_done_arg *)arg;
  free(arg);
  ws_state *was = ws_self;
  ws_self = d.q->link;
  complete_as_link(d, status);
  ws_self = was;
}

static void complete_as_link(ws_done_arg d, int status) {
  if (status != 0) {
    /* The backend failed it (a fault, a queue destroyed): perhaps from inside a call that
     * holds the backend's locks (CUDA's fault handling calls them), where waiting for the
     * completer or the poller, who need those locks, would never end. Order no longer
     * matters: everything after a fault fails alike. */
    send_done(d.tag, d.event, status);
    sent_up_to(d.q, d.seq);
    return;
  }
  wait_turn(d.q, d.seq); /* what came before it (the completer's) reaches acceld first */
  if (d.flush)
    flush_through_poller();
  send_done(d.tag, d.event, d.error);
  sent_up_to(d.q, d.seq);
  if (d.hold && d.error == 0)
    wait_ack(d.tag); /* acceld acks those that ran with 0 */
}

static void by_host_function(ws_queue *q, uint64_t tag, int error, bool hold, bool event,
                             uint64_t seq) {
  count_done(1, 0);
  ws_done_arg *d = malloc(sizeof *d);
  int rc = ACCEL_ENOMEM;
  if (d != NULL) {
    *d = (ws_done_arg){tag, error, hold, event, q->waited, q, seq};
    q->waited = false;
    rc = ws.be->host_callback(q->q, on_complete, d);
  }
  if (rc != 0) { /* the queue cannot say when: at once, in its turn as far as can be */
    free(d);
    send_done(tag, event, error ? error : rc);
    sent_up_to(q, seq);
  }
}

/* ---- the completer ---- */

/* cmu held: nothing to send, nor told to stop. */
static bool idle(const ws_queue *q) {
  return q->head == NULL && !q->stop;
}

/* cmu held, the queue empty: polls `pushed` for the spin time with cmu released (true if
 * something came). A completer that is not a waiter of ccv costs the link's thread, which
 * submits every client's work, no futex wake when it queues the next completion. */
static bool poll_for_work(ws_queue *q) {
  uint64_t spin = rt_spin_ns();
  if (spin == 0)
    return false;
  uint64_t seen = atomic_load(&q->pushed);
  pthread_mutex_unlock(&q->cmu);
  uint64_t until = rt_mono_ns() + spin;
  bool got = false;
  for (uint32_t looks = 1; !got; looks++) {
    got = atomic_load_explicit(&q->pushed, memory_order_acquire) != seen;
    if (!got && looks % 64 == 0 && rt_mono_ns() >= until)
      break;
    rt_cpu_relax();
  }
  pthread_mutex_lock(&q->cmu);
  return got;
}

static void *completer(void *arg) {
  ws_queue *q = arg;
  ws_self = q->link;
  pthread_setname_np(pthread_self(), "accel-dev-done"); /* seen in top -H, gdb, perf */
  int group_st = 0; /* the last event's: what a completion it covered reports */
  pthread_mutex_lock(&q->cmu);
  for (;;) {
    while (idle(q) && !poll_for_work(q) && idle(q)) /* again: cmu was let go */
      pthread_cond_wait(&q->ccv, &q->cmu);
    ws_cdone *c = q->head;
    if (c == NULL)
      break;
    q->head = c->next;
    if (q->head == NULL)
      q->tail = NULL;
    pthread_mutex_unlock(&q->cmu);
    if (c->e)
      group_st = ws.be->event_sync(c->e);
    int st = c->e || c->covered ? group_st : 0;
    if (c->flush)
      flush_in_turn(q); /* not a host function: it may query the driver, and wait */
    send_done(c->tag, c->event, st == 0 ? c->error : st);
    pthread_mutex_lock(&q->cmu);
    if (q->sent < c->seq)
      q->sent = c->seq;
    if (c->e && q->npool < q->pool_cap)
      q->pool[q->npool++] = c->e;
    else if (c->e)
      ws.be->event_destroy(c->e);
    free(c);
    pthread_cond_broadcast(&q->ccv);
  }
  pthread_mutex_unlock(&q->cmu);
  return NULL;
}

/* An event of the queue's device from the pool, or a new one. */
static be_event *event_for(ws_queue *q) {
  be_event *e = NULL;
  pthread_mutex_lock(&q->cmu);
  if (q->npool > 0)
    e = q->pool[--q->npool];
  pthread_mutex_unlock(&q->cmu);
  be_device *d = ws_device(q->dev);
  if (e == NULL && (d == NULL || ws.be->event_create(d, &e) != 0))
    e = NULL;
  return e;
}

static bool completer_started(ws_queue *q) {
  if (q->has_thread)
    return true;
  enum { POOL = 64 };
  if (q->pool == NULL && (q->pool = calloc(POOL, sizeof *q->pool)) == NULL)
    return false;
  q->pool_cap = POOL;
  q->has_thread = pthread_create(&q->thread, NULL, completer, q) == 0;
  return q->has_thread;
}

/* Appends first..last to q's completer, waking it if it sleeps (no system call while it
 * polls). */
static void give_completer(ws_queue *q, ws_cdone *first, ws_cdone *last, uint32_t n) {
  pthread_mutex_lock(&q->cmu);
  if (q->tail)
    q->tail->next = first;
  else
    q->head = first;
  q->tail = last;
  last->next = NULL;
  atomic_fetch_add_explicit(&q->pushed, n, memory_order_release);
  pthread_cond_broadcast(&q->ccv); /* no system call while nobody waits: a polling completer */
  pthread_mutex_unlock(&q->cmu);
}

bool ws_completer_take(ws_queue *q, ws_cdone *first, ws_cdone *last) {
  be_event *e = completer_started(q) ? event_for(q) : NULL;
  if (e == NULL)
    return false;
  int rc = ws.be->event_record(e, q->q);
  if (rc != 0) { /* sent in their turn, with the error */
    ws.be->event_destroy(e);
    e = NULL;
  }
  uint32_t n = 0;
  for (ws_cdone *c = first;; c = c->next) {
    c->covered = c != first && e != NULL;
    if (rc != 0)
      c->error = rc;
    n++;
    if (c == last)
      break;
  }
  first->e = e;
  count_done(n, e != NULL);
  give_completer(q, first, last, n);
  return true;
}

/* false: the completer cannot take it (the caller falls back to a host function). */
static bool by_completer(ws_queue *q, uint64_t tag, int error, bool event, uint64_t seq) {
  ws_cdone *c = malloc(sizeof *c);
  if (c == NULL)
    return false;
  *c = (ws_cdone){.tag = tag, .seq = seq, .error = error, .event = event, .flush = q->waited};
  if (!ws_completer_take(q, c, c)) {
    free(c);
    return false;
  }
  q->waited = false;
  return true;
}

/* ---- the entry points ---- */

/* watch: the event an event record's completion is for (NULL otherwise). */
static void complete_after(ws_queue *q, uint64_t tag, bool hold, bool clear_pending, bool event,
                           be_event *watched) {
  int error = q->q == NULL ? q->error : q->pending;
  if (clear_pending)
    q->pending = 0;
  if (q->q == NULL) {
    ws_done(tag, error ? error : ACCEL_ENOMEM);
    return;
  }
  bool may_hold = !hold && !event && !q->waited && ws.be->late_callbacks;
  pthread_mutex_lock(&q->cmu);
  uint64_t seq = ++q->queued;
  pthread_mutex_unlock(&q->cmu);
  if (may_hold && ws_group_hold(q, tag, error, seq))
    return;
  ws_group_flush(q); /* those held go first: they came before it */
  if (watched != NULL)
    watch(tag, watched, q, seq); /* before the completion is queued: that one removes it */
  if (!hold && ws.be->late_callbacks && by_completer(q, tag, error, event, seq))
    return;
  by_host_function(q, tag, error, hold, event, seq);
}

void ws_complete_by_host(ws_queue *q, uint64_t tag, int error, uint64_t seq) {
  by_host_function(q, tag, error, false, false, seq);
}

void ws_complete_after(ws_queue *q, uint64_t tag, bool hold, bool clear_pending) {
  complete_after(q, tag, hold, clear_pending, false, NULL);
}

void ws_complete_event_after(ws_queue *q, uint64_t tag, be_event *e) {
  complete_after(q, tag, false, false, true, e);
}

void ws_queue_init(ws_queue *q) {
  pthread_mutex_init(&q->cmu, NULL);
  pthread_cond_init(&q->ccv, NULL);
}

void ws_queue_fini(ws_queue *q) {
  if (q->has_thread) {
    pthread_mutex_lock(&q->cmu);
    q->stop = true;
    pthread_cond_broadcast(&q->ccv);
    pthread_mutex_unlock(&q->cmu);
    pthread_join(q->thread, NULL);
  }
  for (size_t i = 0; i < q->npool; i++)
    ws.be->event_destroy(q->pool[i]);
  free(q->pool);
  pthread_mutex_destroy(&q->cmu);
  pthread_cond_destroy(&q->ccv);
}
