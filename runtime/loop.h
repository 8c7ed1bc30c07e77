/* The runtime's libuv loop, for the layers above that run their own libuv handles beside the
 * actors (the server's sockets and timers, the daemon's signals). The declared way in: nothing
 * outside runtime/ includes runtime/rt.h. Use the loop on the loop thread only (inside actor
 * callbacks, or before the runtime runs). */
#ifndef RT_LOOP_H
#define RT_LOOP_H

#include <stdbool.h>
#include <uv.h>

#include "accel/runtime.h"

/* The loop, for in-tree actors that own libuv handles (the daemon's server): loop thread
 * only; such handles must be closed in the actor's stop hook. */
uv_loop_t *rt_uv_loop(accel_runtime *rt);
/* The index of that loop (accel_post_to's `loop`): 0 off the runtime's loops. */
uint32_t rt_loop_index(accel_runtime *rt);
/* When the turn now running began (CLOCK_MONOTONIC ns; the turn's one clock read): a time
 * stamp for events the loop learns of, without a clock read each. Loop thread (or the thread
 * running a borrowed turn). */
uint64_t rt_turn_ns(accel_runtime *rt);
/* Whether the calling thread runs some runtime's loop (or spawns on it before it runs). */
bool rt_on_a_loop(void);

/* accel_tell from a client thread that, when the loop sleeps, runs the loop's turns itself
 * instead of waking it (borrow.c): the receiving actor and whatever it sets off run on the
 * calling thread, turn after turn until nothing is left (at most RT_BORROW_TURNS), and the
 * loop is woken only if it has something to do then. Actors still run one at a time: the
 * loop token passes between the threads like a lock, and the loop thread holds it except
 * while it sleeps. `then` callbacks still run on the loop thread. When the loop is awake, or
 * borrowing is off, it is accel_tell. For callers whose actors may run on any thread. */
int rt_tell_and_run(accel_runtime *rt, accel_ref to, const accel_msg *msg);
/* No client thread runs rt's turns from now on (a user's actors may expect the loop thread). */
void rt_borrow_disable(accel_runtime *rt);
/* Turns run by client threads so far. */
uint64_t rt_borrowed_turns(accel_runtime *rt);

#endif
