/* The runtime's loop: creation, the run queue and its turns, tasks posted from any thread,
 * and shutdown.
 *
 * Wake-ups: a send from another thread queues the actor on the injection list and signals
 * the loop (runtime/wakeup.c: an eventfd write, only if the loop may be asleep). Work on the
 * loop thread itself only starts the idle handle `turn`, which keeps uv_run from blocking
 * while work remains, and, if asked (ACCEL_SPIN_US, default 0), for a short spin after the
 * last work, so that a quick exchange with another thread needs no sleep and wake-up. Spinning
 * pays only with spare cores: on a loaded machine the spinner takes the core the thread it
 * waits for needs (measured: 20x slower round trips on 2 busy cores). One turn
 * runs each actor that was queued when the turn began for at most `throughput` messages, then
 * the actors those woke, up to `turn_hops` more runs (ACCEL_TURN_HOPS, default 1024): a
 * message handed from actor to actor on one loop (ping-pong, a ring) costs no loop iteration,
 * no poll and no clock read per hop, while the bound leaves new work and I/O their share.
 *
 * A runtime has one loop or several (accel_runtime_opts.loops, ACCEL_LOOPS): each is all of
 * the above on a thread of its own, with its own root. Loop 0 runs on the thread of
 * accel_runtime_run (or accel_runtime_start's), the others on threads the runtime starts. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/alloc.h"
#include "runtime/defer.h"
#include "runtime/rt.h"

RT_TLS rt_loop *rt_tls_loop;
RT_TLS accel_actor *rt_tls_actor;
RT_TLS rt_loop *rt_tls_hold_wake;
RT_TLS bool rt_tls_wake_owed;

static void on_turn(uv_idle_t *h);
static uint64_t note_busy(rt_loop *l, uint64_t since_ns);

/* The calling thread's loop of rt, else loop 0. */
static rt_loop *here_or_first(accel_runtime *rt) {
  rt_loop *l = rt_here(rt);
  return l ? l : &rt->loops[0];
}

uint64_t rt_turn_ns(accel_runtime *rt) {
  return here_or_first(rt)->turn_ns;
}

uint64_t rt_now_ms(rt_loop *l) {
  return uv_now(&l->loop);
}

void rt_wake_turn(rt_loop *l) {
  if (!l->turn_active && !l->shut_down) {
    l->turn_active = true;
    uv_idle_start(&l->turn, on_turn);
  }
}

rt_loop *rt_place(accel_runtime *rt) {
  if (rt->n_loops == 1)
    return &rt->loops[0];
  return &rt->loops[atomic_fetch_add_explicit(&rt->next_place, 1, memory_order_relaxed) %
                    rt->n_loops];
}

/* ---- remote entry: a non-loop thread pins the runtime while it touches the wake-up ---- */

bool rt_remote_enter(accel_runtime *rt) {
  atomic_fetch_add(&rt->remote_users, 1);
  if (atomic_load(&rt->closing)) {
    atomic_fetch_sub(&rt->remote_users, 1);
    return false;
  }
  return true;
}

void rt_remote_leave(accel_runtime *rt) {
  atomic_fetch_sub(&rt->remote_users, 1);
}

/* ---- run queue ---- */

void rt_schedule_local(rt_loop *l, accel_actor *cell) {
  cell->runq_next = NULL;
  if (l->runq_tail)
    l->runq_tail->runq_next = cell;
  else
    l->runq_head = cell;
  l->runq_tail = cell;
  l->runq_len++;
  rt_wake_turn(l);
}

/* Caller holds a remote pin, so the loop's wake-up is open. */
void rt_schedule_remote(rt_loop *l, accel_actor *cell) {
  cell->runq_next = NULL;
  pthread_mutex_lock(&l->remote_mu);
  if (l->inject_tail)
    l->inject_tail->runq_next = cell;
  else
    l->inject_head = cell;
  l->inject_tail = cell;
  atomic_store(&l->remote_pending, true); /* before the signal reads `awake`: see maybe_sleep */
  pthread_mutex_unlock(&l->remote_mu);
  if (rt_tls_hold_wake == l) {
    rt_tls_wake_owed = true; /* the sender runs the turn itself, or wakes the loop (borrow.c) */
    return;
  }
  rt_wakeup_signal(&l->wake);
}

void rt_schedule(accel_actor *cell) {
  if (rt_tls_loop == cell->home)
    rt_schedule_local(cell->home, cell);
  else
    rt_schedule_remote(cell->home, cell);
}

