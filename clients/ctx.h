/* The client context of libaccel, embedded mode: a runtime of its own, the device tree, one
 * session, and the client-side handle table that lets every call check its arguments at once.
 * The handle table is the client's view (dtype and count per live handle); the session keeps
 * its own and re-checks, as the daemon will have to for untrusted clients. */
#ifndef CLIENT_CTX_H
#define CLIENT_CTX_H

#include <pthread.h>

#include "accel/accel.h"
#include "actors/op.h"
#include "actors/world.h"

typedef struct client_handle {
  uint32_t gen;   /* bumped on destroy; never 0 for a live one */
  bool live;
  accel_dtype dtype;
  size_t count;
  uint32_t next_free;
} client_handle;

struct accel_ctx {
  accel_runtime *rt;
  dev_world world;
  accel_ref devices, session;
  uint32_t max_buffers;
  uint32_t tag; /* 16 bits in every handle of this context */

  pthread_mutex_t mu; /* guards the handle table */
  client_handle *handles;
  uint32_t free_head;

  pthread_mutex_t done_mu; /* guards the in-flight count and first error */
  pthread_cond_t done_cv;
  uint64_t in_flight;
  int first_error;
};

/* Looks up a live handle: its dtype and count. ACCEL_ESTALE if it is not one of ours. */
int client_handle_get(accel_ctx *ctx, accel_buffer h, accel_dtype *dtype, size_t *count);

/* Sends a filled envelope (h.kind, bufs, payload) to the session; makes the future. On error
 * the op is freed and no future made. */
int client_submit(accel_ctx *ctx, dev_op *op, accel_device dev, accel_future **f);

#endif
