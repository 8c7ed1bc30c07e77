/* The local link of the remote transport (clients/remote.h): the daemon's own Unix-socket
 * transport for ipc:// and unix:// URLs (proto/local.h). A stream carries whole frames, so
 * nothing is dropped and no acknowledgements are needed; one thread per context reads
 * replies, or a thread waiting on an op reads its reply itself (remote_local_read.c); senders
 * write whole frames under a mutex. Closing shuts the socket down and stops the reading
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

static int local_send(remote *r, const uint8_t *bytes, size_t len, uint64_t id) {
  pthread_mutex_lock(&r->send_mu);
  int rc = proto_local_send(r->fd, bytes, len, -1);
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
  if (r->fd >= 0)
    close(r->fd);
  r->fd = -1;
  proto_reader_free(&r->reader);
}

const remote_link remote_local_link = {
    .open = local_open,
    .send = local_send,
    .close = local_close,
    .send_fd = local_send_fd,
    .offer_help = local_offer_help,
    .caps = PROTO_CAP_BATCH,
    .shm = true,
};
