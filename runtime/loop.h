/* The runtime's libuv loop, for the layers above that run their own libuv handles beside the
 * actors (the server's sockets and timers, the daemon's signals). The declared way in: nothing
 * outside runtime/ includes runtime/rt.h. Use the loop on the loop thread only (inside actor
 * callbacks, or before the runtime runs). */
#ifndef RT_LOOP_H
#define RT_LOOP_H

#include <stdbool.h>
#include <uv.h>

#include "accel/runtime.h"

uv_loop_t *rt_uv_loop(accel_runtime *rt);
/* Whether the calling thread runs some runtime's loop (or spawns on it before it runs). */
bool rt_on_a_loop(void);

#endif
