/* A client waiting on an op's future learns of the op's end in its own thread: where the
 * op's completion would otherwise come through another thread (a driver's callback thread,
 * a worker's wait), the kernel actor offers the waiters of its futures a wait on an event of
 * its own, recorded after the work (runtime/future_help.h). The first waiter to run it syncs
 * on the event and completes the futures there; the usual completion still follows and does
 * the bookkeeping (completing a future twice is a no-op, and the first answer stands). */
#ifndef DEV_WAIT_HELP_H
#define DEV_WAIT_HELP_H

#include <stdbool.h>
#include <stdint.h>

#include "accel/runtime.h"
#include "backends/backend.h"

/* At most this many futures per offer: the ones whose threads wait now. */
#define DEV_WAIT_HELP_MAX 8

/* On the loop, right after the work of futs was submitted to q: records an event on q and
 * offers a wait on it to the futures' waiters. Best effort: on any failure (out of memory,
 * a lost device) nothing is offered and the usual completion alone remains. */
void dev_wait_help_offer(const be_ops *be, be_device *dev, be_queue *q, accel_future *const *futs,
                         uint32_t n);

#endif
