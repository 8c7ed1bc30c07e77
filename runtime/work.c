/* Blocking work on libuv's thread pool; the result comes back to the actor as a message. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "runtime/alloc.h"
#include "runtime/rt.h"

typedef struct rt_work {
  uv_work_t req; /* first: the request pointer is the work item */
  accel_runtime *rt;
  accel_ref to;
  int (*work)(void *data);
  void *data;
  void (*drop)(void *data);
  uint32_t type;
  int result;
} rt_work;

static void run_work(uv_work_t *req) {
  /* libuv's pool threads inherit the name of the thread that made them, a loop's: renamed on
   * their first work, so that top -H and gdb tell them from the loops. */
  static _Thread_local bool named;
  if (!named) {
    pthread_setname_np(pthread_self(), "accel-uv-work");
    named = true;
  }
  rt_work *w = (rt_work *)req;
  w->result = w->work(w->data);
}

static void after_work(uv_work_t *req, int status) {
  rt_work *w = (rt_work *)req;
  accel_actor *cell = rt_resolve_local(w->rt, w->to);
  if (cell != NULL)
    cell->work_pending--;
  accel_msg msg = {
      .type = w->type, .arg = (uint64_t)(int64_t)w->result, .data = w->data, .drop = w->drop};
  int rc = status == UV_ECANCELED ? ACCEL_ECANCELED : rt_send_local(w->rt, w->to, &msg);
  if (rt_send_later(rc))
    rt_retry_send(w->rt, w->to, &msg);
  else if (rc != 0)
    rt_drop_msg(w->rt, &msg); /* the actor is gone: nobody takes the result */
  rt_free(w);
}

int accel_work_submit(accel_actor *self, int (*work)(void *data), void *data,
                      void (*drop)(void *data), uint32_t type) {
  if (self == NULL || work == NULL || self->status != RT_RUNNING || rt_tls_loop != self->home)
    return ACCEL_EINVAL;
  rt_work *w = rt_calloc(1, sizeof *w);
  if (w == NULL)
    return ACCEL_ENOMEM;
  *w = (rt_work){
      .rt = self->rt, .to = self->ref, .work = work, .data = data, .drop = drop, .type = type};
  int rc = uv_queue_work(&self->home->loop, &w->req, run_work, after_work);
  if (rc != 0) {
    rt_free(w);
    return rt_uv_err(rc);
  }
  self->work_pending++; /* it stays on this loop until the result is back (move.c) */
  return 0;
}
