/* acceld's shards (server_shards.c): several server actors of one daemon, each on a loop of
 * its own with a device world of its own (linked into every device worker by a link of its
 * own), so that a connection's frames, session, device actors and replies all stay on one
 * loop and several loops serve clients at once. Shard 0 owns the listeners, nng's socket,
 * the HTTP endpoint and the drain; it hands each local connection it accepts to the shard
 * with the fewest. What the daemon's limits count across shards lives here: connections
 * (max_connections) and clients' shared memory (max_shared_bytes_total). Private to server/. */
#ifndef SRV_SERVER_SHARDS_H
#define SRV_SERVER_SHARDS_H

#include <stdatomic.h>

#include "server/render.h"
#include "server/server_priv.h"

struct srv_shards {
  uint32_t n;
  bool own; /* made by a server that was given none (one shard): it frees it */
  /* Each shard's server actor and loop, set by the shard as it starts (before shard 0, the
   * last to start, hands it anything: the hand-off message orders them for the others). */
  accel_ref refs[SRV_SHARDS_MAX];
  uint32_t loops[SRV_SHARDS_MAX];
  dev_world *worlds[SRV_SHARDS_MAX]; /* never cleared: the worlds outlive the servers */
  /* Each shard's server while it lives: read by another shard only with that one parked, or
   * by tasks on its own loop. */
  srv_server *servers[SRV_SHARDS_MAX];
  /* Posted to shard k's loop when room for large frames comes back while its connections
   * wait (a posted task cannot be refused, as a message to a full mailbox can). */
  struct srv_shard_task {
    accel_task task;
    srv_shards *shards;
    uint32_t shard;
  } wake[SRV_SHARDS_MAX];
  /* Connections open on shard k, as that shard last published them (server_conn.c), and
   * those handed to it by shard 0 that it has not taken yet. */
  _Atomic uint32_t conns[SRV_SHARDS_MAX], handed[SRV_SHARDS_MAX];
  _Atomic uint64_t shared_bytes; /* clients' shared memory mapped, every shard's */
  /* Bytes of large local frames being received, every shard's, against max_partial_bytes
   * (server_local.c); which shards have connections waiting for room, and whether one was
   * told of room given back and has not looked yet. Sequentially consistent: a shard that
   * starts waiting and one that gives room back never both miss the other. */
  _Atomic uint64_t partial_held;
  atomic_bool partial_waiting[SRV_SHARDS_MAX], partial_told[SRV_SHARDS_MAX];
  /* A stopped trace is being rendered (server_trace.c): one render at a time, and no trace
   * starts meanwhile (each render holds its events until it is done). */
  atomic_bool trace_rendering;
};

/* A server's shards: those of its args, or one of its own (ACCEL_ENOMEM). */
RT_MUST_USE int srv_shards_attach(srv_server *s);
void srv_shards_detach(srv_server *s);
/* Publishes the shard's connection count (after each change of s->nconns). */
void srv_shards_publish(srv_server *s);
/* Connections open in the whole daemon, handed ones included (one being adopted may count
 * twice for a moment, never less than once). */
uint32_t srv_shards_conns(const srv_server *s);
/* Shard 0, a connection just accepted on fd (its transport tp): true if another shard,
 * the one with the fewest connections, took it (fd is then that shard's), false if it stays
 * here (one shard, this one has the fewest, draining, or the hand-off failed). */
bool srv_shards_hand_off(srv_server *s, int fd, const srv_transport *tp);
/* SRV_MSG_ADOPT, on the shard a connection was handed to (data: the hand-off, taken). */
void srv_shards_adopt(srv_server *s, void *data);
/* Shard 0: the other shards drain too (SRV_MSG_DRAIN, asked with the same timeout, or told
 * when `ask` is false); a shard that cannot be asked is not waited for, and the drain fails
 * (ACCEL_ECLOSED). */
void srv_shards_drain_others(srv_server *s, bool ask);
/* Shard 0: whether every other shard's drain has ended; *status: the first failure. */
bool srv_shards_drained(srv_server *s, int *status);
void srv_shards_drain_forget(srv_server *s);
/* Shard 0: new limits (SRV_MSG_LIMITS' proto_limits) for the other shards too. */
void srv_shards_limits_others(srv_server *s, const proto_limits *l);
/* Clients' shared memory of the whole daemon: reserves len bytes if the total stays within
 * `all` (true), or not (false); release gives them back. */
bool srv_shards_shared_reserve(srv_server *s, uint64_t len, uint64_t all);
void srv_shards_shared_release(srv_server *s, uint64_t len);
/* Large local frames: takes len bytes of the daemon's budget (s->partial_max) if they fit;
 * gives them back (telling the other shards whose connections wait); says whether this
 * shard has connections waiting. */
bool srv_shards_partial_take(srv_server *s, uint64_t len);
void srv_shards_partial_give(srv_server *s, uint64_t len);
void srv_shards_partial_waiting(srv_server *s, bool waiting);
/* Runs fn(task) on shard `shard`'s loop (accel_post_to: never refused). */
void srv_shards_post(srv_server *s, uint32_t shard, accel_task *task, void (*fn)(accel_task *));

/* Reports: shard 0 stops every other shard's loop in a message handler (each waits there,
 * parked, until resumed) so that it may read their servers and worlds as its own; 0, or what
 * telling a shard failed with (ACCEL_ECLOSED: it stopped; ACCEL_EBUSY: its mailbox is full)
 * or ACCEL_ETIMEDOUT (one did not park within 2 s): then nothing may be read. Resume in every
 * case (*park may be NULL: one shard). */
typedef struct srv_park srv_park;
RT_MUST_USE int srv_shards_park_others(srv_server *s, srv_park **park);
void srv_shards_resume_others(srv_park *park);
/* SRV_MSG_PARK, on the parked shard (data: the park, taken). */
void srv_shards_parked(void *data);
/* Every shard's world whose devices are s's (s's first): read their devices' states (atomics)
 * from anywhere, the rest only with the others parked. */
void srv_shards_worlds(srv_server *s, srv_worlds *out);
/* With the others parked: every such shard's counters added up (the uptime and the drain
 * shard 0's). */
srv_status_counts srv_shards_counts(srv_server *s);

#endif
