/* Internals of the actor runtime, shared by the files of runtime/. Not installed.
 *
 * Ownership in one paragraph: the runtime owns the slot table, every cell and every child
 * record. A cell lives from spawn until it is *retired* (stopped or failed: its slot's
 * generation is bumped so every ref to it is stale) and then *swept*: freed once no other
 * thread is inside a send to it (slot pins == 0) and it sits in no run queue. Only the loop
 * thread creates, retires and frees cells, so callbacks never see a cell vanish under them. */
#ifndef RT_RT_H
#define RT_RT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <uv.h>

#include "accel/runtime.h"
#include "runtime/attr.h"
#include "runtime/list.h"
#include "runtime/loop.h"
#include "runtime/mailbox.h"
#include "runtime/spin.h"
#include "runtime/wakeup.h"

typedef struct rt_child rt_child;
typedef struct rt_timer rt_timer;
typedef struct rt_monitor rt_monitor; /* monitor.c */
typedef struct rt_waiter rt_waiter;   /* tell_wait.c */

/* A deferred call on the loop thread (posted from any thread): the public accel_task. */
typedef accel_task rt_task;

typedef struct rt_task_list {
  rt_task *head, *tail;
} rt_task_list;

enum rt_cell_status { RT_RUNNING = 0, RT_FAILED, RT_STOPPED };

typedef struct rt_loop rt_loop;

struct accel_actor {
  accel_runtime *rt;
  rt_loop *home; /* the loop that runs its turns and owns its state (changed only by move.c) */
  const accel_behavior *b;
  void *arg;
  void *state;
  rt_child *spec;      /* the parent's record of this child; NULL for a loop's root */
  accel_actor *parent; /* NULL for a loop's root */
  accel_ref ref;
  int status; /* enum rt_cell_status; its loop only */
  uint32_t throughput;
  rt_mailbox mailbox;
  atomic_int scheduled; /* 1 while queued to run (or being swept); producers test-and-set */
  accel_actor *runq_next;
  accel_actor *grave_next;
  rt_list children; /* rt_child records, in start order (their loop is this one) */
  accel_supervision supervision;
  rt_timer *timers;
  /* Who watches this incarnation (monitor.c): other loops add and remove records, so the list
   * is under a spin lock; `monitors_closed` is set under it when the incarnation ends. */
  atomic_flag monitors_lock;
  bool monitors_closed;
  rt_monitor *monitors;
  rt_waiter *waiters, *waiters_tail;      /* sends waiting for room, in order (tell_wait.c; loop) */
  uint32_t work_pending;                  /* accel_work_submit's jobs not yet back (work.c) */
  uint32_t affinity_loop, affinity_count; /* where this turn's messages came from (move.c) */
  bool affinity_mixed;                    /* from its own loop too, or from two */
  uint32_t turns_since_move;
  uint32_t move_rng;
  rt_task move_task; /* its hand-over to another loop (move.c) */
};

/* A supervisor's record of one child: what it needs to restart it, and the restart history. */
struct rt_child {
  rt_list link;       /* in the owner's children */
  accel_actor *owner; /* the supervising parent */
  const accel_behavior *b;
  void *arg;
  char *name;
  uint32_t mailbox_capacity, throughput;
  bool stays;                    /* spawned on a chosen loop: never moves (move.c) */
  accel_supervision supervision; /* the child's own, for its children */
  accel_actor *cell;             /* current incarnation; NULL while waiting for a restart */
  bool awaiting_restart;
  rt_child *restart_leader; /* the failed child whose backoff timer restarts this one */
  int last_reason;          /* why it was last restarted, for post_restart */
  uint64_t window_start_ms; /* restart-intensity window */
  uint32_t restarts_in_window;
  uint64_t restarts_total;
  uv_timer_t *backoff; /* pending restart, or NULL */
};

