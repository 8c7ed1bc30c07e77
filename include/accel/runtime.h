/* accel — the actor runtime.
 *
 * The runtime runs actors on libuv loops: one, or several on threads of their own
 * (accel_runtime_opts.loops). An actor is a cell: private state, a behaviour (the callbacks
 * below), a bounded mailbox, a parent (its supervisor) and children. Write your own actors
 * against this header; they live beside accel's device actors in the same tree.
 *
 * Threads
 *   - Each actor lives on one loop at a time, and that *loop thread* runs all of its
 *     callbacks, timers and work completions: an actor's callbacks never run on two threads at
 *     once. A top-level actor with nothing tied to its loop (no children, timers, work in flight)
 *     may move, between two turns, to the loop whose actors send it its messages
 *     (ACCEL_MOVE_AFTER=0: never). Children live on their parent's loop; a top-level actor (parent
 * NULL) spawned from an actor's callback lives on that actor's loop, and one spawned from any other
 * thread goes to the loops in turn (round-robin). Loop 0 runs on the thread that called
 *     accel_runtime_run(), or the runtime's own thread after accel_runtime_start(); it runs the
 *     `then` callbacks of futures.
 *   - accel_tell(), accel_ask(), accel_stop(), accel_runtime_stop() and the future functions are
 *     safe from any thread. Functions taking an `accel_actor *self` are for that actor's loop
 *     thread, inside its callbacks, only.
 *   - Never block in a callback: move blocking work to accel_work_submit().
 *
 * Errors: every function returns 0 or a negative code from accel/error.h. If a call that would
 * complete a callback or a future fails, the callback never runs and no future is made.
 */
#ifndef ACCEL_RUNTIME_H
#define ACCEL_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "accel/error.h"
#include "accel/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct accel_runtime accel_runtime;
typedef struct accel_actor accel_actor; /* a live cell; only valid inside its callbacks */
typedef struct accel_future accel_future;

/* A reference to one incarnation of an actor: a slot in the runtime's table and the slot's
 * generation when the actor was spawned. A ref to an actor that has stopped or been restarted
 * (a restart is a new incarnation with a new ref) is stale: sends to it fail with ACCEL_ESTALE
 * and count as dead letters. Refs are plain values: copy them freely, across threads. */
typedef struct accel_ref {
  uint32_t slot;
  uint32_t gen; /* 0 is never a live generation, so a zeroed ref is always stale */
} accel_ref;

#define ACCEL_REF_NONE ((accel_ref){0, 0})

/* ---------------------------------------------------------------------------------------
 * Memory
 *
 * Every allocation accel makes for itself (the runtime, the device layer, the wire codec, the
 * clients, the backends' host-side bookkeeping) goes through four functions that a program may
 * replace, as with uv_replace_allocator(): to account for accel's memory, or to make the Nth
 * allocation fail and watch accel answer ACCEL_ENOMEM. The data of buffers (device memory, the
 * CPU device's blocks, accel_host_alloc) and other libraries' memory (libuv, nng, drivers) do
 * not go through them. Replace before opening anything, or with functions whose blocks the
 * previous ones can free (wrappers of the C library's, say): blocks allocated before the
 * replacement are freed through the new free function. All four NULL restores the C library's;
 * some but not all NULL is ACCEL_EINVAL. The functions must be safe from any thread. */
typedef void *(*accel_malloc_func)(size_t size);
typedef void *(*accel_realloc_func)(void *ptr, size_t size);
typedef void *(*accel_calloc_func)(size_t count, size_t size);
typedef void (*accel_free_func)(void *ptr);

ACCEL_API int accel_replace_allocator(accel_malloc_func malloc_fn, accel_realloc_func realloc_fn,
                                      accel_calloc_func calloc_fn, accel_free_func free_fn);

/* ---------------------------------------------------------------------------------------
 * Messages
 *
 * A message is a small value copied into the target's mailbox. `data` is an optional payload
 * pointer: on a successful send its ownership passes to the runtime, which hands it to the
 * receiver; if the message is never received (the target stopped first) the runtime calls
 * `drop(data)` when `drop` is set. On a failed send the message and its data stay the
 * caller's. */
