/* Waking the loop from other threads: an eventfd watched by a uv_poll, written only when the
 * loop may be asleep. While the loop is awake (running turns, or spinning a little after its
 * last work) senders only queue their item: the loop will look. This replaces uv_async_send,
 * whose handler in libuv 1.44 spins until the sender's write returns (a cost on every
 * wake-up). */
#ifndef RT_WAKEUP_H
#define RT_WAKEUP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <uv.h>

#include "runtime/attr.h"

typedef struct rt_wakeup {
  int fd;
  uv_poll_t poll;
  atomic_bool awake; /* true: the loop will check its remote lists without a write */
} rt_wakeup;

RT_MUST_USE int rt_wakeup_init(rt_wakeup *w, uv_loop_t *loop, uv_poll_cb on_wake, void *data);
/* Any thread, after queuing work under the runtime's remote lock. */
void rt_wakeup_signal(rt_wakeup *w);
/* Loop thread: consume the eventfd's count (in the poll callback). */
void rt_wakeup_drain(rt_wakeup *w);
/* Loop thread: about to sleep; then the caller must check its remote lists once more. */
void rt_wakeup_sleep(rt_wakeup *w);
/* Loop thread: awake again (work found after rt_wakeup_sleep). */
void rt_wakeup_awake(rt_wakeup *w);
void rt_wakeup_close(rt_wakeup *w);
/* After the loop has ended. */
void rt_wakeup_free(rt_wakeup *w);

#endif