typedef struct rt_slot {
  atomic_uint gen;  /* generation of the incarnation in this slot */
  atomic_uint pins; /* senders on other threads currently inside a send */
  _Atomic(accel_actor *) cell;
  /* Sends waiting for room to this slot's actor (tell_wait.c): while there are, later sends
   * of accel_tell_wait wait too, behind them, so none overtakes an earlier one. */
  atomic_uint waiting;
  atomic_uint home; /* the index of the loop its incarnation lives on */
  /* Held while a waiting send is counted and posted to `home`, and while a move decides:
   * a move never happens between the two (tell_wait.c, move.c). */
  atomic_flag post_lock;
  uint32_t next_free; /* under slots_mu */
} rt_slot;

#define RT_SLOT_CHUNK_SHIFT 10
#define RT_SLOT_CHUNK (1u << RT_SLOT_CHUNK_SHIFT)
#define RT_MAX_ACTORS_DEFAULT (1u << 20)
#define RT_MAX_ACTORS_LIMIT (1u << 26)

typedef struct rt_stats {
  atomic_ullong actors_live, actors_spawned, messages_received, dead_letters, busy_refusals,
      failures, restarts, escalations, moves;
} rt_stats;

/* A local send that met a full mailbox (timer tick, work result): retried every turn. */
typedef struct rt_retry {
  struct rt_retry *next;
  accel_ref to;
  accel_msg msg;
  bool as_sender; /* sent as msg.sender (a DOWN: the actor that ended), not as the loop */
} rt_retry;

/* One loop of a runtime: a thread with its own libuv loop, run queue and root. Each actor lives
 * on one loop at a time (its `home`; move.c moves some between turns): its turns, hooks,
 * timers, children and supervision run there, so an actor's turns never run on two threads at
 * once and its state needs no locks. Children live on their parent's loop; top-level actors are
 * spread over the loops (loop.c `rt_place`). Everything in here is its thread's only, unless said.
 */
struct rt_loop {
  accel_runtime *rt;
  uint32_t index;
  uv_loop_t loop;
  rt_wakeup wake; /* wake-ups from other threads */
  uv_idle_t turn; /* active while there is local work: keeps the loop from blocking */
  /* The loop's stalls (accel_runtime_max_stall_ns): `awake` runs after the poll phase,
   * `asleep` before the next one (timers, idle turns, pending and closing callbacks ran
   * between them); turns run from the poll phase (wake-ups) are timed on their own. Other
   * callbacks of the poll phase (sockets) are not timed. Neither handle keeps the loop
   * alive. */
  uv_check_t awake;
  uv_prepare_t asleep;
  uint64_t woke_ns;
  atomic_ullong max_stall_ns;
  atomic_ullong busy_ns;  /* in turns that found work and after (accel_runtime_loop_busy_ns) */
  uint64_t busy_until_ns; /* the end of the last turn, if it found work: counted up to the poll */
  bool turn_active;
  bool initialized;          /* loop_init done: destroy closes it */
  uint64_t last_work_ns;     /* when a turn last found something to do */
  uint64_t spin_ns;          /* how long the loop keeps turning after that before sleeping */
  uint32_t turn_hops;        /* actor runs a turn adds for actors woken during it (loop.c) */
  uint64_t span_ns;          /* turns back to back in one idle callback for at most this (loop.c) */
  bool poll_soon;            /* a prepare handle has work: end the turns back to back (defer.h) */
  uint32_t move_after;       /* messages in a row from one other loop that move an actor (move.c) */
  uint64_t move_turn_cycles; /* a turn shorter than this may move its actor (move.c) */
  uint64_t turn_ns;          /* when the current turn began (uv_hrtime: CLOCK_MONOTONIC) */
  uv_thread_t thread;        /* loops 1..n-1: their own thread (loop 0 runs where run/start says) */
  bool has_thread;
  bool shut_down; /* the tree is stopped and the handles are closing */

  struct rt_deferred *deferred; /* runs before the next poll (defer.h) */

  accel_actor *runq_head, *runq_tail;
  uint32_t runq_len;
  accel_actor *graveyard; /* retired cells waiting to be swept */
  rt_retry *retries;
  rt_task_list local_tasks;

  pthread_mutex_t remote_mu; /* guards the two lists below */
  accel_actor *inject_head, *inject_tail;
  rt_task_list remote_tasks;
  /* Set (under remote_mu) when the lists above get something, cleared when the loop takes
   * them: a turn with nothing from other threads does not take the lock, which a spinning
   * loop would otherwise take about once a microsecond, against every sender. */
  atomic_bool remote_pending;

