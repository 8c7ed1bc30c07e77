/* The local transport's stream, client side (proto/local.h). */
#include "proto/local.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto/stream.h"
#include "proto/wire.h"
#include "runtime/alloc.h"

const char *proto_local_path(const char *url) {
  if (url == NULL)
    return NULL;
  if (strncmp(url, "ipc://", 6) == 0)
    return url + 6;
  if (strncmp(url, "unix://", 7) == 0)
    return url + 7;
  return NULL;
}

int proto_local_connect(const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (path == NULL || strlen(path) >= sizeof sa.sun_path) {
    errno = ENAMETOOLONG;
    return ACCEL_EINVAL;
  }
  strcpy(sa.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return ACCEL_ESYS;
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    int e = errno;
    close(fd);
    errno = e; /* the caller names the cause (clients/remote_dial.c) */
    return e == EACCES || e == EPERM ? ACCEL_EPERM : ACCEL_ECLOSED;
  }
  return fd;
}

/* The first chunk of a send, with a descriptor attached. */
static ssize_t send_with_fd(int fd, const void *bytes, size_t len, int fd_pass) {
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  memset(&u, 0, sizeof u);
  struct iovec iov = {.iov_base = (void *)bytes, .iov_len = len};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd_pass, sizeof(int));
  return sendmsg(fd, &mh, MSG_NOSIGNAL);
}