static accel_actor *runq_pop(rt_loop *l) {
  accel_actor *cell = l->runq_head;
  if (cell) {
    l->runq_head = cell->runq_next;
    if (l->runq_head == NULL)
      l->runq_tail = NULL;
    l->runq_len--;
  }
  return cell;
}

/* ---- tasks ---- */

static void task_list_append(rt_task_list *list, rt_task *task) {
  task->next_ = NULL;
  if (list->tail)
    list->tail->next_ = task;
  else
    list->head = task;
  list->tail = task;
}

void rt_post_to(rt_loop *l, rt_task *task) {
  if (rt_tls_loop == l) {
    task_list_append(&l->local_tasks, task);
    rt_wake_turn(l);
    return;
  }
  bool pinned = rt_remote_enter(l->rt);
  pthread_mutex_lock(&l->remote_mu);
  task_list_append(&l->remote_tasks, task);
  atomic_store(&l->remote_pending, true);
  pthread_mutex_unlock(&l->remote_mu);
  /* While closing, the task still runs: in the shutdown drain or in accel_runtime_destroy. */
  if (pinned) {
    rt_wakeup_signal(&l->wake);
    rt_remote_leave(l->rt);
  }
}

void rt_post(accel_runtime *rt, rt_task *task) {
  rt_post_to(here_or_first(rt), task);
}

void rt_post_loop_thread(accel_runtime *rt, rt_task *task) {
  rt_loop *l = &rt->loops[0];
  if (rt_tls_loop == l && l->borrowed) {
    task_list_append(&l->loop_tasks, task); /* the borrower wakes the loop for it */
    return;
  }
  rt_post_to(l, task);
}

void accel_post(accel_runtime *rt, accel_task *task, void (*fn)(accel_task *task)) {
  task->fn_ = fn;
  rt_post(rt, task);
}

void accel_post_to(accel_runtime *rt, uint32_t loop, accel_task *task,
                   void (*fn)(accel_task *task)) {
  task->fn_ = fn;
  rt_post_to(&rt->loops[loop < rt->n_loops ? loop : 0], task);
}

static void run_tasks(rt_task *task) {
  while (task) {
    rt_task *next = task->next_;
    task->fn_(task);
    task = next;
  }
}

/* Moves what other threads queued (actors and tasks) to the loop's own lists. */
static bool take_remote(rt_loop *l) {
  if (!atomic_load(&l->remote_pending))
    return false;
  pthread_mutex_lock(&l->remote_mu);
  atomic_store(&l->remote_pending, false);
  accel_actor *head = l->inject_head;
  l->inject_head = l->inject_tail = NULL;
  rt_task_list tasks = l->remote_tasks;
  l->remote_tasks.head = l->remote_tasks.tail = NULL;
  pthread_mutex_unlock(&l->remote_mu);
  for (accel_actor *cell = head; cell;) {
    accel_actor *next = cell->runq_next;
    rt_schedule_local(l, cell);
    cell = next;
  }
  if (tasks.head) {
    if (l->local_tasks.tail)
      l->local_tasks.tail->next_ = tasks.head;
    else
      l->local_tasks.head = tasks.head;
    l->local_tasks.tail = tasks.tail;
    rt_wake_turn(l);
  }
  return head != NULL || tasks.head != NULL;
}

/* ---- turns ---- */

static void run_queued_actors(rt_loop *l) {
  uint64_t n = (uint64_t)l->runq_len + l->turn_hops;
  while (n-- > 0) {
    accel_actor *cell = runq_pop(l);
    if (cell == NULL)
      break;
    rt_cell_run(cell);
  }
}

static bool has_local_work(rt_loop *l) {
  return l->runq_head || l->local_tasks.head || l->graveyard || l->retries ||
         (!l->borrowed && l->loop_tasks.head);
}

/* The loop thread's own tasks (rt_post_loop_thread), queued while a client thread ran the
 * turns: the loop thread only. */
static void run_loop_tasks(rt_loop *l) {
  if (l->borrowed || l->loop_tasks.head == NULL)
    return;
  rt_task *tasks = l->loop_tasks.head;
  l->loop_tasks.head = l->loop_tasks.tail = NULL;
  run_tasks(tasks);
}

/* seq_cst, after rt_wakeup_sleep's store: a sender that set remote_pending before this read
 * is seen here, and one that sets it later sees the loop asleep and writes. */