typedef struct accel_msg {
  uint32_t type;            /* the behaviour's own message kinds; >= ACCEL_MSG_USER */
  uint32_t flags;           /* free for the user */
  uint64_t arg;             /* small inline argument */
  void *data;               /* payload, see ownership above */
  void (*drop)(void *data); /* frees `data` if it is never received; may be NULL */
  accel_ref sender;         /* filled in by the runtime when sent from an actor, else NONE */
  accel_future *reply;      /* set by accel_ask(); see accel_reply() */
} accel_msg;

/* Message types below this are the runtime's own (timers, work completions). */
enum {
  /* Sent by the runtime to an actor that monitors another (accel_monitor) when that one's
   * incarnation ends: sender is its ref, arg the monitor's id, and the reason is
   * accel_down_reason(msg). */
  ACCEL_MSG_DOWN = 1,
  /* Never seen by receive(): a linked actor (accel_link) failed; the runtime fails this one
   * with the same reason, in its turn, as if its receive had returned it. */
  ACCEL_MSG_EXIT = 2,
  ACCEL_MSG_USER = 1024
};

/* Why a monitored incarnation ended: 0 it was stopped (accel_stop); ACCEL_ECLOSED its parent,
 * a sibling's restart (one-for-all, rest-for-one) or the runtime stopped it; else the error
 * its start or receive returned (it may have been restarted since, under a new ref). */
static inline int accel_down_reason(const accel_msg *msg) {
  return (int)(int32_t)msg->flags;
}

/* ---------------------------------------------------------------------------------------
 * Behaviours
 *
 * The runtime allocates `state_size` zeroed bytes per incarnation and passes them as `state`.
 * All hooks run on the loop thread. Lifecycle:
 *   spawn:    start(arg)                                     -> running
 *   failure:  receive() or start() returned < 0              -> the parent decides (supervision)
 *   restart:  pre_restart(old state); children stopped (reverse start order); stop(old state);
 *             old state freed; new incarnation (new ref): start(arg); post_restart(new state)
 *   stop:     children stopped (reverse start order); stop(state); state freed
 * Pending messages of an incarnation that ends are dropped (dead letters; asks complete with
 * ACCEL_ESTALE). */
typedef struct accel_behavior {
  const char *name;
  size_t state_size;
  /* Called on spawn and on every restart with the spawn's `arg`. Return 0, or < 0 to fail
   * (then the parent's supervision handles it as a failure). May spawn children. */
  int (*start)(accel_actor *self, void *state, void *arg);
  /* Called for every message. Return 0, or < 0 to fail: the actor stops taking messages and
   * its supervisor restarts or stops it. `msg` is valid during the call only; take `data` by
   * setting msg->data = NULL, else the runtime drops it after the call. */
  int (*receive)(accel_actor *self, void *state, accel_msg *msg);
  /* Cleanup of one incarnation: on stop, on restart, on runtime shutdown, and after a start
   * that failed (state starts zeroed, so it can tell what start set up). Must not fail. */
  void (*stop)(accel_actor *self, void *state);
  void (*pre_restart)(accel_actor *self, void *state, int reason);
  void (*post_restart)(accel_actor *self, void *state, int reason);
  /* A child stopped for good (after accel_stop, or past its restart limit). Optional. */
  void (*child_exit)(accel_actor *self, void *state, accel_ref child, int reason);
} accel_behavior;

/* ---------------------------------------------------------------------------------------
 * Typed messages
 *
 * A typed message carries a value of a declared size, copied at the send: one of up to
 * ACCEL_MSG_INLINE bytes travels inside the message itself (no allocation), a larger one in
 * an allocation the message owns (freed after receive, or with the message if it is never
 * received). `flags` holds ACCEL_MSG_TYPED and the size; plain messages keep flags free.
 *
 *   ACCEL_MSG_DEFINE(MSG_POINT, ACCEL_MSG_USER + 1, struct point)
 *   MSG_POINT_tell(rt, to, &(struct point){1, 2});         // a send
 *   struct point p; if (MSG_POINT_get(msg, &p) == 0) ...   // in receive
 *
 * accel_dispatch matches a received message against a table of handlers by type, and a
 * typed one against its declared size too. */
#define ACCEL_MSG_INLINE 16u
#define ACCEL_MSG_TYPED 0x80000000u
#define ACCEL_MSG_SIZE_MAX 0x00ffffffu /* larger values: send a pointer in `data` */

