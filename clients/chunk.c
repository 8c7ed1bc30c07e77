/* Chunked transfers and the per-context send queue (chunk.h).
 *
 * Order. The daemon keeps issue order per buffer in the order ops arrive. A transfer's chunks
 * go out a window at a time, so an op the caller issues after accel_write() returned could
 * otherwise overtake chunks not sent yet. So a context with a transfer in progress gets a
 * *gate*: every op it issues from then on (any kind, any buffer: the simple rule, and
 * buffer create/destroy included) joins the gate's queue, and the queue is sent in issue
 * order, each transfer's chunks in place of its op. Sending every chunk envelope at once and
 * throttling only bytes is not possible: a WRITE's envelope carries its bytes.
 *
 * Memory. At most CHUNK_WINDOW chunks of a context are in flight, and no more bytes than twice
 * max_op_bytes (window_of), and the gate lives until the last one is answered, so
 * back-to-back transfers share one window: the daemon holds at most 64 MiB of ours for
 * chunked transfers (written bytes or read replies), within its per-connection budget.
 *
 * Threads. Each gate has a sender thread of its own, which makes every send of the gate's
 * ops. Completions come back as `then` callbacks of futures of our own (one per chunk, one
 * per queued op, which relays to the caller's), on the context's runtime loop; they never
 * send, they only count and wake the sender. Sends are kept off the loop (accel_post): a send
 * may wait for an answer (the local link attaches a shared-memory staging region first,
 * which would be ACCEL_EDEADLK there), and over nng a send waits while the link's next
 * message is full or max_in_flight ops are unanswered (remote_nng.c, remote.c op_room); if
 * the daemon dies just then it waits until the link notices or is closed in accel_close(),
 * after accel_finish(). The completions
 * that fail everything with ACCEL_ECLOSED must run meanwhile, so the thread that may be stuck
 * is one that accel_finish does not wait for; after a send it touches only its gate.
 *
 * Errors. A chunk that fails fails its transfer with that status and no further chunk of it
 * is sent; chunks already in flight are waited for, so the caller's buffer is free when the
 * transfer's future completes. An ACCEL_ECLOSED (the daemon is gone or draining: anything
 * sent later would get it too) also fails every op still queued, without sending it.
 *
 * Locking: one mutex for every gate (they are few and short-lived); never held while sending
 * or completing a future. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "clients/chunk.h"
#include "runtime/alloc.h"

typedef struct gate gate;

/* One chunked transfer: the caller's op, sent as chunks of `chunk` elements. */
typedef struct xfer {
  gate *g;
  dev_call *call;     /* the caller's: its future and in-flight count settle at the end */
  size_t esize;       /* bytes per element */
  uint64_t chunk;     /* elements per chunk */
  unsigned window;    /* at most this many chunks of the context in flight while it sends */
  uint64_t sent;      /* elements handed to the transport so far */
  unsigned in_flight; /* its chunks sent and not yet answered */
  int status;         /* the first error */
} xfer;

/* An op waiting in a gate's queue: a transfer (x), or a plain op, which once sent is relayed:
 * its own future is ours, and `user` (the caller's future, if any) follows it. */
typedef struct entry {
  struct entry *next;
  gate *g;
  dev_call *call;
  xfer *x;
  accel_future *user;
  bool text; /* a module load: its future's value (the build log, a string) is relayed too */
} entry;

struct gate {
  gate *next; /* the registry of linked gates */
  accel_ctx *ctx;
  pthread_cond_t cv;  /* the sender waits here for work or completions */
  entry *head, *tail; /* ops issued after `active`, in issue order */
  xfer *active;       /* the transfer whose chunks are being sent */
  unsigned chunks;    /* chunks in flight (the window) */
  unsigned relays;    /* plain ops sent and not yet relayed */
  bool linked;        /* found by its context's next ops */
  bool closed;        /* an op got ACCEL_ECLOSED: nothing more is sent */
};

static pthread_mutex_t gates_mu = PTHREAD_MUTEX_INITIALIZER;
static gate *gates;
static atomic_uint gates_linked; /* 0: every op goes straight to its transport */

/* What the sender does next, outside the lock: one of the three. */
typedef struct work {
  xfer *chunk_of; /* send elements [first, first + n) of it */
  uint64_t first, n;
  entry *plain; /* send this queued op */
  xfer *finish; /* complete this transfer */
} work;

/* ---- completing ops ---- */

/* As the transport completes an op it took. */
static void op_finish(accel_ctx *ctx, dev_call *call, int status) {
  status = client_op_settle(ctx, &call->op, status);
  if (call->future) {
    accel_future_complete(call->future, status, NULL, NULL);
    accel_future_release(call->future);
  }
  dev_call_free(call);
  client_op_done(ctx, status);
}

