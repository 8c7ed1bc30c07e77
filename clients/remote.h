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
#include "runtime/attr.h"
#include "runtime/shm_ring.h"

#define REMOTE_BUCKETS 4096u

typedef struct remote remote;
typedef struct pending pending;
typedef struct shm_region shm_region; /* remote_shm.c */
typedef struct local_gate local_gate; /* remote_local_read.c */
typedef struct send_queue send_queue; /* remote_send_queue.c */

typedef struct remote_link {
  /* Connects and starts receiving. 0, or ACCEL_ECLOSED (nothing listens), ACCEL_EPERM... */
  int (*open)(accel_ctx *ctx, const char *url);
  /* Sends whole frames (one or more back to back) of a request with id `id` (any thread).
   * 0 or ACCEL_ECLOSED / ACCEL_ENOMEM. */
  int (*send)(remote *r, const uint8_t *bytes, size_t len, uint64_t id);
  /* Stops receiving and frees the link's state; no callback of the link runs afterwards.
   * Never blocks for long, whatever the daemon does. */
  void (*close)(accel_ctx *ctx);
  /* Sends one frame in two parts, head then tail, as one (NULL: the caller joins them). */
  int (*send_gather)(remote *r, const uint8_t *head, size_t head_len, const uint8_t *tail,
                     size_t tail_len, uint64_t id);
  /* Sends frames with a descriptor attached to their first byte (NULL: the link cannot). */
  int (*send_fd)(remote *r, const uint8_t *bytes, size_t len, int fd);
  /* Offers the op's future help (runtime/future_help.h): a thread that waits on it reads the
   * connection itself (NULL: the link's own thread always does). Before the op is sent. */
  void (*offer_help)(accel_ctx *ctx, accel_future *f);
  uint32_t caps; /* PROTO_CAP_* this link asks for in HELLO */
  bool shm;      /* the shared-memory data plane (remote_shm.c) */
  bool rings;    /* frames through shared rings (remote_rings.c), if the daemon takes them */
  /* The daemon cannot stop reading this link (nng): past WELCOME's max_in_flight it would
   * refuse ops (ACCEL_EBUSY), so a sender waits while that many ops are unanswered. A local
   * stream is paused by the daemon instead, and its sender waits in the socket. */
  bool credit;
} remote_link;