  /* The loop token: whoever runs the loop's state (actors, turns, tasks, the libuv loop)
   * holds it. The loop thread holds it except while it sleeps in poll (loop.c); a client
   * thread that finds it free then may run the turns itself (rt_tell_and_run). */
  pthread_mutex_t token;
  uint64_t sleep_until_ms; /* under token: the sleeping loop's deadline; 0 awake, MAX none */
  bool sleeps_here;        /* under token: loop_body runs; the loop sleeps in `asleep` */
  bool borrowed;           /* under token: a client thread runs the turns (rt_tls_loop set) */
  rt_task_list loop_tasks; /* under token: tasks only the loop thread runs (`then` callbacks) */
  atomic_ullong borrowed_turns;

  /* Guards the shape of this loop's tree (children lists, which cell a record names, restart
   * counts) against accel_runtime_walk from another loop; the loop itself reads it freely. */
  pthread_mutex_t tree_mu;
  accel_actor *root; /* NULL once shut down */
  uint64_t next_timer_id;
  uint64_t next_monitor_id;
};

struct accel_runtime {
  rt_loop *loops; /* n_loops of them; fixed at create */
  uint32_t n_loops;
  atomic_uint next_place;   /* round-robin placement of top-level actors spawned from outside */
  atomic_bool running;      /* the loops run (run or start called, not finished) */
  atomic_bool closing;      /* shutdown requested: sends are refused */
  atomic_uint remote_users; /* threads inside a send/post to a loop not their own right now */
  atomic_uint loops_done;   /* loops whose shutdown drain finished */
  uint32_t loops_started;   /* loops whose thread runs (loop 0's thread only) */
  atomic_bool borrow_off;   /* no client thread runs turns (accel_runtime_opts, or later) */
  uv_thread_t thread;       /* accel_runtime_start's thread, running loop 0 */
  bool has_thread;

  /* The ref table: chunks of RT_SLOT_CHUNK slots, made as spawns need them and never moved
   * (senders on other threads read slots while a loop adds chunks), up to slot_limit slots.
   * slot_count (release, after the chunk is in place) says how many slots exist. The free
   * list and growth are under slots_mu (spawns and sweeps of every loop). */
  pthread_mutex_t slots_mu;
  rt_slot **slot_chunks; /* slot_limit / RT_SLOT_CHUNK entries (rounded up) */
  atomic_uint slot_count;
  uint32_t slot_limit; /* max_actors + 1 (slot 0 is never handed out) */
  uint32_t free_head;  /* under slots_mu */

  accel_ref root_ref; /* loop 0's root; immutable after create: readable from any thread */
  rt_list ask_timers; /* asks with a deadline whose timer runs (ask_timeout.c; loop 0) */
  rt_stats stats;
};

/* loop.c */
/* initial-exec: a plain load, not a __tls_get_addr call on every send (libaccel is a shared
 * library; this model needs it loaded with the program or early, which is how it is used). */
#define RT_TLS _Thread_local __attribute__((tls_model("initial-exec")))
extern RT_TLS rt_loop *rt_tls_loop;      /* the loop this thread runs (or stands in for) */
extern RT_TLS accel_actor *rt_tls_actor; /* the actor whose callback is running */
/* The loop of `rt` this thread runs, or NULL (another runtime's, or none). */
static inline rt_loop *rt_here(accel_runtime *rt) {
  rt_loop *l = rt_tls_loop;
  return l != NULL && l->rt == rt ? l : NULL;
}
void rt_schedule_local(rt_loop *l, accel_actor *cell);
void rt_schedule_remote(rt_loop *l, accel_actor *cell);
/* Queues the cell on its home loop's run queue, from whichever thread this is. */
void rt_schedule(accel_actor *cell);
/* Runs task on loop l soon (its own thread, or a client thread's borrowed turn). */
void rt_post_to(rt_loop *l, rt_task *task);
/* rt_post_to the calling thread's loop of rt, else loop 0. */
void rt_post(accel_runtime *rt, rt_task *task);
/* Like rt_post to loop 0, but the task runs on the loop thread itself, never in a client
 * thread's borrowed turn (a `then` callback: the API says the loop thread runs those). */
