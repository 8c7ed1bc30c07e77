/* Clients' shared memory in the worker (wire.h: BW_SHARE): the memfd acceld maps, mapped here
 * too and registered for DMA with the device that asked, so that copies between it and the
 * devices run from the client's pages at the bus's speed. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/worker/serve.h"

typedef struct ws_region {
  char *p;
  size_t bytes;
  be_device *registered; /* the device it is registered for DMA with, or NULL */
} ws_region;

/* Maps all of fd (its size as acceld checked it) and registers it where the backend can. */
static int map_shared(const bw_share *b, int fd, ws_region *r) {
  struct stat st;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != b->bytes || b->bytes == 0)
    return ACCEL_EINVAL;
  r->bytes = b->bytes;
  r->p = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (r->p == MAP_FAILED)
    return ACCEL_ENOMEM;
  be_device *d = ws_device(b->dev);
  int rc = d == NULL || ws.be->host_register == NULL ? ACCEL_ENOTSUP
                                                     : ws.be->host_register(d, r->p, r->bytes);
  if (rc == 0)
    r->registered = d;
  else /* copies still work, at pageable speed */
    fprintf(stderr, "accel-device: a shared region of %llu bytes not registered for DMA: %s\n",
            (unsigned long long)r->bytes, accel_err_name(rc));
  return 0;
}

void ws_share(const bw_hdr *h, const void *body, int fd) {
  const bw_share *b = body;
  ws_region *r = calloc(1, sizeof *r);
  int rc = h->type != BW_SHARE || h->len < sizeof *b || fd < 0 || b->id == 0 || r == NULL
               ? ACCEL_EINVAL
               : map_shared(b, fd, r);
  if (rc == 0 && !ws_put(&ws.regions, b->id, r)) {
    if (r->registered)
      ws.be->host_unregister(r->registered, r->p);
    munmap(r->p, r->bytes);
    rc = ACCEL_ENOMEM;
  }
  if (rc != 0)
    free(r);
  if (fd >= 0)
    close(fd);
  ws_reply(h->tag, rc, NULL, 0, NULL, 0);
}

void ws_unshare(const bw_hdr *h, const void *body) {
  const bw_share *b = body;
  ws_region *r = ws_get(&ws.regions, b->id);
  (void)h;
  if (r == NULL)
    return;
  if (getenv("ACCEL_WORKER_TRACE") && ws.be->pin_stats) {
    pin_cache_stats st;
    ws.be->pin_stats(&st);
    fprintf(stderr, "accel-device: region %llu unshared; pin cache hits %llu avoided %llu\n",
            (unsigned long long)b->id, (unsigned long long)st.hits, (unsigned long long)st.avoided);
    fprintf(stderr, "accel-device: noted %llu pins %llu refused %llu\n",
            (unsigned long long)st.noted, (unsigned long long)st.pins,
            (unsigned long long)st.refused);
  }
  if (r->registered)
    ws.be->host_unregister(r->registered, r->p);
  munmap(r->p, r->bytes);
  free(r);
  ws_put(&ws.regions, b->id, NULL);
}

void *ws_region_at(uint64_t id, uint64_t off, uint64_t bytes) {
  ws_region *r = ws_get(&ws.regions, id);
  if (r == NULL || off > r->bytes || bytes > r->bytes - off)
    return NULL;
  return r->p + off;
}

void ws_unshare_device(be_device *d) {
  for (size_t i = 0; i < ws.regions.cap; i++) {
    ws_region *r = ws.regions.slot[i];
    if (r != NULL && r->registered == d) {
      ws.be->host_unregister(d, r->p);
      r->registered = NULL;
    }
  }
}
