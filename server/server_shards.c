/* acceld's shards (server_shards.h): the state they share and what crosses between them.
 * A shard reaches another through atomic counters (each a count for a limit or a placement,
 * never a guard of other memory), messages to its actor, tasks posted to its loop, and its
 * recorded ref, loop and server (written as it starts, before shard 0 hands it anything; its
 * server read by another only while it is parked). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "runtime/alloc.h"
#include "runtime/loop.h"
#include "server/server_shards.h"
#include "server/server_transport.h"

/* A report's worlds (render.h) hold one per shard. */
_Static_assert(SRV_WORLDS_MAX >= SRV_SHARDS_MAX, "srv_worlds must hold every shard's world");

int srv_shards_create(uint32_t n, srv_shards **out) {
  *out = NULL;
  if (n == 0 || n > SRV_SHARDS_MAX)
    return ACCEL_EINVAL;
  srv_shards *sh = rt_calloc(1, sizeof *sh);
  if (sh == NULL)
    return ACCEL_ENOMEM;
  sh->n = n;
  for (uint32_t k = 0; k < SRV_SHARDS_MAX; k++)
    sh->refs[k] = ACCEL_REF_NONE;
  *out = sh;
  return 0;
}

void srv_shards_destroy(srv_shards *sh) {
  rt_free(sh);
}

int srv_shards_attach(srv_server *s) {
  s->shard = s->args->shards ? s->args->shard : 0;
  int rc = 0;
  if (s->args->shards) {
    s->shards = s->args->shards;
    rc = s->shard < s->shards->n && s->shards->servers[s->shard] == NULL ? 0 : ACCEL_EINVAL;
  } else if ((rc = srv_shards_create(1, &s->shards)) == 0) {
    s->shards->own = true;
  }
  if (rc == 0) {
    srv_shards *sh = s->shards;
    sh->servers[s->shard] = s;
    sh->refs[s->shard] = accel_self(s->self);
    sh->loops[s->shard] = rt_loop_index(s->rt);
    sh->worlds[s->shard] = s->world;
  }
  return rc;
}

void srv_shards_detach(srv_server *s) {
  if (s->shards == NULL)
    return;
  if (s->shards->servers[s->shard] == s)
    s->shards->servers[s->shard] = NULL;
  if (s->shards->own)
    srv_shards_destroy(s->shards);
  s->shards = NULL;
}

void srv_shards_publish(srv_server *s) {
  atomic_store_explicit(&s->shards->conns[s->shard], s->nconns, memory_order_relaxed);
}

static uint32_t load(_Atomic uint32_t *v) {
  return atomic_load_explicit(v, memory_order_relaxed);
}

static uint32_t shard_load(srv_shards *sh, uint32_t k) {
  return load(&sh->conns[k]) + load(&sh->handed[k]);
}

uint32_t srv_shards_conns(const srv_server *s) {
  uint32_t n = 0;
  for (uint32_t k = 0; k < s->shards->n; k++)
    n += shard_load(s->shards, k);
  return n;
}

/* ---- a connection handed to another shard ---- */

typedef struct handoff {
  int fd;
  const srv_transport *tp;
  srv_shards *shards;
  uint32_t to;
} handoff;

/* The message never reached the shard (it stopped): the peer hears EBUSY, unserved. */
static void handoff_drop(void *data) {
  handoff *h = data;
  atomic_fetch_sub_explicit(&h->shards->handed[h->to], 1, memory_order_relaxed);
  srv_local_send_busy(h->fd);
  close(h->fd);
  rt_free(h);
}

static uint32_t fewest(srv_shards *sh) {
  uint32_t best = 0, best_load = shard_load(sh, 0);
  for (uint32_t k = 1; k < sh->n; k++) {
    uint32_t v = shard_load(sh, k);
    if (v < best_load)
      best = k, best_load = v;
  }
  return best;
}

bool srv_shards_hand_off(srv_server *s, int fd, const srv_transport *tp) {
  srv_shards *sh = s->shards;
  uint32_t max = s->args->max_connections ? s->args->max_connections : 1024;
  /* Draining, or at max_connections: refused here, at once (a connection past the limit is
   * never handed out, so two being adopted never see each other past it). */
  if (sh->n == 1 || s->draining || srv_shards_conns(s) >= max)
    return false;
  uint32_t to = fewest(sh);
  handoff *h = to == s->shard ? NULL : rt_malloc(sizeof *h);
  if (h == NULL)
    return false;
  *h = (handoff){.fd = fd, .tp = tp, .shards = sh, .to = to};
  atomic_fetch_add_explicit(&sh->handed[to], 1, memory_order_relaxed);
  accel_msg m = {.type = SRV_MSG_ADOPT, .data = h, .drop = handoff_drop};
  if (accel_tell(s->rt, sh->refs[to], &m) == 0)
    return true;
  atomic_fetch_sub_explicit(&sh->handed[to], 1, memory_order_relaxed);
  rt_free(h);
  return false;
}