/* Makes *msg a typed message of `type` (>= ACCEL_MSG_USER) carrying a copy of size bytes at
 * payload. 0, ACCEL_EINVAL (type, size past ACCEL_MSG_SIZE_MAX, NULL payload with a size) or
 * ACCEL_ENOMEM. If the message is then not sent, free it with accel_msg_discard. */
ACCEL_API int accel_msg_pack(accel_msg *msg, uint32_t type, const void *payload, size_t size);
/* Copies a typed message's value out: 0, or ACCEL_EINVAL if msg is not typed or its value is
 * not `size` bytes. */
ACCEL_API int accel_msg_unpack(const accel_msg *msg, void *out, size_t size);
/* The value of a typed message in place (valid while the message is: during receive), its size
 * in *size; NULL for a plain message. */
ACCEL_API const void *accel_msg_payload(const accel_msg *msg, size_t *size);
/* Frees what a packed message owns (an unsent one). */
ACCEL_API void accel_msg_discard(accel_msg *msg);

typedef int (*accel_handler_fn)(accel_actor *self, void *state, accel_msg *msg);
typedef struct accel_handler {
  uint32_t type;
  uint32_t size; /* typed messages: the value's size (0: any message of that type) */
  accel_handler_fn fn;
} accel_handler;

/* For receive(): runs the handler of the message's type and returns its result. A message of
 * no handler's type goes to `otherwise` (NULL: ignored, 0); a typed one whose value is not its
 * handler's size is ACCEL_EPROTO (the sender and receiver disagree on the type). */
ACCEL_API int accel_dispatch(accel_actor *self, void *state, accel_msg *msg,
                             const accel_handler *handlers, size_t count,
                             accel_handler_fn otherwise);

/* Declares message type `name` = id carrying a `ctype`, with name##_tell(rt, to, &value) and
 * name##_get(msg, &out). */
#define ACCEL_MSG_DEFINE(name, id, ctype)                                                          \
  enum { name = (id) };                                                                            \
  static inline int name##_tell(accel_runtime *rt_, accel_ref to_, const ctype *value_) {          \
    accel_msg m_;                                                                                  \
    int rc_ = accel_msg_pack(&m_, name, value_, sizeof *value_);                                   \
    if (rc_ == 0 && (rc_ = accel_tell(rt_, to_, &m_)) != 0)                                        \
      accel_msg_discard(&m_);                                                                      \
    return rc_;                                                                                    \
  }                                                                                                \
  static inline int name##_get(const accel_msg *msg_, ctype *out_) {                               \
    return accel_msg_unpack(msg_, out_, sizeof *out_);                                             \
  }

/* ---------------------------------------------------------------------------------------
 * Supervision: how a parent treats its children's failures. */
typedef enum accel_strategy {
  ACCEL_ONE_FOR_ONE = 0, /* restart only the failed child */
  ACCEL_ONE_FOR_ALL,     /* stop all children (reverse start order), restart all in order */
  ACCEL_REST_FOR_ONE     /* restart the failed child and the ones started after it */
} accel_strategy;

typedef enum accel_on_limit {
  ACCEL_LIMIT_ESCALATE = 0, /* stop the child, then the parent itself fails (default) */
  ACCEL_LIMIT_STOP_CHILD    /* stop the child and tell the parent (child_exit); no escalation */
} accel_on_limit;

typedef struct accel_supervision {
  accel_strategy strategy;
  uint32_t max_restarts;       /* R: restarts allowed per child within `within_ms`; default 3 */
  uint32_t within_ms;          /* T: the window; default 5000 */
  uint32_t backoff_initial_ms; /* delay before the first restart in the window; default 0 */
  uint32_t backoff_max_ms;     /* the delay doubles per restart up to this; default 1000 */
  accel_on_limit on_limit;
} accel_supervision;