void rt_post_loop_thread(accel_runtime *rt, rt_task *task);
void rt_wake_turn(rt_loop *l);
/* Set by rt_tell_and_run around its send: rt_schedule_remote to that loop then owes the
 * wake-up instead of signalling (borrow.c settles it). */
extern RT_TLS rt_loop *rt_tls_hold_wake;
extern RT_TLS bool rt_tls_wake_owed;
/* For borrow.c, token held: whether a turn has anything to do, one turn, and the end of a
 * borrow (true: the loop must be woken). */
bool rt_turn_has_work(rt_loop *l);
void rt_turn_run(rt_loop *l);
bool rt_turn_loop_must_wake(rt_loop *l);
/* borrow.c: ACCEL_BORROW=0 turns borrowing off in every runtime (read once). */
bool rt_borrow_env_off(void);
bool rt_remote_enter(accel_runtime *rt);
void rt_remote_leave(accel_runtime *rt);
uint64_t rt_now_ms(rt_loop *l);
/* The loop a new top-level actor goes to when spawned from outside the loops: round-robin. */
rt_loop *rt_place(accel_runtime *rt);
/* The loop the slot's incarnation lives on. */
static inline rt_loop *rt_slot_home(accel_runtime *rt, const rt_slot *slot) {
  return &rt->loops[atomic_load_explicit(&slot->home, memory_order_relaxed)];
}

/* actor.c */
/* 0 and *out, ACCEL_ENOMEM, or ACCEL_ELIMIT (the ref table is at its bound). */
RT_MUST_USE int rt_cell_create(rt_loop *home, accel_actor *parent, rt_child *spec,
                               accel_actor **out);
RT_MUST_USE int rt_cell_start(accel_actor *cell);
/* Ends an incarnation for `reason` (0: stopped; ACCEL_ECLOSED: its parent or the runtime
 * stopped; else the failure that ended it): what its monitors are told. */
void rt_cell_terminate(accel_actor *cell, int reason);
void rt_cell_run(accel_actor *cell);
void rt_sweep(rt_loop *l);
void rt_drop_msg(accel_runtime *rt, accel_msg *msg);
RT_MUST_USE int rt_send_local(accel_runtime *rt, accel_ref to, const accel_msg *msg);
accel_actor *rt_resolve_local(accel_runtime *rt, accel_ref ref);
/* The cell `ref` names, on any loop, pinned against its sweep until rt_cell_unpin (its memory
 * stays; it may end meanwhile); NULL if stale. Any thread. */
accel_actor *rt_cell_pin(accel_runtime *rt, accel_ref ref);
void rt_cell_unpin(accel_actor *cell);
/* The table for at most `max_actors` live actors (the root included); its first chunk. */
RT_MUST_USE int rt_slots_init(accel_runtime *rt, uint32_t max_actors);
void rt_slots_free(accel_runtime *rt);
/* The slot of an index known to exist (a live or retired cell's). */
static inline rt_slot *rt_slot_of(accel_runtime *rt, uint32_t idx) {
  return &rt->slot_chunks[idx >> RT_SLOT_CHUNK_SHIFT][idx & (RT_SLOT_CHUNK - 1)];
}
/* The slot `idx` names, or NULL if no such slot exists (yet). Any thread. */
static inline rt_slot *rt_slot_at(accel_runtime *rt, uint32_t idx) {
  if (idx == 0 || idx >= atomic_load_explicit(&rt->slot_count, memory_order_acquire))
    return NULL;
  return rt_slot_of(rt, idx);
}
void rt_retry_send(accel_runtime *rt, accel_ref to, const accel_msg *msg);
/* A local send refused for now (a full mailbox, or one that could not grow): the runtime's own
 * messages (ticks, work results, DOWN, EXIT) are retried every turn then. */
