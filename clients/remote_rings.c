/* The local link's shared rings, the client's side (proto/local_rings.h; acceld's is in
 * server/io_pool.c). The client makes the region and offers it with its HELLO; once the
 * WELCOME takes it, frames go out through the up ring (remote_send_queue.c calls
 * rings_write where it wrote the socket) and replies come in through the down ring
 * (remote_local_read.c reads it where it read the socket). The socket stays for bells, the
 * HELLO's and shared-memory registrations' descriptors, and the end.
 *
 * Bells: a reader that polls (a thread waiting on its op) clears down.reader_sleeps so that
 * acceld writes without a system call; the receiver thread, which sleeps in epoll, keeps it
 * set. A writer waiting for room polls, then sleeps in short steps: acceld rings the socket
 * when it takes bytes, but the receiver drains that socket, so the writer cannot sleep on
 * it. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "clients/remote.h"
#include "proto/local_rings.h"
#include "runtime/spin.h"

#define ROOM_SLEEP_NS 20000 /* a writer's step while it waits for room, once it stopped polling */

int rings_offer(remote *r) {
  const char *env = getenv("ACCEL_LOCAL_RINGS");
  if (!r->link->rings || (env != NULL && strcmp(env, "0") == 0))
    return -1;
  int fd = proto_rings_create(&r->rings_base);
  if (fd < 0) {
    r->rings_base = NULL;
    return -1;
  }
  return fd;
}

void rings_welcome(remote *r, bool accepted) {
  if (r->rings_base == NULL)
    return;
  if (!accepted) {
    munmap(r->rings_base, PROTO_RINGS_BYTES);
    r->rings_base = NULL;
    return;
  }
  proto_rings_view(r->rings_base, true, &r->up, &r->down);
  pthread_mutex_lock(&r->rd_mu); /* the receiver reads by it */
  r->rings = true;
  pthread_mutex_unlock(&r->rd_mu);
}

void rings_free(remote *r) {
  if (r->rings_base != NULL)
    munmap(r->rings_base, PROTO_RINGS_BYTES);
  r->rings_base = NULL;
  r->rings = false;
}

/* Room in the up ring, waiting while it is full: 0 once the link closes or acceld's head is
 * not one it can have written. */
static uint64_t room(remote *r) {
  uint64_t spin = rt_spin_ns(), until = 0;
  for (;;) {
    uint64_t fit = rt_ring_room(&r->up);
    if (fit == UINT64_MAX || atomic_load(&r->rings_closing))
      return 0;
    if (fit > 0)
      return fit;
    if (until == 0) { /* acceld must see what is there, and be awake, to make room */
      if (!rt_ring_publish(&r->up, r->fd))
        return 0;
      atomic_store(&r->up.ctl->writer_waits, 1);
      until = uv_hrtime() + spin;
      continue;
    }
    if (uv_hrtime() < until) {
      rt_cpu_relax();
      continue;
    }
    struct timespec d = {0, ROOM_SLEEP_NS};
    nanosleep(&d, NULL);
  }
}

static bool put(remote *r, const uint8_t *p, size_t n) {
  while (n > 0) {
    uint64_t fit = room(r);
    if (fit == 0)
      return false;
    uint64_t k = fit < n ? fit : n;
    rt_ring_put(&r->up, p, k);
    p += k;
    n -= (size_t)k;
  }
  return true;
}

int rings_write(remote *r, const uint8_t *head, size_t head_len, const uint8_t *tail,
                size_t tail_len, int fd_pass) {
  if (fd_pass >= 0) { /* sent, then counted, then the frame: acceld reads them in that order */
    static const uint8_t pass = 'F';
    if (proto_local_send(r->fd, &pass, 1, fd_pass) != 0)
      return ACCEL_ECLOSED;
    atomic_fetch_add(&r->up.ctl->passes, 1);
  }
  if (!put(r, head, head_len) || !put(r, tail, tail_len) || !rt_ring_publish(&r->up, r->fd))
    return ACCEL_ECLOSED;
  return 0;
}

int rings_drain_socket(remote *r) {
  while (!r->rings_eof) {
    char b[256];
    ssize_t n = recv(r->fd, b, sizeof b, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    if (n <= 0)
      r->rings_eof = true;
  }
  return ACCEL_ECLOSED;
}

bool rings_reader_sleeps(remote *r, bool sleeps) {
  if (!sleeps) {
    atomic_store_explicit(&r->down.ctl->reader_sleeps, 0, memory_order_relaxed);
    return false;
  }
  atomic_store(&r->down.ctl->reader_sleeps, 1);
  uint64_t have = rt_ring_avail(&r->down);
  return have != 0;
}
