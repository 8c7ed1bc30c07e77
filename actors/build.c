/* Where user-module builds run (build.h): a thread per running build, a FIFO behind them,
 * and the compiler that sends a backend's compile step to the build helper.
 *
 * A build's thread is made when it starts and joined on the loop when it is over (it has
 * only to return by then); the thread that ends a build starts the next queued one, so the
 * queue moves without the loop. The loop hears of the end through the build's own uv_async
 * handle, which also keeps the loop running until then (a shutdown waits for builds in
 * flight, as it waited for libuv's work). */
#include "actors/build.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/loop.h"

#define AUTO_MAX_BUILDS 4u

/* The process's options and counters, under `mu`. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static dev_build_opts opts = {.max_queued = DEV_BUILD_MAX_QUEUED};
static char helper[PATH_MAX];
static uint32_t running, queued;
static rt_list waiting = {&waiting, &waiting};

static uint32_t auto_max_builds(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus < 1 ? 1 : cpus > (long)AUTO_MAX_BUILDS ? AUTO_MAX_BUILDS : (uint32_t)cpus;
}

void dev_builds_configure(const dev_build_opts *o) {
  pthread_mutex_lock(&mu);
  opts = *o;
  if (o->helper != NULL && o->helper[0] != '\0')
    snprintf(helper, sizeof helper, "%s", o->helper);
  opts.helper = helper;
  pthread_mutex_unlock(&mu);
}

void dev_build_init(dev_build *b, int (*work)(dev_build *), void (*finish)(dev_build *, int)) {
  memset(b, 0, sizeof *b);
  b->work = work;
  b->finish = finish;
  rt_list_init(&b->link);
  be_child_slot_init(&b->slot);
}

void dev_build_fini(dev_build *b) {
  be_child_slot_fini(&b->slot);
}

/* Under mu: what b uses, fixed when it is submitted. */
static void take_opts(dev_build *b) {
  b->sandbox = opts.sandbox;
  snprintf(b->helper, sizeof b->helper, "%s", helper);
  b->limits = (be_child_limits){
      .helper = b->helper,
      .timeout_ms = opts.timeout_ms ? opts.timeout_ms : DEV_BUILD_TIMEOUT_MS,
      .memory_mb = opts.memory_mb ? opts.memory_mb : DEV_BUILD_MEMORY_MB,
  };
}

static uint32_t max_builds(void) {
  return opts.max_builds ? opts.max_builds : auto_max_builds();
}

/* ---- threads ---- */

static void *build_thread(void *arg);

/* Under mu: b runs on a thread of its own, or is over at once with ACCEL_ESYS. */
static bool start(dev_build *b) {
  if (pthread_create(&b->thread, NULL, build_thread, b) == 0) {
    b->has_thread = true;
    return true;
  }
  b->status = ACCEL_ESYS;
  uv_async_send(&b->async);
  return false;
}

/* Under mu: the next queued build takes the ending one's place. */
static void start_next(void) {
  while (!rt_list_empty(&waiting)) {
    dev_build *n = RT_LIST_FIRST(&waiting, dev_build, link);
    rt_list_remove(&n->link);
    n->queued = false;
    queued--;
    if (start(n))
      return;
  }
  running--;
}

static void *build_thread(void *arg) {
  dev_build *b = arg;
  pthread_setname_np(pthread_self(), "accel-build"); /* top -H, gdb */
  int status = b->work(b);
  pthread_mutex_lock(&mu);
  b->status = status;
  start_next();
  pthread_mutex_unlock(&mu);
  uv_async_send(&b->async); /* b is the loop's from here */
  return NULL;
}

/* ---- the loop's side ---- */

static void on_closed(uv_handle_t *h) {
  dev_build *b = h->data;
  b->done = true;
  b->finish(b, b->status);
}

static void on_over(uv_async_t *h) {
  dev_build *b = h->data;
  if (b->has_thread) /* it has sent, and has only to return */
    pthread_join(b->thread, NULL);
  uv_close((uv_handle_t *)&b->async, on_closed);
}

/* Under mu: a place for b (running or queued), or ACCEL_EBUSY. */
static int admit(dev_build *b) {
  if (running < max_builds()) {
    running++;
    return 0;
  }
  if (queued >= opts.max_queued)
    return ACCEL_EBUSY;
  queued++;
  b->queued = true;
  return 0;
}

int dev_build_submit(accel_runtime *rt, dev_build *b) {
  pthread_mutex_lock(&mu);
  int rc = admit(b);
  if (rc == 0 && uv_async_init(rt_uv_loop(rt), &b->async, on_over) != 0) {
    if (b->queued)
      queued--;
    else
      running--;
    b->queued = false;
    rc = ACCEL_ESYS;
  }
  if (rc == 0) {
    b->async.data = b;
    take_opts(b);
    if (b->queued)
      rt_list_push_back(&waiting, &b->link);
    else if (!start(b))
      start_next(); /* b's place goes to the next, if any (b hears ACCEL_ESYS) */
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

void dev_build_cancel(dev_build *b) {
  if (b->done)
    return;
  pthread_mutex_lock(&mu);
  bool was_queued = b->queued;
  if (was_queued) {
    rt_list_remove(&b->link);
    b->queued = false;
    queued--;
    b->status = ACCEL_ECANCELED;
  }
  pthread_mutex_unlock(&mu);
  if (was_queued)
    uv_async_send(&b->async);
  else
    be_child_slot_cancel(&b->slot);
}

bool dev_build_cancelled(dev_build *b) {
  pthread_mutex_lock(&b->slot.mu);
  bool c = b->slot.cancelled;
  pthread_mutex_unlock(&b->slot.mu);
  return c;
}

/* ---- the compiler in the helper ---- */

static int helper_compile(const be_compiler *c, const char *target, uint32_t source,
                          const void *code, size_t len, const char *options, void **image,
                          size_t *image_len, char **log) {
  const dev_build_compiler *dc = (const dev_build_compiler *)c;
  dev_build *b = dc->build;
  return be_child_compile(&b->limits, &b->slot, dc->backend, target, source, code, len, options,
                          image, image_len, log);
}

const be_compiler *dev_build_compiler_for(dev_build *b, const be_ops *be,
                                          dev_build_compiler *storage) {
  if (!b->sandbox || be->module == NULL || be->module->load_with == NULL)
    return NULL;
  *storage =
      (dev_build_compiler){.base = {.compile = helper_compile}, .build = b, .backend = be->name};
  return &storage->base;
}