static bool has_remote_work(rt_loop *l) {
  return atomic_load(&l->remote_pending);
}

/* No work this turn (begun at now_ns): keep turning for the spin time since the last work,
 * then sleep. Before sleeping, senders are told to write (rt_wakeup_sleep) and the lists
 * checked once more. */
static void maybe_sleep(rt_loop *l, uint64_t now_ns) {
  if (now_ns - l->last_work_ns < l->spin_ns)
    return;
  rt_wakeup_sleep(&l->wake);
  /* A sender (or a stop) that saw the loop awake did not write: look once more. */
  if (has_remote_work(l) || atomic_load(&l->rt->closing)) {
    rt_wakeup_awake(&l->wake);
    return;
  }
  l->turn_active = false;
  uv_idle_stop(&l->turn);
}

static bool run_turn_timed(rt_loop *l, uint64_t t0);

/* Busy time (accel_runtime_loop_busy_ns), written by the loop only: turns that found work,
 * [t0, end], and what the iteration does after such a turn before it polls again (the
 * prepare handles: acceld's flush of the replies those turns made, deferred work), counted
 * from `end` in on_asleep. A turn that found nothing ends that: the loop is idle. */
static void add_busy(rt_loop *l, uint64_t ns) {
  atomic_store_explicit(&l->busy_ns, atomic_load_explicit(&l->busy_ns, memory_order_relaxed) + ns,
                        memory_order_relaxed);
}

static void turn_counted(rt_loop *l, bool worked, uint64_t t0, uint64_t end) {
  if (worked)
    add_busy(l, end - t0);
  l->busy_until_ns = worked ? end : 0;
}

static void run_turn(rt_loop *l) {
  uint64_t t0 = uv_hrtime();
  bool worked = run_turn_timed(l, t0);
  /* a turn from the poll phase (a wake-up) is outside awake..asleep: timed on its own */
  turn_counted(l, worked, t0, note_busy(l, t0));
}

static void run_local_tasks(rt_loop *l) {
  rt_task *tasks = l->local_tasks.head;
  l->local_tasks.head = l->local_tasks.tail = NULL;
  run_tasks(tasks);
}

/* The turn's one clock read is t0, its start: when work was last found, and the spin's
 * measure (a hop from actor to actor reads no clock). True if it found work. */
static bool run_turn_timed(rt_loop *l, uint64_t t0) {
  l->turn_ns = t0;
  bool worked = take_remote(l) || l->runq_head || l->local_tasks.head;
  run_queued_actors(l);
  run_local_tasks(l);
  run_loop_tasks(l);
  rt_retries_flush(l);
  rt_sweep(l);
  if (worked)
    l->last_work_ns = t0;
  if (!has_local_work(l) && l->turn_active)
    maybe_sleep(l, t0);
  return worked;
}

/* ---- turns run by a client thread while the loop sleeps (borrow.c), token held ---- */

bool rt_turn_has_work(rt_loop *l) {
  return has_local_work(l) || has_remote_work(l);
}

void rt_turn_run(rt_loop *l) {
  (void)run_turn_timed(l, uv_hrtime()); /* on a client's thread: not the loop's busy time */
}

/* After a borrow: stops the idle turn if nothing is left, marks the loop asleep again
 * (senders write from here), and says whether it must wake: work left, a stop, or a handle
 * or timer due before the deadline it sleeps to. */
bool rt_turn_loop_must_wake(rt_loop *l) {
  bool work = has_local_work(l);
  if (!work && l->turn_active) {
    l->turn_active = false;
    uv_idle_stop(&l->turn);
  }
  rt_wakeup_sleep(&l->wake);
  if (work || has_remote_work(l) || atomic_load(&l->rt->closing))
    return true;
  int t = uv_backend_timeout(&l->loop);
  return t == 0 || (t > 0 && uv_now(&l->loop) + (uint64_t)t < l->sleep_until_ms);
}

static void shutdown_tree(rt_loop *l);
static void run_deferred(rt_loop *l);