/* Per-spawn options; a zeroed struct (or NULL) gives the defaults. */
typedef struct accel_spawn_opts {
  const char *name; /* copied; defaults to behavior->name */
  /* The mailbox's bound, rounded up to a power of two; default 1024. A mailbox starts with
   * room for 16 messages (or the bound, if smaller) and grows by doubling as messages queue
   * up, to the bound at most: an actor that keeps up costs 16 slots, not the bound. */
  uint32_t mailbox_capacity;
  uint32_t throughput;                  /* messages per turn before yielding; default 64 */
  const accel_supervision *supervision; /* how this actor supervises its children; copied */
  /* A top-level actor (parent NULL): 1 + the index of the loop it lives on, for good (it never
   * moves to the loop its messages come from); 0: the usual place (the spawning loop, else the
   * loops in turn), free to move. Past the runtime's loops: ACCEL_EINVAL; from a loop thread
   * onto another loop: ACCEL_EINVAL too (a loop does not wait for another's spawn; another
   * thread waits for it, as for any spawn). Children live on their parent's loop: set, it is
   * ACCEL_EINVAL unless it names that loop. */
  uint32_t loop;
} accel_spawn_opts;

/* ---------------------------------------------------------------------------------------
 * The runtime */
typedef struct accel_runtime_opts {
  /* The most actors alive at once, the root included (the ref table's bound): a spawn past it
   * fails with ACCEL_ELIMIT. The table grows in chunks of 1024 refs as spawns need them.
   * Default 2^20 (1048576); at most 2^26, more is ACCEL_EINVAL. Each loop's root counts. */
  uint32_t max_actors;
  /* How many loop threads run the actors. 0: the environment's ACCEL_LOOPS if set (1 to
   * 256, or "cores"), else 1. ACCEL_LOOPS_PER_CORE: one per online core (at most 256). Other
   * values above 256 are ACCEL_EINVAL. */
  uint32_t loops;
} accel_runtime_opts;

#define ACCEL_LOOPS_PER_CORE UINT32_MAX

typedef struct accel_runtime_stats {
  uint64_t actors_live;
  uint64_t actors_spawned;
  uint64_t messages_received;
  uint64_t dead_letters;
  uint64_t busy_refusals; /* sends refused because a mailbox was full */
  uint64_t failures;
  uint64_t restarts;
  uint64_t escalations;
  uint64_t moves; /* actors moved to the loop they talk to (several loops) */
} accel_runtime_stats;

/* Creates a runtime and its root supervisor. `opts` may be NULL. The loop does not run yet. */
ACCEL_API int accel_runtime_create(accel_runtime **rt, const accel_runtime_opts *opts);
/* Runs the loop on the calling thread until accel_runtime_stop() has finished the shutdown.
 * Returns 0, or ACCEL_EALREADY if the loop already runs. */
ACCEL_API int accel_runtime_run(accel_runtime *rt);
/* Runs the loop on a thread of the runtime's own (for programs with their own main loop). */
ACCEL_API int accel_runtime_start(accel_runtime *rt);
/* Asks for shutdown, from any thread: the tree stops (children in reverse start order), pending
 * messages are dropped, work in flight finishes, then the loop exits. Idempotent. */
ACCEL_API void accel_runtime_stop(accel_runtime *rt);
/* Waits for the runtime's own thread to exit (after accel_runtime_start). Not on the loop. */
ACCEL_API int accel_runtime_join(accel_runtime *rt);
/* Frees the runtime. The loop must have exited (run returned or join done); if it never ran,
 * the tree is stopped here. */
ACCEL_API void accel_runtime_destroy(accel_runtime *rt);
ACCEL_API void accel_runtime_get_stats(accel_runtime *rt, accel_runtime_stats *out);
/* How many loops the runtime runs (accel_runtime_opts.loops). */
ACCEL_API uint32_t accel_runtime_loops(accel_runtime *rt);
/* The longest time one iteration of the loop spent running callbacks (actors, timers, work
 * completions, I/O) since the runtime started or the last reset: the longest any actor or
 * client could have waited behind the loop. Any thread; reset != 0 starts a new window. */
ACCEL_API uint64_t accel_runtime_max_stall_ns(accel_runtime *rt, int reset);
/* The time loop `loop` (0 .. accel_runtime_loops() - 1) has spent in turns that found work
 * (actors, posted tasks, the deferred work between them) and in what followed such a turn
 * before the loop polled again (prepare handles, deferred work) since it started: its busy
 * time, the rest being polling and sleep. Callbacks of the loop's own sockets and timers from
 * libuv's poll phase, and turns that a client thread runs for it, are not counted. Any
 * thread; 0 for a loop that does not exist. */
