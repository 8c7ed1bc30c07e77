/* Internals of the server actor, shared by server/server*.c. Loop thread only, except
 * `gone` (pipe removals, pushed by nng's threads under gone_mu). */
#ifndef SRV_SERVER_PRIV_H
#define SRV_SERVER_PRIV_H

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "actors/session.h"
#include "runtime/attr.h"
#include "server/render.h"
#include "server/server.h"

#define SRV_TOMBSTONES 256           /* recently removed pipes that never had a connection record */
#define SRV_RECV_BATCH 256           /* frames per poll callback before other handles get a turn */
#define SRV_TICK_MS 50               /* drain progress checks */
#define SRV_MAX_LOCAL 16             /* local (Unix socket) listeners */
#define SRV_LOCAL_ID_BIT 0x80000000u /* local connections' ids; nng's pipe ids stay below */
#define SRV_MSG_POOL 256             /* released small messages kept (server_msgs.c) */
#define SRV_BATCH_COPY_MAX 4096u     /* a larger reply (a read's data) travels on its own */
/* A reply's message of at most this room becomes its batch (server_out.c); a frame larger
 * than it, last in an nng message, keeps that message (server_frames.c split_frames). */
#define SRV_BATCH_ADOPT_MAX (2 * SRV_BATCH_COPY_MAX)
#define SRV_MSG_POOL_BYTES 4096u /* the largest kept: 1 MiB at most in all */

typedef struct srv_server srv_server;
typedef struct srv_link srv_link;           /* a local connection's socket (server_local.c) */
typedef struct srv_listener srv_listener;   /* a local listening socket */
typedef struct srv_region srv_region;       /* a client's shared memory (server_shm.c) */
typedef struct srv_transport srv_transport; /* a transport's table (server_transport.h) */

/* One client connection: an nng pipe, or a local socket (tp == &srv_transport_local). Lives
 * while it is open, then until its session has exited and its last op has finished (ops point
 * at it). */
typedef struct srv_conn {
  uint32_t pipe; /* nng's pipe id, or a local id (SRV_LOCAL_ID_BIT set) */
  nng_pipe np;
  const srv_transport *tp;     /* its transport's table: set when the record is made */
  srv_link *link;              /* local connections: the socket; NULL once closed */
  uint32_t peer_uid, peer_gid; /* local: SO_PEERCRED; UINT32_MAX unknown */
  int32_t peer_pid;
  char name[PROTO_NAME_MAX + 1]; /* the client's name from HELLO, printable ASCII */
  uint64_t connected_ms;         /* srv_now_ms() when it connected */
  srv_region *regions;           /* shared memory mapped for this connection */
  uint32_t nregions;
  uint64_t shared_bytes;  /* their sizes */
  struct srv_conn *hnext; /* hash chain, or the list of dead connections */
  accel_ref session;      /* ACCEL_REF_NONE until HELLO, and after the session exited */
  bool session_live;      /* spawned and not exited yet */
  bool dead;              /* the pipe is gone */
  bool refused;           /* not a client of ours (or of another version): frames dropped */
  dev_session_args sargs; /* the session's spawn argument: must outlive the session */
  uint32_t ops;           /* ops (and fault injections) in flight that point here */
  uint32_t jobs;          /* of those, background work no reply waits for (registrations,
                           * fault injections) */
  uint32_t ops_peak;      /* the most ops less jobs and early-answered ones since it last
                           * had none (srv_conn_ops_add) */
  /* Of those, ops whose reply left already (server_ops.c op_early, on another thread): the
   * connection waits for ops - answered_early replies. */
  _Atomic uint32_t answered_early;
  uint32_t early_seen;   /* answered_early as srv_conn_ops_add last read it (light clients) */
  uint64_t read_pending; /* bytes of read replies allocated, op still running */
  uint64_t req_bytes;    /* bytes of request messages held by ops in flight (writes' data) */
  uint64_t out_bytes;    /* bytes of replies queued here, in the transport, or unacknowledged */
  uint32_t unacked_len[PROTO_ACK_WINDOW]; /* PROTO_CAP_ACK: sizes of messages not yet acked */
  /* output (server_out.c) */
  uint32_t caps;        /* PROTO_CAP_* granted at HELLO */
  bool rings;           /* its frames go through shared rings (PROTO_CAP_RINGS) */
  uint32_t sent, acked; /* messages handed to nng / reported received (mod 2^32) */
  nng_msg *batch;       /* replies of this loop iteration, frames back to back */
  nng_msg **outq;       /* messages waiting for the flush or for the ack window */
  uint32_t oq_head, oq_len, oq_cap;
  bool dirty; /* in the server's list of connections to flush */
  struct srv_conn *next_dirty;
} srv_conn;