static void in_flight_add(accel_ctx *ctx) {
  pthread_mutex_lock(&ctx->done_mu);
  ctx->in_flight++;
  pthread_mutex_unlock(&ctx->done_mu);
}

static void xfer_finish(accel_ctx *ctx, xfer *x) {
  dev_call *call = x->call;
  int status = x->status;
  rt_free(x);
  op_finish(ctx, call, status);
}

/* Ops that waited in a closed gate: ACCEL_ECLOSED, never sent. */
static void flush_finish(accel_ctx *ctx, entry *list) {
  while (list) {
    entry *e = list;
    list = e->next;
    if (e->x) {
      e->x->status = ACCEL_ECLOSED;
      xfer_finish(ctx, e->x);
    } else {
      op_finish(ctx, e->call, ACCEL_ECLOSED);
    }
    rt_free(e);
  }
}

/* ---- gates (gates_mu held) ---- */

static gate *gate_find(const accel_ctx *ctx) {
  gate *g = gates;
  while (g && g->ctx != ctx)
    g = g->next;
  return g;
}

static void gate_unlink(gate *g) {
  if (!g->linked)
    return;
  gate **link = &gates;
  while (*link != g)
    link = &(*link)->next;
  *link = g->next;
  g->linked = false;
  atomic_fetch_sub(&gates_linked, 1);
}

static bool gate_idle(const gate *g) {
  return g->head == NULL && g->active == NULL && g->chunks == 0 && g->relays == 0;
}

/* After any change: an idle gate is unlinked at once (the context's next ops go straight to
 * the transport, everything before them having been sent), and its sender exits. */
static void gate_settle(gate *g) {
  if (gate_idle(g))
    gate_unlink(g);
  pthread_cond_signal(&g->cv);
}

/* Stops the gate for good; returns its queue for flush_finish(). */
static entry *gate_close(gate *g) {
  if (g->closed)
    return NULL;
  g->closed = true;
  gate_unlink(g);
  entry *list = g->head;
  g->head = g->tail = NULL;
  return list;
}

static void gate_append(gate *g, entry *e) {
  e->g = g;
  if (e->x)
    e->x->g = g;
  if (g->tail)
    g->tail->next = e;
  else
    g->head = e;
  g->tail = e;
  pthread_cond_signal(&g->cv);
}

/* ---- completions (the loop thread, or the sender when a chunk cannot even be made) ---- */

static void chunk_done(xfer *x, int status) {
  pthread_mutex_lock(&gates_mu);
  gate *g = x->g;
  accel_ctx *ctx = g->ctx;
  x->in_flight--;
  g->chunks--;
  if (status < 0 && x->status == 0)
    x->status = status;
  entry *flushed = status == ACCEL_ECLOSED ? gate_close(g) : NULL;
  bool done = x->in_flight == 0 && (x->status != 0 || x->sent == x->call->op.bufs[0].count);
  if (done && g->active == x)
    g->active = NULL;
  gate_settle(g);
  pthread_mutex_unlock(&gates_mu); /* g is the sender's from here */
  if (done)
    xfer_finish(ctx, x);
  flush_finish(ctx, flushed);
}

static void on_chunk(accel_future *f, int status, void *arg) {
  chunk_done(arg, status);
}

/* A queued op's answer: to the caller's future, then the gate's count, then (last: the
 * context may be closed after it) the relay's own in-flight count. */
static void on_relay(accel_future *f, int status, void *arg) {
  entry *e = arg;
  gate *g = e->g;
  if (e->user) {
    const char *text = e->text && f ? accel_future_value(f) : NULL;
    char *copy = text ? rt_strdup(text) : NULL; /* the relay's future frees its own */
    accel_future_complete(e->user, status, copy, copy ? rt_free : NULL);
    accel_future_release(e->user);
  }
  rt_free(e);
  pthread_mutex_lock(&gates_mu);
  accel_ctx *ctx = g->ctx;
  g->relays--;
  entry *flushed = status == ACCEL_ECLOSED ? gate_close(g) : NULL;
  gate_settle(g);
  pthread_mutex_unlock(&gates_mu);
  flush_finish(ctx, flushed);
  client_op_done(ctx, 0);
}

/* ---- the sender ---- */

static void take_chunk(gate *g, xfer *x, work *w) {
  uint64_t left = x->call->op.bufs[0].count - x->sent;
  w->chunk_of = x;
  w->first = x->sent;
  w->n = left < x->chunk ? left : x->chunk;
  x->sent += w->n;
  x->in_flight++;
  g->chunks++;
}

