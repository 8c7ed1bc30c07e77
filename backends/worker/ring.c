/* Worker link channels through shared memory (ring.h). */
#include "backends/worker/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/deadline.h"
#include "runtime/spin.h"

/* The region: both directions' positions on the first page, each reader's idle time and the
 * worker's completion counts on lines of their own there, then the two rings' bytes. */
#define CTL_NOTE 256u
#define IDLE_CMD 512u
#define IDLE_NOTE 576u
#define DONE_COUNTS 640u
#define DATA_CMD 4096u
#define DATA_NOTE (DATA_CMD + BW_RING_CMD_BYTES)
#define REGION_BYTES (DATA_NOTE + BW_RING_NOTE_BYTES)

#define PASS 'F' /* the byte descriptors travel with */

_Static_assert(sizeof(bw_ring_ctl) <= CTL_NOTE, "a direction's positions fit their slot");
_Static_assert(CTL_NOTE + sizeof(bw_ring_ctl) <= IDLE_CMD &&
                   IDLE_CMD + sizeof(bw_idle) <= IDLE_NOTE &&
                   IDLE_NOTE + sizeof(bw_idle) <= DONE_COUNTS &&
                   DONE_COUNTS + sizeof(bw_done_counts) <= DATA_CMD,
               "the idle times and counts have places of their own before the rings");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "the other process reads these atomics too");

bw_chan bw_chan_socket(int fd) {
  return (bw_chan){.fd = fd};
}

bool bw_rings_create(bw_rings *r) {
  *r = (bw_rings){.fd = memfd_create("accel-link-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING)};
  /* Sealed: a worker that shrank it would turn acceld's next access into SIGBUS. */
  if (r->fd < 0 || ftruncate(r->fd, REGION_BYTES) != 0 ||
      fcntl(r->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    bw_rings_unmap(r);
    return false;
  }
  void *p = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  if (p == MAP_FAILED) {
    bw_rings_unmap(r);
    return false;
  }
  r->base = p;
  r->bytes = REGION_BYTES;
  return true;
}

bool bw_rings_map(bw_rings *r, int fd) {
  struct stat st;
  *r = (bw_rings){.fd = fd};
  if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size != REGION_BYTES)
    return false;
  void *p = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return false;
  r->base = p;
  r->bytes = REGION_BYTES;
  return true;
}

void bw_rings_unmap(bw_rings *r) {
  if (r->base != NULL)
    munmap(r->base, r->bytes);
  if (r->fd >= 0)
    close(r->fd);
  *r = (bw_rings){.fd = -1};
}

/* The idle times of the reader of cmd (note: false) or note, in the region. */
static bw_idle *idle_of(const bw_rings *r, bool note) {
  return (bw_idle *)(void *)(r->base + (note ? IDLE_NOTE : IDLE_CMD));
}

void bw_chan_ring(bw_chan *c, const bw_rings *r, bool note) {
  c->ring = (rt_ring){.ctl = (rt_ring_ctl *)(void *)(r->base + (note ? CTL_NOTE : 0)),
                      .data = r->base + (note ? DATA_NOTE : DATA_CMD),
                      .size = note ? BW_RING_NOTE_BYTES : BW_RING_CMD_BYTES};
  c->idle = idle_of(r, note);
}

bw_done_counts *bw_rings_done_counts(const bw_rings *r) {
  return r->base != NULL ? (bw_done_counts *)(void *)(r->base + DONE_COUNTS) : NULL;
}

/* The total is read before and after the wait in progress: a wait that ended in between (its
 * time moved into the total) is read again, not counted twice. */
uint64_t bw_rings_reader_idle_ns(const bw_rings *r, bool note, uint64_t now_ns) {
  if (r->base == NULL)
    return 0;
  bw_idle *idle = idle_of(r, note);
  for (int tries = 0;; tries++) {
    uint64_t total = atomic_load_explicit(&idle->total_ns, memory_order_acquire);
    uint64_t since = atomic_load_explicit(&idle->since_ns, memory_order_acquire);
    if (atomic_load_explicit(&idle->total_ns, memory_order_acquire) != total && tries < 100)
      continue;
    return total + (since != 0 && since < now_ns ? now_ns - since : 0);
  }
}

/* The reader begins to wait (the ring empty), or stops: its waits so far into the total. */
static void wait_begins(bw_chan *c, uint64_t since) {
  if (c->idle != NULL)
    atomic_store_explicit(&c->idle->since_ns, since, memory_order_release);
}

static void wait_ends(bw_chan *c, uint64_t since) {
  if (c->idle == NULL)
    return;
  uint64_t total = atomic_load_explicit(&c->idle->total_ns, memory_order_relaxed);
  atomic_store_explicit(&c->idle->total_ns, total + (rt_mono_ns() - since), memory_order_release);
  atomic_store_explicit(&c->idle->since_ns, 0, memory_order_release);
}

/* ---- bells ---- */

/* Sleeps until the socket has something (a bell, a descriptor, the end); false if it failed. */
static bool sleep_on(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  for (;;) {
    int n = poll(&p, 1, -1);
    if (n > 0)
      return true;
    if (n < 0 && errno != EINTR)
      return false;
  }
}

int bw_take_fds(struct msghdr *m, int *fds, int max) {
  int got = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
      continue;
    int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < k; i++) {
      int one;
      memcpy(&one, CMSG_DATA(c) + (size_t)i * sizeof(int), sizeof one);
      if (got < max)
        fds[got++] = one;
      else
        close(one);
    }
  }
  return got;
}

