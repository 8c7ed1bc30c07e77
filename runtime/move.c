/* Actors move to the loop they talk to (several loops only).
 *
 * Top-level actors are spread over the loops as they are spawned, which puts the two sides of
 * a conversation on different threads: every hop is then a cross-thread wake-up, 30x slower
 * than a hop within a turn (docs/DECISIONS.md "Several loops"). So each turn counts where
 * its messages came from: an actor whose turn held `move_after` or more messages
 * (ACCEL_MOVE_AFTER, default 1; 0: never move), all from actors of one other loop, moves there
 * at the end of the turn, if the turn was short (RT_MOVE_SHORT_TURN: a turn of work worth a
 * thread of its own, computing, is what spreading is for), it has settled for a few turns
 * since its last move (RT_MOVE_SETTLE), and, toward a higher loop, a coin says so (two
 * partners do not swap; a chain drains toward its lowest loop).
 *
 * Only an actor with nothing tied to its loop moves: a top-level actor with no children, no
 * timers, no blocking work in flight and no sends waiting for its room, not spawned on a loop
 * its options named (accel_spawn_opts.loop: its spawner placed it there on purpose). The move
 * happens on its old loop while the actor is marked scheduled (no sender queues it meanwhile) and
 * while no send that waits for room is on its way to it (slot->waiting, under the slot's lock): its
 * record
 * leaves the old root's children, its home and its slot name the new loop, and a task
 * (the cell's own, no allocation) posted there adds the record to that root and queues the
 * actor if mail is waiting. Senders on the old loop see the slot's new home and pin, as any
 * other thread does; tasks that were posted to the old loop for it (stops, waiting sends)
 * follow it (rt_follow). */
#include <stdlib.h>

#include "runtime/alloc.h"
#include "runtime/rt.h"

#define RT_MOVE_AFTER_DEFAULT 1u
/* A turn shorter than this (TSC cycles on x86: about 10 us at 2-5 GHz) is a conversation's:
 * its actor may move. */
#define RT_MOVE_SHORT_TURN 30000u
/* Turns an actor stays after a move before it may move again: a fan-in whose turns happen to
 * hold one loop's messages does not chase each of them. */
#define RT_MOVE_SETTLE 1u

uint64_t rt_move_stamp(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_ia32_rdtsc();
#else
  return 0; /* no cheap counter: every turn counts as short */
#endif
}

/* ACCEL_MOVE_TURN_CYCLES: the short turn's bound (tests under valgrind, whose turns are 50x
 * longer, raise it); read at each runtime's creation. */
uint64_t rt_move_turn_cycles(void) {
  return rt_env_uint("ACCEL_MOVE_TURN_CYCLES", RT_MOVE_SHORT_TURN, 0, UINT64_MAX);
}

/* Read at each runtime's creation (a benchmark or test compares settings in one process). */
uint32_t rt_move_after(void) {
  return (uint32_t)rt_env_uint("ACCEL_MOVE_AFTER", RT_MOVE_AFTER_DEFAULT, 0, UINT32_MAX - 1);
}

/* Counts one delivered message's origin (several loops only): a turn whose messages all came
 * from one other loop points there; one with any from its own loop or from two loops is mixed
 * (an actor fed from everywhere stays where it is). */
void rt_move_note(accel_actor *cell, accel_ref sender) {
  accel_runtime *rt = cell->rt;
  rt_slot *slot = sender.gen ? rt_slot_at(rt, sender.slot) : NULL;
  if (slot == NULL)
    return; /* from outside the loops: says nothing of where to be */
  uint32_t from = atomic_load_explicit(&slot->home, memory_order_relaxed);
  if (from == cell->home->index || (cell->affinity_count > 0 && from != cell->affinity_loop)) {
    cell->affinity_mixed = true;
  } else {
    cell->affinity_loop = from;
    cell->affinity_count++;
  }
}

/* At the end of a turn that did not move: the next turn counts afresh. */
void rt_move_turn_end(accel_actor *cell) {
  cell->affinity_count = 0;
  cell->affinity_mixed = false;
  if (cell->turns_since_move < UINT32_MAX)
    cell->turns_since_move++;
}

