/* The shared-memory data plane, daemon side: regions of a local client's memory mapped here
 * (docs/PROTOCOL.md, "Shared memory"). A client creates a memfd, seals it against shrinking,
 * maps it and passes the descriptor over its Unix socket with PROTO_CTL_SHM_ATTACH; the
 * daemon maps it too. A WRITE or READ with PROTO_OPF_SHM then names (region, offset) instead
 * of carrying bytes: the daemon copies straight between the region and the buffer's replica,
 * and no data crosses the socket.
 *
 * Why the seal: a region the client could shrink after the daemon mapped it would make the
 * daemon's next access to it a SIGBUS. Only sealed memfds (files on the kernel's shmem) are
 * taken. A region is the connection's: detached on request once no op uses it, and at the
 * latest when the connection's record goes. What a client can make the daemon map is capped
 * per connection and in all (srv_args.max_shared_bytes*): mapped memory costs address space,
 * and pages the daemon touches first (a READ into a sparse region) are charged to it.
 * Loop thread only. */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "runtime/alloc.h"
#include "server/server_shards.h"
#include "server/server_transport.h"

#define SRV_SHM_MAX_REGIONS 1024u
#define SRV_SHM_MAX_BYTES (1ull << 40) /* one region's size: 1 TiB */

struct srv_region {
  struct srv_region *next;
  uint64_t id;
  uint8_t *base;
  size_t len;
  uint32_t refs; /* ops using it, and a registration in progress */
  bool detached; /* unmapped once refs reaches 0 */
  /* Registered for DMA with this device's incarnation (CUDA: page-locked), so copies between
   * the region and that device's memory run at pinned speed; done on a worker, after the
   * attach. A device that closed (a restart, the daemon stopping) took it along. */
  dev_node *dma_node;
  uint32_t dma_gen;
  bool dma;
};

/* ---- registration for DMA (a worker thread: it touches every page) ---- */

typedef struct dma_job {
  srv_server *s;
  srv_conn *c;    /* counted in c->ops meanwhile: the record stays */
  srv_region *r;  /* held (refs) meanwhile */
  dev_node *node; /* its device, taken (dev_node_enter) while the worker uses it */
  uint32_t gen;
  void *base;
  size_t len;
  int fd; /* the region's memfd (a copy), for backends that map it elsewhere; else -1 */
  int rc;
} dma_job;

/* ACCEL_TEST_SHM_REGISTER_DELAY_US makes each registration take that long (a registration is
 * quick on a test machine: they never pile up otherwise). A worker thread. */
static void register_delay(void) {
  static _Atomic long delay_us = -1;
  srv_failpoint_sleep("ACCEL_TEST_SHM_REGISTER_DELAY_US", &delay_us, 100000);
}

static int dma_register_work(void *arg) {
  dma_job *j = arg;
  register_delay();
  dev_node *n = j->node;
  j->rc = ACCEL_EDEVLOST; /* the incarnation closed meanwhile */
  if (dev_node_enter(n, j->gen)) {
    j->rc = j->fd >= 0 ? n->be->host_register_shared(n->dev, j->base, j->len, j->fd)
                       : n->be->host_register(n->dev, j->base, j->len);
    dev_node_leave(n);
  }
  if (j->fd >= 0)
    close(j->fd);
  j->fd = -1;
  return j->rc;
}

/* A job never submitted: its descriptor goes with it. */
static void dma_job_free(void *arg) {
  dma_job *j = arg;
  if (j->fd >= 0)
    close(j->fd);
  rt_free(j);
}

/* Unregisters, then unmaps. While the incarnation that registered it serves, with its device;
 * once it is gone, with none (backend.h: an unregister must not need the device): CUDA's
 * context took the registration along, a worker backend still forgets the region by its
 * address and has its worker unmap it. */
static void unregister_unmap(dev_node *n, uint32_t gen, void *base, size_t len) {
  if (n != NULL && dev_node_enter(n, gen)) {
    n->be->host_unregister(n->dev, base);
    dev_node_leave(n);
  } else if (n != NULL) {
    n->be->host_unregister(NULL, base);
  }
  munmap(base, len);
}

static int dma_release_work(void *arg) {
  dma_job *j = arg;
  unregister_unmap(j->node, j->gen, j->base, j->len);
  return 0;
}

/* Unregisters (if it was) and unmaps, on a worker when the server still runs. */
static void dma_release_drop(void *arg) {
  dma_release_work(arg);
  rt_free(arg);
}

