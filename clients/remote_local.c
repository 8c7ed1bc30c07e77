/* The local link of the remote transport (clients/remote.h): the daemon's own stream
 * transport, over a Unix socket for ipc:// and unix:// URLs (proto/local.h), over TCP for
 * tcp:// (the tcp link: the same, without descriptors and so without shared memory, and
 * with a send queue, remote_tcp_out.c). A stream
 * carries whole frames, so nothing is dropped and no acknowledgements are needed; one thread per
 * context reads replies, or a thread waiting on an op reads its reply itself (remote_local_read.c);
 * senders write whole frames under a mutex. Closing shuts the socket down and stops the reading
 * thread at once, whatever the daemon does: accel_close() cannot hang. */
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clients/remote.h"
#include "clients/remote_dial.h"

static int local_open(accel_ctx *ctx, const char *url) {
  remote *r = remote_of(ctx);
  int fd = client_local_connect(url);
  if (fd < 0)
    return fd;
  r->fd = fd;
  return local_reader_start(ctx);
}

static int tcp_open(accel_ctx *ctx, const char *url) {
  remote *r = remote_of(ctx);
  int fd = client_tcp_connect(url);
  if (fd < 0)
    return fd;
  r->fd = fd;
  int rc = tcp_out_start(r);
  return rc == 0 ? local_reader_start(ctx) : rc;
}

static int tcp_send(remote *r, const uint8_t *bytes, size_t len, uint64_t id) {
  return tcp_out_send(r, bytes, len);
}

static int tcp_send_gather(remote *r, const uint8_t *head, size_t head_len, const uint8_t *tail,
                           size_t tail_len, uint64_t id) {
  return tcp_out_send_gather(r, head, head_len, tail, tail_len);
}

static int local_send(remote *r, const uint8_t *bytes, size_t len, uint64_t id) {
  pthread_mutex_lock(&r->send_mu);
  int rc = proto_local_send(r->fd, bytes, len, -1);
  pthread_mutex_unlock(&r->send_mu);
  return rc;
}

static int local_send_gather(remote *r, const uint8_t *head, size_t head_len, const uint8_t *tail,
                             size_t tail_len, uint64_t id) {
  pthread_mutex_lock(&r->send_mu);
  int rc = proto_local_send_gather(r->fd, head, head_len, tail, tail_len);
  pthread_mutex_unlock(&r->send_mu);
  return rc;
}

static int local_send_fd(remote *r, const uint8_t *bytes, size_t len, int fd) {
  pthread_mutex_lock(&r->send_mu);
  int rc = proto_local_send(r->fd, bytes, len, fd);
  pthread_mutex_unlock(&r->send_mu);
  return rc;
}

static void local_close(accel_ctx *ctx) {
  remote *r = remote_of(ctx);
  if (r->fd >= 0)
    shutdown(r->fd, SHUT_RDWR); /* wakes a waiter reading and any blocked sender */
  local_reader_stop(ctx);       /* the receiver reports the end, once, and stops */
  tcp_out_stop(r);              /* the tcp link's writer, if any */
  if (r->fd >= 0)
    close(r->fd);
  r->fd = -1;
  proto_reader_free(&r->reader);
}

const remote_link remote_local_link = {
    .open = local_open,
    .send = local_send,
    .close = local_close,
    .send_gather = local_send_gather,
    .send_fd = local_send_fd,
    .offer_help = local_offer_help,
    .caps = PROTO_CAP_BATCH,
    .shm = true,
};

const remote_link remote_tcp_link = {
    .open = tcp_open,
    .send = tcp_send, /* gathered while other ops are in flight (remote_tcp_out.c) */
    .close = local_close,
    .send_gather = tcp_send_gather, /* a write's bytes straight from the caller's memory */
    .send_fd = NULL,                /* no descriptors cross TCP: no shared memory either */
    .offer_help = local_offer_help,
    .caps = PROTO_CAP_BATCH,
    .shm = false,
};
