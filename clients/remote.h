/* libaccel's remote transport, shared by its links (clients/remote*.c).
 *
 * remote.c speaks the protocol: the pending table (request id -> op or waiter), HELLO,
 * controls, replies matched by id in any order. A *link* carries the bytes: remote_local.c
 * over the daemon's own Unix-socket transport (ipc://, unix://), remote_nng.c over nng
 * (tcp://, tls+tcp://). A link delivers each received frame to remote_on_frame() from its
 * receiving thread, and calls remote_on_lost() once when the connection is gone. */
#ifndef CLIENT_REMOTE_H
#define CLIENT_REMOTE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "clients/ctx.h"
#include "proto/local.h"
#include "proto/wire.h"

#define REMOTE_BUCKETS 4096u

typedef struct remote remote;
typedef struct pending pending;

typedef struct remote_link {
  /* Connects and starts receiving. 0, or ACCEL_ECLOSED (nothing listens), ACCEL_EPERM... */
  int (*open)(accel_ctx *ctx, const char *url);
  /* Sends whole frames (one or more back to back) of a request with id `id` (any thread).
   * 0 or ACCEL_ECLOSED / ACCEL_ENOMEM. */
  int (*send)(remote *r, const uint8_t *bytes, size_t len, uint64_t id);
  /* Stops receiving and frees the link's state; no callback of the link runs afterwards.
   * Never blocks for long, whatever the daemon does. */
  void (*close)(accel_ctx *ctx);
  uint32_t caps; /* PROTO_CAP_* this link asks for in HELLO */
} remote_link;

struct remote {
  const remote_link *link;
  pthread_mutex_t mu; /* guards the table, next_id, dead */
  pending *table[REMOTE_BUCKETS];
  uint64_t next_id;
  bool dead;
  atomic_int conn_error;   /* a REPLY with request id 0: why the daemon closed us */
  atomic_uint max_body;    /* bytes a received frame's body may have (the daemon's limit) */
  proto_welcome welcome;
  /* nng's link */
  void *nng;
  /* the local link */
  int fd;
  pthread_t rx;
  bool rx_started;
  pthread_mutex_t send_mu; /* one writer at a time: frames stay whole in the stream */
  proto_reader reader;
};

static inline remote *remote_of(accel_ctx *ctx) {
  return ctx->impl;
}

/* From a link's receiving thread. */
void remote_on_frame(accel_ctx *ctx, const uint8_t *frame, size_t len);
/* Several frames back to back (PROTO_CAP_BATCH). */
void remote_on_message(accel_ctx *ctx, const uint8_t *p, size_t len);
/* The connection is gone: every pending request completes (ACCEL_ECLOSED or conn_error). */
void remote_on_lost(accel_ctx *ctx);

extern const remote_link remote_local_link;
extern const remote_link remote_nng_link;

#endif
