/* Work a loop runs once before it next waits for I/O: what the callbacks of one iteration
 * produced for one socket goes out in one system call at the iteration's end, not one per
 * callback (the device worker link's commands, backends/worker/proxy_link.c). The server's
 * replies do the same with a prepare handle of their own, on the loop they own. */
#ifndef RT_DEFER_H
#define RT_DEFER_H

#include <stdbool.h>

typedef struct rt_deferred {
  void (*run)(struct rt_deferred *d); /* on the loop's thread, once per queueing */
  struct rt_deferred *next;           /* the loop's list */
} rt_deferred;

/* True if the calling thread may defer work now: rt_defer_before_poll would queue it. */
bool rt_defer_here(void);

/* Queues d on the calling thread's loop, to run before that loop next polls for I/O (and at
 * the latest when the runtime is destroyed). False, and nothing queued, unless the caller is
 * a loop's own thread running its turns: a client thread that runs a sleeping loop's turns
 * (borrow.c), a thread standing in for a loop that does not run yet, or a loop shutting down
 * (its prepare handle closed) would leave d waiting for a loop that may sleep indefinitely. d
 * must not be queued already. A thread that is about to wait for the effect of deferred work
 * (a reply to a gathered frame) must do that work itself first: the loop that would may be the
 * one waiting. */
bool rt_defer_before_poll(rt_deferred *d);

/* The caller, running a loop's turns, started work that the iteration's other phases must
 * see soon (a prepare handle's, a timer due at once): the loop leaves its turns back to back
 * after the current one (loop.c), so that the work is not held for the span. Set outside the
 * loop's own turns (a borrowed turn, a wake-up's turn, an I/O callback), it cuts the loop's next
 * span to one turn; on a thread of no loop it does nothing. */
void rt_poll_soon(void);

#endif