/* Turns back to back: while work keeps coming, the idle callback runs turn after turn for up
 * to the span (ACCEL_TURN_SPAN_US) before it returns to uv_run, whose every iteration costs an
 * epoll_wait system call, two clock reads of its own and the stall watch's two
 * (docs/PERFORMANCE.md "Turns back to back; ..."). A turn that leaves nothing to do ends them:
 * a spinning loop spins through uv_run, so that its sockets, async handles and timers are
 * looked at on every pass while it waits. What the iteration's other phases owe is not held
 * back: deferred work runs between the turns, a turn that needs the poll or a prepare handle
 * now ends them (rt_poll_soon: a timer due at once, acceld's batched replies), and this loop's
 * sockets and timers wait at most the span and a turn. libuv reads its clock once per
 * iteration, so a timer started inside a span counts from the span's start (as from any
 * callback's start). */
static void run_turns(rt_loop *l) {
  uint64_t start = uv_hrtime(), t0 = start;
  bool worked, counted;
  for (;;) {
    worked = run_turn_timed(l, t0);
    counted = false;
    if (!l->turn_active || l->poll_soon || atomic_load(&l->rt->closing))
      break;
    run_deferred(l);
    if (l->poll_soon || (!has_local_work(l) && !has_remote_work(l)))
      break;
    uint64_t next = uv_hrtime(); /* the end of this turn, the start of the next: one read */
    turn_counted(l, worked, t0, next);
    counted = true;
    t0 = next;
    if (t0 - start >= l->span_ns)
      break;
  }
  l->poll_soon = false;
  uint64_t end = note_busy(l, start);
  if (!counted) /* the turn that ended them */
    turn_counted(l, worked, t0, end);
}

static void on_turn(uv_idle_t *h) {
  rt_loop *l = h->data;
  if (atomic_load(&l->rt->closing) && !l->shut_down)
    shutdown_tree(l);
  else if (l->span_ns == 0)
    run_turn(l);
  else
    run_turns(l);
}

static void on_wakeup(uv_poll_t *h, int status, int events) {
  rt_loop *l = h->data;
  rt_wakeup_drain(&l->wake);
  l->last_work_ns = uv_hrtime();
  rt_wake_turn(l); /* turn (and spin) from here; the turn itself takes the remote lists */
  if (atomic_load(&l->rt->closing) && !l->shut_down)
    shutdown_tree(l);
  else
    run_turn(l);
}

/* ---- shutdown ---- */

static void wait_remote_users(accel_runtime *rt) {
  while (atomic_load(&rt->remote_users) != 0)
    uv_sleep(0);
}

/* Stops every actor, then drains until nothing is left: queued actors, tasks (then callbacks
 * of futures completed by the drain), retries (they meet stale refs now) and the graveyard;
 * and what was deferred to the end of the iteration (defer.h), whose prepare handle closes
 * after this. */
static void drain(rt_loop *l) {
  do {
    run_deferred(l);
    take_remote(l);
    run_local_tasks(l);
    run_loop_tasks(l);
    run_queued_actors(l);
    rt_retries_flush(l);
    rt_sweep(l);
  } while (has_local_work(l) || has_remote_work(l) || l->deferred != NULL);
}

/* Each loop stops its own tree. Loop 0 also ends the asks with a deadline; it waits for the
 * other loops' drains before its own last one, so that the `then` callbacks (loop 0's) of
 * futures their drains complete still run. */
static void shutdown_tree(rt_loop *l) {
  accel_runtime *rt = l->rt;
  if (l->index == 0)
    rt_ask_timers_close(rt);
  if (l->root) {
    rt_cell_terminate(l->root, ACCEL_ECLOSED);
    pthread_mutex_lock(&l->tree_mu); /* walks of other loops read it */
    l->root = NULL;
    pthread_mutex_unlock(&l->tree_mu);
  }
  wait_remote_users(rt);
  drain(l);
  if (l->index != 0) {
    atomic_fetch_add(&rt->loops_done, 1);
  } else if (rt->loops_started > 1) {
    while (atomic_load(&rt->loops_done) != rt->loops_started - 1) {
      uv_sleep(0);
      drain(l);
    }
    wait_remote_users(rt);
    drain(l);
  }
  l->shut_down = true;
  rt_wakeup_close(&l->wake);
  uv_close((uv_handle_t *)&l->turn, NULL);
  uv_close((uv_handle_t *)&l->awake, NULL);
  uv_close((uv_handle_t *)&l->asleep, NULL);
}

void accel_runtime_stop(accel_runtime *rt) {
  if (rt == NULL)
    return;
  /* Pinned like any remote user: a loop closes its wake-up only once no one is in. */
  atomic_fetch_add(&rt->remote_users, 1);
  if (!atomic_exchange(&rt->closing, true))
    for (uint32_t i = 0; i < rt->n_loops; i++)
      rt_wakeup_signal(&rt->loops[i].wake);
  atomic_fetch_sub(&rt->remote_users, 1);
}

