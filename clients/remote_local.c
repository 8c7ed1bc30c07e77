/* The local link of the remote transport (clients/remote.h): the daemon's own Unix-socket
 * transport for ipc:// and unix:// URLs (proto/local.h). A stream carries whole frames, so
 * nothing is dropped and no acknowledgements are needed; one thread per context reads
 * replies; senders write whole frames under a mutex. Closing shuts the socket down, which
 * ends the reading thread at once, whatever the daemon does: accel_close() cannot hang. */
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clients/remote.h"
#include "clients/remote_dial.h"

/* Out of memory for a frame's bytes: they wait in the socket, so the reader waits too (this is
 * its own thread) and tries again, 1 ms then doubling, for about 4 s in all before it gives
 * the connection up. False when it is time to give up. */
static bool wait_for_memory(int *tries) {
  if (*tries >= 12)
    return false;
  struct timespec d = {.tv_nsec = (1L << *tries) * 1000000L};
  if (d.tv_nsec >= 1000000000L)
    d = (struct timespec){.tv_sec = d.tv_nsec / 1000000000L, .tv_nsec = d.tv_nsec % 1000000000L};
  nanosleep(&d, NULL);
  ++*tries;
  return true;
}

static void *receiver(void *arg) {
  accel_ctx *ctx = arg;
  remote *r = remote_of(ctx);
  int tries = 0;
  for (;;) {
    const uint8_t *frame;
    long long n = proto_reader_next(&r->reader, r->fd, atomic_load(&r->max_body), &frame);
    if (n == ACCEL_ENOMEM && wait_for_memory(&tries))
      continue; /* the reader kept what it had: the next call goes on from there */
    if (n < 0)
      break; /* closed, or bytes that are not a frame of ours: the stream is lost */
    tries = 0;
    remote_on_frame(ctx, frame, (size_t)n);
  }
  remote_on_lost(ctx);
  return NULL;
}

static int local_open(accel_ctx *ctx, const char *url) {
  remote *r = remote_of(ctx);
  int fd = client_local_connect(url);
  if (fd < 0)
    return fd;
  r->fd = fd;
  if (pthread_create(&r->rx, NULL, receiver, ctx) != 0)
    return ACCEL_ESYS;
  r->rx_started = true;
  return 0;
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
    shutdown(r->fd, SHUT_RDWR); /* wakes the receiver and any blocked sender */
  if (r->rx_started)
    pthread_join(r->rx, NULL);
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
    .caps = PROTO_CAP_BATCH,
    .shm = true,
};
