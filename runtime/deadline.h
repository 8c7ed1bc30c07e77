/* Time for deadlines and durations: CLOCK_MONOTONIC, never the wall clock, which jumps when
 * it is set (NTP, an administrator) and would cut a wait short or stretch it. A condition
 * variable waited on with rt_deadline_after's deadline must count on the same clock: make it
 * with rt_cond_init_monotonic (pthread_cond_timedwait reads the deadline on the condvar's
 * clock, CLOCK_REALTIME unless told otherwise).
 *
 * The lowest layer: any folder may include this header; of accel's it includes only
 * runtime/attr.h. */
#ifndef RT_DEADLINE_H
#define RT_DEADLINE_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "runtime/attr.h"

static inline uint64_t rt_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t rt_mono_ms(void) {
  return rt_mono_ns() / 1000000u;
}

/* The monotonic time `ms` (>= 0) from now, for pthread_cond_timedwait on a condvar made by
 * rt_cond_init_monotonic. */
static inline struct timespec rt_deadline_after(int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

/* pthread_cond_init for a condvar whose timed waits take rt_deadline_after's deadlines.
 * 0 or an errno value. */
RT_MUST_USE static inline int rt_cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t attr;
  int rc = pthread_condattr_init(&attr);
  if (rc != 0)
    return rc;
  rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  if (rc == 0)
    rc = pthread_cond_init(cv, &attr);
  pthread_condattr_destroy(&attr);
  return rc;
}

#endif