/* A FIFO of replies that nng could not take yet (its send queue was full). */
typedef struct srv_sendq {
  nng_msg **items;
  uint32_t head, len, cap;
} srv_sendq;

struct srv_server {
  uint32_t refs; /* the actor, each op in flight, each open uv handle */
  bool stopped;  /* the actor ended: the socket is closed, replies are dropped */
  accel_runtime *rt;
  accel_actor *self; /* NULL once stopped */
  dev_world *world;
  const srv_args *args;
  proto_limits limits;
  uint64_t started_ms;
  struct srv_http *http; /* the metrics endpoint, or NULL */

  nng_socket sock;
  bool sock_open;
  srv_listener *locals[SRV_MAX_LOCAL];
  uint32_t nlocals;
  uint32_t next_local_id;
  nng_listener *listeners;
  uint32_t nlisteners;

  uv_poll_t recv_poll, send_poll;
  uv_async_t gone_async;
  uv_timer_t tick;
  uv_prepare_t flush; /* flushes connections' output before the loop polls again */
  bool recv_poll_open, send_poll_open, send_polling, gone_async_open, tick_open, ticking;
  bool flush_open, flushing;

  pthread_mutex_t gone_mu; /* guards gone* (pipe removals from nng's threads) */
  bool gone_mu_init;
  uint32_t *gone;
  uint32_t ngone, gone_cap;

  srv_conn **buckets; /* pipe id -> connection; chained */
  uint32_t nbuckets, nconns;
  srv_conn *dead; /* connections waiting for their session or ops to end */
  uint32_t tombs[SRV_TOMBSTONES];
  uint32_t tomb_next;

  /* server_local.c: bytes of frames over the staging buffer being received on local
   * connections, each charged whole when it starts, against partial_max; connections whose
   * next frame does not fit wait, unread, first come first served (a list through srv_link) */
  uint64_t partial_max, partial_held;
  struct srv_iopool
      *io; /* the local sockets' I/O threads (server/io_pool.h); NULL until listening */
  srv_link *partial_head, *partial_tail;
  bool partial_waking;

  srv_sendq sendq;
  srv_conn *dirty;     /* connections with output to flush */
  uint64_t out_queued; /* messages in connections' queues */

  uint64_t shared_bytes; /* clients' shared memory mapped here (server_shm.c) */
  uint32_t sessions;
  uint64_t ops_in_flight, ops_completed, ops_failed, frames_bad;
  /* Requests answered later, off the loop's op path (an injected fault, a trace's render):
   * a drain waits for them too. */
  uint32_t jobs;
  /* Reply bytes handed to local streams and not written yet (server_local.c): a drain waits
   * for them too, or a large reply would be cut when the links close. */
  uint64_t local_out_bytes;
  _Atomic uint64_t replies_early; /* server_ops.c op_early: counted off the loop */
  /* Connections waiting for the reply to their only op (srv_conn_ops_add): beside them a
   * connection with several ops in flight gets shorter turns (server_local.c). */
  uint32_t light_conns;
  struct srv_op *op_pool; /* finished ops' records, used again (server_ops.c) */
  uint32_t op_pool_len;
  nng_msg *msg_pool[SRV_MSG_POOL]; /* released small messages, used again (server_msgs.c) */
  uint32_t msg_pool_len;

