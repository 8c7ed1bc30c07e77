/* The stream links of the remote transport (clients/remote.h): the daemon's own stream of
 * frames, over a Unix socket for ipc:// and unix:// URLs (proto/local.h) and over TCP for
 * tcp:// (proto/tcp.h; no descriptors cross it, so no shared memory either). A stream carries
 * whole frames, so nothing is dropped and no acknowledgements are needed; one thread per
 * context reads replies, or a thread waiting on an op reads its reply itself
 * (remote_local_read.c); frames go out through the link's send queue (remote_send_queue.c:
 * at once when the op is alone, else gathered and written by its thread). Closing shuts the
 * socket down and stops both threads at once, whatever the daemon does: accel_close() cannot
 * hang. */
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clients/remote.h"
#include "clients/remote_dial.h"

/* Both links, once connected (fd >= 0 or an error). */
static int start(accel_ctx *ctx, int fd) {
  remote *r = remote_of(ctx);
  if (fd < 0)
    return fd;
  r->fd = fd;
  int rc = sendq_start(r);
  return rc == 0 ? local_reader_start(ctx) : rc;
}

static int local_open(accel_ctx *ctx, const char *url) {
  return start(ctx, client_local_connect(url));
}

static int tcp_open(accel_ctx *ctx, const char *url) {
  return start(ctx, client_tcp_connect(url, -1));
}

static int stream_send(remote *r, const uint8_t *bytes, size_t len, uint64_t id) {
  return sendq_send(r, bytes, len);
}

static int stream_send_gather(remote *r, const uint8_t *head, size_t head_len, const uint8_t *tail,
                              size_t tail_len, uint64_t id) {
  return sendq_send_gather(r, head, head_len, tail, tail_len);
}

static void local_close(accel_ctx *ctx) {
  remote *r = remote_of(ctx);
  atomic_store(&r->rings_closing, true); /* a writer waiting for room in the ring leaves */
  if (r->fd >= 0)
    shutdown(r->fd, SHUT_RDWR); /* wakes a waiter reading and any blocked sender */
  local_reader_stop(ctx);       /* the receiver reports the end, once, and stops */
  sendq_stop(r);                /* and the writer */
  if (r->fd >= 0)
    close(r->fd);
  r->fd = -1;
  proto_reader_free(&r->reader);
  rings_free(r);
}

const remote_link remote_local_link = {
    .open = local_open,
    .send = stream_send,
    .close = local_close,
    .send_gather = stream_send_gather, /* a write's bytes straight from the caller's memory */
    .send_fd = sendq_send_fd,
    .offer_help = local_offer_help,
    .caps = PROTO_CAP_BATCH,
    .shm = true,
    .rings = true,
};

const remote_link remote_tcp_link = {
    .open = tcp_open,
    .send = stream_send,
    .close = local_close,
    .send_gather = stream_send_gather,
    .send_fd = NULL, /* no descriptors cross TCP: no shared memory either */
    .offer_help = local_offer_help,
    .caps = PROTO_CAP_BATCH,
    .shm = false,
};