static inline bool rt_send_later(int rc) {
  return rc == ACCEL_EBUSY || rc == ACCEL_ENOMEM;
}
/* As rt_send_local and rt_retry_send, with msg->sender as it is (loop thread). */
int rt_send_as(accel_runtime *rt, accel_ref to, const accel_msg *msg);
void rt_retry_send_as(accel_runtime *rt, accel_ref to, const accel_msg *msg);
/* monitor.c: tells the cell's watchers it ended (on the loop), and forgets them. */
void rt_monitors_fire(accel_actor *cell, int reason);
/* tell_wait.c: after a turn of the cell, the sends that wait for room go in while it lasts;
 * at its end they fail (ACCEL_ESTALE). */
void rt_waiters_admit(accel_actor *cell);
void rt_waiters_fail(accel_actor *cell);
/* ask_timeout.c: at shutdown, the asks whose deadline is still ahead complete ACCEL_ECLOSED
 * (their timers then close in the drain, so the loop does not wait for their deadlines). */
void rt_ask_timers_close(accel_runtime *rt);
bool rt_retries_flush(rt_loop *l);

/* move.c: an actor moves to the loop its messages come from (several loops only). */
uint32_t rt_move_after(void);
uint64_t rt_move_turn_cycles(void);
void rt_move_note(accel_actor *cell, accel_ref sender);
void rt_move_turn_end(accel_actor *cell);
bool rt_move_due(accel_actor *cell, uint64_t turn_start);
/* False (nothing changed) if a send waiting for room is on its way to the old loop. */
bool rt_move(accel_actor *cell);
/* A cheap timestamp for the length of an actor's turn (several loops only). */
uint64_t rt_move_stamp(void);
static inline void rt_slot_lock(rt_slot *slot) {
  while (atomic_flag_test_and_set_explicit(&slot->post_lock, memory_order_acquire))
    ;
}
static inline void rt_slot_unlock(rt_slot *slot) {
  atomic_flag_clear_explicit(&slot->post_lock, memory_order_release);
}
/* For a task posted to ref's loop that found the actor gone from it: if the incarnation lives
 * and has moved, the task is posted to its new loop (true); false: it is really gone. */
bool rt_follow(accel_runtime *rt, accel_ref ref, rt_task *task);

/* supervisor.c */
RT_MUST_USE rt_child *rt_child_create(accel_actor *owner, const accel_behavior *b, void *arg,
                                      const accel_spawn_opts *opts);
void rt_child_free(rt_child *spec);
RT_MUST_USE int rt_child_respawn(rt_child *spec);
void rt_child_stop(rt_child *spec, int reason);
void rt_children_stop_all(accel_actor *owner);
void rt_supervise_failure(accel_actor *cell, int reason);
void rt_supervision_defaults(accel_supervision *s, const accel_supervision *given);

/* future.c */
int rt_future_complete_release(accel_future *f, int status);
/* A runtime is made / destroyed: freed futures are pooled while one lives. */
void rt_future_pool_open(void);
void rt_future_pool_close(void);

/* timer.c */
void rt_timers_stop_all(accel_actor *cell);

/* rt_uv_loop: runtime/loop.h */

/* log.c */
void rt_log_init_from_env(void);

/* rt_spin_ns, rt_cpu_relax: runtime/spin.h */
#define RT_TURN_HOPS_DEFAULT 1024u
#define RT_TURN_SPAN_DEFAULT_US 20u
uint32_t rt_turn_hops(void);
uint64_t rt_turn_span_ns(void);
/* The environment's `name` as a number in [min, max]; dflt if unset, empty or anything else.
 * Read at each call (runtimes read their settings as they are made). */
uint64_t rt_env_uint(const char *name, uint64_t dflt, uint64_t min, uint64_t max);

/* A libuv error as an accel code (libuv's are negative errno values). */
static inline int rt_uv_err(int uv_rc) {
  switch (uv_rc) {
  case 0:
    return 0;
  case UV_ENOMEM:
    return ACCEL_ENOMEM;
  case UV_EINVAL:
    return ACCEL_EINVAL;
  case UV_EBUSY:
    return ACCEL_EBUSY;
  default:
    return ACCEL_ESYS;
  }
}

#define RT_LOG(level, ...) accel_log(level, "runtime", __VA_ARGS__)

#endif