/* The next thing to do, in issue order; false: nothing until a completion or a new op. */
static bool next_work(gate *g, work *w) {
  for (;;) {
    xfer *x = g->active;
    if (x) {
      if (g->closed && x->status == 0)
        x->status = ACCEL_ECLOSED;
      if (x->status == 0 && x->sent < x->call->op.bufs[0].count) {
        if (g->chunks >= x->window)
          return false;
        take_chunk(g, x, w);
        return true;
      }
      g->active = NULL;        /* every chunk is out (or it failed): it holds nothing back now */
      if (x->in_flight == 0) { /* failed between chunks: no answer left to finish it */
        w->finish = x;
        return true;
      }
      continue;
    }
    entry *e = g->head;
    if (e == NULL)
      return false;
    g->head = e->next;
    if (g->head == NULL)
      g->tail = NULL;
    if (e->x) {
      g->active = e->x;
      rt_free(e);
      continue;
    }
    g->relays++;
    w->plain = e;
    return true;
  }
}

/* A chunk: the caller's op narrowed to [first, first + n), with a future of ours whose
 * `then` counts it (the future's one reference is the op's, as the transport expects). */
static dev_call *chunk_call(accel_ctx *ctx, xfer *x, uint64_t first, uint64_t n) {
  dev_call *c = rt_malloc(sizeof *c);
  if (c == NULL)
    return NULL;
  *c = *x->call;
  dev_op *op = &c->op;
  op->bufs[0].offset += first;
  op->bufs[0].count = n;
  if (op->h.kind == DEV_OP_WRITE) {
    op->u.write.src = (const char *)op->u.write.src + first * x->esize;
    op->u.write.bytes = n * x->esize;
  } else {
    op->u.read.dst = (char *)op->u.read.dst + first * x->esize;
    op->u.read.bytes = n * x->esize;
  }
  if (accel_future_create(ctx->rt, &c->future) != 0) {
    rt_free(c);
    return NULL;
  }
  accel_future_then(c->future, on_chunk, x);
  return c;
}

static void send_chunk(accel_ctx *ctx, xfer *x, uint64_t first, uint64_t n) {
  dev_call *c = chunk_call(ctx, x, first, n);
  if (c == NULL) {
    chunk_done(x, ACCEL_ENOMEM);
    return;
  }
  in_flight_add(ctx); /* the transport settles it with client_op_done */
  int rc = ctx->tp->send_op(ctx, c);
  if (rc == 0)
    return; /* x may be finished and freed already */
  pthread_mutex_lock(&gates_mu);
  if (x->status == 0)
    x->status = rc; /* send no more of it: x lives until this chunk's `then` */
  pthread_mutex_unlock(&gates_mu);
  op_finish(ctx, c, rc);
}

/* A queued op goes out with a future of ours (and one more in-flight count, so that
 * accel_finish waits for the relay), so that its ACCEL_ECLOSED is seen here too. */
static void send_plain(accel_ctx *ctx, entry *e) {
  dev_call *call = e->call;
  accel_future *relay;
  in_flight_add(ctx);
  if (accel_future_create(ctx->rt, &relay) != 0) {
    op_finish(ctx, call, ACCEL_ENOMEM); /* the caller's future, directly */
    on_relay(NULL, ACCEL_ENOMEM, e);
    return;
  }
  e->user = call->future;
  e->text = call->op.h.kind == DEV_OP_MODULE_LOAD;
  call->future = relay;
  accel_future_then(relay, on_relay, e);
  int rc = ctx->tp->send_op(ctx, call);
  if (rc != 0)
    op_finish(ctx, call, rc);
}

static void do_work(accel_ctx *ctx, const work *w) {
  if (w->chunk_of)
    send_chunk(ctx, w->chunk_of, w->first, w->n);
  else if (w->plain)
    send_plain(ctx, w->plain);
  else
    xfer_finish(ctx, w->finish);
}

static void *sender_main(void *arg) {
  gate *g = arg;
  accel_ctx *ctx = g->ctx; /* used only while the work at hand holds an in-flight count */
  pthread_mutex_lock(&gates_mu);
  for (;;) {
    work w = {0};
    if (next_work(g, &w)) {
      gate_settle(g);
      pthread_mutex_unlock(&gates_mu);
      do_work(ctx, &w);
      pthread_mutex_lock(&gates_mu);
    } else if (gate_idle(g)) {
      break;
    } else {
      pthread_cond_wait(&g->cv, &gates_mu);
    }
  }
  gate_unlink(g);
  pthread_mutex_unlock(&gates_mu);
  pthread_cond_destroy(&g->cv);
  rt_free(g);
  return NULL;
}