  srv_shards *shards; /* this daemon's shards (server_shards.h): one of its own if alone */
  uint32_t shard;     /* this server's index among them */
  /* Shard 0 draining: the other shards' drains, asked (server_shards.c). */
  accel_future *peer_drains[SRV_SHARDS_MAX];
  bool peer_drain_failed;

  bool draining;
  atomic_bool refusing; /* new pipes are closed as they come (read on nng's threads) */
  accel_future *drain_reply;
  uint64_t drain_deadline_ms;
  uint32_t drain_idle_ticks;
};

/* server.c */
void srv_release(srv_server *s);
/* Tests' failpoints: sleeps the microseconds (at most max_us) the environment variable `var`
 * gives, read once into *cached (-1 until then; any thread). */
void srv_failpoint_sleep(const char *var, _Atomic long *cached, long max_us);
/* The machine's memory in bytes (the default of caps sized by it), 0 if it cannot be read. */
uint64_t srv_ram_bytes(void);
uint64_t srv_now_ms(srv_server *s);
void srv_tick_start(srv_server *s);
void srv_drain_check(srv_server *s);
RT_MUST_USE int srv_session_start(srv_server *s, srv_conn *c);

/* server_conn.c: the connection table */
RT_MUST_USE int srv_conns_init(srv_server *s);
srv_conn *srv_conn_find(srv_server *s, uint32_t pipe);
/* The connection of a frame's pipe, made on its first frame; NULL if the pipe is gone. */
srv_conn *srv_conn_for(srv_server *s, nng_pipe np);
/* A record for connection `id` over transport tp (NULL: out of memory). */
RT_MUST_USE srv_conn *srv_conn_new(srv_server *s, uint32_t id, const srv_transport *tp);
void srv_conn_gone(srv_server *s, uint32_t pipe);
/* The connection closed: its session stops; the record goes when nothing points at it. */
void srv_conn_end(srv_server *s, srv_conn *c);
void srv_conn_session_exited(srv_server *s, accel_ref session);
void srv_conn_maybe_free(srv_server *s, srv_conn *c);
/* Ops the client still waits for: its background jobs and the ops answered early (as
 * srv_conn_ops_add last read them) aside. */
static inline uint32_t srv_conn_own_ops(const srv_conn *c) {
  return c->ops - c->jobs - c->early_seen;
}
/* c->ops grows (+1) or drops (-1) by one (and c->jobs with it for a background `job`),
 * s->light_conns following. */
void srv_conn_ops_add(srv_server *s, srv_conn *c, int delta, bool job);
void srv_conns_free_all(srv_server *s);
/* The server stops: every connection's transport lets go of it (srv_transport.close). */
void srv_conns_close_all(srv_server *s);

/* server_local.c: the local transport (Unix sockets on the loop) */
/* What local connections need of the server, made once (by the first listener, or at the
 * start of a shard that only adopts): the budget of frames being received and the I/O
 * threads, whose events go to this server's loop. */
RT_MUST_USE int srv_local_start(srv_server *s);
RT_MUST_USE int srv_local_listen(srv_server *s, const char *path);
void srv_local_stop_listening(srv_server *s);
/* The entries of srv_transport_local (server_transport.h says what each does). */
void srv_local_send(srv_server *s, srv_conn *c, nng_msg *m);
void srv_local_flow(srv_server *s, srv_conn *c);
int srv_local_take_fd(srv_conn *c);
/* A connection accepted by shard 0 and handed here (server_shards.c): served, or refused
 * with ACCEL_EBUSY when there is no memory for it; fd is taken; *handed drops by one once the
 * connection is counted here (or refused): the daemon's count holds it twice for a moment,
 * never not at all. */
void srv_local_adopt(srv_server *s, int fd, const srv_transport *tp, _Atomic uint32_t *handed);
/* Tells the peer of a new connection fd ACCEL_EBUSY (a REPLY about the connection itself),
 * without waiting; the caller closes fd. */