static void unmap_region(srv_server *s, srv_region *r) {
  dma_job *j = r->dma ? rt_calloc(1, sizeof *j) : NULL;
  if (j == NULL) {
    unregister_unmap(r->dma ? r->dma_node : NULL, r->dma_gen, r->base, r->len);
    return;
  }
  *j = (dma_job){
      .s = s, .node = r->dma_node, .gen = r->dma_gen, .base = r->base, .len = r->len, .fd = -1};
  if (s->self == NULL ||
      accel_work_submit(s->self, dma_release_work, j, dma_release_drop, SRV_MSG_SHM_UNMAPPED) != 0)
    dma_release_drop(j);
}

static srv_region *find(srv_conn *c, uint64_t id) {
  for (srv_region *r = c->regions; r; r = r->next)
    if (r->id == id && !r->detached)
      return r;
  return NULL;
}

static void unlink_region(srv_server *s, srv_conn *c, srv_region *r) {
  srv_region **pp = &c->regions;
  while (*pp != r)
    pp = &(*pp)->next;
  *pp = r->next;
  c->nregions--;
  c->shared_bytes -= r->len;
  s->shared_bytes -= r->len;
  srv_shards_shared_release(s, r->len);
  unmap_region(s, r);
  rt_free(r);
}

/* The first serving device whose backend registers host memory (the registration is
 * portable: it serves every device of that backend, or of its worker process). */
static dev_node *dma_node(srv_server *s) {
  for (int i = 1; i < s->world->nnodes; i++) {
    dev_node *n = &s->world->nodes[i];
    if ((n->be->host_register || n->be->host_register_shared) && n->dev &&
        n->state == DEV_NODE_SERVING)
      return n;
  }
  return NULL;
}

/* fd: the region's memfd, shared with a device worker where the backend takes it. */
/* A registration's end on the loop, its outcome heard or not: the region, the connection's
 * count and the server's reference go back (else the server, holding them, never ends). */
static void registration_end(dma_job *j) {
  srv_server *s = j->s;
  srv_shm_release(s, j->c, j->r);
  srv_conn_ops_add(s, j->c, -1, true);
  j->c->tp->flow(s, j->c); /* counted among its ops: its reading may resume */
  srv_conn_maybe_free(s, j->c);
  dma_job_free(j);
  srv_release(s);
}

/* The server's actor ended before the outcome came (the daemon stops): on the loop. */
static void registration_dropped(void *arg) {
  registration_end(arg);
}

static void dma_register(srv_server *s, srv_conn *c, srv_region *r, int fd) {
  dev_node *n = s->self ? dma_node(s) : NULL;
  dma_job *j = n ? rt_calloc(1, sizeof *j) : NULL;
  if (j == NULL)
    return; /* no such device (or no memory): copies take the pageable path */
  *j = (dma_job){.s = s,
                 .c = c,
                 .r = r,
                 .node = n,
                 .gen = n->generation,
                 .base = r->base,
                 .len = r->len,
                 .fd = n->be->host_register_shared ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1};
  if (n->be->host_register_shared && j->fd < 0) {
    rt_free(j);
    return;
  }
  if (accel_work_submit(s->self, dma_register_work, j, registration_dropped,
                        SRV_MSG_SHM_REGISTERED) != 0) {
    dma_job_free(j);
    return;
  }
  r->refs++;
  srv_conn_ops_add(s, c, +1, true);
  s->refs++;
}

/* On the loop, the registration's outcome (message SRV_MSG_SHM_REGISTERED). */
void srv_shm_registered(srv_server *s, void *data) {
  dma_job *j = data;
  srv_region *r = j->r;
  if (j->rc == 0) {
    r->dma = true;
    r->dma_node = j->node;
    r->dma_gen = j->gen;
  } else {
    accel_log(ACCEL_LOG_INFO, "server", "local %u: region %llu not registered for DMA: %s",
              j->c->pipe, (unsigned long long)r->id, accel_err_name(j->rc));
  }
  registration_end(j);
}

/* A failpoint for the race test: ACCEL_TEST_SHM_CHECK_GAP_US widens the gap between the two
 * reads of srv_shm_check_fd (a window of a microsecond otherwise, which a test on a loaded 2-core
 * machine cannot hit in bounded time). Read once; loop thread only. */
static void check_gap(void) {
  static _Atomic long gap_us = -1;
  srv_failpoint_sleep("ACCEL_TEST_SHM_CHECK_GAP_US", &gap_us, 100000);
}