struct remote {
  const remote_link *link;
  pthread_mutex_t mu;  /* guards the table, next_id, dead, senders, ops_out */
  pthread_cond_t idle; /* senders reached 0 */
  uint32_t senders;    /* threads inside a send: remote_free waits for them */
  pthread_cond_t room; /* ops_out went down, or the connection died (link->credit) */
  uint32_t ops_out;    /* ops in the table: sent (or being sent), not yet answered */
  pending *table[REMOTE_BUCKETS];
  uint64_t next_id;
  bool dead;
  atomic_int conn_error; /* a REPLY with request id 0: why the daemon closed us */
  atomic_uint max_body;  /* bytes a received frame's body may have (the daemon's limit) */
  proto_welcome welcome;
  /* nng's link */
  void *nng;
  /* the stream links: local (ipc://) and tcp:// */
  int fd;
  send_queue *sendq; /* their sending (remote_send_queue.c) */
  pthread_t rx;
  bool rx_started;
  proto_reader reader;
  int rx_epfd, rx_stop;  /* the receiver's epoll set: the socket (one-shot) and a stop eventfd */
  int rx_kick;           /* and, on rings, an eventfd: bytes wait in the ring, read them */
  pthread_mutex_t rd_mu; /* one reader at a time: reader, rd_helping, rd_lost, the arming */
  bool rd_helping;       /* a waiting thread reads: the receiver's watch is off */
  bool rd_lost;          /* the connection's end was seen and reported */
  uint64_t rd_wait_ns;   /* under rd_mu: how long a reading waiter's wait lasts, a moving mean */
  bool rx_made;          /* rx_epfd, rx_stop and rd_mu exist (remote_local_read.c) */
  local_gate *gate;      /* where helpers register before they read */
  /* the local link's shared rings (remote_rings.c): set once the WELCOME took them */
  bool rings;
  uint8_t *rings_base;
  rt_ring up;                 /* under the send queue's writing: requests */
  rt_ring down;               /* under rd_mu: replies */
  bool rings_eof;             /* under rd_mu: the socket ended */
  _Atomic bool rings_closing; /* a writer waiting for room gives up */
  /* the shared-memory data plane (remote_shm.c) */
  pthread_mutex_t shm_mu; /* guards regions, staging_bytes */
  shm_region *regions;
  size_t staging_bytes;
  atomic_uint_fast64_t next_region;
  /* ops' records kept for the next ops (ops/op_pool.c): past malloc's per-thread caches, a
   * record was a calloc and a free per op */
  dev_call_pool calls;
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

/* One control request and its answer (waits; never from the link's receiving thread). fd
 * >= 0 travels with it. On success *out (may be NULL) gets a malloc'd copy of the data. */
RT_MUST_USE int remote_control(accel_ctx *ctx, uint32_t command, uint64_t arg, int fd,
                               uint8_t **out, size_t *out_len);

/* remote_shm.c. prepare: 1 if op's data goes through shared memory (*ref set; *staging the
 * staging region it took, or NULL for the user's own shared memory), 0 to send it inline. */
RT_MUST_USE int remote_shm_prepare(accel_ctx *ctx, dev_op *op, proto_shm_ref *ref,
                                   shm_region **staging);
/* The op finished: a read's bytes leave the staging region; the region goes back. */
void remote_shm_complete(remote *r, dev_op *op, shm_region *staging, int status);
RT_MUST_USE int remote_host_alloc(accel_ctx *ctx, size_t bytes, void **out);
RT_MUST_USE int remote_host_free(accel_ctx *ctx, void *p);
void remote_shm_free_all(remote *r);

/* remote_rings.c: the local link's shared rings (proto/local_rings.h). */
/* Before HELLO: a region to offer (its descriptor, to pass with the HELLO), or -1 (this link
 * has none, ACCEL_LOCAL_RINGS=0, or it could not be made). */
int rings_offer(remote *r);
/* After WELCOME: the rings are used (accepted) or dropped. */
void rings_welcome(remote *r, bool accepted);
/* Writes a frame (head, then tail) into the ring, waiting for room; its descriptor, if any,
 * first on the socket. One writer at a time (the send queue's rule). 0 or ACCEL_ECLOSED. */
RT_MUST_USE int rings_write(remote *r, const uint8_t *head, size_t head_len, const uint8_t *tail,
                            size_t tail_len, int fd_pass);
/* rd_mu held: reads the socket's bells; ACCEL_ECLOSED once it ended, else 0. */
int rings_drain_socket(remote *r);
/* rd_mu held: the reader says it sleeps (then looks at the ring: true if something came) or
 * polls (the daemon need not ring). */
bool rings_reader_sleeps(remote *r, bool sleeps);
/* After both threads stopped. */
void rings_free(remote *r);

/* remote_local_read.c: the local link's reading (its receiver thread, and waiters that read
 * their replies themselves). */
RT_MUST_USE int local_reader_start(accel_ctx *ctx);
void local_reader_stop(accel_ctx *ctx);
void local_offer_help(accel_ctx *ctx, accel_future *f);

/* remote_send_queue.c: the stream links' sending, frames gathered while others are in
 * flight. The remote_link entries, once started. */
RT_MUST_USE int sendq_start(remote *r);
/* In the link's close, after the socket was shut down (a writer blocked in send(2) leaves
 * then): the writer ends, and every send from here on is ACCEL_ECLOSED. No-op if never
 * started. */
void sendq_stop(remote *r);
/* Frees the queue once no sender can be inside it (remote_free, after senders_gone). */
void sendq_free(remote *r);
RT_MUST_USE int sendq_send(remote *r, const uint8_t *bytes, size_t len);
RT_MUST_USE int sendq_send_gather(remote *r, const uint8_t *head, size_t head_len,
                                  const uint8_t *tail, size_t tail_len);
RT_MUST_USE int sendq_send_fd(remote *r, const uint8_t *bytes, size_t len, int fd);
/* Whether ops other than the one being sent are unanswered (takes mu). */
bool remote_others_in_flight(remote *r);

extern const remote_link remote_local_link;
extern const remote_link remote_tcp_link; /* remote_local.c: the same stream over TCP */
extern const remote_link remote_nng_link;

#endif