/* ---- the roots: one per loop ---- */

static int root_receive(accel_actor *self, void *state, accel_msg *msg) {
  return 0;
}

static const accel_behavior root_behavior = {.name = "root", .receive = root_receive};

accel_ref accel_runtime_root(accel_runtime *rt) {
  return rt->root_ref;
}

static int root_create(rt_loop *l) {
  accel_actor *root;
  int rc = rt_cell_create(l, NULL, NULL, &root);
  if (rc != 0)
    return rc;
  root->b = &root_behavior;
  /* The root never escalates: a child past its limit is stopped and reported. */
  accel_supervision sup = {.on_limit = ACCEL_LIMIT_STOP_CHILD};
  rt_supervision_defaults(&root->supervision, &sup);
  l->root = root;
  return 0;
}

/* ---- create, run, destroy ---- */

/* Spinning pays only where a core is free to spin on: the loop, a client thread, a backend
 * worker and a daemon's threads all want one. Measured: on 2 busy vCPUs spinning made round
 * trips 20x slower; on a 16-core host a 50 us spin took an op through acceld from 3.9x to
 * 2.0x a socketpair round trip (docs/PERFORMANCE.md). */
#define RT_SPIN_CORES 8
#define RT_SPIN_DEFAULT_US 50

static unsigned long rt_default_spin_us(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores >= RT_SPIN_CORES ? RT_SPIN_DEFAULT_US : 0;
}

uint64_t rt_spin_ns(void) {
  static atomic_ullong cached = UINT64_MAX;
  uint64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v != UINT64_MAX)
    return v;
  const char *s = getenv("ACCEL_SPIN_US");
  char *end = NULL;
  unsigned long us = s ? strtoul(s, &end, 10) : rt_default_spin_us();
  v = (s && (*s == '\0' || *end != '\0') ? 0 : us) * 1000ull;
  atomic_store_explicit(&cached, v, memory_order_relaxed);
  return v;
}

/* ACCEL_TURN_SPAN_US (0: one turn per iteration of uv_run, as before), read at each
 * runtime's creation. */
uint64_t rt_turn_span_ns(void) {
  return rt_env_uint("ACCEL_TURN_SPAN_US", RT_TURN_SPAN_DEFAULT_US, 0, 1000000) * 1000u;
}

/* ACCEL_TURN_HOPS (0: only the actors queued when a turn began run in it, as before), read
 * at each runtime's creation (a benchmark compares both in one process). */
uint32_t rt_turn_hops(void) {
  return (uint32_t)rt_env_uint("ACCEL_TURN_HOPS", RT_TURN_HOPS_DEFAULT, 0, UINT32_MAX);
}

uint64_t rt_env_uint(const char *name, uint64_t dflt, uint64_t min, uint64_t max) {
  const char *s = getenv(name);
  if (s == NULL || *s == '\0')
    return dflt;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  return *end != '\0' || errno != 0 || v < min || v > max ? dflt : (uint64_t)v;
}

/* ---- stalls: how long one iteration of the loop runs callbacks ---- */

static void on_awake(uv_check_t *h) {
  rt_loop *l = h->data;
  l->woke_ns = uv_hrtime();
}

/* Returns the time it read. */
static uint64_t note_busy(rt_loop *l, uint64_t since_ns) {
  uint64_t now = uv_hrtime(), busy = now - since_ns;
  if (busy > atomic_load_explicit(&l->max_stall_ns, memory_order_relaxed))
    atomic_store_explicit(&l->max_stall_ns, busy, memory_order_relaxed);
  return now;
}

/* Sleeps as long as uv_run would have, in poll on libuv's backend fd (libuv's documented way
 * to embed its loop), with the token released: while the loop sleeps a client thread may take
 * the token and run the turns itself (borrow.c), then wakes the loop if it must.
 *
 * It runs from `asleep`, the prepare handle started first and so run last (libuv runs prepare
 * handles newest first): every other prepare callback (the server's output flush among them)
 * has run, and the I/O callbacks come right after, from uv_run's own poll phase (NOWAIT), as
 * when uv_run blocks itself. A sleep between two uv_run calls instead would leave what an I/O
 * callback set up for the next prepare phase (a reply to flush) waiting through the sleep. */