void srv_local_send_busy(int fd);
/* Connections waiting to receive a large frame get what room there is now (another shard gave
 * some back: a task it posted here). */
void srv_local_partial_wake(srv_server *s);
/* srv_transport.use_rings of local connections. */
bool srv_local_use_rings(srv_server *s, srv_conn *c, int fd);
/* A descriptor acceld may map (a memfd on shmem sealed against shrinking, its seals read
 * before its size): 0 and its size, else ACCEL_EINVAL or ACCEL_EPERM. */
RT_MUST_USE int srv_shm_check_fd(int fd, size_t *len);
struct srv_iost *srv_local_stream(srv_conn *c);
void srv_local_close(srv_server *s, srv_conn *c);
/* A tcp:// listener (url: tcp://, tcp4:// or tcp6://HOST:PORT) whose connections are served
 * as local ones (srv_transport_tcp); refused unless allow_plain_tcp (srv_listen_allowed). */
RT_MUST_USE int srv_tcp_listen(srv_server *s, const char *url);

/* server_tcp.c: what plain tcp:// needs besides */
/* A listening socket bound to url's host and port (non-blocking, close-on-exec) in *fd: 0, or
 * ACCEL_EBUSY (address in use), ACCEL_EINVAL (not HOST:PORT), ACCEL_ESYS; logged. */
RT_MUST_USE int srv_tcp_bind(const char *url, int *fd);
/* An accepted connection's socket options (TCP_NODELAY, keepalive). */
void srv_tcp_accepted(int fd);
/* The peer's address, "HOST:PORT" or "[HOST]:PORT", for the log ("?" if unknown). */
void srv_tcp_peer_name(int fd, char *buf, size_t len);

/* server_shm.c: the shared-memory data plane */
RT_MUST_USE int srv_shm_attach(srv_server *s, srv_conn *c, uint64_t id);
RT_MUST_USE int srv_shm_detach(srv_server *s, srv_conn *c, uint64_t id);
/* The address of `bytes` at ref in the connection's region (held until srv_shm_release). */
RT_MUST_USE int srv_shm_resolve(srv_conn *c, proto_shm_ref ref, uint64_t bytes, uint8_t **p,
                                srv_region **r);
void srv_shm_release(srv_server *s, srv_conn *c, srv_region *r);
void srv_shm_free_all(srv_server *s, srv_conn *c);
/* SRV_MSG_SHM_REGISTERED: a region's registration for DMA finished (data: its job). */
void srv_shm_registered(srv_server *s, void *data);

/* server_clients.c: the client sessions of every shard (the others parked), as text (a
 * table) or a JSON array of objects; malloc'd, NULL when out of memory. */
RT_MUST_USE char *srv_clients_report(srv_server *s, bool json);
/* The per-client series of /metrics (Prometheus text), at most SRV_METRICS_CLIENTS client
 * names and "other". */
#define SRV_METRICS_CLIENTS 32
RT_MUST_USE char *srv_clients_metrics(srv_server *s);
/* server_frames.c: the server's counters, for the reports. */
srv_status_counts srv_counts(srv_server *s);
/* server_http.c: /metrics and /healthz on `url` (srv_http_addr_parse's forms), with the
 * limits of args->metrics; 0 or an accel error (logged); stop is idempotent. */
RT_MUST_USE int srv_http_start(srv_server *s, const char *url);
void srv_http_stop(srv_server *s);
/* server_io.c: nng <-> the loop */
RT_MUST_USE int srv_io_start(srv_server *s);
/* Sets the nng socket's receive size limit for frames of max_message bytes; an nng error. */
RT_MUST_USE int srv_set_recv_limit(srv_server *s, uint32_t max_message);
void srv_io_close(srv_server *s);
/* Hands a reply to nng (taken in every case: queued while nng's queue is full). */
void srv_send(srv_server *s, nng_msg *m);

