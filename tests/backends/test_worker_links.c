/* Several links into one device worker (backends/worker/: proxy_link.c, serve_attach.c): acceld
 * opens a device once per world (be_open_opts.worker_link), and each world's calls go through
 * a link of its own to the same worker process, served there by a thread of its own.
 *   - links serve side by side: threads, each with its own link, fill and read back buffers
 *     at once, and see only their own values; one process serves them all and ends with the
 *     last device;
 *   - the last link there may be is served, one past it is refused;
 *   - a device of one link that faults kills the worker: the other links' work fails with
 *     ACCEL_EDEVLOST, and a fresh worker serves the next open;
 *   - links attach while a loop thread keeps gathering frames for the first link (its cork
 *     takes the links' lock under the link's send lock: an attach that held the links' lock
 *     while it called the worker deadlocked within seconds);
 *   - a link an event keeps past its worker's end forgets the worker's pid before the reap.
 * Run with ACCEL_TEST_WORKERS naming accel-device (meson: worker-links); the cpu backend
 * runs in the worker, as any backend can. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "accel/runtime.h"
#include "backends/cpu/backend_cpu.h"
#include "backends/worker/proxy.h"

static const be_ops *B;

static pid_t worker_of(be_device *d) {
  return ((bw_pdev *)d)->link->pid;
}

static be_device *open_on(uint32_t link, int fault_injection) {
  be_open_opts o = {.fault_injection = fault_injection, .worker_link = link};
  be_device *d = NULL;
  CHECK_OK(B->open(0, &o, &d));
  CHECK(d != NULL);
  return d;
}

/* Everything submitted to q so far: its status. */
static int finish(be_device *d, be_queue *q) {
  be_event *e = NULL;
  int rc = B->event_create(d, &e);
  if (rc != 0)
    return rc; /* a lost device makes none */
  rc = B->event_record(e, q);
  if (rc == 0)
    rc = B->event_sync(e);
  B->event_destroy(e);
  return rc;
}

/* Fills `count` uint32 with value and reads them back: the status, and whether every one
 * came back as written. */
static int fill_and_read(be_device *d, be_queue *q, be_mem m, uint32_t *host, size_t count,
                         uint32_t value, bool *same) {
  int rc = B->fill(q, m, 0, count, sizeof(uint32_t), value);
  if (rc == 0)
    rc = B->copy_d2h(q, host, m, 0, count * sizeof(uint32_t));
  if (rc == 0)
    rc = finish(d, q);
  *same = true;
  for (size_t i = 0; rc == 0 && i < count; i++)
    *same = *same && host[i] == value;
  return rc;
}

/* A queue and a buffer of `count` on d, filled with value and read back, then freed: d serves. */
static void check_serves(be_device *d, size_t count, uint32_t value) {
  be_queue *q = NULL;
  be_mem m = {0};
  uint32_t *host = malloc(count * sizeof *host);
  bool same = false;
  CHECK(host != NULL);
  CHECK_OK(B->queue_create(d, &q));
  CHECK_OK(B->mem_alloc(d, count * sizeof *host, &m));
  CHECK_OK(fill_and_read(d, q, m, host, count, value, &same));
  CHECK(same);
  B->mem_free(d, &m);
  B->queue_destroy(q);
  free(host);
}

/* ---- side by side ---- */

enum { LINKS = 4, ROUNDS = 200, COUNT = 64 << 10 };

typedef struct side {
  uint32_t link;
  be_device *d;
  int failures; /* rounds that failed or read another value */
} side;

static void *one_side(void *arg) {
  side *s = arg;
  be_queue *q = NULL;
  be_mem m = {0};
  uint32_t *host = malloc(COUNT * sizeof *host);
  if (host == NULL || B->queue_create(s->d, &q) != 0 ||
      B->mem_alloc(s->d, COUNT * sizeof *host, &m) != 0) {
    s->failures = ROUNDS;
  } else {
    for (uint32_t r = 0; r < ROUNDS; r++) {
      bool same = false;
      uint32_t value = (s->link + 1) * 100000u + r; /* this link's own, per round */
      s->failures += fill_and_read(s->d, q, m, host, COUNT, value, &same) != 0 || !same;
    }
  }
  if (m.handle != 0)
    B->mem_free(s->d, &m);
  if (q != NULL)
    B->queue_destroy(q);
  free(host);
  return NULL;
}

