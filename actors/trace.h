/* A timeline of what ran where, as Chrome's trace-event JSON (what Perfetto and
 * chrome://tracing open): each client op as an async span from the moment its session took it
 * to its completion, with a nested "queued" span up to its submission to a device queue; and on
 * one track per device and queue, the span each op or transfer spent there. Recorded on the
 * loop thread into memory (no I/O while tracing); off, it costs one pointer test per op.
 *
 * Embedded: ACCEL_TRACE=FILE traces a context from open to close and writes FILE at close.
 * acceld: `accelctl trace --seconds N` starts and stops it (control commands). */
#ifndef DEV_TRACE_H
#define DEV_TRACE_H

#include <stdint.h>

#include "actors/world.h"

typedef struct dev_trace dev_trace;

#define DEV_TRACE_MAX_EVENTS_DEFAULT (1u << 20) /* about 48 MiB */

/* Starts recording (again: what was recorded is dropped). 0 or ACCEL_ENOMEM. */
RT_MUST_USE int dev_trace_start(dev_world *w, uint32_t max_events);
/* Stops recording and renders what was recorded as JSON (NUL-terminated, freed with rt_free;
 * *len its length). ACCEL_EINVAL when no trace runs, ACCEL_ENOMEM. */
RT_MUST_USE int dev_trace_stop(dev_world *w, char **json, size_t *len);
/* The same in two steps, so that rendering (seconds for millions of events) can leave the
 * loop: detach stops recording and hands over what was recorded (NULL when no trace runs);
 * render reads only the trace, on any thread; free drops it. */
dev_trace *dev_trace_detach(dev_world *w);
RT_MUST_USE int dev_trace_render(const dev_trace *t, char **json, size_t *len);
/* Several traces, one per world of acceld's shards, rendered as one timeline: traces[k] is
 * shard k's (NULL: none, skipped), n at least 1; shard k's devices are processes of their
 * own (pid 2 + DEV_MAX_NODES k + node, named "..., shard k"), its ops' ids and session
 * tracks offset by k (ids by k << 48, session tracks by k << 32) and tagged "shard": k. */
RT_MUST_USE int dev_trace_render_all(const dev_trace *const *traces, uint32_t n, char **json,
                                     size_t *len);
void dev_trace_free(dev_trace *t);
/* ACCEL_TRACE: starts a trace that dev_trace_finish writes to that file (embedded contexts). */
void dev_trace_from_env(dev_world *w);
/* At the world's end: writes the ACCEL_TRACE file if one was asked for, frees the trace. */
void dev_trace_finish(dev_world *w);

/* The hooks; each is called only while w->trace is set. */
void dev_trace_op_begin(dev_world *w, dev_call *call);
void dev_trace_op_end(dev_world *w, const dev_call *call, int status, uint64_t now_ns);
/* A task's work went to its queue at submit_ns (the op's queueing ends there). */
void dev_trace_submitted(dev_world *w, const dev_task *t, uint64_t submit_ns);
/* A task's work on its queue completed (as the loop learnt it) at end_ns. */
void dev_trace_task(dev_world *w, const dev_task *t, uint64_t submit_ns, uint64_t end_ns,
                    int status);

#endif