static bool movable(const accel_actor *cell) {
  rt_loop *home = cell->home;
  return cell->status == RT_RUNNING && cell->spec != NULL && !cell->spec->stays &&
         cell->parent == home->root && rt_list_empty(&cell->children) && cell->timers == NULL &&
         cell->waiters == NULL && cell->work_pending == 0 &&
         !atomic_load_explicit(&cell->rt->closing, memory_order_relaxed);
}

/* Toward a lower loop always, toward a higher one half the time. Two actors that talk across
 * loops, both due, would otherwise swap loops at once and stay apart; a chain (a ring of
 * actors, each hearing from the one before) drains toward its lowest loop in a few laps,
 * where a coin for every move left it drifting for hundreds. */
static bool coin(accel_actor *cell) {
  uint32_t x = cell->move_rng ? cell->move_rng : cell->ref.slot * 2654435761u + 1;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  cell->move_rng = x;
  return x & 1;
}

bool rt_move_due(accel_actor *cell, uint64_t turn_start) {
  uint32_t after = cell->home->move_after;
  return after != 0 && cell->affinity_count >= after && !cell->affinity_mixed &&
         cell->turns_since_move >= RT_MOVE_SETTLE && cell->affinity_loop < cell->rt->n_loops &&
         rt_move_stamp() - turn_start < cell->home->move_turn_cycles && movable(cell) &&
         (cell->affinity_loop < cell->home->index || coin(cell));
}

static void adopt(rt_task *task);

/* On the old loop, at the end of the cell's turn (scheduled is 1 and stays so until adopt). */
bool rt_move(accel_actor *cell) {
  rt_loop *from = cell->home, *to = &cell->rt->loops[cell->affinity_loop];
  rt_child *spec = cell->spec;
  rt_slot *slot = rt_slot_of(cell->rt, cell->ref.slot);
  rt_slot_lock(slot);
  if (atomic_load(&slot->waiting) != 0) {
    rt_slot_unlock(slot); /* a waiting send is posted to this loop: stay for it */
    return false;
  }
  atomic_store(&slot->home, to->index);
  rt_slot_unlock(slot);
  pthread_mutex_lock(&from->tree_mu);
  rt_list_remove(&spec->link);
  pthread_mutex_unlock(&from->tree_mu);
  cell->home = to;
  cell->parent = to->root;
  spec->owner = to->root;
  cell->affinity_count = 0;
  cell->affinity_mixed = false;
  cell->turns_since_move = 0;
  atomic_fetch_add_explicit(&cell->rt->stats.moves, 1, memory_order_relaxed);
  cell->move_task.fn_ = adopt;
  rt_post_to(to, &cell->move_task);
  return true;
}

/* On the new loop: the record joins its root; the actor runs again if mail waits. A loop that
 * has shut its tree down meanwhile ends the actor as its own stop would have. */
static void adopt(rt_task *task) {
  accel_actor *cell = (void *)((char *)task - offsetof(accel_actor, move_task));
  rt_loop *l = cell->home;
  rt_child *spec = cell->spec;
  if (l->root == NULL || l->root->status != RT_RUNNING) {
    atomic_store(&cell->scheduled, 0);
    rt_cell_terminate(cell, ACCEL_ECLOSED);
    rt_free(spec->name);
    rt_free(spec);
    return;
  }
  pthread_mutex_lock(&l->tree_mu);
  rt_list_push_back(&l->root->children, &spec->link);
  pthread_mutex_unlock(&l->tree_mu);
  atomic_store(&cell->scheduled, 0); /* seq_cst: pairs with the mailbox's publish */
  if (!rt_mailbox_empty(&cell->mailbox) && atomic_exchange(&cell->scheduled, 1) == 0)
    rt_schedule_local(l, cell);
}

bool rt_follow(accel_runtime *rt, accel_ref ref, rt_task *task) {
  rt_slot *slot = rt_slot_at(rt, ref.slot);
  if (slot == NULL || atomic_load(&slot->gen) != ref.gen || atomic_load(&rt->closing))
    return false;
  rt_loop *home = rt_slot_home(rt, slot);
  if (home == rt_here(rt))
    return false;
  rt_post_to(home, task);
  return true;
}
