/* The bound on acceld's exit (exit_watch.h). */
#include "daemon/exit_watch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

#include "accel/runtime.h"

typedef struct watch {
  uint32_t timeout_ms;
  int status;
} watch;

static watch the_watch; /* one per process */

static void *watch_main(void *arg) {
  const watch *w = arg;
  struct timespec ts = {.tv_sec = w->timeout_ms / 1000,
                        .tv_nsec = (long)(w->timeout_ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0)
    ;
  accel_log(ACCEL_LOG_ERROR, "acceld",
            "still running %u ms after it stopped (a library hangs in its teardown): exiting "
            "now, status %d",
            w->timeout_ms, w->status);
  _exit(w->status); /* the kernel closes what teardown did not */
}

int acd_exit_watch_start(uint32_t timeout_ms, int status) {
  static atomic_bool started;
  if (timeout_ms == 0 || atomic_exchange(&started, true))
    return 0;
  the_watch = (watch){.timeout_ms = timeout_ms, .status = status};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t th;
  int rc = pthread_create(&th, &attr, watch_main, &the_watch);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    accel_log(ACCEL_LOG_WARN, "acceld", "no thread to bound the exit: it may hang");
    return ACCEL_ESYS;
  }
  return 0;
}
