/* The server's connection table: pipe id -> srv_conn, chained hashing; and the end of a
 * connection. A connection is made on its pipe's first frame, not when nng adds the pipe:
 * then a frame always finds its record on the loop without a race against nng's threads.
 * nng reports a removed pipe from its own thread (server_io.c); a frame of that pipe may still
 * sit in the receive queue, so removed pipes with no record are remembered (tombstones) and
 * a frame's pipe is checked to be open before a record is made for it. */
#include <stdlib.h>

#include "runtime/alloc.h"
#include "server/server_shards.h"
#include "server/server_transport.h"

static uint32_t bucket_of(const srv_server *s, uint32_t pipe) {
  return (pipe * 2654435761u) & (s->nbuckets - 1);
}

int srv_conns_init(srv_server *s) {
  s->nbuckets = 64;
  s->buckets = rt_calloc(s->nbuckets, sizeof *s->buckets);
  return s->buckets ? 0 : ACCEL_ENOMEM;
}

srv_conn *srv_conn_find(srv_server *s, uint32_t pipe) {
  for (srv_conn *c = s->buckets[bucket_of(s, pipe)]; c; c = c->hnext)
    if (c->pipe == pipe)
      return c;
  return NULL;
}

/* Doubles the table when it is as full as it is long (a failed grow keeps the old one). */
static void maybe_grow(srv_server *s) {
  if (s->nconns < s->nbuckets || s->nbuckets >= (1u << 24))
    return;
  uint32_t old_n = s->nbuckets;
  srv_conn **old = s->buckets, **fresh = rt_calloc(old_n * 2, sizeof *fresh);
  if (fresh == NULL)
    return;
  s->buckets = fresh;
  s->nbuckets = old_n * 2;
  for (uint32_t b = 0; b < old_n; b++)
    for (srv_conn *c = old[b], *next; c; c = next) {
      next = c->hnext;
      uint32_t at = bucket_of(s, c->pipe);
      c->hnext = s->buckets[at];
      s->buckets[at] = c;
    }
  rt_free(old);
}

static bool tombstoned(const srv_server *s, uint32_t pipe) {
  for (uint32_t i = 0; i < SRV_TOMBSTONES; i++)
    if (s->tombs[i] == pipe)
      return true;
  return false;
}

/* A pipe that nng still knows answers a query about its remote address. */
static bool pipe_open(nng_pipe np) {
  nng_sockaddr sa;
  return nng_pipe_get_addr(np, NNG_OPT_REMADDR, &sa) == 0;
}

srv_conn *srv_conn_new(srv_server *s, uint32_t id, const srv_transport *tp) {
  srv_conn *c = rt_calloc(1, sizeof *c);
  if (c == NULL)
    return NULL;
  c->pipe = id;
  c->tp = tp;
  c->session = ACCEL_REF_NONE;
  c->peer_uid = c->peer_gid = UINT32_MAX;
  c->peer_pid = -1;
  c->connected_ms = srv_now_ms(s);
  uint32_t at = bucket_of(s, id);
  c->hnext = s->buckets[at];
  s->buckets[at] = c;
  s->nconns++;
  srv_shards_publish(s);
  maybe_grow(s);
  return c;
}

srv_conn *srv_conn_for(srv_server *s, nng_pipe np) {
  uint32_t pipe = (uint32_t)nng_pipe_id(np);
  srv_conn *c = srv_conn_find(s, pipe);
  if (c != NULL || pipe == 0 || tombstoned(s, pipe) || !pipe_open(np))
    return c;
  c = srv_conn_new(s, pipe, &srv_transport_nng);
  if (c == NULL)
    return NULL;
  c->np = np;
  accel_log(ACCEL_LOG_DEBUG, "server", "pipe %u: first frame", pipe);
  return c;
}

static void unlink_conn(srv_server *s, srv_conn *c) {
  srv_conn **pp = &s->buckets[bucket_of(s, c->pipe)];
  while (*pp != c)
    pp = &(*pp)->hnext;
  *pp = c->hnext;
  s->nconns--;
  srv_shards_publish(s);
}

/* A client waiting for the reply to its only op (ops answered early aside), which has not had more
 * in flight since it last had none (a pipelining client draining its last ops is not one); its
 * background jobs aside; a closed connection waits for nothing. */