static void sleep_in_poll(rt_loop *l) {
  int timeout = uv_backend_timeout(&l->loop);
  if (timeout == 0)
    return;
  l->sleep_until_ms = timeout < 0 ? UINT64_MAX : uv_now(&l->loop) + (uint64_t)timeout;
  pthread_mutex_unlock(&l->token);
  struct pollfd p = {.fd = uv_backend_fd(&l->loop), .events = POLLIN};
  (void)poll(&p, 1, timeout); /* ready, timed out or interrupted: uv_run sees to it */
  pthread_mutex_lock(&l->token);
  l->sleep_until_ms = 0;
}

/* ---- work deferred to the end of the iteration (defer.h) ---- */

bool rt_defer_here(void) {
  rt_loop *l = rt_tls_loop;
  return l != NULL && l->sleeps_here && !l->borrowed && !l->shut_down;
}

bool rt_defer_before_poll(rt_deferred *d) {
  if (!rt_defer_here())
    return false;
  rt_loop *l = rt_tls_loop;
  d->next = l->deferred;
  l->deferred = d;
  return true;
}

void rt_poll_soon(void) {
  rt_loop *l = rt_tls_loop;
  if (l != NULL)
    l->poll_soon = true;
}

/* What was queued runs in queueing order, whatever it queues meanwhile too. */
static void run_deferred(rt_loop *l) {
  while (l->deferred != NULL) {
    rt_deferred *list = l->deferred, *rev = NULL;
    l->deferred = NULL;
    while (list != NULL) {
      rt_deferred *next = list->next;
      list->next = rev;
      rev = list;
      list = next;
    }
    while (rev != NULL) {
      rt_deferred *d = rev;
      rev = rev->next;
      d->run(d); /* may free d */
    }
  }
}

static void on_asleep(uv_prepare_t *h) {
  rt_loop *l = h->data;
  run_deferred(l);
  uint64_t now = l->woke_ns != 0 ? note_busy(l, l->woke_ns) : 0;
  if (l->busy_until_ns != 0) { /* the iteration's work after its last busy turn */
    now = now ? now : uv_hrtime();
    add_busy(l, now > l->busy_until_ns ? now - l->busy_until_ns : 0);
    l->busy_until_ns = 0;
  }
  if (l->sleeps_here)
    sleep_in_poll(l);
}

/* uv_check/uv_prepare init and start only fill the handle (they cannot fail). */
static void stall_watch_init(rt_loop *l) {
  uv_check_init(&l->loop, &l->awake);
  uv_prepare_init(&l->loop, &l->asleep);
  l->awake.data = l->asleep.data = l;
  uv_check_start(&l->awake, on_awake);
  uv_prepare_start(&l->asleep, on_asleep);
  uv_unref((uv_handle_t *)&l->awake);
  uv_unref((uv_handle_t *)&l->asleep);
}

uint64_t accel_runtime_max_stall_ns(accel_runtime *rt, int reset) {
  if (rt == NULL)
    return 0;
  uint64_t max = 0;
  for (uint32_t i = 0; i < rt->n_loops; i++) {
    atomic_ullong *m = &rt->loops[i].max_stall_ns;
    uint64_t v = reset ? atomic_exchange(m, 0) : atomic_load(m);
    max = v > max ? v : max;
  }
  return max;
}

uint64_t accel_runtime_loop_busy_ns(accel_runtime *rt, uint32_t loop) {
  if (rt == NULL || loop >= rt->n_loops)
    return 0;
  return atomic_load_explicit(&rt->loops[loop].busy_ns, memory_order_relaxed);
}

static int loop_init(accel_runtime *rt, rt_loop *l, uint32_t index) {
  l->rt = rt;
  l->index = index;
  if (uv_loop_init(&l->loop) != 0)
    return ACCEL_ESYS;
  if (rt_wakeup_init(&l->wake, &l->loop, on_wakeup, l) != 0) {
    uv_loop_close(&l->loop);
    return ACCEL_ESYS;
  }
  uv_idle_init(&l->loop, &l->turn);
  l->turn.data = l;
  l->spin_ns = rt_spin_ns();
  l->turn_hops = rt_turn_hops();
  l->span_ns = rt_turn_span_ns();
  l->move_after = rt_move_after();
  l->move_turn_cycles = rt_move_turn_cycles();
  stall_watch_init(l);
  pthread_mutex_init(&l->remote_mu, NULL);
  pthread_mutex_init(&l->token, NULL);
  pthread_mutex_init(&l->tree_mu, NULL);
  atomic_init(&l->remote_pending, false);
  l->initialized = true;
  return 0;
}