TEST(links_of_one_worker_serve_side_by_side) {
  side s[LINKS];
  pthread_t t[LINKS];
  for (uint32_t i = 0; i < LINKS; i++)
    s[i] = (side){.link = i, .d = open_on(i, 0)};
  pid_t pid = worker_of(s[0].d);
  for (uint32_t i = 1; i < LINKS; i++)
    CHECK_EQ(worker_of(s[i].d), pid); /* one process, a link each */
  for (uint32_t i = 0; i < LINKS; i++)
    CHECK_EQ(pthread_create(&t[i], NULL, one_side, &s[i]), 0);
  for (uint32_t i = 0; i < LINKS; i++) {
    CHECK_EQ(pthread_join(t[i], NULL), 0);
    CHECK_EQ(s[i].failures, 0);
  }
  for (uint32_t i = 0; i < LINKS; i++)
    B->close(s[i].d);
  CHECK_EQ(kill(pid, 0), -1); /* reaped with the last device */
  CHECK_EQ(errno, ESRCH);
}

/* Closing the device of one link keeps the worker for the others. A link opens a device
 * once, as a world does (a second open there is ACCEL_EBUSY). */
TEST(a_worker_lives_while_any_link_has_a_device) {
  be_device *a = open_on(0, 0), *b = open_on(3, 0), *again = NULL;
  pid_t pid = worker_of(a);
  CHECK_EQ(worker_of(b), pid);
  be_open_opts o = {.worker_link = 3};
  CHECK_ERR(B->open(0, &o, &again), ACCEL_EBUSY);
  B->close(a);
  check_serves(b, 256, 7);
  CHECK_EQ(kill(pid, 0), 0);
  B->close(b);
  CHECK_EQ(kill(pid, 0), -1);
}

/* ---- limits ---- */

TEST(the_last_link_is_served_and_one_past_it_refused) {
  be_device *d = open_on(BW_MAX_LINKS - 1, 0);
  check_serves(d, 16, 42);
  B->close(d);
  be_open_opts o = {.worker_link = BW_MAX_LINKS};
  be_device *past = NULL;
  CHECK_ERR(B->open(0, &o, &past), ACCEL_EINVAL);
  CHECK(past == NULL);
}

/* ---- attaching while the first link is busy ---- */

static be_queue *busy_q;
static be_mem busy_m;
static atomic_bool busy_stop;
static atomic_ulong busy_fills;
static atomic_ulong busy_posted, busy_ran; /* tasks posted to the loop, and run there */

typedef struct busy_task {
  accel_task t;
} busy_task;

/* On the loop: fills gathered in the loop's cork for link 0. */
static void busy_fill(accel_task *t) {
  for (int i = 0; i < 4; i++)
    if (B->fill(busy_q, busy_m, 0, 16, 4, 7) == 0)
      atomic_fetch_add(&busy_fills, 1);
  free(t);
  atomic_fetch_add(&busy_ran, 1);
}

static void *busy_poster(void *arg) {
  while (!atomic_load(&busy_stop)) {
    busy_task *t = malloc(sizeof *t);
    if (t == NULL)
      break;
    atomic_fetch_add(&busy_posted, 1);
    accel_post(arg, &t->t, busy_fill);
    usleep(20);
  }
  return NULL;
}

