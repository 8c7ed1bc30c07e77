/* Futures: a status and a value set once, waited on by any thread, polled, or handed to a
 * `then` callback that runs on the runtime's loop. A mutex guards the fields; `done` is also
 * atomic so poll never takes the lock. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/alloc.h"
#include "runtime/deadline.h"
#include "runtime/future_help.h"
#include "runtime/rt.h"

struct accel_future {
  rt_task task; /* posts the `then` callback to the loop */
  accel_runtime *rt;
  atomic_int refs;
  atomic_bool done;
  int status;
  void *value;
  void (*drop)(void *);
  accel_future_cb cb;
  void *cb_arg;
  bool has_cb;
  int notify_fd; /* accel_future_notify_fd: where the token goes */
  uint64_t notify_token;
  int waiters;
  /* Threads in a wait, spinning or asleep: they run a helper offered (timed ones briefly). */
  atomic_int helping;
  _Atomic(rt_helper *) helper; /* set and taken under mu; read without it by spinners */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  accel_future *pool_next; /* in the pool of freed futures */
};

/* Freed futures kept for reuse, process-wide, at most POOL_MAX, while a runtime lives (the
 * last runtime destroyed frees them). A client's future is made on its thread and often
 * freed on the loop's: a fresh allocation each time pulled the allocator's state and the
 * block's cache lines across cores (with the op's envelope, ops/op.h, about 4 us of a
 * 17 us tiny op on a 16-core host). A pooled future keeps its mutex and condition variable. */
#define POOL_MAX 64

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static accel_future *pool_head;
static unsigned pool_len, pool_runtimes;

static void future_destroy(accel_future *f) {
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
  rt_free(f);
}

void rt_future_pool_open(void) {
  pthread_mutex_lock(&pool_mu);
  pool_runtimes++;
  pthread_mutex_unlock(&pool_mu);
}

void rt_future_pool_close(void) {
  pthread_mutex_lock(&pool_mu);
  accel_future *head = NULL;
  if (--pool_runtimes == 0) {
    head = pool_head;
    pool_head = NULL;
    pool_len = 0;
  }
  pthread_mutex_unlock(&pool_mu);
  while (head) {
    accel_future *next = head->pool_next;
    future_destroy(head);
    head = next;
  }
}

/* A pooled future, made pending again; NULL if the pool is empty. */
static accel_future *pool_take(void) {
  pthread_mutex_lock(&pool_mu);
  accel_future *f = pool_head;
  if (f) {
    pool_head = f->pool_next;
    pool_len--;
  }
  pthread_mutex_unlock(&pool_mu);
  return f;
}

/* False if the pool is full or no runtime lives: the caller frees f. */
static bool pool_put(accel_future *f) {
  pthread_mutex_lock(&pool_mu);
  bool kept = pool_runtimes > 0 && pool_len < POOL_MAX;
  if (kept) {
    f->pool_next = pool_head;
    pool_head = f;
    pool_len++;
  }
  pthread_mutex_unlock(&pool_mu);
  return kept;
}

static void run_then(rt_task *task) {
  accel_future *f = (accel_future *)task;
  f->cb(f, f->status, f->cb_arg);
  accel_future_release(f); /* the callback's reference */
}

/* A new future's lock and condition variable, or a pooled one's (initialised already). */
static accel_future *future_alloc(void) {
  accel_future *f = pool_take();
  if (f)
    return f;
  f = rt_malloc(sizeof *f);
  if (f == NULL)
    return NULL;
  if (rt_cond_init_monotonic(&f->cv) != 0) { /* accel_future_wait's deadlines are monotonic */
    rt_free(f);
    return NULL;
  }
  pthread_mutex_init(&f->mu, NULL);
  return f;
}

int accel_future_create(accel_runtime *rt, accel_future **out) {
  if (rt == NULL || out == NULL)
    return ACCEL_EINVAL;
  accel_future *f = future_alloc();
  if (f == NULL)
    return ACCEL_ENOMEM;
  f->status = 0;
  f->value = NULL;
  f->drop = NULL;
  f->cb = NULL;
  f->cb_arg = NULL;
  f->has_cb = false;
  f->notify_fd = -1;
  f->notify_token = 0;
  f->waiters = 0;
  f->pool_next = NULL;
  f->rt = rt;
  f->task.fn_ = run_then;
  atomic_init(&f->refs, 1);
  atomic_init(&f->done, false);
  atomic_init(&f->helping, 0);
  atomic_init(&f->helper, NULL);
  *out = f;
  return 0;
}

void accel_future_retain(accel_future *f) {
  atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
}

