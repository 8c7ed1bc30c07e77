/* Frames of the exchange between acceld and a device worker (wire.h). */
#include "backends/worker/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* Writes every byte of the vector, retrying short writes and EINTR. */
static bool write_vec(int fd, struct iovec *v, int n) {
  while (n > 0) {
    ssize_t w = writev(fd, v, n);
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

bool bw_send(int fd, uint16_t type, uint64_t tag, const void *a, size_t alen, const void *b,
             size_t blen, const void *c, size_t clen) {
  size_t len = alen + blen + clen;
  if (len > BW_MAX_FRAME)
    return false;
  bw_hdr h = {.len = (uint32_t)len, .type = type, .tag = tag};
  struct iovec v[4] = {{&h, sizeof h}};
  int n = 1;
  if (alen)
    v[n++] = (struct iovec){(void *)a, alen};
  if (blen)
    v[n++] = (struct iovec){(void *)b, blen};
  if (clen)
    v[n++] = (struct iovec){(void *)c, clen};
  return write_vec(fd, v, n);
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

bool bw_recv(int fd, bw_hdr *h, void *buf, size_t room, void **body) {
  *body = buf;
  if (!read_all(fd, h, sizeof *h) || h->len > BW_MAX_FRAME)
    return false;
  if (h->len > room && (*body = malloc(h->len)) == NULL)
    return false;
  if (read_all(fd, *body, h->len))
    return true;
  if (*body != buf)
    free(*body);
  *body = buf;
  return false;
}