#define RT_LOOPS_LIMIT 256u

/* opts->loops, else ACCEL_LOOPS, else 1; ACCEL_LOOPS_PER_CORE or "cores": one per online core
 * (at most the limit). */
static uint32_t loops_per_core(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores < 1 ? 1 : cores > (long)RT_LOOPS_LIMIT ? RT_LOOPS_LIMIT : (uint32_t)cores;
}

static uint32_t loops_wanted(const accel_runtime_opts *opts) {
  if (opts && opts->loops)
    return opts->loops == ACCEL_LOOPS_PER_CORE ? loops_per_core() : opts->loops;
  const char *s = getenv("ACCEL_LOOPS");
  if (s && strcmp(s, "cores") == 0)
    return loops_per_core();
  return (uint32_t)rt_env_uint("ACCEL_LOOPS", 1, 1, RT_LOOPS_LIMIT);
}

static int loops_init(accel_runtime *rt, uint32_t n) {
  rt->loops = rt_aligned_calloc(_Alignof(rt_loop), n * sizeof *rt->loops);
  if (rt->loops == NULL)
    return ACCEL_ENOMEM;
  rt->n_loops = n;
  for (uint32_t i = 0; i < n; i++) {
    int rc = loop_init(rt, &rt->loops[i], i);
    if (rc != 0)
      return rc;
  }
  for (uint32_t i = 0; i < n; i++) {
    int rc = root_create(&rt->loops[i]);
    if (rc != 0)
      return rc;
  }
  rt->root_ref = rt->loops[0].root->ref;
  return 0;
}

int accel_runtime_create(accel_runtime **out, const accel_runtime_opts *opts) {
  if (out == NULL)
    return ACCEL_EINVAL;
  rt_log_init_from_env();
  uint32_t n = loops_wanted(opts);
  if (n > RT_LOOPS_LIMIT)
    return ACCEL_EINVAL;
  accel_runtime *rt = rt_calloc(1, sizeof *rt);
  if (rt == NULL)
    return ACCEL_ENOMEM;
  uint32_t max_actors = opts && opts->max_actors ? opts->max_actors : RT_MAX_ACTORS_DEFAULT;
  pthread_mutex_init(&rt->slots_mu, NULL);
  rt_list_init(&rt->ask_timers);
  atomic_init(&rt->borrow_off, rt_borrow_env_off());
  rt_future_pool_open(); /* closed by accel_runtime_destroy */
  int rc = rt_slots_init(rt, max_actors);
  if (rc == 0)
    rc = loops_init(rt, n);
  if (rc != 0) {
    accel_runtime_destroy(rt);
    return rc;
  }
  *out = rt;
  return 0;
}

static void loop_body(rt_loop *l) {
  pthread_mutex_lock(&l->token);
  rt_tls_loop = l;
  l->last_work_ns = uv_hrtime();
  rt_wakeup_awake(&l->wake); /* the first turns look at the remote lists anyway */
  rt_wake_turn(l);
  l->sleeps_here = true; /* in `asleep`: uv_run itself never waits */
  while (uv_run(&l->loop, UV_RUN_NOWAIT) != 0)
    ;
  l->sleeps_here = false;
  rt_tls_loop = NULL;
  pthread_mutex_unlock(&l->token);
}

static void other_loop_main(void *arg) {
  rt_loop *l = arg;
  char name[16];
  snprintf(name, sizeof name, "accel-loop-%u", l->index % 1000u);
  pthread_setname_np(pthread_self(), name); /* seen in top -H, gdb */
  loop_body(l);
}

/* Loops 1..n-1 on threads of their own, loop 0 here; returns once all have shut down. */
static int run_all(accel_runtime *rt) {
  uint32_t started = 1;
  int rc = 0;
  for (; started < rt->n_loops; started++) {
    rt_loop *l = &rt->loops[started];
    if (uv_thread_create(&l->thread, other_loop_main, l) != 0) {
      rc = ACCEL_ESYS;
      accel_runtime_stop(rt); /* the loops started stop; the others are shut down below */
      break;
    }
    l->has_thread = true;
  }
  rt->loops_started = started;
  loop_body(&rt->loops[0]);
  for (uint32_t i = 1; i < started; i++) {
    uv_thread_join(&rt->loops[i].thread);
    rt->loops[i].has_thread = false;
  }
  return rc;
}