/* A descriptor we may map: a memfd sealed against shrinking, of a sane size. The seals are
 * read BEFORE the size: once F_SEAL_SHRINK is set the size can only grow, so the size read
 * after it is safe to map. Read the other way round, a client that shrinks its file to 0 and
 * then seals it between the two reads passed both, and the daemon's next access to the region
 * died of SIGBUS. Files on other file systems are refused: a hugetlbfs memfd can be sealed
 * too, and its pages can run out when they are touched. */
int srv_shm_check_fd(int fd, size_t *len) {
  int seals = fcntl(fd, F_GET_SEALS);
  check_gap();
  struct stat st;
  struct statfs fs;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return ACCEL_EINVAL;
  if (seals < 0 || !(seals & F_SEAL_SHRINK))
    return ACCEL_EPERM; /* it could shrink under us: SIGBUS */
  if (st.st_size <= 0 || (uint64_t)st.st_size > SRV_SHM_MAX_BYTES || fstatfs(fd, &fs) != 0 ||
      fs.f_type != TMPFS_MAGIC)
    return ACCEL_EINVAL;
  *len = (size_t)st.st_size;
  return 0;
}

/* Whether `len` more bytes fit the connection's cap and the daemon's (every shard's): if
 * they do, they are counted in the daemon's (srv_shards_shared_release gives them back). */
static bool within_caps(srv_server *s, const srv_conn *c, size_t len) {
  uint64_t one = s->args->max_shared_bytes, all = s->args->max_shared_bytes_total;
  if (one == 0 || all == 0) {
    uint64_t ram = srv_ram_bytes();
    ram = ram ? ram : SRV_SHM_MAX_BYTES; /* unknown: 1 TiB */
    one = one ? one : ram;
    all = all ? all : 2 * ram;
  }
  return len <= one - (c->shared_bytes < one ? c->shared_bytes : one) &&
         srv_shards_shared_reserve(s, len, all);
}

static int map_region(srv_server *s, srv_conn *c, uint64_t id, int fd) {
  size_t len;
  int rc = srv_shm_check_fd(fd, &len);
  if (rc != 0)
    return rc;
  if (!within_caps(s, c, len))
    return ACCEL_ELIMIT;
  srv_region *r = rt_calloc(1, sizeof *r);
  if (r == NULL) {
    srv_shards_shared_release(s, len);
    return ACCEL_ENOMEM;
  }
  r->base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (r->base == MAP_FAILED) { /* write-sealed (EPERM), or no address space left */
    int err = errno;
    srv_shards_shared_release(s, len);
    rt_free(r);
    return err == EPERM || err == EACCES ? ACCEL_EPERM : ACCEL_ENOMEM;
  }
  r->id = id;
  r->len = len;
  r->next = c->regions;
  c->regions = r;
  c->nregions++;
  c->shared_bytes += len;
  s->shared_bytes += len;
  return 0;
}

int srv_shm_attach(srv_server *s, srv_conn *c, uint64_t id) {
  if (c->tp->take_fd == NULL)
    return ACCEL_ENOTSUP; /* nng and TCP cannot pass descriptors */
  int fd = c->tp->take_fd(c);
  if (fd < 0) /* no memory to take it, or the frame came without its descriptor */
    return fd == ACCEL_ENOMEM ? ACCEL_ENOMEM : ACCEL_EPROTO;
  int rc = id == 0 || find(c, id)               ? ACCEL_EINVAL
           : c->nregions >= SRV_SHM_MAX_REGIONS ? ACCEL_ELIMIT
                                                : map_region(s, c, id, fd);
  if (rc == 0)
    dma_register(s, c, c->regions, fd); /* the new one is first */
  close(fd);
  if (rc != 0)
    accel_log(ACCEL_LOG_INFO, "server", "local %u: shared region %llu refused: %s", c->pipe,
              (unsigned long long)id, accel_err_name(rc));
  return rc;
}

int srv_shm_detach(srv_server *s, srv_conn *c, uint64_t id) {
  srv_region *r = find(c, id);
  if (r == NULL)
    return ACCEL_EINVAL;
  r->detached = true;
  if (r->refs == 0)
    unlink_region(s, c, r);
  return 0;
}

int srv_shm_resolve(srv_conn *c, proto_shm_ref ref, uint64_t bytes, uint8_t **p, srv_region **out) {
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

void srv_shm_release(srv_server *s, srv_conn *c, srv_region *r) {
  if (--r->refs == 0 && r->detached)
    unlink_region(s, c, r);
}

void srv_shm_free_all(srv_server *s, srv_conn *c) {
  while (c->regions)
    unlink_region(s, c, c->regions);
}