int proto_local_send(int fd, const void *bytes, size_t len, int fd_pass) {
  const uint8_t *p = bytes;
  while (len > 0) {
    ssize_t n = fd_pass >= 0 ? send_with_fd(fd, p, len, fd_pass) : send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return ACCEL_ECLOSED;
    fd_pass = -1; /* it went with the first byte */
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int proto_local_send_gather(int fd, const void *head, size_t head_len, const void *tail,
                            size_t tail_len) {
  struct iovec iov[2] = {{(void *)head, head_len}, {(void *)tail, tail_len}};
  struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
  while (iov[0].iov_len + iov[1].iov_len > 0) {
    ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return ACCEL_ECLOSED;
    for (int i = 0; i < 2 && n > 0; i++) { /* what went: from the head first */
      size_t took = (size_t)n < iov[i].iov_len ? (size_t)n : iov[i].iov_len;
      iov[i].iov_base = (uint8_t *)iov[i].iov_base + took;
      iov[i].iov_len -= took;
      n -= (ssize_t)took;
    }
    if (iov[0].iov_len == 0) { /* the head is out: the tail alone from here */
      mh.msg_iov = &iov[1];
      mh.msg_iovlen = 1;
    }
  }
  return 0;
}

int proto_wait_readable(int fd, int timeout_ms) {
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  for (;;) {
    int n = poll(&pf, 1, timeout_ms);
    if (n > 0)
      return 0;
    if (n == 0)
      return ACCEL_ETIMEDOUT;
    if (errno != EINTR)
      return ACCEL_ECLOSED;
  }
}

/* Reads exactly len bytes. */
static int read_all(int fd, uint8_t *p, size_t len, int timeout_ms) {
  while (len > 0) {
    if (timeout_ms >= 0) {
      int rc = proto_wait_readable(fd, timeout_ms);
      if (rc != 0)
        return rc;
    }
    ssize_t n = recv(fd, p, len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return ACCEL_ECLOSED;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* The length of the frame whose header is at p, or ACCEL_EPROTO (not ours, or its body over
 * max_body: a client cannot skip it, the stream is lost). */
static long long frame_length(const uint8_t *p, uint32_t max_body) {
  size_t len;
  uint64_t id;
  proto_scan sc = proto_stream_scan(p, PROTO_HEADER_SIZE, (uint64_t)max_body + PROTO_HEADER_SIZE,
                                    &len, &id);
  return sc == PROTO_SCAN_FRAME ? (long long)len : ACCEL_EPROTO;
}

long long proto_local_recv_frame(int fd, uint8_t **buf, size_t *cap, uint32_t max_body,
                                 int timeout_ms) {
  uint8_t head[PROTO_HEADER_SIZE];
  int rc = read_all(fd, head, sizeof head, timeout_ms);
  if (rc != 0)
    return rc;
  long long flen = frame_length(head, max_body);
  if (flen < 0)
    return flen;
  size_t len = (size_t)flen;
  if (*cap < len) {
    uint8_t *p = rt_realloc(*buf, len);
    if (p == NULL)
      return ACCEL_ENOMEM;
    *buf = p;
    *cap = len;
  }
  memcpy(*buf, head, sizeof head);
  rc = read_all(fd, *buf + PROTO_HEADER_SIZE, len - PROTO_HEADER_SIZE, timeout_ms);
  return rc != 0 ? rc : (long long)len;
}

/* ---- the buffered reader ---- */

#define READER_MIN (256u << 10)

/* Room for `need` bytes from rd->at: the unread bytes move to the front, the buffer grows. */
static int reader_room(proto_reader *rd, size_t need) {
  if (rd->at > 0) {
    memmove(rd->buf, rd->buf + rd->at, rd->len - rd->at);
    rd->len -= rd->at;
    rd->at = 0;
  }
  size_t cap = need < READER_MIN ? READER_MIN : need;
  if (rd->cap >= cap)
    return 0;
  uint8_t *p = rt_realloc(rd->buf, cap);
  if (p == NULL)
    return ACCEL_ENOMEM;
  rd->buf = p;
  rd->cap = cap;
  return 0;
}

/* What the ring holds, at most `room` bytes, into p: their count, ACCEL_EAGAIN if none, or
 * ACCEL_EPROTO for a position the writer cannot have reached. A writer waiting for room is
 * rung on fd. */
static long long ring_recv(rt_ring *in, int fd, uint8_t *p, size_t room) {
  uint64_t have = rt_ring_avail(in);
  if (have == UINT64_MAX)
    return ACCEL_EPROTO;
  if (have == 0)
    return ACCEL_EAGAIN;
  uint64_t n = have < room ? have : room;
  rt_ring_take(in, p, n);
  if (!rt_ring_wake(fd, &in->ctl->writer_waits))
    return ACCEL_ECLOSED;
  return (long long)n;
}

/* Reads until `need` bytes from rd->at are in the buffer, or ACCEL_EAGAIN as soon as the
 * socket (or the ring, if one is given) has no more (what came stays in the buffer). */
static int reader_fill(proto_reader *rd, int fd, rt_ring *in, size_t need) {
  if (rd->len - rd->at >= need)
    return 0;
  if (rd->cap - rd->at < need) {
    int rc = reader_room(rd, need);
    if (rc != 0)
      return rc;
  }
  while (rd->len - rd->at < need) {
    if (in != NULL) {
      long long got = ring_recv(in, fd, rd->buf + rd->len, rd->cap - rd->len);
      if (got < 0)
        return (int)got;
      rd->len += (size_t)got;
      continue;
    }
    ssize_t n = recv(fd, rd->buf + rd->len, rd->cap - rd->len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return ACCEL_EAGAIN;
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return ACCEL_ECLOSED;
    rd->len += (size_t)n;
  }
  return 0;
}

long long proto_reader_try_next_from(proto_reader *rd, int fd, rt_ring *in, uint32_t max_body,
                                     const uint8_t **frame) {
  int rc = reader_fill(rd, fd, in, PROTO_HEADER_SIZE);
  if (rc != 0)
    return rc;
  long long flen = frame_length(rd->buf + rd->at, max_body);
  if (flen < 0)
    return flen;
  size_t len = (size_t)flen;
  rc = reader_fill(rd, fd, in, len);
  if (rc != 0)
    return rc;
  *frame = rd->buf + rd->at;
  rd->at += len;
  return (long long)len;
}

long long proto_reader_try_next(proto_reader *rd, int fd, uint32_t max_body,
                                const uint8_t **frame) {
  return proto_reader_try_next_from(rd, fd, NULL, max_body, frame);
}

void proto_reader_free(proto_reader *rd) {
  rt_free(rd->buf);
  memset(rd, 0, sizeof *rd);
}
