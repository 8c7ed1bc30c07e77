/* The shared-memory data plane, client side (the daemon's: server/server_shm.c). Over the
 * local link a WRITE or READ of at least REMOTE_SHM_MIN bytes does not carry its data in the
 * socket: the op names a region of memory both processes map and an offset in it.
 *   - Memory from accel_host_alloc() is such a region already: nothing is copied here.
 *   - Other memory goes through a staging region (one copy here, as the socket would make),
 *     taken from a pool that keeps regions for reuse (at most REMOTE_SHM_STAGING_MAX bytes;
 *     past it ops carry their data inline, in chunks).
 * A region is a memfd sealed against shrinking (the daemon refuses others: shrinking memory it
 * has mapped would crash it), passed with PROTO_CTL_SHM_ATTACH. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "actors/world.h"
#include "clients/remote.h"
#include "runtime/alloc.h"

#define REMOTE_SHM_MIN (64u << 10)
#define REMOTE_SHM_STAGING_MAX (1ull << 30)
#define REMOTE_SHM_ROUND (2u << 20)

struct shm_region {
  struct shm_region *next;
  uint64_t id;
  uint8_t *base;
  size_t len;
  bool staging, busy;
};

/* A new region of `len` bytes, mapped here and attached in the daemon (waits for it). */
static int region_create(accel_ctx *ctx, size_t len, bool staging, shm_region **out) {
  remote *r = remote_of(ctx);
  int fd = memfd_create("accel-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return ACCEL_ENOTSUP;
  shm_region *g = rt_calloc(1, sizeof *g);
  int rc = g == NULL ? ACCEL_ENOMEM : 0;
  if (rc == 0 &&
      (ftruncate(fd, (off_t)len) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0))
    rc = ACCEL_ENOMEM;
  if (rc == 0 &&
      (g->base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
    rc = ACCEL_ENOMEM;
  if (rc == 0) {
    g->len = len;
    g->staging = staging;
    g->id = atomic_fetch_add(&r->next_region, 1) + 1;
    rc = remote_control(ctx, PROTO_CTL_SHM_ATTACH, g->id, fd, NULL, NULL);
    if (rc != 0)
      munmap(g->base, len);
  }
  close(fd);
  if (rc != 0) {
    rt_free(g);
    return rc;
  }
  pthread_mutex_lock(&r->shm_mu);
  g->next = r->regions;
  r->regions = g;
  g->busy = staging;
  r->staging_bytes += staging ? len : 0;
  pthread_mutex_unlock(&r->shm_mu);
  *out = g;
  return 0;
}

/* The user's region holding [p, p + len), under shm_mu. */
static shm_region *user_region(remote *r, const uint8_t *p, size_t len) {
  for (shm_region *g = r->regions; g; g = g->next)
    if (!g->staging && p >= g->base && len <= g->len && (size_t)(p - g->base) <= g->len - len)
      return g;
  return NULL;
}

/* A free staging region of at least len bytes, marked busy; NULL if none. */
static shm_region *take_staging(remote *r, size_t len) {
  for (shm_region *g = r->regions; g; g = g->next)
    if (g->staging && !g->busy && g->len >= len) {
      g->busy = true;
      return g;
    }
  return NULL;
}

static shm_region *staging_for(accel_ctx *ctx, size_t len) {
  remote *r = remote_of(ctx);
  pthread_mutex_lock(&r->shm_mu);
  shm_region *g = take_staging(r, len);
  bool room = r->staging_bytes + len <= REMOTE_SHM_STAGING_MAX;
  pthread_mutex_unlock(&r->shm_mu);
  if (g != NULL || !room)
    return g;
  size_t size = (len + REMOTE_SHM_ROUND - 1) / REMOTE_SHM_ROUND * REMOTE_SHM_ROUND;
  return region_create(ctx, size, true, &g) == 0 ? g : NULL;
}

int remote_shm_prepare(accel_ctx *ctx, dev_op *op, proto_shm_ref *ref, shm_region **staging) {
  remote *r = remote_of(ctx);
  bool write = op->h.kind == DEV_OP_WRITE;
  if (!r->link->shm || (!write && op->h.kind != DEV_OP_READ))
    return 0;
  size_t len = write ? op->u.write.bytes : op->u.read.bytes;
  uint8_t *p = write ? (uint8_t *)op->u.write.src : op->u.read.dst;
  if (len < REMOTE_SHM_MIN)
    return 0;
  pthread_mutex_lock(&r->shm_mu);
  shm_region *g = user_region(r, p, len);
  pthread_mutex_unlock(&r->shm_mu);
  *staging = NULL;
  if (g == NULL && (g = *staging = staging_for(ctx, len)) == NULL)
    return 0; /* no shared memory to be had: inline */
  if (g->staging && write)
    memcpy(g->base, p, len);
  *ref = (proto_shm_ref){g->id, g->staging ? 0 : (uint64_t)(p - g->base)};
  return 1;
}

void remote_shm_complete(remote *r, dev_op *op, shm_region *staging, int status) {
  if (staging == NULL)
    return;
  if (status == 0 && op->h.kind == DEV_OP_READ)
    memcpy(op->u.read.dst, staging->base, op->u.read.bytes);
  pthread_mutex_lock(&r->shm_mu);
  staging->busy = false;
  pthread_mutex_unlock(&r->shm_mu);
}

int remote_host_alloc(accel_ctx *ctx, size_t bytes, void **out) {
  remote *r = remote_of(ctx);
  shm_region *g;
  if (!r->link->shm)
    return client_host_alloc_plain(bytes, out);
  int rc = region_create(ctx, bytes ? bytes : 1, false, &g);
  if (rc == 0)
    *out = g->base;
  return rc;
}

int remote_host_free(accel_ctx *ctx, void *p) {
  remote *r = remote_of(ctx);
  if (!r->link->shm) {
    rt_free(p);
    return 0;
  }
  pthread_mutex_lock(&r->shm_mu);
  shm_region **pp = &r->regions;
  while (*pp && ((*pp)->staging || (*pp)->base != p))
    pp = &(*pp)->next;
  shm_region *g = *pp;
  if (g)
    *pp = g->next;
  pthread_mutex_unlock(&r->shm_mu);
  if (g == NULL)
    return ACCEL_EINVAL;
  /* Ops using it have finished (the caller's contract): the daemon unmaps it at once. */
  if (remote_control(ctx, PROTO_CTL_SHM_DETACH, g->id, -1, NULL, NULL) != 0) {
    /* The link is down: the daemon unmaps a connection's regions when it ends, so our
     * mapping is all that is left to undo. */
  }
  munmap(g->base, g->len);
  rt_free(g);
  return 0;
}

void remote_shm_free_all(remote *r) {
  while (r->regions) {
    shm_region *g = r->regions;
    r->regions = g->next;
    munmap(g->base, g->len);
    rt_free(g);
  }
}
