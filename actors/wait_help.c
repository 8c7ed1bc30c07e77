/* Waits on an event offered to the waiters of ops' futures (wait_help.h). */
#include <stdatomic.h>

#include "actors/wait_help.h"
#include "runtime/alloc.h"
#include "runtime/future_help.h"
#include "runtime/rt.h"
#include "runtime/status.h"

typedef struct wait_job {
  rt_helper help; /* first: the futures see this */
  atomic_bool claimed;
  const be_ops *be;
  be_event *event;
  uint32_t n;
  accel_future *futs[DEV_WAIT_HELP_MAX]; /* references */
} wait_job;

/* On a waiting client's thread: the first one syncs and completes every future of the job. */
static void job_run(rt_helper *h) {
  wait_job *j = (wait_job *)h;
  if (atomic_exchange(&j->claimed, true))
    return;
  be_thread_marks marks; /* the client's thread as it was (CUDA: its current context) */
  be_thread_marks_take(&marks);
  int rc = j->be->event_sync(j->event);
  be_thread_marks_give_back(&marks);
  for (uint32_t i = 0; i < j->n; i++)
    accel_future_complete(j->futs[i], rc, NULL, NULL);
}

/* For a waiter with a timeout: the event polled until `until_ns` (it must not block past
 * it), then the same as job_run. False if the work was not done by then: the job stays
 * unclaimed, and the op's own completion completes the futures. */
static bool job_try(rt_helper *h, uint64_t until_ns) {
  wait_job *j = (wait_job *)h;
  be_thread_marks marks;
  be_thread_marks_take(&marks);
  int rc;
  while ((rc = j->be->event_query(j->event)) == RT_PENDING && uv_hrtime() < until_ns)
    rt_cpu_relax();
  be_thread_marks_give_back(&marks);
  if (rc == RT_PENDING)
    return false;
  rc = rt_status_public(rc); /* the futures are the clients' */
  if (!atomic_exchange(&j->claimed, true))
    for (uint32_t i = 0; i < j->n; i++)
      accel_future_complete(j->futs[i], rc, NULL, NULL);
  return true;
}

/* Any thread (backends' event_destroy may be called from any). */
static void job_free(rt_helper *h) {
  wait_job *j = (wait_job *)h;
  for (uint32_t i = 0; i < j->n; i++)
    accel_future_release(j->futs[i]);
  if (j->event)
    j->be->event_destroy(j->event);
  rt_free(j);
}

void dev_wait_help_offer(const be_ops *be, be_device *dev, be_queue *q, accel_future *const *futs,
                         uint32_t n) {
  wait_job *j = rt_calloc(1, sizeof *j);
  if (j == NULL)
    return;
  j->help.run = job_run;
  j->help.try_run = job_try;
  j->help.free = job_free;
  atomic_init(&j->help.refs, 1);
  atomic_init(&j->claimed, false);
  j->be = be;
  if (be->event_create(dev, &j->event) != 0 || be->event_record(j->event, q) != 0) {
    job_free(&j->help);
    return;
  }
  for (uint32_t i = 0; i < n && i < DEV_WAIT_HELP_MAX; i++) {
    accel_future_retain(futs[i]);
    j->futs[j->n++] = futs[i];
  }
  for (uint32_t i = 0; i < j->n; i++)
    rt_future_offer_help(j->futs[i], &j->help);
  rt_helper_release(&j->help);
}