/* A linked gate for ctx and its sender thread (gates_mu held). */
static int gate_open(accel_ctx *ctx, gate **out) {
  gate *g = rt_calloc(1, sizeof *g);
  if (g == NULL)
    return ACCEL_ENOMEM;
  g->ctx = ctx;
  pthread_cond_init(&g->cv, NULL);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  int rv = pthread_create(&t, &attr, sender_main, g);
  pthread_attr_destroy(&attr);
  if (rv != 0) {
    pthread_cond_destroy(&g->cv);
    rt_free(g);
    return ACCEL_ESYS;
  }
  g->next = gates;
  gates = g;
  g->linked = true;
  atomic_fetch_add(&gates_linked, 1);
  *out = g;
  return 0;
}

/* ---- entry ---- */

/* 1 if op is a WRITE or READ too large for one op of the transport (*esize: its element
 * size), 0 if it goes whole, or an error. */
static int is_large(accel_ctx *ctx, const dev_op *op, size_t *esize) {
  if (ctx->max_op_bytes == 0 || (op->h.kind != DEV_OP_WRITE && op->h.kind != DEV_OP_READ))
    return 0;
  accel_dtype dtype;
  size_t count;
  int rc = client_handle_get(ctx, op->bufs[0].handle, &dtype, &count);
  if (rc != 0)
    return rc;
  *esize = dev_dtype_size(dtype);
  return op->bufs[0].count > ctx->max_op_bytes / *esize;
}

/* CHUNK_WINDOW chunks, but no more bytes than 2 * max_op_bytes: the daemon's budget per
 * connection (requests held, read replies not yet taken) is never below twice its
 * max_message, so a window within it is not refused with ACCEL_EBUSY for its size. */
static unsigned window_of(size_t max_op_bytes, uint64_t chunk_bytes) {
  uint64_t n = 2 * (uint64_t)max_op_bytes / chunk_bytes;
  return n < 1 ? 1 : n > CHUNK_WINDOW ? CHUNK_WINDOW : (unsigned)n;
}

static xfer *xfer_new(accel_ctx *ctx, dev_call *call, size_t esize) {
  xfer *x = rt_calloc(1, sizeof *x);
  if (x == NULL)
    return NULL;
  size_t bytes = ctx->max_op_bytes < CHUNK_MAX_BYTES ? ctx->max_op_bytes : CHUNK_MAX_BYTES;
  x->call = call;
  x->esize = esize;
  x->chunk = bytes / esize ? bytes / esize : 1; /* whole elements */
  x->window = window_of(ctx->max_op_bytes, x->chunk * esize);
  return x;
}

/* A queue entry: a plain op (esize 0) or a transfer of esize-byte elements. */
static entry *entry_new(accel_ctx *ctx, dev_call *call, size_t esize) {
  entry *e = rt_calloc(1, sizeof *e);
  if (e == NULL)
    return NULL;
  if (esize == 0)
    e->call = call;
  else if ((e->x = xfer_new(ctx, call, esize)) == NULL) {
    rt_free(e);
    return NULL;
  }
  return e;
}

static int enqueue(accel_ctx *ctx, dev_call *call, size_t esize) {
  entry *e = entry_new(ctx, call, esize);
  if (e == NULL)
    return ACCEL_ENOMEM;
  pthread_mutex_lock(&gates_mu);
  gate *g = gate_find(ctx);
  int rc = 0;
  if (g == NULL && e->x == NULL) { /* the gate finished meanwhile: straight on */
    pthread_mutex_unlock(&gates_mu);
    rt_free(e);
    return ctx->tp->send_op(ctx, call);
  }
  if (g == NULL)
    rc = gate_open(ctx, &g);
  if (rc == 0)
    gate_append(g, e);
  pthread_mutex_unlock(&gates_mu);
  if (rc != 0) {
    rt_free(e->x);
    rt_free(e);
  }
  return rc;
}

/* A module's code (and its options) cannot be split: it must fit in one op of the transport.
 * Checked here, so that it fails at the call even when the op would wait behind a transfer. */
static bool module_too_large(const accel_ctx *ctx, const dev_op *op) {
  if (ctx->max_op_bytes == 0 || op->h.kind != DEV_OP_MODULE_LOAD)
    return false;
  size_t options = op->u.module.options ? strlen(op->u.module.options) : 0;
  return op->u.module.len > ctx->max_op_bytes || options > ctx->max_op_bytes - op->u.module.len;
}

int chunk_send(accel_ctx *ctx, dev_call *call) {
  if (module_too_large(ctx, &call->op))
    return ACCEL_ELIMIT;
  size_t esize = 0;
  int rc = is_large(ctx, &call->op, &esize);
  if (rc < 0)
    return rc;
  if (rc == 0 && atomic_load(&gates_linked) == 0)
    return ctx->tp->send_op(ctx, call);
  return enqueue(ctx, call, rc ? esize : 0);
}