void srv_shards_adopt(srv_server *s, void *data) {
  handoff *h = data;
  srv_local_adopt(s, h->fd, h->tp, &s->shards->handed[h->to]);
  rt_free(h);
}

/* ---- drain and limits, from shard 0 ---- */

void srv_shards_drain_others(srv_server *s, bool ask) {
  srv_shards *sh = s->shards;
  for (uint32_t k = 0; k < sh->n; k++) {
    if (k == s->shard || s->peer_drains[k] != NULL)
      continue;
    accel_msg m = {.type = SRV_MSG_DRAIN};
    if (!ask) { /* draining, nobody waiting for its end */
      if (accel_tell(s->rt, sh->refs[k], &m) != 0)
        accel_log(ACCEL_LOG_ERROR, "server", "shard %u cannot be told to drain", k);
      continue;
    }
    if (accel_ask(s->rt, sh->refs[k], &m, &s->peer_drains[k]) != 0) {
      accel_log(ACCEL_LOG_ERROR, "server", "shard %u cannot be asked to drain", k);
      s->peer_drains[k] = NULL;
      s->peer_drain_failed = true;
    }
  }
}

bool srv_shards_drained(srv_server *s, int *status) {
  *status = s->peer_drain_failed ? ACCEL_ECLOSED : 0;
  for (uint32_t k = 0; k < s->shards->n; k++) {
    if (s->peer_drains[k] == NULL)
      continue;
    int rc = accel_future_poll(s->peer_drains[k]);
    if (rc == ACCEL_EAGAIN)
      return false;
    if (*status == 0)
      *status = rc;
  }
  return true;
}

void srv_shards_drain_forget(srv_server *s) {
  for (uint32_t k = 0; k < SRV_SHARDS_MAX; k++)
    if (s->peer_drains[k] != NULL) {
      accel_future_release(s->peer_drains[k]);
      s->peer_drains[k] = NULL;
    }
  s->peer_drain_failed = false;
}

void srv_shards_limits_others(srv_server *s, const proto_limits *l) {
  for (uint32_t k = 0; k < s->shards->n; k++) {
    proto_limits *copy = k == s->shard ? NULL : rt_malloc(sizeof *copy);
    if (copy == NULL)
      continue;
    *copy = *l;
    accel_msg m = {.type = SRV_MSG_LIMITS, .data = copy, .drop = rt_free};
    if (accel_tell(s->rt, s->shards->refs[k], &m) != 0) {
      accel_log(ACCEL_LOG_ERROR, "server", "shard %u: new limits not applied", k);
      rt_free(copy);
    }
  }
}

/* Adds len to *v if the sum stays within max: never over it, not even for a moment (a
 * failed take must not make another shard's fail, and has nothing to give back). */
static bool take_within(_Atomic uint64_t *v, uint64_t len, uint64_t max) {
  uint64_t now = atomic_load(v);
  do {
    if (now > max || len > max - now)
      return false;
  } while (!atomic_compare_exchange_weak(v, &now, now + len));
  return true;
}

/* ---- clients' shared memory, all shards together ---- */

bool srv_shards_shared_reserve(srv_server *s, uint64_t len, uint64_t all) {
  return take_within(&s->shards->shared_bytes, len, all);
}

void srv_shards_shared_release(srv_server *s, uint64_t len) {
  atomic_fetch_sub_explicit(&s->shards->shared_bytes, len, memory_order_relaxed);
}

/* ---- large local frames being received, all shards together ---- */

bool srv_shards_partial_take(srv_server *s, uint64_t len) {
  return take_within(&s->shards->partial_held, len, s->partial_max);
}

void srv_shards_post(srv_server *s, uint32_t shard, accel_task *task, void (*fn)(accel_task *)) {
  accel_post_to(s->rt, s->shards->loops[shard], task, fn);
}

/* On shard k's loop: its waiting connections look again (its server may have gone). */
static void on_room(accel_task *task) {
  struct srv_shard_task *t = (struct srv_shard_task *)task;
  srv_shards *sh = t->shards;
  uint32_t k = t->shard; /* read before the flag lets another post (and fill) it again */
  atomic_store(&sh->partial_told[k], false);
  srv_server *s = sh->servers[k];
  if (s != NULL)
    srv_local_partial_wake(s);
}

void srv_shards_partial_give(srv_server *s, uint64_t len) {
  srv_shards *sh = s->shards;
  if (len == 0)
    return;
  atomic_fetch_sub(&sh->partial_held, len);
  for (uint32_t k = 0; k < sh->n; k++) {
    if (k == s->shard || !atomic_load(&sh->partial_waiting[k]) ||
        atomic_exchange(&sh->partial_told[k], true))
      continue;
    sh->wake[k] = (struct srv_shard_task){.shards = sh, .shard = k};
    srv_shards_post(s, k, &sh->wake[k].task, on_room);
  }
}

void srv_shards_partial_waiting(srv_server *s, bool waiting) {
  atomic_store(&s->shards->partial_waiting[s->shard], waiting);
}

/* ---- parking the other shards for a report ---- */