ACCEL_API uint64_t accel_runtime_loop_busy_ns(accel_runtime *rt, uint32_t loop);
/* The root supervisor's ref: spawn top-level actors under it (accel_spawn with parent NULL). */
ACCEL_API accel_ref accel_runtime_root(accel_runtime *rt);
/* A call to make on the loop thread: embed it in your own struct (intrusive, no allocation).
 * The fields are the runtime's. */
typedef struct accel_task {
  struct accel_task *next_;
  void (*fn_)(struct accel_task *task);
} accel_task;

/* Runs fn(task) once on a loop thread (the caller's loop, else loop 0), soon, in posting order
 * per thread. Any thread, never
 * blocks, never fails: the runtime holds the task until fn runs (fn may free it). Tasks
 * posted while the runtime shuts down still run, at the latest in accel_runtime_destroy. */
ACCEL_API void accel_post(accel_runtime *rt, accel_task *task, void (*fn)(accel_task *task));
/* As accel_post, on loop `loop` (0 if past the last). */
ACCEL_API void accel_post_to(accel_runtime *rt, uint32_t loop, accel_task *task,
                             void (*fn)(accel_task *task));

/* 1 when called on one of `rt`'s loop threads, else 0. */
ACCEL_API int accel_runtime_on_loop(accel_runtime *rt);

/* One actor of the supervision tree, as accel_runtime_walk() shows it. */
typedef struct accel_actor_view {
  const char *name;  /* valid during the callback only */
  accel_ref ref;     /* ACCEL_REF_NONE while waiting for a restart */
  uint32_t depth;    /* 0 for the root */
  const char *state; /* "running", "restarting" */
  uint32_t restarts; /* restarts of this child in its current window */
  uint64_t restarts_total;
  uint32_t mailbox_used; /* messages waiting (approximate) */
} accel_actor_view;

/* Visits the tree depth-first in start order: one root, then the top-level actors of every
 * loop, loop by loop. Loop thread only (from a callback); ACCEL_EDEADLK elsewhere. `visit`
 * must not spawn or stop actors. mailbox_used is 0 for actors of other loops. */
ACCEL_API int accel_runtime_walk(accel_runtime *rt,
                                 void (*visit)(const accel_actor_view *v, void *arg), void *arg);

/* ---------------------------------------------------------------------------------------
 * Actors */

/* Spawns a child of `parent` (or of the root when `parent` is NULL). From the loop thread
 * (any callback) or before the loop runs it is immediate; from another thread it is posted to
 * the loop and waited for. On success *out is the new ref (out may be NULL). The start hook
 * runs before this returns; if it fails, the spawn fails with its code and nothing remains.
 * `b` and `arg` must outlive the actor (restarts call start(arg) again). */
ACCEL_API int accel_spawn(accel_runtime *rt, accel_actor *parent, const accel_behavior *b,
                          void *arg, const accel_spawn_opts *opts, accel_ref *out);

/* Sends a message. Any thread. Returns 0 (the runtime owns msg->data now), ACCEL_ESTALE (dead
 * letter: the ref no longer names a live actor), ACCEL_EBUSY (mailbox full: backpressure,
 * nothing was queued), ACCEL_ENOMEM (the mailbox had to grow and no memory was left; nothing
 * was queued), ACCEL_ECLOSED (the runtime is shutting down). On failure the message
 * stays the caller's. Messages from one sender thread or actor arrive in the order sent. */
ACCEL_API int accel_tell(accel_runtime *rt, accel_ref to, const accel_msg *msg);

/* As accel_tell, but a full mailbox does not refuse the message: it waits for room, after the
 * messages that waited before it, and goes in as the actor's turns make room (no polling).
 * *delivered (if not NULL; release it) completes with 0 once the message is in the mailbox
 * (at once if there was room), ACCEL_ESTALE if the actor ends first (the message is dropped),
 * ACCEL_ECLOSED if the runtime stops first. Returns 0, or what accel_tell returns but
 * ACCEL_EBUSY (the message then stays the caller's), or ACCEL_ENOMEM. Any thread. A sender
 * that needs its messages in order sends through accel_tell_wait until the last one waiting
 * is delivered: a plain accel_tell could overtake them. */
ACCEL_API int accel_tell_wait(accel_runtime *rt, accel_ref to, const accel_msg *msg,
                              accel_future **delivered);