static bool light(const srv_conn *c) {
  return !c->dead && srv_conn_own_ops(c) == 1 && c->ops_peak <= 1;
}

void srv_conn_ops_add(srv_server *s, srv_conn *c, int delta, bool job) {
  s->light_conns -= light(c);
  if (delta > 0) {
    c->ops++;
    c->jobs += job;
  } else {
    c->ops--;
    c->jobs -= job;
  }
  /* An op whose reply left early (server_ops.c) no longer counts: its client may have sent
   * the next before the loop finished it. Read once, so that light() is the same each time. */
  c->early_seen = atomic_load(&c->answered_early);
  uint32_t own = srv_conn_own_ops(c);
  c->ops_peak = own == 0 ? 0 : own > c->ops_peak ? own : c->ops_peak;
  s->light_conns += light(c);
}

/* Frees a dead connection once nothing points at it any more. */
void srv_conn_maybe_free(srv_server *s, srv_conn *c) {
  if (!c->dead || c->session_live || c->ops > 0 || c->dirty)
    return;
  srv_out_free(s, c);
  srv_shm_free_all(s, c);
  srv_conn **pp = &s->dead;
  while (*pp && *pp != c)
    pp = &(*pp)->hnext;
  if (*pp)
    *pp = c->hnext;
  rt_free(c);
}

/* The pipe went away (nng said so). */
void srv_conn_gone(srv_server *s, uint32_t pipe) {
  srv_conn *c = srv_conn_find(s, pipe);
  if (c == NULL) {
    s->tombs[s->tomb_next++ % SRV_TOMBSTONES] = pipe;
    return;
  }
  accel_log(ACCEL_LOG_DEBUG, "server", "pipe %u: closed", pipe);
  srv_conn_end(s, c);
}

/* Its session stops (the session's stop frees its buffers), and the record goes once the
 * session has exited and its last op is done. */
void srv_conn_end(srv_server *s, srv_conn *c) {
  unlink_conn(s, c);
  s->light_conns -= light(c);
  c->dead = true;
  c->hnext = s->dead;
  s->dead = c;
  srv_out_free(s, c); /* its replies have nowhere to go */
  /* ACCEL_ECLOSED: the runtime is shutting down and the session still runs: it stops with
   * the tree, before the server, whose stop frees this record (srv_conns_free_all); freed now,
   * the session's stop would read its arguments from freed memory. */
  if (c->session_live && accel_stop(s->rt, c->session) == ACCEL_ESTALE) {
    c->session_live = false; /* already gone: nothing will report its exit */
    s->sessions--;
  }
  srv_conn_maybe_free(s, c);
}

static srv_conn *find_by_session(srv_conn *list, accel_ref ref) {
  for (srv_conn *c = list; c; c = c->hnext)
    if (c->session_live && c->session.slot == ref.slot && c->session.gen == ref.gen)
      return c;
  return NULL;
}

void srv_conn_session_exited(srv_server *s, accel_ref session) {
  srv_conn *c = find_by_session(s->dead, session);
  for (uint32_t b = 0; c == NULL && b < s->nbuckets; b++)
    c = find_by_session(s->buckets[b], session);
  if (c == NULL)
    return;
  c->session_live = false;
  c->session = ACCEL_REF_NONE; /* a live pipe whose session failed for good: HELLO again */
  s->sessions--;
  srv_conn_maybe_free(s, c);
}

void srv_conns_close_all(srv_server *s) {
  for (uint32_t b = 0; s->buckets && b < s->nbuckets; b++)
    for (srv_conn *c = s->buckets[b]; c; c = c->hnext)
      c->tp->close(s, c);
}

/* The actor ended: its sessions have stopped already (children stop first). */
void srv_conns_free_all(srv_server *s) {
  for (uint32_t b = 0; s->buckets && b < s->nbuckets; b++)
    while (s->buckets[b]) {
      srv_conn *c = s->buckets[b];
      unlink_conn(s, c);
      c->dead = true;
      c->hnext = s->dead;
      s->dead = c;
    }
  for (srv_conn *c = s->dead, *next; c; c = next) {
    next = c->hnext;
    c->session_live = false;
    srv_conn_maybe_free(s, c);
  }
}