struct srv_park {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint32_t parked, refs; /* refs: shard 0's, and each park message's until handled */
  bool released;
};

#define PARK_TIMEOUT_S 2

static void park_put(srv_park *p) {
  pthread_mutex_lock(&p->mu);
  bool last = --p->refs == 0;
  pthread_mutex_unlock(&p->mu);
  if (!last)
    return;
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  rt_free(p);
}

static void park_drop(void *data) {
  park_put(data);
}

/* The shard's loop waits here until shard 0 has read what it needed: the lock taken after
 * this loop's last write and before shard 0's reads (and the reverse on resuming) orders
 * them, so no state is read while it changes. */
void srv_shards_parked(void *data) {
  srv_park *p = data;
  pthread_mutex_lock(&p->mu);
  if (!p->released) {
    p->parked++;
    pthread_cond_broadcast(&p->cv);
    while (!p->released)
      pthread_cond_wait(&p->cv, &p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  park_put(p);
}

/* Tells every other shard to park; how many were told (a shard stopped: *rc ECLOSED). */
static uint32_t park_tell(srv_server *s, srv_park *p, int *rc) {
  uint32_t told = 0;
  for (uint32_t k = 0; k < s->shards->n; k++) {
    if (k == s->shard)
      continue;
    pthread_mutex_lock(&p->mu);
    p->refs++;
    pthread_mutex_unlock(&p->mu);
    accel_msg m = {.type = SRV_MSG_PARK, .data = p, .drop = park_drop};
    int t = accel_tell(s->rt, s->shards->refs[k], &m);
    if (t == 0) {
      told++;
      continue;
    }
    park_put(p);
    *rc = t; /* the report is given up: the others told are resumed at once */
    break;
  }
  return told;
}

int srv_shards_park_others(srv_server *s, srv_park **park) {
  *park = NULL;
  if (s->shards->n == 1)
    return 0;
  srv_park *p = rt_calloc(1, sizeof *p);
  if (p == NULL)
    return ACCEL_ENOMEM;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* a clock set back changes no deadline */
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  p->refs = 1;
  *park = p;
  int rc = 0;
  uint32_t told = park_tell(s, p, &rc);
  if (rc != 0) { /* a shard has stopped, or its mailbox is full: no report, none kept waiting */
    accel_log(ACCEL_LOG_WARN, "server", "report: a shard cannot be paused: %s", accel_strerror(rc));
    return rc;
  }
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += PARK_TIMEOUT_S;
  pthread_mutex_lock(&p->mu);
  int w = 0;
  while (p->parked < told && w != ETIMEDOUT)
    w = pthread_cond_timedwait(&p->cv, &p->mu, &until);
  uint32_t parked = p->parked;
  pthread_mutex_unlock(&p->mu);
  if (parked < told) {
    rc = ACCEL_ETIMEDOUT;
    accel_log(ACCEL_LOG_WARN, "server", "report: %u of %u shards paused within %d s", parked, told,
              PARK_TIMEOUT_S);
  }
  return rc;
}

void srv_shards_resume_others(srv_park *p) {
  if (p == NULL)
    return;
  pthread_mutex_lock(&p->mu);
  p->released = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  park_put(p);
}

/* Whether world o has w's devices, in the same order (each shard opens the same list; one
 * that could not is left out of the sums rather than mixed up with another device's). */
static bool same_devices(const dev_world *w, const dev_world *o) {
  if (o->nnodes != w->nnodes)
    return false;
  for (int n = 1; n < w->nnodes; n++)
    if (o->nodes[n].be != w->nodes[n].be || o->nodes[n].backend_index != w->nodes[n].backend_index)
      return false;
  return true;
}

/* Whether a report of s adds shard k's world (and, while its server lives, its counters). */
static bool counted(srv_server *s, uint32_t k) {
  const dev_world *w = s->shards->worlds[k];
  return k != s->shard && w != NULL && same_devices(s->world, w);
}

void srv_shards_worlds(srv_server *s, srv_worlds *out) {
  out->n = 0;
  out->w[out->n++] = s->world; /* this shard's first: shard 0's gives the devices */
  for (uint32_t k = 0; k < s->shards->n; k++)
    if (counted(s, k))
      out->w[out->n++] = s->shards->worlds[k];
}

srv_status_counts srv_shards_counts(srv_server *s) {
  srv_status_counts all = srv_counts(s);
  for (uint32_t k = 0; k < s->shards->n; k++) {
    const srv_server *o = counted(s, k) ? s->shards->servers[k] : NULL;
    if (o == NULL)
      continue;
    srv_status_counts c = srv_counts((srv_server *)o);
    all.connections += c.connections;
    all.sessions += c.sessions;
    all.ops_completed += c.ops_completed;
    all.ops_failed += c.ops_failed;
    all.ops_in_flight += c.ops_in_flight;
    all.replies_early += c.replies_early;
    all.light_clients += c.light_clients;
    all.frames_bad += c.frames_bad;
  }
  return all;
}