/* server_out.c: a connection's output (batching, the ack window) */
/* Makes room in the connection's output for a request's reply before it is taken
 * (server_out.c); ACCEL_ENOMEM: answer the request ACCEL_ENOMEM (room for that is kept). */
int srv_out_reserve(srv_server *s, srv_conn *c);
/* Queues a reply (taken) for the connection; it leaves at the end of this loop iteration. */
void srv_conn_send(srv_server *s, srv_conn *c, nng_msg *m);
void srv_conn_ack(srv_server *s, srv_conn *c, uint32_t received);
/* A status-only reply made from nothing (no request message to reuse). */
void srv_conn_status(srv_server *s, srv_conn *c, uint64_t request_id, int status);
/* Hands the connection's queued output to its transport now (not at the end of the loop
 * iteration). */
void srv_conn_flush(srv_server *s, srv_conn *c);
/* The bytes a connection may hold in requests and in replies each: its memory quota if it has
 * one, else 1 GiB; never less than two frames. */
uint64_t srv_conn_budget(const srv_server *s);
void srv_out_flush_all(uv_prepare_t *h);
void srv_out_free(srv_server *s, srv_conn *c);
void srv_out_forget_dirty(srv_server *s);

/* server_frames.c: one received frame (taken) */
void srv_frame(srv_server *s, nng_msg *m);
/* The same, from a connection already known (the local transport). */
void srv_frame_on(srv_server *s, srv_conn *c, nng_msg *m);
/* Turns the request `m` into a reply frame with `status` and no data, and sends it. */
void srv_reply_status(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id, int status);

/* m becomes a successful reply to request_id carrying `len` bytes of data: 0, or an error (m
 * then holds no reply). Any thread: it touches m only. */
RT_MUST_USE int srv_fill_reply(nng_msg *m, uint64_t request_id, const void *data, size_t len);
/* Sends m, filled by srv_fill_reply with status rc, or the status reply of its error. */
void srv_send_filled(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id, int rc);
/* A reply with data (text, JSON): `text` is taken. */
void srv_reply_text(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id, char *text);
/* Background work for a connection that its reply waits for (it holds the connection and the
 * server until srv_job_end, and a drain waits for it). */
void srv_job_begin(srv_server *s, srv_conn *c);
void srv_job_end(srv_server *s, srv_conn *c);

/* server_trace.c: accelctl trace's start (arg: the most events kept, 0 the default) and stop
 * (the reply: the JSON), of every shard's sessions */
void srv_trace_control(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id,
                       uint32_t command, uint64_t arg);

/* server_report.c: the reports, of every shard */
enum { SRV_REPORT_METRICS = 0x10000, SRV_REPORT_HEALTH }; /* beside PROTO_CTL_* commands */
/* A report (PROTO_CTL_STATUS, _DEVICES, _TREE, _CLIENTS with its arg) answered on c: made
 * here on shard 0, else sent there and its text back. */
void srv_report(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id, uint32_t command,
                uint64_t arg);
/* Shard 0 (or the only one): SRV_REPORT_METRICS (the whole /metrics text) or
 * SRV_REPORT_HEALTH ("ok\n" while healthy, else NULL and ACCEL_EAGAIN); NULL and *rc. */
RT_MUST_USE char *srv_report_now(srv_server *s, uint32_t command, int *rc);

/* server_msgs.c: small messages used again (loop thread) */
/* A message holding `len` bytes copied from `bytes`; NULL without memory. */
nng_msg *srv_msg_take(srv_server *s, const void *bytes, size_t len);
/* `m` (taken) is done with: kept for srv_msg_take, or freed. */
void srv_msg_give(srv_server *s, nng_msg *m);
void srv_msg_pool_free(srv_server *s);

/* server_ops.c */
void srv_op_frame(srv_server *s, srv_conn *c, nng_msg *m, uint64_t request_id);
/* Frees the pool of finished ops' records (the server's memory goes). */
void srv_op_pool_free(srv_server *s);

#endif
