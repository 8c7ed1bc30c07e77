/* Byte rings in shared memory (shm_ring.h). */
#include "runtime/shm_ring.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

/* The positions are loaded sequentially consistent: a side that said it sleeps (a seq_cst
 * store) looks at the other's position again with these, and only a seq_cst load is ordered
 * after that store everywhere (an acquire load may pass it, on AArch64 say). */
uint64_t rt_ring_room(const rt_ring *w) {
  uint64_t used = w->pos - atomic_load_explicit(&w->ctl->head, memory_order_seq_cst);
  return used > w->size ? UINT64_MAX : w->size - used;
}

void rt_ring_put(rt_ring *w, const void *p, uint64_t n) {
  uint64_t at = w->pos & (w->size - 1), first = w->size - at < n ? w->size - at : n;
  memcpy(w->data + at, p, first);
  memcpy(w->data, (const uint8_t *)p + first, n - first);
  w->pos += n;
}

void rt_ring_commit(rt_ring *w) {
  /* Once per write, not per piece: each store is a fence here and a miss in the polling
   * reader's cache. */
  atomic_store_explicit(&w->ctl->tail, w->pos, memory_order_seq_cst);
}

bool rt_ring_publish(rt_ring *w, int fd) {
  rt_ring_commit(w);
  return rt_ring_wake(fd, &w->ctl->reader_sleeps);
}

uint64_t rt_ring_avail(const rt_ring *r) {
  uint64_t have = atomic_load_explicit(&r->ctl->tail, memory_order_seq_cst) - r->pos;
  return have > r->size ? UINT64_MAX : have;
}

void rt_ring_take(rt_ring *r, void *p, uint64_t n) {
  uint64_t at = r->pos & (r->size - 1), first = r->size - at < n ? r->size - at : n;
  memcpy(p, r->data + at, first);
  memcpy((uint8_t *)p + first, r->data, n - first);
  r->pos += n;
  atomic_store_explicit(&r->ctl->head, r->pos, memory_order_seq_cst);
}

bool rt_ring_bell(int fd) {
  char b = RT_RING_BELL;
  for (;;) {
    ssize_t w = send(fd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w == 1 || (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
      return true;
    if (w < 0 && errno == EINTR)
      continue;
    return false;
  }
}

/* The sleeper stores its flag and then loads the position, both sequentially consistent, as
 * the mover stored its position before this load: one of the two sees the other's store.
 * (Fences would do it with weaker stores, but ThreadSanitizer cannot check fences, and GCC
 * refuses them under it.) */
bool rt_ring_wake(int fd, _Atomic uint32_t *flag) {
  if (atomic_load_explicit(flag, memory_order_seq_cst) == 0 ||
      atomic_exchange_explicit(flag, 0, memory_order_seq_cst) == 0)
    return true;
  return rt_ring_bell(fd);
}
