/* Tiny ops from T threads at once into one device (docs/PERFORMANCE.md, "Several links into
 * one worker"): what a worker process serves when its calls come through one link (one thread
 * there reads and submits them all, as with one acceld world) against a link per thread (a
 * thread each there, as with a world per acceld loop), and the floor: T threads of one process
 * submitting to the backend itself, a device open each (CUDA: in the GPU's primary context,
 * as a worker's links are).
 *
 * Each thread: fill one element, record an event behind it, wait for the event; aggregate
 * ops/s over all threads.
 *
 * Usage: bench-worker-links [--backend NAME] [--threads 1,2,4,8] [--seconds S]
 *                           [--worker PATH-TO-accel-device] [--only COLUMN]
 *   (--only 1, 2 or 3: that column alone, the others 0: for profiles)
 *   (backend: cuda where it finds a device, else cpu; worker: the build's daemon/accel-device) */
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/worker/proxy.h"

#define MAX_THREADS 16

static double seconds = 2.0;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void ok(int rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "bench-worker-links: %s: %s\n", what, accel_err_name(rc));
    exit(1);
  }
}

typedef struct runner {
  const be_ops *be;
  be_device *dev;
  atomic_bool *go;
  uint64_t ops;
} runner;

static void *run(void *arg) {
  runner *r = arg;
  be_queue *q = NULL;
  be_event *e = NULL;
  be_mem m = {0};
  ok(r->be->queue_create(r->dev, &q), "queue_create");
  ok(r->be->event_create(r->dev, &e), "event_create");
  ok(r->be->mem_alloc(r->dev, 64, &m), "mem_alloc");
  while (!atomic_load(r->go)) {
  }
  double until = now_s() + seconds;
  uint64_t n = 0;
  while (now_s() < until) {
    ok(r->be->fill(q, m, 0, 1, 4, n), "fill");
    ok(r->be->event_record(e, q), "event_record");
    ok(r->be->event_sync(e), "event_sync");
    n++;
  }
  r->ops = n;
  r->be->mem_free(r->dev, &m);
  r->be->event_destroy(e);
  r->be->queue_destroy(q);
  return NULL;
}

/* T threads on the given devices (dev[i] for thread i); aggregate kops/s. */
static double measure(const be_ops *be, be_device **dev, int t) {
  runner r[MAX_THREADS];
  pthread_t th[MAX_THREADS];
  atomic_bool go = false;
  for (int i = 0; i < t; i++) {
    r[i] = (runner){.be = be, .dev = dev[i], .go = &go};
    if (pthread_create(&th[i], NULL, run, &r[i]) != 0)
      ok(ACCEL_ESYS, "pthread_create");
  }
  usleep(100000); /* every thread has made its queue */
  double t0 = now_s();
  atomic_store(&go, true);
  uint64_t total = 0;
  for (int i = 0; i < t; i++) {
    pthread_join(th[i], NULL);
    total += r[i].ops;
  }
  double took = now_s() - t0;
  return (double)total / took / 1e3;
}

static be_device *open_dev(const be_ops *be, uint32_t link) {
  be_open_opts o = {.primary_context = 1, .worker_link = link};
  be_device *d = NULL;
  ok(be->open(0, &o, &d), "open");
  return d;
}

static double in_process(const be_ops *real, int t) {
  be_device *dev[MAX_THREADS];
  for (int i = 0; i < t; i++)
    dev[i] = open_dev(real, 0);
  double k = measure(real, dev, t);
  for (int i = 0; i < t; i++)
    real->close(dev[i]);
  return k;
}

static double worker_links(const be_ops *proxy, int t, bool one_link) {
  be_device *dev[MAX_THREADS] = {NULL};
  dev[0] = open_dev(proxy, 0);
  for (int i = 1; i < t; i++)
    dev[i] = one_link ? dev[0] : open_dev(proxy, (uint32_t)i);
  double k = measure(proxy, dev, t);
  for (int i = 0; i < (one_link ? 1 : t); i++)
    proxy->close(dev[i]);
  return k;
}

static const be_ops *backend_named(const char *name) {
  for (const be_entry *e = be_registry(); e->name; e++)
    if (e->ops != NULL && strcmp(e->name, name) == 0)
      return e->ops;
  return NULL;
}

static bool has_device(const be_ops *be) {
  int count = 0;
  char why[128];
  return be != NULL && be->probe(&count, why, sizeof why) == 0 && count > 0;
}

int main(int argc, char **argv) {
  const char *backend = NULL, *threads = "1,2,4,8";
  int only = 0;
  char worker[4096] = "";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--backend") == 0)
      backend = argv[i + 1];
    else if (strcmp(argv[i], "--threads") == 0)
      threads = argv[i + 1];
    else if (strcmp(argv[i], "--seconds") == 0)
      seconds = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--only") == 0)
      only = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--worker") == 0)
      snprintf(worker, sizeof worker, "%s", argv[i + 1]);
  }
  if (worker[0] == '\0') { /* tests/bench/ -> daemon/accel-device of the same build */
    char self[4000];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
      return 1;
    self[n] = '\0';
    snprintf(worker, sizeof worker, "%s/../../daemon/accel-device", dirname(self));
  }
  const be_ops *real = backend_named(backend ? backend : "cuda");
  if (backend == NULL && !has_device(real))
    real = backend_named("cpu");
  if (!has_device(real)) {
    fprintf(stderr, "bench-worker-links: no device of backend %s\n", backend ? backend : "cuda");
    return 77;
  }
  bw_configure(&(bw_options){.helper = worker});
  const be_ops *proxy = bw_proxy_ops(real);
  printf("backend %s, %.1f s per row, tiny op + wait per thread (kops/s, all threads)\n\n",
         real->name, seconds);
  printf("| threads | one process, a device each | worker, one link | worker, a link each | "
         "a link each ÷ one link |\n|---|---|---|---|---|\n");
  for (const char *p = threads; *p;) {
    int t = atoi(p);
    if (t >= 1 && t <= MAX_THREADS) {
      double a = only == 0 || only == 1 ? in_process(real, t) : 0;
      double b = only == 0 || only == 2 ? worker_links(proxy, t, true) : 0;
      double c = only == 0 || only == 3 ? worker_links(proxy, t, false) : 0;
      printf("| %d | %.1f | %.1f | %.1f | %.2f× |\n", t, a, b, c, c / b);
      fflush(stdout);
    }
    p += strcspn(p, ",");
    p += *p == ',';
  }
  return 0;
}
