#include "runtime/wakeup.h"

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "accel/error.h"

static bool errno_is_eintr(void) {
  return errno == EINTR;
}

int rt_wakeup_init(rt_wakeup *w, uv_loop_t *loop, uv_poll_cb on_wake, void *data) {
  w->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->fd < 0)
    return ACCEL_ESYS;
  atomic_init(&w->awake, false);
  if (uv_poll_init(loop, &w->poll, w->fd) != 0) {
    close(w->fd);
    return ACCEL_ESYS;
  }
  w->poll.data = data;
  uv_poll_start(&w->poll, UV_READABLE, on_wake);
  return 0;
}

void rt_wakeup_signal(rt_wakeup *w) {
  if (atomic_exchange(&w->awake, true))
    return; /* the loop is awake, or another sender's write is on its way */
  uint64_t one = 1;
  while (write(w->fd, &one, sizeof one) < 0 && errno_is_eintr())
    ;
}

void rt_wakeup_drain(rt_wakeup *w) {
  uint64_t count;
  while (read(w->fd, &count, sizeof count) < 0 && errno_is_eintr())
    ;
}

void rt_wakeup_sleep(rt_wakeup *w) {
  atomic_store(&w->awake, false);
}

void rt_wakeup_awake(rt_wakeup *w) {
  atomic_store(&w->awake, true);
}

void rt_wakeup_close(rt_wakeup *w) {
  uv_close((uv_handle_t *)&w->poll, NULL);
}

void rt_wakeup_free(rt_wakeup *w) {
  if (w->fd >= 0)
    close(w->fd);
  w->fd = -1;
}