ssize_t bw_send_with_fds(int fd, const void *p, size_t n, const int *fds, int nfds) {
  union {
    char buf[CMSG_SPACE(sizeof(int) * BW_RING_MAX_PASS)];
    struct cmsghdr align;
  } u;
  if (nfds < 1 || nfds > BW_RING_MAX_PASS) {
    errno = EINVAL;
    return -1;
  }
  struct iovec v = {(void *)p, n};
  struct msghdr m = {.msg_iov = &v,
                     .msg_iovlen = 1,
                     .msg_control = u.buf,
                     .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds)};
  struct cmsghdr *h = CMSG_FIRSTHDR(&m);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
  memcpy(CMSG_DATA(h), fds, sizeof(int) * (size_t)nfds);
  ssize_t w;
  while ((w = sendmsg(fd, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  return w;
}

/* One byte from the socket with the descriptor a pass brought into *got (-1 if none; any other
 * closed). 1, 0 at the end, < 0 (errno) when nothing is there or on an error. */
static ssize_t recv_byte(int fd, char *b, int *got, int flags) {
  union {
    char buf[CMSG_SPACE(sizeof(int) * BW_RING_MAX_PASS)];
    struct cmsghdr align;
  } u;
  struct iovec v = {b, 1};
  struct msghdr m = {
      .msg_iov = &v, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  ssize_t r;
  while ((r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC | flags)) < 0 && errno == EINTR) {
  }
  *got = -1;
  if (r > 0)
    bw_take_fds(&m, got, *b == PASS ? 1 : 0); /* a bell brings none; a pass brings one */
  return r;
}

/* A reader's socket after a wake-up: bells dropped, descriptors kept in order for their
 * frames, the end noted. With the queue full the rest waits in the socket, where
 * bw_chan_take_fd finds it after the queue (the frames of those queued are in the ring). A
 * descriptor on a channel whose frames take none is a peer breaking the protocol: the end. */
static void drain(bw_chan *c) {
  while (c->nfds < BW_RING_FDS) {
    char b;
    int got;
    ssize_t r = recv_byte(c->fd, &b, &got, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (r <= 0) {
      c->eof = true;
      return;
    }
    if (b != PASS)
      continue;
    if (!c->takes_fds) {
      if (got >= 0)
        close(got);
      c->eof = true;
      return;
    }
    c->fds[c->nfds++] = got;
  }
}

/* ---- the writer ---- */

/* Bytes that fit now, waiting (polling, then sleeping on the socket for the reader's bell)
 * while the ring is full; 0 if the peer is gone, the channel shut, or the positions insane. */
static uint64_t room(bw_chan *c) {
  rt_ring *w = &c->ring;
  uint64_t spin = rt_spin_ns(), until = 0;
  bool woke = false;
  for (;;) {
    uint64_t head = atomic_load_explicit(&w->ctl->head, memory_order_acquire);
    uint64_t fit = rt_ring_room(w);
    if (fit == UINT64_MAX || atomic_load_explicit(&c->closed, memory_order_relaxed))
      return 0;
    if (fit > 0)
      return fit;
    if (!woke) { /* the reader must see what is written so far, and be awake, to make room */
      if (!rt_ring_publish(w, c->fd))
        return 0;
      woke = true;
      until = spin ? rt_mono_ns() + spin : 0;
    }
    if (until != 0 && rt_mono_ns() < until) {
      rt_cpu_relax();
      continue;
    }
    atomic_store_explicit(&w->ctl->writer_waits, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&w->ctl->head, memory_order_seq_cst) != head)
      continue; /* room came meanwhile; a bell that follows is dropped below */
    char b[64];
    ssize_t r;
    if (!sleep_on(c->fd))
      return 0;
    while ((r = recv(c->fd, b, sizeof b, MSG_DONTWAIT)) > 0 || (r < 0 && errno == EINTR)) {
    }
    if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
      return 0; /* the peer is gone, or the socket shut here */
    atomic_store_explicit(&w->ctl->writer_waits, 0, memory_order_relaxed);
  }
}

bool bw_chan_write(bw_chan *c, struct iovec *v, int n) {
  for (int i = 0; i < n; i++) {
    const uint8_t *p = v[i].iov_base;
    uint64_t left = v[i].iov_len;
    while (left > 0) {
      uint64_t fit = room(c);
      if (fit == 0)
        return false;
      uint64_t k = fit < left ? fit : left;
      rt_ring_put(&c->ring, p, k);
      p += k;
      left -= k;
    }
  }
  return rt_ring_publish(&c->ring, c->fd); /* once per write (room publishes before it waits) */
}

bool bw_chan_pass(bw_chan *c, const int *fds, int n) {
  char b = PASS;
  return c->ring.ctl != NULL && bw_send_with_fds(c->fd, &b, 1, fds, n) == 1;
}

/* ---- the reader ---- */

/* The clock is read only once the ring was found empty: a reader kept busy reads none. */
long bw_chan_read(bw_chan *c, void *p, size_t n, bool *polled) {
  rt_ring *rd = &c->ring;
  uint64_t spin = rt_spin_ns();
  uint64_t since = 0, until = 0; /* since: when it found the ring empty (0: not yet) */
  bool slept = false;
  *polled = false;
  for (;;) {
    if (atomic_load_explicit(&c->closed, memory_order_relaxed))
      return 0; /* shut here (the link failed): what is left is not read */
    uint64_t have = rt_ring_avail(rd);
    if (have == UINT64_MAX)
      return -1; /* not a position the writer can have reached */
    if (have > 0) {
      if (since != 0)
        wait_ends(c, since); /* before the copy, which is work */
      uint64_t k = have < n ? have : n;
      rt_ring_take(rd, p, k);
      *polled = spin != 0 && !slept;
      /* A writer gone while it waited for room: what it wrote is still read, to the end. Any
       * other failed bell may leave a live writer asleep for good: the channel ends. */
      if (!rt_ring_wake(c->fd, &rd->ctl->writer_waits) && errno != EPIPE && errno != ECONNRESET)
        return -1;
      return (long)k;
    }
    if (c->eof)
      return 0; /* the peer's end, after all it wrote */
    if (since == 0) {
      since = rt_mono_ns();
      until = spin ? since + spin : 0;
      wait_begins(c, since);
    }
    if (until != 0 && rt_mono_ns() < until) {
      rt_cpu_relax();
      continue;
    }
    if (c->nfds == BW_RING_FDS)
      return -1; /* descriptors for frames that never came: a writer breaking the protocol
                    (its socket would stay readable under a sleep that never sleeps) */
    atomic_store_explicit(&rd->ctl->reader_sleeps, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&rd->ctl->tail, memory_order_seq_cst) == rd->pos) {
      if (!sleep_on(c->fd))
        return -1;
      drain(c);
      slept = true;
    }
    atomic_store_explicit(&rd->ctl->reader_sleeps, 0, memory_order_relaxed);
    until = 0;
  }
}

int bw_chan_take_fd(bw_chan *c) {
  if (c->nfds > 0) {
    int fd = c->fds[0];
    memmove(c->fds, c->fds + 1, --c->nfds * sizeof c->fds[0]);
    return fd;
  }
  for (;;) { /* sent before the frame: it is there, behind bells at most */
    char b;
    int got;
    if (c->eof || recv_byte(c->fd, &b, &got, 0) <= 0) {
      c->eof = true;
      return -1;
    }
    if (b == PASS)
      return got;
  }
}

void bw_chan_shutdown(bw_chan *c, int how) {
  atomic_store_explicit(&c->closed, true, memory_order_relaxed);
  if (c->fd >= 0)
    shutdown(c->fd, how);
}

void bw_chan_close(bw_chan *c) {
  for (uint32_t i = 0; i < c->nfds; i++)
    if (c->fds[i] >= 0)
      close(c->fds[i]);
  c->nfds = 0;
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
}
