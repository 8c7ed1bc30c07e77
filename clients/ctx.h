/* The client context of libaccel: what embedded and remote modes share (the handle table
 * that lets every call check its arguments at once, in-flight accounting for accel_finish,
 * futures), and the transport that carries ops (embedded: to the in-process session; remote:
 * over nng to acceld). The handle table is the client's view (dtype and count per live
 * handle); the session keeps its own and checks again, as it must for untrusted clients. */
#ifndef CLIENT_CTX_H
#define CLIENT_CTX_H

#include <pthread.h>
#include <stdbool.h>

#include "accel/accel.h"
#include "ops/call.h"
#include "runtime/attr.h"

typedef enum client_handle_kind {
  CLIENT_H_BUFFER = 0,
  CLIENT_H_MODULE,
  CLIENT_H_KERNEL
} client_handle_kind;

typedef struct client_handle {
  uint32_t gen; /* bumped on destroy; never 0 in its low 16 bits */
  bool live;
  uint8_t kind; /* client_handle_kind */
  accel_dtype dtype;
  size_t count;
  uint32_t next_free;
  /* A module: the slots of its kernels' handles (freed with it). A kernel: its module's
   * handle and its name. */
  uint32_t *kernels;
  uint32_t nkernels;
  uint64_t module;
  char *name;
  /* A buffer whose create failed (creates are pipelined: the caller did not wait for it): its
   * error, with which every later op on it completes (client_op_settle), until destroyed. */
  int failed;
  /* A buffer's exports not yet released (accel_buffer_export), so that a release too many is
   * refused by the call itself, with its reason. */
  uint32_t exports;
} client_handle;

typedef struct client_transport {
  /* Takes the call (with its future set, if any) on success; on failure it stays the
   * caller's. The transport calls client_op_done() once per op it took. */
  int (*send_op)(accel_ctx *ctx, dev_call *call);
  int (*device_count)(accel_ctx *ctx);
  int (*device_info)(accel_ctx *ctx, accel_device dev, struct accel_device_info *out);
  int (*inject_fault)(accel_ctx *ctx, accel_device dev);
  int (*transfer_stats)(accel_ctx *ctx, accel_transfer_stats *out);
  /* After every op finished: stop and free the transport's state. */
  void (*close)(accel_ctx *ctx);
  /* accel_host_alloc / accel_host_free (NULL: client_host_alloc_plain and free). */
  int (*host_alloc)(accel_ctx *ctx, size_t bytes, void **out);
  int (*host_free)(accel_ctx *ctx, void *p);
} client_transport;

/* Page-aligned host memory, for transports with nothing better. */
RT_MUST_USE int client_host_alloc_plain(size_t bytes, void **out);

struct accel_ctx {
  const client_transport *tp;
  void *impl;        /* the transport's state */
  accel_runtime *rt; /* runs `then` callbacks (and, embedded, everything else) */
  uint32_t max_buffers;
  dev_call_pool *call_pool; /* where calls come from (the transport's); NULL: allocated each time */
  uint32_t tag;             /* 16 bits in every handle of this context */
  /* The most bytes of data one WRITE or READ op may carry through the transport (0: no
   * limit). Larger transfers are split into chunks (clients/chunk.c). Set at open. */
  size_t max_op_bytes;

  pthread_mutex_t mu; /* guards the handle table */
  client_handle *handles;
  uint32_t free_head;

  pthread_mutex_t done_mu; /* guards the in-flight count and first error */
  pthread_cond_t done_cv;
  uint64_t in_flight;
  int first_error;
};

extern const client_transport client_embedded_transport;
extern const client_transport client_remote_transport;

/* Makes ctx's common parts (handle table, locks, tag). */
RT_MUST_USE int client_ctx_init(accel_ctx *ctx, uint32_t max_buffers);
void client_ctx_free(accel_ctx *ctx);

/* Transports' open functions: fill ctx->tp, ctx->impl, ctx->rt. */
RT_MUST_USE int client_embedded_open(accel_ctx *ctx, const char *query);
RT_MUST_USE int client_remote_open(accel_ctx *ctx, const char *url);

/* Embedded contexts: 0 if device dev's memory can be shared with other libraries of the
 * process (accel_buffer_export, accel_buffer_import), else ACCEL_EINVAL or ACCEL_ENOTSUP with
 * the detail set. */
int client_embedded_share_check(accel_ctx *ctx, accel_device dev);

/* Looks up a live buffer handle: its dtype and count. ACCEL_ESTALE if it is not one of ours. */
int client_handle_get(accel_ctx *ctx, accel_buffer h, accel_dtype *dtype, size_t *count);
/* The live handle h of that kind (its slot's entry), or NULL; the caller holds ctx->mu. */
client_handle *client_handle_entry(accel_ctx *ctx, uint64_t h, client_handle_kind kind);
/* A new handle of that kind (buffers: with dtype and count); ACCEL_ELIMIT if the table is
 * full. The caller holds ctx->mu. */
RT_MUST_USE int client_handle_alloc_locked(accel_ctx *ctx, client_handle_kind kind,
                                           accel_dtype dtype, size_t count, uint64_t *out);
void client_handle_free_locked(accel_ctx *ctx, uint32_t slot);
/* Sends a call's op as it is, checked or not (send_op in ctx.c). */
RT_MUST_USE int client_send(accel_ctx *ctx, dev_call *call, accel_future **f);

/* The math accel_set_math chose for this thread's sgemms. */
accel_math client_thread_math(void);
/* Checks a call's op against the handle table and sends it; makes the future. On error the
 * call is freed and no future made. */
RT_MUST_USE int client_submit(accel_ctx *ctx, dev_call *call, accel_device dev, accel_future **f);

/* An op the transport took has finished (any thread). */
void client_op_done(accel_ctx *ctx, int status);
/* Work the transport does for the client's ops besides the ops themselves (embedded: their
 * transfers) counts in flight too, from here until a client_op_done with status 0. */
void client_work_begin(accel_ctx *ctx);
/* An op's status as its caller should see it, as it finishes (before client_op_done): a
 * create that failed marks its handle; an op that found no buffer behind a handle whose
 * create failed gets the create's error rather than ACCEL_ESTALE. */
int client_op_settle(accel_ctx *ctx, const dev_op *op, int status);

/* The session/daemon's limits on a client's buffer table size. */
#define CLIENT_DEFAULT_MAX_BUFFERS 65536u

#endif
