/* Frames of the exchange between acceld and a device worker (wire.h). */
#include "backends/worker/wire.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "runtime/deadline.h"
#include "runtime/spin.h"

static bool read_all(int fd, void *p, size_t n);

/* Writes every byte of the vector, retrying short writes and EINTR. */
static bool write_vec(int fd, struct iovec *v, int n) {
  while (n > 0) {
    struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL); /* a peer gone is an error, not a SIGPIPE */
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    size_t done = (size_t)w;
    while (n > 0 && done >= v->iov_len) {
      done -= v->iov_len;
      v++;
      n--;
    }
    if (n > 0) {
      v->iov_base = (char *)v->iov_base + done;
      v->iov_len -= done;
    }
  }
  return true;
}

/* Writes to the channel's ring, or without one to its socket. */
static bool chan_write(bw_chan *ch, struct iovec *v, int n) {
  return ch->ring.ctl != NULL ? bw_chan_write(ch, v, n) : write_vec(ch->fd, v, n);
}

/* A frame's pieces as a vector (at most 4) into v; 0 if it is too long. */
static int frame_vec(struct iovec *v, bw_hdr *h, uint16_t type, uint64_t tag, const void *a,
                     size_t alen, const void *b, size_t blen, const void *c, size_t clen) {
  size_t len = alen + blen + clen;
  if (len > BW_MAX_FRAME)
    return 0;
  *h = (bw_hdr){.len = (uint32_t)len, .type = type, .tag = tag};
  v[0] = (struct iovec){h, sizeof *h};
  int n = 1;
  if (alen)
    v[n++] = (struct iovec){(void *)a, alen};
  if (blen)
    v[n++] = (struct iovec){(void *)b, blen};
  if (clen)
    v[n++] = (struct iovec){(void *)c, clen};
  return n;
}

bool bw_send(int fd, uint16_t type, uint64_t tag, const void *a, size_t alen, const void *b,
             size_t blen, const void *c, size_t clen) {
  bw_chan ch = bw_chan_socket(fd);
  return bw_chan_send(&ch, type, tag, a, alen, b, blen, c, clen);
}

bool bw_chan_send(bw_chan *ch, uint16_t type, uint64_t tag, const void *a, size_t alen,
                  const void *b, size_t blen, const void *c, size_t clen) {
  bw_hdr h;
  struct iovec v[4];
  int n = frame_vec(v, &h, type, tag, a, alen, b, blen, c, clen);
  return n > 0 && chan_write(ch, v, n);
}

bool bw_send_bytes(bw_chan *ch, const void *p, size_t len) {
  struct iovec v = {(void *)p, len};
  return chan_write(ch, &v, 1);
}

size_t bw_frame_len(size_t alen, size_t blen, size_t clen) {
  return sizeof(bw_hdr) + alen + blen + clen;
}

void bw_frame_put(uint8_t *to, uint16_t type, uint64_t tag, const void *a, size_t alen,
                  const void *b, size_t blen, const void *c, size_t clen) {
  bw_hdr h = {.len = (uint32_t)(alen + blen + clen), .type = type, .tag = tag};
  memcpy(to, &h, sizeof h);
  to += sizeof h;
  if (alen)
    memcpy(to, a, alen);
  if (blen)
    memcpy(to + alen, b, blen);
  if (clen)
    memcpy(to + alen + blen, c, clen);
}

bool bw_send_fds(int fd, uint16_t type, uint64_t tag, const void *a, size_t alen, const int *pass,
                 int npass) {
  bw_hdr h = {.len = (uint32_t)alen, .type = type, .tag = tag};
  ssize_t w = bw_send_with_fds(fd, &h, sizeof h, pass, npass);
  if (w <= 0)
    return false;
  /* The descriptors went with the first byte; the rest of the frame is plain bytes. */
  struct iovec rest[2] = {{(char *)&h + w, sizeof h - (size_t)w}, {(void *)a, alen}};
  int n = 0;
  struct iovec *from = rest;
  if (rest[0].iov_len == 0)
    from++;
  n = (rest[0].iov_len ? 1 : 0) + (alen ? 1 : 0);
  return n == 0 || write_vec(fd, from, n);
}

