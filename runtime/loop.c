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
 * no poll and no clock read per hop, while the bound leaves new work and I/O their share. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/alloc.h"
#include "runtime/rt.h"

RT_TLS accel_runtime *rt_tls_loop;
RT_TLS accel_actor *rt_tls_actor;
RT_TLS accel_runtime *rt_tls_hold_wake;
RT_TLS bool rt_tls_wake_owed;

static void on_turn(uv_idle_t *h);
static void note_busy(accel_runtime *rt, uint64_t since_ns);

uint64_t rt_turn_ns(accel_runtime *rt) {
  return rt->turn_ns;
}

uint64_t rt_now_ms(accel_runtime *rt) {
  return uv_now(&rt->loop);
}

void rt_wake_turn(accel_runtime *rt) {
  if (!rt->turn_active && !rt->shut_down) {
    rt->turn_active = true;
    uv_idle_start(&rt->turn, on_turn);
  }
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

void rt_schedule_local(accel_runtime *rt, accel_actor *cell) {
  cell->runq_next = NULL;
  if (rt->runq_tail)
    rt->runq_tail->runq_next = cell;
  else
    rt->runq_head = cell;
  rt->runq_tail = cell;
  rt->runq_len++;
  rt_wake_turn(rt);
}

/* Caller holds a remote pin, so the async handle is open. */
void rt_schedule_remote(accel_runtime *rt, accel_actor *cell) {
  cell->runq_next = NULL;
  pthread_mutex_lock(&rt->remote_mu);
  if (rt->inject_tail)
    rt->inject_tail->runq_next = cell;
  else
    rt->inject_head = cell;
  rt->inject_tail = cell;
  atomic_store(&rt->remote_pending, true); /* before the signal reads `awake`: see maybe_sleep */
  pthread_mutex_unlock(&rt->remote_mu);
  if (rt_tls_hold_wake == rt) {
    rt_tls_wake_owed = true; /* the sender runs the turn itself, or wakes the loop (borrow.c) */
    return;
  }
  rt_wakeup_signal(&rt->wake);
}

static accel_actor *runq_pop(accel_runtime *rt) {
  accel_actor *cell = rt->runq_head;
  if (cell) {
    rt->runq_head = cell->runq_next;
    if (rt->runq_head == NULL)
      rt->runq_tail = NULL;
    rt->runq_len--;
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

void rt_post(accel_runtime *rt, rt_task *task) {
  if (rt_tls_loop == rt) {
    task_list_append(&rt->local_tasks, task);
    rt_wake_turn(rt);
    return;
  }
  bool pinned = rt_remote_enter(rt);
  pthread_mutex_lock(&rt->remote_mu);
  task_list_append(&rt->remote_tasks, task);
  atomic_store(&rt->remote_pending, true);
  pthread_mutex_unlock(&rt->remote_mu);
  /* While closing, the task still runs: in the shutdown drain or in accel_runtime_destroy. */
  if (pinned) {
    rt_wakeup_signal(&rt->wake);
    rt_remote_leave(rt);
  }
}

void rt_post_loop_thread(accel_runtime *rt, rt_task *task) {
  if (rt_tls_loop == rt && rt->borrowed) {
    task_list_append(&rt->loop_tasks, task); /* the borrower wakes the loop for it */
    return;
  }
  rt_post(rt, task);
}

void accel_post(accel_runtime *rt, accel_task *task, void (*fn)(accel_task *task)) {
  task->fn_ = fn;
  rt_post(rt, task);
}

static void run_tasks(rt_task *task) {
  while (task) {
    rt_task *next = task->next_;
    task->fn_(task);
    task = next;
  }
}

/* Moves what other threads queued (actors and tasks) to the loop's own lists. */
static bool take_remote(accel_runtime *rt) {
  if (!atomic_load(&rt->remote_pending))
    return false;
  pthread_mutex_lock(&rt->remote_mu);
  atomic_store(&rt->remote_pending, false);
  accel_actor *head = rt->inject_head;
  rt->inject_head = rt->inject_tail = NULL;
  rt_task_list tasks = rt->remote_tasks;
  rt->remote_tasks.head = rt->remote_tasks.tail = NULL;
  pthread_mutex_unlock(&rt->remote_mu);
  for (accel_actor *cell = head; cell;) {
    accel_actor *next = cell->runq_next;
    rt_schedule_local(rt, cell);
    cell = next;
  }
  if (tasks.head) {
    if (rt->local_tasks.tail)
      rt->local_tasks.tail->next_ = tasks.head;
    else
      rt->local_tasks.head = tasks.head;
    rt->local_tasks.tail = tasks.tail;
    rt_wake_turn(rt);
  }
  return head != NULL || tasks.head != NULL;
}

/* ---- turns ---- */

static void run_queued_actors(accel_runtime *rt) {
  uint64_t n = (uint64_t)rt->runq_len + rt->turn_hops;
  while (n-- > 0) {
    accel_actor *cell = runq_pop(rt);
    if (cell == NULL)
      break;
    rt_cell_run(cell);
  }
}

static bool has_local_work(accel_runtime *rt) {
  return rt->runq_head || rt->local_tasks.head || rt->graveyard || rt->retries ||
         (!rt->borrowed && rt->loop_tasks.head);
}

/* The loop thread's own tasks (rt_post_loop_thread), queued while a client thread ran the
 * turns: the loop thread only. */
static void run_loop_tasks(accel_runtime *rt) {
  if (rt->borrowed || rt->loop_tasks.head == NULL)
    return;
  rt_task *tasks = rt->loop_tasks.head;
  rt->loop_tasks.head = rt->loop_tasks.tail = NULL;
  run_tasks(tasks);
}

/* seq_cst, after rt_wakeup_sleep's store: a sender that set remote_pending before this read
 * is seen here, and one that sets it later sees the loop asleep and writes. */
static bool has_remote_work(accel_runtime *rt) {
  return atomic_load(&rt->remote_pending);
}

/* No work this turn (begun at now_ns): keep turning for the spin time since the last work,
 * then sleep. Before sleeping, senders are told to write (rt_wakeup_sleep) and the lists
 * checked once more. */
static void maybe_sleep(accel_runtime *rt, uint64_t now_ns) {
  if (now_ns - rt->last_work_ns < rt->spin_ns)
    return;
  rt_wakeup_sleep(&rt->wake);
  /* A sender (or a stop) that saw the loop awake did not write: look once more. */
  if (has_remote_work(rt) || atomic_load(&rt->closing)) {
    rt_wakeup_awake(&rt->wake);
    return;
  }
  rt->turn_active = false;
  uv_idle_stop(&rt->turn);
}

static void run_turn_timed(accel_runtime *rt, uint64_t t0);

static void run_turn(accel_runtime *rt) {
  uint64_t t0 = uv_hrtime();
  run_turn_timed(rt, t0);
  note_busy(rt, t0); /* a turn from the poll phase (a wake-up) is outside awake..asleep */
}

/* The turn's one clock read is t0, its start: when work was last found, and the spin's
 * measure (a hop from actor to actor reads no clock). */
static void run_turn_timed(accel_runtime *rt, uint64_t t0) {
  rt->turn_ns = t0;
  bool worked = take_remote(rt) || rt->runq_head || rt->local_tasks.head;
  run_queued_actors(rt);
  rt_task *tasks = rt->local_tasks.head;
  rt->local_tasks.head = rt->local_tasks.tail = NULL;
  run_tasks(tasks);
  run_loop_tasks(rt);
  rt_retries_flush(rt);
  rt_sweep(rt);
  if (worked)
    rt->last_work_ns = t0;
  if (!has_local_work(rt) && rt->turn_active)
    maybe_sleep(rt, t0);
}

/* ---- turns run by a client thread while the loop sleeps (borrow.c), token held ---- */

bool rt_turn_has_work(accel_runtime *rt) {
  return has_local_work(rt) || has_remote_work(rt);
}

void rt_turn_run(accel_runtime *rt) {
  run_turn_timed(rt, uv_hrtime());
}

/* After a borrow: stops the idle turn if nothing is left, marks the loop asleep again
 * (senders write from here), and says whether it must wake: work left, a stop, or a handle
 * or timer due before the deadline it sleeps to. */
bool rt_turn_loop_must_wake(accel_runtime *rt) {
  bool work = has_local_work(rt);
  if (!work && rt->turn_active) {
    rt->turn_active = false;
    uv_idle_stop(&rt->turn);
  }
  rt_wakeup_sleep(&rt->wake);
  if (work || has_remote_work(rt) || atomic_load(&rt->closing))
    return true;
  int t = uv_backend_timeout(&rt->loop);
  return t == 0 || (t > 0 && uv_now(&rt->loop) + (uint64_t)t < rt->sleep_until_ms);
}

static void shutdown_tree(accel_runtime *rt);

static void on_turn(uv_idle_t *h) {
  accel_runtime *rt = h->data;
  if (atomic_load(&rt->closing) && !rt->shut_down)
    shutdown_tree(rt);
  else
    run_turn(rt);
}

static void on_wakeup(uv_poll_t *h, int status, int events) {
  accel_runtime *rt = h->data;
  rt_wakeup_drain(&rt->wake);
  rt->last_work_ns = uv_hrtime();
  rt_wake_turn(rt); /* turn (and spin) from here; the turn itself takes the remote lists */
  if (atomic_load(&rt->closing) && !rt->shut_down)
    shutdown_tree(rt);
  else
    run_turn(rt);
}

/* ---- shutdown ---- */

static void wait_remote_users(accel_runtime *rt) {
  while (atomic_load(&rt->remote_users) != 0)
    uv_sleep(0);
}

/* Stops every actor, then drains until nothing is left: queued actors, tasks (then callbacks
 * of futures completed by the drain), retries (they meet stale refs now) and the graveyard. */
static void drain(accel_runtime *rt) {
  do {
    take_remote(rt);
    rt_task *tasks = rt->local_tasks.head;
    rt->local_tasks.head = rt->local_tasks.tail = NULL;
    run_tasks(tasks);
    run_loop_tasks(rt);
    run_queued_actors(rt);
    rt_retries_flush(rt);
    rt_sweep(rt);
  } while (has_local_work(rt) || has_remote_work(rt));
}

static void shutdown_tree(accel_runtime *rt) {
  rt_ask_timers_close(rt);
  if (rt->root) {
    rt_cell_terminate(rt->root, ACCEL_ECLOSED);
    rt->root = NULL;
  }
  wait_remote_users(rt);
  drain(rt);
  rt->shut_down = true;
  rt_wakeup_close(&rt->wake);
  uv_close((uv_handle_t *)&rt->turn, NULL);
  uv_close((uv_handle_t *)&rt->awake, NULL);
  uv_close((uv_handle_t *)&rt->asleep, NULL);
}

void accel_runtime_stop(accel_runtime *rt) {
  if (rt == NULL)
    return;
  /* Pinned like any remote user: the loop closes the async handle only once no one is in. */
  atomic_fetch_add(&rt->remote_users, 1);
  if (!atomic_exchange(&rt->closing, true))
    rt_wakeup_signal(&rt->wake);
  atomic_fetch_sub(&rt->remote_users, 1);
}

/* ---- the root supervisor ---- */

static int root_receive(accel_actor *self, void *state, accel_msg *msg) {
  return 0;
}

static const accel_behavior root_behavior = {.name = "root", .receive = root_receive};

accel_ref accel_runtime_root(accel_runtime *rt) {
  return rt->root_ref;
}

static int root_create(accel_runtime *rt) {
  accel_actor *root;
  int rc = rt_cell_create(rt, NULL, NULL, &root);
  if (rc != 0)
    return rc;
  root->b = &root_behavior;
  /* The root never escalates: a child past its limit is stopped and reported. */
  accel_supervision sup = {.on_limit = ACCEL_LIMIT_STOP_CHILD};
  rt_supervision_defaults(&root->supervision, &sup);
  rt->root = root;
  rt->root_ref = root->ref;
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

/* ACCEL_TURN_HOPS (0: only the actors queued when a turn began run in it, as before), read
 * at each runtime's creation (a benchmark compares both in one process). */
uint32_t rt_turn_hops(void) {
  const char *s = getenv("ACCEL_TURN_HOPS");
  char *end = NULL;
  unsigned long v = s ? strtoul(s, &end, 10) : RT_TURN_HOPS_DEFAULT;
  if (s && (*s == '\0' || *end != '\0' || v > UINT32_MAX))
    v = RT_TURN_HOPS_DEFAULT;
  return (uint32_t)v;
}

/* ---- stalls: how long one iteration of the loop runs callbacks ---- */

static void on_awake(uv_check_t *h) {
  accel_runtime *rt = h->data;
  rt->woke_ns = uv_hrtime();
}

static void note_busy(accel_runtime *rt, uint64_t since_ns) {
  uint64_t busy = uv_hrtime() - since_ns;
  if (busy > atomic_load_explicit(&rt->max_stall_ns, memory_order_relaxed))
    atomic_store_explicit(&rt->max_stall_ns, busy, memory_order_relaxed);
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
static void sleep_in_poll(accel_runtime *rt) {
  int timeout = uv_backend_timeout(&rt->loop);
  if (timeout == 0)
    return;
  rt->sleep_until_ms = timeout < 0 ? UINT64_MAX : uv_now(&rt->loop) + (uint64_t)timeout;
  pthread_mutex_unlock(&rt->token);
  struct pollfd p = {.fd = uv_backend_fd(&rt->loop), .events = POLLIN};
  (void)poll(&p, 1, timeout); /* ready, timed out or interrupted: uv_run sees to it */
  pthread_mutex_lock(&rt->token);
  rt->sleep_until_ms = 0;
}

static void on_asleep(uv_prepare_t *h) {
  accel_runtime *rt = h->data;
  if (rt->woke_ns != 0)
    note_busy(rt, rt->woke_ns);
  if (rt->sleeps_here)
    sleep_in_poll(rt);
}

/* uv_check/uv_prepare init and start only fill the handle (they cannot fail). */
static void stall_watch_init(accel_runtime *rt) {
  uv_check_init(&rt->loop, &rt->awake);
  uv_prepare_init(&rt->loop, &rt->asleep);
  rt->awake.data = rt->asleep.data = rt;
  uv_check_start(&rt->awake, on_awake);
  uv_prepare_start(&rt->asleep, on_asleep);
  uv_unref((uv_handle_t *)&rt->awake);
  uv_unref((uv_handle_t *)&rt->asleep);
}

uint64_t accel_runtime_max_stall_ns(accel_runtime *rt, int reset) {
  if (rt == NULL)
    return 0;
  return reset ? atomic_exchange(&rt->max_stall_ns, 0) : atomic_load(&rt->max_stall_ns);
}

static int loop_init(accel_runtime *rt) {
  if (uv_loop_init(&rt->loop) != 0)
    return ACCEL_ESYS;
  if (rt_wakeup_init(&rt->wake, &rt->loop, on_wakeup, rt) != 0) {
    uv_loop_close(&rt->loop);
    return ACCEL_ESYS;
  }
  uv_idle_init(&rt->loop, &rt->turn);
  rt->turn.data = rt;
  rt_list_init(&rt->ask_timers);
  rt->spin_ns = rt_spin_ns();
  rt->turn_hops = rt_turn_hops();
  stall_watch_init(rt);
  return 0;
}

int accel_runtime_create(accel_runtime **out, const accel_runtime_opts *opts) {
  if (out == NULL)
    return ACCEL_EINVAL;
  rt_log_init_from_env();
  accel_runtime *rt = rt_calloc(1, sizeof *rt);
  if (rt == NULL)
    return ACCEL_ENOMEM;
  uint32_t max_actors = opts && opts->max_actors ? opts->max_actors : RT_MAX_ACTORS_DEFAULT;
  int rc = rt_slots_init(rt, max_actors);
  if (rc == 0)
    rc = loop_init(rt);
  if (rc != 0) {
    rt_slots_free(rt);
    rt_free(rt);
    return rc;
  }
  pthread_mutex_init(&rt->remote_mu, NULL);
  pthread_mutex_init(&rt->token, NULL);
  atomic_init(&rt->remote_pending, false);
  atomic_init(&rt->borrow_off, rt_borrow_env_off());
  rt_future_pool_open(); /* closed by accel_runtime_destroy, below too */
  rc = root_create(rt);
  if (rc != 0) {
    accel_runtime_destroy(rt);
    return rc;
  }
  *out = rt;
  return 0;
}

static void loop_body(accel_runtime *rt) {
  pthread_mutex_lock(&rt->token);
  rt_tls_loop = rt;
  rt->last_work_ns = uv_hrtime();
  rt_wakeup_awake(&rt->wake); /* the first turns look at the remote lists anyway */
  rt_wake_turn(rt);
  rt->sleeps_here = true; /* in `asleep`: uv_run itself never waits */
  while (uv_run(&rt->loop, UV_RUN_NOWAIT) != 0)
    ;
  rt->sleeps_here = false;
  rt_tls_loop = NULL;
  pthread_mutex_unlock(&rt->token);
}

int accel_runtime_run(accel_runtime *rt) {
  if (rt == NULL)
    return ACCEL_EINVAL;
  if (atomic_exchange(&rt->running, true) || rt->shut_down)
    return ACCEL_EALREADY;
  loop_body(rt);
  return 0;
}

static void thread_main(void *arg) {
  pthread_setname_np(pthread_self(), "accel-loop"); /* seen in top -H, gdb */
  loop_body(arg);
}

int accel_runtime_start(accel_runtime *rt) {
  if (rt == NULL)
    return ACCEL_EINVAL;
  if (atomic_exchange(&rt->running, true) || rt->shut_down)
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
  if (rt_tls_loop == rt)
    return ACCEL_EDEADLK;
  uv_thread_join(&rt->thread);
  rt->has_thread = false;
  return 0;
}

void accel_runtime_destroy(accel_runtime *rt) {
  if (rt == NULL)
    return;
  if (rt->has_thread) {
    accel_runtime_stop(rt);
    accel_runtime_join(rt);
  }
  if (!rt->shut_down) {
    /* The loop never ran (or never saw the stop): shut down here, as the loop's owner. */
    atomic_store(&rt->closing, true);
    rt_tls_loop = rt;
    shutdown_tree(rt);
    uv_run(&rt->loop, UV_RUN_DEFAULT);
    rt_tls_loop = NULL;
  }
  /* Tasks posted after the drain (futures completed late by other threads) run here. */
  for (;;) {
    take_remote(rt);
    rt_task *tasks = rt->local_tasks.head;
    rt->local_tasks.head = rt->local_tasks.tail = NULL;
    if (tasks == NULL)
      break;
    run_tasks(tasks);
  }
  uv_loop_close(&rt->loop);
  rt_wakeup_free(&rt->wake);
  pthread_mutex_destroy(&rt->remote_mu);
  pthread_mutex_destroy(&rt->token);
  rt_slots_free(rt);
  rt_free(rt);
  rt_future_pool_close();
}

int accel_runtime_on_loop(accel_runtime *rt) {
  return rt != NULL && rt_tls_loop == rt;
}

bool rt_on_a_loop(void) {
  return rt_tls_loop != NULL;
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
}
