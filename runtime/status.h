/* Internal statuses: what a function inside accel tells its caller that is neither success
 * nor an error, and that no public caller may ever see. They once shared ACCEL_EAGAIN with
 * the public "not ready yet, try again", so a strategy that declined a call and a real
 * EAGAIN looked the same, and one missed check would have handed "try the next path" to a
 * user as an error.
 *
 * Values: below every public code (include/accel/error.h: -1 down to ACCEL_ERRNO_MIN_ + 1),
 * far enough that new public codes never reach them; still negative, so a `rc < 0` test
 * reads them as "not done", as it read ACCEL_EAGAIN. accel_err_name() calls them UNKNOWN.
 * Header only: the lowest layers (backends, the worker process) use it too. */
#ifndef RT_STATUS_H
#define RT_STATUS_H

#include <assert.h>
#include <stdbool.h>

#include "accel/error.h"

enum {
  /* This path does not take the call (too large, not supported here, no plan for it): the
   * caller tries the next one. Nothing of the call was queued. */
  RT_NOT_HANDLED = -1001,
  /* The work is not done yet: ask again later (be_ops.event_query, the CPU queue's state). */
  RT_PENDING = -1002,
};

_Static_assert((int)RT_NOT_HANDLED < (int)ACCEL_ERRNO_MIN_,
               "internal statuses overlap public codes");

/* Whether rc is one of the statuses above (a new one goes at the end, and here). */
static inline bool rt_status_internal(int rc) {
  return rc <= RT_NOT_HANDLED && rc >= RT_PENDING;
}

/* rc as a public caller may hear it, at the doors where results leave for one (an op's
 * completion, a worker's reply). An internal status there is a bug: asserted; in a build
 * without assertions it becomes ACCEL_EAGAIN, what such a leak used to read as. */
static inline int rt_status_public(int rc) {
  assert(!rt_status_internal(rc));
  return rt_status_internal(rc) ? ACCEL_EAGAIN : rc;
}

#endif