bool bw_send_fd(int fd, uint16_t type, uint64_t tag, const void *a, size_t alen, int pass) {
  return bw_send_fds(fd, type, tag, a, alen, &pass, 1);
}

bool bw_chan_send_fd(bw_chan *ch, uint16_t type, uint64_t tag, const void *a, size_t alen,
                     int pass) {
  if (ch->ring.ctl == NULL)
    return bw_send_fd(ch->fd, type, tag, a, alen, pass);
  /* The descriptor first, on the socket: the reader, at the frame, finds it there. */
  return bw_chan_pass(ch, &pass, 1) && bw_chan_send(ch, type, tag, a, alen, NULL, 0, NULL, 0);
}

bool bw_recv_fds(int fd, uint16_t type, int *fds, int n) {
  union {
    char buf[CMSG_SPACE(sizeof(int) * BW_MAX_PASS)];
    struct cmsghdr align;
  } u;
  bw_hdr h;
  struct iovec v = {&h, sizeof h};
  struct msghdr m = {
      .msg_iov = &v, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  ssize_t r;
  while ((r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  int got = r > 0 ? bw_take_fds(&m, fds, n) : 0;
  bool ok = r > 0 && got == n && (m.msg_flags & MSG_CTRUNC) == 0 &&
            read_all(fd, (char *)&h + r, sizeof h - (size_t)r) && h.type == type && h.len == 0;
  if (!ok)
    for (int i = 0; i < got; i++)
      close(fds[i]);
  return ok;
}

/* One recvmsg of a frame's first bytes (flags: MSG_DONTWAIT or 0); a descriptor comes with them
 * and lands in *passed (one per frame: another is closed). */
static ssize_t recv_first(int fd, void *p, size_t n, int *passed, int flags) {
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct iovec v = {p, n};
  struct msghdr m = {
      .msg_iov = &v, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  ssize_t r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC | flags);
  if (r > 0 && *passed < 0)
    bw_take_fds(&m, passed, 1); /* one per frame: another is closed */
  else if (r > 0)
    bw_take_fds(&m, NULL, 0);
  return r;
}

static _Atomic uint64_t caught_polling; /* bw_frames_caught_polling */

uint64_t bw_frames_caught_polling(void) {
  return atomic_load_explicit(&caught_polling, memory_order_relaxed);
}

/* Reads the first bytes of the next frame. It polls without sleeping for the spin time first
 * (rt_spin_ns: 50 us on hosts with cores to spare, else none): the command or completion that
 * follows the last one within microseconds (a client's next tiny op) then costs no wake-up of
 * this thread, which is most of a hop between acceld and a worker. */
static ssize_t read_first(int fd, void *p, size_t n, int *passed) {
  uint64_t spin = rt_spin_ns();
  uint64_t until = spin ? rt_mono_ns() + spin : 0;
  for (;;) {
    bool polling = until != 0;
    ssize_t r = recv_first(fd, p, n, passed, polling ? MSG_DONTWAIT : 0);
    if (r > 0 && polling)
      atomic_fetch_add_explicit(&caught_polling, 1, memory_order_relaxed);
    if (r >= 0)
      return r;
    if (errno == EINTR)
      continue;
    if (!polling || (errno != EAGAIN && errno != EWOULDBLOCK))
      return r;
    if (rt_mono_ns() >= until)
      until = 0; /* nothing within the spin: the next read sleeps */
    else
      rt_cpu_relax();
  }
}

static bool read_all(int fd, void *p, size_t n) {
  char *at = p;
  while (n > 0) {
    ssize_t r = read(fd, at, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    at += r;
    n -= (size_t)r;
  }
  return true;
}

static bool recv_frame(int fd, bw_hdr *h, void *buf, size_t room, void **body, int *passed,
                       uint32_t max) {
  *body = buf;
  *passed = -1;
  ssize_t r = read_first(fd, h, sizeof *h, passed);
  if (r <= 0 || !read_all(fd, (char *)h + r, sizeof *h - (size_t)r) || h->len > max) {
    if (*passed >= 0)
      close(*passed);
    *passed = -1;
    return false;
  }
  if (h->len > room && (*body = malloc(h->len)) == NULL)
    *body = buf; /* and fails below, closing what came */
  else if (read_all(fd, *body, h->len))
    return true;
  if (*body != buf)
    free(*body);
  *body = buf;
  if (*passed >= 0)
    close(*passed);
  *passed = -1;
  return false;
}

bool bw_recv_fd(int fd, bw_hdr *h, void *buf, size_t room, void **body, int *passed) {
  return recv_frame(fd, h, buf, room, body, passed, BW_MAX_FRAME);
}

bool bw_recv(int fd, bw_hdr *h, void *buf, size_t room, void **body) {
  int passed;
  bool ok = bw_recv_fd(fd, h, buf, room, body, &passed);
  if (passed >= 0)
    close(passed); /* none expected here */
  return ok;
}

/* ---- a buffered reader ---- */

bool bw_reader_init(bw_reader *r, int fd, uint64_t fd_types) {
  *r = (bw_reader){.fd = fd, .fd_types = fd_types};
  r->buf = malloc(BW_READER_BYTES);
  return r->buf != NULL;
}

bool bw_reader_init_chan(bw_reader *r, bw_chan *chan, uint64_t fd_types) {
  bool ok = bw_reader_init(r, chan->fd, fd_types);
  r->chan = chan->ring.ctl != NULL ? chan : NULL;
  chan->takes_fds = fd_types != 0;
  return ok;
}

/* Some bytes of the stream, from the ring or the socket; a descriptor that came with them
 * (the socket only: the ring's wait in the channel until their frame) into *got. */
static ssize_t read_some(bw_reader *r, void *p, size_t n, int *got) {
  if (r->chan == NULL)
    return read_first(r->fd, p, n, got);
  bool polled;
  long k = bw_chan_read(r->chan, p, n, &polled);
  if (k > 0 && polled)
    atomic_fetch_add_explicit(&caught_polling, 1, memory_order_relaxed);
  return k;
}

/* Exactly n bytes, past the buffer (a frame longer than it). */
static bool read_exact(bw_reader *r, void *p, size_t n) {
  if (r->chan == NULL)
    return read_all(r->fd, p, n);
  for (uint8_t *at = p; n > 0;) {
    int none = -1;
    ssize_t k = read_some(r, at, n, &none);
    if (k <= 0)
      return false;
    at += k;
    n -= (size_t)k;
  }
  return true;
}

void bw_reader_fini(bw_reader *r) {
  for (uint32_t i = 0; i < r->nfds; i++)
    close(r->fds[i].fd);
  r->nfds = 0;
  free(r->buf);
  r->buf = NULL;
}

/* A descriptor that came with the read of stream bytes [from, to). Linux hands a descriptor
 * over with the first byte of the message it travelled with and ends that read with the
 * message, and bw_send_fd sends a frame's header alone with it: the read ends inside the
 * header of the descriptor's frame. */
static void keep_fd(bw_reader *r, int fd, uint64_t from, uint64_t to) {
  if (fd < 0)
    return;
  if (r->fd_types == 0 || r->nfds == BW_READER_FDS)
    close(fd); /* none expected; or more than the frames in one buffer could take */
  else
    r->fds[r->nfds++] = (struct bw_reader_fd){fd, from, to};
}

/* For the frame whose header starts at stream offset `at`: descriptors whose read ended before
 * it belong to no frame left and are closed; the one whose read ended inside its header is the
 * frame's, if the frame takes one. A frame whose descriptor was lost (the receiver out of
 * descriptors: the kernel drops it) gets none, never a later frame's. */
static int fd_for(bw_reader *r, uint64_t at, bool takes) {
  while (r->nfds > 0 && r->fds[0].to <= at) {
    close(r->fds[0].fd);
    memmove(r->fds, r->fds + 1, --r->nfds * sizeof r->fds[0]);
  }
  if (!takes || r->nfds == 0 || r->fds[0].from > at || r->fds[0].to > at + sizeof(bw_hdr))
    return -1;
  int fd = r->fds[0].fd;
  memmove(r->fds, r->fds + 1, --r->nfds * sizeof r->fds[0]);
  return fd;
}

/* Drops the buffer's bytes before head: `base` is the stream offset of buf[0]. */
static void compact(bw_reader *r) {
  memmove(r->buf, r->buf + r->head, r->tail - r->head);
  r->base += r->head;
  r->tail -= r->head;
  r->head = 0;
}

/* Until `need` bytes (at most BW_READER_BYTES) wait in the buffer; false at the end or on an
 * error. Each read takes what fits: the socket's frames behind these come along. */
static bool fill(bw_reader *r, size_t need) {
  if (r->tail - r->head >= need)
    return true;
  if (BW_READER_BYTES - r->head < need)
    compact(r); /* the room at the end is too short */
  while (r->tail - r->head < need) {
    int got = -1;
    ssize_t n = read_some(r, r->buf + r->tail, BW_READER_BYTES - r->tail, &got);
    if (n > 0)
      keep_fd(r, got, r->base + r->tail, r->base + r->tail + (size_t)n);
    else if (got >= 0)
      close(got);
    if (n <= 0)
      return false;
    r->tail += (size_t)n;
  }
  return true;
}

/* The body of a frame whose header was taken: from the buffer, the rest of a frame longer than
 * the buffer straight from the socket. */
static bool take_body(bw_reader *r, void *body, size_t len) {
  if (len <= BW_READER_BYTES) {
    if (!fill(r, len))
      return false;
    memcpy(body, r->buf + r->head, len);
    r->head += len;
    return true;
  }
  size_t have = r->tail - r->head; /* less than len: the buffer holds at most its size */
  memcpy(body, r->buf + r->head, have);
  r->head = r->tail;
  compact(r);
  if (!read_exact(r, (uint8_t *)body + have, len - have))
    return false;
  r->base += len - have; /* bytes that went past the buffer */
  return true;
}

bool bw_reader_ready(const bw_reader *r) {
  if (r->tail > r->head)
    return true;
  uint64_t avail = r->chan != NULL ? rt_ring_avail(&r->chan->ring) : 0;
  return avail != 0 && avail != UINT64_MAX; /* a broken ring: the read ends the link */
}

bool bw_reader_next(bw_reader *r, bw_hdr *h, void *buf, size_t room, void **body, int *passed,
                    uint32_t max) {
  *body = buf;
  *passed = -1;
  if (!fill(r, sizeof *h))
    return false;
  uint64_t at = r->base + r->head; /* where the frame starts in the stream */
  memcpy(h, r->buf + r->head, sizeof *h);
  if (h->len > max)
    return false; /* before anything is allocated for it */
  r->head += sizeof *h;
  if (h->len > room && (*body = malloc(h->len)) == NULL) {
    *body = buf;
    return false;
  }
  if (!take_body(r, *body, h->len)) {
    if (*body != buf)
      free(*body);
    *body = buf;
    return false;
  }
  if (r->head == r->tail)
    compact(r); /* empty: the next read starts at the buffer's start */
  bool takes = h->type < 64 && (r->fd_types & BW_TYPE_BIT(h->type));
  if (r->chan != NULL)
    *passed = takes ? bw_chan_take_fd(r->chan) : -1;
  else
    *passed = fd_for(r, at, takes);
  return true;
}
