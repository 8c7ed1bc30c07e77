/* Latency of the backend interface for an empty item, per built backend (device 0):
 *   round trip: submit a host callback, the caller spins until it has run (median, p90);
 *   sync:       submit a host callback, record an event, event_sync it (median);
 *   submit:     the cost of one host_callback call alone (mean of a burst on a held queue).
 * The figures are what a tiny op costs the backend layer, to compare with StarPU's empty task.
 * Not a test: `meson test --benchmark --suite backends`, or run it directly (argument: rounds). */
#include <stdatomic.h>

#include "../test.h"
#include "backends/backend.h"

static void set_flag(void *arg, int status) {
  (void)status;
  atomic_store_explicit((atomic_int *)arg, 1, memory_order_release);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *ns, size_t n) {
  qsort(ns, n, sizeof *ns, cmp_u64);
  printf("  %-12s median %6" PRIu64 " ns   p10 %6" PRIu64 "   p90 %6" PRIu64 "   (%zu rounds)\n",
         what, ns[n / 2], ns[n / 10], ns[n * 9 / 10], n);
}

static void round_trip(const be_ops *o, be_queue *q, uint64_t *ns, size_t n) {
  atomic_int flag;
  for (size_t i = 0; i < n; i++) {
    atomic_store(&flag, 0);
    uint64_t t0 = test_now_ns();
    CHECK_OK(o->host_callback(q, set_flag, &flag));
    while (!atomic_load_explicit(&flag, memory_order_acquire)) {
    }
    ns[i] = test_now_ns() - t0;
  }
}

static void sync_trip(const be_ops *o, be_queue *q, be_event *ev, uint64_t *ns, size_t n) {
  atomic_int flag;
  for (size_t i = 0; i < n; i++) {
    uint64_t t0 = test_now_ns();
    CHECK_OK(o->host_callback(q, set_flag, &flag));
    CHECK_OK(o->event_record(ev, q));
    CHECK_OK(o->event_sync(ev));
    ns[i] = test_now_ns() - t0;
  }
}

/* Holds the queue while the burst is submitted, so submission is measured alone. */
static void hold(void *arg, int status) {
  (void)status;
  while (!atomic_load_explicit((atomic_int *)arg, memory_order_acquire)) {
  }
}

static double submit_burst(const be_ops *o, be_queue *q, be_event *ev, size_t n) {
  atomic_int flag, open = 0;
  CHECK_OK(o->host_callback(q, hold, &open));
  uint64_t t0 = test_now_ns();
  for (size_t i = 0; i < n; i++)
    CHECK_OK(o->host_callback(q, set_flag, &flag));
  double per = (double)(test_now_ns() - t0) / (double)n;
  atomic_store(&open, 1);
  CHECK_OK(o->event_record(ev, q));
  CHECK_OK(o->event_sync(ev));
  return per;
}

/* The first burst fills the backend's caches of queue entries; the second is timed. */
static double submit_cost(const be_ops *o, be_queue *q, be_event *ev, size_t n) {
  submit_burst(o, q, ev, n);
  return submit_burst(o, q, ev, n);
}

static void bench(const be_ops *o, size_t n) {
  be_device *d = NULL;
  be_queue *q = NULL;
  be_event *ev = NULL;
  CHECK_OK(o->open(0, NULL, &d));
  CHECK_OK(o->queue_create(d, &q));
  CHECK_OK(o->event_create(d, &ev));
  uint64_t *ns = calloc(n, sizeof *ns);
  CHECK(ns != NULL);
  printf("%s:\n", o->name);
  round_trip(o, q, ns, n / 10); /* warm-up */
  round_trip(o, q, ns, n);
  report("round trip", ns, n);
  sync_trip(o, q, ev, ns, n);
  report("event sync", ns, n);
  printf("  %-12s mean %6.1f ns per host_callback (a burst of 1000 on a held queue)\n", "submit",
         submit_cost(o, q, ev, 1000));
  free(ns);
  o->event_destroy(ev);
  o->queue_destroy(q);
  o->close(d);
}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
  for (const be_entry *e = be_registry(); e->name != NULL; e++) {
    int count = 0;
    if (e->ops != NULL && e->ops->probe(&count, NULL, 0) == 0 && count > 0)
      bench(e->ops, n > 10 ? n : 10);
  }
  return 0;
}