void accel_future_release(accel_future *f) {
  if (f == NULL || atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1)
    return;
  if (f->value && f->drop)
    f->drop(f->value);
  rt_helper_release(atomic_load_explicit(&f->helper, memory_order_relaxed));
  if (!pool_put(f))
    future_destroy(f);
}

int accel_future_complete(accel_future *f, int status, void *value, void (*drop)(void *)) {
  if (f == NULL)
    return ACCEL_EINVAL;
  pthread_mutex_lock(&f->mu);
  if (atomic_load_explicit(&f->done, memory_order_relaxed)) {
    pthread_mutex_unlock(&f->mu);
    return ACCEL_EALREADY;
  }
  f->status = status;
  f->value = value;
  f->drop = drop;
  atomic_store_explicit(&f->done, true, memory_order_release);
  bool post = f->has_cb;
  if (f->waiters)
    pthread_cond_broadcast(&f->cv);
  rt_helper *h = atomic_exchange_explicit(&f->helper, NULL, memory_order_relaxed);
  pthread_mutex_unlock(&f->mu);
  rt_helper_release(h); /* no longer needed: nobody waits on a completed future */
  if (post)
    rt_post_loop_thread(f->rt, &f->task);
  return 0;
}

bool rt_future_offer_help(accel_future *f, rt_helper *h) {
  pthread_mutex_lock(&f->mu);
  if (atomic_load_explicit(&f->done, memory_order_relaxed) ||
      atomic_load_explicit(&f->helper, memory_order_relaxed) != NULL) {
    pthread_mutex_unlock(&f->mu);
    return false;
  }
  rt_helper_retain(h);
  atomic_store(&f->helper, h); /* seq_cst against `helping`: see wait_helping */
  bool committed = atomic_load(&f->helping) > 0;
  if (committed && f->waiters)
    pthread_cond_broadcast(&f->cv); /* an untimed waiter asleep: it has work now */
  pthread_mutex_unlock(&f->mu);
  return committed;
}

int rt_future_complete_release(accel_future *f, int status) {
  int rc = accel_future_complete(f, status, NULL, NULL);
  accel_future_release(f);
  return rc;
}

int accel_future_poll(accel_future *f) {
  if (f == NULL)
    return ACCEL_EINVAL;
  if (!atomic_load_explicit(&f->done, memory_order_acquire))
    return ACCEL_EAGAIN;
  return f->status;
}

bool rt_future_has_helper_waiting(accel_future *f) {
  return atomic_load(&f->helping) > 0;
}

/* A completion that comes within microseconds is cheaper to catch spinning than sleeping.
 * A helping waiter also stops spinning when help is offered. */
static void spin_until_ready(accel_future *f, bool helping) {
  uint64_t spin = rt_spin_ns();
  if (spin == 0)
    return;
  uint64_t until = uv_hrtime() + spin;
  do {
    for (int i = 0; i < 64; i++) {
      if (atomic_load_explicit(&f->done, memory_order_acquire) ||
          (helping && atomic_load_explicit(&f->helper, memory_order_acquire) != NULL))
        return;
      rt_cpu_relax();
    }
  } while (uv_hrtime() < until);
}

/* How long a timed waiter works at help it was offered (a helper's try_run polls) before it
 * sleeps until the op's own completion: a tiny op ends well within it, a long one is not worth
 * a busy core. */
#define TIMED_HELP_NS 500000u

/* Under mu: takes the offered helper, runs it unlocked, locks again. A timed waiter (until_ns
 * not 0) runs its try_run, bounded by until_ns; if that runs out, the helper goes back to the
 * future for an untimed waiter (unless the future is done or has another by then). */
static void run_help(accel_future *f, uint64_t until_ns) {
  rt_helper *h = atomic_exchange_explicit(&f->helper, NULL, memory_order_relaxed);
  pthread_mutex_unlock(&f->mu);
  bool done = true;
  if (until_ns == 0)
    h->run(h);
  else
    done = h->try_run(h, until_ns);
  pthread_mutex_lock(&f->mu);
  if (!done && !atomic_load_explicit(&f->done, memory_order_relaxed) &&
      atomic_load_explicit(&f->helper, memory_order_relaxed) == NULL) {
    atomic_store(&f->helper, h);    /* its reference goes back with it */
    pthread_cond_broadcast(&f->cv); /* for an untimed waiter asleep meanwhile */
  } else {
    rt_helper_release(h);
  }
}

/* Under mu: whether this waiter runs the helper offered now: an untimed one any; a timed one
 * only one with a bounded try, once per wait (a helper with only `run` may block past the
 * timeout: it is left for an untimed waiter). */
static bool takes_help(accel_future *f, bool timed, bool tried) {
  rt_helper *h = atomic_load_explicit(&f->helper, memory_order_relaxed);
  return h != NULL && (!timed || (h->try_run != NULL && !tried));
}