/* Sends a message that expects a reply and returns its future in *out. Any thread. The
 * receiver completes it with accel_reply() (or takes it, see accel_msg_take_reply); if it does
 * neither, the future completes with receive()'s return code when receive returns, and with
 * ACCEL_ESTALE if the message is dropped. On failure (codes as for tell) no future is made. */
ACCEL_API int accel_ask(accel_runtime *rt, accel_ref to, const accel_msg *msg, accel_future **out);
/* As accel_ask, with a deadline: the future completes with ACCEL_ETIMEDOUT if no reply has
 * come within timeout_ms (> 0; else ACCEL_EINVAL), and with ACCEL_ECLOSED if the runtime
 * stops first. A reply after that is dropped: accel_reply frees its value (drop) and returns
 * ACCEL_EALREADY, as accel_future_complete does for a future taken with
 * accel_msg_take_reply (its caller frees the value then). Any thread. */
ACCEL_API int accel_ask_timeout(accel_runtime *rt, accel_ref to, const accel_msg *msg,
                                uint64_t timeout_ms, accel_future **out);

/* From receive(): completes the message's ask future with `status` and `value` (ownership of
 * `value` passes to the future, which calls `drop(value)` when it is freed). No-op for a tell.
 * Returns ACCEL_EALREADY if it was already replied to. */
ACCEL_API int accel_reply(accel_msg *msg, int status, void *value, void (*drop)(void *));
/* From receive(): takes the ask future out of the message to complete it later (for example
 * when device work finishes). The caller must then complete it exactly once with
 * accel_future_complete() and release it. NULL for a tell. */
ACCEL_API accel_future *accel_msg_take_reply(accel_msg *msg);

/* Stops the actor and its subtree, from any thread; asynchronous (posted to the loop). Its
 * parent's child_exit hook runs with reason 0. ACCEL_ESTALE if the ref is not live. */
ACCEL_API int accel_stop(accel_runtime *rt, accel_ref ref);

/* From a callback of `self`: watches the incarnation `target` (any actor of the runtime, not
 * only a child): when it ends, `self` receives one ACCEL_MSG_DOWN (see accel_down_reason),
 * its arg *id. ACCEL_ESTALE if target has ended already (no DOWN comes), ACCEL_ENOMEM. */
ACCEL_API int accel_monitor(accel_actor *self, accel_ref target, uint64_t *id);
/* Stops watching: no DOWN of that monitor is sent from now (one sent already may still be
 * in the mailbox). ACCEL_ENOENT if it is not self's or has fired. */
ACCEL_API int accel_demonitor(accel_actor *self, accel_ref target, uint64_t id);
/* From a callback of `self`: links the incarnations of self and `other` (not self): when either
 * fails (its start or receive returned an error), the other fails too with that reason, and
 * its own supervisor handles it; a stop (accel_stop, or from its parent or the runtime) takes
 * nothing along. A link lasts while both incarnations do. ACCEL_ESTALE if other has ended,
 * ACCEL_EINVAL for self, ACCEL_ENOMEM. */
ACCEL_API int accel_link(accel_actor *self, accel_ref other);
/* Undoes accel_link from either side; ACCEL_ENOENT if they are not linked. */
ACCEL_API int accel_unlink(accel_actor *self, accel_ref other);

/* Inside callbacks of `self` (loop thread): */
ACCEL_API accel_ref accel_self(accel_actor *self);
ACCEL_API accel_runtime *accel_actor_runtime(accel_actor *self);
ACCEL_API const char *accel_actor_name(accel_actor *self);
/* The current ref of the child named `name`, which follows restarts. ACCEL_ENOENT if none,
 * ACCEL_EAGAIN while it waits for a restart (between incarnations). */
ACCEL_API int accel_child(accel_actor *self, const char *name, accel_ref *out);
/* The actor's parent (ACCEL_REF_NONE for the root). */
ACCEL_API accel_ref accel_parent(accel_actor *self);

/* ---------------------------------------------------------------------------------------
 * Timers: deliver a message to the actor itself after `delay_ms`, then every `repeat_ms`
 * (0: once). The message has type `type` and `arg`. Timers die with the incarnation. On
 * success *id names the timer for accel_timer_cancel. A full mailbox delays a tick. */
ACCEL_API int accel_timer_start(accel_actor *self, uint64_t delay_ms, uint64_t repeat_ms,
                                uint32_t type, uint64_t arg, uint64_t *id);