TEST(links_attach_while_a_loop_gathers_frames_for_the_first) {
  accel_runtime *rt = NULL;
  CHECK_OK(accel_runtime_create(&rt, &(accel_runtime_opts){.loops = 1}));
  CHECK_OK(accel_runtime_start(rt));
  for (int round = 0; round < 10; round++) {
    be_device *first = open_on(0, 0), *d[BW_MAX_LINKS] = {NULL};
    CHECK_OK(B->queue_create(first, &busy_q));
    CHECK_OK(B->mem_alloc(first, 64, &busy_m));
    atomic_store(&busy_stop, false);
    pthread_t poster;
    CHECK_EQ(pthread_create(&poster, NULL, busy_poster, rt), 0);
    for (uint32_t i = 1; i < BW_MAX_LINKS; i++) {
      d[i] = open_on(i, 0);
      CHECK_EQ(worker_of(d[i]), worker_of(first));
    }
    atomic_store(&busy_stop, true);
    CHECK_EQ(pthread_join(poster, NULL), 0);
    while (atomic_load(&busy_ran) != atomic_load(&busy_posted))
      usleep(100); /* the loop's last fills use busy_q: it goes below, and comes again */
    CHECK_OK(finish(first, busy_q)); /* every fill the loop gathered went out and ran */
    for (uint32_t i = 1; i < BW_MAX_LINKS; i++)
      B->close(d[i]);
    B->mem_free(first, &busy_m);
    B->queue_destroy(busy_q);
    B->close(first);
  }
  CHECK(atomic_load(&busy_fills) > 0);
  accel_runtime_stop(rt);
  accel_runtime_destroy(rt);
}

/* ---- faults ---- */

TEST(a_fault_on_one_link_restarts_the_worker_for_every_link) {
  be_device *a = open_on(0, 1), *b = open_on(1, 1);
  pid_t pid = worker_of(a);
  CHECK_EQ(worker_of(b), pid);
  be_queue *qa = NULL, *qb = NULL;
  CHECK_OK(B->queue_create(a, &qa));
  CHECK_OK(B->queue_create(b, &qb));
  CHECK_OK(B->inject_fault(a));
  CHECK_ERR(finish(a, qa), ACCEL_EDEVLOST);
  CHECK_ERR(B->status(a), ACCEL_EDEVLOST);
  CHECK_OK(B->status(b)); /* b's device is its own: only the process they share is at stake */
  B->queue_destroy(qa);
  B->close(a); /* a faulted device's close kills its worker */
  CHECK_ERR(finish(b, qb), ACCEL_EDEVLOST);
  CHECK_ERR(B->status(b), ACCEL_EDEVLOST);
  B->queue_destroy(qb);
  B->close(b);
  CHECK_EQ(kill(pid, 0), -1);
  be_device *c = open_on(1, 0); /* a fresh worker */
  CHECK(worker_of(c) != pid);
  check_serves(c, 64, 9);
  B->close(c);
}

/* An event outlives its device and, with it, the worker: the link it holds forgets the
 * worker's pid before the process is reaped, so that no later kill of that link (a device's
 * deadline, a failed write) can meet another process that took the pid over. */
TEST(a_link_outliving_its_worker_forgets_its_pid) {
  be_device *a = open_on(0, 0), *b = open_on(2, 0);
  pid_t pid = worker_of(a);
  bw_link *la = ((bw_pdev *)a)->link, *lb = ((bw_pdev *)b)->link;
  be_event *ea = NULL, *eb = NULL;
  CHECK_OK(B->event_create(a, &ea));
  CHECK_OK(B->event_create(b, &eb));
  B->close(a);
  CHECK_EQ(la->pid, pid); /* b keeps the process */
  B->close(b);
  CHECK_EQ(kill(pid, 0), -1); /* reaped with the last device */
  CHECK_EQ(errno, ESRCH);
  CHECK_EQ(la->pid, 0);
  CHECK_EQ(lb->pid, 0);
  bw_link_kill(la); /* nothing left to signal */
  B->event_destroy(ea);
  B->event_destroy(eb);
}

static const test_case tests[] = {
    TEST_CASE(a_link_outliving_its_worker_forgets_its_pid),
    TEST_CASE(links_of_one_worker_serve_side_by_side),
    TEST_CASE(a_worker_lives_while_any_link_has_a_device),
    TEST_CASE(the_last_link_is_served_and_one_past_it_refused),
    TEST_CASE(a_fault_on_one_link_restarts_the_worker_for_every_link),
    TEST_CASE(links_attach_while_a_loop_gathers_frames_for_the_first),
};

int main(int argc, char **argv) {
  const char *helper = getenv("ACCEL_TEST_WORKERS");
  if (helper == NULL || helper[0] == '\0') {
    fprintf(stderr, "ACCEL_TEST_WORKERS must name accel-device\n");
    return 1;
  }
  bw_configure(&(bw_options){.helper = helper, .stage_bytes = 4u << 20});
  B = bw_proxy_ops(&be_cpu_ops);
  return test_main_(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