/* When a timed waiter stops helping: the deadline, or its help budget from now if sooner. */
static uint64_t help_until(const struct timespec *deadline) {
  uint64_t now = uv_hrtime(), budget = now + TIMED_HELP_NS;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  int64_t left = (int64_t)(deadline->tv_sec - t.tv_sec) * 1000000000 +
                 (deadline->tv_nsec - t.tv_nsec); /* both on the monotonic clock */
  uint64_t end = left <= 0 ? now : now + (uint64_t)left;
  return end < budget ? end : budget;
}

/* Waits for f under mu, running help offered meanwhile: an untimed waiter as long as it
 * takes, a timed one within its time (TIMED_HELP_NS at most, then as usual). */
static int wait_locked(accel_future *f, bool timed, const struct timespec *deadline) {
  int rc = 0;
  bool tried = false;
  f->waiters++;
  for (;;) {
    if (atomic_load_explicit(&f->done, memory_order_relaxed))
      break;
    if (rc != ETIMEDOUT && takes_help(f, timed, tried)) {
      run_help(f, timed ? help_until(deadline) : 0);
      tried = timed;
      continue;
    }
    if (rc == ETIMEDOUT)
      break;
    if (!timed)
      pthread_cond_wait(&f->cv, &f->mu);
    else
      rc = pthread_cond_timedwait(&f->cv, &f->mu, deadline);
  }
  f->waiters--;
  return atomic_load_explicit(&f->done, memory_order_relaxed) ? f->status : ACCEL_ETIMEDOUT;
}

int accel_future_wait(accel_future *f, int64_t timeout_ms) {
  if (f == NULL)
    return ACCEL_EINVAL;
  if (atomic_load_explicit(&f->done, memory_order_acquire))
    return f->status;
  if (rt_here(f->rt) != NULL)
    return ACCEL_EDEADLK; /* only the loop could complete it: waiting here never ends */
  /* Every waiter that waits at all helps: one with a timeout only within it. */
  bool helping = timeout_ms != 0;
  /* Counted before looking for help (seq_cst, as the offer stores the helper, then reads
   * this): an offer either sees this thread committed or is seen by it. */
  if (helping)
    atomic_fetch_add(&f->helping, 1);
  if (timeout_ms != 0)
    spin_until_ready(f, helping);
  struct timespec deadline = rt_deadline_after(timeout_ms < 0 ? 0 : timeout_ms);
  pthread_mutex_lock(&f->mu);
  int status = wait_locked(f, timeout_ms >= 0, &deadline);
  pthread_mutex_unlock(&f->mu);
  if (helping)
    atomic_fetch_sub(&f->helping, 1);
  return status;
}

/* Registers the one `then` callback; with notify_fd >= 0 it also records where
 * notify_by_write sends the token, under the same lock so a refused second registration
 * cannot touch the first one's fields. */
static int set_then(accel_future *f, accel_future_cb cb, void *arg, int notify_fd, uint64_t token) {
  pthread_mutex_lock(&f->mu);
  if (f->has_cb) {
    pthread_mutex_unlock(&f->mu);
    return ACCEL_EALREADY;
  }
  f->has_cb = true;
  f->cb = cb;
  f->cb_arg = arg;
  f->notify_fd = notify_fd;
  f->notify_token = token;
  accel_future_retain(f);
  bool post = atomic_load_explicit(&f->done, memory_order_relaxed);
  pthread_mutex_unlock(&f->mu);
  if (post)
    rt_post_loop_thread(f->rt, &f->task);
  return 0;
}

int accel_future_then(accel_future *f, accel_future_cb cb, void *arg) {
  if (f == NULL || cb == NULL)
    return ACCEL_EINVAL;
  return set_then(f, cb, arg, -1, 0);
}

/* One write(2) of 8 bytes: atomic on a pipe, so tokens from many futures never interleave. */
static void notify_by_write(accel_future *f, int status, void *arg) {
  (void)status;
  (void)arg;
  ssize_t n;
  do
    n = write(f->notify_fd, &f->notify_token, sizeof f->notify_token);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof f->notify_token)
    accel_log(ACCEL_LOG_ERROR, "future", "completion token not written to fd %d: %s", f->notify_fd,
              n < 0 ? strerror(errno) : "short write");
}

int accel_future_notify_fd(accel_future *f, int fd, uint64_t token) {
  if (f == NULL || fd < 0)
    return ACCEL_EINVAL;
  return set_then(f, notify_by_write, NULL, fd, token);
}

void *accel_future_value(accel_future *f) {
  if (f == NULL || !atomic_load_explicit(&f->done, memory_order_acquire))
    return NULL;
  return f->value;
}