ACCEL_API int accel_timer_cancel(accel_actor *self, uint64_t id);

/* ---------------------------------------------------------------------------------------
 * Blocking work: `work(data)` runs on a worker thread (it may block); its return value comes
 * back to the actor as a message {type, arg = (uint64_t)(int64_t)result, data}. If the actor is
 * gone by then, `drop(data)` is called instead (on the loop thread). */
ACCEL_API int accel_work_submit(accel_actor *self, int (*work)(void *data), void *data,
                                void (*drop)(void *data), uint32_t type);

/* ---------------------------------------------------------------------------------------
 * Futures: complete once with a status (0 or a negative code) and an optional value.
 * Reference counted: a future from accel_ask() or accel_future_create() holds one reference for
 * the caller, released with accel_future_release(). After release, the future must not be
 * used; a registered `then` callback still runs (it holds its own reference). Thread-safe. */
typedef void (*accel_future_cb)(accel_future *f, int status, void *arg);

/* A new pending future for actors and libraries that complete their own (promise side). Its
 * `then` callbacks run on `rt`'s loop. */
ACCEL_API int accel_future_create(accel_runtime *rt, accel_future **out);
/* Completes a pending future; any thread. Returns ACCEL_EALREADY if it was already completed
 * (then `value` stays the caller's). */
ACCEL_API int accel_future_complete(accel_future *f, int status, void *value, void (*drop)(void *));
/* Blocks until completion or `timeout_ms` (< 0: forever); returns the status, or
 * ACCEL_ETIMEDOUT while pending. On the runtime's loop thread it returns ACCEL_EDEADLK at once
 * unless the future is already complete (blocking there would stall every actor). */
ACCEL_API int accel_future_wait(accel_future *f, int64_t timeout_ms);
/* ACCEL_EAGAIN while pending, else the status. Never blocks. */
ACCEL_API int accel_future_poll(accel_future *f);
/* Runs `cb(f, status, arg)` once on the loop thread after completion (soon, if already
 * complete). One callback per future: a second call returns ACCEL_EALREADY. The future is
 * valid during the callback even if its owner released it. */
ACCEL_API int accel_future_then(accel_future *f, accel_future_cb cb, void *arg);
/* Instead of a callback, for event loops and languages that cannot run code on the loop
 * thread: once `f` completes, the loop thread writes the 8 bytes of `token` (host order) to
 * `fd` in one write(2). Meant for a pipe (8-byte writes to a pipe are atomic, so one pipe can
 * serve many futures) whose reader keeps reading: a full blocking pipe holds the loop thread
 * until it is read. Counts as the future's one `then` (ACCEL_EALREADY after one). */
ACCEL_API int accel_future_notify_fd(accel_future *f, int fd, uint64_t token);
/* The completed value (borrowed; owned by the future). NULL while pending. */
ACCEL_API void *accel_future_value(accel_future *f);
ACCEL_API void accel_future_retain(accel_future *f);
ACCEL_API void accel_future_release(accel_future *f);

/* ---------------------------------------------------------------------------------------
 * Logging: leveled, to stderr, one line per call, thread-safe. The level comes from the
 * ACCEL_LOG environment variable (error, warn, info, debug, trace; default warn) or
 * accel_log_set_level(). A line starts with the UTC time (ISO 8601, milliseconds) and the
 * level's name; when stderr is the systemd journal ($JOURNAL_STREAM matches it), with the
 * syslog priority ("<3>" error, "<4>" warn, "<6>" info, "<7>" debug and trace) instead. */
typedef enum accel_log_level {
  ACCEL_LOG_ERROR = 0,
  ACCEL_LOG_WARN,
  ACCEL_LOG_INFO,
  ACCEL_LOG_DEBUG,
  ACCEL_LOG_TRACE
} accel_log_level;

ACCEL_API void accel_log_set_level(accel_log_level level);
ACCEL_API accel_log_level accel_log_get_level(void);
/* Parses "error", "warn", "info", "debug", "trace"; ACCEL_EINVAL otherwise. */
ACCEL_API int accel_log_parse_level(const char *s, accel_log_level *out);
/* The level's name as accel_log_parse_level() reads it ("unknown" outside the enum); static. */
ACCEL_API const char *accel_log_level_name(accel_log_level level);
ACCEL_API void accel_log(accel_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif
