/* Clients' shared memory in device workers (proxy.h): a memfd acceld maps (server_shm.c) is
 * sent to the worker of the device it is registered with, which maps it and registers it for
 * DMA; copies between it and that worker's devices then go straight from the client's pages,
 * as they do with devices inside acceld, instead of through the staging region.
 *
 * The regions are kept here by address, each holding its link's memory: host_unregister
 * names only the address and may come after the device closed (backend.h). */
#include <stdlib.h>

#include "backends/worker/proxy.h"

typedef struct share {
  const char *p;
  size_t bytes;
  bw_link *link;
  uint64_t id;
  struct share *next;
} share;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static share *shares;

int bw_share_register(bw_pdev *d, void *p, size_t bytes, int fd) {
  bw_link *l = d->link;
  share *s = calloc(1, sizeof *s);
  if (s == NULL)
    return ACCEL_ENOMEM;
  uint64_t id = bw_id_take(l, BW_K_REGION) + 1; /* 0 means the staging region */
  bw_share b = {.dev = d->index, .id = id, .bytes = bytes};
  void *body = NULL;
  uint32_t len = 0;
  int rc = bw_link_call_fd(l, BW_SHARE, &b, sizeof b, fd, &body, &len);
  if (rc == 0)
    rc = ((bw_reply *)body)->status;
  free(body);
  if (rc != 0) {
    bw_id_give(l, BW_K_REGION, id - 1);
    free(s);
    return rc;
  }
  *s = (share){p, bytes, l, id, NULL};
  bw_link_hold(l);
  pthread_mutex_lock(&mu);
  s->next = shares;
  shares = s;
  pthread_mutex_unlock(&mu);
  return 0;
}

void bw_share_unregister(void *p) {
  pthread_mutex_lock(&mu);
  share *s = NULL;
  for (share **at = &shares; *at; at = &(*at)->next)
    if ((*at)->p == p) {
      s = *at;
      *at = s->next;
      break;
    }
  pthread_mutex_unlock(&mu);
  if (s == NULL)
    return;
  bw_share b = {.id = s->id};
  if (bw_link_send(s->link, BW_UNSHARE, 0, &b, sizeof b, NULL, 0, NULL, 0))
    bw_id_give(s->link, BW_K_REGION, s->id - 1);
  bw_link_release(s->link);
  free(s);
}

bool bw_share_find(bw_link *l, const void *p, size_t bytes, uint64_t *id, uint64_t *off) {
  const char *c = p;
  bool found = false;
  pthread_mutex_lock(&mu);
  for (share *s = shares; s && !found; s = s->next)
    if (s->link == l && c >= s->p && c - s->p <= (ptrdiff_t)s->bytes &&
        bytes <= s->bytes - (size_t)(c - s->p)) {
      *id = s->id;
      *off = (uint64_t)(c - s->p);
      found = true;
    }
  pthread_mutex_unlock(&mu);
  return found;
}
