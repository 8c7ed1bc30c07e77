/* The shared-memory data plane, daemon side: regions of a local client's memory mapped here
 * (docs/PROTOCOL.md, "Shared memory"). A client creates a memfd, seals it against shrinking,
 * maps it and passes the descriptor over its Unix socket with PROTO_CTL_SHM_ATTACH; the
 * daemon maps it too. A WRITE or READ with PROTO_OPF_SHM then names (region, offset) instead
 * of carrying bytes: the daemon copies straight between the region and the buffer's replica,
 * and no data crosses the socket.
 *
 * Why the seal: a region the client could shrink after the daemon mapped it would make the
 * daemon's next access to it a SIGBUS. Only sealed regular files are taken. A region is the
 * connection's: detached on request once no op uses it, and at the latest when the
 * connection's record goes. Loop thread only. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/server_priv.h"

#define SRV_SHM_MAX_REGIONS 1024u
#define SRV_SHM_MAX_BYTES (1ull << 40) /* one region's size: 1 TiB */

struct srv_region {
  struct srv_region *next;
  uint64_t id;
  uint8_t *base;
  size_t len;
  uint32_t refs;  /* ops using it */
  bool detached;  /* unmapped once refs reaches 0 */
};

static srv_region *find(srv_conn *c, uint64_t id) {
  for (srv_region *r = c->regions; r; r = r->next)
    if (r->id == id && !r->detached)
      return r;
  return NULL;
}

static void unlink_region(srv_conn *c, srv_region *r) {
  srv_region **pp = &c->regions;
  while (*pp != r)
    pp = &(*pp)->next;
  *pp = r->next;
  c->nregions--;
  munmap(r->base, r->len);
  free(r);
}

/* A descriptor we may map: a sealed (no shrinking) regular file of a sane size. */
static int check_fd(int fd, size_t *len) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
      (uint64_t)st.st_size > SRV_SHM_MAX_BYTES)
    return ACCEL_EINVAL;
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK))
    return ACCEL_EPERM; /* it could shrink under us: SIGBUS */
  *len = (size_t)st.st_size;
  return 0;
}

static int map_region(srv_conn *c, uint64_t id, int fd) {
  size_t len;
  int rc = check_fd(fd, &len);
  if (rc != 0)
    return rc;
  srv_region *r = calloc(1, sizeof *r);
  if (r == NULL)
    return ACCEL_ENOMEM;
  r->base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (r->base == MAP_FAILED) {
    free(r);
    return ACCEL_ENOMEM;
  }
  r->id = id;
  r->len = len;
  r->next = c->regions;
  c->regions = r;
  c->nregions++;
  return 0;
}

int srv_shm_attach(srv_server *s, srv_conn *c, uint64_t id) {
  if (c->link == NULL)
    return ACCEL_ENOTSUP; /* nng cannot pass descriptors */
  int fd = srv_local_take_fd(c);
  if (fd < 0)
    return ACCEL_EPROTO; /* the frame came without its descriptor */
  int rc = id == 0 || find(c, id)                  ? ACCEL_EINVAL
           : c->nregions >= SRV_SHM_MAX_REGIONS   ? ACCEL_ELIMIT
                                                   : map_region(c, id, fd);
  close(fd);
  if (rc != 0)
    accel_log(ACCEL_LOG_INFO, "server", "local %u: shared region %llu refused: %s", c->pipe,
              (unsigned long long)id, accel_err_name(rc));
  return rc;
}

int srv_shm_detach(srv_conn *c, uint64_t id) {
  srv_region *r = find(c, id);
  if (r == NULL)
    return ACCEL_EINVAL;
  r->detached = true;
  if (r->refs == 0)
    unlink_region(c, r);
  return 0;
}

int srv_shm_resolve(srv_conn *c, proto_shm_ref ref, uint64_t bytes, uint8_t **p,
                    srv_region **out) {
  srv_region *r = find(c, ref.region);
  if (r == NULL)
    return ACCEL_ESTALE;
  if (ref.offset > r->len || bytes > r->len - ref.offset)
    return ACCEL_EINVAL;
  r->refs++;
  *p = r->base + ref.offset;
  *out = r;
  return 0;
}

void srv_shm_release(srv_conn *c, srv_region *r) {
  if (--r->refs == 0 && r->detached)
    unlink_region(c, r);
}

void srv_shm_free_all(srv_conn *c) {
  while (c->regions)
    unlink_region(c, c->regions);
}