int accel_runtime_run(accel_runtime *rt) {
  if (rt == NULL)
    return ACCEL_EINVAL;
  if (atomic_exchange(&rt->running, true) || rt->loops[0].shut_down)
    return ACCEL_EALREADY;
  return run_all(rt);
}

static void thread_main(void *arg) {
  pthread_setname_np(pthread_self(), "accel-loop"); /* seen in top -H, gdb */
  (void)run_all(arg);
}

int accel_runtime_start(accel_runtime *rt) {
  if (rt == NULL)
    return ACCEL_EINVAL;
  if (atomic_exchange(&rt->running, true) || rt->loops[0].shut_down)
    return ACCEL_EALREADY;
  if (uv_thread_create(&rt->thread, thread_main, rt) != 0) {
    atomic_store(&rt->running, false);
    return ACCEL_ESYS;
  }
  rt->has_thread = true;
  return 0;
}

int accel_runtime_join(accel_runtime *rt) {
  if (rt == NULL || !rt->has_thread)
    return ACCEL_EINVAL;
  if (rt_here(rt) != NULL)
    return ACCEL_EDEADLK;
  uv_thread_join(&rt->thread);
  rt->has_thread = false;
  return 0;
}

/* A loop that never ran (or never saw the stop): shut down here, as its owner. */
static void shutdown_unrun(rt_loop *l) {
  if (l->shut_down)
    return;
  rt_loop *prev = rt_tls_loop;
  rt_tls_loop = l;
  shutdown_tree(l);
  uv_run(&l->loop, UV_RUN_DEFAULT);
  rt_tls_loop = prev;
}

/* Tasks posted after the drain (futures completed late by other threads) run here. */
static void run_late_tasks(rt_loop *l) {
  run_deferred(l);
  for (;;) {
    take_remote(l);
    rt_task *tasks = l->local_tasks.head;
    l->local_tasks.head = l->local_tasks.tail = NULL;
    if (tasks == NULL)
      break;
    run_tasks(tasks);
  }
}

static void loop_free(rt_loop *l) {
  uv_loop_close(&l->loop);
  rt_wakeup_free(&l->wake);
  pthread_mutex_destroy(&l->remote_mu);
  pthread_mutex_destroy(&l->token);
  pthread_mutex_destroy(&l->tree_mu);
}

void accel_runtime_destroy(accel_runtime *rt) {
  if (rt == NULL)
    return;
  if (rt->has_thread) {
    accel_runtime_stop(rt);
    accel_runtime_join(rt);
  }
  atomic_store(&rt->closing, true);
  for (uint32_t i = 0; i < rt->n_loops; i++)
    if (rt->loops[i].initialized)
      shutdown_unrun(&rt->loops[i]);
  for (uint32_t i = 0; i < rt->n_loops; i++)
    if (rt->loops[i].initialized)
      run_late_tasks(&rt->loops[i]);
  for (uint32_t i = 0; i < rt->n_loops; i++)
    if (rt->loops[i].initialized)
      loop_free(&rt->loops[i]);
  rt_aligned_free(rt->loops);
  pthread_mutex_destroy(&rt->slots_mu);
  rt_slots_free(rt);
  rt_free(rt);
  rt_future_pool_close();
}

int accel_runtime_on_loop(accel_runtime *rt) {
  return rt != NULL && rt_here(rt) != NULL;
}

bool rt_on_a_loop(void) {
  return rt_tls_loop != NULL;
}

uint32_t accel_runtime_loops(accel_runtime *rt) {
  return rt ? rt->n_loops : 0;
}

void accel_runtime_get_stats(accel_runtime *rt, accel_runtime_stats *out) {
  out->actors_live = atomic_load(&rt->stats.actors_live);
  out->actors_spawned = atomic_load(&rt->stats.actors_spawned);
  out->messages_received = atomic_load(&rt->stats.messages_received);
  out->dead_letters = atomic_load(&rt->stats.dead_letters);
  out->busy_refusals = atomic_load(&rt->stats.busy_refusals);
  out->failures = atomic_load(&rt->stats.failures);
  out->restarts = atomic_load(&rt->stats.restarts);
  out->escalations = atomic_load(&rt->stats.escalations);
  out->moves = atomic_load(&rt->stats.moves);
}
